"""The index of a 300-run site in a real browser, at a phone's and a desktop's width
(issue 21): its table fits a desktop without sideways scroll, a phone shows each
run's peak on screen, sorting and filtering cover all 300 runs (not just the first
page), a filter survives a reload (it lives in the address), and without
JavaScript the static page 2 is one link away."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rundir import contract
from site_builder import indexpages
from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium
from tests.support.many_runs import make_many_runs
from tests.support.synthetic_runs import make_imported_run

pytestmark = pytest.mark.browser
N = 300
LONG = "0.11.1rc2.dev1234+g0123456789abcdef.d20261201.cu128.torch2.9"

# The table's box: its width and the table's; the viewport's and the document's.
WIDTHS_JS = r"""() => {
  const box = document.querySelector('#runs-table').closest('.table-scroll');
  return {box: box.clientWidth, table: document.querySelector('#runs-table').scrollWidth,
          scroll: box.scrollWidth, vw: document.documentElement.clientWidth,
          doc: document.documentElement.scrollWidth};
}"""
# Each visible row's peak cell: its box, and whether its text is on screen horizontally.
PEAKS_JS = r"""() => Array.from(document.querySelectorAll('#runs-table tbody tr'))
  .filter((tr) => !tr.hidden).map((tr) => {
    const r = tr.children[8].getBoundingClientRect();
    return {left: r.left, right: r.right, width: r.width, text: tr.children[8].textContent.trim()};
  })"""
PEAK_VALUES_JS = r"""() => Array.from(document.querySelectorAll('#runs-table tbody tr'))
  .map((tr) => tr.children[8].getAttribute('data-value'))"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("index-scale")
    make_many_runs(root / "data", N - 1, seed=3)
    # The review's case: one long engine-version string used to widen the whole table.
    make_imported_run(root / "data" / "long-version", run_id="long-version", cells=[
        {"phase": contract.DECODE, "context": 8192, "concurrency": 1, "total_tok_s": 55.0,
         "per_request_tok_s": 55.0, "ttft_ms": 90.0, "tbt_ms": 18.0}],
        info={"measured_at": "2026-12-01T10:00:00Z", "model": {"name": "Qwen3.5-4B"},
              "engine": {"name": "vllm", "version": LONG}})
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def _open(browser: Any, site: Path, width: int, rel: str = "index.html", *,
          js: bool = True) -> tuple[Any, Any, Watcher]:
    context = browser.new_context(viewport={"width": width, "height": 900}, java_script_enabled=js)
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto((site / rel).resolve().as_uri())
    return context, page, watcher


def _peak_max(site: Path) -> float:
    """The highest peak of all runs, from index.json (the published figures)."""
    runs = json.loads((site / "index.json").read_text("utf-8"))["runs"]
    assert len(runs) == N
    return max(r["peak_total_tok_s"] for r in runs if r["peak_total_tok_s"] is not None)


def test_desktop_shows_every_headline_column_without_sideways_scroll(browser: Any,
                                                                     site: Path) -> None:
    context, page, watcher = _open(browser, site, 1440)
    try:
        w = page.evaluate(WIDTHS_JS)
        assert w["scroll"] <= w["box"] + 1, f"the runs table overflows its box: {w}"
        assert w["doc"] <= w["vw"], w
        # A long engine version is cut with an ellipsis, its full text on hover.
        long = page.locator(f"#runs-table td.clip[title='{LONG}']")
        assert long.count() == 1
        clip = long.locator("span.clip")
        cut = clip.evaluate("e => [e.scrollWidth, e.clientWidth, getComputedStyle(e).textOverflow]")
        assert cut[0] > cut[1] and cut[2] == "ellipsis", cut
        assert watcher.problems() == []
    finally:
        context.close()


def test_phone_shows_each_runs_peak_on_screen(browser: Any, site: Path) -> None:
    for js in (True, False):
        context, page, watcher = _open(browser, site, 390, js=js)
        try:
            w = page.evaluate(WIDTHS_JS)
            assert w["doc"] <= w["vw"], w
            peaks = page.evaluate(PEAKS_JS)
            assert len(peaks) == indexpages.PAGE_SIZE
            for p in peaks:
                assert p["text"] and 0 <= p["left"] and p["right"] <= w["vw"] and p["width"] > 0, p
            assert watcher.problems() == []
        finally:
            context.close()


def test_sorting_orders_all_runs_not_just_the_first_page(browser: Any, site: Path) -> None:
    context, page, watcher = _open(browser, site, 1440)
    try:
        top = _peak_max(site)
        static = [float(v) for v in page.evaluate(PEAK_VALUES_JS)]
        assert top not in static, "the fixture's fastest run is not on the newest-first page 1"
        page.locator("#runs-table th[data-key=peak] button").click()
        page.wait_for_function("() => document.querySelector('#run-count').textContent"
                               f" === '{N} of {N} runs'")
        values = [float(v) for v in page.evaluate(PEAK_VALUES_JS)]
        assert len(values) == indexpages.PAGE_SIZE
        assert values == sorted(values, reverse=True)
        assert values[0] == top, "the fastest of all 300 runs comes first, not page 1's"
        assert "sort=peak" in page.url and "dir=desc" in page.url
        # Page 2 of the sorted view continues where page 1 stopped.
        page.locator("#runs-pages a", has_text="2").first.click()
        page.wait_for_function("() => document.querySelector('#runs-range').textContent"
                               ".startsWith('Runs 51–100')")
        more = [float(v) for v in page.evaluate(PEAK_VALUES_JS)]
        assert more == sorted(more, reverse=True) and more[0] <= values[-1]
        assert watcher.problems() == []
    finally:
        context.close()


def test_a_filter_narrows_all_runs_and_survives_a_reload(browser: Any, site: Path) -> None:
    runs = json.loads((site / "index.json").read_text("utf-8"))["runs"]
    want = sum(1 for r in runs if r["engine"] == "sglang")
    assert 0 < want < N
    context, page, watcher = _open(browser, site, 1440)
    try:
        page.select_option("#run-filters select[name=engine]", "sglang")
        count = f"{want} of {N} runs"
        page.wait_for_function(f"() => document.querySelector('#run-count').textContent === '{count}'")
        assert "engine=sglang" in page.url
        engines = page.evaluate("() => Array.from(document.querySelectorAll('#runs-table tbody tr'))"
                                ".map(tr => tr.getAttribute('data-engine'))")
        assert set(engines) == {"sglang"} and len(engines) == min(want, indexpages.PAGE_SIZE)
        page.reload()
        page.wait_for_function(f"() => document.querySelector('#run-count').textContent === '{count}'")
        assert page.locator("#run-filters select[name=engine]").input_value() == "sglang"
        assert watcher.problems() == []
    finally:
        context.close()


def _rows_file(site: Path) -> dict[str, Any]:
    text = (site / indexpages.ROWS_FILE).read_text("utf-8")
    return json.loads(text.split(" = ", 1)[1].rstrip().rstrip(";"))


def test_regression_badge_shows_in_rows_the_script_draws(browser: Any, site: Path) -> None:
    data = _rows_file(site)
    f = data["fields"]
    flagged = [dict(zip(f, row, strict=True)) for row in data["rows"]
               if row[f.index("regression")]]
    assert flagged, "a 300-run site of series has a regression"
    slug = flagged[-1]["page"].split("/")[1]
    context, page, watcher = _open(browser, site, 1440)
    try:
        page.fill("#run-filters input[name=q]", slug)
        page.wait_for_function("() => document.querySelector('#run-count').textContent"
                               f".endsWith(' of {N} runs') && document.querySelectorAll("
                               "'#runs-table tbody tr').length <= 3")
        row = page.locator(f"#runs-table tbody tr:has(a[href$='runs/{slug}/index.html'])")
        text, title, classes = flagged[-1]["regression"]  # [text, title, classes]
        badge = row.locator("a.badge")
        assert badge.count() == 1
        assert badge.get_attribute("title") == title and badge.text_content() == text
        assert badge.get_attribute("class") == classes
        assert badge.get_attribute("href") == flagged[-1]["series_page"]
        assert watcher.problems() == []
    finally:
        context.close()


def test_without_javascript_page_two_is_reachable(browser: Any, site: Path) -> None:
    context, page, watcher = _open(browser, site, 1440, js=False)
    try:
        nav = page.locator("nav[aria-label='Pages of runs']")
        assert nav.count() == 1
        nav.locator("a[rel=next]").click()
        page.wait_for_load_state()
        assert page.url.endswith("/index-2.html")
        rows = page.locator("#runs-table tbody tr")
        assert rows.count() == indexpages.PAGE_SIZE
        assert page.locator("#runs-range").text_content().startswith("Runs 51–100 of 300")
        assert watcher.problems() == []
    finally:
        context.close()
