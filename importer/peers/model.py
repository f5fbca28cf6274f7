"""What every peer tool's output becomes before it is written as a run directory.

Why one model: AIPerf, `vllm bench serve`, SGLang's bench_serving, guidellm,
inference-perf and MLPerf Endpoints each keep a different part of what a
request did. A reader of one format (``importer/peers/<tool>.py``) only
translates that file into a :class:`PeerRun`: stamps on one clock, in
nanoseconds, and the tool's own published figures with its definitions. What
the run directory holds, which window is measured and which checks can run
is decided once, from the tier, by the writer (``importer/peers/write.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Fidelity tiers: what a format lets us rebuild of each request.
TIER_CHUNK = "chunk"  # every chunk's arrival stamp (tokens per chunk where the format has them)
TIER_GAP = "gap"  # start + TTFT + each gap between chunks: chunk stamps rebuilt by summing
TIER_REQUEST = "request"  # first and last token times and the token count only
TIER_AGGREGATE = "aggregate"  # the tool's summary figures only: published as it gave them
TIERS = (TIER_CHUNK, TIER_GAP, TIER_REQUEST, TIER_AGGREGATE)

# The tool's own summary figures, under one vocabulary: f"{metric}.{stat}".
PUBLISHED_METRICS = (
    "ttft_ms",  # time to first token
    "itl_ms",  # inter-token latency as the tool defines it (per chunk or per token: see definitions)
    "tpot_ms",  # time per output token as the tool defines it (with or without the TTFT)
    "e2e_ms",  # request latency, send to last token
    "per_request_tok_s",  # one request's output rate as the tool defines it
)
PUBLISHED_STATS = ("mean", "p50", "p90", "p99")
PUBLISHED_TOTALS = (
    "total_tok_s",  # output tokens per second over the tool's own span
    "request_rate",  # completed requests per second over the tool's own span
    "duration_s",  # the tool's own span
    "completed",  # requests that finished without error
    "output_tokens",  # output tokens the tool counted
)


def published_key(metric: str, stat: str) -> str:
    """The key of one published percentile, e.g. ``published_key("ttft_ms", "p99")``."""
    if metric not in PUBLISHED_METRICS or stat not in PUBLISHED_STATS:
        raise ValueError(f"no published figure {metric}.{stat}")
    return f"{metric}.{stat}"


@dataclass(frozen=True)
class PeerRequest:
    """One request as the tool recorded it, its stamps on the run's one clock (ns).

    ``chunk_ns`` are the arrivals of the chunks that carried content, in order
    (for TIER_REQUEST: the first and the last token only); ``chunk_tokens``
    the cumulative output tokens at each of them, or None where the format
    does not say (the writer then applies its documented rule and says so).
    """

    send_ns: int
    end_ns: int | None
    chunk_ns: tuple[int, ...]
    chunk_tokens: tuple[int, ...] | None
    prompt_tokens: int | None
    output_tokens: int | None  # as the tool (or the server's usage it kept) counted them
    error: str | None = None  # the tool's error text, redacted by the writer; None: succeeded
    line: int | None = None  # the source file's line (JSONL) it came from, for one-line errors


@dataclass(frozen=True)
class PeerRun:
    """One peer tool's measurement of one load point (one concurrency or one rate)."""

    tool: str  # "aiperf", "vllm-bench-serve", "sglang-bench-serving", "guidellm", ...
    tool_version: str | None  # None where the file does not say (said on the page)
    format: str  # e.g. "aiperf/profile_export_raw.jsonl"
    tier: str  # one of TIERS
    source_file: Path
    clock: str  # what the stamps were taken with, e.g. "time.perf_counter_ns (CLOCK_MONOTONIC)"
    requests: tuple[PeerRequest, ...]  # empty for TIER_AGGREGATE
    published: dict[str, float]  # the tool's own figures: published_key(...) or PUBLISHED_TOTALS keys
    definitions: dict[str, str]  # metric or total -> how the tool computes it (our words)
    lost: tuple[str, ...] = ()  # what this format does not keep, e.g. "tokens per chunk"
    concurrency: int | None = None  # the tool's fixed concurrency, None for a rate or sweep
    rate: float | None = None  # the tool's offered request rate (req/s), None for closed loop
    input_tokens: int | None = None  # the configured prompt length, where the tool had one
    output_tokens: int | None = None  # the configured output length (max_tokens)
    model: str | None = None
    engine: str | None = None  # when the file says which server it measured
    server_url: str | None = None  # redacted by the writer
    measured_at: str | None = None  # ISO 8601 UTC, from the file
    extra: dict[str, str] = field(default_factory=dict)  # other facts worth a line on the page


class PeerFormatError(ValueError):
    """A file that is not (or not a readable version of) the format: one line.

    ``line`` is the 1-based line (JSONL) or None; ``field`` the field at fault.
    The message never quotes prompt or response text.
    """

    def __init__(self, message: str, line: int | None = None, field: str | None = None):
        super().__init__(message)
        self.message, self.line, self.field = message, line, field

    def located(self, path: Path) -> str:
        where = f"{path}:{self.line}" if self.line else str(path)
        what = f"{self.field}: " if self.field else ""
        return f"{where}: {what}{self.message}"
