"""Whether the collector itself kept up: read delays and event-loop stalls.

A saturated client reads in bursts, which looks exactly like a slow server.
The stream client feeds every read (kernel stamp to read delay) and a small
event-loop timer into `LoopLagMonitor`; `bound_reason()` (pure) says whether
the client's delays in a window could have moved a published figure of the
cell by more than its displayed precision (docs/performance.md,
"Client-bound detection").

With kernel receive stamps a late read moves no stamp: a stamp is the
packet's arrival, except that TCP merges packets waiting in a socket under
the newest one's stamp. So the judgement is made on the cell's stamps
themselves (bench/measure/stamp_bounds.py): which events share a stamp with later
ones, how far each published figure (each published level of it) could
move through them, against the step it is shown with, and whether a
process stopped reading all its streams (bench/measure/reader_stalls.py: a frozen
`--workers` process, which cannot time its own loop while stopped and whose
every read still carries a kernel stamp). The delays do not enter it.

Without kernel stamps (no SO_TIMESTAMPNS, or some reads without one) every
stamp is a read time and its error unknown, so the conservative delay rule
stands: a window is client-bound when

1. the 99th percentile of the client's wait exceeds the cell's median TBT:
   over 1% of the tokens may carry a later token's stamp; the wait is the
   kernel-stamp-to-read delay of the events (reads), or the time-weighted
   wait an event-loop stall imposes on a packet arriving during it; or
2. a stall longer than one TBT spans either edge of the window and the
   tokens it could push across the edge (event rate x stall) could change
   total tok/s by more than half its displayed step.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench.measure.figure_bound import bound_text
from bench.measure.stamp_bounds import FigureBound, stamp_reason
from bench.measure.stamp_bounds import tok_s_step as total_display_step

_mono = time.monotonic_ns
QUANTILE = 0.99
DEFAULT_TBT_MS = 5.0  # no TBT measured (no decode tokens): one token at 200 tok/s
_LONG_STALL_NS = 1_000_000  # stalls kept one by one (for the window's edges)
_LONG_PER_BIN = 8
# Histogram buckets kept per bin: up to 2**36 ns (69 s, past the default 60 s
# --stall-timeout); longer ones count there. (48 stopped at 0.54 s, so a
# process frozen for 1.5 s counted as a 0.5 s stall, and in a 60 s window the
# delay rule let it pass.)
_KEYS = 76
# Delays under 2**18 ns (0.26 ms) share bucket 0: a token gap that short comes
# only in floods, whose delays are far longer.
_FLOOR_BITS = 18


def bucket(value_ns: int) -> int:
    """Histogram bucket of a delay: 4 per power of two (at most 19% wide) from
    0.26 ms, one bucket below. Few buckets per 0.25 s bin keep an hour of
    bins small; cheap enough for the read path."""
    if value_ns < 1 << _FLOOR_BITS:
        return 0
    b = value_ns.bit_length()
    return ((b - _FLOOR_BITS) << 2) | ((value_ns >> (b - 3)) & 3)


def bucket_range(key: int) -> tuple[int, int]:
    """[low, high) of a bucket in ns."""
    if key < 4:
        return 0, 1 << _FLOOR_BITS
    b = (key >> 2) + _FLOOR_BITS
    lo = (4 | (key & 3)) << (b - 3)
    return lo, lo + (1 << (b - 3))


@dataclass
class WindowDelays:
    """The client's delays over one window (monitor bins overlapping it): pure data.

    read_delays: bucket -> events completed by kernel-stamped reads whose
    newest packet waited that long; stalls: bucket -> [ticks, summed stall
    ns] of the event-loop timer (see `LoopLagMonitor.tick`); long_stalls: (end ns,
    length ns) of the longest stalls of at least 1 ms (a few per 0.25 s);
    span_ns: the time these figures cover (the bins overlapping the window;
    0: the window)."""

    start_ns: int
    end_ns: int
    events: int = 0
    kernel_events: int = 0
    ticks: int = 0
    read_delays: dict[int, int] = field(default_factory=dict)
    stalls: dict[int, list[int]] = field(default_factory=dict)
    long_stalls: list[tuple[int, int]] = field(default_factory=list)
    span_ns: int = 0

    @property
    def window_ns(self) -> int:
        return max(1, self.end_ns - self.start_ns)

    @property
    def covered_ns(self) -> int:
        return self.span_ns or self.window_ns

    def read_delay_quantile(self, q: float = QUANTILE) -> float | None:
        """The q-quantile (ns) of the read delay over events, None without kernel stamps."""
        total = sum(self.read_delays.values())
        if not total:
            return None
        rank, seen = q * total, 0
        for key in sorted(self.read_delays):
            n = self.read_delays[key]
            if seen + n >= rank:
                lo, hi = bucket_range(key)
                return lo + (hi - lo) * max(0.0, rank - seen) / n
            seen += n
        return float(bucket_range(max(self.read_delays))[1])

    def stall_wait_quantile(self, q: float = QUANTILE) -> float:
        """The wait (ns) exceeded for a fraction 1 - q of the window's time:
        a packet arriving in a stall of length L waits up to L, so the time
        fraction with a wait over x is sum(max(0, L - x)) / window. Each
        bucket counts at its mean stall."""
        means = sorted(((s / c, c) for c, s in self.stalls.values() if c), reverse=True)
        target = (1 - q) * self.covered_ns
        count = total = 0.0
        for i, (mean, c) in enumerate(means):
            count += c
            total += mean * c
            x = (total - target) / count  # where sum over these buckets of (mean - x) == target
            nxt = means[i + 1][0] if i + 1 < len(means) else 0.0
            if x >= nxt:
                return max(0.0, x)
        return 0.0

    def event_rate(self) -> float:
        """Events per second (a floor for tokens per second)."""
        return self.events / (self.covered_ns / 1e9)


def _ms(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms:.1f}" if ms >= 0.95 else f"{ms:.2g}"


def bound_reason(delays: WindowDelays, tbt_ms: float | None,
                 stamps: list[FigureBound] | None = None) -> str | None:
    """Why the client could have moved a published figure of this window by
    more than its displayed precision (the rule in the module docstring), or
    None. `stamps`: the cell's figure bounds from its stamps
    (`bench.measure.stamp_bounds.table_bounds`); they decide alone when every read
    of the window carried a kernel stamp. Otherwise, or without them, the
    delay rule judges against `tbt_ms`, the cell's median time between tokens."""
    kernel = delays.kernel_events == delays.events
    merged = stamp_reason(stamps) if stamps is not None else None
    if stamps is not None and kernel:
        return merged
    delay = delay_reason(delays, tbt_ms)
    if delay and stamps is not None:
        delay += f" ({unstamped_note(delays)})"
    reasons = [r for r in (delay, merged) if r]
    return "; ".join(reasons) or None


def unstamped_note(delays: WindowDelays) -> str:
    """Why the delay rule judged a window whose stamps could have judged it
    alone: some of its reads came without a kernel receive stamp."""
    return (f"{delays.events - delays.kernel_events:,} of {delays.events:,} events "
            f"read without a kernel receive stamp")


def shards_bound_reason(delays: list[tuple[int, WindowDelays]], tbt_ms: float | None,
                        stamps: list[FigureBound] | None) -> str | None:
    """`bound_reason` of a cell whose streams were read by several processes
    (bench/distributed/shards.py), `delays` each one's (shard number, delays): the stamps are the whole
    cell's and judge alone when every shard's every read carried a kernel
    stamp; otherwise each shard's delays are judged by the delay rule, and
    the cell is client-bound if any shard is (each named)."""
    kernel = all(d.kernel_events == d.events for _, d in delays)
    merged = stamp_reason(stamps) if stamps is not None else None
    if stamps is not None and kernel:
        return merged
    reasons = [f"shard {k}: {r}" + (f" ({unstamped_note(d)})"
                                     if stamps is not None and d.kernel_events < d.events else "")
               for k, d in delays if (r := delay_reason(d, tbt_ms))]
    return "; ".join([*reasons, *([merged] if merged else [])]) or None


def delay_reason(delays: WindowDelays, tbt_ms: float | None) -> str | None:
    """The delay rule (read stamps): rules 1 and 2 of the module docstring."""
    assumed = tbt_ms is None or not math.isfinite(tbt_ms) or tbt_ms <= 0
    tbt_ns = (DEFAULT_TBT_MS if assumed else float(tbt_ms)) * 1e6  # type: ignore[arg-type]
    against = f"{_ms(tbt_ns)} ms between tokens" + (" (assumed)" if assumed else "")
    reasons = []
    read_p = delays.read_delay_quantile()
    if read_p is not None and read_p > tbt_ns:
        reasons.append(f"read delay p99 {_ms(read_p)} ms against {against}")
    stall_p = delays.stall_wait_quantile()
    if stall_p > tbt_ns:
        reasons.append(f"event-loop stalls: p99 wait {_ms(stall_p)} ms against {against}")
    rate = delays.event_rate()
    step = total_display_step(rate)
    for edge, name in ((delays.start_ns, "start"), (delays.end_ns, "end")):
        across = [length for end, length in delays.long_stalls
                  if length > tbt_ns and end - length <= edge <= end]
        if not across:
            continue
        moved = rate * max(across) / 1e9 / (delays.window_ns / 1e9)  # tok/s, at most
        if moved > step / 2:
            reasons.append(f"a {_ms(max(across))} ms event-loop stall across the window's "
                           f"{name} could move total tok/s by up to {bound_text(moved, step)}, "
                           f"over half the {bound_text(step, step)} it is shown to")
    return "; ".join(reasons) or None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector, e.g. over a measurement window.

    Why: a full collection walks every live container, and the streams'
    event lists grow with the window: at 128 streams x 200 tok/s it took
    8-20 ms of CPU, twice in an 8 s stream (docs/performance.md), an event-loop stall
    that merges packets and moves stamps. Reference counting still frees all
    but cycles, which the next collection after the window takes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class ClientLoad:
    """What the client went through in a window (the figures behind the old
    fixed-threshold flag, kept for `StreamClient.load()`). Read delay: kernel
    receive stamp to read (kernel-stamped reads only); stall: event-loop timer
    lateness."""

    reads: int
    kernel_reads: int
    events: int
    read_delay_mean_ms: float | None
    read_delay_max_ms: float | None
    late_event_fraction: float  # events in reads that waited > delay_limit_ms
    ticks: int
    loop_lag_max_ms: float | None
    stall_fraction: float  # time in timer delays > lag_limit_ms / window
    client_bound: bool
    reason: str | None


class _Bin:
    __slots__ = ("reads", "kreads", "kevents", "events", "late_events", "delay_sum", "max_delay",
                 "ticks", "stalled_ns", "max_lag", "delay_hist", "lag_hist", "long")

    def __init__(self) -> None:
        self.reads = self.kreads = self.kevents = self.events = self.late_events = 0
        self.delay_sum = self.max_delay = self.ticks = self.stalled_ns = self.max_lag = 0
        # per bucket: events by read delay, ticks by stall (an hour of bins: ~14 MB)
        self.delay_hist = array("I", bytes(4 * _KEYS))
        self.lag_hist = array("I", bytes(4 * _KEYS))
        self.long: array | None = None  # end ns, length ns, ...: the longest few stalls


class LoopLagMonitor:
    """Read delays and event-loop stalls in 0.25 s bins kept for `keep_s`.

    Why, given kernel stamps: the bins say whether every read of a window
    carried one (then the stamps judge the cell, bench/measure/stamp_bounds.py); for
    a window without, every delay is error, judged by the delay rule. Two
    figures: the delay from the kernel's stamp to the read, and how late a
    2 ms loop timer fires (a stall: GC, CPU busy, preempted); the client
    fidelity benchmark reports both. `client_bound_reason()` judges a window
    by `bound_reason()`; `client_bound()`/`load()` keep the old fixed
    thresholds (`late_fraction` of events over `delay_limit_ms`, or stalls
    over `lag_limit_ms` for `late_fraction` of the time)."""

    BIN_NS = 250_000_000

    def __init__(self, delay_limit_ms: float = 5.0, lag_limit_ms: float = 5.0,
                 late_fraction: float = 0.01, tick_s: float = 0.002, keep_s: float = 3600) -> None:
        self.delay_limit_ns = int(delay_limit_ms * 1e6)
        self.lag_limit_ns = int(lag_limit_ms * 1e6)
        self.late_fraction = late_fraction
        self.tick_ns = int(tick_s * 1e9)
        self.keep = int(keep_s * 1e9 / self.BIN_NS)
        self.bins: dict[int, _Bin] = {}
        self._key, self._bin = -1, _Bin()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None

    def _at(self, now: int) -> _Bin:
        key = now // self.BIN_NS
        if key != self._key:
            if key not in self.bins:
                self.bins[key] = _Bin()
                while len(self.bins) > self.keep:
                    del self.bins[next(iter(self.bins))]
            self._key, self._bin = key, self.bins[key]
        return self._bin

    def read(self, now: int, delay_ns: int, events: int) -> None:
        """One read at `now` completing `events`; `delay_ns` < 0: no kernel stamp."""
        b = self._bin if now // self.BIN_NS == self._key else self._at(now)
        b.reads += 1
        b.events += events
        if delay_ns >= 0:
            b.kreads += 1
            b.kevents += events
            if delay_ns > self.delay_limit_ns:
                b.late_events += events
            b.delay_sum += delay_ns
            if delay_ns > b.max_delay:
                b.max_delay = delay_ns
            if events:
                if delay_ns < 1 << _FLOOR_BITS:
                    key = 0
                else:
                    n = delay_ns.bit_length()
                    key = ((n - _FLOOR_BITS) << 2) | ((delay_ns >> (n - 3)) & 3)
                b.delay_hist[key if key < _KEYS else _KEYS - 1] += events

    def tick(self, now: int, lag_ns: int) -> None:
        """The event-loop timer fired at `now`, `lag_ns` after it was due.

        A stall began before the timer was due (else it would have fired):
        on average half a timer period before, so a stall's length is taken
        as lateness + half the period once the lateness reaches half a
        period (below that it is the timeout's 1 ms rounding as much as a
        stall)."""
        b = self._at(now)
        b.ticks += 1
        if lag_ns > self.lag_limit_ns:
            b.stalled_ns += lag_ns
        b.max_lag = max(b.max_lag, lag_ns)
        half = self.tick_ns // 2
        stall = lag_ns + half if lag_ns >= half else lag_ns
        b.lag_hist[min(bucket(stall), _KEYS - 1)] += 1
        if stall >= _LONG_STALL_NS:
            if b.long is None:
                b.long = array("q")
            if len(b.long) < 2 * _LONG_PER_BIN:
                b.long.extend((now, stall))
            else:
                i = min(range(1, 2 * _LONG_PER_BIN, 2), key=b.long.__getitem__)
                if b.long[i] < stall:
                    b.long[i - 1], b.long[i] = now, stall

    def ensure_running(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the lag timer on `loop` (restarted if the loop changed)."""
        if self._loop is not loop or self._handle is None:
            self.stop()
            self._loop = loop
            self._schedule()

    def _schedule(self) -> None:
        assert self._loop is not None
        self._handle = self._loop.call_later(self.tick_ns / 1e9, self._fire, _mono() + self.tick_ns)

    def _fire(self, due: int) -> None:
        now = _mono()
        self.tick(now, max(0, now - due))
        if self._loop is not None and not self._loop.is_closed():
            self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop = None

    def _select(self, start_ns: int, end_ns: int) -> list[_Bin]:
        lo, hi = start_ns // self.BIN_NS, end_ns // self.BIN_NS
        return [b for k, b in self.bins.items() if lo <= k <= hi]

    def delays(self, start_ns: int, end_ns: int) -> WindowDelays:
        """The delays of the bins overlapping [start_ns, end_ns] (monotonic ns)."""
        lo, hi = start_ns // self.BIN_NS, end_ns // self.BIN_NS
        out = WindowDelays(start_ns, end_ns, span_ns=(hi - lo + 1) * self.BIN_NS)
        for b in self._select(start_ns, end_ns):
            out.events += b.events
            out.kernel_events += b.kevents
            out.ticks += b.ticks
            for key, n in enumerate(b.delay_hist):
                if n:
                    out.read_delays[key] = out.read_delays.get(key, 0) + n
            for key, c in enumerate(b.lag_hist):
                if c:  # each stall counted at its bucket's middle (within 10%)
                    low, high = bucket_range(key)
                    cell = out.stalls.setdefault(key, [0, 0])
                    cell[0] += c
                    cell[1] += c * (low + high) // 2
            if b.long is not None:
                out.long_stalls += zip(b.long[::2], b.long[1::2], strict=True)
        return out

    def client_bound_reason(self, start_ns: int, end_ns: int, tbt_ms: float | None,
                            stamps: list[FigureBound] | None = None) -> str | None:
        """`bound_reason()` of the window [start_ns, end_ns]."""
        return bound_reason(self.delays(start_ns, end_ns), tbt_ms, stamps)

    def load(self, start_ns: int, end_ns: int) -> ClientLoad:
        """The figures of the bins overlapping [start_ns, end_ns] (monotonic ns)."""
        sel = self._select(start_ns, end_ns)
        kreads, kevents = sum(b.kreads for b in sel), sum(b.kevents for b in sel)
        ticks = sum(b.ticks for b in sel)
        late = sum(b.late_events for b in sel) / kevents if kevents else 0.0
        stalled = sum(b.stalled_ns for b in sel) / max(1, end_ns - start_ns)
        reasons = []
        if late > self.late_fraction:
            reasons.append(f"{late:.1%} of events waited > {self.delay_limit_ns / 1e6:g} ms "
                           "in the kernel")
        if stalled > self.late_fraction:
            reasons.append(f"the event loop stalled > {self.lag_limit_ns / 1e6:g} ms for "
                           f"{stalled:.1%} of the time")
        return ClientLoad(
            reads=sum(b.reads for b in sel), kernel_reads=kreads,
            events=sum(b.events for b in sel),
            read_delay_mean_ms=sum(b.delay_sum for b in sel) / kreads / 1e6 if kreads else None,
            read_delay_max_ms=max(b.max_delay for b in sel) / 1e6 if kreads else None,
            late_event_fraction=late, ticks=ticks,
            loop_lag_max_ms=max(b.max_lag for b in sel) / 1e6 if ticks else None,
            stall_fraction=stalled, client_bound=bool(reasons),
            reason="; ".join(reasons) or None)

    def client_bound(self, start_ns: int, end_ns: int) -> bool:
        """The old fixed-threshold flag (see `load()`)."""
        return self.load(start_ns, end_ns).client_bound
