"""Aggregation recomputes every page number from raw chunks, and caches per run.

The expected values are recomputed here independently, with plain Python
loops over requests.parquet, straight from the metric definitions in
docs/methodology.md; the builder's vectorised path must agree.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rundir import contract
from rundir.io import read_run
from site_builder.aggregate import AggregateCache, RunAggregate, aggregate_run
from site_builder.publish import build_site
from tests.support.synthetic_runs import make_imported_run, make_measured_run


def _rows(path: Path, name: str) -> list[dict]:
    return pq.read_table(path / name).to_pylist()


def _expected_decode(requests: list[dict], ws: int, we: int, gauge: list[dict]) -> dict:
    output = 0
    rates, gaps, ttfts = [], [], []
    completed = 0
    active_client = 0
    for r in requests:
        prev = 0
        token_chunks = []  # (ns, tokens) in window
        first_token_ns = None
        last_ns = None
        for ns, cum in zip(r["chunk_ns"], r["chunk_tokens"], strict=True):
            tokens = cum - prev
            prev = cum
            last_ns = ns
            if tokens > 0 and first_token_ns is None:
                first_token_ns = ns
            if ws <= ns <= we:
                output += tokens
                if tokens > 0:
                    token_chunks.append((ns, tokens))
        if first_token_ns is not None:
            ttfts.append((first_token_ns - r["send_ns"]) / 1e6)
            stop = r["end_ns"] if r["end_ns"] is not None else last_ns
            active_client += max(0, min(stop, we) - max(first_token_ns, ws))
        if len(token_chunks) >= 2:
            after_first = sum(t for _, t in token_chunks[1:])
            span = token_chunks[-1][0] - token_chunks[0][0]
            if span > 0 and after_first > 0:
                rates.append(after_first / (span / 1e9))
                gaps.append((span / 1e6) / after_first)
        ok = r["finish_reason"] is not None and r["error"] is None and not r["cancelled"]
        if ok and r["end_ns"] is not None and ws <= r["end_ns"] <= we:
            completed += 1
    # Requests in flight minus the server's waiting gauge (summed over label
    # sets, held until the next scrape), on a 1 ms grid.
    waiting_by_t: dict[int, float] = {}
    for g in gauge:
        if g["name"] == contract.METRIC_WAITING:
            waiting_by_t[g["t_ns"]] = waiting_by_t.get(g["t_ns"], 0.0) + g["value"]
    wtimes = sorted(waiting_by_t)
    spans = []
    for r in requests:
        stop = r["end_ns"] if r["end_ns"] is not None else max([r["send_ns"], *r["chunk_ns"]])
        spans.append((r["send_ns"], stop))
    samples = []
    for t in range(ws, we, 1_000_000):
        in_flight = sum(1 for a, b in spans if a <= t < b)
        held = [waiting_by_t[x] for x in wtimes if x <= t]
        samples.append(max(0.0, in_flight - (held[-1] if held else 0.0)))
    times = wtimes
    area = sum(samples) / len(samples) * (we - ws) if samples else 0.0
    d = we - ws
    return {
        "output_tokens": output,
        "total_tok_s": output / (d / 1e9),
        "per_request_tok_s": statistics.median(rates),
        "tbt_ms": statistics.median(gaps),
        "ttft_ms": statistics.median(ttfts),
        "completed": completed,
        "avg_active_server": area / d if times else None,
        "avg_active_client": active_client / d,
        "measured_s": d / 1e9,
    }


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agg") / "run"
    return make_measured_run(
        path, run_id="agg", contexts=[1024, 8192], concurrency=[1, 3, 8], tokens_per_s=80,
        seed=7, duration_s=1.5, max_output_tokens=40, tokens_per_chunk=3, prefill_repeats=3,
        kv_budget_tokens=40_000, statuses={(1024, 8): contract.REQUESTS_QUEUED, (8192, 3): contract.LOOPED},
    )


def test_decode_cells_match_an_independent_recomputation(measured: Path) -> None:
    agg = aggregate_run(read_run(measured))
    requests = _rows(measured, contract.REQUESTS_FILE)
    gauge = _rows(measured, contract.SERVER_METRICS_FILE)
    checked = 0
    for cell in _rows(measured, contract.CELLS_FILE):
        if (cell["phase"] != contract.DECODE
                or cell["status"] not in (contract.VALID, contract.REQUESTS_QUEUED)):
            continue
        key = (cell["phase"], cell["context"], cell["concurrency"])
        reqs = [r for r in requests if r["purpose"] == contract.PURPOSE_MEASURE
                and (r["phase"], r["context"], r["concurrency"]) == key]
        want = _expected_decode(reqs, cell["window_start_ns"], cell["window_end_ns"], gauge)
        got = next(x for x in agg.cells if (x.phase, x.context, x.concurrency) == key)
        assert got.output_tokens == want["output_tokens"] > 0
        assert got.total_tok_s == pytest.approx(want["total_tok_s"])
        assert got.per_request_tok_s == pytest.approx(want["per_request_tok_s"])
        assert got.tbt_ms == pytest.approx(want["tbt_ms"])
        assert got.ttft_ms == pytest.approx(want["ttft_ms"])
        assert got.completed == want["completed"]
        assert got.avg_active == pytest.approx(want["avg_active_server"])
        assert got.avg_active_source == "server"
        assert got.measured_s == pytest.approx(want["measured_s"])
        checked += 1
    assert checked == 4  # 1024×{1,3,8 queued}, 8192×1 (8192×3 looped, 8192×8 over capacity)
    # Requests queued: the server ran fewer streams than asked for.
    queued = next(x for x in agg.cells if x.key == "decode-1024-8")
    assert queued.status == contract.REQUESTS_QUEUED and queued.avg_active < 8


def test_cells_without_numbers_keep_their_status(measured: Path) -> None:
    agg = aggregate_run(read_run(measured))
    looped = next(x for x in agg.cells if x.key == "decode-8192-3")
    over = next(x for x in agg.cells if x.key == "decode-8192-8")
    assert looped.status == contract.LOOPED and looped.total_tok_s is None and looped.has_detail
    assert agg.details[looped.key]["tails"]  # the repeated text is kept as evidence
    assert over.status == contract.OVER_CAPACITY and over.total_tok_s is None and not over.has_detail
    assert "KV tokens" in (over.reason or "")


def test_prefill_cells_are_medians_of_cold_samples(measured: Path) -> None:
    agg = aggregate_run(read_run(measured))
    requests = _rows(measured, contract.REQUESTS_FILE)
    for ctx in (1024, 8192):
        samples = [r for r in requests if r["purpose"] == contract.PURPOSE_PREFILL
                   and r["context"] == ctx]
        ttfts, rates = [], []
        for r in samples:
            first = next(ns for ns, cum in zip(r["chunk_ns"], r["chunk_tokens"], strict=True)
                         if cum > 0)
            ttfts.append(first - r["send_ns"])
            rates.append(r["prompt_tokens"] / ((first - r["send_ns"]) / 1e9))
        got = next(x for x in agg.cells if x.key == f"prefill-{ctx}-1")
        assert got.completed == len(samples) == 3
        assert got.total_tok_s == pytest.approx(statistics.median(rates))
        assert got.ttft_ms == pytest.approx(statistics.median(ttfts) / 1e6)
        assert got.output_tokens is None and got.measured_s is None


def test_without_server_metrics_average_active_comes_from_the_client(tmp_path: Path) -> None:
    path = make_measured_run(tmp_path / "r", run_id="nogauge", contexts=[2048],
                             concurrency=[4], seed=3, duration_s=1.0, server_metrics=False)
    agg = aggregate_run(read_run(path))
    cell = next(x for x in agg.cells if x.key == "decode-2048-4")
    row = next(r for r in _rows(path, contract.CELLS_FILE) if r["phase"] == contract.DECODE)
    reqs = [r for r in _rows(path, contract.REQUESTS_FILE) if r["purpose"] == contract.PURPOSE_MEASURE]
    want = _expected_decode(reqs, row["window_start_ns"], row["window_end_ns"], [])
    assert cell.avg_active_source == "client"
    assert cell.avg_active == pytest.approx(want["avg_active_client"])
    assert 3.5 < cell.avg_active <= 4.0


def test_imported_runs_take_published_numbers_as_they_are(tmp_path: Path) -> None:
    path = make_imported_run(tmp_path / "imp", run_id="imp", cells=[
        {"phase": contract.PREFILL, "context": 8192, "concurrency": 1, "status": contract.VALID,
         "total_tok_s": 32700.0, "ttft_ms": 250.0, "completed": 1},
        {"phase": contract.DECODE, "context": 8192, "concurrency": 128, "status": contract.REQUESTS_QUEUED,
         "total_tok_s": 2777.1, "per_request_tok_s": 23.1, "ttft_ms": 2079.0, "tbt_ms": 43.3,
         "avg_active": 127.4, "completed": 0, "output_tokens": 83240, "measured_s": 30.0},
        {"phase": contract.DECODE, "context": 16384, "concurrency": 128, "status": contract.OVER_CAPACITY},
    ])
    agg = aggregate_run(read_run(path))
    assert [x.key for x in agg.cells] == ["prefill-8192-1", "decode-8192-128", "decode-16384-128"]
    q = agg.cells[1]
    assert (q.total_tok_s, q.per_request_tok_s, q.ttft_ms, q.tbt_ms, q.avg_active, q.completed,
            q.output_tokens, q.measured_s) == (2777.1, 23.1, 2079.0, 43.3, 127.4, 0, 83240, 30.0)
    assert agg.cells[0].total_tok_s == 32700.0 and agg.cells[0].completed == 1
    assert agg.cells[2].total_tok_s is None and not agg.details


def test_cache_round_trip(measured: Path, tmp_path: Path) -> None:
    agg = aggregate_run(read_run(measured), digest="abc")
    cache = AggregateCache(tmp_path / "cache")
    cache.put(agg)
    back = cache.get("abc")
    assert isinstance(back, RunAggregate)
    assert back.cells == agg.cells and back.details == agg.details
    assert cache.get("missing") is None


def test_second_build_reaggregates_only_the_new_run(tmp_path: Path) -> None:
    data, site = tmp_path / "data", tmp_path / "site"
    for i in range(2):
        make_measured_run(data / f"run-{i}", run_id=f"run-{i}", contexts=[1024],
                          concurrency=[1, 2], seed=i, duration_s=0.5)
    first = build_site(data, site)
    assert sorted(first.aggregated) == ["run-0", "run-1"] and first.reused == []
    page = site / "runs" / "run-0" / "index.html"
    cell_page = site / "runs" / "run-0" / "cells" / "decode-1024-2.html"
    stamps = page.stat().st_mtime_ns, cell_page.stat().st_mtime_ns

    make_measured_run(data / "run-2", run_id="run-2", contexts=[1024], concurrency=[1, 2],
                      seed=2, duration_s=0.5)
    second = build_site(data, site)
    assert second.aggregated == ["run-2"]
    assert sorted(second.reused) == ["run-0", "run-1"]
    assert sorted(second.published) == ["run-0", "run-1", "run-2"]
    # The other runs' pages were not even rewritten.
    assert (page.stat().st_mtime_ns, cell_page.stat().st_mtime_ns) == stamps
    assert "run-2" in (site / "index.html").read_text(encoding="utf-8")

    # Changing a run's raw data re-aggregates that run (the cache key is its content).
    make_measured_run(data / "run-0", run_id="run-0", contexts=[1024], concurrency=[1, 2],
                      seed=9, duration_s=0.5)
    third = build_site(data, site)
    assert third.aggregated == ["run-0"]

    # Removing a run removes its pages.
    import shutil

    shutil.rmtree(data / "run-1")
    fourth = build_site(data, site)
    assert fourth.aggregated == [] and not (site / "runs" / "run-1").exists()
