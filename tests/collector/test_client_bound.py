"""The client-bound rule (bench/measure/monitor.py `bound_reason`). Without kernel
stamps, the delay rule on constructed delay distributions: it fires when the
client's waits could move a published figure by more than its displayed
precision, and stays quiet on waits that cannot. With kernel stamps the
cell's stamps decide (tests/collector/test_stamp_bounds.py tests them; here, how the
two combine). No network; one test runs a real event loop blocked on
purpose. tests/collector/test_client_bound_cli.py runs the real collector."""

from __future__ import annotations

import asyncio
import gc
import random
import time

import numpy as np
import pytest

from bench.measure import stamp_bounds
from bench.measure.monitor import (
    LoopLagMonitor,
    WindowDelays,
    bound_reason,
    bucket,
    bucket_range,
    delay_reason,
    gc_paused,
    shards_bound_reason,
    total_display_step,
)
from bench.measure.stream import StreamClient
from tests.collector.test_stamp_bounds import E_NS, MS, S_NS, T0, chunks_of, interior_merges, merge, steady


def paced_reads(mon: LoopLagMonitor, start: int, seconds: float, streams: int, tbt_ms: float,
                delay_ms: float = 0.2) -> None:
    """One event per stream every tbt_ms, each read `delay_ms` after its stamp."""
    step = int(tbt_ms * MS)
    for t in range(start, start + int(seconds * 1e9), step):
        for _ in range(streams):
            mon.read(t, int(delay_ms * MS), 1)


def ticks(mon: LoopLagMonitor, start: int, seconds: float, lag_ms: float = 0.3,
          stall_every_ms: float | None = None, stall_ms: float = 0.0) -> None:
    """A 2 ms loop timer `lag_ms` late, plus a stall of `stall_ms` every `stall_every_ms`."""
    t, end, next_stall = start, start + int(seconds * 1e9), start
    while t < end:
        lag = int(lag_ms * MS)
        if stall_every_ms and t >= next_stall:
            lag = int(stall_ms * MS)
            next_stall += int(stall_every_ms * MS)
        t += 2 * MS + lag
        mon.tick(t, lag)


def test_buckets_cover_every_value_within_a_fifth() -> None:
    rng = random.Random(1)
    floor = 2**18  # 0.26 ms: shorter delays share bucket 0
    values = [0, 1, floor - 1, floor, floor + 1, 2 * floor - 1, 2 * floor, 5 * MS, 2**40] + [
        int(rng.lognormvariate(14, 3)) for _ in range(5000)]
    for v in values:
        lo, hi = bucket_range(bucket(v))
        assert lo <= v < hi
        if v >= floor:
            assert (hi - lo) / lo <= 0.25 and hi / v <= 1.25
    keys = sorted({bucket(v) for v in values})
    for a, b in zip(keys, keys[1:], strict=False):  # ranges of increasing keys do not overlap
        assert bucket_range(a)[1] <= bucket_range(b)[0]


def test_read_delay_quantile_matches_numpy_within_a_bucket() -> None:
    rng = np.random.default_rng(2)
    delays = rng.lognormal(np.log(0.5 * MS), 1.0, 20_000).astype(np.int64)
    mon = LoopLagMonitor()
    for i, d in enumerate(delays):
        mon.read(T0 + i * 10_000, int(d), 1)
    got = mon.delays(T0, T0 + 200 * MS).read_delay_quantile(0.99)
    want = float(np.quantile(delays, 0.99))
    assert got == pytest.approx(want, rel=0.2)


def test_keeping_up_is_not_client_bound() -> None:
    mon = LoopLagMonitor()
    paced_reads(mon, T0, 2.0, 32, 5.0, delay_ms=0.5)
    ticks(mon, T0, 2.0)
    assert mon.client_bound_reason(T0, T0 + 2000 * MS, 5.0) is None
    assert not mon.client_bound(T0, T0 + 2000 * MS)


def test_read_delays_past_the_time_between_tokens_fire() -> None:
    mon = LoopLagMonitor()
    start = T0
    for i in range(1000):  # 2% of the events waited 12 ms in the kernel, the rest 0.5 ms
        mon.read(start + i * MS, 12 * MS if i % 50 == 0 else MS // 2, 1)
    ticks(mon, start, 1.0)
    reason = mon.client_bound_reason(start, start + 1000 * MS, 5.0)
    assert reason is not None and reason.startswith("read delay p99 ")
    assert "against 5.0 ms between tokens" in reason
    # the same waits cannot merge tokens 20 ms apart
    assert mon.client_bound_reason(start, start + 1000 * MS, 20.0) is None


def test_a_tail_under_one_percent_does_not_fire() -> None:
    mon = LoopLagMonitor()
    for i in range(1000):  # 0.5% waited 30 ms: the 99th percentile is still 0.5 ms
        mon.read(T0 + i * MS, 30 * MS if i % 200 == 0 else MS // 2, 1)
    assert mon.client_bound_reason(T0, T0 + 1000 * MS, 5.0) is None


def test_short_stalls_that_cannot_merge_tokens_do_not_fire() -> None:
    """6 ms every 250 ms: stalled over 5 ms for 2.4% of the time, which the old
    rule flagged; a packet waits over 5 ms only in the first 1 ms of each
    stall (0.4% of the time), so at 5 ms between tokens the stamps hold."""
    mon = LoopLagMonitor()
    ticks(mon, T0, 4.0, stall_every_ms=250, stall_ms=6)
    assert mon.client_bound(T0, T0 + 4000 * MS)  # the old rule cried wolf
    assert mon.client_bound_reason(T0, T0 + 4000 * MS, 5.0) is None


def test_stalls_that_merge_over_one_percent_of_tokens_fire() -> None:
    """12 ms every 500 ms: packets arriving in the first 7 ms of a stall
    wait past the next token (1.4% of the time)."""
    mon = LoopLagMonitor()
    ticks(mon, T0, 4.0, stall_every_ms=500, stall_ms=12)
    reason = mon.client_bound_reason(T0, T0 + 4000 * MS, 5.0)
    assert reason is not None and reason.startswith("event-loop stalls: p99 wait ")
    wait = float(reason.split("p99 wait ")[1].split(" ms")[0])
    assert 5.0 < wait < 12.0


def test_a_stall_is_taken_as_its_lateness_plus_half_a_timer_period() -> None:
    """The timer fell due somewhere in the stall's first period (1 ms on
    average after it began): 5.5 ms late every 100 ms is a ~6.5 ms stall,
    whose first 1.5 ms merge tokens 5 ms apart (1.5% of them)."""
    mon = LoopLagMonitor()
    ticks(mon, T0, 4.0, stall_every_ms=100, stall_ms=5.5)
    reason = mon.client_bound_reason(T0, T0 + 4000 * MS, 5.0)
    assert reason is not None and "event-loop stalls" in reason
    # a lateness under half a period is the timeout's rounding as much as a stall
    quiet = LoopLagMonitor()
    ticks(quiet, T0, 4.0, lag_ms=0.9)
    assert quiet.delays(T0, T0 + 4000 * MS).stall_wait_quantile(0.5) < 1.0 * MS


def test_slow_tokens_tolerate_stalls_the_old_rule_flagged() -> None:
    """The false alarm of issue 9: a CPU engine at 30 ms between tokens, the
    loop stalled 8 ms every 200 ms (4% of the time). Nothing can merge."""
    mon = LoopLagMonitor()
    paced_reads(mon, T0, 3.0, 8, 30.0, delay_ms=1.0)
    ticks(mon, T0, 3.0, stall_every_ms=200, stall_ms=8)
    assert mon.client_bound(T0, T0 + 3000 * MS)
    assert mon.client_bound_reason(T0, T0 + 3000 * MS, 30.0) is None


def test_a_saturated_client_fires() -> None:
    """A flood: every read waits 3-20 ms, tokens come 0.2 ms apart per stream."""
    mon = LoopLagMonitor()
    rng = random.Random(3)
    for i in range(5000):
        mon.read(T0 + i * 200_000, int(rng.uniform(3, 20) * MS), 8)
    ticks(mon, T0, 1.0, lag_ms=9.0)
    reason = mon.client_bound_reason(T0, T0 + 1000 * MS, 0.2)
    assert reason is not None and "read delay p99" in reason and "event-loop stalls" in reason


def test_a_stall_across_the_window_end_fires_in_the_middle_it_does_not() -> None:
    """40 ms without reads at 6,400 events/s in a 30 s window: across the
    end it can push up to 256 tokens out (8.5 tok/s, shown to 0.1); in the
    middle it shifts 0.13% of the tokens by a few gaps, which no figure shows."""
    start, end = T0, T0 + 30_000 * MS
    for where, expect in ((end + 10 * MS, "end"), (start + 15_000 * MS, None),
                          (start + 30 * MS, "start")):
        mon = LoopLagMonitor()
        paced_reads(mon, start, 30.0, 32, 5.0, delay_ms=0.3)
        ticks(mon, start, 30.0)
        mon.tick(where, 40 * MS)
        reason = mon.client_bound_reason(start, end, 5.0)
        if expect is None:
            assert reason is None
        else:
            assert reason is not None and f"across the window's {expect}" in reason
            assert "over half the 0.1 it is shown to" in reason
        # with tokens 50 ms apart a 40 ms stall merges nothing
        assert mon.client_bound_reason(start, end, 50.0) is None


def test_no_time_between_tokens_assumes_one_token_at_200_tok_s() -> None:
    mon = LoopLagMonitor()
    for i in range(1000):
        mon.read(T0 + i * MS, 12 * MS if i % 20 == 0 else MS // 2, 1)
    for tbt in (None, float("nan"), 0.0, -1.0, float("inf")):
        reason = mon.client_bound_reason(T0, T0 + 1000 * MS, tbt)
        assert reason is not None and "5.0 ms between tokens (assumed)" in reason


def test_loop_stamps_carry_no_read_delay() -> None:
    mon = LoopLagMonitor()
    for i in range(1000):  # no kernel stamps: the delay is unknown (-1)
        mon.read(T0 + i * MS, -1, 1)
    d = mon.delays(T0, T0 + 1000 * MS)
    assert d.read_delay_quantile() is None and d.events == 1000 and d.kernel_events == 0
    assert bound_reason(d, 5.0) is None


def test_only_the_window_counts() -> None:
    mon = LoopLagMonitor()
    ticks(mon, T0, 1.0, stall_every_ms=100, stall_ms=40)  # a bad second
    later = T0 + 5000 * MS
    ticks(mon, later, 1.0)
    assert mon.client_bound_reason(T0, T0 + 1000 * MS, 5.0) is not None
    assert mon.client_bound_reason(later, later + 1000 * MS, 5.0) is None


def test_constructed_window_delays() -> None:
    """The pure function needs no monitor: a hand-built distribution."""
    d = WindowDelays(T0, T0 + 1000 * MS, events=2000, kernel_events=2000,
                     read_delays={bucket(MS): 1970, bucket(9 * MS): 30})
    assert bound_reason(d, 5.0) == "read delay p99 9.1 ms against 5.0 ms between tokens"
    assert bound_reason(d, 10.0) is None


def test_the_delay_rule_says_which_reads_had_no_kernel_stamp() -> None:
    """With the cell's stamps at hand the delay rule judges only because some
    reads came without a kernel stamp; the reason says how many (the CI run
    that met one gave no clue why the delay rule had spoken)."""
    d = WindowDelays(T0, T0 + 1000 * MS, events=2000, kernel_events=1997,
                     read_delays={bucket(MS): 1967, bucket(9 * MS): 30})
    assert bound_reason(d, 5.0, []) == (
        "read delay p99 9.1 ms against 5.0 ms between tokens "
        "(3 of 2,000 events read without a kernel receive stamp)")
    assert shards_bound_reason([(1, d)], 5.0, []) == (
        "shard 1: read delay p99 9.1 ms against 5.0 ms between tokens "
        "(3 of 2,000 events read without a kernel receive stamp)")
    whole = WindowDelays(T0, T0 + 1000 * MS, events=2000, kernel_events=2000,
                         read_delays={bucket(MS): 1970, bucket(9 * MS): 30})
    assert bound_reason(whole, 5.0, []) is None  # every read stamped: the stamps decide


def test_display_steps_follow_the_page_formats() -> None:
    assert total_display_step(6216.0) == 0.1
    assert total_display_step(9_999.9) == 0.1
    assert total_display_step(17_600) == 100
    assert total_display_step(1_200_000) == 100_000


def test_gc_paused_holds_the_collector_off_and_restores_it() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("the window failed")
    assert gc.isenabled()  # back on after an exception too
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


def test_a_blocked_loop_fires_through_the_client() -> None:
    async def main() -> tuple[str | None, str | None]:
        client = StreamClient("http://127.0.0.1:9")
        client.monitor.ensure_running(asyncio.get_running_loop())
        start = time.monotonic_ns()
        for _ in range(6):
            time.sleep(0.05)  # the loop cannot run its timer meanwhile
            await asyncio.sleep(0.01)
        end = time.monotonic_ns()
        client.monitor.stop()
        # 50 ms stalls in 0.36 s: against 5 ms tokens over 1% of them merge;
        # tokens 10 s apart cannot merge at all
        return (client.client_bound_reason(start, end, 5.0),
                client.client_bound_reason(start, end, 10_000.0))

    fast, slow = asyncio.run(main())
    assert fast is not None and "event-loop stalls" in fast
    assert slow is None


# ---- the old fixed-threshold flag (client_bound/load), kept until callers switch ----


def test_old_flag_on_synthetic_read_delays() -> None:
    mon = LoopLagMonitor()
    t0 = 10**12
    for i in range(1000):  # 1 s of reads that waited 1 ms: keeping up
        mon.read(t0 + i * MS, 1 * MS, 2)
    assert not mon.client_bound(t0, t0 + 1000 * MS)
    t1 = t0 + 2000 * MS
    for i in range(1000):  # 5% of the events waited 12 ms in the kernel
        mon.read(t1 + i * MS, 12 * MS if i % 20 == 0 else 1 * MS, 2)
    load = mon.load(t1, t1 + 1000 * MS)
    assert load.client_bound and "waited" in (load.reason or "")
    assert load.late_event_fraction == pytest.approx(0.05) and load.read_delay_max_ms == 12
    assert not mon.client_bound(t0, t0 + 1000 * MS)  # the first window is unchanged
    for i in range(1000):  # reads without kernel stamps carry no delay
        mon.read(t1 + 5000 * MS + i * MS, -1, 1)
    assert not mon.client_bound(t1 + 5000 * MS, t1 + 6000 * MS)


def test_old_flag_on_synthetic_loop_stalls() -> None:
    mon = LoopLagMonitor()
    t0 = 10**12
    for i in range(500):  # a 2 ms timer, 1 ms late: normal
        mon.tick(t0 + i * 2 * MS, 1 * MS)
    assert not mon.client_bound(t0, t0 + 1000 * MS)
    mon.tick(t0 + 1500 * MS, 40 * MS)  # one 40 ms stall in a second: 4%
    load = mon.load(t0 + 1000 * MS, t0 + 2000 * MS)
    assert load.client_bound and "stalled" in (load.reason or "")
    assert load.loop_lag_max_ms == 40


def test_old_flag_sees_a_blocked_loop() -> None:
    async def main() -> tuple[bool, str | None]:
        client = StreamClient("http://127.0.0.1:9")
        client.monitor.ensure_running(asyncio.get_running_loop())
        start = time.monotonic_ns()
        for _ in range(5):
            time.sleep(0.05)  # the loop cannot run its timer meanwhile
            await asyncio.sleep(0.01)
        end = time.monotonic_ns()
        client.monitor.stop()
        return client.client_bound(start, end), client.load(start, end).reason

    bound, reason = asyncio.run(main())
    assert bound and "stalled" in (reason or "")


# ---- with kernel stamps: the stamps decide, the delay rule otherwise ----


def kernel_stamped_stalls(kernel: bool = True) -> LoopLagMonitor:
    """The audit's busy host: every read kernel-stamped, the loop stalled 20 ms
    every 250 ms, tokens 10 ms apart (the stall wait p99 is ~18 ms)."""
    mon = LoopLagMonitor()
    paced_reads(mon, T0, 4.0, 8, 10.0, delay_ms=0.3)
    ticks(mon, T0, 4.0, stall_every_ms=250, stall_ms=20)
    if not kernel:
        mon.read(S_NS + 5 * MS, -1, 1)  # one read without a kernel stamp
    return mon


def test_stalls_that_merged_only_interior_tokens_are_not_client_bound() -> None:
    """The false alarm of issue 18, deterministically: the stalls' p99 wait is
    past the time between tokens, which the delay rule flags, but with kernel
    stamps the merges they caused are in the cell's stamps and move no
    published figure."""
    delays = kernel_stamped_stalls().delays(S_NS, E_NS)
    old = delay_reason(delays, 10.0)
    assert old is not None and old.startswith("event-loop stalls: p99 wait ")
    assert bound_reason(delays, 10.0, interior_merges()) is None
    # the same stalls with one merge across the window's end are flagged by it
    streams, sends = steady()
    k = next(i for i, (t, _) in enumerate(streams[0]) if t > E_NS)
    merge(streams[0], k - 1, k)
    edge = stamp_bounds.figure_bounds(chunks_of(streams, sends), S_NS, E_NS, np.zeros(8, bool))
    reason = bound_reason(delays, 10.0, edge)
    assert reason == "late reads: total tok/s could be off by up to 0.5, over half the 0.1 it is shown to"


def test_without_kernel_stamps_the_delay_rule_still_judges() -> None:
    """A read stamped when read has an unknown error: the delay rule decides,
    and what the stamps show is added."""
    mon = kernel_stamped_stalls(kernel=False)
    reason = mon.client_bound_reason(S_NS, E_NS, 10.0, interior_merges())
    assert reason is not None and reason.startswith("event-loop stalls: p99 wait ")
    quiet = LoopLagMonitor()
    for t in range(T0, T0 + 4000 * MS, 10 * MS):  # read stamps, a loop keeping up
        for _ in range(8):
            quiet.read(t, -1, 1)
    ticks(quiet, T0, 4.0)
    assert quiet.client_bound_reason(S_NS, E_NS, 10.0, interior_merges()) is None
