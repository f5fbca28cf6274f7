"""Rate cells on the site: the exact figures from a run whose every request is
known (tests/support/rate_runs.py), the knee, the status with its word and
link, the download columns, and nothing of it for runs without."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from rundir import contract
from site_builder import load, rate, raterank, slo
from site_builder.aggregate import RunAggregate, aggregate_run
from site_builder.publish import build_site
from tests.support import rate_runs
from tests.support.synthetic_runs import make_measured_run

COLUMNS = ["rate_target", "rate_achieved", "send_lag_ms_p50", "send_lag_ms_p99", "arrivals"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rate")
    rate_runs.add_rate(make_measured_run(root / "data" / "with", run_id="with-rate",
                                         contexts=[1024], concurrency=[1, 2]))
    make_measured_run(root / "data" / "without", run_id="plain", contexts=[1024],
                      concurrency=[1, 2], seed=3)
    report = build_site(root / "data", root / "out", jobs=1)
    assert report.errors == []
    return root / "out"


def _text(html: str, section: str) -> str:
    m = re.search(rf'<section id="{section}".*?</section>', html, re.S)
    assert m, section
    body = re.sub(r"<(script|svg)\b.*?</\1>", "", m.group(0), flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", body).split())


def _cells(tmp_path: Path) -> list[rate.RateCell]:
    run = rate_runs.add_rate(make_measured_run(tmp_path / "r", run_id="r", contexts=[1024],
                                               concurrency=[1]))
    agg = aggregate_run(load.load_run(load.RunSource(run, "d")), "d")
    assert agg.traffic == []  # rate cells are not prefix or conversation cells
    assert RunAggregate.from_json(agg.head().to_json()).rate == agg.rate  # the cache keeps them
    return agg.rate


def test_the_figures_come_from_the_requests(tmp_path: Path) -> None:
    got = {c.rate_target: c for c in _cells(tmp_path)}
    assert sorted(got) == [1.0, 2.0, 4.0, 8.0]
    one, four, eight = got[1.0], got[4.0], got[8.0]
    assert (one.scheduled, one.sent, one.rate_achieved, one.rate_uncertainty) == (20, 20, 1.0, 0.0)
    assert one.send_lag_ms_p50 == pytest.approx(0.2) and one.load_problems == []
    assert one.completed_rps == 1.0 and one.output_tok_s == pytest.approx(17.0)
    assert one.tail("ttft_ms", "p90") == pytest.approx(100.0)
    assert one.tail("ttft_ms", "p99") is None  # 20 requests: p99 needs 100
    assert one.tail("tbt_ms", "p50") == pytest.approx(10.0)
    # the server fell behind: the span stretches past the window, TTFT grows by 50 ms a request
    assert four.span_s == pytest.approx(rate_runs.SPAN_4)
    assert four.completed_rps == pytest.approx(80 / rate_runs.SPAN_4)
    assert four.tail("ttft_ms", "p50") == pytest.approx(100 + 50 * 39.5)
    assert four.tail("ttft_ms", "p90") == pytest.approx(100 + 50 * 79 * 0.9)
    # the client lagged 50 ms: the builder's own check finds it, TTFT from schedule holds it
    assert eight.send_lag_ms_p99 == pytest.approx(50.0)
    assert eight.load_problems and "50 ms" in eight.load_problems[0]
    assert eight.tail("ttft_ms", "p99") == pytest.approx(100.0)
    assert eight.tail("ttft_sched_ms", "p99") == pytest.approx(150.0)


def test_the_knee(tmp_path: Path) -> None:
    judged = {c.rate_target: rate.judge(c, slo.DEFAULT) for c in _cells(tmp_path)}
    assert [r for r, j in judged.items() if j.sustained] == [1.0, 2.0]
    assert not judged[4.0].keeps_up and not judged[4.0].verdict.meets
    # 8/s completed and met the SLO, but its load was not delivered: never the knee
    assert judged[8.0].keeps_up and judged[8.0].verdict.meets and not judged[8.0].sustained
    assert rate.knee(list(judged.values())).cell.rate_target == rate_runs.KNEE
    assert judged[4.0].goodput.met == 39 and judged[4.0].goodput.requests == 80
    # a looser SLO moves the knee no further: 4/s still completes too little
    loose = [rate.judge(c, slo.parse("ttft_p90=10000")) for c in _cells(tmp_path / "2")]
    assert rate.knee(loose).cell.rate_target == rate_runs.KNEE
    strict = [rate.judge(c, slo.parse("ttft_p50=50")) for c in _cells(tmp_path / "3")]
    assert rate.knee(strict) is None


def test_run_page_shows_the_curve(site: Path) -> None:
    html = (site / "runs" / "with-rate" / "index.html").read_text()
    text = _text(html, "request-rate")
    assert "1K context, no cap on requests in flight · knee 2/s" in text
    assert "1/s 1/s 0.20 ms 0.20 ms 1/s 17.0 100 ms 100 ms — — 10.0 ms — 100.0% Valid" in text
    assert "2/s knee 2/s 0.20 ms 0.20 ms 2/s 34.0 100 ms 100 ms — — 10.0 ms — 100.0% Valid" in text
    assert "4/s 4/s 0.20 ms 0.20 ms 3.32/s 56.5 2,075 ms 3,655 ms — — 10.0 ms — 48.8% Valid" in text
    assert ("8/s 8/s 50.0 ms 50.0 ms 7.9/s 134.3 100 ms 100 ms 100 ms 150 ms 10.0 ms 10.0 ms "
            f"100.0% Load not delivered : {rate_runs.LAG_REASON}") in text
    assert "counts in its TTFT from schedule" in text  # client-side queueing, said
    assert '<a href="../../methodology.html#load-not-delivered">Load not delivered</a>' in html
    assert 'td class="st-load_not_delivered"' in html
    for chart_id in ("chart-rate-throughput", "chart-rate-ttft"):
        m = re.search(rf'id="{chart_id}".*?<div class="chart-fallback">(.*?)</div>\s*<script '
                      r'type="application/json" class="chart-spec">(.*?)</script>', html, re.S)
        assert m and "<svg" in m.group(1), chart_id  # the no-JS picture
        spec = json.loads(m.group(2))
        rows = spec["datasets"]["cells"]
        assert {r["series"] for r in rows} == {"1K (knee 2/s)"} and "1K (knee 2/s)" in m.group(1)
        assert [r["x"] for r in rows if r["Knee"]] == [2.0]
    methodology = (site / "methodology.html").read_text()
    assert 'id="the-knee"' in methodology and 'id="load-not-delivered"' in methodology


def test_downloads_carry_the_rate_columns(site: Path) -> None:
    rows = list(csv.DictReader((site / "runs" / "with-rate" / "cells.csv").open()))
    assert list(rows[0])[-5:] == COLUMNS
    got = {float(r["rate_target"]): r for r in rows if r["phase"] == contract.RATE}
    assert sorted(got) == [1.0, 2.0, 4.0, 8.0]
    assert got[8.0]["status"] == contract.LOAD_NOT_DELIVERED
    assert float(got[8.0]["send_lag_ms_p99"]) == pytest.approx(50.0)
    assert float(got[1.0]["rate_achieved"]) == 1.0 and got[1.0]["arrivals"] == "constant"
    assert float(got[4.0]["ttft_ms_p90"]) == pytest.approx(3655.0)
    assert float(got[4.0]["slo_met_share"]) == pytest.approx(39 / 80)
    assert all(r["rate_target"] == "" for r in rows if r["phase"] != contract.RATE)
    data = json.loads((site / "runs" / "with-rate" / "cells.json").read_text())
    records = data if isinstance(data, list) else data.get("cells", data)
    assert any(isinstance(r, dict) and r.get("rate_target") == 2.0 for r in records)


def test_runs_without_rate_cells_unchanged(site: Path) -> None:
    html = (site / "runs" / "plain" / "index.html").read_text()
    assert 'id="request-rate"' not in html
    header = next(csv.reader((site / "runs" / "plain" / "cells.csv").open()))
    assert not set(COLUMNS) & set(header)


# ---- ranked by the rate sustained under the SLO, and the rate curve's download ----------
def _run(slug: str, cells: list[rate.RateCell]) -> SimpleNamespace:
    """What raterank reads of a run: its rate cells (and a slug to tell it by)."""
    return SimpleNamespace(slug=slug, agg=SimpleNamespace(rate=cells))


def test_sustained_rate_is_the_highest_knee_of_a_contexts_curves(tmp_path: Path) -> None:
    cells = _cells(tmp_path)
    assert {ctx: j.cell.rate_target for ctx, j in raterank.sustained(cells, slo.DEFAULT).items()} \
        == {1024: rate_runs.KNEE}
    assert raterank.sustained(cells, slo.parse("ttft_p50=50")) == {1024: None}
    # a capped curve sustaining 2/s beside an uncapped one sustaining 1/s: 2/s, named
    capped = [replace(c, concurrency=4) for c in cells if c.rate_target <= 2]
    both = [c for c in cells if c.rate_target == 1] + capped
    best = raterank.sustained(both, slo.DEFAULT)[1024]
    assert best.cell.rate_target == 2.0 and raterank.curve_label(best.cell) == "at most 4 in flight"
    assert raterank.summary(cells, slo.DEFAULT) == "request rate 1–8/s, sustained 2/s at 1K"
    assert raterank.summary(cells, slo.parse("ttft_p50=50")) == "request rate 1–8/s, sustained none at 1K"
    assert raterank.summary([], slo.DEFAULT) == ""


def test_ranking_orders_runs_by_sustained_rate(tmp_path: Path) -> None:
    cells = _cells(tmp_path)
    runs = [_run("none", [c for c in cells if c.rate_target >= 4]),  # 4/s fails, 8/s not delivered
            _run("one", [c for c in cells if c.rate_target != 2]),  # knee 1/s
            _run("plain", []),  # no rate cells: absent
            _run("two", cells), _run("two-again", cells)]  # knee 2/s, tied
    [group] = raterank.ranking(runs, slo.DEFAULT)
    assert group["context"] == "1K"
    got = [(e.run.slug, e.place, e.texts["sustained"], e.texts["highest"]) for e in group["entries"]]
    assert got == [("two", 1, "2/s", "8/s"), ("two-again", 1, "2/s", "8/s"), ("one", 3, "1/s", "8/s"),
                   ("none", None, raterank.NONE_TEXT, "8/s")]
    assert group["entries"][0].texts == {"sustained": "2/s", "curve": "no cap", "completed": "2/s",
                                         "ttft": "100 ms", "highest": "8/s"}
    assert raterank.ranking([_run("plain", [])], slo.DEFAULT) == []


def _section(html: str, cls: str) -> str:
    m = re.search(rf'<section class="{cls}".*?</section>', html, re.S)
    assert m, cls
    return " ".join(re.sub(r"<[^>]+>", " ", m.group(0)).split())


def test_family_page_and_index_rank_by_sustained_rate(site: Path) -> None:
    for page in (site / "models" / "synth-4b.html", site / "index.html"):
        html = page.read_text()
        text = _section(html, "rate-rank")
        assert "1K context # Run Sustained rate Curve Completed/s there TTFT p90 there Highest offered " \
               "1 Synth-4B · with-rate 2/s no cap 2/s 100 ms 8/s A run's" in text, page
        assert "TTFT p90 ≤ 2,000 ms" in text and "plain" not in text  # no rate cells: absent
    family = (site / "models" / "synth-4b.html").read_text()
    also = re.findall(r'<span class="muted also-measured">(.*?)</span>', family)
    assert also == ["· also request rate 1–8/s, sustained 2/s at 1K"]  # the plain run: nothing
    explore = (site / "explore.html").read_text()
    assert re.search(r'id="ex-traffic">Request-rate cells are not drawn here', explore)


def test_the_rate_curve_download(site: Path) -> None:
    base = site / "runs" / "with-rate"
    rows = list(csv.DictReader((base / "rate_curve.csv").open()))
    assert list(rows[0]) == raterank.CURVE_COLUMNS
    assert [(float(r["rate_target"]), r["status"], r["slo_meets"], r["knee"]) for r in rows] == [
        (1.0, contract.VALID, "True", "False"), (2.0, contract.VALID, "True", "True"),
        (4.0, contract.VALID, "False", "False"), (8.0, contract.LOAD_NOT_DELIVERED, "True", "False")]
    four = rows[2]
    assert float(four["completed_rps"]) == pytest.approx(80 / rate_runs.SPAN_4)
    assert float(four["ttft_ms_p50"]) == pytest.approx(100 + 50 * 39.5)
    assert float(four["ttft_ms_p90"]) == pytest.approx(3655.0) and four["ttft_ms_p99"] == ""
    data = json.loads((base / "rate_curve.json").read_text())
    assert data["slo"] == slo.DEFAULT_SPEC and data["knee_share"] == rate.KNEE_SHARE
    assert [p["rate_target"] for p in data["points"] if p["knee"]] == [rate_runs.KNEE]
    assert 'href="rate_curve.csv"' in (base / "index.html").read_text()
    assert 'runs/with-rate/rate_curve.csv' in (site / "downloads.html").read_text()
    # curve.csv stays the decode matrix's MLPerf curve; a run without rate cells has no rate curve
    assert all(r["concurrency"] in ("1", "2") for r in csv.DictReader((base / "curve.csv").open()))
    assert not (site / "runs" / "plain" / "rate_curve.csv").exists()
    assert 'rate_curve' not in (site / "runs" / "plain" / "index.html").read_text()


def _data_js(site: Path, slug: str) -> dict:
    text = (site / "runs" / slug / "data.js").read_text()
    return json.loads(text[text.index("] = ") + 4:].rstrip().rstrip(";"))


def test_compare_data_carries_the_rate_cells(site: Path) -> None:
    data = _data_js(site, "with-rate")["rate"]
    rows = [dict(zip(data["fields"], row, strict=True)) for row in data["cells"]]
    assert [(r["rate_text"], r["achieved_text"], r["ttft_p90_text"], r["status_label"], r["knee"])
            for r in rows] == [("1/s", "1/s", "100 ms", "Valid", False),
                               ("2/s", "2/s", "100 ms", "Valid", True),
                               ("4/s", "4/s", "3,655 ms", "Valid", False),
                               ("8/s", "8/s", "100 ms", "Load not delivered", False)]
    assert rows[0]["heading"] == "1K context, no cap on requests in flight"
    assert data["anchors"] == {contract.LOAD_NOT_DELIVERED: "load-not-delivered"}
    assert "rate" not in _data_js(site, "plain")  # runs without rate cells: data.js as before
    compare = (site / "compare.html").read_text()
    assert 'id="ab-traffic"' in compare and "compare_traffic" in compare
