"""A shard's clock against the coordinator's (`bench run --shard i/N`): pure.

Each host stamps on its own CLOCK_MONOTONIC, whose zero is its boot: two
hosts' readings differ by an unknown constant (plus a slow drift). The
coordinator measures it NTP-style: it sends its time t0, the shard stamps
the message's arrival t1 and its answer t2 on its own clock, and the
coordinator stamps the answer's arrival t3. With θ = shard − coordinator,

    θ ≈ ((t1 − t0) + (t2 − t3)) / 2,   |error| ≤ δ / 2,  δ = (t3 − t0) − (t2 − t1),

whatever the split of the round trip δ between the two directions (neither
can be negative). Of several exchanges the one with the smallest δ is kept:
its bound is the tightest. A cell's offset is measured before it (and used
to convert every time of the cell) and again after it; the cell's stated
uncertainty also covers how far the offset moved meanwhile
(`over_cell`). docs/methodology.md, "Many hosts", says what it bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from bench.measure.monitor import WindowDelays
from bench.measure.records import RequestRecord


@dataclass(frozen=True)
class Exchange:
    """One round trip: t0, t3 on the coordinator's clock; t1, t2 on the shard's."""

    t0: int
    t1: int
    t2: int
    t3: int

    @property
    def rtt_ns(self) -> int:
        return max(0, (self.t3 - self.t0) - (self.t2 - self.t1))

    @property
    def offset_ns(self) -> int:
        return ((self.t1 - self.t0) + (self.t2 - self.t3)) // 2


@dataclass(frozen=True)
class ClockOffset:
    """shard − coordinator (ns), true within ± uncertainty_ns."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    exchanges: int

    def line(self) -> str:
        return f"{self.offset_ns / 1e9:+.6f} s ± {self.uncertainty_ns / 1e3:.0f} µs"


def estimate(exchanges: list[Exchange]) -> ClockOffset:
    """The offset of the exchange with the smallest round trip, ± half of it
    (rounded up, plus 1 ns for the integer halving)."""
    if not exchanges:
        raise ValueError("no clock exchange")
    best = min(exchanges, key=lambda e: e.rtt_ns)
    return ClockOffset(best.offset_ns, math.ceil(best.rtt_ns / 2) + 1, best.rtt_ns, len(exchanges))


@dataclass(frozen=True)
class CellClock:
    """The offset a cell's times were converted with, and how far from the
    truth it can be anywhere in the cell: the larger of the first bound and
    (the move to the second measurement + its bound). None after: the shard
    died, and only the first bound is known."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    drift_ns: int | None


def over_cell(before: ClockOffset, after: ClockOffset | None) -> CellClock:
    if after is None:
        return CellClock(before.offset_ns, before.uncertainty_ns, before.rtt_ns, None)
    drift = after.offset_ns - before.offset_ns
    bound = max(before.uncertainty_ns, abs(drift) + after.uncertainty_ns)
    return CellClock(before.offset_ns, bound, before.rtt_ns, drift)


def shift_record(r: RequestRecord, delta_ns: int) -> RequestRecord:
    """`r` with every time moved by delta_ns (a shard's clock to the coordinator's)."""
    if not delta_ns:
        return r
    return replace(r, send_ns=r.send_ns + delta_ns,
                   end_ns=None if r.end_ns is None else r.end_ns + delta_ns,
                   scheduled_ns=None if r.scheduled_ns is None else r.scheduled_ns + delta_ns,
                   chunk_ns=np.asarray(r.chunk_ns, dtype=np.int64) + delta_ns)


def shift_delays(d: WindowDelays, delta_ns: int) -> WindowDelays:
    """`d` on the other clock: its window and its long stalls' ends move."""
    if not delta_ns:
        return d
    return replace(d, start_ns=d.start_ns + delta_ns, end_ns=d.end_ns + delta_ns,
                   long_stalls=[(end + delta_ns, length) for end, length in d.long_stalls])
