"""cells.csv / cells.json carry every percentile of every latency (issue 20, item 1):
today's columns first, unchanged, then the tails with their sample counts, the
windows and the 95% intervals; empty where a cell has no such figure."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from rundir import contract, tails
from site_builder import curves, metrictable, runrows
from site_builder.aggregate import CellResult, RunAggregate
from site_builder.publish import build_site
from tests.support.synthetic_runs import make_imported_run, make_measured_run

# The downloads' columns before the tails (a published format: names and order as released).
TODAYS = ["run_id", "phase", "context", "context_label", "concurrency", "status",
          "status_label", "reason", "client_bound", "total_tok_s", "per_request_tok_s",
          "ttft_ms", "tbt_ms", "avg_active", "avg_active_source", "completed",
          "output_tokens", "measured_s", "requests", "token_counting", "warmup_s"]
TELEMETRY = ["j_per_token", "avg_w", "peak_w", "energy_j", "energy_source", "tok_s_per_kw",
             "throttle"]
INTERVALS = ["windows", "total_tok_s_ci95_lo", "total_tok_s_ci95_hi",
             "per_request_tok_s_ci95_lo", "per_request_tok_s_ci95_hi", "ttft_ms_ci95_lo",
             "ttft_ms_ci95_hi", "tbt_ms_ci95_lo", "tbt_ms_ci95_hi"]
NEW = [*tails.all_columns(), *INTERVALS]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tails")
    data = root / "data"
    # Short answers: ~24 requests end inside the 8-stream window (p90, p95 exist; p99 not).
    make_measured_run(data / "m", run_id="m", contexts=[1024, 8192], concurrency=[1, 8],
                      duration_s=1.0, max_output_tokens=16, tokens_per_chunk=1, seed=3,
                      kv_budget_tokens=40_000)
    make_imported_run(data / "imp", run_id="imp", cells=[
        {"phase": contract.DECODE, "context": 1024, "concurrency": 2, "total_tok_s": 120.5,
         "per_request_tok_s": 60.2, "ttft_ms": 40.0, "tbt_ms": 16.6, "avg_active": 2.0,
         "completed": 30, "output_tokens": 3600, "measured_s": 30.0}])
    report = build_site(data, root / "site")
    assert report.errors == []
    return root / "site"


def _csv(site: Path, slug: str) -> tuple[list[str], list[dict[str, str]]]:
    with (site / "runs" / slug / "cells.csv").open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _json(site: Path, slug: str) -> dict:
    return json.loads((site / "runs" / slug / "cells.json").read_text(encoding="utf-8"))


def test_todays_columns_come_first_then_the_tails_windows_and_intervals(site: Path) -> None:
    for slug in ("m", "imp"):
        header, rows = _csv(site, slug)
        assert header[:len(TODAYS)] == TODAYS, slug
        assert header[len(TODAYS):len(TODAYS) + len(NEW)] == NEW, slug
        cells = _json(site, slug)["cells"]
        assert len(rows) == len(cells) and all(list(c)[:len(header)] == header for c in cells)
        assert all(None not in r and len(r) == len(header) for r in rows)  # parseable, aligned


def _first_token_ns(request: dict) -> int | None:
    """The arrival of a request's first chunk that carried a token (None: it got none)."""
    pairs = zip(request["chunk_ns"], request["chunk_tokens"], strict=True)
    return next((ns for ns, cumulative in pairs if cumulative > 0), None)


def test_a_measured_cell_s_tails_are_its_requests_ranks(site: Path) -> None:
    """Recomputed here from requests.parquet: TTFT and end-to-end of each request."""
    cells = {(c["phase"], c["context"], c["concurrency"]): c for c in _json(site, "m")["cells"]}
    busy = cells[(contract.DECODE, 1024, 8)]
    window = pq.read_table(site / "runs/m/raw" / contract.CELLS_FILE).to_pylist()
    row = next(r for r in window if (r["phase"], r["context"], r["concurrency"])
               == (contract.DECODE, 1024, 8))
    reqs = [r for r in pq.read_table(site / "runs/m/raw" / contract.REQUESTS_FILE).to_pylist()
            if (r["context"], r["concurrency"], r["purpose"]) == (1024, 8, contract.PURPOSE_MEASURE)]
    firsts = [(r, _first_token_ns(r)) for r in reqs]
    ttft = np.array([(first - r["send_ns"]) / 1e6 for r, first in firsts if first is not None])
    e2e = np.array([(r["end_ns"] - r["send_ns"]) / 1e6 for r in reqs
                    if r["finish_reason"] and not r["error"] and not r["cancelled"]
                    and row["window_start_ns"] <= r["end_ns"] <= row["window_end_ns"]])
    assert 20 <= len(e2e) < 100 and len(ttft) > len(e2e)  # p95 exists, p99 does not
    assert busy["ttft_ms_n"] == len(ttft) and busy["e2e_ms_n"] == len(e2e)
    assert busy["ttft_ms_p50"] == busy["ttft_ms"]  # the published median is p50
    assert busy["ttft_ms_p90"] == pytest.approx(np.percentile(ttft, 90), abs=1e-9)
    assert busy["e2e_ms_p50"] == pytest.approx(np.median(e2e), abs=1e-9)
    assert busy["e2e_ms_p95"] == pytest.approx(np.percentile(e2e, 95), abs=1e-9)
    assert busy["e2e_ms_p99"] is None and busy["e2e_ms_p99_9"] is None
    # a rate's level is its slow side: p90 of per-request tok/s is its 10th percentile
    assert busy["per_request_tok_s_p10"] <= busy["per_request_tok_s_p50"] == busy[
        "per_request_tok_s"]
    assert busy["tbt_ms_p90"] >= busy["tbt_ms_p50"] == busy["tbt_ms"]
    assert busy["windows"] == 1 and busy["ttft_ms_ci95_lo"] is None  # one window: no interval
    # one stream, few requests: p90 needs 10 samples, else empty (never the median)
    single = cells[(contract.DECODE, 1024, 1)]
    assert single["e2e_ms_n"] < 10 and single["e2e_ms_p90"] is None
    assert single["e2e_ms_p50"] is not None


def test_csv_writes_missing_ranks_empty_and_counts_whole(site: Path) -> None:
    _header, rows = _csv(site, "m")
    busy = next(r for r in rows if (r["phase"], r["context"], r["concurrency"])
                == (contract.DECODE, "1024", "8"))
    assert busy["e2e_ms_p99"] == "" and busy["ttft_ms_n"].isdigit()
    assert float(busy["ttft_ms_p90"]) == float(busy["ttft_ms_p90"])


def test_cells_without_raw_numbers_have_every_new_column_empty(site: Path) -> None:
    imported = _json(site, "imp")["cells"]
    assert imported[0]["total_tok_s"] == 120.5  # its published numbers stand
    assert all(c[name] is None for c in imported for name in NEW)
    over = [c for c in _json(site, "m")["cells"] if c["status"] == contract.OVER_CAPACITY]
    assert over and all(c[name] is None for c in over for name in NEW)
    prefill = [c for c in _json(site, "m")["cells"] if c["phase"] == contract.PREFILL]
    # a prefill cell's TTFT tails are its cold samples'; it has no other tails, no windows
    assert all(c["ttft_ms_n"] == c["completed"] and c["ttft_ms_p50"] == c["ttft_ms"]
               and c["e2e_ms_n"] is None and c["windows"] is None for c in prefill)


def _run(cells: list[CellResult], telemetry: bool = False) -> SimpleNamespace:
    # the builder's own aggregate, so a field added to it later has its default here
    return SimpleNamespace(run_id="r", slo=None, info=contract.RunInfo(schema_version=1, run_id="r"),
                           agg=RunAggregate("r", "measured", "", cells, telemetry=telemetry))


def test_intervals_and_windows_come_from_the_cell() -> None:
    cell = CellResult(phase=contract.DECODE, context=1024, concurrency=4, status=contract.VALID,
                      total_tok_s=100.0, tails={"ttft_ms_p50": 5.0, "ttft_ms_n": 12},
                      windows=3, intervals={"total_tok_s": [95.0, 104.5], "tbt_ms": [9.0, 11.0]})
    (got,) = runrows.cell_records(_run([cell]))  # type: ignore[arg-type]
    assert got["windows"] == 3
    assert (got["total_tok_s_ci95_lo"], got["total_tok_s_ci95_hi"]) == (95.0, 104.5)
    assert (got["tbt_ms_ci95_lo"], got["tbt_ms_ci95_hi"]) == (9.0, 11.0)
    assert got["ttft_ms_ci95_lo"] is None and got["per_request_tok_s_ci95_hi"] is None
    assert got["ttft_ms_p50"] == 5.0 and got["ttft_ms_n"] == 12 and got["ttft_ms_p90"] is None


def test_telemetry_columns_keep_their_place_before_the_tails() -> None:
    cell = CellResult(phase=contract.DECODE, context=1024, concurrency=4, status=contract.VALID,
                      throttle=["power-capped", "thermal"], avg_w=300.0)
    (got,) = runrows.cell_records(_run([cell], telemetry=True))  # type: ignore[arg-type]
    assert list(got) == [*TODAYS, *TELEMETRY, *NEW]
    assert got["throttle"] == "power-capped;thermal" and got["avg_w"] == 300.0
    (plain,) = runrows.cell_records(_run([cell]))  # type: ignore[arg-type]
    assert list(plain) == [*TODAYS, *NEW]


def test_the_metric_columns_are_the_metric_table_s() -> None:
    assert metrictable.download_columns("cells") == TODAYS[9:]
    assert metrictable.download_columns("energy") == TELEMETRY
    assert metrictable.INTERVAL_KEYS == ("total_tok_s", "per_request_tok_s", "ttft_ms", "tbt_ms")


def test_every_download_column_is_documented() -> None:
    """docs/data-format.md names each column of cells.csv / cells.json and curve.csv."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "data-format.md").read_text("utf-8")
    section = doc[doc.index("## The site's downloads"):doc.index("## Reading a run")]
    named = set(re.findall(r"`([a-z0-9_]+)`", section))
    columns = [*TODAYS, *TELEMETRY, *tails.all_columns(), *curves.POINT_COLUMNS]
    missing = [c for c in columns if c not in named]
    # the interval columns are named by their pattern, `{key}_ci95_lo` for each listed key
    assert "{key}_ci95_lo" in section and all(f"`{k}`" in section for k in
                                              metrictable.INTERVAL_KEYS)
    assert missing == [] and "windows" in named
