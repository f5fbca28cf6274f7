"""Running rate cells (issue 34): requests that arrive on a schedule (open loop).

Before a cell starts its schedule is computed (rundir/arrivals.py): the offsets
from the window's start of every arrival in [0, duration), from the run's
arrival process, the cell's offered rate and cell_seed(run seed, cell key). The
run seed is --arrival-seed, or derived from the run id (rundir.arrivals.seed_from_text); run.yaml
and every rate cell's `arrival_seed` hold it, so a cell's schedule can be
computed again from its row (`cell_schedule`).

Each request is sent at window start + its offset: a timer loop sleeps until
LEAD_NS before the next due time (computed from the window's start, never by
adding up sleeps, so it cannot drift) and starts every request that is that
close; each opens its connection then and sends its request at its due time
(StreamClient's `at_ns`: the server sees the request arrive on schedule, not a
connect's round trips late; a pooled keep-alive client's requests arrive the
same way). A request due while the cap on requests in flight is full
waits in the client for a slot: that wait is its send lag (send_ns -
scheduled_ns), and it counts in its TTFT from the schedule. When the window
ends nothing more is sent (a request still waiting for a slot is never sent);
what is in flight is drained for up to the drain timeout, then cancelled.

Every request has its own prompt at the cell's context (variants of one base,
each with its own prefix, as a decode cell's streams have) and asks for the
run's rate output tokens with the engine profile's ignore_eos, so each runs
to the same length and its E2E means something.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.core.plan import Cell, more_than_slots
from bench.measure.cells import CellOutcome, CellRunner
from bench.measure.monitor import gc_paused
from bench.measure.records import RequestRecord, context_refused
from bench.workload.prompts import Prompt, retag
from rundir.arrivals import (
    LoadCheck,
    Process,
    cell_seed,
    parse_process,
    schedule,
    stored_load,
)
from rundir.contract import (
    ERROR,
    LOAD_NOT_DELIVERED,
    OVER_CAPACITY,
    PENDING,
    PURPOSE_ARRIVAL,
    REQUESTS_QUEUED,
    VALID,
)

LEAD_NS = 10_000_000  # a request's connection opens this long before its due time


def rate_tag(cell: Cell, i: int) -> str:
    """The prompt tag of request `i` of a rate cell (unique per cell and request)."""
    return f"a{cell.context}-q{cell.concurrency}-r{cell.rate:g}-n{i}"


class Bodies:
    """A rate cell's request bodies: its base prompt's JSON encoded once, each
    request's made by putting its own tag in place of the base's.

    Why: a request's body is made in the event loop LEAD_NS before it is due, and
    json.dumps of a 128k-token prompt holds the loop ~1.7 ms (0.4 ms at 32k): a
    request due in that stretch is sent that much late. The splice is a copy.
    JSON escapes character by character, so the bytes are the ones json.dumps
    gives the retagged prompt's payload; a base whose encoded tag is not found
    exactly once (a model name holding it, say) is encoded per request instead."""

    def __init__(self, run_tag: str, payload: Callable[[Prompt], dict], base: Prompt,
                 base_tag: str) -> None:
        self.run_tag, self.payload, self.base, self.base_tag = run_tag, payload, base, base_tag
        self._body = _encode(payload(retag(base, run_tag, base_tag, base_tag)))
        self._old = self._escaped(base_tag)
        at = self._body.find(self._old)
        self._at = at if at >= 0 and self._body.find(self._old, at + 1) < 0 else None

    def body(self, tag: str) -> bytes:
        """The encoded body of the base prompt under `tag`."""
        if self._at is None:
            return _encode(self.payload(retag(self.base, self.run_tag, self.base_tag, tag)))
        return b"".join((self._body[:self._at], self._escaped(tag),
                         self._body[self._at + len(self._old):]))

    def _escaped(self, tag: str) -> bytes:
        """The tag's text as the body holds it (retag of an empty text is its prefix alone)."""
        return json.dumps(retag(Prompt("", None), self.run_tag, "", tag).text)[1:-1].encode()


def _encode(payload: dict) -> bytes:
    return json.dumps(payload).encode()  # what StreamClient sends for a dict payload


@dataclass(frozen=True)
class RateSettings:
    """What every rate cell of a run shares (run.yaml's parameters)."""

    process: Process
    seed: int  # the run's seed; a cell's is cell_seed(seed, key)
    output: int  # max_tokens of every request


def cell_schedule(process: Process, cell: Cell, window_ns: int, seed: int) -> np.ndarray:
    """A rate cell's arrival offsets (ns from its window's start), from the run's seed."""
    return schedule(process, float(cell.rate), window_ns / 1e9, cell_seed(seed, cell.key))


def load_of(process: Process, cell: Cell, window: tuple[int, int], seed: int,
            table: pa.Table) -> LoadCheck:
    """The delivered load of a rate cell from its stored rows (`table`: its requests):
    the schedule computed again from the seed, each scheduled request sent when a
    row has its scheduled time. Shared by the judge and the terminal's lines."""
    rows = table.filter(pc.equal(table.column("purpose"), PURPOSE_ARRIVAL))
    return stored_load(process, float(cell.rate), cell.key, window[0], window[1], seed,
                       rows.column("scheduled_ns").to_pylist(), rows.column("send_ns").to_pylist())


def judge_rate(cell: Cell, records: list[RequestRecord], load: LoadCheck, slots: int | None,
               drain_s: float) -> tuple[str, str | None]:
    """(status, reason) of a rate cell (pure): a failed request ends it Error (Over
    capacity when the server refused the context); a request still open after the
    drain, Error; a load the client did not deliver, Load not delivered with its
    figures; else Valid, or Requests queued when the cap exceeds the server's slots
    (the key's cap of C in flight was never served at once)."""
    failed = next((r for r in records if r.error), None)
    if failed is not None:
        if context_refused(failed.error, failed.status):
            return OVER_CAPACITY, f"server refused the context: {failed.error}"
        return ERROR, str(failed.error)
    open_ = sum(r.cancelled for r in records)
    if open_:
        return ERROR, (f"{open_} of {len(records)} requests were still running {drain_s:g} s "
                       f"after the window: cancelled, not finished")
    if not load.delivered:
        return LOAD_NOT_DELIVERED, load.reason
    if more_than_slots(cell.concurrency, slots):
        queued = (f"cap {cell.concurrency} requests in flight, {slots} server "
                  f"slot{'' if slots == 1 else 's'}: at most {slots} ran at once, the others "
                  f"waited in the server's queue")
        return REQUESTS_QUEUED, "; ".join(filter(None, [queued, load.reason]))
    return VALID, load.reason  # None, or a note (e.g. too few gaps to test)


class RateSender:
    """Sends a share of a rate cell's schedule in a window it is given: the one
    send loop of a rate cell, in the collector's process or in a shard
    (bench/distributed/shard_worker.py), so both send alike."""

    def __init__(self, runner: CellRunner, output: int) -> None:
        self.runner, self.output = runner, output

    def bodies(self, base: Prompt, base_tag: str, run_tag: str) -> Bodies:
        """The cell's request bodies (blocking: run it off the event loop)."""
        return Bodies(run_tag, lambda p: self.runner.payload(p, self.output), base, base_tag)

    async def send(self, cell: Cell, base: Prompt, bodies: Bodies, due: list[tuple[int, int]],
                   window: tuple[int, int], cap: int, interrupted: asyncio.Event
                   ) -> list[RequestRecord]:
        """Send request i at window start + offset for each (i, offset) of `due`
        (in offset order), at most `cap` in flight (0: no cap), nothing once the
        window is over; drain what is in flight for the drain timeout (not when
        `interrupted`), then cancel the rest. Every record keeps its scheduled_ns."""
        r = self.runner
        slots = asyncio.Semaphore(cap) if cap else None
        drained = asyncio.Event()  # the drain is over: cancel what is still open
        tasks: list[asyncio.Task] = []

        async def one(i: int, at: int) -> RequestRecord:
            body = bodies.body(rate_tag(cell, i))  # made ahead, without encoding the prompt again
            try:
                rec = await r.send(cell, base, self.output, PURPOSE_ARRIVAL, i, drained, at_ns=at,
                                   body=body)
            finally:
                if slots is not None:
                    slots.release()
            rec.scheduled_ns = at
            return rec

        with gc_paused():  # a full collection inside the window stalls the loop 8-20 ms
            await _window(window, due, one, slots, interrupted, tasks)
        if tasks and not interrupted.is_set():
            await asyncio.wait(tasks, timeout=r.settings.drain_timeout_s)
        drained.set()  # interrupted or past the drain: closing the connections aborts them
        return list(await asyncio.gather(*tasks))


class RateRunner:
    """Runs rate cells with a CellRunner's client, prompts and settings: in this
    process (`run`), or judging what shards sent (bench/distributed/rate_shards.py)."""

    def __init__(self, runner: CellRunner, settings: RateSettings) -> None:
        self.runner = runner
        self.rate = settings
        self.sender = RateSender(runner, settings.output)

    @classmethod
    def from_parameters(cls, runner: CellRunner, parameters) -> RateRunner:
        """From run.yaml's parameters (a run without rate cells: poisson, seed 0)."""
        return cls(runner, RateSettings(parse_process(parameters.arrivals or "poisson"),
                                        parameters.arrival_seed or 0,
                                        parameters.rate_output_tokens or 1))

    def schedule(self, cell: Cell) -> np.ndarray:
        """The cell's arrival offsets (ns from its window's start)."""
        return cell_schedule(self.rate.process, cell, self.runner.window_ns, self.rate.seed)

    async def base(self, cell: Cell) -> tuple[Prompt, str]:
        """The cell's base prompt and its tag (request 0's)."""
        base_tag = rate_tag(cell, 0)
        return await asyncio.to_thread(self.runner.prompts.build, cell.context, base_tag), base_tag

    async def run(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        r = self.runner
        offsets = self.schedule(cell)
        base, base_tag = await self.base(cell)
        bodies = await asyncio.to_thread(self.sender.bodies, base, base_tag, r.prompts.run_tag)
        start = time.monotonic_ns() + LEAD_NS + 1_000_000  # the first may be due at once
        window = (start, start + r.window_ns)
        records = await self.sender.send(cell, base, bodies, list(enumerate(offsets.tolist())),
                                         window, cell.concurrency, interrupted)
        if interrupted.is_set():
            return CellOutcome(records, PENDING, "interrupted")
        return self.judged(cell, records, window)

    def judged(self, cell: Cell, records: list[RequestRecord], window: tuple[int, int]) -> CellOutcome:
        """The cell's outcome from all its records, however many processes sent them."""
        rs = self.rate
        outcome = CellOutcome(records, PENDING, None, window)
        load = load_of(rs.process, cell, window, rs.seed, outcome.table)
        outcome.status, outcome.reason = judge_rate(cell, records, load, self.runner.info.slots,
                                                    self.runner.settings.drain_timeout_s)
        outcome.server = {"arrivals": str(rs.process), "arrival_seed": rs.seed,
                          "rate_output_tokens": rs.output}
        return outcome


async def _window(window: tuple[int, int], due: list[tuple[int, int]], one,
                  slots: asyncio.Semaphore | None, interrupted: asyncio.Event,
                  tasks: list[asyncio.Task]) -> None:
    """Start each request LEAD_NS before its due time, under the cap; nothing
    once the window is over; return when it is over (or interrupted)."""
    start, end = window
    for i, offset in due:
        at = start + offset
        if not await _until(at - LEAD_NS, interrupted):
            break
        if slots is not None and not await _slot(slots, end, interrupted):
            break  # the window ended while the cap was full: the rest are never sent
        if time.monotonic_ns() >= end:
            if slots is not None:
                slots.release()
            break
        tasks.append(asyncio.create_task(one(i, at)))
    await _until(end, interrupted)


async def _until(due_ns: int, interrupted: asyncio.Event) -> bool:
    """Return at or after `due_ns` (CLOCK_MONOTONIC); False when interrupted first."""
    while True:
        left = due_ns - time.monotonic_ns()
        if interrupted.is_set():
            return False
        if left <= 0:
            return True
        await asyncio.sleep(min(left / 1e9, 0.05))


async def _slot(slots: asyncio.Semaphore, end_ns: int, interrupted: asyncio.Event) -> bool:
    """A place under the cap, waited for until the window ends; False: none came."""
    if not slots.locked():
        await slots.acquire()
        return True
    left = (end_ns - time.monotonic_ns()) / 1e9
    if left <= 0 or interrupted.is_set():
        return False
    try:
        await asyncio.wait_for(slots.acquire(), left)
    except TimeoutError:
        return False
    return True
