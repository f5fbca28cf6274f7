"""No wrong number marked Valid: a misbehaving server's cell is Error (or
says what it could not claim), through the real `bench run` against the
reference server, with the default max output (4,096 tokens), so every
measured stream is still open, and cancelled, when the window closes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from bench.measure.chunks import parse_events
from rundir import activity, decode_checks, metrics
from rundir.contract import CELLS_FILE, SERVER_METRICS_SCHEMA
from rundir.io import read_run, write_table
from site_builder.aggregate import measured_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

# The default --max-output (4,096) is kept on purpose: at 200 tok/s no stream
# finishes inside these windows, so every one is cancelled at the window's end.
DEFAULTS = ["--warmup-stable", "0.5", "--no-prefill", "--server-wait", "2", "--contexts", "128"]


def bench(srv, out, *extra: str):
    return run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *DEFAULTS, *extra)


def decode_cell(out, concurrency: int) -> dict:
    (cell,) = [c for c in read_run(out).cells.to_pylist()
               if c["phase"] == "decode" and c["concurrency"] == concurrency]
    return cell


def test_malformed_event_in_one_of_four_cancelled_streams_fails_the_cell(refserver, tmp_path):
    # Requests 1-4 are the prefix warm-ups (one token each); 5-8 the measured
    # streams: only request 5 (5 % 5 == 0) sends a malformed event.
    srv = refserver(tokens_per_s=200, malformed_after_tokens=150, fault_every=5)
    res = bench(srv, tmp_path / "r", "--concurrency", "4", "--duration", "2")
    cell = decode_cell(tmp_path / "r", 4)
    assert cell["status"] == "error", cell
    assert "malformed SSE event" in cell["reason"]
    rows = [r for r in read_run(tmp_path / "r").requests.to_pylist() if r["purpose"] == "measure"]
    assert all(r["cancelled"] for r in rows)  # the window closed on every stream
    assert sum(1 for r in rows if r["error"]) == 1
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("skew, extra, expect", [
    (-150, [], "fell from"),  # the cumulative count goes backwards once
    (500, [], "fell from"),  # jumps once and comes back: the return is a fall
    (5000, ["--max-output", "1000"], "exceeds max_tokens 1000"),
])
def test_token_counts_that_go_backwards_or_jump_fail_the_cell(refserver, tmp_path, skew, extra,
                                                               expect):
    srv = refserver(tokens_per_s=200, usage_skew_after_tokens=200, usage_skew=skew, fault_every=4)
    bench(srv, tmp_path / "r", "--concurrency", "2", "--duration", "2", *extra)
    cell = decode_cell(tmp_path / "r", 2)
    assert cell["status"] == "error", cell
    assert "the server reported inconsistent token counts" in cell["reason"]
    assert expect in cell["reason"]


def test_server_frozen_inside_the_window_is_named(refserver, tmp_path):
    # The first measured stream to reach 300 tokens (1.5 s at 200 tok/s, after
    # the 0.5 s readiness) freezes the whole server for 2.5 s: no stream, no
    # /metrics. Its streams all resume afterwards.
    srv = refserver(tokens_per_s=200, freeze_after_tokens=300, freeze_s=2.5)
    res = bench(srv, tmp_path / "r", "--concurrency", "2", "--duration", "5")
    assert "Traceback" not in res.stderr, res.stderr
    cell = decode_cell(tmp_path / "r", 2)
    assert cell["status"] == "error", cell
    assert "the server stalled" in cell["reason"]
    # The builder re-checks the raw data: the same run stored as Valid (by an
    # older collector, or by hand) is published as an Error naming the stall.
    cells = read_run(tmp_path / "r").cells
    valid = pa.array(["valid"] * len(cells))
    cells = cells.set_column(cells.schema.get_field_index("status"), "status", valid)
    cells = cells.set_column(cells.schema.get_field_index("reason"), "reason",
                             pa.nulls(len(cells), pa.string()))
    write_table(tmp_path / "r", CELLS_FILE, cells)
    published, _ = measured_cells(read_run(tmp_path / "r"))
    (pub,) = [c for c in published if c.phase == "decode"]
    assert pub.status == "error" and "the server stalled" in pub.reason
    assert pub.total_tok_s is None


def test_sparse_gauges_claim_nothing_from_the_server(refserver, tmp_path):
    # 8 streams, 4 slots: 4 wait in the queue. /metrics answers every 3.5 s,
    # too sparse to weigh in-flight − waiting over the window; the client's
    # own count (streams receiving tokens) still finds the queue.
    srv = refserver(tokens_per_s=200, slots=4, metrics_delay_s=3.5)
    bench(srv, tmp_path / "r", "--concurrency", "8", "--duration", "3", "--warmup-timeout", "3")
    cell = decode_cell(tmp_path / "r", 8)
    assert cell["status"] == "requests_queued", cell
    assert "gauges were too sparse" in cell["reason"]


# ---- the same rules, pure -------------------------------------------------

MS = 1_000_000


def _chunks(streams: list[list[tuple[int, int]]], send_ns: int = 0,
            end_ns: int | None = None) -> metrics.Chunks:
    """streams: per request, (arrival ns, cumulative tokens) pairs."""
    table = pa.table({
        "send_ns": pa.array([send_ns] * len(streams), pa.int64()),
        "end_ns": pa.array([end_ns] * len(streams), pa.int64()),
        "chunk_ns": pa.array([[t for t, _ in s] for s in streams], pa.list_(pa.int64())),
        "chunk_tokens": pa.array([[n for _, n in s] for s in streams], pa.list_(pa.int64())),
    })
    return metrics.Chunks.from_table(table)


def test_one_stale_sample_is_not_evidence_of_activity():
    """8 streams in flight, 4 receiving tokens; the only waiting sample (0) is
    10 s old when the window opens: active must come from the client (4),
    not from 8 in flight − 0 waiting."""
    s0 = 20_000 * MS
    streams = [[(s0 + t * 10 * MS, t + 1) for t in range(1000)] for _ in range(4)]
    streams += [[] for _ in range(4)]  # queued: sent, no token yet
    chunks = _chunks(streams, send_ns=s0, end_ns=s0 + 10_000 * MS)  # all cancelled at 30 s
    gauge = pa.table({"t_ns": [0], "name": ["waiting"], "source": ["w"], "labels": [""],
                      "value": [0.0]}, schema=SERVER_METRICS_SCHEMA)
    act = activity.window_activity_detail(chunks, gauge, s0 + 5000 * MS, s0 + 8000 * MS)
    assert not act.from_server and act.coverage is not None and not act.coverage.enough
    assert act.avg_active == pytest.approx(4.0)
    assert activity.is_queued(8, act.avg_active, act.max_waiting)


def test_dense_gauges_are_used():
    streams = [[(t * 10 * MS, t + 1) for t in range(300)] for _ in range(2)]
    chunks = _chunks(streams)
    t = [0, 1000 * MS, 2000 * MS, 3000 * MS]
    gauge = pa.table({"t_ns": t, "name": ["waiting"] * 4, "source": ["w"] * 4,
                      "labels": [""] * 4, "value": [0.0] * 4}, schema=SERVER_METRICS_SCHEMA)
    act = activity.window_activity_detail(chunks, gauge, 100 * MS, 2900 * MS)
    assert act.from_server and act.coverage.enough


def test_coverage_counts_gaps_and_samples():
    cov = activity.gauge_coverage(np.array([0, 1000, 2000]) * MS, 500 * MS, 2500 * MS)
    assert cov.samples == 3 and cov.max_gap_ns == 1000 * MS and cov.enough
    cov = activity.gauge_coverage(np.array([0, 4000]) * MS, 500 * MS, 4500 * MS)
    assert cov.max_gap_ns == 4000 * MS and not cov.enough
    cov = activity.gauge_coverage(np.array([2000]) * MS, 500 * MS, 2500 * MS)
    assert cov.samples == 1 and not cov.enough  # one sample is never enough


def test_stall_rule():
    steady = [[(t * 5 * MS, t + 1) for t in range(1000)]]
    assert decode_checks.stall_problem(_chunks(steady), 0, 4000 * MS) is None
    frozen = [[(t * 5 * MS + (2000 * MS if t >= 300 else 0), t + 1) for t in range(1000)]]
    why = decode_checks.stall_problem(_chunks(frozen), 0, 4000 * MS)
    assert why and "2.0 s" in why and "from 1.5 s" in why
    # a slow but steady server (one token every 2 s, 30 s window) is not a stall
    slow = [[(t * 2000 * MS, t + 1) for t in range(20)]]
    assert decode_checks.stall_problem(_chunks(slow), 0, 30_000 * MS) is None


def test_consistency_rule():
    good = metrics.DecodeMetrics(400, 2.0, 200.0, 100.0, 10.0, 10.0, 0, 2.0)
    assert decode_checks.consistency_problem(good) is None
    # frequent restarts: receiving tokens only 0.68 of the time (a real llama-server
    # at C = 1 with short answers); per-request × 0.68 is the total, not × 1.0 active
    restarts = metrics.DecodeMetrics(4242, 3.0, 1413.8, 2066.0, 0.48, 5.0, 40, 0.68)
    assert decode_checks.consistency_problem(restarts) is None
    bad = metrics.DecodeMetrics(224, 2.0, 112.0, 99.87, 10.0, 10.0, 0, 2.0)
    assert "inconsistent figures" in decode_checks.consistency_problem(bad)


def _judge(streams: list[list[tuple[int, int]]], end_ms: int) -> str | None:
    """The consistency check on raw streams, all ending at `end_ms` (the window
    is [0, end_ms])."""
    chunks = _chunks(streams, end_ns=end_ms * MS)
    m = metrics.decode_metrics(chunks, 0, end_ms * MS, np.zeros(len(streams), dtype=bool))
    return decode_checks.consistency_problem(m)


def test_a_slow_tail_is_consistent_and_a_stuck_stream_is_not():
    # five streams at 200 tok/s and three 8x slower: the median (200) x 8 streams
    # is 49% above the true total, but nothing is wrong: this is a real tail
    fast = [[(t * 5 * MS, t + 1) for t in range(800)] for _ in range(5)]
    slow = [[(t * 40 * MS, t + 1) for t in range(100)] for _ in range(3)]
    assert _judge(fast + slow, 4000) is None
    # one of two streams stops receiving after 1 s but stays open: the count says
    # two streams were receiving tokens for the whole window, the total says one
    stuck = [[(t * 5 * MS, t + 1) for t in range(200)]]
    assert "inconsistent figures" in (_judge(fast[:1] + stuck, 4000) or "")


@pytest.mark.parametrize("events, expect", [
    ([b'{"choices":[],"usage":{"completion_tokens":5}}',
      b'{"choices":[],"usage":{"completion_tokens":3}}'], "fell from 5 to 3"),
    ([b'{"choices":[],"usage":{"completion_tokens":11}}'], "exceeds max_tokens 10"),
    ([b'{"choices":[],"usage":{"completion_tokens":"7"}}'], "is not a count"),
    ([b'{"choices":[],"usage":{"completion_tokens":-1}}'], "is not a count"),
    ([b'{"choices":[],"usage":{"completion_tokens":NaN}}'], "is not a count"),
    ([b'{"choices":[],"usage":{"completion_tokens":true}}'], "is not a count"),
    ([b'{"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":1e400}}'], "is not a count"),
    ([b'{"choices":[],"usage":{"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-4}}}'],
     "is not a count"),
    ([b'{"choices":"x"}'], "unexpected shape"),
    ([b'{"choices":[{"delta":"x"}]}'], "unexpected shape"),
    ([b'{"choices":[{"delta":{"content":5}}]}'], "unexpected shape"),
    ([b'{"choices":[],"usage":[1]}'], "unexpected shape"),
])
def test_parser_refuses_impossible_counts_and_shapes(events, expect):
    parsed = parse_events([(i, e) for i, e in enumerate(events)], max_tokens=10)
    assert parsed.error and expect in parsed.error, parsed.error


def test_decode_problems_names_an_inconsistent_window():
    """Two streams at 100 tok/s and a third that is open the whole window but
    stops after its second token, 10 ms in: 100 tok/s a stream × 3 streams
    receiving tokens (300) cannot be the total (about 200). The same third
    stream resuming at the window's end is a slow request, a tail, and consistent."""
    streams = [[(t * 10 * MS, t + 1) for t in range(201)] for _ in range(2)]
    chunks = _chunks(streams)
    m = metrics.decode_metrics(chunks, 0, 2000 * MS, np.array([False, False]))
    assert decode_checks.decode_problems(chunks, 0, 2000 * MS, m) == []
    stuck = _chunks(streams + [[(0, 1), (10 * MS, 2)]], end_ns=2000 * MS)
    m = metrics.decode_metrics(stuck, 0, 2000 * MS, np.array([False, False, False]))
    (why,) = decode_checks.decode_problems(stuck, 0, 2000 * MS, m)
    assert why.startswith("inconsistent figures")
    slow = _chunks(streams + [[(0, 1), (1990 * MS, 2)]], end_ns=2000 * MS)
    m = metrics.decode_metrics(slow, 0, 2000 * MS, np.array([False, False, False]))
    assert decode_checks.decode_problems(slow, 0, 2000 * MS, m) == []


def _decode_record(chunk_ns: list[int]) -> object:
    from bench.measure.records import RequestRecord

    return RequestRecord(
        phase="decode", context=128, concurrency=1, request_id="r0", purpose="measure",
        stream_index=0, send_ns=0, end_ns=4000 * MS, prompt_tokens=128, cached_tokens=None,
        finish_reason=None, error=None, cancelled=True, chunk_ns=chunk_ns,
        chunk_tokens=list(range(1, len(chunk_ns) + 1)), counting="usage_continuous")


# One stream at 200 tok/s, 4 s window, silent from 1.5 s to 3.5 s.
FROZEN_SERVER = [t * 5 * MS + (2000 * MS if t >= 300 else 0) for t in range(400)]
# The same silence caused by a collector that stopped reading: the server kept
# sending, and the 400 tokens that waited in the socket arrive together at 3.5 s.
CLIENT_STALL = [t * 5 * MS if t < 300 else
                (3500 * MS + (t - 300) * 1000 if t < 700 else (t - 300) * 5 * MS + 1500 * MS)
                for t in range(800)]


def test_a_silence_the_client_caused_is_not_blamed_on_the_server():
    """A collector that stopped reading for 2 s leaves a gap in the stamps, as a
    frozen server does, but it ends in a backlog (what the server kept sending
    waited in the socket): that silence is not a server stall; the frozen
    server's is, even when the busy host also flagged the cell client-bound."""
    from bench.measure.records import judge_decode

    busy = lambda tbt: f"stalled client (tbt {tbt:.1f})"  # noqa: E731
    frozen = judge_decode([_decode_record(FROZEN_SERVER)], 1, 0, 4000 * MS, None)
    assert frozen.status == "error" and "the server stalled" in frozen.reason
    frozen_busy = judge_decode([_decode_record(FROZEN_SERVER)], 1, 0, 4000 * MS, None, busy)
    assert frozen_busy.status == "error" and "the server stalled" in frozen_busy.reason
    client = judge_decode([_decode_record(CLIENT_STALL)], 1, 0, 4000 * MS, None, busy)
    assert client.status == "valid" and client.client_bound.startswith("stalled client")
    for stamps, stalled in ((FROZEN_SERVER, True), (CLIENT_STALL, False)):
        chunks = _chunks([[(t, k + 1) for k, t in enumerate(stamps)]])
        m = metrics.decode_metrics(chunks, 0, 4000 * MS, np.array([False]))
        found = decode_checks.decode_problems(chunks, 0, 4000 * MS, m, client_bound=True)
        assert bool(found) is stalled, found


def test_a_backlog_is_at_least_half_of_what_the_silence_held_back():
    # 2 s silence at 0.2 tokens/ms: 400 held back; half (200) arriving at once is the line.
    for burst, backlog in ((199, False), (201, True)):
        stamps = [0] + [2000 * MS] * burst + [2000 * MS + 500 * MS]
        chunks = _chunks([[(t, k + 1) for k, t in enumerate(stamps)]])
        assert decode_checks.ends_in_backlog(chunks, 0, 2000 * MS, 0.2 / MS,
                                             100 * MS) is backlog
