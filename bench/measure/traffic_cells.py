"""Running the traffic cells: prefix reuse and conversations (issue 33).

A prefix cell: flush the engine's prefix cache where it has an endpoint for
it, prime each group's shared prefix (one request each, one after the other),
then measure: C streams in a closed loop, each request max_tokens 1 (the
cell measures TTFT and prefill), at least 8 requests and 2 per group. The
engine's cache counters are read once the priming is in them and again
once the last measured request is (CellRunner.counters_with); llama.cpp
tells its own per-request count instead (`timings.cache_n`).

A conversation run: for one (context, streams), C conversations advance
turn by turn together (a turn's requests all end before the next turn
starts, so the counters read around a listed turn hold that turn alone);
every turn is kept, the listed ones measured as cells.

The verdict on both is rundir/reuse.py's, shared with the site builder.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bench.core.plan import (
    Cell,
    conversation_output,
    more_than_slots,
    prefix_groups,
    running_at_once,
)
from bench.measure.cells import CellOutcome, CellRunner, queued_note
from bench.measure.records import RequestRecord, context_refused
from bench.server.engine_profiles import cache_block, flush_path
from bench.workload.conversation import conversation, turn_sizes
from bench.workload.shared_prefix import build_prefix_workload, group_of, shared_tokens
from rundir.contract import (
    CONVERSATION,
    ERROR,
    OVER_CAPACITY,
    PENDING,
    PURPOSE_PRIME,
    PURPOSE_REUSE,
    PURPOSE_TURN,
    PURPOSE_TURN_FILL,
    REQUESTS_QUEUED,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    VALID,
)
from rundir.reuse import (
    SOURCE_COUNTERS,
    SOURCE_TIMINGS,
    Turn,
    judge_reuse,
    percent,
    requests_ratio,
    tolerance,
    turn_problems,
)

MIN_REQUESTS = 8  # measured requests of a prefix cell, at least
MIN_PER_GROUP = 2


@dataclass(frozen=True)
class ServerCount:
    """The engine's own prompt and cached tokens over a cell's measured requests."""

    prompt: int
    cached: int
    source: str

    @property
    def name(self) -> str:
        return "server counters" if self.source == SOURCE_COUNTERS else "engine timings"


def measured_requests(concurrency: int, groups: int) -> int:
    """Requests per stream of a prefix cell: ≥ MIN_REQUESTS, ≥ 2 per group, all streams alike."""
    return math.ceil(max(MIN_REQUESTS, MIN_PER_GROUP * groups, concurrency) / concurrency)


def timings_count(records: list[RequestRecord]) -> ServerCount | None:
    """llama.cpp's count: Σ cache_n over Σ (cache_n + prompt_n); None unless every request told it."""
    if not records or any(r.engine_cached_tokens is None or r.engine_computed_tokens is None
                          for r in records):
        return None
    cached = sum(r.engine_cached_tokens for r in records)
    return ServerCount(cached + sum(r.engine_computed_tokens for r in records), cached,
                       SOURCE_TIMINGS)


def counters_count(before: tuple[float, float] | None, after: tuple[float, float] | None
                   ) -> ServerCount | None:
    """The counters' delta across the span; None without both scrapes."""
    if before is None or after is None:
        return None
    prompt, cached = int(after[0] - before[0]), int(after[1] - before[1])
    if prompt <= 0 or cached < 0:
        return None
    return ServerCount(prompt, cached, SOURCE_COUNTERS)


def judge_traffic(records: list[RequestRecord], measured: list[RequestRecord], target: int | None,
                  server: ServerCount | None, block: int, problems: list[str] = ()
                  ) -> tuple[str, str | None, dict]:
    """(status, reason, the cell's server columns) of a traffic cell whose
    requests all finished (pure): off target, not verifiable, or valid."""
    columns = {"server_prompt_tokens": server.prompt if server else None,
               "server_cached_tokens": server.cached if server else None,
               "server_source": server.source if server else None, "reuse_block": block}
    failed = next((r for r in records if r.error), None)
    if failed is not None:
        refused = context_refused(failed.error, failed.status)
        prefix = "server refused the context: " if refused else ""
        return (OVER_CAPACITY if refused else ERROR), prefix + str(failed.error), columns
    achieved = requests_ratio([r.prompt_tokens for r in measured], [r.cached_tokens for r in measured])
    prompts = [r.prompt_tokens for r in measured if r.prompt_tokens]
    tol = tolerance(block, sum(prompts) / len(prompts) if prompts else None)
    verdict = judge_reuse(target, achieved, percent(server.cached, server.prompt) if server else None,
                          tol, server.name if server else "server counters")
    if verdict.unverifiable:
        return REUSE_UNVERIFIED, verdict.reason, columns
    if verdict.off:
        return REUSE_OFF_TARGET, verdict.reason, columns
    if problems:
        shown = "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if len(problems) > 3 else "")
        return REUSE_OFF_TARGET, f"reuse off target: {shown}", columns
    return VALID, verdict.reason, columns


async def flush_prefix_cache(runner: CellRunner) -> None:
    """Empty the prefix cache where the engine allows (absent or refused: said nothing)."""
    path = flush_path(runner.info)
    if path is None:
        return
    try:
        await asyncio.to_thread(runner.prompts.http.post, path)
    except httpx.HTTPError:
        pass  # the next request says whether the server is there


class TrafficRunner:
    """Runs prefix and conversation cells with a CellRunner's machinery.
    `listed`: a conversation cell's listed turns to measure in this session
    (the plan's cells of its context and streams still to run)."""

    def __init__(self, runner: CellRunner, listed: Callable[[Cell], list[int]]) -> None:
        self.runner = runner
        self.listed = listed
        self._done: dict[tuple, CellOutcome] = {}  # conversation cells measured ahead

    @property
    def block(self) -> int:
        return cache_block(self.runner.info)

    async def run(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        if cell.phase == CONVERSATION:
            return await self.conversation(cell, interrupted)
        return await self.prefix(cell, interrupted)

    async def _flush(self) -> None:
        await flush_prefix_cache(self.runner)

    async def _tagged(self, cell: Cell, prompt, max_tokens: int, purpose: str, index: int,
                      **fields) -> RequestRecord:
        rec = await self.runner.send(cell, prompt, max_tokens, purpose, index)
        for name, value in fields.items():
            setattr(rec, name, value)
        return rec

    # -- prefix cells -------------------------------------------------------
    async def prefix(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        r, info, block = self.runner, self.runner.info, self.block
        shared = shared_tokens(cell.reuse or 0, cell.context, block)
        room = info.kv_budget - running_at_once(cell.concurrency, info.slots) * (
            cell.context - shared + 1) if info.kv_budget else None
        groups = prefix_groups(cell.concurrency, info.slots, shared, room)
        work = await asyncio.to_thread(build_prefix_workload, r.prompts, cell.context,
                                       cell.concurrency, cell.reuse or 0, groups, block)
        await self._flush()
        records: list[RequestRecord] = []
        before_prime = await asyncio.to_thread(r.cache_counters)
        primed = 0
        for g in range(groups if shared else 0):
            prompt = work.prime(r.prompts, g, f"x{cell.context}-c{cell.concurrency}-r{cell.reuse}-p{g}")
            rec = await self._tagged(cell, prompt, 1, PURPOSE_PRIME, g, prefix_group=g)
            records.append(rec)
            primed += rec.prompt_tokens or 0
            if rec.error or interrupted.is_set():
                return self._ended(cell, records, records, None)
        before = before_prime if before_prime is None else await r.counters_with(before_prime, primed)
        per_stream = measured_requests(cell.concurrency, groups)

        async def stream(s: int) -> list[RequestRecord]:
            out = []
            for i in range(per_stream):
                g = group_of(s, i, groups)
                prompt = work.request(r.prompts, g, f"x{cell.context}-c{cell.concurrency}"
                                                    f"-r{cell.reuse}-s{s}-i{i}", s * per_stream + i)
                rec = await self._tagged(cell, prompt, 1, PURPOSE_REUSE, s, prefix_group=g)
                out.append(rec)
                if rec.error or interrupted.is_set():
                    break
            return out

        measured = [rec for got in await asyncio.gather(*(stream(s) for s in range(cell.concurrency)))
                    for rec in got]
        records += measured
        if interrupted.is_set():
            return CellOutcome(records, PENDING, "interrupted")
        after = None
        if before is not None and not any(x.error for x in measured):
            after = await r.counters_with(before, sum(x.prompt_tokens or 0 for x in measured))
        return self._ended(cell, records, measured, counters_count(before, after))

    def _ended(self, cell: Cell, records: list[RequestRecord], measured: list[RequestRecord],
               counters: ServerCount | None, problems: list[str] = ()) -> CellOutcome:
        server = counters or timings_count(measured)
        status, reason, columns = judge_traffic(records, measured, cell.reuse, server, self.block,
                                                list(problems))
        slots = self.runner.info.slots
        if status == VALID and more_than_slots(cell.concurrency, slots):
            # its TTFTs hold the wait for a slot: never published as C streams served at once
            status, reason = REQUESTS_QUEUED, queued_note(cell.concurrency, slots)
        return CellOutcome(records, status, reason, server=columns)

    # -- conversation cells -------------------------------------------------
    async def conversation(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        """The cell's outcome: measured now with every later listed turn of its
        context and streams (kept for them), or measured already."""
        done = self._done.pop(cell.key, None)
        if done is not None:
            return done
        listed = sorted(set(self.listed(cell)) | {cell.turn or 1})
        outcomes = await self._conversations(cell, listed, interrupted)
        for key, outcome in outcomes.items():
            if key != cell.key:
                self._done[key] = outcome
        return outcomes[cell.key]

    async def _conversations(self, cell: Cell, listed: list[int], interrupted: asyncio.Event
                             ) -> dict[tuple, CellOutcome]:
        r, c = self.runner, cell.concurrency
        last = max(listed)
        user, reply = turn_sizes(cell.context, last)
        user_words, reply_words = r.prompts.words_for(user), r.prompts.words_for(reply)
        talks = [conversation(r.prompts.run_tag, cell.context, c, s, last, user_words, reply_words,
                              r.prompts.source) for s in range(c)]
        max_tokens = conversation_output(r.settings.max_output)
        cells = {k: Cell(CONVERSATION, cell.context, c, turn=k) for k in listed}
        outcomes: dict[tuple, CellOutcome] = {}
        turns: list[Turn] = []
        pending: list[RequestRecord] = []  # the turns since the last listed one
        owed: list[str] = []  # their turns that did not reuse the turn before: flag the listed one
        for j in range(1, last + 1):
            key_turn = next(k for k in listed if k >= j)
            owner = cells[key_turn]
            purpose = PURPOSE_TURN if j == key_turn else PURPOSE_TURN_FILL
            before = await asyncio.to_thread(r.cache_counters) if purpose == PURPOSE_TURN else None
            got = list(await asyncio.gather(*(
                self._tagged(owner, talks[s].prompt(j), max_tokens, purpose, s, conversation_id=s,
                             conversation_turn=j) for s in range(c))))
            pending += got
            turns += [Turn(x.conversation_id, j, x.prompt_tokens, x.cached_tokens) for x in got]
            if interrupted.is_set():
                outcomes[owner.key] = CellOutcome(pending, PENDING, "interrupted")
                return outcomes
            failed = any(x.error for x in got)
            owed += [p for p in turn_problems([t for t in turns if t.turn in (j - 1, j)], self.block)
                     if f" turn {j}:" in p]  # every turn, listed or not, must reuse the one before
            if purpose == PURPOSE_TURN or failed:
                after = None
                if before is not None and not failed:
                    after = await r.counters_with(before, sum(x.prompt_tokens or 0 for x in got))
                outcomes[owner.key] = self._ended(owner, pending, got if j == key_turn else [],
                                                  counters_count(before, after), owed)
                pending, owed = [], []
            if failed:  # the later turns' history is broken: their cells share the failure
                for k in listed:
                    if k > key_turn:
                        first = next(x for x in got if x.error)
                        outcomes[cells[k].key] = CellOutcome(
                            [], outcomes[owner.key].status,
                            f"turn {j} failed: {first.error}", server=None)
                return outcomes
        return outcomes
