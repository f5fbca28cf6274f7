"""How many processes a run's decode streams are spread over, and why (pure).

One collector process reads about 70,000 events a second per core
(docs/performance.md, "Client fidelity": 1.35-1.46 s of CPU per 100k
events at 128 streams). To keep its read delays at their floor a process is
planned at half that (WORKER_EVENTS_PER_S). The server's speed is unknown
before the run, so the planned event rate of a cell is its streams at
PLANNED_STREAM_TOK_S each (one event per token: the worst case). The
default matrix (128 streams: 32,000 events/s) needs one process, and one
process is today's in-process path, unchanged.

`--workers auto` takes as many as the most demanding cell needs, at most
the host's cores - 1 (the parent, which plans, samples the server's gauges
and stores, keeps a core). `--workers N` takes N. A decode cell is spread
over `cell_shards` of them (never more than it has streams); a cell on one
process, and every prefill cell, runs in the parent as before.

A rate cell's planned event rate is its offered requests/s × its output
tokens (one event per token; in a steady state that many tokens arrive a
second whatever the server's speed), at most its cap's streams at
PLANNED_STREAM_TOK_S each; `rate_shards` spreads its schedule over as many
processes as that needs (under auto) or N (never more than its cap).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

AUTO = "auto"
PLANNED_STREAM_TOK_S = 250  # events/s a fast stream sends (one event per token)
WORKER_EVENTS_PER_S = 35_000  # half of what one process reads a second per core
MAX_WORKERS = 256


@dataclass(frozen=True)
class WorkerPlan:
    """`count`: the most processes a cell's streams are spread over; `auto`:
    chosen by the planned rate (else given by --workers); `why`: one line."""

    count: int
    auto: bool
    why: str

    def line(self) -> str:
        return f"Workers: {self.count} ({self.why})"


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def needed(concurrency: int) -> int:
    """Processes the planned event rate of `concurrency` streams needs."""
    return events_needed(concurrency * PLANNED_STREAM_TOK_S)


def events_needed(events: int) -> int:
    """Processes a planned `events` a second needs."""
    return max(1, math.ceil(events / WORKER_EVENTS_PER_S))


@dataclass(frozen=True)
class RateLoad:
    """A rate cell as the plan sees it: offered requests/s, output tokens a
    request, its cap on requests in flight (0: none)."""

    rate: float
    output: int
    cap: int = 0

    @property
    def events(self) -> int:
        """Planned events/s: rate × output tokens, at most the cap's streams' worth."""
        events = self.rate * self.output
        if self.cap:
            events = min(events, self.cap * PLANNED_STREAM_TOK_S)
        return math.ceil(events)

    def words(self) -> str:
        capped = self.cap and self.cap * PLANNED_STREAM_TOK_S < self.rate * self.output
        if capped:
            return (f"rate {self.rate:g} requests/s capped at {self.cap:,} in flight × "
                    f"{PLANNED_STREAM_TOK_S} tok/s planned = {self.events:,} events/s")
        return (f"rate {self.rate:g} requests/s × {self.output:,} output tokens = "
                f"{self.events:,} events/s")


def plan_workers(requested: int | str, concurrency: list[int], cores: int,
                 rates: list[RateLoad] | tuple[RateLoad, ...] = ()) -> WorkerPlan:
    """The run's worker count: `requested` is a number or AUTO; `concurrency`
    the decode cells' levels; `rates` the rate cells'; `cores` the host's."""
    top = max(concurrency, default=1)
    rate = top * PLANNED_STREAM_TOK_S
    busiest = max(rates, key=lambda r: r.events, default=None)
    if requested != AUTO:
        n = int(requested)
        why = "--workers"
        if n > max(1, cores - 1):
            why += f"; more than this host's {cores} cores - 1: processes share cores"
        return WorkerPlan(n, False, why)
    cap = max(1, cores - 1)
    if busiest is not None and busiest.events > rate:
        want = events_needed(busiest.events)
        why = f"auto: {busiest.words()}, one process per {WORKER_EVENTS_PER_S:,}"
    else:
        want = needed(top)
        why = (f"auto: {top:,} streams × {PLANNED_STREAM_TOK_S} tok/s planned = {rate:,} "
               f"events/s, one process per {WORKER_EVENTS_PER_S:,}")
    n = min(want, cap)
    if want > cap:
        why += f"; {want} wanted, at most {cap} on {cores} cores (cores - 1)"
    return WorkerPlan(n, True, why)


def cell_shards(plan: WorkerPlan | None, concurrency: int) -> int:
    """How many processes a decode cell of `concurrency` streams runs on (1:
    in the parent): never more than its streams; under auto, only as many
    as its own planned rate needs."""
    if plan is None:
        return 1
    n = min(plan.count, concurrency)
    return min(n, needed(concurrency)) if plan.auto else n


def rate_shards(plan: WorkerPlan | None, load: RateLoad) -> int:
    """How many processes a rate cell's schedule is split over (1: in the parent):
    never more than its cap (each process holds a whole share of it); under
    auto, only as many as its own planned event rate needs."""
    if plan is None:
        return 1
    n = min(plan.count, load.cap) if load.cap else plan.count
    return min(n, events_needed(load.events)) if plan.auto else n


def shard_slots(concurrency: int, shards: int) -> list[list[int]]:
    """Stream slots 0..C-1 dealt round-robin to `shards` processes."""
    return [list(range(k, concurrency, shards)) for k in range(shards)]
