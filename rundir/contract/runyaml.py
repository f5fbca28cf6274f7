"""run.yaml: its sections as dataclasses, and the reader that validates them.

Separate from the tables because run.yaml is YAML read field by field (types, bounds,
unknown keys, secret-safe messages), while the tables are checked column by column.
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

from rundir.contract.names import (
    IMAGE_DIGEST,
    IMPORT_TIERS,
    LENGTH_PARAMETERS,
    PEER_IMPORT_FIELDS,
    PROMPT_PARAMETERS,
    PROVENANCE_PARAMETERS,
    RUN_YAML,
    SCHEMA_VERSION,
    SOURCE_IMPORTED,
    SOURCE_MEASURED,
    SOURCE_REVISION,
    TRAFFIC_PARAMETERS,
    ContractError,
)


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

