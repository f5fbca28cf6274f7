"""Repeated windows on the site: the aggregate's medians over windows and their
intervals, the A/B page's data, and the A/B page in a real browser calling a
difference significant only when both cells' intervals separate."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from rundir import contract
from rundir.io import read_run, read_table, write_table
from site_builder import metrictable
from site_builder.aggregate import aggregate_run
from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium
from tests.support.synthetic_runs import make_measured_run


def with_windows(path: Path, k: int = 3) -> Path:
    """Cut every measured decode cell's window into k back-to-back windows, as
    `bench run --repeats k` records them."""
    rows = []
    for cell in read_table(path, contract.CELLS_FILE).to_pylist():
        start, end = cell["window_start_ns"], cell["window_end_ns"]
        if cell["phase"] != contract.DECODE or start is None:
            continue
        step = (end - start) // k
        for i in range(k):
            rows.append(dict(phase=cell["phase"], context=cell["context"],
                             concurrency=cell["concurrency"], window=i, start_ns=start + i * step,
                             end_ns=end if i == k - 1 else start + (i + 1) * step))
    write_table(path, contract.WINDOWS_FILE, pa.Table.from_pylist(rows, contract.WINDOWS_SCHEMA))
    return path


def run(data: Path, name: str, rate: float, seed: int, k: int = 3) -> Path:
    path = make_measured_run(data / name, run_id=name, contexts=[1024], concurrency=[1, 2],
                             duration_s=3.0, tokens_per_s=rate, seed=seed, prefill_contexts=[],
                             info={"parameters": {"repeats": k, "duration_s": 3.0 / k}}
                             if k > 1 else None)
    return with_windows(path, k) if k > 1 else path


def test_medians_over_windows_and_their_intervals(tmp_path) -> None:
    path = run(tmp_path, "a", 60.0, 1)
    agg = aggregate_run(read_run(path))
    one = aggregate_run(read_run(run(tmp_path, "one", 60.0, 1, k=1)))
    for cell, plain in zip(agg.decode(), one.decode(), strict=True):
        assert cell.windows == 3 and plain.windows == 1 and plain.intervals == {}
        per_window = agg.details[cell.key]["windows"]
        assert len(per_window) == 3
        for name in ("total_tok_s", "per_request_tok_s", "ttft_ms", "tbt_ms"):
            values = [w[name] for w in per_window if w[name] is not None]
            assert getattr(cell, name) == pytest.approx(statistics.median(values))
            lo, hi = cell.intervals[name]
            assert lo <= getattr(cell, name) <= hi
        # the counts and the tails stay over the whole span: as the one-window cell's
        assert cell.output_tokens == plain.output_tokens and cell.tails == plain.tails


def _data_js(site: Path, slug: str) -> dict[str, Any]:
    text = (site / "runs" / slug / "data.js").read_text()
    return json.loads(re.search(r"=\s*(\{.*\})\s*;?\s*$", text, re.S).group(1))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repeats-site")
    data = root / "data"
    run(data, "slow", 60.0, 1)
    run(data, "fast", 95.0, 2)
    run(data, "plain", 60.0, 3, k=1)
    report = build_site(data, root / "site")
    assert report.errors == []
    return root / "site"


def test_compare_data_carries_intervals_only_for_repeated_runs(site: Path) -> None:
    slow, plain = _data_js(site, "slow"), _data_js(site, "plain")
    assert "windows" not in plain["fields"] and "total_tok_s_ci" not in plain["fields"]
    fields = slow["fields"]
    decode = [dict(zip(fields, c, strict=True)) for c in slow["cells"] if c[0] == "decode"]
    assert all(c["windows"] == 3 and len(c["total_tok_s_ci"]) == 2 for c in decode)
    assert all("\u2013" in c["total_tok_s_ci_text"] for c in decode)


@pytest.mark.browser
def test_ab_page_calls_only_separated_intervals_significant(site: Path, browser: Any) -> None:
    require_chromium()
    root = site.resolve().as_uri() + "/"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())

    def cells(hash_: str) -> tuple[list[str], str]:
        page.goto(root + "compare.html" + hash_)
        page.reload()  # a hash-only change of address does not reload the page
        page.locator("#ab-result table.matrix").first.wait_for()
        texts = page.locator("#ab-result table.matrix td").all_inner_texts()
        return texts, page.locator("#ab-result .ab-noise-summary").inner_text()

    texts, line = cells("#a=slow&b=fast&m=total_tok_s")
    assert len(texts) == 2 and all("significant" in t and "95%" in t for t in texts)
    assert page.locator("#ab-result td.ab-significant .delta.better").count() == 2
    assert line.startswith("Of the 2 decode cells") and "2 differ significantly" in line
    texts, line = cells("#a=slow&b=slow&m=total_tok_s")  # the same intervals: they overlap
    assert all("within noise" in t for t in texts)
    assert page.locator("#ab-result td.ab-noise").count() == 2
    assert page.locator("#ab-result .delta.better, #ab-result .delta.worse").count() == 0
    texts, line = cells("#a=slow&b=plain&m=total_tok_s")  # one side has one window: no claim
    assert not any("significant" in t or "noise" in t for t in texts)
    assert "needs a 95% interval on both sides" in line and "--repeats" in line
    assert watcher.problems() == []
    context.close()


def test_run_page_prints_each_interval_under_its_median(tmp_path) -> None:
    """All measurements shows the 95% interval of every compared metric of a
    repeated cell under its median; a one-window run shows none (never invented)."""
    data = tmp_path / "data"
    repeated = aggregate_run(read_run(run(data, "rep", 60.0, 1)))
    run(data, "single", 60.0, 2, k=1)
    build_site(data, tmp_path / "site")
    page = (tmp_path / "site" / "runs" / "rep" / "index.html").read_text(encoding="utf-8")
    spans = re.findall(r'<span class="ci"[^>]*>([^<]+)</span>', page)
    expected = [m.interval_text(x) for x in repeated.decode() for m in metrictable.MEASURED
                if m.interval_text(x)]
    assert spans and spans == expected
    single = (tmp_path / "site" / "runs" / "single" / "index.html").read_text(encoding="utf-8")
    assert 'class="ci"' not in single
