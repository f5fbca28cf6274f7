"""Speculative decoding on the site (issue 35): a run collected from the reference
server's draft model shows its acceptance on the run page and in cells.json /
cells.csv; a run without drafts has none of it (its files as before)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from rundir.io import read_run
from site_builder.aggregate import RunAggregate, aggregate_run
from site_builder.load import RunSource, load_run
from site_builder.publish import build_site
from site_builder.spec import DOWNLOAD_COLUMNS, spec_cells
from tests.conftest import run_cli
from tests.refserver.harness import start_refserver
from tests.refserver.scenario import Scenario
from tests.support.synthetic_runs import make_measured_run

FAST = ["--contexts", "128", "--concurrency", "2", "--no-prefill", "--duration", "1",
        "--warmup-stable", "0.2", "--server-wait", "3", "--max-output", "49"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("spec")
    srv = start_refserver(Scenario(tokens_per_s=300, ttft_ms=1, spec_draft_tokens=3,
                                   spec_accept=[2, 1, 3], spec_counters_lie=0.5), root / "srv")
    try:
        res = run_cli("bench", "run", "--base-url", srv.base_url, "--out",
                      str(root / "data" / "spec"), *FAST)
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        srv.stop()
    make_measured_run(root / "data" / "plain", run_id="plain", contexts=[1024], concurrency=[1, 2])
    report = build_site(root / "data", root / "out", jobs=1)
    assert report.errors == []
    return root / "data" / "spec", root / "out"


def _run_dir(out: Path, run_id: str) -> Path:
    (d,) = [p for p in (out / "runs").iterdir() if (p / "cells.json").exists()
            and json.loads((p / "cells.json").read_text())["run"]["run_id"] == run_id]
    return d


def test_cells_json_and_csv_carry_the_acceptance(built) -> None:
    src, out = built
    run = read_run(src)
    (cell,) = spec_cells(run.cells, run.requests, run.info.engine.name)
    d = _run_dir(out, run.info.run_id)
    (row,) = [r for r in json.loads((d / "cells.json").read_text())["cells"] if r["phase"] == "decode"]
    assert row["spec_tokens_per_step"] == cell.client == pytest.approx(3.0, rel=0.05)
    assert row["spec_tokens_per_step_server"] == cell.server
    assert row["spec_source"] == "vllm:spec_decode counters"
    assert row["spec_note"].startswith("acceptance disagrees")  # the counters claim half
    with open(d / "cells.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[-len(DOWNLOAD_COLUMNS):] == DOWNLOAD_COLUMNS
    agg = aggregate_run(load_run(RunSource(src, "d")), "d")
    assert RunAggregate.from_json(agg.head().to_json()).spec == agg.spec  # the cache keeps them


def test_the_run_page_shows_it_and_a_plain_run_does_not(built) -> None:
    src, out = built
    run_id = read_run(src).info.run_id
    html = (_run_dir(out, run_id) / "index.html").read_text()
    m = re.search(r'<section id="speculative-decoding".*?</section>', html, re.S)
    assert m
    text = " ".join(re.sub(r"<[^>]+>", " ", m.group(0)).split())
    assert "Tokens per step (client)" in text and "≠" in text and "acceptance disagrees" in text
    plain = _run_dir(out, "plain")
    assert "speculative-decoding" not in (plain / "index.html").read_text()
    rows = json.loads((plain / "cells.json").read_text())["cells"]
    assert not any(k.startswith("spec_") for r in rows for k in r)
