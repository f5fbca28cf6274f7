"""The percentile selector in a real browser (Debian's Chromium), served over http:
choosing a level swaps All measurements' latency columns, the matrix and the charts
to that level's build-time texts, keeps the choice in the address (other keys
kept) and across a reload, leaves "—" cells "—", tells other scripts with its
sm-tail event, and logs no console error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rundir import tails
from rundir.io import read_run
from site_builder import chartkit, formats
from site_builder.aggregate import CellResult, aggregate_run
from site_builder.publish import build_site
from site_builder.serve import serve_in_thread
from tests.site.test_tail_selector import make_tail_data
from tests.support.chromium import Watcher, require_chromium, wait_for_charts

pytestmark = pytest.mark.browser
RUN = "runs/tails-run/index.html"

# The TTFT column of All measurements: header and cell texts, row by row.
TTFT_COLUMN_JS = """() => {
  const table = document.querySelector('table.measurements');
  const heads = Array.from(table.tHead.rows[0].cells).map(th => th.textContent.trim());
  const i = heads.indexOf('TTFT') >= 0 ? heads.indexOf('TTFT')
          : heads.findIndex(h => h.startsWith('TTFT '));
  return {header: heads[i],
          cells: Array.from(table.tBodies[0].rows).map(tr => [
            tr.cells[0].textContent, tr.cells[1].textContent, tr.cells[2].textContent,
            tr.cells[i].textContent])};
}"""
LEVEL_OF_CHARTS_JS = """() => Array.from(document.querySelectorAll('figure.chart'))
  .map(f => f.classList.contains('is-live') ? f.getAttribute('data-level') : null)"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, CellResult]]:
    require_chromium()
    root = tmp_path_factory.mktemp("tails-browser")
    data = make_tail_data(root / "data")
    report = build_site(data, root / "site")
    assert report.errors == []
    cells = {x.key: x for x in aggregate_run(read_run(data / "tails-run")).cells}
    return root / "site", cells


@pytest.fixture(scope="module")
def http_root(built: tuple[Path, dict[str, CellResult]]) -> Iterator[str]:
    server, url = serve_in_thread(built[0])
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture
def session(browser: Any, http_root: str) -> Iterator[tuple[Any, Watcher]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(http_root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    yield page, watcher
    context.close()


def _expected_ttft(cells: dict[str, CellResult], level: str) -> list[list[str]]:
    """The TTFT column at a level, from the aggregate's tail columns ("—": too few)."""
    out = []
    for x in sorted(cells.values(), key=lambda c: (c.phase != "prefill", c.context, c.concurrency)):
        value = x.ttft_ms if level == tails.DEFAULT_LEVEL else x.tails.get(tails.TTFT.column(level))
        phase = "Prefill" if x.phase == "prefill" else "Sustained decode"
        out.append([phase, f"{x.context // 1024}K", str(x.concurrency), formats.ttft(value)])
    return out


def _wait_charts_at(page: Any, level: str) -> None:
    page.wait_for_function(f"() => ({LEVEL_OF_CHARTS_JS})().every(l => l === {json.dumps(level)})",
                           timeout=15_000)


def _choose(page: Any, level: str) -> None:
    page.select_option("#tail-level", level)


def test_choosing_p99_switches_the_ttft_column_and_survives_a_reload(
        session: tuple[Any, Watcher], cells: dict[str, CellResult]) -> None:
    page, watcher = session
    page.goto(watcher.site_root + RUN, wait_until="load")
    wait_for_charts(page)
    assert page.is_visible("#tail-select")
    median = page.evaluate(TTFT_COLUMN_JS)
    assert median == {"header": "TTFT", "cells": _expected_ttft(cells, "p50")}

    _choose(page, "p99")
    at_p99 = page.evaluate(TTFT_COLUMN_JS)
    assert at_p99 == {"header": "TTFT p99", "cells": _expected_ttft(cells, "p99")}
    texts = [row[3] for row in at_p99["cells"]]
    assert formats.MISSING in texts and any(t != formats.MISSING for t in texts)
    assert page.evaluate("() => location.hash") == "#pct=p99"
    _wait_charts_at(page, "p99")
    tradeoff = page.inner_text("#chart-tradeoff .chart-live")
    assert "Per request tok/s p1" in tradeoff  # the x axis says the slow-side rank
    # the one point with a p1 (1K × 8) sits at it, its tooltip fields at p99
    big = cells["decode-1024-8"]
    labels = page.eval_on_selector_all("#chart-tradeoff .chart-live svg [aria-label]",
                                       "els => els.map(e => e.getAttribute('aria-label'))")
    point = next(t for t in labels if "Requests at once: 8" in t and "Context: 1K" in t)
    fields = dict(part.split(": ", 1) for part in point.split("; "))
    assert float(fields["Per request tok/s p1"]) == pytest.approx(big.tails["per_request_tok_s_p1"])
    assert fields["TTFT p99"] == formats.ttft(big.tails["ttft_ms_p99"])

    page.reload(wait_until="load")
    wait_for_charts(page)
    _wait_charts_at(page, "p99")
    assert page.input_value("#tail-level") == "p99"
    assert page.evaluate(TTFT_COLUMN_JS) == at_p99
    assert watcher.problems() == []


def test_missing_stays_missing_and_the_matrix_follows(
        session: tuple[Any, Watcher], cells: dict[str, CellResult]) -> None:
    page, watcher = session
    page.goto(watcher.site_root + RUN + "#pct=p90", wait_until="load")
    wait_for_charts(page)
    assert page.evaluate(TTFT_COLUMN_JS)["cells"] == _expected_ttft(cells, "p90")
    matrix = page.eval_on_selector_all("table.matrix span.ttft", "els => els.map(e => e.textContent)")
    want = [f"{formats.ttft(cells[k].tails.get('ttft_ms_p90'))} TTFT p90"
            for k in ("decode-1024-1", "decode-1024-8", "decode-2048-1")]
    assert matrix == want
    prefill_row = page.evaluate(TTFT_COLUMN_JS)["cells"][0]
    assert prefill_row[0] == "Prefill" and prefill_row[3] == formats.MISSING  # one sample
    _choose(page, "p99.9")  # no cell has 1,000 requests: every latency reads "—"
    column = page.evaluate(TTFT_COLUMN_JS)
    assert column["header"] == "TTFT p99.9"
    assert {row[3] for row in column["cells"]} == {formats.MISSING}
    _wait_charts_at(page, "p99.9")  # the tradeoff has no x left: it says so, draws no axes
    assert page.inner_text("#chart-tradeoff .chart-live") == chartkit.NO_POINT_AT_LEVEL
    assert page.locator("#chart-decode .chart-live svg").count() == 1  # its y is total tok/s
    _choose(page, "p90")  # and back: drawn again
    _wait_charts_at(page, "p90")
    assert page.locator("#chart-tradeoff .chart-live svg").count() == 1
    assert page.locator("#chart-tradeoff .chart-empty").count() == 0
    assert watcher.problems() == []


def test_other_hash_keys_are_kept_and_the_median_clears_the_key(
        session: tuple[Any, Watcher]) -> None:
    page, watcher = session
    page.goto(watcher.site_root + RUN + "#slo=ttft_p99%3D2000", wait_until="load")
    wait_for_charts(page)
    page.evaluate("""() => { window.__tail = [];
      document.addEventListener('sm-tail', e => window.__tail.push(e.detail.level)); }""")
    _choose(page, "p95")
    assert page.evaluate("() => location.hash") == "#slo=ttft_p99%3D2000&pct=p95"
    _choose(page, "p50")
    assert page.evaluate("() => location.hash") == "#slo=ttft_p99%3D2000"
    assert page.evaluate(TTFT_COLUMN_JS)["header"] == "TTFT"
    page.evaluate("() => { location.hash = 'pct=p90'; }")  # an edited address
    page.wait_for_function("() => document.querySelector('#tail-level').value === 'p90'")
    assert page.evaluate("() => window.__tail") == ["p95", "p50", "p90"]
    _wait_charts_at(page, "p90")
    assert watcher.problems() == []


def test_family_page_switches_its_charts_and_matrices(session: tuple[Any, Watcher],
                                                      built: tuple[Path, Any]) -> None:
    page, watcher = session
    rel = next(p.relative_to(built[0]).as_posix() for p in (built[0] / "models").glob("*.html"))
    page.goto(watcher.site_root + rel, wait_until="load")
    wait_for_charts(page)
    _choose(page, "p99")
    _wait_charts_at(page, "p99")
    imported = page.eval_on_selector_all(
        "section.mini-matrix", """els => els.filter(s => s.querySelector('h3').textContent
          .includes('H200')).map(s => Array.from(s.querySelectorAll('span.ttft'))
          .map(e => e.textContent))""")
    assert imported == [[f"{formats.MISSING} TTFT p99"] * 2]  # no raw data: never its median
    sub = page.eval_on_selector_all("p.sub", "els => els.map(e => e.textContent)")
    assert any(t.startswith("total tok/s with p99 TTFT") for t in sub)
    assert watcher.problems() == []


def test_without_javascript_the_selector_is_not_shown(browser: Any, http_root: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(http_root + RUN + "#pct=p99", wait_until="load")
    assert not page.is_visible("#tail-select")
    assert page.inner_text("table.measurements thead").count("TTFT p99") == 0
    context.close()


@pytest.fixture(scope="module")
def cells(built: tuple[Path, dict[str, CellResult]]) -> dict[str, CellResult]:
    return built[1]
