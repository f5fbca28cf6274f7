"""The compare page's speculative-decoding table in a real browser (issue 35): the same
reference server with and without a draft model, side by side: the drafting run's
tokens per step (client and server, as its run page prints them), dashes for the run
without drafts, and each run's per-request tok/s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rundir.io import read_run
from site_builder.publish import build_site
from site_builder.spec import spec_cells, steps
from tests.conftest import run_cli
from tests.refserver.harness import start_refserver
from tests.refserver.scenario import Scenario
from tests.support.chromium import Watcher, require_chromium

pytestmark = pytest.mark.browser

FAST = ["--contexts", "128", "--concurrency", "2", "--no-prefill", "--duration", "1",
        "--warmup-stable", "0.2", "--server-wait", "3", "--max-output", "49"]
ROWS_JS = r"""(sel) => Array.from(document.querySelectorAll(sel + ' tbody tr')).map((tr) =>
  Array.from(tr.children).map((c) => c.innerText.replace(/\s+/g, ' ').trim()))"""


def _collect(root: Path, name: str, **scenario: Any) -> Path:
    srv = start_refserver(Scenario(tokens_per_s=300, ttft_ms=1, **scenario), root / f"srv-{name}")
    try:
        res = run_cli("bench", "run", "--base-url", srv.base_url, "--out",
                      str(root / "data" / name), *FAST)
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        srv.stop()
    return root / "data" / name


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    require_chromium()
    root = tmp_path_factory.mktemp("spec-browser")
    drafted = _collect(root, "drafts", spec_draft_tokens=3, spec_accept=[2, 3])
    _collect(root, "plain")
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return drafted, root / "site"


def _slug(out: Path, run_id: str) -> str:
    (d,) = [p for p in (out / "runs").iterdir() if (p / "cells.json").exists()
            and json.loads((p / "cells.json").read_text())["run"]["run_id"] == run_id]
    return d.name


def test_acceptance_side_by_side(browser: Any, site: tuple[Path, Path]) -> None:
    drafted, out = site
    run = read_run(drafted)
    plain = read_run(drafted.parent / "plain")
    (cell,) = spec_cells(run.cells, run.requests, run.info.engine.name)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(out.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    pair = f"#a={_slug(out, run.info.run_id)}&b={_slug(out, plain.info.run_id)}"
    page.goto((out / "compare.html").resolve().as_uri() + pair)
    page.locator("#ab-speculative-decoding table tbody tr").first.wait_for()
    (row,) = page.evaluate(ROWS_JS, "#ab-speculative-decoding")
    assert row[:4] == ["128", "2", f"A {steps(cell.client)} B —", f"A {steps(cell.server)} B —"]
    assert row[4].startswith("A ") and " B " in row[4] and "—" not in row[4]
    assert watcher.problems() == []
    context.close()
