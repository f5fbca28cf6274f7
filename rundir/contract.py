"""The run-directory contract v1: the one definition both halves share.

A run directory holds `run.yaml` (who, what, how) and Parquet tables of raw
measurements. The collector writes it, the builder reads it; neither knows
the other. Everything a reader may rely on is declared here, so a change to
the format is a change to this file (and `docs/data-format.md`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from rundir import checks

SCHEMA_VERSION = 1

RUN_YAML = "run.yaml"
REQUESTS_FILE = "requests.parquet"
CELLS_FILE = "cells.parquet"
SERVER_METRICS_FILE = "server_metrics.parquet"
GPU_METRICS_FILE = "gpu_metrics.parquet"  # optional: GPU telemetry (absent: none taken)
# Raw rows of attempts a cell no longer reports (a re-measured Error cell, an
# attempt cut short): kept as evidence, same schema as requests.parquet, and
# never read by the builder.
SUPERSEDED_REQUESTS_FILE = "superseded_requests.parquet"
# Optional: the windows of decode cells measured more than once (`bench run --repeats k`),
# one row per (cell, window id 0..k-1); absent, every cell is one window (rundir/windows.py).
WINDOWS_FILE = "windows.parquet"
# Optional: per decode cell of a many-host run (`bench run --shard i/N`), each remote
# shard's clock offset from shard 0's and its bound; absent, every time is one host's.
CLOCK_OFFSETS_FILE = "clock_offsets.parquet"

# Phases of a cell.
PREFILL = "prefill"
DECODE = "decode"
# Traffic cells (`bench run --prefix-reuse`, `--turns`): keyed also by the optional
# key columns (TRAFFIC_KEY); a reader that knows only the matrix reads PREFILL and
# DECODE rows and leaves these to the parts that know them (docs/data-format.md).
PREFIX = "prefix"  # prompts that share a prefix with other requests, at a target reuse
CONVERSATION = "conversation"  # one turn of multi-turn conversations that resend their history
RATE = "rate"  # requests sent on a schedule at an offered rate (open loop), not C restarted streams
PHASES = (PREFILL, DECODE, PREFIX, CONVERSATION, RATE)
MATRIX_PHASES = (PREFILL, DECODE)
TRAFFIC_PHASES = (PREFIX, CONVERSATION, RATE)

# Cell statuses (see docs/methodology.md for what each means).
VALID = "valid"
OVER_CAPACITY = "over_capacity"
REQUESTS_QUEUED = "requests_queued"
LOOPED = "looped"
ERROR = "error"
PENDING = "pending"  # planned, not (yet) measured: an interrupted run
# Traffic cells only: the reuse the server delivered is off the target (or its two
# measures disagree), or nothing the server reports can tell it (never published Valid).
REUSE_OFF_TARGET = "reuse_off_target"
REUSE_UNVERIFIED = "reuse_unverified"
# Rate cells only: the client did not send the load its schedule asked for (too few
# requests sent, sends late, or gaps unlike the arrival process): never published Valid.
LOAD_NOT_DELIVERED = "load_not_delivered"
STATUSES = (VALID, OVER_CAPACITY, REQUESTS_QUEUED, LOOPED, ERROR, PENDING, REUSE_OFF_TARGET,
            REUSE_UNVERIFIED, LOAD_NOT_DELIVERED)

# A prefill sample the collector rejected (a prefix-cache hit) keeps its row; its
# `error` starts with this, so readers tell a rejection from a failure.
PREFILL_REJECTED_PREFIX = "rejected:"

# Why a request was sent.
PURPOSE_MEASURE = "measure"  # a saturating decode stream (clipped to the window)
PURPOSE_PREFIX_FILL = "prefix_fill"  # warms the prefix cache before a decode cell
PURPOSE_PREFILL = "prefill_sample"  # a cold request timed for prefill
PURPOSE_PRIME = "prefix_prime"  # puts a prefix group's shared prefix in the cache before a prefix cell
PURPOSE_REUSE = "reuse_sample"  # a measured request of a prefix cell
PURPOSE_TURN = "turn"  # a measured conversation turn (a turn `--turns` lists)
PURPOSE_TURN_FILL = "turn_fill"  # a turn between the listed ones: sent, kept, not measured
PURPOSE_ARRIVAL = "arrival"  # a rate cell's request, sent at its scheduled time
PURPOSES = (PURPOSE_MEASURE, PURPOSE_PREFIX_FILL, PURPOSE_PREFILL, PURPOSE_PRIME, PURPOSE_REUSE,
            PURPOSE_TURN, PURPOSE_TURN_FILL, PURPOSE_ARRIVAL)

# How a cell's chunk token counts were obtained. Readers show any other value
# as it is written (the column is free text), so older run directories stay readable.
# Without per-chunk usage each text chunk counts one token, a guess until the
# server confirms it; the value says how it did, or that nothing could.
COUNT_USAGE_CONTINUOUS = "usage_continuous"  # server's cumulative usage per chunk
COUNT_CHUNKS_USAGE = "chunks_usage"  # one per text chunk, agreeing with the server's final usage
COUNT_CHUNKS_TOKENIZED = "chunks_tokenized"  # ... agreeing with /tokenize of the streamed text
COUNT_CHUNKS_UNVERIFIED = "chunks_unverified"  # ... confirmed by nothing: never published Valid
TOKEN_COUNTING = (COUNT_USAGE_CONTINUOUS, COUNT_CHUNKS_USAGE, COUNT_CHUNKS_TOKENIZED,
                  COUNT_CHUNKS_UNVERIFIED)
# Written by collectors before the values above (one per text chunk, compared with
# the final usage of requests that completed, if any): read and shown as written.
# Also the stream parser's per-request method, before the cell's count is checked.
COUNT_CHUNKS = "chunks"
# Imported from another tool's per-request output (importer/peers; docs/data-format.md):
COUNT_PEER_CHUNKS = "peer_chunk_counts"  # the format's own cumulative count at each chunk
COUNT_PEER_CHUNKS_TOTAL = "peer_chunks_total"  # one per chunk, equal to the tool's per-request total
# The tool's per-request total spread over its chunks by rule (chunks that carried
# several tokens cannot be told apart): like COUNT_CHUNKS_UNVERIFIED, never published Valid.
COUNT_PEER_SPREAD = "peer_total_spread"
# Request tier: first and last token and the total only. A row's chunk lists then hold
# two stamps (first token: count 1, last token: the total), never per-chunk data: no
# time between tokens or windowed rate is computed from them.
COUNT_PEER_REQUEST = "peer_request_totals"
COUNT_PEER_AGGREGATE = "peer_aggregate"  # summary figures only: nothing counted by us
IMPORT_TOKEN_COUNTING = (COUNT_PEER_CHUNKS, COUNT_PEER_CHUNKS_TOTAL, COUNT_PEER_SPREAD,
                         COUNT_PEER_REQUEST, COUNT_PEER_AGGREGATE)
# Counts no check confirmed: a cell with one is never published Valid.
UNVERIFIED_COUNTING = (COUNT_CHUNKS_UNVERIFIED, COUNT_PEER_SPREAD)
# finish_reason of an imported request that succeeded where the tool kept no finish reason.
FINISH_NOT_RECORDED = "not_recorded"

SOURCE_MEASURED = "measured"
SOURCE_IMPORTED = "imported"

# Canonical server-metric names in server_metrics.parquet.
METRIC_RUNNING = "running"
METRIC_WAITING = "waiting"
METRIC_KV_USAGE = "kv_usage"
METRIC_GENERATION_TOKENS = "generation_tokens_total"
METRIC_PROMPT_TOKENS = "prompt_tokens_total"
METRIC_PREFIX_CACHE_HITS = "prefix_cache_hits_total"


class ContractError(ValueError):
    """A run directory does not meet the contract; the message is one line
    naming the file and the field."""


# --------------------------------------------------------------------------
# run.yaml
# --------------------------------------------------------------------------


@dataclass
class Hardware:
    type: str | None = None  # "Discrete GPU", "CPU", ...
    gpu_name: str | None = None
    gpu_count: int | None = None
    vram_gb_per_gpu: float | None = None
    cpu: str | None = None
    os: str | None = None
    driver: str | None = None
    cuda: str | None = None


@dataclass
class Engine:
    name: str | None = None
    version: str | None = None
    quantization: str | None = None
    backend: str | None = None
    repository: str | None = None
    build: str | None = None
    commit: str | None = None


@dataclass
class Model:
    name: str | None = None  # display name for titles; else last part of repository_id
    served_name: str | None = None
    repository_id: str | None = None
    revision: str | None = None
    max_model_len: int | None = None
    # The base model the site groups runs by (site_builder/families.py); optional, added
    # within schema v1 (older run.yaml without it derive it from the name).
    family: str | None = None


@dataclass
class Parameters:
    contexts: list[int] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)
    prefill_contexts: list[int] = field(default_factory=list)
    duration_s: float | None = None
    max_output_tokens: int | None = None
    prefill_mode: str | None = None
    prefill_repeats: int | None = None
    decode_test: str | None = None
    tool_name: str | None = None
    tool_version: str | None = None
    # The collector image the run was measured from, by digest (`IMAGE@sha256:HEX` or
    # `sha256:HEX`), when the runner passed BENCH_IMAGE_DIGEST (docs/collector-image.md);
    # written only then, so a run measured outside an image is what it was before.
    collector_image: str | None = None
    # The collector's source revision (a git commit id, `-dirty` when its checkout had
    # uncommitted changes to tracked files), when it could tell (bench/server/provenance.py:
    # BENCH_SOURCE_REVISION, pip's direct_url.json, or its own git checkout); written only
    # then, so a run without it is what it was before the field existed.
    collector_revision: str | None = None
    # Windows per decode cell (`--repeats k`); written only when k > 1, so a k = 1 run's
    # run.yaml is what it was before the field existed. Absent: 1.
    repeats: int | None = None
    # Traffic cells (`--prefix-reuse`, `--turns`, `--traffic-concurrency`); written only
    # when the run has them, so a run without them is what it was before they existed.
    prefix_reuse: list[int] | None = None
    turns: list[int] | None = None
    traffic_concurrency: list[int] | None = None
    # Rate cells (`--rate`, `--arrivals`, `--arrival-seed`, `--rate-cap`, `--rate-output`);
    # written only when the run has them. arrival_seed: the run's seed (given, or derived
    # from the run id); a cell's schedule is rundir.arrivals.schedule(..., cell_seed(it, key)).
    rate: list[float] | None = None
    arrivals: str | None = None
    arrival_seed: int | None = None
    rate_cap: int | None = None
    rate_output_tokens: int | None = None
    # `--rate-reuse`: the rate cells' prefix-reuse levels (percent), a rate cell per
    # (context, level, rate); written only when given. Absent: unique prompts.
    rate_reuse: list[int] | None = None
    # Prompt source (`--prompt-source`, `--prompts FILE`, `--prompt-seed`; issue 35): written
    # only when it is not filler, so a filler run's run.yaml is what it was. prompt_source:
    # "natural", "adversarial" or "file:NAME"; prompt_seed: given, or derived from the run id;
    # prompt_file_sha256: of the file's bytes (a resumed run must give the same file).
    prompt_source: str | None = None
    prompt_seed: int | None = None
    prompt_file_sha256: str | None = None
    # --- length mixes and sampling (issue 35; rundir/lengths.py) ---
    # Each written only when not the default, so a run without them is what it was.
    # output_lengths: a rundir.lengths spec other than "fixed"; length_seed: its seed
    # (given, or derived from the run id); honor_eos: true when requests did not ask the
    # engine to ignore EOS (--honor-eos); temperature, top_p: sent in every request
    # (absent: the server's default sampling).
    output_lengths: str | None = None
    # input_lengths: rate cells' prompt lengths, a rundir.lengths input spec other than
    # "fixed" (fractions of the cell's context, or "file"); drawn ones with length_seed
    input_lengths: str | None = None
    length_seed: int | None = None
    honor_eos: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    # --- end length mixes and sampling ---


TRAFFIC_PARAMETERS = ("prefix_reuse", "turns", "traffic_concurrency", "rate", "arrivals",
                      "arrival_seed", "rate_cap", "rate_output_tokens", "rate_reuse")
PROMPT_PARAMETERS = ("prompt_source", "prompt_seed", "prompt_file_sha256")
# Written only when set (the run came from a collector image that was told its digest;
# the collector knew its own source revision).
PROVENANCE_PARAMETERS = ("collector_image", "collector_revision")
# `sha256:HEX` or `NAME@sha256:HEX`: a digest names the image's content; a tag does not.
IMAGE_DIGEST = re.compile(r"(?:[^\s@]+@)?sha256:[0-9a-f]{64}")
# A full git commit id (SHA-1: 40 hex, SHA-256 repositories: 64 hex), `-dirty` when the
# checkout it was built from had uncommitted changes: an abbreviation or a branch name
# could later name another commit.
SOURCE_REVISION = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})(?:-dirty)?")
LENGTH_PARAMETERS = ("output_lengths", "input_lengths", "length_seed", "honor_eos", "temperature", "top_p")


@dataclass
class Clock:
    """Anchors the run's monotonic nanoseconds to wall-clock time:
    wall_ns = wall_anchor_ns + (t - monotonic_anchor_ns)."""

    monotonic_anchor_ns: int = 0
    wall_anchor_ns: int = 0


@dataclass
class KvBudget:
    tokens: int | None = None
    source: str | None = None  # how it was found, e.g. "vllm:cache_config_info"


@dataclass
class PublishedFigure:
    """One figure as another tool published it, e.g. name ``ttft_ms.p99`` (importer/peers/model.py)."""

    name: str
    value: float


@dataclass
class Definition:
    """How another tool defines one of its figures (``name`` a metric or total), in our words."""

    name: str
    text: str


# Fidelity tiers of an imported run: what its source kept of each request.
IMPORT_TIER_CHUNK = "chunk"  # every chunk's arrival stamp
IMPORT_TIER_GAP = "gap"  # start + TTFT + gaps: chunk stamps rebuilt
IMPORT_TIER_REQUEST = "request"  # first and last token times and counts only
IMPORT_TIER_AGGREGATE = "aggregate"  # summary figures only (as pages are imported)
IMPORT_TIERS = (IMPORT_TIER_CHUNK, IMPORT_TIER_GAP, IMPORT_TIER_REQUEST, IMPORT_TIER_AGGREGATE)


@dataclass
class Imported:
    """Set for imported runs: a published page (aggregates only) or another tool's output.

    The fields from ``tool`` on are set only for another benchmark tool's
    output (issue 36): which tool, at which fidelity tier, on which clock,
    what its format loses, and its own figures with their definitions. A
    run without them reads (and writes) as before.
    """

    source_file: str | None = None
    source_sha256: str | None = None
    format: str | None = None
    byline_label: str | None = None  # the page's "by @user <label>" label, shown as published
    tool: str | None = None  # e.g. "aiperf", "vllm-bench-serve", "guidellm"
    tool_version: str | None = None
    tier: str | None = None  # one of IMPORT_TIERS
    clock: str | None = None  # what the tool stamped with, e.g. "time.perf_counter_ns"
    lost: list[str] | None = None  # what the format does not keep, e.g. "tokens per chunk"
    published: list[PublishedFigure] | None = None  # the tool's own figures, as it published them
    definitions: list[Definition] | None = None


PEER_IMPORT_FIELDS = ("tool", "tool_version", "tier", "clock", "lost", "published", "definitions")


@dataclass
class RunInfo:
    schema_version: int
    run_id: str
    source: str = SOURCE_MEASURED
    measured_at: str | None = None  # ISO 8601, UTC
    submitter: str | None = None
    hardware: Hardware = field(default_factory=Hardware)
    engine: Engine = field(default_factory=Engine)
    model: Model = field(default_factory=Model)
    parameters: Parameters = field(default_factory=Parameters)
    clock: Clock = field(default_factory=Clock)
    kv_budget: KvBudget = field(default_factory=KvBudget)
    launch_command: str | None = None  # secrets already redacted
    notes: str = ""  # Markdown
    imported: Imported | None = None

    def to_dict(self) -> dict[str, Any]:
        """The run as run.yaml holds it. `model.family` appears only when set, so a run
        without one reads as it did before the field existed (older readers refuse it)."""
        data = dataclasses.asdict(self)
        if data["model"].get("family") is None:
            del data["model"]["family"]
        if data["parameters"].get("repeats") in (None, 1):
            del data["parameters"]["repeats"]
        # a seed of 0 is a seed: only absent or empty go
        for name in TRAFFIC_PARAMETERS + PROMPT_PARAMETERS + PROVENANCE_PARAMETERS:
            if data["parameters"].get(name) in (None, []):
                del data["parameters"][name]
        for name in LENGTH_PARAMETERS:  # a temperature of 0 is a setting: only absent or false go
            if data["parameters"].get(name) is None or data["parameters"].get(name) is False:
                del data["parameters"][name]
        if data.get("imported"):
            for name in PEER_IMPORT_FIELDS:  # a page's import reads as before the fields existed
                if data["imported"].get(name) is None:
                    del data["imported"][name]
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = RUN_YAML) -> RunInfo:
        if not isinstance(data, dict):
            raise ContractError(f"{where}: expected a mapping at the top level")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ContractError(
                f"{where}: field schema_version: unknown schema version {_show(version)} "
                f"(this tool reads version {SCHEMA_VERSION})"
            )
        run = _build(cls, data, where, "")
        if run.source not in (SOURCE_MEASURED, SOURCE_IMPORTED):
            raise ContractError(
                f"{where}: field source: expected 'measured' or 'imported', got {_show(run.source)}"
            )
        if run.imported is not None and run.imported.tier not in (None, *IMPORT_TIERS):
            raise ContractError(
                f"{where}: field imported.tier: expected one of {', '.join(IMPORT_TIERS)}, "
                f"got {_show(run.imported.tier)}"
            )
        if not run.run_id:
            raise ContractError(f"{where}: field run_id: must not be empty")
        image = run.parameters.collector_image
        if image is not None and not IMAGE_DIGEST.fullmatch(image):
            raise ContractError(
                f"{where}: field parameters.collector_image: expected IMAGE@sha256:<64 hex> or "
                f"sha256:<64 hex>, got {_show(image)}"
            )
        revision = run.parameters.collector_revision
        if revision is not None and not SOURCE_REVISION.fullmatch(revision):
            raise ContractError(
                f"{where}: field parameters.collector_revision: expected a full git commit id "
                f"(40 or 64 lowercase hex), optionally followed by -dirty, got {_show(revision)}"
            )
        if run.measured_at is not None and not _is_iso_datetime(run.measured_at):
            raise ContractError(
                f"{where}: field measured_at: expected an ISO 8601 date-time with a time zone "
                f"(e.g. 2025-11-29T07:06:40Z), got {_show(run.measured_at)}"
            )
        return run


def _is_iso_datetime(text: str) -> bool:
    """True for what datetime.fromisoformat reads with a time zone (hence with a time):
    a bare date or a local time would be published as if it were UTC."""
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Lower bounds of numeric run.yaml fields (list items share their list's bound):
# (minimum, inclusive). A negative GPU count or a zero-length window is never data.
_MINIMUM: dict[str, tuple[float, bool]] = {
    "hardware.gpu_count": (0, True),
    "hardware.vram_gb_per_gpu": (0, True),
    "model.max_model_len": (1, True),
    "parameters.contexts": (1, True),
    "parameters.concurrency": (1, True),
    "parameters.prefill_contexts": (1, True),
    "parameters.duration_s": (0, False),
    "parameters.max_output_tokens": (1, True),
    "parameters.prefill_repeats": (0, True),
    "parameters.repeats": (1, True),
    "parameters.prefix_reuse": (0, True),
    "parameters.turns": (1, True),
    "parameters.traffic_concurrency": (1, True),
    "parameters.rate": (0, False),
    "parameters.arrival_seed": (0, True),
    "parameters.rate_cap": (1, True),
    "parameters.rate_output_tokens": (1, True),
    "parameters.rate_reuse": (0, True),
    "parameters.prompt_seed": (0, True),
    "parameters.length_seed": (0, True),
    "parameters.temperature": (0, True),
    "parameters.top_p": (0, False),
    "kv_budget.tokens": (0, True),
}
_INDEX = re.compile(r"\[\d+\]")


_TOKENISH = re.compile(r"(?=[A-Za-z0-9_\-+/=.]*\d)(?=[A-Za-z0-9_\-+/=.]*[A-Za-z])"
                       r"[A-Za-z0-9_\-+/=.]{16,}|\b(?:sk|hf|ghp|gho|xox[bp])[-_][A-Za-z0-9]")


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def show_value(value: Any) -> str:
    """A value as a one-line error message may show it. Short scalars as they
    are (`'eight'`, `nan`); containers, long text and anything shaped like a
    key or token (16+ characters of letters and digits, or sk-/hf_ prefixes) only
    by kind and size, so a
    secret typed into the wrong field never reaches the terminal."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 200:
            return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
        return repr(value)
    if isinstance(value, str):
        if len(value) > 40 or _TOKENISH.search(value) or not value.isprintable():
            return f"a string of {len(value)} characters"
        return repr(value)
    if isinstance(value, dict):
        return f"a mapping of {_count(len(value), 'entry', 'entries')}"
    if isinstance(value, (list, tuple)):
        return f"a list of {_count(len(value), 'item', 'items')}"
    return f"a {type(value).__name__}"


_show = show_value


def _check_number(value: int | float, where: str, path: str) -> None:
    bound = _MINIMUM.get(_INDEX.sub("", path))
    if bound is None:
        return
    low, inclusive = bound
    if value < low or (value == low and not inclusive):
        op = ">=" if inclusive else ">"
        raise ContractError(f"{where}: field {path}: expected a number {op} {low:g}, "
                            f"got {_show(value)}")


def check_section(cls: Any, value: Any, where: str, path: str) -> Any:
    """Validate one section (a run card's `hardware:`) exactly as run.yaml's reader
    would, so a card cannot carry what the run directory would refuse."""
    return _convert(cls, value, where, path)


def _field_name(key: Any) -> str:
    """A key as a message shows it: plain when printable, else its short repr."""
    plain = isinstance(key, str) and key.isprintable() and 0 < len(key) <= 40
    return key if plain and not _TOKENISH.search(key) else _show(key)


def _type_name(tp: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true/false"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _convert(tp: Any, value: Any, where: str, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, where, path)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ContractError(f"{where}: field {path}: expected a list, got {_show(value)}")
        return [_convert(item, v, where, f"{path}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ContractError(f"{where}: field {path}: expected a mapping, got {_show(value)}")
        return _build(tp, value, where, path + ".")
    ok = (
        (tp is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (tp is int and isinstance(value, int) and not isinstance(value, bool))
        or (tp is str and isinstance(value, str))
        or (tp is bool and isinstance(value, bool))
    )
    if not ok:
        raise ContractError(
            f"{where}: field {path}: expected {_type_name(tp)}, got {_show(value)}"
        )
    if tp is float:
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ContractError(
                f"{where}: field {path}: expected a finite number, got {_show(value)}"
            )
        _check_number(number, where, path)
        return number
    if tp is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise ContractError(
                f"{where}: field {path}: expected an integer that fits in 64 bits, "
                f"got {_show(value)}"
            )
        _check_number(value, where, path)
        return int(value)
    return value


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    """A dataclass's resolved field types, once per class (resolving them is most of
    the cost of reading a run.yaml whose YAML is already parsed)."""
    return typing.get_type_hints(cls)


def _build(cls: Any, data: dict, where: str, prefix: str) -> Any:
    hints = _hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known, key=str)  # keys may be numbers: `1: x`
    if unknown:
        raise ContractError(f"{where}: field {prefix}{_field_name(unknown[0])}: unknown field")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                raise ContractError(f"{where}: field {prefix}{f.name}: missing")
            continue
        kwargs[f.name] = _convert(hints[f.name], data[f.name], where, prefix + f.name)
    return cls(**kwargs)


# --------------------------------------------------------------------------
# Parquet tables
# --------------------------------------------------------------------------

_NS = pa.int64()

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("phase", pa.string(), nullable=False),
        pa.field("context", pa.int64(), nullable=False),
        pa.field("concurrency", pa.int64(), nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("purpose", pa.string(), nullable=False),
        pa.field("stream_index", pa.int64(), nullable=False),  # which of the C slots
        pa.field("send_ns", _NS, nullable=False),
        pa.field("end_ns", _NS),  # stream closed (finished, failed or cancelled)
        pa.field("prompt_tokens", pa.int64()),
        pa.field("cached_tokens", pa.int64()),
        pa.field("finish_reason", pa.string()),
        pa.field("error", pa.string()),
        pa.field("cancelled", pa.bool_(), nullable=False),  # closed by the window's end
        pa.field("chunk_ns", pa.list_(_NS), nullable=False),
        pa.field("chunk_tokens", pa.list_(pa.int64()), nullable=False),  # cumulative
        pa.field("content_tail", pa.string()),  # last characters, evidence for Looped
        pa.field("reasoning_tail", pa.string()),
        # Optional (traffic cells, see OPTIONAL_COLUMNS): the cell's key columns beyond
        # the matrix's, the request's prefix group, its conversation and that
        # conversation's turn it sent, and the engine's own count of its cached prompt
        # tokens where it gives one apart from usage (llama.cpp's timings.cache_n).
        pa.field("prefix_reuse_target", pa.int64()),
        pa.field("turn", pa.int64()),
        pa.field("prefix_group", pa.int64()),
        pa.field("conversation_id", pa.int64()),
        pa.field("conversation_turn", pa.int64()),
        pa.field("engine_cached_tokens", pa.int64()),
        # Optional, rate cells: the key's offered rate, and when the schedule put the
        # request (the run's monotonic clock; send_ns - scheduled_ns is its send lag).
        pa.field("rate_target", pa.float64()),
        pa.field("scheduled_ns", _NS),
        # --- speculative decoding (issue 35; rundir/speculative.py) ---
        # Optional: the engine's own per-request draft figures where it gives them
        # (llama.cpp's timings.draft_n, draft_n_accepted).
        pa.field("engine_draft_tokens", pa.int64()),
        pa.field("engine_draft_accepted", pa.int64()),
        # --- end speculative decoding ---
        # Optional, prompt sources (issue 35): which prompt of a non-filler source the
        # request's text starts at (its index in the file, or in the built-in source).
        pa.field("prompt_index", pa.int64()),
        # --- length mixes (issue 35; rundir/lengths.py) ---
        # Optional: the max_tokens the request asked when the run draws output lengths
        # (--output-lengths other than fixed); absent: every request asked the cell's.
        pa.field("output_target", pa.int64()),
        # Optional: the prompt length (tokens) a rate request was built to when the run has
        # an input mix (--input-lengths); absent: every prompt at the cell's context.
        pa.field("input_target", pa.int64()),
        # --- end length mixes ---
    ]
)

CELLS_SCHEMA = pa.schema(
    [
        pa.field("phase", pa.string(), nullable=False),
        pa.field("context", pa.int64(), nullable=False),
        pa.field("concurrency", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("window_start_ns", _NS),
        pa.field("window_end_ns", _NS),
        pa.field("warmup_s", pa.float64()),
        pa.field("token_counting", pa.string()),
        pa.field("client_bound", pa.bool_()),
        # Published aggregates: only imported runs (no raw data) fill these.
        pa.field("pub_total_tok_s", pa.float64()),
        pa.field("pub_per_request_tok_s", pa.float64()),
        pa.field("pub_ttft_ms", pa.float64()),
        pa.field("pub_tbt_ms", pa.float64()),
        pa.field("pub_avg_active", pa.float64()),
        pa.field("pub_completed", pa.int64()),
        pa.field("pub_output_tokens", pa.int64()),
        pa.field("pub_measured_s", pa.float64()),
        # Optional (added within v1, see OPTIONAL_COLUMNS): the processes the cell's streams
        # were spread over and the hosts they ran on (`bench run --workers N`, `--shard i/N`);
        # per cell, since a resumed run may measure its new cells otherwise. Empty: unknown.
        pa.field("processes", pa.int64()),
        pa.field("hosts", pa.int64()),
        # Optional, traffic cells only: the key columns beyond the matrix's (percent of
        # each prompt shared; the conversation turn), the engine's own prompt and cached
        # tokens over the cell's measured requests (from `server_source`: its counters or
        # its per-request timings), and the cache block the reuse tolerance used.
        pa.field("prefix_reuse_target", pa.int64()),
        pa.field("turn", pa.int64()),
        pa.field("server_prompt_tokens", pa.int64()),
        pa.field("server_cached_tokens", pa.int64()),
        pa.field("server_source", pa.string()),
        pa.field("reuse_block", pa.int64()),
        # Optional, rate cells: the offered rate (requests/s, a key part), the arrival
        # process ("poisson", "constant", "gamma:K"), the seed its schedule was drawn
        # with, and the fixed output tokens of every request.
        pa.field("rate_target", pa.float64()),
        pa.field("arrivals", pa.string()),
        pa.field("arrival_seed", pa.int64()),
        pa.field("rate_output_tokens", pa.int64()),
        # --- speculative decoding (issue 35; rundir/speculative.py) ---
        # Optional, decode cells of an engine that counts its drafts: its own tokens per
        # verification step over the cell's measured requests, which counters or timings
        # (`spec_source`), and the draft length k its counters gave (draft tokens ÷ drafts:
        # a chunk with more than k + 1 tokens holds several steps).
        pa.field("spec_tokens_per_step_server", pa.float64()),
        pa.field("spec_source", pa.string()),
        pa.field("spec_draft_length", pa.float64()),
        # --- end speculative decoding ---
        # Optional, prompt sources (issue 35): the cell's prompt source ("natural",
        # "adversarial", "file:NAME") and seed; empty: filler.
        pa.field("prompt_source", pa.string()),
        pa.field("prompt_seed", pa.int64()),
    ]
)

SERVER_METRICS_SCHEMA = pa.schema(
    [
        pa.field("t_ns", _NS, nullable=False),
        pa.field("name", pa.string(), nullable=False),  # canonical, e.g. "running"
        pa.field("source", pa.string(), nullable=False),  # the server's metric name
        pa.field("labels", pa.string(), nullable=False),  # Prometheus label set, as text
        pa.field("value", pa.float64(), nullable=False),
    ]
)

# One row per GPU per sample of the collector's telemetry; every column but
# t_ns and gpu may be empty (a counter the driver does not offer is empty, never guessed).
GPU_METRICS_SCHEMA = pa.schema(
    [pa.field("t_ns", _NS, nullable=False),  # the run's monotonic clock, as chunk_ns
     pa.field("gpu", pa.int32(), nullable=False),  # index
     pa.field("gpu_name", pa.string()), pa.field("power_w", pa.float64()),
     pa.field("energy_mj", pa.int64()),  # driver's total energy counter, millijoules
     pa.field("sm_clock_mhz", pa.int32()), pa.field("mem_clock_mhz", pa.int32()),
     pa.field("temp_c", pa.float64()), pa.field("util_gpu_pct", pa.float64()),
     pa.field("util_mem_pct", pa.float64()), pa.field("mem_used_mb", pa.float64()),
     pa.field("throttle_reasons", pa.int64()),  # NVML clocks-event reasons bitmask
     pa.field("host_cpu_pct", pa.float64())]  # client host CPU, same on a sample's rows
)

# One row per window of a decode cell measured with --repeats k > 1: back-to-back
# windows [start_ns, end_ns] inside the cell's window_start_ns..window_end_ns span.
WINDOWS_SCHEMA = pa.schema(
    [pa.field("phase", pa.string(), nullable=False),
     pa.field("context", pa.int64(), nullable=False),
     pa.field("concurrency", pa.int64(), nullable=False),
     pa.field("window", pa.int64(), nullable=False),  # the window id, 0..k-1 in time order
     pa.field("start_ns", _NS, nullable=False), pa.field("end_ns", _NS, nullable=False)]
)

# One row per (decode cell, remote shard) of a many-host run: the offset (shard clock −
# shard 0's) its times were converted to shard 0's clock with, true within ± uncertainty_ns
# anywhere in the cell; rtt_ns: the round trip it was measured over; drift_ns: the move
# measured after the cell (empty: the shard died).
CLOCK_OFFSETS_SCHEMA = pa.schema(
    [pa.field("phase", pa.string(), nullable=False),
     pa.field("context", pa.int64(), nullable=False),
     pa.field("concurrency", pa.int64(), nullable=False),
     pa.field("shard", pa.int64(), nullable=False),
     pa.field("host", pa.string()),
     pa.field("offset_ns", _NS, nullable=False),
     pa.field("uncertainty_ns", _NS, nullable=False),
     pa.field("rtt_ns", _NS, nullable=False),
     pa.field("drift_ns", _NS)]
)

TABLE_SCHEMAS = {
    REQUESTS_FILE: REQUESTS_SCHEMA,
    CELLS_FILE: CELLS_SCHEMA,
    SERVER_METRICS_FILE: SERVER_METRICS_SCHEMA,
    GPU_METRICS_FILE: GPU_METRICS_SCHEMA,
    SUPERSEDED_REQUESTS_FILE: REQUESTS_SCHEMA,  # earlier attempts of re-measured cells
    WINDOWS_FILE: WINDOWS_SCHEMA,
    CLOCK_OFFSETS_FILE: CLOCK_OFFSETS_SCHEMA,
}
_REQUEST_TABLES = (REQUESTS_FILE, SUPERSEDED_REQUESTS_FILE)

# Columns added within schema v1: a table without one reads as if it were there and
# empty (a run directory written before it did not record it), and a writer leaves one
# out while every value is empty, so such a run directory stays byte for byte as it was.
_TRAFFIC_REQUEST_COLUMNS = ("prefix_reuse_target", "turn", "prefix_group", "conversation_id",
                            "conversation_turn", "engine_cached_tokens", "rate_target",
                            "scheduled_ns",
                            # speculative decoding (issue 35)
                            "engine_draft_tokens", "engine_draft_accepted",
                            # prompt sources (issue 35)
                            "prompt_index",
                            # length mixes (issue 35)
                            "output_target", "input_target")
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    CELLS_FILE: ("processes", "hosts", "prefix_reuse_target", "turn", "server_prompt_tokens",
                 "server_cached_tokens", "server_source", "reuse_block", "rate_target", "arrivals",
                 "arrival_seed", "rate_output_tokens",
                 # speculative decoding (issue 35)
                 "spec_tokens_per_step_server", "spec_source", "spec_draft_length",
                 # prompt sources (issue 35)
                 "prompt_source", "prompt_seed"),
    REQUESTS_FILE: _TRAFFIC_REQUEST_COLUMNS,
    SUPERSEDED_REQUESTS_FILE: _TRAFFIC_REQUEST_COLUMNS,
}


def check_table(name: str, table: pa.Table, where: str | None = None) -> pa.Table:
    """Validate a table against its contract schema; return it cast to it.

    Extra columns are allowed (a newer writer may add some); missing columns
    (but OPTIONAL_COLUMNS, read as empty) and columns of the wrong type are not.
    """
    where = where or name
    schema = TABLE_SCHEMAS[name]
    optional = OPTIONAL_COLUMNS.get(name, ())
    for fld in schema:
        if fld.name not in table.column_names:
            if fld.name in optional:
                table = table.append_column(fld, pa.nulls(len(table), fld.type))
                continue
            raise ContractError(f"{where}: column {fld.name}: missing")
        actual = table.schema.field(fld.name).type
        if not _compatible(actual, fld.type):
            raise ContractError(
                f"{where}: column {fld.name}: expected {fld.type}, got {actual}"
            )
        if not fld.nullable and table.column(fld.name).null_count:
            raise ContractError(f"{where}: column {fld.name}: has empty values")
    table = table.select(schema.names).cast(schema)
    if name in (*_REQUEST_TABLES, CELLS_FILE, WINDOWS_FILE):
        _check_values(name, table, where)
    elif name == GPU_METRICS_FILE and (problem := checks.gpu_metrics(table)):
        raise ContractError(f"{where}: {problem}")
    elif name == CLOCK_OFFSETS_FILE and (problem := checks.clock_offsets(table)):
        raise ContractError(f"{where}: {problem}")
    return table


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    if actual == expected or pa.types.is_null(actual):
        return True
    if pa.types.is_large_string(actual) and pa.types.is_string(expected):
        return True
    if pa.types.is_integer(actual) and pa.types.is_integer(expected):
        return True
    if pa.types.is_integer(actual) and pa.types.is_floating(expected):
        return True
    if pa.types.is_floating(actual) and pa.types.is_floating(expected):
        return True
    if (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and pa.types.is_list(expected):
        return _compatible(actual.value_type, expected.value_type)
    return False


def _check_values(name: str, table: pa.Table, where: str) -> None:
    """Value rules beyond the schema: known enums, sane keys, and for raw
    requests chunk lists that a metric can trust (see docs/data-format.md)."""
    problem = (checks.known(table, "phase", PHASES) or checks.cell_keys(table, RATE)
               or checks.traffic_keys(table, TRAFFIC_PHASES, PREFIX, CONVERSATION, RATE))
    if name == CELLS_FILE:
        figures = [f.name for f in CELLS_SCHEMA
                   if f.name in ("warmup_s", "server_prompt_tokens", "server_cached_tokens",
                                 "reuse_block", "rate_output_tokens", "spec_tokens_per_step_server",
                                 "spec_draft_length") or f.name.startswith("pub_")]
        problem = (problem or checks.known(table, "status", STATUSES)
                   or checks.cells(table, figures) or checks.spread(table)
                   or checks.only_on(table, "status", (REUSE_OFF_TARGET, REUSE_UNVERIFIED),
                                     TRAFFIC_PHASES)
                   or checks.only_on(table, "status", (LOAD_NOT_DELIVERED,), (RATE,)))
    if name in _REQUEST_TABLES:
        problem = (problem or checks.known(table, "purpose", PURPOSES)
                   or checks.requests(table))
    if problem:
        raise ContractError(f"{where}: {problem}")


def cell_key(row: dict) -> tuple:
    """A cell's key from a row of cells.parquet or requests.parquet (as a dict):
    (phase, context, concurrency, *TRAFFIC_KEY's parts), those parts empty on
    prefill and decode cells."""
    return tuple(row.get(k) for k in checks.CELL_KEY)


def matrix_key(phase: str, context: int, concurrency: int) -> tuple:
    """A prefill or decode cell's key (its traffic parts empty)."""
    return (phase, context, concurrency, *(None,) * len(checks.TRAFFIC_KEY))


def key_fields(key: tuple) -> dict[str, Any]:
    """A cell key as the columns it fills."""
    return dict(zip(checks.CELL_KEY, key, strict=True))


def empty_table(name: str) -> pa.Table:
    return TABLE_SCHEMAS[name].empty_table()


def written_form(name: str, table: pa.Table) -> pa.Table:
    """A checked table as it is written: its OPTIONAL_COLUMNS left out while empty."""
    empty = [n for n in OPTIONAL_COLUMNS.get(name, ())
             if table.column(n).null_count == len(table)]
    return table.drop_columns(empty) if empty else table
