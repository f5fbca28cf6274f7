"""Charts of many runs in a real browser (issue 21): a 300-run site, at a phone's and a
desktop's width. The plot of every live chart keeps its intended height whatever the
number of runs (the run list sits under it, outside the chart), every run in a list
has a distinct name, no Vega warning reaches the console, and the explorer's filters
live in the address: shared, reloaded and walked back through."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from site_builder import explorecharts
from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium, wait_for_charts
from tests.support.many_runs import make_many_runs

pytestmark = pytest.mark.browser
WIDTHS = (390, 1440)

# Each live chart: its id, its plot's height (the root view's background rectangle in
# Vega's SVG: axes and legend are outside it), its run list's names and keys.
CHARTS_JS = r"""() => Array.from(document.querySelectorAll('figure.chart.is-live')).map((f) => {
  const bg = f.querySelector('g.mark-group.role-frame.root > g > path.background');
  const items = Array.from(f.querySelectorAll('.chart-legend button[data-key]'));
  return {id: f.id, plot: bg ? bg.getBoundingClientRect().height : 0,
          names: items.map((b) => b.querySelector('.name').textContent),
          keys: items.map((b) => b.getAttribute('data-key')),
          figure: f.getBoundingClientRect().width};
})"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("scale-site")
    make_many_runs(root / "data", 300, seed=5)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def _explore_data(site: Path) -> dict[str, Any]:
    text = (site / "data" / "explore.js").read_text("utf-8")
    return json.loads(text[text.index("{"):text.rindex("}") + 1])


def _largest_family(site: Path) -> Path:
    pages = sorted((site / "models").glob("*.html"))
    return max(pages, key=lambda p: p.read_text("utf-8").count('class="mini-matrix"'))


def _open(browser: Any, site: Path, width: int, path: str) -> tuple[Any, Any, Watcher]:
    context = browser.new_context(viewport={"width": width, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto((site / path).resolve().as_uri() if "#" not in path
              else (site / path.split("#")[0]).resolve().as_uri() + "#" + path.split("#", 1)[1])
    return context, page, watcher


def _specs(html: str) -> dict[str, dict[str, Any]]:
    """Each chart's spec on a page, by the figure's id."""
    out = {}
    for m in re.finditer(r'<figure class="chart" id="([^"]+)">.*?<script type="application/json" '
                         r'class="chart-spec">(.*?)</script>', html, re.S):
        out[m[1]] = json.loads(m[2])
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_family_charts_keep_their_plot_and_name_every_run(browser: Any, site: Path,
                                                           width: int) -> None:
    page_path = _largest_family(site)
    html = page_path.read_text("utf-8")
    runs = html.count('class="mini-matrix"')
    assert runs >= 60, runs  # the shape this test is about: one family of many runs
    specs = _specs(html)
    context, page, watcher = _open(browser, site, width, page_path.relative_to(site).as_posix())
    try:
        assert wait_for_charts(page, timeout_ms=60_000) == len(specs) >= 3
        drawn = page.evaluate(CHARTS_JS)
    finally:
        context.close()
    assert {d["id"] for d in drawn} == set(specs)
    for d in drawn:
        spec = specs[d["id"]]
        assert d["plot"] >= spec["height"] - 0.5, (d["id"], d["plot"], spec["height"])
        items = spec["usermeta"]["legend"]["items"]
        assert d["keys"] == [k for k, _, _ in items]  # keyed by slug, best first
        assert len(set(d["names"])) == len(d["names"]) > 10, d["id"]  # distinct names
        assert len(set(d["keys"])) == len(d["keys"])
    assert max(len(d["names"]) for d in drawn) >= runs * 0.9
    assert watcher.problems() == []  # no Vega warning ("Symbol legend count exceeds limit")


def test_family_chart_run_list_finds_and_highlights_a_run(browser: Any, site: Path) -> None:
    page_path = _largest_family(site)
    context, page, watcher = _open(browser, site, 1440, page_path.relative_to(site).as_posix())
    try:
        wait_for_charts(page, timeout_ms=60_000)
        fig = page.locator("figure.chart").first
        points = ("(f) => f.querySelectorAll("
                  "'.chart-live g.role-mark path[aria-roledescription=point]').length")
        before = fig.evaluate(points)
        last = fig.locator(".chart-legend button[data-key]").last  # a grey run: no points
        name = last.locator(".name").inner_text()
        key = last.get_attribute("data-key")
        fig.locator(".chart-legend input[type=search]").fill(name)
        visible = fig.locator(".chart-legend li:not([hidden]) .name").all_inner_texts()
        assert name in visible and len(visible) < 5
        last.click()
        assert last.get_attribute("aria-pressed") == "true"
        page.wait_for_function("(f) => f.querySelector('.chart-legend')._view.signal('hl') !== ''",
                               arg=fig.element_handle())
        assert fig.evaluate("(f) => f.querySelector('.chart-legend')._view.signal('hl')") == key
        page.wait_for_function(f"(f) => ({points})(f) > {before}", arg=fig.element_handle())
        last.click()  # again: cleared
        assert last.get_attribute("aria-pressed") == "false"
        assert fig.evaluate("(f) => f.querySelector('.chart-legend')._view.signal('hl')") == ""
    finally:
        context.close()
    assert watcher.problems() == []


@pytest.mark.parametrize("width", WIDTHS)
def test_explorer_all_runs_keeps_its_plot_and_names_runs_with_their_model(
        browser: Any, site: Path, width: int) -> None:
    data = _explore_data(site)
    context, page, watcher = _open(browser, site, width, "explore.html#family=*")
    try:
        page.wait_for_function("() => document.querySelector('#explore-chart.is-live')",
                               timeout=60_000)
        drawn = page.evaluate(CHARTS_JS)
        curves = int(page.locator("#explore-chart").get_attribute("data-curves"))
    finally:
        context.close()
    (chart,) = drawn
    assert chart["plot"] >= explorecharts.HEIGHT - 0.5, chart["plot"]
    assert curves > 200 and len(chart["names"]) == curves
    assert len(set(chart["names"])) == curves and len(set(chart["keys"])) == curves
    by_slug = {r["slug"]: r for r in data["runs"]}
    for key, name in zip(chart["keys"], chart["names"], strict=True):
        model = by_slug[key]["title"].split(" on ")[0]
        assert name.startswith(model), (name, model)  # "All runs" names lead with the model
    assert watcher.problems() == []


def _expected_curves(data: dict[str, Any], filters: dict[str, str], ctx: int) -> int:
    """Runs of all the site passing the filters that have a point at the context."""
    fields = data["fields"]
    have = {p[0] for p in data["points"] if p[1] == ctx
            and p[fields.index("per_gpu")] is not None and p[fields.index("per_request")]}
    keep = 0
    for i, r in enumerate(data["runs"]):
        ok = all(r[k] == v for k, v in filters.items() if k in ("gpu", "engine", "quantization"))
        ok = ok and (not filters.get("from") or r["date"] >= filters["from"])
        ok = ok and (not filters.get("to") or r["date"] <= filters["to"])
        keep += ok and i in have and bool(r["gpus"])
    return keep


def test_explorer_filters_round_trip_through_the_address(browser: Any, site: Path) -> None:
    data = _explore_data(site)
    gpu = max({r["gpu"] for r in data["runs"]},
              key=lambda g: sum(r["gpu"] == g for r in data["runs"]))
    engine = "vllm"
    dates = sorted(r["date"] for r in data["runs"])
    start = dates[len(dates) // 3]
    context, page, watcher = _open(browser, site, 1440, "explore.html#family=*")
    live = "() => document.querySelector('#explore-chart.is-live')"
    try:
        page.wait_for_function(live, timeout=60_000)
        page.select_option("#ex-gpu", gpu)
        page.select_option("#ex-engine", engine)
        page.fill("#ex-from", start)
        page.locator("#ex-from").dispatch_event("change")
        params = parse_qs(page.evaluate("location.hash").lstrip("#"))
        assert params["gpu"] == [gpu] and params["engine"] == [engine] and params["from"] == [start]
        ctx = int(params["ctx"][0])
        want = _expected_curves(data, {"gpu": gpu, "engine": engine, "from": start}, ctx)
        assert want > 0
        page.wait_for_function(f"() => document.querySelector('#explore-chart').dataset.curves === '{want}'")
        assert "Filters: " in page.locator("#ex-note").inner_text()
        shared = page.url
        # back walks through the filters set, one step each; forward redoes one
        page.go_back()  # before "from"
        page.wait_for_function("() => document.querySelector('#ex-from').value === ''")
        assert "from" not in parse_qs(page.evaluate("location.hash").lstrip("#"))
        assert page.input_value("#ex-engine") == engine
        page.go_back()  # before "engine"
        page.wait_for_function("() => document.querySelector('#ex-engine').value === ''")
        assert page.input_value("#ex-gpu") == gpu
        want_gpu = _expected_curves(data, {"gpu": gpu}, ctx)
        page.wait_for_function(
            f"() => document.querySelector('#explore-chart').dataset.curves === '{want_gpu}'")
        page.go_forward()
        page.wait_for_function(f"() => document.querySelector('#ex-engine').value === '{engine}'")
        # the shared address opens the same view in a fresh page
        page.goto("about:blank")
        page.goto(shared)
        page.wait_for_function(live, timeout=60_000)
        assert page.input_value("#ex-gpu") == gpu and page.input_value("#ex-engine") == engine
        assert page.input_value("#ex-from") == start
        page.wait_for_function(
            f"() => document.querySelector('#explore-chart').dataset.curves === '{want}'")
        # a value no run has is said, not applied
        page.goto(shared.split("#")[0] + "#family=*&gpu=NoSuchGPU")
        page.wait_for_function(live, timeout=60_000)
        assert "gpu \u201cNoSuchGPU\u201d" in page.locator("#ex-note").inner_text()
        assert page.input_value("#ex-gpu") == ""
    finally:
        context.close()
    assert watcher.problems() == []


def test_compare_pickers_tell_runs_of_one_setup_apart(browser: Any, site: Path) -> None:
    html = (site / "compare.html").read_text("utf-8")
    options = re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>',
                         html[html.index('id="ab-a"'):html.index("</select>", html.index('id="ab-a"'))])
    slugs = [v for v, _ in options]
    names = [n for _, n in options]
    assert len(options) == 300 and len(set(slugs)) == 300
    assert len(set(names)) == 300  # a distinct name per run, the slug as the value
    data = _explore_data(site)
    by_slug = {r["slug"]: r for r in data["runs"]}
    # two runs of one setup (same model, GPU, engine, quantization), differing by date
    groups: dict[tuple[str, ...], list[str]] = {}
    for r in data["runs"]:
        groups.setdefault((r["title"], r["engine"], r["quantization"]), []).append(r["slug"])
    a, b = next(g for g in groups.values() if len(g) > 1)[:2]
    context, page, watcher = _open(browser, site, 1440, f"compare.html#a={a}&b={b}")
    try:
        page.wait_for_function("() => document.querySelector('#ab-chart.is-live')", timeout=60_000)
        chart = page.evaluate(CHARTS_JS)[0]
        assert chart["keys"] == [a, b]
        assert chart["names"][0] != chart["names"][1]
        assert chart["names"][0].endswith(names[slugs.index(a)])
        assert by_slug[a]["title"] == by_slug[b]["title"]
    finally:
        context.close()
    assert watcher.problems() == []
