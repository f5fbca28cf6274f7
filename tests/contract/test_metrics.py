"""The page metrics on hand-made chunks whose answers are known exactly."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rundir import activity, metrics
from rundir.contract import REQUESTS_SCHEMA, SERVER_METRICS_SCHEMA

MS = 1_000_000


def table(rows: list[dict]) -> pa.Table:
    full = []
    for i, r in enumerate(rows):
        row = {name: None for name in REQUESTS_SCHEMA.names}
        row.update(phase="decode", context=1024, concurrency=len(rows), request_id=str(i),
                   purpose="measure", stream_index=i, cancelled=False)
        row.update(r)
        full.append(row)
    return pa.Table.from_pylist(full, schema=REQUESTS_SCHEMA)


def test_multi_token_chunks_count_every_token() -> None:
    # one stream: role chunk at 5 ms (0 tokens), then chunks of 1, 3, 2 tokens
    # at 10, 20, 30 ms -> 6 tokens; after the first chunk 5 tokens in 20 ms.
    t = table([dict(send_ns=0, end_ns=40 * MS, finish_reason="length",
                    chunk_ns=[5 * MS, 10 * MS, 20 * MS, 30 * MS], chunk_tokens=[0, 1, 4, 6])])
    c = metrics.Chunks.from_table(t)
    m = metrics.decode_metrics(c, 0, 100 * MS, np.array([True]))
    assert m.output_tokens == 6
    assert m.total_tok_s == pytest.approx(60.0)
    assert m.per_request_tok_s == pytest.approx(5 / 0.020)
    assert m.tbt_ms == pytest.approx(4.0)  # 20 ms / 5 tokens, not 10 ms per chunk
    assert m.ttft_ms == pytest.approx(10.0)  # first token chunk, not the role chunk
    assert m.completed == 1


def test_window_clips_chunks_and_completions() -> None:
    t = table([
        dict(send_ns=0, end_ns=95 * MS, finish_reason="length",
             chunk_ns=[10 * MS, 50 * MS, 60 * MS, 90 * MS], chunk_tokens=[1, 2, 3, 4]),
        dict(send_ns=0, end_ns=200 * MS, cancelled=True,
             chunk_ns=[20 * MS, 55 * MS, 150 * MS], chunk_tokens=[1, 2, 3]),
    ])
    c = metrics.Chunks.from_table(t)
    done = np.array([True, False])
    m = metrics.decode_metrics(c, 40 * MS, 100 * MS, done)
    assert m.output_tokens == 4  # 50, 60, 90 from the first; 55 from the second
    assert m.duration_s == pytest.approx(0.06)
    assert m.completed == 1
    # client-side active: stream 1 active over 40..95, stream 2 over 40..100
    assert m.avg_active_client == pytest.approx((55 + 60) / 60)


def test_gauge_label_sum_and_time_mean() -> None:
    t = np.array([0, 0, 10 * MS, 10 * MS, 20 * MS, 20 * MS])
    v = np.array([1.0, 1.0, 2.0, 2.0, 3.0, 1.0])  # two data-parallel ranks
    times, sums = activity.gauge_series(t, v)
    assert sums.tolist() == [2.0, 4.0, 4.0]
    gauge = pa.table({"t_ns": t.tolist(), "name": ["waiting"] * 6, "source": ["x"] * 6,
                      "labels": ["rank=0", "rank=1"] * 3, "value": v.tolist()},
                     schema=SERVER_METRICS_SCHEMA)
    # eight streams in flight throughout; over [5, 25] ms the summed waiting
    # gauge, held between samples, is 2 for 5 ms and 4 for 15 ms
    c = metrics.Chunks.from_table(table([dict(send_ns=0, end_ns=200 * MS, cancelled=True,
                                              chunk_ns=[1 * MS], chunk_tokens=[1])] * 8))
    a = activity.window_activity_detail(c, gauge, 5 * MS, 25 * MS)
    assert a.from_server and a.max_waiting == 4.0
    assert a.avg_active == pytest.approx(8 - 3.5)


def _waiting(points: list[tuple[int, float]]) -> pa.Table:
    return pa.table({"t_ns": [p[0] for p in points], "name": ["waiting"] * len(points),
                     "source": ["x"] * len(points), "labels": [""] * len(points),
                     "value": [p[1] for p in points]}, schema=SERVER_METRICS_SCHEMA)


def test_active_is_in_flight_minus_waiting() -> None:
    # four streams in flight over the whole window, the server says two wait
    t = table([dict(send_ns=0, end_ns=200 * MS, cancelled=True,
                    chunk_ns=[1 * MS, 150 * MS], chunk_tokens=[1, 2]) for _ in range(4)])
    c = metrics.Chunks.from_table(t)
    a = activity.window_activity_detail(c, _waiting([(0, 2.0), (50 * MS, 2.0)]), 10 * MS, 90 * MS)
    assert a.avg_active == pytest.approx(2.0) and a.max_waiting == 2.0
    # without a waiting gauge only streams receiving tokens count
    a = activity.window_activity_detail(c, None, 10 * MS, 90 * MS)
    assert a.avg_active == pytest.approx(4.0) and a.max_waiting is None


def test_restart_gaps_lower_the_average() -> None:
    # one stream slot: a request over [0, 50) ms, the next over [60, 200) ms
    t = table([dict(send_ns=0, end_ns=50 * MS, finish_reason="length",
                    chunk_ns=[5 * MS, 49 * MS], chunk_tokens=[1, 2]),
               dict(send_ns=60 * MS, end_ns=200 * MS, cancelled=True,
                    chunk_ns=[65 * MS, 150 * MS], chunk_tokens=[1, 2])])
    a = activity.window_activity_detail(metrics.Chunks.from_table(t), _waiting([(0, 0.0), (100 * MS, 0.0)]),
                                       0, 100 * MS)
    assert a.avg_active == pytest.approx(0.9)


def test_queued_rule() -> None:
    assert activity.is_queued(8, 8.0, 0.0) is False
    assert activity.is_queued(8, 7.5, 0.0) is True  # < 0.95 × 8
    assert activity.is_queued(8, 8.0, 1.0) is True


def test_prefill_metrics() -> None:
    t = table([
        dict(send_ns=0, chunk_ns=[100 * MS], chunk_tokens=[1]),
        dict(send_ns=0, chunk_ns=[200 * MS], chunk_tokens=[1]),
        dict(send_ns=0, chunk_ns=[400 * MS], chunk_tokens=[1]),
    ])
    m = metrics.prefill_metrics(metrics.Chunks.from_table(t), np.array([1000, 1000, 1000]))
    assert m.ttft_ms == pytest.approx(200.0)
    assert m.prompt_tok_s == pytest.approx(5000.0)
    assert m.samples == 3
