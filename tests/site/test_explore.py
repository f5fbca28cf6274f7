"""The explorer (explore.html) and the A/B page's summary and curves.

Pure: the Pareto frontier on points and on synthetic runs with known answers,
the view a reader lands on. In Chromium (tests/support/chromium.py): the explorer's
view kept in the address over file:// and http, the A/B summary's median and
geometric-mean arithmetic, and the bundled site's explorer drawing one curve
per run with the frontier.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rundir import contract
from site_builder import explore, explorecharts, formats, prices
from site_builder.aggregate import CellResult
from site_builder.publish import build_site
from site_builder.serve import serve_in_thread
from tests.support.chromium import Watcher, parse_html, require_chromium
from tests.support.synthetic_runs import make_sample_data

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------
# pure: the frontier
# ---------------------------------------------------------------------------


def test_pareto_front_keeps_exactly_the_points_nothing_beats() -> None:
    points = [(1, 10), (2, 8), (3, 8), (2, 5), (4, 1), (3, 8), (0.5, 10)]
    # (0.5, 10) loses to (1, 10); (2, 8) to (3, 8); (2, 5) to (3, 8); equal points both stay
    assert explore.pareto_front(points) == [0, 2, 5, 4]
    assert explore.pareto_front([]) == []
    assert explore.pareto_front([(5, 5)]) == [0]
    assert explore.pareto_front([(1, 1), (2, 2), (3, 3)]) == [2]


def _cell(ctx: int, n: int, per_request: float, total: float,
          status: str = contract.VALID) -> CellResult:
    return CellResult(phase=contract.DECODE, context=ctx, concurrency=n, status=status,
                      total_tok_s=total, per_request_tok_s=per_request, ttft_ms=100.0 * n)


def _run(slug: str, family: str, gpus: int | None, cells: list[CellResult],
         price: prices.Price | None = None) -> Any:
    """A stand-in for a RunView: what explore_data reads of one."""
    hardware = SimpleNamespace(gpu_name="GPU" if gpus else None, gpu_count=gpus)
    engine = SimpleNamespace(name="vllm", version="0.30.1", quantization="FP8")
    return SimpleNamespace(slug=slug, name=slug, title=slug, family=family,
                           family_slug=family.lower(), variant="", page=f"runs/{slug}/index.html",
                           info=SimpleNamespace(hardware=hardware, engine=engine,
                                                measured_at="2026-06-01T09:00:00Z"), price=price,
                           agg=SimpleNamespace(decode=lambda: cells))


def _synthetic_runs() -> list[Any]:
    one_gpu = _run("a-1gpu", "M", 1, [_cell(8192, 1, 50, 50), _cell(8192, 2, 45, 90),
                                      _cell(8192, 4, 40, 160), _cell(1024, 1, 99, 99)])
    eight_gpus = _run("b-8gpu", "M", 8, [
        _cell(8192, 1, 60, 60), _cell(8192, 4, 55, 220), _cell(8192, 16, 30, 480),
        # queued: would beat everything, but its per-request speed leaves out the waiting
        _cell(8192, 32, 70, 900, contract.REQUESTS_QUEUED)])
    cpu = _run("c-cpu", "Other", None, [_cell(8192, 1, 20, 20), _cell(8192, 2, 10, 1000)])
    return [one_gpu, eight_gpus, cpu]


def _named(data: dict[str, Any], key: str) -> list[tuple[str, int]]:
    return [(data["runs"][data["points"][i][0]]["slug"], data["points"][i][2])
            for i in data["frontiers"][key]]


def test_frontier_of_synthetic_runs_per_gpu_and_total() -> None:
    data = explore.explore_data(_synthetic_runs())
    # total tok/s: the 8-GPU run beats the 1-GPU run everywhere
    assert _named(data, "m|8192|total") == [("b-8gpu", 16), ("b-8gpu", 4), ("b-8gpu", 1)]
    # per GPU, the 1-GPU run's curve is ahead at low per-request speeds
    assert _named(data, "m|8192|gpu") == [("a-1gpu", 4), ("a-1gpu", 2), ("a-1gpu", 1),
                                          ("b-8gpu", 4), ("b-8gpu", 1)]
    # all runs: the CPU run's 1,000 tok/s point joins the total frontier; per GPU it has none
    assert ("c-cpu", 2) in _named(data, "*|8192|total")
    assert all(slug != "c-cpu" for slug, _ in _named(data, "*|8192|gpu"))
    fields = data["fields"]
    queued = [p for p in data["points"] if p[fields.index("status")] == contract.REQUESTS_QUEUED]
    assert len(queued) == 1 and queued[0][fields.index("per_gpu")] == 900 / 8
    assert data["contexts"]["m"] == [1024, 8192]


def test_default_view_is_the_biggest_family_where_its_runs_have_curves() -> None:
    data = explore.explore_data(_synthetic_runs())
    # 8K: both runs of M, with three points or more each; 1K has one run only
    assert data["default"] == {"family": "m", "context": 8192, "y": "gpu", "view": "tradeoff",
                               "logx": False, "logy": False}
    assert data["best_context"]["other"] == 8192
    series, front = explore.view_series(data, "m", 8192, "gpu")
    assert [name for name, _ in series] == ["a-1gpu", "b-8gpu"]
    assert front[0] == (40, 160)
    svg = explorecharts.explore_fallback("t", series, front, "Total tok/s per GPU")
    assert svg.count(explorecharts.FRONTIER_COLOR) >= 2 and "Pareto frontier" in svg


def test_every_template_has_the_holes_the_page_fills() -> None:
    for key, text in explorecharts.templates().items():
        kind = key.split("|")[0]
        spec = explorecharts.explore_template(kind, key[-2] == "1", key[-1] == "1")
        assert spec.holes == {"lines", "colors", "x_title", "y_title"}, key
        assert ('"name":"frontier"' in text) == (kind == "tradeoff"), key


# ---------------------------------------------------------------------------
# cost per 1M output tokens: only with a price table, prices.py's formula and format
# ---------------------------------------------------------------------------

PRICE = prices.Price("GPU", 2.5, "2026-11-01", "https://example.com/gpu-prices")
COST = explore.COST_FIELDS[1]


def test_points_carry_prices_py_cost_only_with_a_price_table() -> None:
    runs = _synthetic_runs()
    bare = explore.explore_data(runs)
    # no price table: no cost field, no cost text, no price note, no tooltip line
    assert bare["fields"] == explore.POINT_FIELDS and bare["prices"] == []
    assert all(len(p) == len(explore.POINT_FIELDS) for p in bare["points"])
    assert "Cost" not in json.dumps(bare) and "$" not in json.dumps(bare)
    assert all(COST not in text for text in explorecharts.templates().values())
    assert explorecharts.cost_note(bare) == ""
    # a table pricing the two GPU runs' GPU; the CPU run has none
    runs[0].price = runs[1].price = PRICE
    data = explore.explore_data(runs)
    fields = {name: i for i, name in enumerate(data["fields"])}
    assert data["fields"] == explore.POINT_FIELDS + explore.COST_FIELDS
    assert data["prices"] == [PRICE.note]
    checked = 0
    for p in data["points"]:
        run = runs[p[0]]
        if run.price is None:
            assert p[fields["cost"]] is None and p[fields[COST]] == explore.NO_PRICE
            continue
        want = prices.cost_per_million(PRICE.usd_per_gpu_hour, run.info.hardware.gpu_count,
                                       p[fields["total"]])
        assert p[fields["cost"]] == want and p[fields[COST]] == prices.dollars(want)
        checked += 1
    assert checked == 8
    # 8 GPUs at 480 tok/s: $2.50 x 8 an hour over 480 x 3600 tokens an hour
    b16 = next(p for p in data["points"] if p[0] == 1 and p[2] == 16)
    assert b16[fields[COST]] == prices.dollars(2.5 * 8 / (480 * 3600) * 1e6) == "$11.57"
    assert all(COST in text for text in explorecharts.templates(cost=True).values())
    note = explorecharts.cost_note(data)
    assert "2026-11-01" in note and "https://example.com/gpu-prices" in note


def test_built_explorer_shows_cost_only_with_prices(tmp_path: Path) -> None:
    data_dir = make_sample_data(tmp_path / "data")
    table = tmp_path / "prices.yaml"
    table.write_text("prices:\n  - gpu: RTX PRO 6000 Blackwell Server Edition\n"
                     "    usd_per_gpu_hour: 1.75\n    date: 2026-10-15\n"
                     "    source: example price\n", "utf-8")
    for priced in (False, True):
        out = tmp_path / f"site-{priced}"
        report = build_site(data_dir, out, cache_dir=tmp_path / "cache",
                            prices=prices.load_prices(table) if priced else None)
        assert report.errors == []
        html = (out / "explore.html").read_text("utf-8")
        script = (out / "data" / "explore.js").read_text("utf-8")
        if not priced:
            assert COST not in html and COST not in script and "1.75" not in script
            continue
        data = _data(out)
        fields = {name: i for i, name in enumerate(data["fields"])}
        priced_points = [p for p in data["points"] if p[fields[COST]] != explore.NO_PRICE]
        assert priced_points
        for p in priced_points:
            gpus = data["runs"][p[0]]["gpus"]
            want = prices.cost_per_million(1.75, gpus, p[fields["total"]])
            assert p[fields[COST]] == prices.dollars(want)
        note = parse_html(html).find("p", id="ex-cost").text()
        assert "$1.75 per GPU-hour" in note and "2026-10-15" in note and "example price" in note
        assert all(COST in text for text in data["templates"].values())


# ---------------------------------------------------------------------------
# browser: the explorer's address, the A/B summary, the bundled site
# ---------------------------------------------------------------------------

CURVES_JS = """() => document.querySelectorAll('#explore-chart .chart-live svg g.curves_marks').length"""
FRONTIER_JS = """() => document.querySelectorAll(
  '#explore-chart .chart-live svg g.frontier_points_marks > *').length"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample site (tests/support/synthetic_runs.py), built once for this module."""
    require_chromium()
    root = tmp_path_factory.mktemp("explore-site")
    report = build_site(make_sample_data(root / "data"), root / "site", cache_dir=root / "cache")
    assert report.errors == []
    return root / "site"


@pytest.fixture(scope="module")
def http_root(site: Path) -> Iterator[str]:
    """The sample site served over http (site_builder.serve), stopped after the module."""
    server, url = serve_in_thread(site)
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["file", "http"])
def session(request: pytest.FixtureRequest, browser: Any, site: Path,
            http_root: str) -> Iterator[tuple[Any, Watcher]]:
    root = site.resolve().as_uri() + "/" if request.param == "file" else http_root
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(root)
    watcher.attach(context)
    yield watcher.watch(context.new_page()), watcher
    context.close()


def _live(page: Any) -> None:
    page.wait_for_function("() => document.querySelector('#explore-chart')"
                           ".classList.contains('is-live')", timeout=15_000)


def _data(site: Path) -> dict[str, Any]:
    text = (site / "data" / "explore.js").read_text("utf-8")
    return json.loads(text[text.index("=") + 1:].strip().rstrip(";"))


@pytest.mark.browser
def test_explorer_view_lives_in_the_address(session: tuple[Any, Watcher], site: Path) -> None:
    page, watcher = session
    data = _data(site)
    page.goto(watcher.site_root + "explore.html#family=*&ctx=4096&y=total&view=ttft&logx=1&logy=0")
    _live(page)
    assert page.locator("#ex-family").input_value() == "*"
    assert page.locator("#ex-ctx").input_value() == "4096"
    assert page.locator("#ex-view").input_value() == "ttft"
    assert page.locator("#ex-logx").is_checked() and not page.locator("#ex-logy").is_checked()
    with_points = {p[0] for p in data["points"] if p[1] == 4096}
    assert page.evaluate(CURVES_JS) == len(with_points)
    # a change is written to the address and the permalink, and the permalink reopens it
    page.select_option("#ex-view", "tradeoff")
    page.check("#ex-logy")
    want = "#family=*&ctx=4096&y=total&view=tradeoff&logx=1&logy=1"
    page.wait_for_function(f"() => location.hash === {json.dumps(want)}")
    assert page.locator("#ex-permalink").get_attribute("href") == "explore.html" + want
    page.wait_for_function("() => document.querySelectorAll("
                           "'#explore-chart g.frontier_marks').length === 1")
    page.goto("about:blank")
    page.goto(watcher.site_root + "explore.html" + want)
    _live(page)
    assert page.locator("#ex-view").input_value() == "tradeoff"
    assert page.locator("#ex-logy").is_checked()
    assert page.evaluate(FRONTIER_JS) == len(data["frontiers"]["*|4096|total"])
    # a family no run has is said, never silently swapped
    page.goto(watcher.site_root + "explore.html#family=nope&ctx=1024")
    _live(page)
    assert "family \u201cnope\u201d" in page.locator("#ex-note").inner_text()
    assert watcher.problems() == []


@pytest.mark.browser
def test_ab_summary_arithmetic_and_line(session: tuple[Any, Watcher], site: Path) -> None:
    page, watcher = session
    page.goto(watcher.site_root + "compare.html#a=synth-a&b=synth-b&m=total_tok_s")
    page.locator("#ab-result .ab-summary").wait_for()
    summary = "(p) => window.SpeedMatrixExplore.summary(p)"
    got = page.evaluate(summary, [[100, 110], [100, 121], [100, 100], [0, 5], [7, None]])
    assert got["n"] == 3
    assert got["median"] == pytest.approx(0.10) and got["geomean"] == pytest.approx(0.10)
    got = page.evaluate(summary, [[1, 2], [1, 4]])
    assert got["median"] == pytest.approx(2.0) and got["geomean"] == pytest.approx(math.sqrt(8) - 1)
    assert page.evaluate(summary, [])["n"] == 0
    # the page's line: the decode cells Valid in both sample runs
    cells = {}
    for slug in ("synth-a", "synth-b"):
        rows = json.loads((site / "runs" / slug / "cells.json").read_text("utf-8"))
        rows = rows["cells"] if isinstance(rows, dict) else rows
        cells[slug] = {(r["context"], r["concurrency"]): r["total_tok_s"] for r in rows
                       if r["phase"] == contract.DECODE and r["status"] == contract.VALID}
    ratios = [cells["synth-b"][k] / cells["synth-a"][k] for k in cells["synth-a"]
              if k in cells["synth-b"]]
    median = statistics.median(ratios)
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    line = page.locator("#ab-result .ab-summary").inner_text()
    assert f"over the {len(ratios)} decode cells Valid in both runs" in line
    assert f"median change {formats.percent_change(median, 1)}" in line
    assert f"geometric-mean change {formats.percent_change(geomean, 1)}" in line
    page.wait_for_function("() => document.querySelector('#ab-chart.is-live')", timeout=15_000)
    assert page.locator("#ab-chart g.curves_marks").count() == 2
    assert watcher.problems() == []


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("bundled-explore")
    report = build_site(REPO / "data", root / "site", cache_dir=root / "cache")
    assert report.errors == []
    return root / "site"


@pytest.mark.browser
def test_bundled_explorer_draws_one_curve_per_kimi_run(browser: Any, bundled: Path) -> None:
    data = _data(bundled)
    kimi = next(f for f in data["families"] if f["slug"] == "kimi-k2.6")
    assert data["default"]["family"] == "kimi-k2.6" and len(kimi["runs"]) == 2
    # without JavaScript: the default view's picture, both runs and the frontier
    html = (bundled / "explore.html").read_text("utf-8")
    fallback = parse_html(html).find("div", cls="chart-fallback")
    text = fallback.text()
    assert all(data["runs"][i]["name"][:60] in text for i in kimi["runs"])
    assert explorecharts.FRONTIER_LABEL in text
    root = bundled.resolve().as_uri() + "/"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto(root + "explore.html")
    _live(page)
    assert page.evaluate(CURVES_JS) == 2
    # drawn to the figure's width (vega-embed's box would otherwise be 0 px wide)
    width = page.evaluate("() => document.querySelector('#explore-chart .chart-live svg')"
                          ".getBoundingClientRect().width")
    assert width > 600
    ctx = data["default"]["context"]
    assert page.evaluate(FRONTIER_JS) == len(data["frontiers"][f"kimi-k2.6|{ctx}|gpu"]) > 0
    assert page.locator("#explore-chart .chart-fallback").count() == 0
    context.close()
    assert watcher.problems() == []
