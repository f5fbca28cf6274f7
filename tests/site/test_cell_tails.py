"""The decode drill-down's percentiles: every level in a table without JavaScript,
and the CDFs of TTFT and time between tokens with each published level marked
at its exact value (live spec and no-JS picture alike)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from rundir import tails
from site_builder import chartkit, drilldown, fallback, formats, metrictable
from site_builder.aggregate import AggregateCache, CellResult, RunAggregate
from site_builder.publish import build_site
from tests.support.chromium import Node, parse_html
from tests.support.synthetic_runs import make_measured_run

RUN = "tails"
FEW, MANY = 8, 16  # requests at once: 10-19 TTFT samples, and over 20


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tails")
    make_measured_run(root / "data" / RUN, run_id=RUN, contexts=[1024], concurrency=[FEW, MANY],
                      duration_s=2.0, seed=3)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache")
    assert report.errors == []
    return root


def _cached(root: Path) -> Path:
    """The run's cached aggregate (its details lie beside it)."""
    (path,) = [p for p in (root / "cache").rglob("*.json") if re.fullmatch(r"[0-9a-f]{64}\.json", p.name)]
    return path


def _aggregate(root: Path) -> RunAggregate:
    path = _cached(root)
    agg = RunAggregate.from_json(path.read_text(encoding="utf-8"))
    agg.details = AggregateCache(path.parent).details(path.stem)
    return agg


def _cell(root: Path, key: str) -> CellResult:
    return next(x for x in _aggregate(root).cells if x.key == key)


def _page(root: Path, key: str, site: str = "site") -> Node:
    return parse_html((root / site / "runs" / RUN / "cells" / f"{key}.html").read_text(encoding="utf-8"))


def _table(doc: Node) -> dict[str, list[str]]:
    """Row header (its term) -> the row's cells (p50 … p99.9, samples)."""
    table = doc.find("table", "tails")
    out = {}
    for tr in table.find("tbody").find_all("tr"):
        head = tr.find("th")
        links = head.find_all("a", "term")
        out[links[0].text() if links else head.text()] = [td.text() for td in tr.find_all("td")]
    return out


def _spec(doc: Node, chart_id: str) -> dict:
    return json.loads(doc.find("figure", id=chart_id).find("script", "chart-spec").text())


def test_table_shows_every_level_as_the_cell_holds_it(built: Path) -> None:
    for key in (f"decode-1024-{FEW}", f"decode-1024-{MANY}"):
        cell = _cell(built, key)
        rows = _table(_page(built, key))
        assert list(rows) == ["TTFT", "Time between tokens", "Per request tok/s", "End-to-end latency"]
        heads = _page(built, key).find("table", "tails").find("thead").find_all("th")
        assert [h.text() for h in heads] == ["Metric", *tails.LEVELS, "Samples"]
        for metric in tails.METRICS:
            record = next(m for m in metrictable.TABLE if m.key == metric.key)
            header = record.header
            want = [record.fmt(cell.tails[metric.column(lv)]) for lv in tails.LEVELS]
            assert rows[header][:-1] == want, (key, header)
            assert rows[header][-1] == formats.count(cell.tails[metric.count_column()])
        # p50 is the published median, the figure above the table
        assert rows["TTFT"][0] == formats.ttft(cell.ttft_ms)
        assert rows["Time between tokens"][0] == formats.tbt(cell.tbt_ms)


def test_too_few_samples_read_missing_with_the_rule_stated(built: Path) -> None:
    cell = _cell(built, f"decode-1024-{FEW}")
    n = cell.tails[tails.TTFT.count_column()]
    assert tails.MIN_SAMPLES["p90"] <= n < tails.MIN_SAMPLES["p95"]  # the cell this test needs
    doc = _page(built, f"decode-1024-{FEW}")
    ttft = _table(doc)["TTFT"]
    assert ttft[1] != formats.MISSING and ttft[2:5] == [formats.MISSING] * 3
    assert ttft[5] == str(n)
    rule = doc.find("p", "tails-rule").text()
    assert "p90 10, p95 20, p99 100, p99.9 1,000" in rule
    # The rate's levels are its slow side, and its row says which ranks they are.
    head = doc.find("table", "tails").find("tbody").find_all("tr")[2].find("th").text()
    assert "p50, p10, p5, p1, p0.1" in head
    # Each row's glossary link says what the row holds, not the median its term means elsewhere.
    for th in (tr.find("th") for tr in doc.find("table", "tails").find("tbody").find_all("tr")):
        hover = th.find("a", "term").attrs["title"]
        assert hover.endswith("of each request, at each percentile of them (p50: the published "
                              "median)."), hover


def test_prefill_table_has_ttft_only(built: Path) -> None:
    rows = _table(_page(built, "prefill-1024-1"))
    assert list(rows) == ["TTFT"]
    cell = _cell(built, "prefill-1024-1")
    assert rows["TTFT"][0] == formats.ttft(cell.ttft_ms)
    assert rows["TTFT"][1:5] == [formats.MISSING] * 4  # one cold sample


def test_cdf_marks_sit_at_the_exact_published_values(built: Path) -> None:
    key = f"decode-1024-{MANY}"
    cell, doc = _cell(built, key), _page(built, key)
    per_request = _aggregate(built).details[key]["per_request"]
    for chart_id, metric in (("chart-ttft-cdf", tails.TTFT), ("chart-tbt-cdf", tails.TBT)):
        spec = _spec(doc, chart_id)
        marks = spec["datasets"]["marks"]
        shown = [lv for lv in tails.LEVELS if cell.tail(metric.key, lv) is not None]
        assert len(shown) >= 2
        assert [m["x"] for m in marks] == [cell.tail(metric.key, lv) for lv in shown]
        assert [m["label"].split()[0] for m in marks] == shown
        # The curve is the very samples behind the table: one step per request.
        samples = sorted(v for v in per_request[metric.key] if v is not None)
        steps = spec["datasets"]["steps"]
        assert steps[0] == {"x": samples[0], "y": 0.0} and steps[-1] == {"x": samples[-1], "y": 1.0}
        assert len(samples) == cell.tails[metric.count_column()]
        # The no-JS picture: the step line and one dashed rule per published level.
        svg = doc.find("figure", id=chart_id).find("div", "chart-fallback")
        assert svg.find("svg") is not None
        html = (built / "site" / "runs" / RUN / "cells" / f"{key}.html").read_text(encoding="utf-8")
        part = html.split(f'id="{chart_id}"')[1].split("</figure>")[0]
        rules = re.findall(r'<path d="M[\d.]+ [\d.]+V[\d.]+" stroke="[^"]+" stroke-width="[^"]+" '
                           r'stroke-dasharray', part)
        assert len(rules) == len(shown)


def test_units_are_said_on_the_page(built: Path) -> None:
    doc = _page(built, f"decode-1024-{MANY}")
    text = doc.find("p", "distribution-units").text()
    assert "count requests" in text and "token gaps" in text
    assert "one sample per request" in doc.find("figure", id="chart-tbt-cdf").find("figcaption").text()


def test_without_per_request_data_the_page_says_so(built: Path) -> None:
    """An aggregate from before the tails (no per-request lists, no tails): no table of
    dashes, no CDF, one line saying the data is not there."""
    cache, path = built / "cache", _cached(built)
    data = json.loads(path.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        cell["tails"] = {}
    path.write_text(json.dumps(data), encoding="utf-8")
    details_path = path.with_name(path.stem + ".details.json")
    details = json.loads(details_path.read_text(encoding="utf-8"))
    for d in details.values():
        d.pop("per_request", None)
    details_path.write_text(json.dumps(details), encoding="utf-8")
    report = build_site(built / "data", built / "old-site", cache_dir=cache)
    assert report.errors == []
    doc = _page(built, f"decode-1024-{MANY}", "old-site")
    assert doc.find_all("table", "tails") == []
    assert "not available" in doc.find("p", "tails-missing").text()
    assert doc.find_all("figure", id="chart-ttft-cdf") == [] == doc.find_all("figure", id="chart-tbt-cdf")
    assert doc.find("figure", id="chart-tbt") is not None  # the token-gap histogram stays


# --------------------------------------------------------------------------
# the curve and its picture, on known samples
# --------------------------------------------------------------------------


def _ecdf(samples: np.ndarray, x: float) -> float:
    return float(np.count_nonzero(samples <= x)) / len(samples)


def test_small_cdf_is_exact_with_ties() -> None:
    values = [3.0, 1.0, None, 2.0, 2.0, 5.0]
    steps = drilldown.cdf_steps(values, [2.0], log=False)
    assert steps == [(1.0, 0.0), (1.0, 0.2), (2.0, 0.6), (3.0, 0.8), (5.0, 1.0)]


@pytest.mark.parametrize("log", [False, True])
def test_large_cdf_is_thinned_keeping_extremes_and_levels(log: bool) -> None:
    rng = np.random.default_rng(7)
    samples = np.round(rng.lognormal(4, 1.2, 100_000), 3)
    marks = [float(np.percentile(samples, tails.TTFT.rank(lv))) for lv in tails.LEVELS]
    steps = drilldown.cdf_steps(samples.tolist(), marks, log=log)
    assert len(steps) <= 400
    ordered = np.sort(samples)
    assert steps[0] == (ordered[0], 0.0) and steps[-1] == (ordered[-1], 1.0)
    xs = {x for x, _ in steps}
    for m in marks:  # the exact steps either side of every level are kept
        at = int(np.searchsorted(ordered, m))
        assert ordered[at] in xs and ordered[at - 1] in xs, m
    for x, y in steps[1:]:  # every corner is the true share at its x ...
        assert y == round(_ecdf(ordered, x), 5)
    for (x0, y0), (x1, _) in zip(steps, steps[1:], strict=False):  # ... and held below it
        assert y0 <= _ecdf(ordered, (x0 + x1) / 2) + 1e-9


def test_fallback_rules_are_drawn_at_the_marks() -> None:
    domain, values = fallback.log_axis(3.0, 900.0)
    assert domain == (2.0, 1000.0) and values == [10.0, 100.0, 1000.0]  # over 200x: decades
    assert fallback.log_axis(12.0, 900.0) == ((10.0, 1000.0), [10, 20, 50, 100, 200, 500, 1000])
    marks = [(12.5, "p50 13 ms", 0.06, False), (640.0, "p99 640 ms", 0.33, True)]
    svg = fallback.cdf("t", [(3.0, 0.0), (12.5, 0.5), (900.0, 1.0)], marks, chartkit.TTFT_CDF,
                       domain=domain, ticks=[(v, fallback.tick_text(v)) for v in values], log=True)
    span = (60, 500)
    for x, text, _, left in marks:
        at = (np.log(x) - np.log(domain[0])) / (np.log(domain[1]) - np.log(domain[0]))
        px = span[0] + at * (span[1] - span[0])
        assert f'<path d="M{px:.1f} 10.0V{10 + fallback.CDF_HEIGHT:.1f}"' in svg
        assert f'text-anchor="{"end" if left else "start"}"' in svg and text in svg
    assert not fallback.UNSAFE.search(svg)

