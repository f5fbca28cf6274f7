"""cells.csv and cells.json of a run with prefix-reuse, conversation and rate cells
at once: every row has the same columns, the traffic ones and then the rate ones
after the matrix's; each kind's row fills its key, its own columns and the
measures it shares with the matrix, every other column empty."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rundir import contract
from rundir.io import read_run
from site_builder import load, runrows, slo
from site_builder.aggregate import aggregate_run
from site_builder.publish import build_site
from site_builder.views import RunView
from tests.support import rate_runs
from tests.support.synthetic_runs import make_measured_run
from tests.support.traffic_runs import add_traffic

# the published names (docs/data-format.md), in their order
TRAFFIC = ["prefix_reuse_target", "turn", "prefix_reuse_achieved", "prefix_reuse_server"]
RATE = ["rate_target", "rate_achieved", "send_lag_ms_p50", "send_lag_ms_p99", "arrivals"]
KEY = {"run_id", "phase", "context", "context_label", "concurrency", "status", "status_label",
       "reason", "client_bound"}


def _both(path: Path) -> Path:
    return rate_runs.add_rate(add_traffic(make_measured_run(path, run_id="both", contexts=[1024],
                                                            concurrency=[1, 2])))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("both")
    _both(root / "data" / "both")
    make_measured_run(root / "data" / "plain", run_id="plain", contexts=[1024], concurrency=[1, 2],
                      seed=3)
    assert build_site(root / "data", root / "out", jobs=1).errors == []
    return root / "out"


def _rows(site: Path, slug: str) -> tuple[list[str], list[dict]]:
    header = next(csv.reader((site / "runs" / slug / "cells.csv").open()))
    return header, json.loads((site / "runs" / slug / "cells.json").read_text())["cells"]


def _filled(row: dict) -> set[str]:
    return {k for k, v in row.items() if v is not None}


def test_every_row_has_the_matrix_columns_then_the_traffic_then_the_rate_ones(site: Path) -> None:
    header, rows = _rows(site, "both")
    plain, _ = _rows(site, "plain")
    assert header == plain + TRAFFIC + RATE
    assert [r["phase"] for r in rows] == ([contract.PREFILL] + [contract.DECODE] * 2
                                          + [contract.PREFIX] * 4 + [contract.CONVERSATION] * 2
                                          + [contract.RATE] * 4)
    assert all(list(r) == header for r in rows)  # cells.json: the same keys in the same order
    assert len(list(csv.DictReader((site / "runs" / "both" / "cells.csv").open()))) == len(rows)
    assert all(r[c] is None for r in rows if r["phase"] in contract.MATRIX_PHASES
               for c in TRAFFIC + RATE)


def test_a_traffic_row_fills_its_key_ttft_per_request_and_reuse(site: Path) -> None:
    _, rows = _rows(site, "both")
    traffic = [r for r in rows if r["phase"] in (contract.PREFIX, contract.CONVERSATION)]
    for r in traffic:
        assert KEY - {"reason"} | {"ttft_ms"} <= _filled(r) <= KEY | {"ttft_ms", "per_request_tok_s"} \
            | set(TRAFFIC), r
        assert r["client_bound"] is False and r["run_id"] == "both"
    by = {(r["phase"], r["prefix_reuse_target"], r["turn"]): r for r in traffic}
    off = by[(contract.PREFIX, 90, None)]
    assert (off["ttft_ms"], off["prefix_reuse_achieved"], off["status"]) == \
        (pytest.approx(190.0), 10.0, contract.REUSE_OFF_TARGET)
    assert off["reason"].startswith("reuse off target: asked 90%")
    turn = by[(contract.CONVERSATION, None, 4)]
    assert (turn["ttft_ms"], turn["per_request_tok_s"], turn["prefix_reuse_achieved"]) == \
        (pytest.approx(80.0), pytest.approx(100.0), 75.0)


def test_a_rate_row_fills_its_key_the_shared_measures_and_the_delivered_load(site: Path) -> None:
    _, rows = _rows(site, "both")
    rate = {r["rate_target"]: r for r in rows if r["phase"] == contract.RATE}
    assert sorted(rate) == [1.0, 2.0, 4.0, 8.0]
    shared = {"total_tok_s", "ttft_ms", "tbt_ms", "slo_met_share"}
    for r in rate.values():
        assert KEY - {"reason"} | shared | set(RATE) <= _filled(r) \
            <= KEY | shared | set(RATE) | set(runrows.TAIL_COLUMNS), r
        assert (r["ttft_ms"], r["tbt_ms"]) == (r["ttft_ms_p50"], r["tbt_ms_p50"])
        assert r["client_bound"] is False and r["concurrency"] == 0
    assert rate[1.0]["total_tok_s"] == pytest.approx(17.0) and rate[1.0]["arrivals"] == "constant"
    assert rate[4.0]["slo_met_share"] == pytest.approx(39 / 80)
    assert rate[8.0]["status"] == contract.LOAD_NOT_DELIVERED
    assert rate[8.0]["send_lag_ms_p99"] == pytest.approx(50.0)


def test_a_rate_cells_reuse_level_is_its_prefix_reuse_target(tmp_path: Path) -> None:
    """Where the traffic columns exist a rate cell's --rate-reuse fills prefix_reuse_target;
    a run with rate cells alone has no such column."""
    path = _both(tmp_path / "both")
    agg = aggregate_run(load.load_run(load.RunSource(path, "d")), "d")
    agg.rate = [replace(c, reuse_target=50) for c in agg.rate]
    view = RunView(read_run(path).info, agg, "both", slo=slo.RunSlo(slo.DEFAULT))
    got = [r for r in runrows.cell_records(view) if r["phase"] == contract.RATE]
    assert [r["prefix_reuse_target"] for r in got] == [50] * 4
    assert all(r["turn"] is None and r["prefix_reuse_achieved"] is None for r in got)
    agg.traffic = []
    alone = [r for r in runrows.cell_records(view) if r["phase"] == contract.RATE]
    assert alone and all("prefix_reuse_target" not in r for r in alone)
    assert all(r["slo_met_share"] is not None for r in alone)
