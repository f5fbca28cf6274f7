"""Charts of many runs (issue 21): each run its own line, keyed by slug and named by
its distinct name, even where names or labels repeat; the best ten by the chart's
measure coloured and the rest grey, in the live chart, its run list and the no-JS
fallback alike; the plot's height never shared with a legend; the explorer's runs
carry what its filters match. The browser half: tests/browser/test_charts_scale_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import vl_convert as vlc

from rundir import contract
from site_builder import chartkit, charts, explore, explorecharts
from site_builder.aggregate import CellResult
from site_builder.publish import build_site
from tests.support.many_runs import make_many_runs


def _cells(speed: float) -> list[CellResult]:
    return [CellResult(contract.DECODE, 8192, n, contract.VALID, total_tok_s=speed * n,
                       per_request_tok_s=speed, ttft_ms=100.0) for n in (1, 4, 16)]


def _runs(n: int) -> list[charts.RunLine]:
    """n runs, run-i the i-th slowest (so the ranking reverses the order given)."""
    return [(f"run-{i:02d}", f"Run {i}", _cells(10.0 + i)) for i in range(n)]


def _svg(chart: charts.Chart) -> str:
    return vlc.vegalite_to_svg(chart.spec, vl_version=chartkit.VL_VERSION, allowed_base_urls=[])


def test_runs_ranked_best_first_ten_in_colour_the_rest_grey() -> None:
    chart = charts.SvgRenderer().fill([charts.runs_decode_chart(_runs(14), 8192, "chart-d")])[0]
    items = chart.spec["usermeta"]["legend"]["items"]
    assert [k for k, _, _ in items] == [f"run-{i:02d}" for i in range(13, -1, -1)]  # best first
    assert [c for _, _, c in items] == chartkit.LINE_COLORS + [chartkit.REST_COLOR] * 4
    assert chart.spec["usermeta"]["legend"]["rest"] == 4
    color = chart.spec["layer"][0]["encoding"]["color"]
    assert color["field"] == "key" and color["legend"] is None  # no Vega legend at all
    assert color["scale"] == {"domain": [k for k, _, _ in items], "range": [c for _, _, c in items]}
    rows = chart.spec["datasets"]["cells"]
    assert rows[0]["key"] == "run-00" and rows[-1]["key"] == "run-13"  # the best drawn last
    assert {r["key"] for r in rows if r["top"]} == {f"run-{i:02d}" for i in range(4, 14)}
    assert "the best 10 in colour" in chart.caption
    # the plot keeps the chart's height: only the width is fitted
    assert chart.spec["autosize"]["type"] == "fit-x" and chart.spec["height"] == chartkit.HEIGHT
    # live: one line per run, the grey ones without points (a tooltip names their line)
    svg = _svg(chart)
    assert len(re.findall(r'aria-roledescription="line mark"', svg)) == 14
    assert len(re.findall(r'aria-roledescription="point"', svg)) == 10 * 3
    # the fallback: the same colours, the ten coloured runs named, then how many more
    assert chart.svg.count(f'stroke="{chartkit.REST_COLOR}"') >= 4
    assert ">Run 13</text>" in chart.svg and ">Run 3</text>" not in chart.svg
    assert ">+ 4 more runs (in grey)</text>" in chart.svg


def test_runs_sharing_a_name_stay_two_lines() -> None:
    """Two runs named alike (one setup on two dates, before names were distinct) are
    two lines (two bars in a chart of one context) and two entries, keyed by slug."""
    series = [("a-slug", "Same name", _cells(10.0)), ("b-slug", "Same name", _cells(20.0))]
    for chart in (charts.runs_decode_chart(series, 8192, "d"),
                  charts.runs_context_chart(series, contract.DECODE, "s")):
        assert chart is not None
        assert [k for k, _, _ in chart.spec["usermeta"]["legend"]["items"]] == ["b-slug", "a-slug"]
        assert len(re.findall(r'aria-roledescription="(?:line mark|bar)"', _svg(chart))) == 2


def test_highlight_param_fades_the_other_runs() -> None:
    chart = charts.runs_decode_chart(_runs(3), 8192, "chart-d")
    assert chart.spec["params"] == [{"name": chartkit.HIGHLIGHT, "value": ""}]
    spec = json.loads(json.dumps(chart.spec))
    spec["params"][0]["value"] = "run-01"
    svg = vlc.vegalite_to_svg(spec, vl_version=chartkit.VL_VERSION, allowed_base_urls=[])
    faded = re.findall(r'aria-roledescription="line mark"[^>]*opacity="([\d.]+)"', svg)
    assert sorted(faded) == [str(chartkit.FADED)] * 2 + ["1"]  # two faded, the pick not


def test_explorer_templates_key_runs_by_slug_and_keep_their_height() -> None:
    for kind in explorecharts.KINDS:
        spec = json.loads(explorecharts.explore_template(kind, False, False).text)
        assert spec["autosize"]["type"] == "fit-x" and spec["height"] == explorecharts.HEIGHT
        curves = spec["layer"][0]["encoding"]
        assert curves["color"]["field"] == "key" and curves["color"]["legend"] is None
        assert curves["detail"]["field"] == "key"
        assert spec["params"] == [{"name": chartkit.HIGHLIGHT, "value": ""}]


def _view(slug: str, name: str, gpu: str, engine: str, quant: str, at: str | None) -> Any:
    hardware = SimpleNamespace(gpu_name=gpu, gpu_count=1)
    return SimpleNamespace(
        slug=slug, name=name, title=f"M on {gpu}", family="M", family_slug="m", variant="",
        page=f"runs/{slug}/index.html", price=None, agg=SimpleNamespace(decode=lambda: []),
        info=SimpleNamespace(hardware=hardware, measured_at=at, engine=SimpleNamespace(
            name=engine, version="1", quantization=quant)))


def test_explorer_runs_carry_their_names_and_what_the_filters_match() -> None:
    views = [_view("a", "M · H200 · Jun 1, 2026", "H200", "vllm", "FP8", "2026-06-01T09:00:00Z"),
             _view("b", "M · H200 · Jun 9, 2026", "H200", "sglang", "", "2026-06-09T09:00:00Z"),
             _view("c", "M · L40S", "L40S", "vllm", "BF16", None)]
    data = explore.explore_data(views)
    assert [(r["slug"], r["name"], r["gpu"], r["engine"], r["quantization"], r["date"])
            for r in data["runs"]] == [
        ("a", "M · H200 · Jun 1, 2026", "H200", "vllm", "FP8", "2026-06-01"),
        ("b", "M · H200 · Jun 9, 2026", "H200", "sglang", "", "2026-06-09"),
        ("c", "M · L40S", "L40S", "vllm", "BF16", "")]
    assert explore.filter_options(data["runs"]) == [
        ("gpu", "GPU", ["H200", "L40S"]), ("engine", "Engine", ["sglang", "vllm"]),
        ("quantization", "Quantization", ["BF16", "FP8"])]


def test_family_page_charts_name_runs_within_the_family_and_key_them_by_slug(
        tmp_path: Path) -> None:
    make_many_runs(tmp_path / "data", 40, seed=2)
    report = build_site(tmp_path / "data", tmp_path / "site", cache_dir=tmp_path / "cache", jobs=1)
    assert report.errors == []
    pages = sorted((tmp_path / "site" / "models").glob("*.html"))
    page = max(pages, key=lambda p: p.read_text("utf-8").count('class="mini-matrix"'))
    html = page.read_text("utf-8")
    slugs = re.findall(r'<section class="mini-matrix">\s*<h3><a href="../runs/([^/]+)/', html)
    specs = [json.loads(m) for m in re.findall(
        r'<script type="application/json" class="chart-spec">(.*?)</script>', html, re.S)]
    assert len(slugs) >= 8 and specs
    for spec in specs:
        items = spec["usermeta"]["legend"]["items"]
        assert {k for k, _, _ in items} <= set(slugs)
        names = [n for _, n, _ in items]
        assert len(set(names)) == len(names)
    # the page names the model: its runs' names within the family leave it out
    model = re.search(r"<h1>(.+?) across", html)[1]
    assert not any(n.startswith(model + " ·") for spec in specs
                   for _, n, _ in spec["usermeta"]["legend"]["items"])
    # each matrix's heading is its run's label, or its name where the label repeats
    heads = re.findall(r'<section class="mini-matrix">\s*<h3><a href="[^"]+">([^<]+)</a>', html)
    assert len(heads) == len(slugs) and len(set(heads)) == len(heads)
    # the charts come before the long tables (the first screen)
    assert html.index('class="chart-grid"') < html.index('<table class="runs')


def _crossing(n: int) -> list[charts.RunLine]:
    """n runs whose order at 8K (run-00 fastest) is the reverse of their prefill order."""
    out = []
    for i in range(n):
        cells = [CellResult(contract.DECODE, 8192, c, contract.VALID, total_tok_s=(100.0 - i) * c,
                            per_request_tok_s=100.0 - i, ttft_ms=100.0) for c in (1, 4)]
        cells += [CellResult(contract.PREFILL, x, 1, contract.VALID, total_tok_s=1000.0 + 10 * i)
                  for x in (8192, 32768)]
        out.append((f"run-{i:02d}", f"Run {i}", cells))
    return out


def test_a_page_palette_gives_each_run_one_colour_in_every_chart() -> None:
    """Issue 30: each chart coloured runs by its own ranking, so a run was blue in one
    chart of a family page and orange in the next. With the page's palette a run has
    one colour in every chart (live scale, run list and fallback), the palette's
    coloured runs listed first, each part best first by the chart's own measure."""
    series = _crossing(12)
    ranked = [f"run-{i:02d}" for i in range(12)]  # the page's order: by peak
    palette = chartkit.page_palette(ranked, "peak total tok/s")
    made = charts.SvgRenderer().fill([
        charts.runs_decode_chart(series, 8192, "d", palette=palette),
        charts.runs_context_chart(series, contract.PREFILL, "p", palette=palette)])
    for chart in made:
        items = chart.spec["usermeta"]["legend"]["items"]
        assert {k: c for k, _, c in items} == palette.colors, chart.id
        scale = chart.spec["layer"][0]["encoding"]["color"]["scale"]
        assert dict(zip(scale["domain"], scale["range"], strict=True)) == palette.colors
        assert all(c != chartkit.REST_COLOR for *_, c in items[:10])  # coloured first
        assert chart.spec["usermeta"]["legend"]["rest"] == 2
        assert chart.spec["usermeta"]["legend"]["rule"] == palette.rule
        assert palette.rule in chart.caption
        for key in ("run-00", "run-09"):  # the fallback draws each in its page colour
            assert f'stroke="{palette.of(key)}"' in chart.svg
    decode, prefill = (c.spec["usermeta"]["legend"]["items"] for c in made)
    assert [k for k, *_ in decode][:3] == ["run-00", "run-01", "run-02"]  # best at 8K
    assert [k for k, *_ in prefill][:3] == ["run-09", "run-08", "run-07"]  # best prefill
    assert [k for k, *_ in prefill][10:] == ["run-11", "run-10"]  # grey, best first
    # without a page palette each chart ranks its own: the same run, two colours
    alone = [charts.runs_decode_chart(series, 8192, "d"),
             charts.runs_context_chart(series, contract.PREFILL, "p")]
    own = [{k: c for k, _, c in ch.spec["usermeta"]["legend"]["items"]} for ch in alone]
    assert own[0]["run-00"] != own[1]["run-00"]


def test_a_chart_with_one_x_value_is_a_bar_per_run() -> None:
    """Issue 30: a family chart whose runs have numbers at one level only was a line
    chart through one x (lone dots). It is a bar per run, best first, in the page's
    colours, named under its bar and valued over it, the same in the fallback."""
    series = [(f"run-{i}", f"Run {i}", [CellResult(
        contract.DECODE, 262144, c, contract.VALID if c == 1 else contract.OVER_CAPACITY,
        total_tok_s=10.0 * (i + 1) if c == 1 else None, per_request_tok_s=10.0, ttft_ms=9.0)
        for c in (1, 2, 4)]) for i in range(3)]
    palette = chartkit.page_palette(["run-0", "run-1", "run-2"], "peak total tok/s")
    chart = charts.SvgRenderer().fill([charts.runs_decode_chart(series, 262144, "d",
                                                                palette=palette)])[0]
    marks = [layer["mark"]["type"] for layer in chart.spec["layer"]]
    assert marks == ["bar", "text"]
    assert "1 request at once, the only level with numbers" in chart.caption
    svg = _svg(chart)
    assert len(re.findall(r'aria-roledescription="bar"', svg)) == 3
    assert "line mark" not in svg
    fills = re.findall(r'aria-roledescription="bar"[^>]*fill="([^"]+)"', svg)
    assert sorted(fills) == sorted(palette.colors.values())
    assert all(f">Run {i}<" in svg for i in range(3))  # named under the bars
    assert ">30.0<" in svg  # the value over the bar
    for key, color in palette.colors.items():  # the fallback: the same bars and colours
        assert f'fill="{color}"' in chart.svg, key
    assert ">Run 2</text>" in chart.svg and "<path d=" in chart.svg
    # one context only: the same for the charts by context
    one = charts.runs_context_chart(series, contract.DECODE, "s", palette=palette)
    assert [layer["mark"]["type"] for layer in one.spec["layer"]] == ["bar", "text"]
