"""Derived data is made once and handed forward (issue 11, item 3).

A cell's records become an Arrow table once, in its outcome, and the judge,
the live display and the store use that table and the judge's figures; the
builder builds each server gauge once per run and hands it to the activity
metric; `rundir.metrics` keeps no state between calls.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from rich.console import Console

import bench.measure.cells
import bench.measure.records
import bench.run.progress
import bench.run.store
import rundir.activity
import site_builder.aggregate
from bench.core.plan import Cell
from bench.measure.cells import CellOutcome
from bench.measure.chunks import ParsedStream
from bench.measure.records import RequestRecord, judge_decode, records_table
from bench.measure.stream import StreamResult
from bench.run.progress import Progress
from bench.run.store import RunStore
from rundir import activity, metrics
from rundir.contract import (
    COUNT_USAGE_CONTINUOUS,
    DECODE,
    METRIC_RUNNING,
    METRIC_WAITING,
    PURPOSE_MEASURE,
    PURPOSE_PREFIX_FILL,
    SERVER_METRICS_SCHEMA,
    VALID,
)
from rundir.io import read_run
from rundir.words import tok_s
from tests.support.synthetic_runs import make_measured_run, run_info

MS = 1_000_000
CELL = Cell(DECODE, 128, 2)


def _record(i: int, purpose: str = PURPOSE_MEASURE, n: int = 200) -> RequestRecord:
    return RequestRecord(
        phase=DECODE, context=128, concurrency=2, request_id=f"r{i}", purpose=purpose,
        stream_index=i, send_ns=0, end_ns=n * 5 * MS, prompt_tokens=128, cached_tokens=None,
        finish_reason=None, error=None, cancelled=True,
        chunk_ns=[(t + 1) * 5 * MS for t in range(n)], chunk_tokens=list(range(1, n + 1)),
        counting=COUNT_USAGE_CONTINUOUS)


def _records() -> list[RequestRecord]:
    return [_record(0, PURPOSE_PREFIX_FILL, 1), _record(1), _record(2)]


@pytest.fixture
def no_conversion(monkeypatch):
    """After it is called, any records -> table conversion fails the test."""

    def arm() -> None:
        def refuse(_records):
            raise AssertionError("records converted to a table again")

        for module in (bench.measure.records, bench.measure.cells, bench.run.store, bench.run.progress):
            monkeypatch.setattr(module, "records_table", refuse, raising=False)

    return arm


def test_judge_decode_uses_the_given_table_and_hands_its_figures_on(no_conversion) -> None:
    records = _records()
    table = records_table(records)
    alone = judge_decode(records, 2, 0, 1000 * MS, None)
    no_conversion()
    given = judge_decode(records, 2, 0, 1000 * MS, None, table=table)
    assert (given.status, given.reason, given.counting) == (alone.status, alone.reason, alone.counting)
    measured = metrics.Chunks.from_table(records_table([r for r in records if r.purpose == PURPOSE_MEASURE]))
    direct = metrics.decode_metrics(measured, 0, 1000 * MS, np.zeros(2, dtype=bool))
    assert given.status == VALID and given.figures.total_tok_s == direct.total_tok_s
    assert given.figures.tbt_ms == direct.tbt_ms


def test_the_store_and_the_display_take_the_outcome_as_it_is(tmp_path, no_conversion) -> None:
    records = _records()
    verdict = judge_decode(records, 2, 0, 1000 * MS, None)
    outcome = CellOutcome(records, verdict.status, verdict.reason, (0, 1000 * MS), 0.5,
                          verdict.counting, False, verdict.figures)
    assert outcome.table.equals(records_table(records))  # built once, from the records
    no_conversion()
    store = RunStore(tmp_path / "run", run_info("r"), [CELL])
    store.record(CELL, outcome)
    assert store.requests.equals(outcome.table)
    progress = Progress(Console(file=io.StringIO()))
    progress.end(CELL, outcome)
    assert progress.results[CELL.key] == tok_s(verdict.figures.total_tok_s)


def test_the_store_writes_the_outcome_table(tmp_path) -> None:
    """The outcome's table is the one truth of its rows: the store writes it
    as handed over (here the fill row was dropped from it on purpose)."""
    records = _records()
    table = records_table(records[1:])
    outcome = CellOutcome(records, VALID, None, (0, 1000 * MS), table=table)
    store = RunStore(tmp_path / "run", run_info("r"), [CELL])
    store.record(CELL, outcome)
    assert store.requests.column("request_id").to_pylist() == ["r1", "r2"]


def test_a_record_is_made_from_the_parsed_stream_without_parsing_again() -> None:
    parsed = ParsedStream(chunk_ns=[10, 20], chunk_tokens=[1, 2], counting=COUNT_USAGE_CONTINUOUS,
                          content="ab", reasoning="", finish_reason="length", prompt_tokens=5,
                          cached_tokens=None, final_usage_tokens=2, error=None)
    result = StreamResult(status=200, send_ns=1, end_ns=30, chunks=[(10, b"{not json")], done=True)
    rec = RequestRecord.from_stream(CELL.key, "r1", PURPOSE_MEASURE, 0, result, parsed, str.upper)
    assert rec.error is None and rec.chunk_ns == [10, 20] and rec.tokens == 2
    assert rec.content_tail == "ab" and rec.finish_reason == "length"


def _waiting_table(points: list[tuple[int, float]]) -> pa.Table:
    n = len(points)
    return pa.table({"t_ns": [p[0] for p in points], "name": [METRIC_WAITING] * n,
                     "source": ["x"] * n, "labels": [""] * n, "value": [p[1] for p in points]},
                    schema=SERVER_METRICS_SCHEMA)


def test_activity_from_a_built_gauge_is_activity_from_the_table() -> None:
    records = [_record(i) for i in range(4)]
    chunks = metrics.Chunks.from_table(records_table(records))
    gauge = _waiting_table([(0, 1.0), (300 * MS, 2.0), (600 * MS, 0.0), (900 * MS, 0.0)])
    series = activity.summed_gauge(gauge, METRIC_WAITING)
    for window in ((0, 1000 * MS), (100 * MS, 700 * MS)):
        assert activity.window_activity_from_gauge(chunks, series, *window) == \
            activity.window_activity_detail(chunks, gauge, *window)
    assert activity.summed_gauge(gauge, METRIC_RUNNING) is None
    assert activity.summed_gauge(None, METRIC_WAITING) is None


def test_the_metrics_module_keeps_no_state() -> None:
    """'pure, no I/O': nothing mutable at module level that a call could fill."""
    state = {name: type(v).__name__ for name, v in vars(rundir.metrics).items()
             if not name.startswith("__") and isinstance(v, list | dict | set | bytearray)}
    assert state == {}


def test_the_builder_builds_each_gauge_once_per_run(tmp_path, monkeypatch) -> None:
    path = make_measured_run(tmp_path / "r", run_id="gauges", contexts=[256, 512],
                             concurrency=[1, 2])
    data = read_run(path)
    calls: list[str] = []
    real = activity.summed_gauge

    def counting(table, name):
        calls.append(name)
        return real(table, name)

    monkeypatch.setattr(site_builder.aggregate, "summed_gauge", counting)
    monkeypatch.setattr(rundir.activity, "summed_gauge", counting)
    cells, _ = site_builder.aggregate.measured_cells(data)
    assert sum(1 for x in cells if x.phase == DECODE and x.avg_active_source == "server") == 4
    assert sorted(calls) == sorted([METRIC_RUNNING, METRIC_WAITING])


def test_memo_keys_have_one_owner() -> None:
    """Only rundir/metrics.py reads or fills a Chunks memo; the drill-down asks it."""
    root = Path(__file__).resolve().parents[2]
    users = [p.relative_to(root).as_posix() for folder in ("bench", "rundir", "site_builder")
             for p in (root / folder).rglob("*.py") if "_memoised(" in p.read_text()]
    assert users == ["rundir/metrics.py"]
    falling = metrics.Chunks.from_table(records_table([_record(0, n=3)]))
    assert not metrics.has_negative_tokens(falling)
    t = records_table([_record(0, n=3)]).to_pylist()
    t[0]["chunk_tokens"] = [2, 1, 3]
    table = pa.Table.from_pylist(t, schema=records_table([]).schema)
    assert metrics.has_negative_tokens(metrics.Chunks.from_table(table))
    for gone in ("memo", "req", "offsets"):
        assert not hasattr(falling, gone)
