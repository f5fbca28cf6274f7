"""The steady span of a run that has no window of its own (pure).

Why: other benchmark tools time whole runs, ramp-up and ramp-down included,
so their figures mix the minutes when fewer streams were running with the
minutes at load. Our figures for an imported run are computed over the span
where the load was the one configured; this module finds that span from the
requests' send and end stamps alone (docs/methodology.md, "Imported runs
from other tools").

The in-flight count at time t is the number of requests with
``send <= t < end`` (a request that ends at t is no longer in flight at t,
one sent at t is).

* Closed loop at concurrency C: the span starts the first time the count
  reaches C and ends the last time it falls from C or more to below C. After
  the last send the count only falls, so the end is where the ramp-down
  begins. A dip inside the span (a slot refilled late) stays inside it; the
  share of the span spent at C or more is returned so a caller can say so.
  A run whose count never reaches C has no span (``reason`` says its peak).
* Open loop at a rate: the count only grows until the first request ends
  (the ramp-up), and only falls after the last send (the end of arrivals):
  the span is first end -> last send. A run where no request ends before the
  last send has no span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Plateau:
    """The steady span found, or why there is none (start/end None, reason set)."""

    start_ns: int | None
    end_ns: int | None
    target: int | None  # the in-flight count held (closed loop); None for a rate
    held_share: float | None  # share of the span at the target or more (closed loop)
    peak: int  # the highest in-flight count of the run
    reason: str | None = None  # why there is no span

    @property
    def found(self) -> bool:
        return self.start_ns is not None and self.end_ns is not None


def _ends(send_ns: Sequence[int], end_ns: Sequence[int | None]) -> list[int]:
    """Each request's end; one without an end (it failed before any) ends where it was sent."""
    return [s if e is None else max(int(e), int(s)) for s, e in zip(send_ns, end_ns, strict=True)]


def in_flight_steps(send_ns: Sequence[int], end_ns: Sequence[int | None]) -> list[tuple[int, int]]:
    """(t, in-flight count from t on) at every stamp where the count changes, in time order."""
    ends = _ends(send_ns, end_ns)
    events = sorted([(int(t), 0, -1) for t in ends] + [(int(t), 1, +1) for t in send_ns])
    steps: list[tuple[int, int]] = []
    count = 0
    for t, _, delta in events:  # ends (0) before sends (1) at the same stamp
        count += delta
        if steps and steps[-1][0] == t:
            steps[-1] = (t, count)
        else:
            steps.append((t, count))
    return steps


def closed_loop(send_ns: Sequence[int], end_ns: Sequence[int | None], concurrency: int) -> Plateau:
    """The span where the in-flight count is at ``concurrency`` (module docstring)."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    steps = in_flight_steps(send_ns, end_ns)
    peak = max((c for _, c in steps), default=0)
    if peak < concurrency:
        return Plateau(None, None, concurrency, None, peak,
                       f"the in-flight count peaked at {peak} and never reached the configured "
                       f"concurrency {concurrency}: no steady span")
    start = next(t for t, c in steps if c >= concurrency)
    end = None
    for (_t0, c0), (t1, c1) in zip(steps, steps[1:], strict=False):
        if c0 >= concurrency > c1:
            end = t1
    if end is None or end <= start:
        return Plateau(None, None, concurrency, None, peak,
                       f"the in-flight count held {concurrency} for no time: no steady span")
    held = 0
    for (t0, c0), (t1, _) in zip(steps, steps[1:], strict=False):
        lo, hi = max(t0, start), min(t1, end)
        if hi > lo and c0 >= concurrency:
            held += hi - lo
    return Plateau(start, end, concurrency, held / (end - start), peak)


def open_loop(send_ns: Sequence[int], end_ns: Sequence[int | None]) -> Plateau:
    """First request end -> last send (module docstring)."""
    steps = in_flight_steps(send_ns, end_ns)
    peak = max((c for _, c in steps), default=0)
    if not send_ns:
        return Plateau(None, None, None, None, 0, "no request: no steady span")
    first_end = min(_ends(send_ns, end_ns))
    last_send = max(int(s) for s in send_ns)
    if first_end >= last_send:
        return Plateau(None, None, None, None, peak,
                       "no request ended before the last one was sent: the run is all ramp-up "
                       "and drain, no steady span")
    return Plateau(first_end, last_send, None, None, peak)


def plateau(send_ns: Sequence[int], end_ns: Sequence[int | None], concurrency: int | None = None,
            rate: float | None = None) -> Plateau:
    """The steady span of a closed-loop run (``concurrency``) or of an open-loop one."""
    if concurrency is not None and rate is None:
        return closed_loop(send_ns, end_ns, concurrency)
    return open_loop(send_ns, end_ns)


__all__ = ["Plateau", "closed_loop", "in_flight_steps", "open_loop", "plateau"]
