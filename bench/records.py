"""One request's raw record, and the judgement of a finished cell (pure).

A cell's status is decided from the same functions the site builder uses
to compute its numbers (`rundir.metrics`), so the collector and the page
can never disagree about what the raw data says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.chunks import ParsedStream
from bench.repetition import detect_repetition
from bench.stream import StreamResult
from rundir import decode_checks, metrics
from rundir.contract import (
    COUNT_CHUNKS,
    COUNT_USAGE_CONTINUOUS,
    ERROR,
    LOOPED,
    OVER_CAPACITY,
    PURPOSE_MEASURE,
    REQUESTS_QUEUED,
    REQUESTS_SCHEMA,
    VALID,
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
USAGE_MISMATCH_TOLERANCE = 0.005


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
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    content_tail: str | None = None
    reasoning_tail: str | None = None
    counting: str = COUNT_CHUNKS
    final_usage_tokens: int | None = None
    status: int = 0

    @classmethod
    def from_stream(
        cls, key: tuple[str, int, int], request_id: str, purpose: str, index: int,
        result: StreamResult, parsed: ParsedStream, redact: Callable[[str], str],
    ) -> RequestRecord:
        """The record of a finished stream from what the stream parser made of
        its events (`bench.chunks.StreamParser`, fed in slices by the caller).

        What the server sent is judged whether or not we cancelled the stream
        afterwards: a malformed event or an impossible token count fails it.
        Only a lost connection, which closing it ourselves causes, is forgiven
        on a cancelled stream."""
        error = stream_error(result, parsed)
        phase, context, concurrency = key
        return cls(
            phase=phase, context=context, concurrency=concurrency, request_id=request_id,
            purpose=purpose, stream_index=index, send_ns=result.send_ns,
            end_ns=result.end_ns or None, prompt_tokens=parsed.prompt_tokens,
            cached_tokens=parsed.cached_tokens, finish_reason=parsed.finish_reason,
            error=redact(error) if error else None, cancelled=result.cancelled,
            chunk_ns=parsed.chunk_ns, chunk_tokens=parsed.chunk_tokens,
            content_tail=parsed.content or None, reasoning_tail=parsed.reasoning or None,
            counting=parsed.counting, final_usage_tokens=parsed.final_usage_tokens,
            status=result.status,
        )

    @property
    def tokens(self) -> int:
        return self.chunk_tokens[-1] if self.chunk_tokens else 0


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
    """The cell's token-counting method, and a problem with it if any."""
    if records and all(r.counting == COUNT_USAGE_CONTINUOUS for r in records if r.tokens):
        return COUNT_USAGE_CONTINUOUS, None
    for r in records:
        if r.final_usage_tokens and not r.cancelled and r.tokens:
            off = abs(r.final_usage_tokens - r.tokens) / r.final_usage_tokens
            if off > USAGE_MISMATCH_TOLERANCE:
                return COUNT_CHUNKS, (
                    f"server sends several tokens per chunk without per-chunk usage "
                    f"({r.tokens} chunks for {r.final_usage_tokens} tokens): token times unknown"
                )
    return COUNT_CHUNKS, None


ClientCheck = Callable[[float | None], str | None]


def judge_decode(
    records: list[RequestRecord], concurrency: int, start_ns: int, end_ns: int,
    server_metrics: pa.Table | None, client_check: ClientCheck | None = None,
    table: pa.Table | None = None,
) -> Verdict:
    """Status of a decode cell from its raw records and server gauges.

    `table`: the records as `records_table` rows, when the caller already
    holds them (the cell's outcome carries them on to the store).

    `client_check(tbt_ms)`: why the collector itself could not keep up during
    the window (None: it could), given the cell's median time between tokens.
    A client-bound cell skips the consistency check (TCP merges what the
    client did not read under later stamps); the stall check tells the
    client's own silences from the server's by their backlog
    (rundir.decode_checks.stall_problem), so a frozen server is named even
    on a busy host."""
    if table is None:
        table = records_table(records)
    verdict = _judge_decode(records, table, concurrency, start_ns, end_ns, server_metrics,
                            client_check or (lambda _tbt: None))
    if verdict.client_bound is None and client_check is not None:
        verdict.client_bound = client_check(verdict.figures.tbt_ms if verdict.figures else None)
    return verdict


def _judge_decode(records: list[RequestRecord], table: pa.Table, concurrency: int, start_ns: int,
                  end_ns: int, server_metrics: pa.Table | None, client_check: ClientCheck) -> Verdict:
    measured = [r for r in records if r.purpose == PURPOSE_MEASURE]
    counting, count_problem = counting_of(measured)
    failed = [r for r in records if r.error]
    refused = [r for r in failed if context_refused(r.error, r.status)]
    if refused:
        return Verdict(OVER_CAPACITY, f"server refused the context: {refused[0].error}", counting)
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return Verdict(ERROR, f"{failed[0].error}{more}", counting)
    if count_problem:
        return Verdict(ERROR, count_problem, counting)
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
    act = metrics.window_activity_detail(chunks, server_metrics, start_ns, end_ns)
    notes = [act.coverage.describe(start_ns, end_ns)] if act.coverage and not act.from_server else []
    problems = decode_checks.decode_problems(chunks, start_ns, end_ns, m, client_bound=bool(bound))
    if problems:
        return Verdict(ERROR, "; ".join(problems + notes), counting, m, bound)
    if metrics.is_queued(concurrency, act.avg_active, act.max_waiting):
        why = (
            f"server's waiting gauge reached {act.max_waiting:g}"
            if act.max_waiting
            else f"average active {act.avg_active:.2f} < 0.95 × {concurrency}"
        )
        return Verdict(REQUESTS_QUEUED, "; ".join([why, *notes]), counting, m, bound)
    return Verdict(VALID, "; ".join(notes) or None, counting, m, bound)
