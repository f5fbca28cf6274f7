"""One request's raw record, and the judgement of a finished cell (pure).

A cell's status is decided from the same functions the site builder uses
to compute its numbers (`rundir.metrics`, `rundir.decode_checks`), so the
collector and the page can never disagree about what the raw data says.
A chunk count nothing in the stream confirmed is checked once more after
the window (`CountCheck`, made by bench.measure.cells) and can only demote the cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.measure.chunks import INCONSISTENT_COUNTS, ParsedStream
from bench.measure.repetition import detect_repetition
from bench.measure.stream import StreamResult
from bench.server.server_check import ServerView, server_problems
from rundir import activity, decode_checks, metrics
from rundir.contract import (
    COUNT_CHUNKS,
    COUNT_CHUNKS_TOKENIZED,
    COUNT_CHUNKS_UNVERIFIED,
    COUNT_CHUNKS_USAGE,
    COUNT_USAGE_CONTINUOUS,
    ERROR,
    LOOPED,
    OVER_CAPACITY,
    PURPOSE_MEASURE,
    REQUESTS_QUEUED,
    REQUESTS_SCHEMA,
    VALID,
    key_fields,
    matrix_key,
)

CONTEXT_REFUSED_MARKERS = (
    "exceed_context_size",
    "maximum context length",
    "context length",
    "too long",
    "max_model_len",
    "exceeds",
    "kv cache",
    "kv-cache",
)
USAGE_MISMATCH_TOLERANCE = decode_checks.COUNT_TOLERANCE
# Re-tokenizing streamed text is not exactly the generated count (tokens merge
# differently at chunk and request boundaries, special tokens are dropped): a
# cell's tokenized total may differ from its chunk count by this share, or by
# TOKENIZED_SLACK tokens per request, whichever is larger. Two tokens in one
# chunk anywhere near half the time is far outside it.
TOKENIZED_TOLERANCE = 0.10
TOKENIZED_SLACK = 2


@dataclass
class RequestRecord:
    phase: str
    context: int
    concurrency: int
    request_id: str
    purpose: str
    stream_index: int
    send_ns: int
    end_ns: int | None
    prompt_tokens: int | None
    cached_tokens: int | None
    finish_reason: str | None
    error: str | None
    cancelled: bool
    # int64 arrays from the parser (16 bytes an event where lists held 76);
    # lists where a caller built the record by hand
    chunk_ns: np.ndarray | list[int] = field(default_factory=list)
    chunk_tokens: np.ndarray | list[int] = field(default_factory=list)
    content_tail: str | None = None
    reasoning_tail: str | None = None
    # Traffic cells only (rundir/contract/, requests.parquet's optional columns).
    prefix_reuse_target: int | None = None
    turn: int | None = None
    prefix_group: int | None = None
    conversation_id: int | None = None
    conversation_turn: int | None = None
    engine_cached_tokens: int | None = None
    rate_target: float | None = None
    scheduled_ns: int | None = None
    # Speculative decoding: llama.cpp's timings.draft_n / draft_n_accepted (rundir/speculative.py)
    engine_draft_tokens: int | None = None
    engine_draft_accepted: int | None = None
    counting: str = COUNT_CHUNKS
    final_usage_tokens: int | None = None
    status: int = 0
    # Not stored: what the judge and the count check need beyond requests.parquet.
    max_tokens: int | None = None
    ignore_eos: bool = False
    text: str | None = None  # the whole streamed text of a chunk-counted stream
    engine_computed_tokens: int | None = None  # llama.cpp's timings.prompt_n (traffic cells' check)
    # Stored (requests.parquet's optional column): which prompt of a non-filler source the
    # request's text starts at (bench/workload/sources.py); None: filler
    prompt_index: int | None = None
    # Stored (optional column): the max_tokens the request asked when the run draws
    # output lengths (--output-lengths; rundir/lengths.py); None: every request asked the cell's
    output_target: int | None = None
    # Stored (optional column): the prompt length a rate request was built to with an input
    # mix (--input-lengths); None: the cell's context
    input_target: int | None = None

    @classmethod
    def from_stream(
        cls, key: tuple, request_id: str, purpose: str, index: int,
        result: StreamResult, parsed: ParsedStream, redact: Callable[[str], str],
        ignore_eos: bool = False,
    ) -> RequestRecord:
        """The record of a finished stream from what the stream parser made of
        its events (`bench.measure.chunks.StreamParser`, fed in slices by the caller).

        What the server sent is judged whether or not we cancelled the stream
        afterwards: a malformed event or an impossible token count fails it.
        Only a lost connection, which closing it ourselves causes, is forgiven
        on a cancelled stream."""
        error = stream_error(result, parsed) or usage_problem(
            request_id, parsed.prompt_tokens, parsed.cached_tokens)
        return cls(
            **key_fields(key if len(key) > 3 else matrix_key(*key)), request_id=request_id,
            purpose=purpose, stream_index=index, send_ns=result.send_ns,
            end_ns=result.end_ns or None, prompt_tokens=parsed.prompt_tokens,
            cached_tokens=parsed.cached_tokens, finish_reason=parsed.finish_reason,
            error=redact(error) if error else None, cancelled=result.cancelled,
            chunk_ns=parsed.chunk_ns, chunk_tokens=parsed.chunk_tokens,
            content_tail=parsed.content or None, reasoning_tail=parsed.reasoning or None,
            counting=parsed.counting, final_usage_tokens=parsed.final_usage_tokens,
            status=result.status, max_tokens=parsed.max_tokens, ignore_eos=ignore_eos,
            text=parsed.text, engine_cached_tokens=parsed.engine_cached_tokens,
            engine_computed_tokens=parsed.engine_computed_tokens,
            engine_draft_tokens=parsed.engine_draft_tokens,
            engine_draft_accepted=parsed.engine_draft_accepted,
        )

    @property
    def tokens(self) -> int:
        return int(self.chunk_tokens[-1]) if len(self.chunk_tokens) else 0


def stream_error(result: StreamResult, parsed: ParsedStream) -> str | None:
    """Why a stream failed, or None (see `RequestRecord.from_stream`)."""
    transport = result.error
    if transport and result.cancelled and transport.startswith("connection lost"):
        transport = None  # we closed it: not a failure
    if not transport and result.status not in (0, 200):
        transport = f"HTTP {result.status}"  # the client leaves the status unsaid when cancelled
    error = transport or parsed.error
    if not error and not result.cancelled and result.status == 200 and not result.done:
        error = "stream ended without [DONE]"
    return error


def usage_problem(request_id: str, prompt: int | None, cached: int | None) -> str | None:
    """A usage no server can mean: more prompt tokens served from the cache
    than the prompt has (it would be stored, and a cell judged Valid on it)."""
    if prompt is None or cached is None or cached <= prompt:
        return None
    return (f"{INCONSISTENT_COUNTS}: request {request_id}: cached_tokens {cached} exceeds "
            f"prompt_tokens {prompt} (more of the prompt cached than it has)")


def records_table(records: list[RequestRecord]) -> pa.Table:
    """A cell's records as rows of requests.parquet: built once per cell, in
    its outcome, and used from there by the judge, the live display and the store."""
    cols = {name: [getattr(r, name) for r in records] for name in REQUESTS_SCHEMA.names}
    return pa.table(cols, schema=REQUESTS_SCHEMA)


def context_refused(error: str | None, status: int) -> bool:
    """An HTTP 400 saying the prompt does not fit the server's context."""
    if not error or status not in (400, 413, 422):
        return False
    low = error.lower()
    return any(marker in low for marker in CONTEXT_REFUSED_MARKERS)


@dataclass
class Verdict:
    status: str
    reason: str | None
    counting: str
    figures: metrics.DecodeMetrics | None = None  # the cell's decode figures, when measured
    client_bound: str | None = None  # why the collector could not keep up, or None


def counting_of(records: list[RequestRecord]) -> tuple[str, str | None]:
    """The cell's token-counting method, and a problem with it if any: chunk
    counts are confirmed by the final usage of requests that completed, and
    stay `COUNT_CHUNKS_UNVERIFIED` where none did (see `CountCheck`)."""
    if records and all(r.counting == COUNT_USAGE_CONTINUOUS for r in records if r.tokens):
        return COUNT_USAGE_CONTINUOUS, None
    confirmed = False
    for r in records:
        if r.final_usage_tokens and not r.cancelled and r.tokens:
            problem = usage_mismatch(r.tokens, r.final_usage_tokens, "")
            if problem:
                return COUNT_CHUNKS_UNVERIFIED, problem
            confirmed = True
    return (COUNT_CHUNKS_USAGE if confirmed else COUNT_CHUNKS_UNVERIFIED), None


def usage_mismatch(chunks: int, usage: int, which: str) -> str | None:
    """Why `chunks` text chunks cannot be `usage` tokens one each, or None."""
    if abs(usage - chunks) <= USAGE_MISMATCH_TOLERANCE * usage:
        return None
    return (f"server sends several tokens per chunk without per-chunk usage "
            f"({which}{chunks} chunks for {usage} tokens): token times unknown")


@dataclass
class CountCheck:
    """How a cell's chunk count was confirmed after its window (`counting`, a
    contract TOKEN_COUNTING value), or why it was not (`problem`: a
    contradiction, or nothing that could confirm it)."""

    counting: str
    problem: str | None = None


UNVERIFIABLE = ("token count cannot be verified: the server sent no token usage and "
                "has no tokenize endpoint, so one token per text chunk is a guess")


def tokenized_check(pairs: list[tuple[int, int]]) -> CountCheck:
    """Compare (chunk count, tokenized count of its text) per request, over the
    cell: within TOKENIZED_TOLERANCE the count stands, else it is refuted."""
    chunks = sum(c for c, _ in pairs)
    tokenized = sum(t for _, t in pairs)
    allowed = max(TOKENIZED_TOLERANCE * tokenized, TOKENIZED_SLACK * len(pairs))
    if abs(tokenized - chunks) <= allowed:
        return CountCheck(COUNT_CHUNKS_TOKENIZED)
    return CountCheck(COUNT_CHUNKS_UNVERIFIED, (
        f"the server's /tokenize counts {tokenized} tokens in the text of {len(pairs)} "
        f"requests streamed in {chunks} chunks ({tokenized / max(chunks, 1):.2f} per chunk; "
        f"one per chunk allows {TOKENIZED_TOLERANCE:.0%} off) and it sent no token usage: "
        "several tokens per chunk, token times unknown"))


def probe_check(probe: RequestRecord) -> CountCheck:
    """Confirm one token per chunk by the final usage of a short request sent
    after the window, for a server with neither per-chunk usage nor /tokenize."""
    if probe.error:
        return CountCheck(COUNT_CHUNKS_UNVERIFIED, (
            f"token count cannot be verified: the check request after the window failed "
            f"({probe.error})"))
    if probe.final_usage_tokens is None or not probe.tokens:
        return CountCheck(COUNT_CHUNKS_UNVERIFIED, UNVERIFIABLE)
    problem = usage_mismatch(probe.tokens, probe.final_usage_tokens, "check request: ")
    return CountCheck(COUNT_CHUNKS_UNVERIFIED if problem else COUNT_CHUNKS_USAGE, problem)


def with_count(verdict: Verdict, check: CountCheck) -> Verdict:
    """The verdict once the after-window count check is in: a refuted or
    unconfirmed count turns a cell with numbers into an Error naming why."""
    verdict.counting = check.counting
    if check.problem and verdict.status in (VALID, REQUESTS_QUEUED):
        verdict.status = ERROR
        verdict.reason = "; ".join(filter(None, [check.problem, verdict.reason]))
    return verdict


def finish_facts(records: list[RequestRecord]) -> tuple[list[str | None], np.ndarray, np.ndarray]:
    """(finish reasons, token counts, completed mask) of records, for the finish checks."""
    finish = [r.finish_reason for r in records]
    tokens = np.array([r.tokens for r in records], dtype=np.int64)
    completed = np.array([not r.cancelled and not r.error and r.finish_reason is not None
                          for r in records], dtype=bool)
    return finish, tokens, completed


ClientCheck = Callable[[float | None], str | None]


def judge_decode(
    records: list[RequestRecord], concurrency: int, start_ns: int, end_ns: int,
    server_metrics: pa.Table | None, client_check: ClientCheck | None = None,
    table: pa.Table | None = None, server: ServerView | None = None,
) -> Verdict:
    """Status of a decode cell from its raw records and server gauges.

    `table`: the records as `records_table` rows, when the caller already
    holds them (the cell's outcome carries them on to the store).

    `client_check(tbt_ms)`: why the collector itself could have moved a
    published figure during the window (None: it could not), given the
    cell's median time between tokens; it is asked once. A client-bound
    cell skips the consistency check (TCP merges what the client did not
    read under later stamps); the stall check tells the
    client's own silences from the server's by their backlog
    (rundir.decode_checks.stall_problem), so a frozen server is named even
    on a busy host.

    `server`: set the records against the server's own counts (its
    generation counter and running gauge in `server_metrics`:
    bench/server/server_check.py); None: not done."""
    if table is None:
        table = records_table(records)
    verdict = _judge_decode(records, table, concurrency, start_ns, end_ns, server_metrics,
                            client_check or (lambda _tbt: None), server)
    if verdict.figures is None and client_check is not None:  # judged before the figures
        verdict.client_bound = client_check(None)
    return verdict


def _judge_decode(records: list[RequestRecord], table: pa.Table, concurrency: int, start_ns: int,
                  end_ns: int, server_metrics: pa.Table | None, client_check: ClientCheck,
                  server: ServerView | None) -> Verdict:
    measured = [r for r in records if r.purpose == PURPOSE_MEASURE]
    counting, count_problem = counting_of(measured)
    failed = [r for r in records
              if r.error or usage_problem(r.request_id, r.prompt_tokens, r.cached_tokens)]
    refused = [r for r in failed if context_refused(r.error, r.status)]
    if refused:
        return Verdict(OVER_CAPACITY, f"server refused the context: {refused[0].error}", counting)
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        first = failed[0]
        why = first.error or usage_problem(first.request_id, first.prompt_tokens,
                                           first.cached_tokens)
        return Verdict(ERROR, f"{why}{more}", counting)
    if count_problem:
        return Verdict(ERROR, count_problem, counting)
    finish, tokens, completed = finish_facts(measured)
    asked = np.array([r.max_tokens or 0 for r in measured], dtype=np.int64)  # per request: a length mix
    early = decode_checks.length_problem(finish, tokens, completed, asked)
    ignored = any(r.ignore_eos for r in measured)
    stopped = decode_checks.stop_note(finish, tokens, completed) if ignored else None
    for r in measured:
        for kind, text in (("content", r.content_tail), ("reasoning", r.reasoning_tail)):
            period = detect_repetition(text or "")
            if period:
                return Verdict(
                    LOOPED, f"{kind} of {r.request_id} repeats a {period}-character period",
                    counting,
                )
    chunks = metrics.Chunks.from_table(table.filter(pc.equal(table["purpose"], PURPOSE_MEASURE)))
    done = np.array([not r.cancelled and not r.error for r in measured], dtype=bool)
    m = metrics.decode_metrics(chunks, start_ns, end_ns, done)
    if not m.output_tokens:
        return Verdict(ERROR, "no tokens arrived during the measurement window", counting)
    bound = client_check(m.tbt_ms)
    act = activity.window_activity_detail(chunks, server_metrics, start_ns, end_ns)
    notes = [act.coverage.describe(start_ns, end_ns)] if act.coverage and not act.from_server else []
    notes += [stopped] if stopped else []
    problems = decode_checks.decode_problems(chunks, start_ns, end_ns, m, client_bound=bool(bound))
    problems = [early, *problems] if early else problems
    if server is not None:
        counted = counting in (COUNT_USAGE_CONTINUOUS, COUNT_CHUNKS_USAGE)
        problems += server_problems(table, start_ns, end_ns, server_metrics, server, counted)
    if problems:
        return Verdict(ERROR, "; ".join(problems + notes), counting, m, bound)
    if activity.is_queued(concurrency, act.avg_active, act.max_waiting):
        why = (
            f"server's waiting gauge reached {act.max_waiting:g}"
            if act.max_waiting
            else f"average active {act.avg_active:.2f} < 0.95 × {concurrency}"
        )
        return Verdict(REQUESTS_QUEUED, "; ".join([why, *notes]), counting, m, bound)
    return Verdict(VALID, "; ".join(notes) or None, counting, m, bound)
