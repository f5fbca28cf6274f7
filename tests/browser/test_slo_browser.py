"""The latency limits in a real browser (slo.js, oppoint.js, explore.js): the reader
changes them on the index, the ranking under them and the address follow, a reload
keeps them, and the explorer draws its frontier through the cells meeting them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rundir.io import read_run
from rundir.slugs import unique_slugs
from site_builder import explore, oppoint, slo
from site_builder.aggregate import aggregate_run
from site_builder.publish import build_site
from site_builder.views import RunView
from tests.support.chromium import Watcher, require_chromium
from tests.support.synthetic_runs import make_sample_data

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("slo-site")
    report = build_site(make_sample_data(root / "data"), root / "site", cache_dir=root / "cache",
                        jobs=1)
    assert report.errors == []
    return root / "site"


@pytest.fixture
def session(browser: Any, site: Path) -> Iterator[tuple[Any, Watcher]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    yield watcher.watch(context.new_page()), watcher
    context.close()


def _oppoint_data(site: Path) -> dict[str, Any]:
    """The ranking data of the family the index opens on (its chooser's selected
    option), from the file the page loads on demand (data/oppoint/<family>.js)."""
    html = (site / "index.html").read_text("utf-8")
    family = re.search(r'<option value="([^"]+)" data-default-at="[^"]*" selected>', html)
    assert family is not None
    text = (site / "data" / "oppoint" / f"{family.group(1)}.js").read_text("utf-8")
    return json.loads(text[text.index("] = ") + 4:].strip().rstrip(";"))


def _expected(site: Path, data: dict[str, Any], limits: slo.Slo) -> list[tuple[str, str]]:
    """The build's rule (oppoint.slo_rank, by total tok/s) on the runs the page ranks,
    read from the site's data folder: per run its best cell meeting the limits, or why
    none does (slo.none_meets)."""
    dirs = sorted(p for p in (site.parent / "data").iterdir() if p.is_dir())
    runs = [read_run(p) for p in dirs]
    slugs = unique_slugs([r.info.run_id for r in runs])
    shown = {r["slug"] for r in data["runs"]}
    views = [RunView(r.info, aggregate_run(r), slug)
             for r, slug in zip(runs, slugs, strict=True) if slug in shown]
    assert len(views) == len(shown)
    return [(e.run.slug, oppoint.Point(e.cell.context, e.cell.concurrency).label if e.cell
             else slo.none_meets(e.run.agg.cells, limits))
            for e in oppoint.slo_rank(views, limits, "total")]


def _shown(page: Any) -> list[tuple[str, str]]:
    rows = page.evaluate("""() => Array.from(document.querySelectorAll(
        '#slo-rank-table tbody tr')).map(tr => [tr.dataset.slug, tr.cells[1].textContent])""")
    return [tuple(r) for r in rows]


def test_changing_the_limits_reranks_keeps_the_address_and_survives_a_reload(
        session: tuple[Any, Watcher], site: Path) -> None:
    page, watcher = session
    data = _oppoint_data(site)
    page.goto(watcher.site_root + "index.html#sloby=total")
    page.wait_for_selector("#slo-rank .slo-form")
    assert _shown(page) == _expected(site, data, slo.DEFAULT)
    # a TTFT limit between two measured medians: some cells meet it, some do not
    medians = sorted({c["lv"]["ttft"][0] for r in data["runs"] for c in r["cells"]
                      if c.get("lv") and c["lv"]["ttft"][0] is not None})
    assert len(medians) > 3
    cut = (medians[len(medians) // 2] + medians[len(medians) // 2 + 1]) / 2
    limits = slo.parse(f"ttft_p50={cut}")
    form = page.locator("#slo-rank .slo-form")
    form.locator("select[name=tbt_level]").select_option("")
    form.locator("select[name=ttft_level]").select_option("p50")
    form.locator("input[name=ttft_ms]").fill(str(cut))
    want = _expected(site, data, limits)
    assert want != _expected(site, data, slo.DEFAULT)
    page.wait_for_function(f"() => location.hash.includes({json.dumps('slo=ttft_p50%3D')})")
    assert _shown(page) == want
    assert "sloby=total" in page.evaluate("location.hash")  # the other script's key kept
    assert page.locator("#slo-rank-limits").inner_text().startswith("TTFT p50 ≤ ")
    page.reload()
    page.wait_for_selector("#slo-rank .slo-form")
    assert _shown(page) == want
    assert form.locator("select[name=ttft_level]").input_value() == "p50"
    assert float(form.locator("input[name=ttft_ms]").input_value()) == pytest.approx(cut)
    # the site default again: the address loses the key
    form.locator("button[name=reset]").click()
    page.wait_for_function("() => !location.hash.includes('slo=')")
    assert _shown(page) == _expected(site, data, slo.DEFAULT)
    assert watcher.problems() == []


def test_explorer_draws_the_frontier_through_the_cells_meeting_the_limits(
        session: tuple[Any, Watcher], site: Path) -> None:
    page, watcher = session
    text = (site / "data" / "explore.js").read_text("utf-8")
    data = json.loads(text[text.index("=") + 1:].strip().rstrip(";"))
    limits = slo.parse("tbt_p50=11.5")
    want = explore.slo_frontier(data, "*", 1024, "total", limits)
    plain = data["frontiers"]["*|1024|total"]
    assert want and want != plain  # the limits move the frontier in this sample
    page.goto(watcher.site_root + "explore.html#family=*&ctx=1024&y=total&view=tradeoff"
              "&logx=0&logy=0&under=1&slo=tbt_p50%3D11.5")
    page.wait_for_function("() => document.querySelector('#explore-chart')"
                           ".classList.contains('is-live')", timeout=15_000)
    drawn = page.evaluate("""() => document.querySelector('#explore-chart .chart-live')
        ._view.view.data('frontier').length""")
    assert drawn == len(want)
    assert page.locator("#ex-under").is_checked() and page.locator("#ex-slo").is_visible()
    dim = page.evaluate("""() => document.querySelector('#explore-chart .chart-live')
        ._view.view.data('points').filter(r => r.dim).length""")
    assert dim > 0
    page.uncheck("#ex-under")
    page.wait_for_function("() => !location.hash.includes('under=1')")
    assert "slo=tbt_p50%3D11.5" in page.evaluate("location.hash")  # slo.js's key kept
    assert watcher.problems() == []


def test_the_percentile_switches_the_rankings_ttft_and_per_request_columns(
        session: tuple[Any, Watcher], site: Path) -> None:
    page, watcher = session
    data = _oppoint_data(site)
    page.goto(watcher.site_root + "index.html#pct=p90&sloby=total")
    page.wait_for_selector("#oppoint-table")
    heads = page.locator("#oppoint-table thead th").all_inner_texts()
    assert "TTFT (p90)" in heads and "Per request tok/s (p90)" in heads
    # each run's TTFT cell prints its p90 text from the data (— where too few requests)
    col = heads.index("TTFT (p90)")
    shown = page.evaluate(f"""() => Object.fromEntries(Array.from(document.querySelectorAll(
        '#oppoint-table tbody tr')).map(tr => [tr.dataset.slug, tr.cells[{col}].textContent]))""")
    texts = {t for r in data["runs"] for c in r["cells"] if c.get("lt")
             for t in [c["lt"]["ttft"][1]]}
    assert set(shown.values()) <= texts | {data["missing"]}
    assert "TTFT (p90)" in page.locator("#slo-rank-table thead").inner_text()
    # the selector's event: back to the median, the published columns
    page.evaluate("""() => { history.replaceState(null, '', '#sloby=total');
        document.dispatchEvent(new CustomEvent('sm-tail', {detail: {level: 'p50'}})); }""")
    heads = page.locator("#oppoint-table thead th").all_inner_texts()
    assert "TTFT" in heads and "TTFT (p90)" not in heads
    assert watcher.problems() == []
