"""GPU telemetry on the site's pages: the matrix tooltip, the drill-down's power
and clocks timeline, the glossary links and tok/s per kW on the A/B data, all
only for runs that recorded telemetry (nothing invented for the others)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from rundir import contract, energy, io
from site_builder import drillcharts, drilldown
from tests.support.chromium import parse_html
from tests.support.synthetic_runs import make_measured_run

S = 1_000_000_000
STEP = S // 10  # 10 Hz
WATTS, MHZ = 250.0, 1500


def _write_telemetry(run: Path, bits: int) -> None:
    """Two GPUs at WATTS each and MHZ SM clock over the whole run, 10 Hz, with the counter."""
    req = io.read_table(run, contract.REQUESTS_FILE)
    t0 = min(req.column("send_ns").to_pylist()) - S
    t1 = max(v for v in req.column("end_ns").to_pylist() if v is not None) + S
    rows = [{"t_ns": t0 + i * STEP, "gpu": g, "gpu_name": "Test GPU", "power_w": WATTS,
             "energy_mj": round(1e6 + WATTS * i * 100), "sm_clock_mhz": MHZ,
             "throttle_reasons": bits}
            for i in range((t1 - t0) // STEP + 2) for g in range(2)]
    schema = contract.GPU_METRICS_SCHEMA
    table = pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in schema})
    io.write_table(run, contract.GPU_METRICS_FILE, table)


KW = dict(contexts=[1024], concurrency=[1, 2], prefill_contexts=[1024], prefill_repeats=2)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hot and warm have telemetry (hot power-capped), cold has none."""
    from site_builder.publish import build_site

    root = tmp_path_factory.mktemp("energy_pages")
    data = root / "data"
    hot = make_measured_run(data / "hot", run_id="hot", **KW)
    warm = make_measured_run(data / "warm", run_id="warm", seed=2, **KW)
    make_measured_run(data / "cold", run_id="cold", seed=1, **KW)
    _write_telemetry(hot, energy.NVML_GPU_IDLE | energy.NVML_SW_POWER_CAP)
    _write_telemetry(warm, 0)
    report = build_site(data, root / "site")
    assert report.errors == []
    return root / "site"


def _page(site: Path, rel: str):
    return parse_html((site / rel).read_text(encoding="utf-8"))


def _matrix_titles(site: Path, slug: str) -> list[str]:
    doc = _page(site, f"runs/{slug}/index.html")
    titles = [a.attrs.get("title", "") for a in doc.find("table", "matrix").find_all("a")]
    return [t for t in titles if t.startswith("Details of")]


def test_matrix_tooltip_gains_energy_only_with_telemetry(site: Path) -> None:
    hot = _matrix_titles(site, "hot")
    assert len(hot) == 2
    for title in hot:
        assert re.search(r"Details of 1K × [12] · [0-9.]+ J/token · 500 W avg · "
                         r"throttling: power-capped$", title), title
    assert all(t.endswith("throttling: none") for t in _matrix_titles(site, "warm"))
    cold = _matrix_titles(site, "cold")
    assert cold and all("J/token" not in t and " W avg" not in t for t in cold)


def _cell_pages(site: Path, slug: str) -> list[Path]:
    return sorted((site / f"runs/{slug}/cells").glob("decode-*.html"))


def test_power_timeline_on_the_decode_drilldown_only_with_telemetry(site: Path) -> None:
    pages = _cell_pages(site, "hot")
    assert pages
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert 'id="chart-power"' in html and 'id="chart-timeline"' in html
        assert "GPU power (W)" in html and "SM clock (MHz)" in html
        assert "<svg" in html.split('id="chart-power"', 1)[1]  # the no-JS fallback drawn
    for page in _cell_pages(site, "cold"):
        html = page.read_text(encoding="utf-8")
        assert 'id="chart-timeline"' in html and 'id="chart-power"' not in html
        assert "GPU power" not in html


def test_energy_headers_link_to_their_glossary_entries(site: Path) -> None:
    doc = _page(site, "runs/hot/index.html")
    head = doc.find("table", "measurements").find("thead")
    links = {a.text(): a.attrs.get("href", "") for a in head.find_all("a")}
    for name, key in (("J/token", "j-per-token"), ("Avg W", "avg-w"), ("Throttling", "throttling")):
        assert links[name].endswith(f"methodology.html#term-{key}"), links
    glossary = (site / "methodology.html").read_text(encoding="utf-8")
    for key in ("j-per-token", "avg-w", "throttling"):
        assert f'id="term-{key}"' in glossary
    assert "10%" in glossary


def _ab_data(site: Path, slug: str) -> dict:
    text = (site / f"runs/{slug}/data.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("] = ") + 4:].rstrip().rstrip(";"))


def test_per_kw_comparison_data_only_for_runs_with_telemetry(site: Path) -> None:
    hot, cold = _ab_data(site, "hot"), _ab_data(site, "cold")
    assert hot["telemetry"] is True and cold["telemetry"] is False
    assert "tok_s_per_kw" in hot["fields"] and "tok_s_per_kw" not in cold["fields"]
    assert all(len(row) == len(cold["fields"]) for row in cold["cells"])
    i = hot["fields"].index("tok_s_per_kw")
    decode = [row for row in hot["cells"] if row[0] == contract.DECODE]
    for row in decode:
        cell = dict(zip(hot["fields"], row, strict=True))
        assert cell["tok_s_per_kw"] == pytest.approx(cell["total_tok_s"] / 0.5, rel=1e-6)
    assert all(len(row) == len(hot["fields"]) for row in hot["cells"]) and i > 0
    (script_path,) = (site / "static").glob("compare.*.js")
    script = script_path.read_text(encoding="utf-8")
    assert "runs[0].telemetry && runs[1].telemetry" in script


def test_power_timeline_shares_the_token_timeline_bins() -> None:
    """Same bins as the token timeline; a bin some GPU has no reading in gets no total."""
    start, end = 10 * S, 20 * S
    rows = [(t, g) for t in range(9 * S, 21 * S + 1, STEP) for g in (0, 1)
            if not (g == 1 and 12 * S <= t < 13 * S)]  # GPU 1 silent from 12 to 13 s
    table = pa.table({
        "t_ns": pa.array([t for t, _ in rows], pa.int64()),
        "gpu": pa.array([g for _, g in rows], pa.int32()),
        "power_w": pa.array([100.0 + 50 * g for _, g in rows], pa.float64()),
        "sm_clock_mhz": pa.array([1000 + 200 * g for _, g in rows], pa.int32()),
    })
    pw = drilldown.power_timeline(table, start, end)
    assert pw["t_s"][:3] == [0.0, 0.5, 1.0] and len(pw["t_s"]) == 20 and pw["gpus"] == 2
    assert pw["power_w"][0] == 250.0 and pw["sm_clock_mhz"][0] == 1100
    assert pw["power_w"][4] is None and pw["sm_clock_mhz"][4] == 1000  # 12.0–12.5 s
    chart = drillcharts.power_chart({"power": pw})
    assert chart is not None and chart.spec["vconcat"][0]["encoding"]["x"]["scale"]["domain"] == [0, 10.0]
    assert drilldown.power_timeline(None, start, end) is None
    assert drilldown.power_timeline(table.slice(0, 0), start, end) is None
    assert drillcharts.power_chart({"power": None}) is None


MARKS_JS = """(id) => document.querySelectorAll('#' + id + ' .chart-live svg .role-mark > *').length"""


@pytest.mark.browser
def test_in_the_browser_power_chart_draws_and_per_kw_shows_only_when_both_have_telemetry(
        browser, site: Path) -> None:
    from tests.support.chromium import Watcher, wait_for_charts

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    try:
        cell = _cell_pages(site, "hot")[0].relative_to(site).as_posix()
        page.goto(watcher.site_root + cell, wait_until="load")
        wait_for_charts(page)
        assert page.evaluate(MARKS_JS, "chart-power") > 0
        page.goto(watcher.site_root + "compare.html#a=hot&b=warm&m=total_tok_s")
        page.locator("#ab-per-kw table.matrix").wait_for()
        deltas = page.locator("#ab-per-kw .delta").all_inner_texts()
        assert deltas and all(d.endswith("%") for d in deltas)
        page.goto(watcher.site_root + "compare.html#a=hot&b=cold&m=total_tok_s")
        page.reload()
        page.locator("#ab-result table.matrix").first.wait_for()
        assert page.locator("#ab-per-kw").count() == 0
        assert watcher.problems() == []
    finally:
        context.close()


def _throttle_answer(site: Path, run: str) -> str:
    section = _page(site, f"runs/{run}/index.html").find("section", id="throttling")
    return " ".join(section.text().split())


def test_every_run_page_answers_power_capped_or_throttled(site: Path) -> None:
    hot = _throttle_answer(site, "hot")
    assert "Yes: Power-capped" in hot and "in 2 of 2 decode cells with readings" in hot
    assert "1K × 1, 1K × 2" in hot and "more than 10%" in hot
    assert "No: not power-capped or throttled" in _throttle_answer(site, "warm")
    cold = _throttle_answer(site, "cold")
    assert "No GPU telemetry recorded" in cold and "cannot be told" in cold


def test_an_imported_run_says_why_it_cannot_answer(tmp_path: Path) -> None:
    from site_builder.publish import build_site
    from tests.support.synthetic_runs import make_imported_run

    cells = [{"phase": contract.DECODE, "context": 1024, "concurrency": 1,
              "status": contract.VALID, "total_tok_s": 50.0, "per_request_tok_s": 50.0,
              "ttft_ms": 90.0, "completed": 4, "output_tokens": 100, "measured_s": 30.0}]
    make_imported_run(tmp_path / "data/imp", run_id="imp", cells=cells)
    assert build_site(tmp_path / "data", tmp_path / "site").errors == []
    text = _throttle_answer(tmp_path / "site", "imp")
    assert "No GPU telemetry recorded" in text and "imported from a published page" in text
