"""bench/distributed/clock_bounds.py: a shard's clock bound flags a cell when it can move a figure.

Pure: a cell's records as two hosts would hand them in, each stream one
token every 20 ms from before the window to its end, judged with the
remote shard's offset known within ±0.5 s (the case of issue 30: a 5 s
window) and within ±20 µs (a pod network's).
"""

from __future__ import annotations

import numpy as np

from bench.distributed.clock_bounds import clock_figure_bounds, clock_reason
from bench.measure.records import RequestRecord, records_table
from rundir.contract import COUNT_USAGE_CONTINUOUS, PURPOSE_MEASURE

S, E = 10_000_000_000, 15_000_000_000  # a 5 s window
GAP = 20_000_000  # a token every 20 ms


def _record(prefix: str, i: int) -> RequestRecord:
    stamps = np.arange(S - 1_000_000_000 + i * 1_000_000, E + 1, GAP, dtype=np.int64)
    return RequestRecord(
        phase="decode", context=256, concurrency=4, request_id=f"{prefix}-{i}",
        purpose=PURPOSE_MEASURE, stream_index=i, send_ns=int(stamps[0]) - 50_000_000,
        end_ns=None, prompt_tokens=256, cached_tokens=None, finish_reason=None, error=None,
        cancelled=True, chunk_ns=stamps, chunk_tokens=np.arange(1, len(stamps) + 1),
        counting=COUNT_USAGE_CONTINUOUS)


def _table():
    return records_table([_record("run-w0", 0), _record("run-w1", 1), _record("run-w0", 2),
                          _record("run-w1", 3)])


def test_half_a_second_on_five_moves_total_tok_s_and_flags_the_cell() -> None:
    table = _table()
    bounds = {b.name: b for b in clock_figure_bounds(table, S, E, {"run-w1": 500_000_000})}
    total = bounds["total tok/s"]
    # shard 1's two streams, 50 tok/s each, moved 0.5 s earlier lose 0.5 s of tokens:
    # 2 × 50 × 0.5 / 5 = 10 tok/s of 200
    assert 9.5 <= total.moved <= 10.5 and total.visible, total
    assert not bounds["TTFT"].visible  # one host's own differences: untouched
    why = clock_reason(table, S, E, [(1, "run-w1", 500_000_000)])
    assert why is not None and why.startswith("clock offsets: shard 1's is known within ±500 ms")
    assert "total tok/s could be off by up to" in why


def test_a_pod_networks_bound_flags_nothing() -> None:
    table = _table()
    assert clock_reason(table, S, E, [(1, "run-w1", 20_000)]) is None
    assert not any(b.visible for b in clock_figure_bounds(table, S, E, {"run-w1": 20_000}))
    assert clock_reason(table, S, E, []) is None
    assert clock_reason(table, S, E, [(2, "run-w2", 500_000_000)]) is None  # no such records
