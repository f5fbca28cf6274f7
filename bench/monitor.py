"""Whether the collector itself kept up: event-loop lag and receive backlog.

A saturated client stamps late and reads in bursts, which looks exactly like
a slow server. The stream client feeds every read (kernel stamp to read
delay) and a small loop timer into `LoopLagMonitor`; a cell whose window
shows too much of either is flagged client-bound, so it can never pass as
a slow server.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

_mono = time.monotonic_ns


@dataclass
class ClientLoad:
    """What the client went through in a window. Read delay: kernel receive
    stamp to read (kernel-stamped reads only); stall: loop timer lateness."""

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
                 "ticks", "stalled_ns", "max_lag")

    def __init__(self) -> None:
        self.reads = self.kreads = self.kevents = self.events = self.late_events = 0
        self.delay_sum = self.max_delay = self.ticks = self.stalled_ns = self.max_lag = 0


class LoopLagMonitor:
    """Whether the client could keep up, in 0.25 s bins kept for `keep_s`.

    Why it matters even with kernel stamps: TCP merges packets waiting in a
    socket and keeps the newest stamp, so when the client does not read a
    stream for longer than its token interval (5 ms at 200 tok/s), the older
    events get the newer stamp; without kernel stamps every delay is error.
    Two figures: the delay from the kernel's stamp to the read, and how late
    a 2 ms loop timer fires (a stall: GC, CPU busy, preempted). A window is
    client-bound when more than `late_fraction` (1%) of its events came in
    reads that waited over `delay_limit_ms` (5 ms), or the loop stalled over
    `lag_limit_ms` (5 ms) for more than 1% of the time. Normal decode bursts
    stay below: the last of 256 streams receiving at once waits ~2-3 ms."""

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
            b.max_delay = max(b.max_delay, delay_ns)

    def tick(self, now: int, lag_ns: int) -> None:
        b = self._at(now)
        b.ticks += 1
        if lag_ns > self.lag_limit_ns:
            b.stalled_ns += lag_ns
        b.max_lag = max(b.max_lag, lag_ns)

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

    def load(self, start_ns: int, end_ns: int) -> ClientLoad:
        """The figures of the bins overlapping [start_ns, end_ns] (monotonic ns)."""
        lo, hi = start_ns // self.BIN_NS, end_ns // self.BIN_NS
        sel = [b for k, b in self.bins.items() if lo <= k <= hi]
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
        return self.load(start_ns, end_ns).client_bound


# ---- HTTP/1.1 + SSE --------------------------------------------------------
