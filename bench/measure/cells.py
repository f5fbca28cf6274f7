"""Running one cell of the matrix against the server.

Decode: warm each stream's prefix cache, start C streams and wait until
all produce tokens (and the server's gauges agree), then measure a fixed
window during which every stream that finishes is restarted at once. The
window ends exactly at its duration; open streams are cancelled (closing
the connection aborts them server-side) and the server is drained to idle
before the next cell.

Prefill: cold requests with unique prefixes, one output token each; a
sample that hit a prefix cache is rejected, kept as evidence, and retried.

A decode cell counted one token per text chunk, with no final usage to
confirm it, has its count checked after the window and the drain, off the
clock: the server tokenizes the streamed text, or a short request's final
usage shows how many tokens its chunks carry (`_check_count`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from bench.core.plan import Cell, more_than_slots, running_at_once
from bench.measure.liveparse import LiveParser
from bench.measure.monitor import gc_paused
from bench.measure.records import (
    CountCheck,
    RequestRecord,
    Verdict,
    context_refused,
    judge_decode,
    probe_check,
    records_table,
    tokenized_check,
    with_count,
)
from bench.measure.spec_cells import spec_columns
from bench.measure.stream import StreamClient, StreamResult
from bench.server.engine_profiles import profile_named
from bench.server.engines import ServerError, ServerInfo
from bench.server.sampler import MetricsSampler
from bench.server.server_check import ServerView
from bench.workload.prompts import Prompt, PromptFactory, messages
from rundir.contract import (
    COUNT_CHUNKS_UNVERIFIED,
    ERROR,
    METRIC_PREFIX_CACHE_HITS,
    METRIC_PROMPT_TOKENS,
    OVER_CAPACITY,
    PENDING,
    PREFILL_REJECTED_PREFIX,
    PURPOSE_MEASURE,
    PURPOSE_PREFILL,
    PURPOSE_PREFIX_FILL,
    REQUESTS_QUEUED,
    VALID,
)
from rundir.lengths import LengthMix, parse_mix
from rundir.metrics import DecodeMetrics
from rundir.windows import split_span

CACHE_HIT_RATIO = 0.1  # a prefill sample with more cached tokens than this is rejected
TOKENIZE_MAX_REQUESTS = 32  # a cell's count check tokenizes its longest streams, up to this many
CHECK_REQUEST_TOKENS = 64  # max_tokens of the short request whose final usage checks the count


def slot_tag(cell: Cell, i: int) -> str:
    """The prompt tag of stream slot `i` of a decode cell (inject.py reads it)."""
    return f"d{cell.context}-c{cell.concurrency}-s{i}"


@dataclass
class Settings:
    duration_s: float = 30.0
    max_output: int = 4096
    prefill_repeats: int = 3
    warmup_timeout_s: float = 120.0
    stable_s: float = 3.0
    drain_timeout_s: float = 60.0
    stall_timeout_s: float = 60.0
    ttft_timeout_s: float = 900.0
    repeats: int = 1  # back-to-back windows per decode cell (`--repeats k`)
    # Length mixes and sampling (issue 35; bench/run/length_setup.py, rundir/lengths.py):
    # `output_lengths` a rundir.lengths spec ("fixed": every request asks max_output, or the
    # rate cells' output); `length_seed` the run's (given, or derived from the run id);
    # `honor_eos`: the engine profile's ignore_eos is not sent; `temperature`/`top_p`:
    # sent in every request when set (None: the server's default).
    output_lengths: str = "fixed"
    # `input_lengths` a rundir.lengths input spec (rate cells only; "fixed": every prompt at
    # the cell's context), drawn with `length_seed`
    input_lengths: str = "fixed"
    length_seed: int = 0
    honor_eos: bool = False
    temperature: float | None = None
    top_p: float | None = None


@dataclass
class CellOutcome:
    """A finished (or interrupted) cell, handed to the store and the live display.

    `table` is `records` as rows of requests.parquet, built once here (or by
    the decode judge) and never again: the records are final once the
    outcome is made. `figures` are the decode figures the judge computed."""

    records: list[RequestRecord]
    status: str
    reason: str | None
    window: tuple[int, int] | None = None
    warmup_s: float | None = None
    counting: str | None = None
    client_bound: bool | None = None  # the client could not keep up in the window
    figures: DecodeMetrics | None = None
    table: pa.Table | None = None  # None given: built from `records`
    # With --repeats k > 1: the k back-to-back windows (start_ns, end_ns) that `window`
    # spans; None: one window, `window` itself (what windows.parquet then omits).
    windows: list[tuple[int, int]] | None = None
    # With --shard i/N: per remote shard, the clock offset its times were converted
    # with (clock_offsets.parquet's columns but the cell's key); None: one host.
    clocks: list[dict] | None = None
    server: dict | None = None  # a traffic cell's server_* and reuse_block columns of cells.parquet

    def __post_init__(self) -> None:
        if self.table is None:
            self.table = records_table(self.records)


@dataclass
class DecodeRun:
    """What the phases of one decode cell share: the slots' prompts, the
    records so far, the events that stop the streams, and the window.

    Public because the phases run in more than one place: a shard process
    runs `CellRunner.stream_loop` on its slots of a run, and a sharded cell
    (bench/distributed/shards.py) runs the warm-up's verdict, readiness and
    the judge here on records its shards made."""

    cell: Cell
    prompts: list[Prompt]
    interrupted: asyncio.Event
    records: list[RequestRecord] = field(default_factory=list)
    cancel: asyncio.Event = field(default_factory=asyncio.Event)  # the window is over
    failure: asyncio.Event = field(default_factory=asyncio.Event)  # a measured stream failed
    live: list = field(default_factory=list)  # per slot: its open stream, once started
    tasks: list[asyncio.Task] = field(default_factory=list)  # one stream loop per slot
    parsing: list[asyncio.Task] = field(default_factory=list)  # finished streams being parsed
    notes: list[str] = field(default_factory=list)  # appended to the cell's reason
    warmup_s: float | None = None
    start_ns: int = 0
    end_ns: int | None = None  # set when the window opens

    def __post_init__(self) -> None:
        self.live = [None] * self.cell.concurrency

    @property
    def streams(self) -> int:
        """The stream slots this process runs (a shard runs some of the cell's)."""
        return sum(p is not None for p in self.prompts)


# Why the client could have moved a figure of a run's window (run, start_ns, end_ns,
# the cell's TBT in ms, its records' table), or None: CellRunner.judge asks it.
BoundReason = Callable[[DecodeRun, int, int, float | None, pa.Table], str | None]


def queued_note(concurrency: int, slots: int) -> str:
    """What a cell with more streams than the server's slots says, in its
    reason and on the terminal as it starts."""
    return (f"{concurrency} streams, {slots} server slot{'' if slots == 1 else 's'}: at most "
            f"{slots} ran at once, the other {concurrency - slots} waited in the server's queue")


class CellRunner:
    """Owns the per-run machinery a cell needs: client, prompts, sampler."""

    def __init__(
        self, info: ServerInfo, client: StreamClient, prompts: PromptFactory,
        sampler: MetricsSampler, settings: Settings, redact: Callable[[str], str],
    ) -> None:
        self.info = info
        self.client = client
        self.prompts = prompts
        self.sampler = sampler
        self.settings = settings
        self.redact = redact
        self._ids = itertools.count()
        # request ids are `<id_prefix>-<n>`; a shard process has its own prefix
        self.id_prefix = prompts.run_tag if prompts is not None else ""

    # -- requests -------------------------------------------------------
    @property
    def ignore_eos(self) -> bool:
        """Whether every stream is asked to run to max_tokens: the engine's profile
        says so, unless the run honours EOS (--honor-eos)."""
        return profile_named(self.info.engine).ignore_eos and not self.settings.honor_eos

    @property
    def mix(self) -> LengthMix:
        """The run's output length mix (--output-lengths)."""
        return parse_mix(self.settings.output_lengths)

    def output_target(self, cell: Cell, slot: int, n: int, prompt: Prompt | None = None) -> int | None:
        """max_tokens of request `n` of stream slot `slot` (rate cells: slot = its index,
        n = 0) when the run draws lengths, or (--output-lengths file) its `prompt`'s item's
        reply length; None: every request asks the cell's maximum."""
        mix = self.mix
        if mix.fixed:
            return None
        if mix.drawn:
            return mix.draw(self.settings.length_seed, cell.key, slot, n)
        if prompt is None or prompt.reply_tokens is None:  # a bug of ours: PromptFactory sets it
            raise ValueError(f"output lengths {mix}: the prompt of {cell.key} slot {slot} has no "
                             "reply length")
        return prompt.reply_tokens

    def payload(self, prompt: Prompt, max_tokens: int) -> dict:
        """A streaming chat request plus the engine profile's extras (less ignore_eos
        with --honor-eos) and the run's sampling settings where given."""
        extras = profile_named(self.info.engine)
        body = dict(extras.body_extras)
        if self.settings.honor_eos:
            body.pop("ignore_eos", None)
        s = self.settings
        sampling = {k: v for k, v in (("temperature", s.temperature), ("top_p", s.top_p))
                    if v is not None}
        return {
            "model": self.info.model,
            "messages": prompt.messages or messages(prompt.text),
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True, **extras.stream_extras},
            **body,
            **sampling,
        }

    async def send(
        self, cell: Cell, prompt: Prompt, max_tokens: int, purpose: str, index: int,
        cancel: asyncio.Event | None = None, on_start=None, at_ns: int | None = None,
        body: bytes | None = None,
    ) -> RequestRecord:
        """One request; `body`: its JSON already encoded (else made from `prompt`)."""
        rid, result, live = await self._post(prompt, max_tokens, cancel, on_start, at_ns=at_ns,
                                             body=body)
        rec = await self._record(cell, rid, purpose, index, result, live)
        rec.prompt_index = prompt.index
        return rec

    async def _post(self, prompt: Prompt, max_tokens: int, cancel: asyncio.Event | None,
                    on_start, streams: int = 1, at_ns: int | None = None,
                    body: bytes | None = None) -> tuple[str, StreamResult, LiveParser]:
        """One stream (sent at `at_ns` if given), parsed as it runs once its raw events
        pass this process's share for one of `streams` streams (bench/measure/liveparse.py)."""
        rid = f"{self.id_prefix}-{next(self._ids)}"
        live = LiveParser(max_tokens)
        result = await self.client.post_stream(
            "/v1/chat/completions", body if body is not None else self.payload(prompt, max_tokens),
            rid, cancel, on_start,
            live.hook(streams), at_ns)
        return rid, result, live

    async def _record(self, cell: Cell, rid: str, purpose: str, index: int,
                      result: StreamResult, live: LiveParser) -> RequestRecord:
        """A finished stream's record: what it still held is parsed a slice at a
        time, yielding to the loop between slices (in one piece a 4,096-event
        stream blocked every other stream's reads for 10-30 ms and made cells
        client-bound, seen at 8 streams on an H200)."""
        parsed = await live.finish(result.chunks)
        return RequestRecord.from_stream(cell.key, rid, purpose, index, result, parsed,
                                         self.redact, self.ignore_eos)

    # -- prefill --------------------------------------------------------
    async def prefill(self, cell: Cell) -> CellOutcome:
        s = self.settings
        records: list[RequestRecord] = []
        good = 0
        for attempt in range(s.prefill_repeats * 3):
            if good >= s.prefill_repeats:
                break
            tag = f"p{cell.context}-a{attempt}"
            prompt = await asyncio.to_thread(self.prompts.build, cell.context, tag)
            before = await asyncio.to_thread(self.cache_counters)
            rec = await self.send(cell, prompt, 1, PURPOSE_PREFILL, 0)
            records.append(rec)
            if rec.error:
                if context_refused(rec.error, rec.status):
                    return CellOutcome(records, OVER_CAPACITY, f"server refused the context: {rec.error}")
                return CellOutcome(records, ERROR, rec.error)
            cached = rec.cached_tokens or 0
            if before is not None:
                after = await self.counters_with(before, rec.prompt_tokens or 0)
                if after is not None:
                    cached = max(cached, int(after[1] - before[1]))
            if rec.prompt_tokens and cached > CACHE_HIT_RATIO * rec.prompt_tokens:
                rec.error = f"{PREFILL_REJECTED_PREFIX} prefix-cache hit ({cached} cached tokens)"
                continue
            good += 1
        if good < s.prefill_repeats:
            return CellOutcome(records, ERROR, f"only {good} cold samples in {len(records)} tries")
        return CellOutcome(records, VALID, None)

    def cache_counters(self) -> tuple[float, float] | None:
        """(prompt, prefix-cache hit) tokens from the server's counters; a blocking scrape."""
        if not {METRIC_PROMPT_TOKENS, METRIC_PREFIX_CACHE_HITS} <= set(self.info.gauges):
            return None
        sums = self.sampler.scrape()
        if sums is None or METRIC_PREFIX_CACHE_HITS not in sums:
            return None
        return sums.get(METRIC_PROMPT_TOKENS, 0.0), sums[METRIC_PREFIX_CACHE_HITS]

    async def counters_with(self, before: tuple[float, float], prompt_tokens: int,
                             wait_s: float = 5.0) -> tuple[float, float] | None:
        """The counters once they include a finished request: engines publish
        them after the step, seconds late on a busy host, and a hit read too
        early would be blamed on the next sample."""
        deadline = time.monotonic() + wait_s
        while True:
            now = await asyncio.to_thread(self.cache_counters)
            if now is None or now[0] - before[0] >= prompt_tokens or time.monotonic() > deadline:
                return now
            await asyncio.sleep(0.1)

    # -- decode ---------------------------------------------------------
    # A decode cell's phases, public: a sharded cell (bench/distributed/shards.py)
    # runs warm_up's verdict, start and judge here, with its own fills, launch,
    # window and client bound, and a shard process runs stream_loop on its slots.
    async def decode(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        run = DecodeRun(cell, await self._decode_prompts(cell), interrupted)
        ended = await self.warm_up(run, await self.fills(run))
        if ended is not None:
            return ended
        before = await asyncio.to_thread(self.spec_counters)
        await self.start(run, self.launch)
        await self.measure(run)
        if interrupted.is_set():
            return CellOutcome(run.records, PENDING, "interrupted", (run.start_ns, run.end_ns),
                               run.warmup_s)
        outcome = await self.judge(run, self.bound_reason)
        after = await asyncio.to_thread(self.spec_counters) if before else None
        outcome.server = spec_columns(before, after, run.records)
        return outcome

    def spec_counters(self) -> dict[str, float] | None:
        """The engine's speculative-decoding counters (bench/measure/spec_cells.py); a blocking scrape."""
        names = self.info.spec_counters  # those its /metrics had when probed (none: no drafts)
        return self.sampler.counters(names) if names and self.sampler.enabled else None

    async def _decode_prompts(self, cell: Cell) -> list[Prompt]:
        """One prompt per stream slot: variants of one base, so each slot has
        its own prefix to keep cached."""
        base_tag = slot_tag(cell, 0)
        base = await asyncio.to_thread(self.prompts.build, cell.context, base_tag)
        return [base] + [
            self.prompts.variant(base, base_tag, slot_tag(cell, i))
            for i in range(1, cell.concurrency)
        ]

    async def warm_up(self, run: DecodeRun, fills: list[RequestRecord]) -> CellOutcome | None:
        """The verdict on each stream's prefix warm-up (one output token per
        prompt, so the window measures decode and not a cold prefill): the
        cell's outcome when it ends here (interrupted, refused, failed), else None."""
        run.records.extend(fills)
        if run.interrupted.is_set():
            return CellOutcome(run.records, PENDING, "interrupted")
        failed = [r for r in fills if r.error]
        if not failed:
            return None
        refused = context_refused(failed[0].error, failed[0].status)
        status = OVER_CAPACITY if refused else ERROR
        prefix = "server refused the context: " if refused else "prefix warm-up failed: "
        return CellOutcome(run.records, status, prefix + str(failed[0].error))

    async def fills(self, run: DecodeRun) -> list[RequestRecord]:
        """One prefix warm-up per stream slot, all at once (in slot order)."""
        return list(await asyncio.gather(
            *(self.send(run.cell, p, 1, PURPOSE_PREFIX_FILL, i, run.interrupted)
              for i, p in enumerate(run.prompts))
        ))

    async def start(self, run: DecodeRun, launch: Callable[[DecodeRun], None]) -> None:
        """Start C saturating streams (`launch`: where they run) and wait until
        the server runs them all, or as many as it has slots: the others wait
        in its queue, and waiting for them to produce tokens would only wait
        out --warmup-timeout."""
        warm_start = time.monotonic()
        c, slots = run.cell.concurrency, self.info.slots
        if more_than_slots(c, slots):
            run.notes.append(queued_note(c, slots))
        launch(run)
        ready = await self._wait_ready(c, run.live, run.failure, run.interrupted,
                                       running_at_once(c, slots))
        run.warmup_s = time.monotonic() - warm_start
        if not ready and not run.failure.is_set() and not run.interrupted.is_set():
            run.notes.append(f"readiness not reached in {self.settings.warmup_timeout_s:.0f} s")

    def launch(self, run: DecodeRun) -> None:
        """Start every stream slot's loop in this process."""
        run.tasks = [asyncio.create_task(self.stream_loop(run, i))
                     for i in range(run.cell.concurrency)]

    async def stream_loop(self, run: DecodeRun, i: int) -> None:
        """Keep stream slot `i` busy: a stream that finishes is restarted at
        once, until the window ends or any stream fails."""
        for n in itertools.count():
            if run.cancel.is_set() or run.failure.is_set():
                return
            if run.end_ns is not None and time.monotonic_ns() >= run.end_ns:
                return  # a starved event loop sets `cancel` late: start nothing past the window
            target = self.output_target(run.cell, i, n, run.prompts[i])
            rid, result, live = await self._post(
                run.prompts[i], target or self.settings.max_output, run.cancel,
                lambda proto, i=i: run.live.__setitem__(i, proto), run.streams,
            )
            # Restart first, parse meanwhile: a failure the transport saw is
            # known now; one inside the events sets `failure` when parsed.
            run.parsing.append(asyncio.create_task(self._keep(run, result, rid, i, live, target)))
            if not result.cancelled and (result.error or not result.done):
                run.failure.set()
                return

    async def _keep(self, run: DecodeRun, result: StreamResult, rid: str, i: int,
                    live: LiveParser, target: int | None = None) -> None:
        rec = await self._record(run.cell, rid, PURPOSE_MEASURE, i, result, live)
        rec.prompt_index = run.prompts[i].index
        rec.output_target = target
        run.records.append(rec)
        if rec.error:
            run.failure.set()

    async def measure(self, run: DecodeRun) -> None:
        """The measurement window: its full duration unless a stream fails or
        the run is interrupted; then every stream is cancelled and parsed.
        With --repeats k the window is k back-to-back windows on the same
        streams (docs/methodology.md, "Repeats and intervals"): one span of
        k durations, cut into windows when judged."""
        run.start_ns = time.monotonic_ns()
        run.end_ns = run.start_ns + self.settings.repeats * self.window_ns
        with gc_paused():  # a full collection inside the window stalls the loop 8-20 ms
            if not run.failure.is_set() and not run.interrupted.is_set():
                await self.sleep_until(run.end_ns, run.failure, run.interrupted)
            run.cancel.set()
            await asyncio.gather(*run.tasks)
            await asyncio.gather(*run.parsing)

    async def judge(self, run: DecodeRun, bound_reason: BoundReason) -> CellOutcome:
        """Drain the server, then judge the window's records (and, off the
        clock, check a chunk count no usage confirmed); `bound_reason` says
        whether the client could have moved a figure (`CellRunner.bound_reason`
        for streams read here)."""
        if not await self._drain():
            run.notes.append(
                f"the server was still busy {self.settings.drain_timeout_s:.0f} s after the window")
        metrics_table = self.sampler.table() if self.sampler.enabled else None
        start_ns, end_ns = run.start_ns, run.end_ns
        if run.failure.is_set() and time.monotonic_ns() < end_ns:
            end_ns = max(start_ns + 1, min(end_ns, time.monotonic_ns()))
        # Flagged only when the client could have moved a published figure by
        # more than its displayed precision: judged on the cell's own stamps
        # (bench/measure/monitor.py, bench/measure/stamp_bounds.py).
        records = run.records
        table = records_table(records)
        server = ServerView(profile_named(self.info.engine).live_generation_counter,
                            self.sampler.half_round_trips()) if self.sampler.enabled else None
        verdict: Verdict = judge_decode(
            records, run.cell.concurrency, start_ns, end_ns, metrics_table,
            lambda tbt_ms: bound_reason(run, start_ns, end_ns, tbt_ms, table), table, server)
        if verdict.status == VALID and more_than_slots(run.cell.concurrency, self.info.slots):
            # Never published as C concurrent streams: the server runs at most its slots.
            verdict.status = REQUESTS_QUEUED
        why = verdict.client_bound
        bound = why is not None
        if bound:
            run.notes.append(f"client-bound: the collector could not keep up ({why})")
        if verdict.counting == COUNT_CHUNKS_UNVERIFIED and verdict.status in (VALID, REQUESTS_QUEUED):
            verdict = with_count(verdict, await self._check_count(run.cell, records))
        if run.notes:
            verdict.reason = "; ".join(filter(None, [verdict.reason, *run.notes]))
        windows = None
        if self.settings.repeats > 1:
            windows = split_span(start_ns, end_ns, self.settings.repeats, self.window_ns)
        return CellOutcome(
            records, verdict.status, verdict.reason, (start_ns, end_ns), run.warmup_s,
            verdict.counting, bound, verdict.figures, table, windows,
        )

    def bound_reason(self, run: DecodeRun, start_ns: int, end_ns: int, tbt_ms: float | None,
                     table: pa.Table) -> str | None:
        """Why this process's reads could have moved a figure of the window (None: they could not)."""
        return self.client.client_bound_reason(start_ns, end_ns, tbt_ms, table)

    @property
    def window_ns(self) -> int:
        """One window's duration, in ns (--duration)."""
        return int(self.settings.duration_s * 1e9)

    async def _check_count(self, cell: Cell, records: list[RequestRecord]) -> CountCheck:
        """Confirm or refute one token per text chunk, after the window: the
        server's tokenizer counts the text of the cell's longest streams (one
        call per stream); without one, a short request's final usage shows
        whether the server packs several tokens into a chunk."""
        texts = sorted((r for r in records if r.purpose == PURPOSE_MEASURE and r.text),
                       key=lambda r: r.tokens, reverse=True)[:TOKENIZE_MAX_REQUESTS]
        pairs: list[tuple[int, int]] = []
        try:
            for r in texts if self.prompts.can_tokenize else ():
                n = await asyncio.to_thread(self.prompts.count_output, r.text)
                if n is None:  # the endpoint is absent after all
                    break
                pairs.append((r.tokens, n))
        except ServerError as exc:
            return CountCheck(COUNT_CHUNKS_UNVERIFIED,
                              f"token count cannot be verified: {self.redact(str(exc))}")
        if pairs and len(pairs) == len(texts):
            return tokenized_check(pairs)
        prompt = self.prompts.short(f"count-check-d{cell.context}-c{cell.concurrency}")
        probe = await self.send(cell, prompt, CHECK_REQUEST_TOKENS, PURPOSE_PREFIX_FILL, 0)
        return probe_check(probe)

    async def _wait_ready(self, c: int, live: list, failure: asyncio.Event,
                          interrupted: asyncio.Event, running: int) -> bool:
        """`running` of the C stream slots have produced tokens, and (when the
        server tells) no more than the other C − `running` are waiting,
        continuously for stable_s seconds. `running` is C unless the server
        has fewer slots than C."""
        s = self.settings
        deadline = time.monotonic() + s.warmup_timeout_s
        stable_since = None
        produced = [False] * c  # each stream slot has received tokens at least once
        while time.monotonic() < deadline:
            if failure.is_set() or interrupted.is_set():
                return False
            for i, proto in enumerate(live):
                if proto is not None and proto.producing:
                    produced[i] = True
            producing = sum(produced) >= running
            # The running gauge can lag (vLLM CPU was seen reading 0 while four
            # streams received tokens), so readiness trusts the streams
            # themselves and asks the server only that nothing is waiting.
            _, waiting = self.sampler.running_waiting() if self.sampler.enabled else (None, None)
            server_ok = waiting is None or waiting <= c - running
            if producing and server_ok:
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= s.stable_s:
                    return True
            else:
                stable_since = None
            await asyncio.sleep(0.1)
        return False

    async def sleep_until(self, end_ns: int, failure: asyncio.Event,
                          interrupted: asyncio.Event) -> None:
        """Until end_ns (CLOCK_MONOTONIC), or a failure or an interrupt first."""
        while True:
            left = (end_ns - time.monotonic_ns()) / 1e9
            if left <= 0 or failure.is_set() or interrupted.is_set():
                return
            await asyncio.sleep(min(left, 0.05))

    async def _drain(self) -> bool:
        """Wait until the server reports nothing running or waiting; False
        if it is still busy at drain_timeout_s. A server that stopped
        answering has nothing to drain."""
        if not self.sampler.enabled:
            await asyncio.sleep(0.2)
            return True
        deadline = time.monotonic() + self.settings.drain_timeout_s
        gone = 0
        while time.monotonic() < deadline:
            state = await asyncio.to_thread(self.sampler.drain_state)
            if state == "idle":
                return True
            gone = gone + 1 if state == "gone" else 0
            if gone >= 3:
                return True
            await asyncio.sleep(0.2)
        return False
