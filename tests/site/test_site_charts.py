"""Charts tell no more than the data: lines break at cells without numbers,
queued points look different, missing heatmap cells are told apart, colours
stay distinct and readable, and chart text is at least 10 px, live (in
Chromium at 390 and 1440 px) and in the no-JS fallback.

The pure checks render the live spec with vl-convert (the same Vega-Lite the
site bundles) and read the fallback SVG the builder draws.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import altair as alt
import pytest
import vl_convert as vlc

from rundir import contract
from rundir.words import status_label
from site_builder import chartkit, charts, drillcharts, fallback
from site_builder.aggregate import CellResult

LEVELS = (1, 2, 4, 8, 16)


def _cell(context: int, n: int, status: str = contract.VALID, phase: str = contract.DECODE) -> CellResult:
    """A cell with numbers whatever its status (an imported Looped or Over capacity row
    keeps its published ones): the chart must still not plot them."""
    return CellResult(phase, context, n, status, total_tok_s=40.0 * n * (1 + context / 8192),
                      per_request_tok_s=60.0 - n, ttft_ms=120.0)


def _matrix(statuses: dict[tuple[int, int], str], contexts: tuple[int, ...] = (1024, 4096),
            ) -> list[CellResult]:
    return [_cell(x, n, statuses.get((x, n), contract.VALID)) for x in contexts for n in LEVELS]


def _svg(chart: charts.Chart) -> str:
    """The live spec rendered by vl-convert (the site's Vega-Lite version)."""
    return vlc.vegalite_to_svg(chart.spec, vl_version=chartkit.VL_VERSION, allowed_base_urls=[])


def _live_lines(svg: str) -> dict[str, str]:
    """Path data of each line mark in a vl-convert SVG, by stroke colour."""
    return {m.group(2): m.group(1) for m in re.finditer(
        r'<path[^>]*aria-roledescription="line mark" d="([^"]+)" stroke="([^"]+)"', svg)}


def _fallback_lines(svg: str) -> dict[str, str]:
    """Path data of each line in a fallback SVG, by stroke colour."""
    return {m.group(2): m.group(1) for m in re.finditer(
        r'<path d="([^"]+)" stroke="([^"]+)" stroke-width="[\d.]+" fill="none"', svg)}


def _moves(d: str) -> int:
    """Sub-paths of a path that draw something (a lone "M x,y Z" draws nothing)."""
    return len([p for p in re.split(r"(?=M)", d) if "L" in p or "H" in p])


def _fill(chart: charts.Chart) -> charts.Chart:
    return charts.SvgRenderer().fill([chart])[0]


# --------------------------------------------------------------------------
# 1. lines break where a cell has no numbers
# --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [contract.LOOPED, contract.ERROR, contract.OVER_CAPACITY,
                                    contract.PENDING])
def test_a_missing_cell_breaks_its_line_live_and_in_the_fallback(status: str) -> None:
    cells = _matrix({(1024, 4): status})
    for build in (charts.decode_chart, charts.tradeoff_chart):
        chart = _fill(build(cells))
        one_k, four_k = chartkit.LINE_COLORS[0], chartkit.LINE_COLORS[1]
        live = _live_lines(_svg(chart))
        assert _moves(live[one_k]) == 2, (build.__name__, live[one_k])  # 1-2 and 8-16
        assert _moves(live[four_k]) == 1
        drawn = _fallback_lines(chart.svg)
        assert drawn[one_k].count("M") == 2 and drawn[four_k].count("M") == 1, drawn
        # the missing row is in the data with no number, not dropped (so it breaks)
        rows = [r for r in chart.spec["datasets"]["cells"] if r["Context"] == "1K"]
        assert [r["total"] is None for r in rows] == [False, False, True, False, False]


def test_runs_charts_break_too() -> None:
    a = _matrix({(1024, 2): contract.OVER_CAPACITY})
    a += [_cell(x, 1, contract.VALID, contract.PREFILL) for x in (1024, 4096)]
    a += [_cell(8192, 1, contract.ERROR, contract.PREFILL), _cell(16384, 1, contract.VALID, contract.PREFILL)]
    b = _matrix({}) + [_cell(x, 1, contract.VALID, contract.PREFILL) for x in (1024, 4096, 8192, 16384)]
    series = [("a", "run a", a), ("b", "run b", b)]
    decode = _fill(charts.runs_decode_chart(series, 1024, "chart-decode-1024"))
    assert _moves(_live_lines(_svg(decode))[chartkit.LINE_COLORS[0]]) == 1  # 1 alone, then 4-16
    assert _fallback_lines(decode.svg)[chartkit.LINE_COLORS[0]].count("M") == 2
    assert _fallback_lines(decode.svg)[chartkit.LINE_COLORS[1]].count("M") == 1
    prefill = _fill(charts.runs_context_chart(series, contract.PREFILL, "chart-prefill"))
    live = _live_lines(_svg(prefill))
    assert _moves(live[chartkit.LINE_COLORS[0]]) == 1 and "M" in live[chartkit.LINE_COLORS[0]][1:]
    assert _moves(live[chartkit.LINE_COLORS[1]]) == 1
    assert _fallback_lines(prefill.svg)[chartkit.LINE_COLORS[0]].count("M") == 2


# --------------------------------------------------------------------------
# 2. requests-queued points are hollow squares
# --------------------------------------------------------------------------


def test_queued_points_are_hollow_live_and_in_the_fallback() -> None:
    chart = _fill(charts.decode_chart(_matrix({(1024, 8): contract.REQUESTS_QUEUED})))
    assert "hollow squares: requests queued" in chart.caption
    points = re.findall(r'<path aria-label="([^"]*)"[^>]*aria-roledescription="point"[^>]*'
                        r'd="([^"]+)" fill="([^"]+)"(?: stroke="([^"]+)")?', _svg(chart))
    queued = [p for p in points if "Status: Requests queued" in p[0]]
    valid = [p for p in points if "Status: Valid" in p[0]]
    assert len(queued) == 1 and len(valid) == 9
    assert queued[0][2] == "white" and queued[0][3] == chartkit.LINE_COLORS[0]
    assert "h" in queued[0][1]  # a square
    assert all(p[2] in chartkit.LINE_COLORS and "A" in p[1] for p in valid)  # filled circles
    dots = re.findall(r'<path d="([^"]+)" fill="' + chartkit.LINE_COLORS[0] + '"/>', chart.svg)
    assert len(dots) == 1 and dots[0].count("M") == len(LEVELS) - 1  # not under the square
    hollow = re.findall(r'<path d="([^"]+)" fill="white" stroke="([^"]+)"', chart.svg)
    assert [color for _, color in hollow] == [chartkit.LINE_COLORS[0]]
    assert hollow[0][0].count("M") == 1
    assert ">Requests queued</text>" in chart.svg
    # without queued cells: no hollow marks, no note
    plain = _fill(charts.decode_chart(_matrix({})))
    assert 'fill="white" stroke=' not in plain.svg and "hollow" not in plain.caption


# --------------------------------------------------------------------------
# 3. heatmap: each status without numbers has its own labelled fill
# --------------------------------------------------------------------------


def test_heatmap_gives_each_missing_status_its_own_fill() -> None:
    missing = {(1024, 2): contract.LOOPED, (1024, 4): contract.OVER_CAPACITY, (1024, 8): contract.ERROR,
               (4096, 8): contract.PENDING}
    chart = _fill(charts.heatmap_chart(_matrix(missing)))
    fills = {s: chartkit.MISSING_FILLS[s] for s in missing.values()}
    assert len(set(fills.values())) == 4
    live = _svg(chart)
    for (ctx, n), status in missing.items():
        label = (f"Requests at once: {n}; Context: {ctx // 1024}K; "
                 f"No numbers: {status_label(status)}")
        rect = re.search(r'<path aria-label="' + re.escape(label) + r'[^"]*"[^>]*fill="([^"]+)"',
                         live)
        assert rect and rect.group(1) == fills[status], (status, rect and rect.group(1))
        words = (chartkit.SHORT_STATUS[status], chartkit.TINY_STATUS[status])  # wide or narrow cells
        assert any(f">{word}</text>" in live for word in words), status
    cell_fills = re.findall(r'<rect x="\d+" y="\d+" width="64" height="\d+" fill="([^"]+)"',
                            chart.svg)
    assert len(cell_fills) == 2 * len(LEVELS)
    for status, fill in fills.items():
        assert cell_fills.count(fill) == 1, (status, cell_fills)
        assert f">{status_label(status)}</text>" in chart.svg  # its legend entry
        assert f">{chartkit.SHORT_STATUS[status]}</text>" in chart.svg  # the cell's own text
    # no blues cell shares a missing fill
    assert not set(fills.values()) & {fallback.blues(i / 20) for i in range(21)}


def _lab(hex_colour: str) -> tuple[float, float, float]:
    def lin(v: int) -> float:
        s = v / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(int(hex_colour[i:i + 2], 16)) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _contrast_on_white(hex_colour: str) -> float:
    def lin(v: int) -> float:
        s = v / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(int(hex_colour[i:i + 2], 16)) for i in (1, 3, 5))
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


def test_missing_fills_are_told_apart() -> None:
    fills = list(chartkit.MISSING_FILLS.values()) + [chartkit.NO_NUMBERS_FILL]
    for a, b in itertools.combinations(fills, 2):
        assert math.dist(_lab(a), _lab(b)) >= 10, (a, b)


# --------------------------------------------------------------------------
# 4. one categorical palette, readable on white, live and fallback alike
# --------------------------------------------------------------------------


def test_line_palette_is_distinct_and_readable_on_white() -> None:
    assert len(chartkit.LINE_COLORS) == 10
    for colour in chartkit.LINE_COLORS:
        assert _contrast_on_white(colour) >= 3, colour
    for a, b in itertools.combinations(chartkit.LINE_COLORS, 2):
        assert math.dist(_lab(a), _lab(b)) >= 20, (a, b)


def test_ten_contexts_use_the_palette_live_and_in_the_fallback() -> None:
    contexts = tuple(1024 * 2 ** i for i in range(10))
    chart = _fill(charts.decode_chart(_matrix({}, contexts)))
    scale = chart.spec["layer"][0]["encoding"]["color"]["scale"]
    assert scale["range"] == chartkit.LINE_COLORS and len(scale["domain"]) == 10
    assert "scheme" not in scale
    assert set(_live_lines(_svg(chart))) == set(chartkit.LINE_COLORS)
    strokes = set(re.findall(r'stroke="(#[0-9a-f]{6})" stroke-width="2" fill="none"', chart.svg))
    assert strokes == set(chartkit.LINE_COLORS)
    for colour in strokes | set(re.findall(r'<path d="[^"]+" fill="(#[0-9a-f]{6})"/>',
                                           chart.svg)):
        assert _contrast_on_white(colour) >= 3, colour


# --------------------------------------------------------------------------
# 5. timeline: running on top of waiting, both visible
# --------------------------------------------------------------------------


def _detail() -> dict[str, Any]:
    t = [0.0, 0.5, 1.0, 1.5]
    return {"timeline": {"t_s": t, "tok_s": [100.0, 120.0, 110.0, 90.0], "width_s": [0.5],
                         "client_active": [4, 4, 4, 4]},
            "running": {"t_s": t, "value": [2, 2, 2, 2]},
            "waiting": {"t_s": t, "value": [2, 2, 2, 2]}}  # the same values: they coincide


def test_timeline_draws_running_over_waiting_and_both_show() -> None:
    chart = _fill(drillcharts.timeline_chart(_detail()))
    layers = chart.spec["vconcat"][1]["layer"]
    order = [layer["transform"][0]["filter"]["equal"] for layer in layers]
    assert order == ["server (waiting)", "server (running)"]  # running drawn last: on top
    waiting, running = (layer["mark"]["strokeWidth"] for layer in layers)
    assert waiting > running  # the wider waiting line shows around the running one
    enc = layers[0]["encoding"]
    assert len(set(enc["color"]["scale"]["range"])) == 2
    assert enc["strokeDash"]["scale"]["range"][0] != enc["strokeDash"]["scale"]["range"][1]
    live = _svg(chart)
    assert live.index('stroke="#d95f02"') < live.rindex('stroke="#1f77b4"')
    drawn = re.findall(r'stroke="(#[0-9a-f]{6})" stroke-width="([\d.]+)" fill="none"'
                       r'( stroke-dasharray="[^"]+")?', chart.svg)
    assert [(colour, bool(dash)) for colour, _, dash in drawn] == [
        ("#d95f02", True), ("#1f77b4", False)]
    assert float(drawn[0][1]) > float(drawn[1][1])
    assert "server (running)" in chart.svg and "server (waiting)" in chart.svg


# --------------------------------------------------------------------------
# 6. text size and width
# --------------------------------------------------------------------------


def _all_charts() -> list[charts.Chart]:
    cells = _matrix({(1024, 4): contract.LOOPED, (4096, 8): contract.REQUESTS_QUEUED})
    cells += [_cell(x, 1, contract.VALID, contract.PREFILL) for x in (1024, 4096)]
    series = [("a", "a run with a very long label " * 6, cells), ("b", "b", _matrix({}))]
    return charts.SvgRenderer().fill([
        charts.prefill_chart(cells), charts.decode_chart(cells), charts.tradeoff_chart(cells),
        charts.heatmap_chart(cells), charts.runs_decode_chart(series, 1024, "chart-d"),
        charts.runs_context_chart(series, contract.DECODE, "chart-s"),
        charts.runs_context_chart(series, contract.PREFILL, "chart-p"),
        drillcharts.ttft_histogram([100.0, 120.0, 180.0]),
        drillcharts.tbt_histogram({"edges": [0, 10, 20], "counts": [3, 4]}, 12.0),
        drillcharts.timeline_chart(_detail())])


def _font_sizes(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k.lower().endswith("fontsize"):
                yield f"{path}.{k}", v
            yield from _font_sizes(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _font_sizes(v, f"{path}[{i}]")


def test_every_chart_font_is_at_least_10px_and_fits_its_container() -> None:
    charts = _all_charts()
    assert len(charts) == 10
    for chart in charts:
        sizes = list(_font_sizes(chart.spec))
        assert len(sizes) >= 4, chart.id  # axis and legend labels and titles, at least
        for where, size in sizes:
            assert size >= 10, (chart.id, where, size)
        for size in re.findall(r'font-size="([\d.]+)"', chart.svg):
            assert float(size) >= 10, (chart.id, size)
        # drawn to the container's width, never a fixed picture scaled down
        if "vconcat" in chart.spec:
            assert all(isinstance(part["width"], int) for part in chart.spec["vconcat"])
        else:
            assert chart.spec["width"] == "container", chart.id
            assert chart.spec["autosize"]["type"].startswith("fit"), chart.id
    # lines by run have no Vega legend (the page's run list names them, outside the
    # chart) and keep their plot's height: only the width is fitted
    runs = next(x for x in charts if x.id == "chart-d")
    assert runs.spec["layer"][0]["encoding"]["color"]["legend"] is None
    assert runs.spec["autosize"]["type"] == "fit-x"
    assert [name for _, name, _ in runs.spec["usermeta"]["legend"]["items"]] == [
        "a run with a very long label " * 6, "b"]


# --------------------------------------------------------------------------
# 7. authored once: templates compiled once per kind, titles and colours shared
# --------------------------------------------------------------------------


def _titles_and_colours(node: Any) -> tuple[set[str], set[str]]:
    """Axis titles (x and y encodings) and fixed mark colours of a live spec."""
    titles: set[str] = set()
    colours: set[str] = set()
    if isinstance(node, dict):
        for channel in ("x", "y"):
            title = (node.get("encoding") or {}).get(channel, {}).get("title")
            if isinstance(title, str):
                titles.add(title)
        mark = node.get("mark")
        if isinstance(mark, dict) and isinstance(mark.get("color"), str):
            colours.add(mark["color"])
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return titles, colours
    for child in children:
        more_titles, more_colours = _titles_and_colours(child)
        titles |= more_titles
        colours |= more_colours
    return titles, colours


def test_live_chart_and_fallback_share_axis_titles_and_colours() -> None:
    for chart in _all_charts():
        titles, colours = _titles_and_colours(chart.spec)
        assert titles, chart.id
        for title in titles:
            assert f">{title}</text>" in chart.svg, (chart.id, title)
        for colour in colours:
            assert f'"{colour}"' in chart.svg, (chart.id, colour)


def test_a_chart_kind_is_compiled_once_and_its_template_never_changes() -> None:
    one = charts.decode_chart(_matrix({}))
    compiled = charts._line_template.cache_info().currsize
    other = charts.decode_chart(_matrix({}, (2048, 8192, 32768)))
    assert charts._line_template.cache_info().currsize == compiled  # same kind: no new compile
    assert one.spec is not other.spec
    assert one.spec["layer"][0]["encoding"]["color"]["scale"]["domain"] == ["1K", "4K"]
    assert other.spec["layer"][0]["encoding"]["color"]["scale"]["domain"] == ["2K", "8K", "32K"]
    one.spec["layer"][0]["encoding"]["color"]["scale"]["domain"].append("changed")
    one.spec["datasets"]["cells"].clear()
    again = charts.decode_chart(_matrix({}))
    assert again.spec["layer"][0]["encoding"]["color"]["scale"]["domain"] == ["1K", "4K"]
    assert len(again.spec["datasets"]["cells"]) == 2 * len(LEVELS)
    assert "@" not in json.dumps(again.spec)  # every hole filled


def test_a_template_refuses_missing_or_unknown_holes() -> None:
    tpl = chartkit.template(alt.Chart(alt.Data(name="cells")).mark_bar().encode(
        x=alt.X(field="a", type="nominal", sort=chartkit.slots("order"))))
    assert tpl.holes == {"order"}
    assert tpl.fill({"cells": []}, order=["b", "a"])["encoding"]["x"]["sort"] == ["b", "a"]
    with pytest.raises(ValueError, match="order"):
        tpl.fill({"cells": []})
    with pytest.raises(ValueError, match="extra"):
        tpl.fill({"cells": []}, order=[], extra=1)


# --------------------------------------------------------------------------
# in Chromium: chart text >= 10 px and no figure wider than the viewport
# --------------------------------------------------------------------------

TEXT_JS = """() => {
  const out = {texts: [], figures: [], doc: document.documentElement.scrollWidth};
  for (const f of document.querySelectorAll('figure.chart')) {
    out.figures.push([f.id, f.getBoundingClientRect().right,
                      f.querySelector('.chart-live').scrollWidth,
                      f.querySelector('.chart-live').clientWidth]);
    for (const t of f.querySelectorAll('.chart-live svg text')) {
      if (!t.textContent.trim()) continue;
      // on screen: the glyph box and the font size times the SVG's scale (rotation-proof)
      const m = t.getScreenCTM();
      const scale = m ? Math.hypot(m.c, m.d) : 1;
      const size = parseFloat(getComputedStyle(t).fontSize) * scale;
      out.texts.push([f.id, t.textContent, t.getBBox().height * scale, size]);
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def chart_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from site_builder.publish import build_site
    from tests.support.chromium import require_chromium
    from tests.support.synthetic_runs import make_sample_data

    require_chromium()
    root = tmp_path_factory.mktemp("charts-site")
    report = build_site(make_sample_data(root / "data"), root / "site")
    assert report.errors == []
    return root / "site"


@pytest.mark.browser
def test_live_chart_text_is_readable_and_charts_fit_at_390_and_1440(chart_site: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.support.chromium import Watcher, launch, site_pages, wait_for_charts

    pages = [p for p in site_pages(chart_site)
             if 'class="chart"' in (chart_site / p).read_text(encoding="utf-8")]
    assert len(pages) > 10
    root = chart_site.resolve().as_uri() + "/"
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            for width in (390, 1440):
                context = browser.new_context(viewport={"width": width, "height": 900})
                watcher = Watcher(root)
                watcher.attach(context)
                page = watcher.watch(context.new_page())
                for rel in pages:
                    page.goto(root + rel, wait_until="load")
                    assert wait_for_charts(page) > 0, rel
                    seen = page.evaluate(TEXT_JS)
                    assert seen["texts"], rel
                    for chart_id, text, height, size in seen["texts"]:
                        assert height >= 10 and size >= 10, (width, rel, chart_id, text, size)
                    for chart_id, right, scroll_w, client_w in seen["figures"]:
                        assert right <= width, (width, rel, chart_id, right)
                        assert scroll_w <= client_w + 1, (width, rel, chart_id, scroll_w)
                assert watcher.problems() == [], width
                context.close()
        finally:
            browser.close()


# --------------------------------------------------------------------------
# 8. defined once: a chart's layout is read by its live spec and its fallback
# --------------------------------------------------------------------------


def _chart(chart_id: str) -> charts.Chart:
    return next(x for x in _all_charts() if x.id == chart_id)


def test_prefill_bars_are_as_wide_live_as_in_the_fallback() -> None:
    chart = _chart("chart-prefill")
    widths = {float(w) for w in re.findall(r"M[\d.]+ [\d.]+h([\d.]+)V", chart.svg)}
    assert widths == {float(chart.spec["mark"]["size"])}


def test_heatmap_rows_are_as_high_live_as_in_the_fallback() -> None:
    for contexts in ((1024,), (1024, 4096), tuple(1024 * 2 ** i for i in range(12))):
        chart = _fill(charts.heatmap_chart(_matrix({(1024, 2): contract.ERROR}, contexts)))
        heights = {int(h) for h in re.findall(r'<rect x="\d+" y="\d+" width="64" height="(\d+)"',
                                              chart.svg)}
        assert heights == {chart.spec["height"] // len(contexts)}, contexts
        # text turns white on the same shade live and in the fallback
        live = chart.spec["layer"][-1]["encoding"]["color"]
        assert live["condition"]["test"] == f"datum.shade > {charts.HEATMAP_WHITE_TEXT_ABOVE}"
        assert f'fill="{live["value"]}">' in chart.svg


def test_timeline_panels_are_as_high_live_as_in_the_fallback() -> None:
    chart = _chart("chart-timeline")
    tokens, running = (part["height"] for part in chart.spec["vconcat"])
    top, bottom = (float(y) for y in re.findall(r'<path d="M60.0 ([\d.]+)h440.0" stroke="#888"/>',
                                                chart.svg))
    assert top - 10 == tokens  # the bars' plot starts 10 px down
    assert bottom - top - 45 - chart.spec["spacing"] == running  # 45: the x axis under the bars


def test_line_legends_sit_where_the_live_chart_puts_them() -> None:
    """Lines by run have their legend below the plot (live: the page's run list under
    the chart), lines by context beside it."""
    seen = set()
    for chart in _all_charts():
        if chart.spec.get("layer", [{}])[0].get("encoding", {}).get("color", {}).get(
                "field") not in ("Context", "key"):
            continue
        below = chart.spec["layer"][0]["encoding"]["color"]["field"] == "key"
        assert below == ("legend" in chart.spec.get("usermeta", {})), chart.id
        legend_y = float(re.findall(r'<text x="[\d.]+" y="([\d.]+)" text-anchor="start"', chart.svg)[0])
        axis_y = max(float(y) for y in re.findall(r'<text x="[\d.]+" y="([\d.]+)" text-anchor="middle"',
                                                  chart.svg))
        assert (legend_y > axis_y) == below, chart.id
        seen.add(below)
    assert seen == {True, False}


def _panel_bases(svg: str) -> list[float]:
    """The y of each panel's x axis line in a fallback SVG (plots start 10 px down)."""
    return [float(y) for y in re.findall(r'<path d="M60.0 ([\d.]+)h440.0" stroke="#888"/>', svg)]


def test_histograms_and_their_median_rule_match_live_and_in_the_fallback() -> None:
    for chart in (_chart("chart-ttft"), _chart("chart-tbt")):
        assert [b - 10 for b in _panel_bases(chart.svg)] == [chart.spec["height"]], chart.id
    rule = _chart("chart-tbt").spec["layer"][1]["mark"]
    dash = " ".join(str(v) for v in rule["strokeDash"])
    assert (f'stroke="{rule["color"]}" stroke-width="{rule["strokeWidth"]}" '
            f'stroke-dasharray="{dash}"/>') in _chart("chart-tbt").svg


def test_power_panels_are_as_high_live_as_in_the_fallback() -> None:
    detail = {"power": {"t_s": [0.0, 0.5, 1.0], "width_s": [0.5], "power_w": [100.0, None, 300.0],
                        "sm_clock_mhz": [1500.0, 1600.0, None], "gpus": 1}}
    chart = _fill(drillcharts.power_chart(detail))
    power, clock = (part["height"] for part in chart.spec["vconcat"])
    top, bottom = _panel_bases(chart.svg)
    assert top - 10 == power
    assert bottom - top - 45 - chart.spec["spacing"] == clock
