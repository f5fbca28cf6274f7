"""A rate cell's schedule spread over several processes (`--workers N`, `--shard i/N`).

The parent keeps every decision of the cell, as for a sharded decode cell
(bench/distributed/shards.py): it computes the schedule once (cell_schedule,
from the run's seed), builds the base prompt, and deals request i to process
i mod m, m the processes that take part (never more than the cap). Round
robin, not blocks of time: each process's share is every m-th arrival of the
whole schedule, spread over the whole window at 1/m of its rate, so no
process holds a burst alone while the others idle. The cap C is dealt as a
decode cell's slots are (`shard_slots`): process k holds ⌈(C − k)/m⌉ places,
so no more than C requests are ever in flight in all; a request waits for a
place in its own process even when another has one free (sharing places
between processes would cost a message per request), which differs from one
process's cap only when the shares' requests end unevenly.

Each process makes its request bodies ("rate", answered "armed"); then the
parent opens one window for all, start = now + LEAD_NS + AHEAD_NS (time for
the window to reach every process before its first request must connect),
and each sends its requests at start + offset with the one send loop of a
rate cell (bench/measure/rate_cells.py's RateSender), drains them and sends
its records back ("done"), on shard 0's clock for a shard on another host.
Every record must be its process's own: its request-id prefix, the cell, one
of its requests, once, scheduled at the window's start + that request's
offset; a process that sends anything else is stopped. The parent judges the
merged records exactly as one process's (RateRunner.judged). A process that
dies, or does not start, fails the cell naming it; the others are cancelled
and their records kept with the cell's.
"""

from __future__ import annotations

import asyncio
import time

from bench.core.plan import Cell
from bench.core.workers import shard_slots
from bench.distributed.peer_auth import printable
from bench.distributed.shards import (
    START_TIMEOUT_S,
    Shard,
    ShardsDidNotStart,
    ShardSource,
    WaitInterrupted,
    answer,
    state_clocks,
)
from bench.measure.cells import CellOutcome
from bench.measure.monitor import gc_paused
from bench.measure.rate_cells import LEAD_NS, RateRunner
from bench.measure.records import RequestRecord
from rundir.contract import ERROR, PENDING, PURPOSE_ARRIVAL

AHEAD_NS = 50_000_000  # the window opens this long after it is sent (a remote host's trip)


def deal(offsets: list[int], processes: int, cap: int) -> list[tuple[list[int], int]]:
    """Per process k: the offsets of its requests k, k + m, ... and its share of the
    cap (0: none), m = min(processes, cap) taking part; the rest get nothing."""
    m = min(processes, cap) if cap else processes
    places = [len(p) for p in shard_slots(cap, m)] if cap else [0] * m
    return [(offsets[k::m], places[k]) if k < m else ([], 0) for k in range(processes)]


class ShardedRateRunner:
    """A rate cell whose schedule is sent by `n` shards from `source`; the
    schedule, the window and the judge are `rates`' (the parent's)."""

    def __init__(self, rates: RateRunner, source: ShardSource, n: int) -> None:
        self.rates, self.source, self.n = rates, source, n

    async def run(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        try:
            shards = await self.source.take(self.n, interrupted)
        except ShardsDidNotStart as exc:
            outcome = CellOutcome([], ERROR, str(exc))
        except WaitInterrupted:
            return CellOutcome([], PENDING, "interrupted")
        else:
            outcome = await self._run(cell, shards, interrupted)
            if outcome.status == PENDING:
                return outcome
        # the bound in the reason; clock_offsets.parquet's rows are keyed by decode cells only
        state_clocks(outcome, await self.source.after_cell(), self.n, rows=False)
        return outcome

    async def _run(self, cell: Cell, shards: list[Shard], interrupted: asyncio.Event) -> CellOutcome:
        offsets = self.rates.schedule(cell).tolist()
        shares = deal(offsets, len(shards), cell.concurrency)
        step = min(len(shards), cell.concurrency) if cell.concurrency else len(shards)
        base, base_tag = await self.rates.base(cell)
        failure = asyncio.Event()
        for shard in shards:
            shard.on_failed = failure.set
        try:
            for k, (shard, (theirs, cap)) in enumerate(zip(shards, shares, strict=True)):
                shard.send(("rate", (cell.phase, cell.context, cell.concurrency, float(cell.rate or 0)),
                            base, base_tag, self.rates.runner.prompts.run_tag, self.rates.rate.output,
                            cap, k, step, theirs))
            armed = await asyncio.gather(*(answer(s, "armed", START_TIMEOUT_S, "to its rate cell")
                                           for s in shards))
            if any(a is None for a in armed):  # nothing sent yet: the cell fails, naming it
                return self._failed(CellOutcome([], ERROR, None), shards, [])
            records, window, faults = await self._window(cell, shards, offsets, step, failure,
                                                         interrupted)
        finally:
            for shard in shards:
                shard.on_failed = lambda: None
        if interrupted.is_set():
            return CellOutcome(records, PENDING, "interrupted")
        return self._failed(self.rates.judged(cell, records, window), shards, faults)

    @staticmethod
    def _failed(outcome: CellOutcome, shards: list[Shard], faults: list[str]) -> CellOutcome:
        """Error, naming each dead shard and fault, if any; else `outcome` as judged."""
        died = [s.died for s in shards if s.died is not None] + faults
        if died:
            outcome.status = ERROR
            outcome.reason = "; ".join(filter(None, [*died, outcome.reason]))
        return outcome

    async def _window(self, cell: Cell, shards: list[Shard], offsets: list[int], step: int,
                      failure: asyncio.Event, interrupted: asyncio.Event
                      ) -> tuple[list[RequestRecord], tuple[int, int], list[str]]:
        """One window for every shard; ended early for all when a shard dies or
        the run is interrupted. The records of every shard that answered."""
        runner = self.rates.runner
        s = runner.settings
        start = time.monotonic_ns() + LEAD_NS + AHEAD_NS
        window = (start, start + runner.window_ns)
        for shard in shards:
            shard.send(("window", *window))
        with gc_paused():
            if not failure.is_set() and not interrupted.is_set():
                await runner.sleep_until(window[1], failure, interrupted)
            if time.monotonic_ns() < window[1]:
                for shard in shards:
                    shard.send(("cancel",))
            grace = s.drain_timeout_s + s.stall_timeout_s
            got = await asyncio.gather(*(answer(sh, "done", grace) for sh in shards))
        records: list[RequestRecord] = []
        faults: list[str] = []
        for k, (shard, message) in enumerate(zip(shards, got, strict=True)):
            if message is None:
                continue
            _, theirs, _delays, applied = message
            if not self._own(shard, theirs, cell, window[0], offsets, k, step):
                continue
            if tuple(applied) != window:  # a bug of ours: fail the cell
                faults.append(f"shard {shard.index} applied the window {tuple(applied)}, not {window}")
            records.extend(theirs)
        records.sort(key=lambda r: (r.scheduled_ns, r.stream_index))
        return records, window, faults

    @staticmethod
    def _own(shard: Shard, records: list[RequestRecord], cell: Cell, start: int, offsets: list[int],
             k: int, step: int) -> bool:
        """Whether every record is the shard's own: of this cell, under its prefix,
        one of its requests (k, k + step, ...) once, at its scheduled time; if not,
        the shard is stopped and the cell fails naming it."""
        seen: set[int] = set()
        for r in records:
            i = r.stream_index
            if (r.phase, r.context, r.concurrency, r.rate_target) != (*cell.key[:3], cell.rate):
                why = f"a record of another cell ({printable(r.phase, 20)} {r.context}×{r.concurrency})"
            elif not r.request_id.startswith(f"{shard.prefix}-"):
                why = f"a record {printable(r.request_id, 60)!r} not under its own prefix"
            elif r.purpose != PURPOSE_ARRIVAL:
                why = f"a record for {printable(r.purpose, 20)!r}, not an arrival"
            elif not (0 <= i < len(offsets) and i % step == k) or i in seen:
                why = f"a record of request {i}, not one of its own (or twice)"
            elif r.scheduled_ns != start + offsets[i]:
                why = f"request {i} scheduled at {r.scheduled_ns}, not {start + offsets[i]}"
            else:
                seen.add(i)
                continue
            shard.kill_for(why)
            return False
        return True
