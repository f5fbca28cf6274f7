"""A series page of a 300-run site in a real browser, at a phone's and a desktop's
width: its chart draws with a plot of useful height (the legend below adds to the
figure, never squeezes the plot) and its table lists the runs in the series' order:
by engine version where versions differ (an older version re-measured later comes
before the newer one), then by date."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from site_builder.publish import build_site
from site_builder.setups import version_key
from tests.support.chromium import Watcher, require_chromium, wait_for_charts
from tests.support.many_runs import make_many_runs

pytestmark = pytest.mark.browser
WIDTHS = (390, 1440)
MIN_PLOT_PX = 200.0

# The plot's height: the root view's background rectangle in Vega's SVG (its width ×
# height is the plot area, axes and legend outside it).
PLOT_JS = r"""() => Array.from(document.querySelectorAll('figure.chart.is-live')).map((f) => {
  const bg = f.querySelector('g.mark-group.role-frame.root > g > path.background');
  return bg ? bg.getBoundingClientRect().height : 0;
})"""
ROWS_JS = r"""() => Array.from(document.querySelectorAll('table.series-table tbody tr'))
  .map((tr) => [tr.children[1].textContent.trim(), tr.children[2].textContent.trim()])"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("series-site")
    make_many_runs(root / "data", 300, seed=3)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def _longest_series(site: Path) -> Path:
    pages = [p for p in (site / "series").glob("*.html") if p.name != "index.html"]
    assert pages, "a 300-run site has series"
    return max(pages, key=lambda p: p.read_text("utf-8").count('<th scope="row" class="name">'))


@pytest.mark.parametrize("width", WIDTHS)
def test_series_chart_keeps_its_plot_and_table_is_in_order(browser: Any, site: Path,
                                                           width: int) -> None:
    page_path = _longest_series(site)
    html = page_path.read_text("utf-8")
    n = html.count('<th scope="row" class="name">')
    assert n >= 3
    context = browser.new_context(viewport={"width": width, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    try:
        page.goto(page_path.resolve().as_uri())
        assert wait_for_charts(page) == 1
        heights = page.evaluate(PLOT_JS)
        rows = page.evaluate(ROWS_JS)
    finally:
        context.close()
    assert heights and min(heights) >= MIN_PLOT_PX, heights
    assert len(rows) == n
    order = [(version_key(v), _day(d)) for v, d in rows]
    assert all(k is not None for k, _ in order) and len({k for k, _ in order}) > 1
    assert order == sorted(order), rows  # by version, then date
    assert watcher.problems() == []


MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def _day(text: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"(\w{3}) (\d+), (\d{4})", text)
    assert m, text
    return int(m[3]), MONTHS.index(m[1]) + 1, int(m[2])
