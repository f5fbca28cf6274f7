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
With an input mix (`--input-lengths`) each request's prompt is instead built
to its own length (bench/measure/rate_inputs.py), all before the window.

A cell at a reuse level (`--rate-reuse`) shares prefixes as a prefix cell
does (SharedPrefixes): G groups, request i in group i mod G (with a prompt
source, its suffix text i mod K of the K the workload has), the cache
flushed and each group's prefix primed before the window; its reuse is
judged by rundir/reuse.py as a prefix cell's, and rate_reuse_verdict says
which verdict its status takes.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.core.plan import PREFIX_MAX_GROUPS, Cell, more_than_slots, prefix_groups, running_at_once
from bench.measure.cells import CellOutcome, CellRunner
from bench.measure.monitor import gc_paused
from bench.measure.rate_inputs import input_prompts
from bench.measure.records import RequestRecord, context_refused
from bench.measure.traffic_cells import (
    MIN_PER_GROUP,
    ServerCount,
    counters_count,
    flush_prefix_cache,
    judge_traffic,
    timings_count,
)
from bench.server.engine_profiles import cache_block
from bench.workload.prompts import Prompt, retag
from bench.workload.shared_prefix import PrefixWorkload, build_prefix_workload, shared_tokens
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
    PURPOSE_PRIME,
    REQUESTS_QUEUED,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    VALID,
)
from rundir.lengths import parse_input_mix

LEAD_NS = 10_000_000  # a request's connection opens this long before its due time


def rate_tag(cell: Cell, i: int | None = None) -> str:
    """The prompt tag of request `i` of a rate cell (unique per cell and request);
    without `i`, the cell's own (its shared prefixes' tags start with it)."""
    reuse = f"-p{cell.reuse}" if cell.reuse is not None else ""
    return f"a{cell.context}-q{cell.concurrency}-r{cell.rate:g}{reuse}" + (
        "" if i is None else f"-n{i}")


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
                 base_tag: str, prompt_of: Callable[[str], Prompt] | None = None) -> None:
        """`prompt_of`: the prompt under a tag (default: `base` retagged); a reuse
        cell's is its group's shared prefix and the request's own suffix."""
        self.run_tag, self.payload, self.base, self.base_tag = run_tag, payload, base, base_tag
        self.prompt_of = prompt_of or (lambda tag: retag(base, run_tag, base_tag, tag))
        self._body = _encode(payload(self.prompt_of(base_tag)))
        self._old = self._escaped(base_tag)
        at = self._body.find(self._old)
        self._at = at if at >= 0 and self._body.find(self._old, at + 1) < 0 else None

    def body(self, tag: str, max_tokens: int | None = None) -> bytes:
        """The encoded body of the base prompt under `tag`; `max_tokens`: asking that
        many instead (a length mix's draw), spliced in as the tag is."""
        if self._at is None:
            out = _encode(self.payload(self.prompt_of(tag)))
        else:
            out = b"".join((self._body[:self._at], self._escaped(tag),
                            self._body[self._at + len(self._old):]))
        return out if max_tokens is None else with_max_tokens(out, max_tokens)

    def _escaped(self, tag: str) -> bytes:
        """The tag's text as the body holds it (retag of an empty text is its prefix alone)."""
        return json.dumps(retag(Prompt("", None), self.run_tag, "", tag).text)[1:-1].encode()


MAX_TOKENS_KEY = b'"max_tokens": '


def with_max_tokens(body: bytes, max_tokens: int) -> bytes:
    """`body` (a payload as _encode writes it) asking `max_tokens`. The key's first
    occurrence is the payload's own: inside a JSON string a quote is escaped, so no
    prompt or model name can hold it unescaped."""
    at = body.find(MAX_TOKENS_KEY)
    if at < 0:
        raise ValueError("a request body without max_tokens")
    start = end = at + len(MAX_TOKENS_KEY)
    while body[end:end + 1].isdigit():
        end += 1
    return b"".join((body[:start], str(int(max_tokens)).encode(), body[end:]))


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


# Where a reuse rate cell's reuse verdict stands among its load verdict's statuses:
# a failed or unfinished request (Error, Over capacity) and an undelivered load keep
# theirs (the reuse of a load that was not sent, or not finished, is not the
# question); the reuse verdict's Reuse off target / Reuse not verifiable come
# before Requests queued and Valid.
REUSE_YIELDS_TO = (ERROR, OVER_CAPACITY, LOAD_NOT_DELIVERED)


def rate_reuse_verdict(load: tuple[str, str | None], reuse: tuple[str, str | None]
                       ) -> tuple[str, str | None]:
    """(status, reason) of a reuse rate cell from its load verdict (judge_rate) and its
    reuse verdict (traffic_cells.judge_traffic) (pure); the reasons of both are kept."""
    (status, reason), (reuse_status, reuse_reason) = load, reuse
    joined = "; ".join(filter(None, [reason, reuse_reason])) or None
    if status in REUSE_YIELDS_TO:
        return status, reason
    if reuse_status in (REUSE_OFF_TARGET, REUSE_UNVERIFIED):
        return reuse_status, "; ".join(filter(None, [reuse_reason, reason])) or None
    return status, joined


class SharedPrefixes:
    """A reuse rate cell's prompts as a prefix cell's (bench/workload/shared_prefix.py):
    G groups each with a shared system prefix cut on the cache block, every request
    its own suffix; the cache flushed and each group's prefix primed before the
    window, the engine's counters read after the priming and after the drain."""

    def __init__(self, runner: CellRunner, cell: Cell) -> None:
        self.runner, self.cell = runner, cell
        self.block = cache_block(runner.info)
        self.primes: list[RequestRecord] = []
        self.before: tuple[float, float] | None = None
        self.work: PrefixWorkload | None = None

    def groups(self, output: int) -> int:
        """G: prefix_groups at the cap (no cap: the most groups), within the KV budget
        left by the requests that run at once, and no more than the window's expected
        requests give MIN_PER_GROUP each (a group whose prefix no request reused would
        be a priming for nothing)."""
        info, cell = self.runner.info, self.cell
        shared = shared_tokens(cell.reuse or 0, cell.context, self.block)
        streams = cell.concurrency or PREFIX_MAX_GROUPS
        room = info.kv_budget - running_at_once(streams, info.slots) * (
            cell.context - shared + output) if info.kv_budget else None
        expected = int(float(cell.rate or 0) * self.runner.window_ns / 1e9)
        return min(prefix_groups(streams, info.slots, shared, room), max(1, expected // MIN_PER_GROUP))

    async def prepare(self, payload: Callable[[Prompt], dict], base_tag: str, output: int
                      ) -> list[Bodies]:
        """Bodies for lcm(G, K) requests in turn (K: the workload's suffix texts), entry j
        group j mod G's with suffix j mod K, so request i's, at i mod lcm(G, K), is group
        i mod G's with suffix i mod K (built off the loop: /tokenize calls and one
        encoding each)."""
        r, cell = self.runner, self.cell
        groups = self.groups(output)
        self.work = work = await asyncio.to_thread(
            build_prefix_workload, r.prompts, cell.context, cell.concurrency, cell.reuse or 0, groups,
            self.block, rate_tag(cell))

        def bodies(g: int, k: int) -> Bodies:
            return Bodies(r.prompts.run_tag, payload, work.request(r.prompts, g, base_tag, k), base_tag,
                          lambda tag: work.request(r.prompts, g, tag, k))

        return [await asyncio.to_thread(bodies, j % groups, j % work.variants)
                for j in range(math.lcm(groups, work.variants))]

    async def prime(self, interrupted: asyncio.Event) -> CellOutcome | None:
        """Flush, then one request per group putting its prefix in the cache; the outcome
        when a priming request failed or the run was interrupted, else None."""
        r, cell, work = self.runner, self.cell, self.work
        assert work is not None
        await flush_prefix_cache(r)
        before = await asyncio.to_thread(r.cache_counters)
        primed = 0
        for g in range(len(work.prefixes) if work.shared else 0):
            prompt = work.prime(r.prompts, g, f"{rate_tag(cell)}-p{g}")
            rec = await r.send(cell, prompt, 1, PURPOSE_PRIME, g)
            rec.prefix_group = g
            self.primes.append(rec)
            primed += rec.prompt_tokens or 0
            if interrupted.is_set():
                return CellOutcome(self.primes, PENDING, "interrupted")
            if rec.error:
                refused = context_refused(rec.error, rec.status)
                return CellOutcome(self.primes, OVER_CAPACITY if refused else ERROR,
                                   f"priming group {g}: {rec.error}")
        self.before = before if before is None else await r.counters_with(before, primed)
        return None

    async def server_count(self, measured: list[RequestRecord]) -> ServerCount | None:
        """The engine's count over the measured requests: its counters' delta since the
        priming, or llama.cpp's per-request timings."""
        after = None
        if self.before is not None and not any(x.error for x in measured):
            after = await self.runner.counters_with(self.before,
                                                    sum(x.prompt_tokens or 0 for x in measured))
        return counters_count(self.before, after) or timings_count(measured)


class RateSender:
    """Sends a share of a rate cell's schedule in a window it is given: the one
    send loop of a rate cell, in the collector's process or in a shard
    (bench/distributed/shard_worker.py), so both send alike."""

    def __init__(self, runner: CellRunner, output: int) -> None:
        self.runner, self.output = runner, output

    def bodies(self, base: Prompt, base_tag: str, run_tag: str) -> Bodies:
        """The cell's request bodies (blocking: run it off the event loop)."""
        return Bodies(run_tag, lambda p: self.runner.payload(p, self.output), base, base_tag)

    async def send(self, cell: Cell, groups: list[Bodies], due: list[tuple[int, int]],
                   window: tuple[int, int], cap: int, interrupted: asyncio.Event,
                   shared: int = 0, inputs: list[int] | None = None) -> list[RequestRecord]:
        """Send request i at window start + offset for each (i, offset) of `due`
        (in offset order), at most `cap` in flight (0: no cap), nothing once the
        window is over; drain what is in flight for the drain timeout (not when
        `interrupted`), then cancel the rest. Every record keeps its scheduled_ns.
        Request i's body is groups[i mod len(groups)]; `shared`: a reuse cell's number of
        prefix groups (groups holds whole multiples of it), each record keeps its prefix_group;
        `inputs`: an input mix's prompt length per request (groups holds one per request)."""
        r = self.runner
        slots = asyncio.Semaphore(cap) if cap else None
        drained = asyncio.Event()  # the drain is over: cancel what is still open
        tasks: list[asyncio.Task] = []

        async def one(i: int, at: int) -> RequestRecord:
            # a reuse cell's requests go round its groups (and a source's suffix texts)
            bodies = groups[i % len(groups)]
            target = r.output_target(cell, i, 0, bodies.base)  # None: every request asks self.output
            # made ahead, without encoding the prompt again
            body = bodies.body(rate_tag(cell, i), target)
            try:  # its base: what the record keeps of the prompt (its source index)
                rec = await r.send(cell, bodies.base, target or self.output, PURPOSE_ARRIVAL, i,
                                   drained, at_ns=at, body=body)
            finally:
                if slots is not None:
                    slots.release()
            rec.scheduled_ns = at
            rec.output_target = target
            rec.input_target = inputs[i] if inputs is not None else None
            if shared:
                rec.prefix_group = i % shared
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
        """The cell in this process: a reuse cell's groups primed first, then the
        schedule sent, then judged (a reuse cell's reuse too)."""
        r, rs = self.runner, self.rate
        offsets = self.schedule(cell)
        shared: SharedPrefixes | None = None
        inputs: list[int] | None = None
        if cell.reuse is None and not parse_input_mix(r.settings.input_lengths).fixed:
            groups, inputs = await asyncio.to_thread(self.mixed_bodies, cell, len(offsets))
        elif cell.reuse is None:
            base, base_tag = await self.base(cell)
            groups = [await asyncio.to_thread(self.sender.bodies, base, base_tag, r.prompts.run_tag)]
        else:
            shared = SharedPrefixes(r, cell)
            groups = await shared.prepare(lambda p: r.payload(p, rs.output), rate_tag(cell, 0),
                                          rs.output)
            ended = await shared.prime(interrupted)
            if ended is not None:
                return ended
        start = time.monotonic_ns() + LEAD_NS + 1_000_000  # the first may be due at once
        window = (start, start + r.window_ns)
        measured = await self.sender.send(cell, groups, list(enumerate(offsets.tolist())),
                                          window, cell.concurrency, interrupted,
                                          len(shared.work.prefixes) if shared and shared.work else 0,
                                          inputs)
        records = [*(shared.primes if shared else []), *measured]
        if interrupted.is_set():
            return CellOutcome(records, PENDING, "interrupted")
        outcome = self.judged(cell, records, window)
        if shared is not None:
            server = await shared.server_count(measured)
            status, reason, columns = judge_traffic(records, measured, cell.reuse, server, shared.block)
            outcome.status, outcome.reason = rate_reuse_verdict((outcome.status, outcome.reason),
                                                                (status, reason))
            outcome.server.update(columns)
        return outcome

    def mixed_bodies(self, cell: Cell, count: int) -> tuple[list[Bodies], list[int]]:
        """With an input mix: each of the cell's `count` requests' body, its prompt built to
        its own length, and those lengths (blocking: all before the window, off the loop)."""
        r = self.runner
        tags = [rate_tag(cell, i) for i in range(count)]
        built = input_prompts(r.prompts, cell, tags, parse_input_mix(r.settings.input_lengths),
                              r.settings.length_seed)
        bodies = [self.sender.bodies(prompt, tag, r.prompts.run_tag)
                  for (prompt, _), tag in zip(built, tags, strict=True)]
        return bodies, [target for _, target in built]

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
