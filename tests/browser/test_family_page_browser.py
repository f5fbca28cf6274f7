"""The bundled site's family page and compare page in a real browser (issue 30,
items 12 and 15): at a desktop's width each chart's run list shows its colour
swatches (a lost `}` in style.css once styled them below 640 px only: grey
names, no colour); a run has one colour in every chart of the page, its swatch
the colour of its marks; a chart with one x value draws bars, not a line; the
latency-limit ranking says an imported run has medians only instead of "no
cell meets the limits"; the compare page colours no change it does not call
significant."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium, wait_for_charts

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parents[2]
FAMILY = "models/kimi-k2.6.html"  # two imported runs, four charts (one with a single x)

# Per live chart: its run list (key, name, swatch colour, swatch box) and every mark
# that names its run (Vega's SVG: lines, points and bars, whose aria-label carries the
# colour channel's "Run: <key>"; a line's colour is its stroke, the others' their fill).
CHARTS_JS = r"""() => Array.from(document.querySelectorAll('figure.chart.is-live')).map((f) => {
  const swatches = Array.from(f.querySelectorAll('.chart-legend button[data-key]')).map((b) => {
    const sw = b.querySelector('.swatch');
    const r = sw.getBoundingClientRect();
    const st = getComputedStyle(sw);
    return {key: b.getAttribute('data-key'), name: b.querySelector('.name').textContent,
            color: st.backgroundColor, width: r.width, height: r.height, display: st.display,
            visibility: st.visibility};
  });
  const marks = Array.from(f.querySelectorAll('.chart-live svg path[aria-label*="Run: "]'))
    .map((m) => {
      const role = m.getAttribute('aria-roledescription');
      const run = m.getAttribute('aria-label').split('; ').find((p) => p.startsWith('Run: '));
      return {role: role, run: run.slice(5),
              color: m.getAttribute(role === 'line mark' ? 'stroke' : 'fill')};
    });
  const lines = f.querySelectorAll('.chart-live svg [aria-roledescription="line mark"]').length;
  return {id: f.id, swatches: swatches, marks: marks, lines: lines};
})"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("bundled-browser")
    report = build_site(REPO / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def _open(browser: Any, site: Path, path: str, width: int = 1440) -> tuple[Any, Any, Watcher]:
    context = browser.new_context(viewport={"width": width, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    file, _, frag = path.partition("#")
    page.goto((site / file).resolve().as_uri() + (f"#{frag}" if frag else ""))
    return context, page, watcher


def _rgb(css: str) -> tuple[int, ...]:
    m = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", css)
    assert m and (m[4] is None or float(m[4]) > 0.9), css  # opaque
    return tuple(int(m[k]) for k in (1, 2, 3))


def _hex(rgb: tuple[int, ...]) -> str:
    return "#" + "".join(f"{v:02x}" for v in rgb)


def _charts(browser: Any, site: Path) -> list[dict[str, Any]]:
    context, page, watcher = _open(browser, site, FAMILY)
    try:
        assert wait_for_charts(page, timeout_ms=60_000) == 4
        page.wait_for_function("() => document.querySelectorAll('.chart-legend').length === 4")
        drawn = page.evaluate(CHARTS_JS)
    finally:
        context.close()
    assert watcher.problems() == []
    return drawn


def test_run_list_swatches_show_their_colour_at_desktop_width(browser: Any, site: Path) -> None:
    """At 1440 px every swatch under every chart is a visible box of a colour, not grey."""
    drawn = _charts(browser, site)
    for chart in drawn:
        assert len(chart["swatches"]) == 2, chart["id"]
        for sw in chart["swatches"]:
            assert sw["display"] != "none" and sw["visibility"] == "visible", sw
            assert sw["width"] >= 8 and sw["height"] >= 5, (chart["id"], sw)  # its box
            r, g, b = _rgb(sw["color"])
            assert max(r, g, b) - min(r, g, b) > 60, (chart["id"], sw)  # a hue, not grey


def test_a_run_has_one_colour_in_every_chart_of_the_page(browser: Any, site: Path) -> None:
    """The same run is the same colour in all four charts, its swatch the colour of
    its plotted marks (lines, points and bars), and two runs never share one."""
    drawn = _charts(browser, site)
    colours: dict[str, set[str]] = {}
    for chart in drawn:
        swatch = {sw["key"]: _hex(_rgb(sw["color"])) for sw in chart["swatches"]}
        assert chart["marks"], chart["id"]
        for mark in chart["marks"]:
            assert mark["color"].lower() == swatch[mark["run"]], (chart["id"], mark, swatch)
        for name, colour in swatch.items():
            colours.setdefault(name, set()).add(colour)
    assert len(colours) == 2 and all(len(c) == 1 for c in colours.values()), colours
    assert len({c for cs in colours.values() for c in cs}) == 2


def test_a_chart_with_one_x_value_draws_a_bar_per_run(browser: Any, site: Path) -> None:
    """At 251K both runs have numbers at 1 request only: a bar each, no line."""
    drawn = {c["id"]: c for c in _charts(browser, site)}
    single = drawn["chart-decode-257024"]
    assert single["lines"] == 0
    assert sorted(m["role"] for m in single["marks"]) == ["bar", "bar"]
    assert drawn["chart-decode-8192"]["lines"] == 2  # several levels: lines


def _slo_rows(page: Any) -> list[str]:
    return page.locator("#slo-rank-table tbody tr td:nth-child(2)").all_inner_texts()


def test_latency_ranking_says_an_imported_run_has_medians_only(browser: Any, site: Path) -> None:
    """Both runs are imported (published medians): at p90 or p99 neither is "no cell
    meets the limits", each says it has no such percentile and what ranks it; at
    p50 each is ranked at a cell."""
    context, page, watcher = _open(browser, site, FAMILY)
    try:
        static = _slo_rows(page)
        assert static == ["no p90 published (medians only): set the limits at p50 to rank it"] * 2
        page.goto(page.url.split("#")[0] + "#slo=ttft_p99%3D2000%2Ctbt_p99%3D50")
        page.reload()
        page.wait_for_function("() => document.getElementById('slo-rank-limits')"
                               ".textContent.includes('p99')")
        assert _slo_rows(page) == [
            "no p99 published (medians only): set the limits at p50 to rank it"] * 2
        page.goto(page.url.split("#")[0] + "#slo=ttft_p50%3D100000%2Ctbt_p50%3D1000")
        page.reload()
        page.wait_for_function("() => document.getElementById('slo-rank-limits')"
                               ".textContent.includes('p50')")
        rows = _slo_rows(page)
        assert len(rows) == 2 and all(re.fullmatch(r"\d+K × \d+", r) for r in rows), rows
    finally:
        context.close()
    assert watcher.problems() == []


def test_compare_colours_no_change_it_does_not_call_significant(browser: Any,
                                                                  site: Path) -> None:
    """The two Kimi runs have one window a cell: no difference is called significant,
    so no change (nor the summary's median) is green or red, though they differ."""
    context, page, watcher = _open(browser, site, "compare.html")
    try:
        page.locator("#ab-result table.matrix").first.wait_for()
        deltas = page.locator("#ab-result .delta").all_inner_texts()
        line = page.locator("#ab-result .ab-noise-summary").inner_text()
        coloured = page.locator("#ab-result .better, #ab-result .worse").count()
    finally:
        context.close()
    assert any(re.fullmatch(r"[+−]\d[\d,]*\.\d%", d) and not d.startswith("0") for d in deltas)
    assert line.startswith("No difference is called significant")
    assert coloured == 0
    assert watcher.problems() == []
