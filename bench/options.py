"""`bench run`'s options, declared once: flag, field, default, help and check.

Why: the command's options were once written three times (the click
decorators, the command body that copied each value into `RunOptions`, and
`RunOptions`' own defaults), and a flag added to one and forgotten in another
was silently dropped. Here each option is one `RunOption`; the click options
(`run_options`) and the `RunOptions` a run gets (`build_run_options`) are
both made from the same list, so adding a flag is adding one entry here and
the field it sets.

A default is the field's own (`RunOptions`, or `Settings` for a
`settings.<name>` field) unless the entry gives one, so the command line and
a program that builds `RunOptions` itself cannot disagree about it. The
checks are the click types of bench/params.py: a bad value fails at parse
time, naming the flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from bench.core.plan import MAX_CONCURRENCY
from bench.distributed.peer_auth import SECRET_ENV
from bench.measure.cells import Settings
from bench.params import (
    Address,
    ApiKey,
    Arrivals,
    BaseUrl,
    Contexts,
    InputLengthSpec,
    LengthSpec,
    Levels,
    Percents,
    Rates,
    Sampling,
    Seconds,
    ShardSpec,
    SourceAddress,
    Tokens,
    Turns,
    Workers,
)
from bench.run.runcard import read_run_card
from bench.run.runner import RunOptions
from bench.server.telemetry import MODES, RATE_HZ
from bench.workload.sources import BUILT_IN

SETTINGS = "settings."  # a field of RunOptions.settings (bench/measure/cells.py)


class _FieldDefault:
    def __repr__(self) -> str:
        return "FIELD_DEFAULT"


FIELD_DEFAULT: Any = _FieldDefault()  # the default of the field the option sets


@dataclass(frozen=True)
class RunOption:
    """One option of `bench run`.

    `field`: the `RunOptions` field it sets (`settings.<name>`: a `Settings`
    field); `to_field`: the parsed value as that field holds it (a path, a
    negated flag, a read file), applied to any value but None; `default`:
    FIELD_DEFAULT takes the field's own (a flag's is False)."""

    flag: str
    field: str
    help: str | None = None
    type: Any = None
    default: Any = FIELD_DEFAULT
    show_default: bool = False
    is_flag: bool = False
    required: bool = False
    multiple: bool = False
    to_field: Callable[[Any], Any] | None = None
    group: str = ""  # its section of --help (GROUPS); "": "Other options"

    @property
    def name(self) -> str:
        """The click parameter's name: `--max-output` -> `max_output`."""
        return self.flag.lstrip("-").replace("-", "_")

    def click_default(self, cls: type = RunOptions) -> Any:
        """What click fills in when the flag is not given (MISSING: nothing)."""
        if self.is_flag:
            return False
        if self.multiple:
            return ()
        if self.default is not FIELD_DEFAULT:
            return self.default
        return field_default(cls, self.field)

    def decorator(self, cls: type = RunOptions) -> Callable:
        kwargs: dict[str, Any] = {"help": self.help}
        if self.is_flag:
            kwargs["is_flag"] = True
        else:
            default = self.click_default(cls)
            if default is not dataclasses.MISSING and not self.multiple:
                kwargs["default"] = default
            for key in ("type", "required", "multiple", "show_default"):
                if getattr(self, key):
                    kwargs[key] = getattr(self, key)
        return click.option(self.flag, **kwargs)


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _owner(cls: type, name: str) -> tuple[type, str]:
    """(dataclass, field name) that `name` ('duration' or 'settings.duration_s') points into."""
    if name.startswith(SETTINGS):
        return Settings, name[len(SETTINGS):]
    return cls, name


def field_default(cls: type, name: str) -> Any:
    """A field's default value (MISSING for a required field); KeyError: no such field."""
    owner, short = _owner(cls, name)
    f = _fields(owner)[short]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def check_options(options: Iterable[RunOption], cls: type = RunOptions) -> None:
    """Every option sets a field that exists, and no two set the same field or flag.

    Called at import for RUN_OPTIONS: a typo'd field fails loudly, never a flag
    whose value is thrown away."""
    seen_fields: set[str] = set()
    seen_flags: set[str] = set()
    for opt in options:
        if opt.group and opt.group not in GROUPS:
            raise ValueError(f"{opt.flag}: group {opt.group!r} is not one of {', '.join(GROUPS)}")
        owner, short = _owner(cls, opt.field)
        if short not in _fields(owner):
            raise ValueError(f"{opt.flag}: sets {opt.field}, which {owner.__name__} has not")
        if opt.field in seen_fields or opt.flag in seen_flags:
            raise ValueError(f"{opt.flag}: a second option for {opt.field}")
        seen_fields.add(opt.field)
        seen_flags.add(opt.flag)


def run_options(options: Iterable[RunOption] | None = None, cls: type = RunOptions) -> Callable:
    """A decorator adding every option, in the listed order, to a click command."""
    listed = list(RUN_OPTIONS if options is None else options)

    def add(f: Callable) -> Callable:
        for opt in reversed(listed):  # click lists the last decorator applied first
            f = opt.decorator(cls)(f)
        return f

    return add


class GroupedCommand(click.Command):
    """A click command whose --help lists its options in sections, one per group
    (`groups`: section title -> parameter names, in order); the rest, --help among
    them, under "Other options". Why: 29 options in one flat list hid the five a
    first run needs among the ones a scale-out needs."""

    def __init__(self, *args: Any, groups: dict[str, list[str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.groups = groups or {}

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {p.name: rec for p in self.get_params(ctx)
                   if (rec := p.get_help_record(ctx)) is not None}
        placed: set[str | None] = set()
        for title, names in self.groups.items():
            rows = [records[n] for n in names if n in records]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [rec for name, rec in records.items() if name not in placed]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


def option_groups(options: Iterable[RunOption] | None = None) -> dict[str, list[str]]:
    """GroupedCommand's `groups`: each group's parameter names, in GROUPS' order."""
    listed = list(RUN_OPTIONS if options is None else options)
    return {g: [o.name for o in listed if o.group == g] for g in GROUPS}


def build_run_options(values: dict[str, Any], given: dict[str, object],
                      options: Iterable[RunOption] | None = None,
                      cls: type = RunOptions, **fixed: Any) -> Any:
    """`cls` (RunOptions) from click's parsed `values` (parameter name -> value),
    through each option's field; `given`: the options set on the command line;
    `fixed`: fields the command decides itself (the API key's default from the
    environment). A None value leaves the field at its default. Raises what an
    option's to_field raises (a bad run card: ContractError)."""
    top: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for opt in RUN_OPTIONS if options is None else options:
        value = values[opt.name]
        if value is None:
            continue
        if opt.to_field is not None:
            value = opt.to_field(value)
        owner, short = _owner(cls, opt.field)
        (settings if owner is Settings else top)[short] = value
    top.update(fixed)
    return cls(**top, settings=Settings(**settings), given=given)


def _path(value: str) -> Path:
    return Path(value)


def _not(value: bool) -> bool:
    return not value


def _run_card(value: str) -> Any:
    return read_run_card(Path(value))


# --help's sections, in order (GroupedCommand).
SERVER, MATRIX, TIMING, OUTPUT, SCALE, TELEMETRY = GROUPS = (
    "Server and key", "Matrix", "Timing", "Output and resume", "Scale-out", "Telemetry")

# The default run directory, as `bench run` names it (bench/run/runner.py _new_run_info).
DEFAULT_OUT = "runs/YYYYMMDD-HHMMSS-MODEL-ENGINE (UTC, in the current folder)"

# The options, in the order `bench run --help` lists them (group by group).
RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("--base-url", "base_url", "Server URL, e.g. http://127.0.0.1:8000",
              type=BaseUrl(), required=True, group=SERVER),
    RunOption("--api-key", "api_key", "API key (default: $OPENAI_API_KEY).", type=ApiKey(),
              group=SERVER),
    RunOption("--model", "model", "Served model name (default: the first listed).", group=SERVER),
    RunOption("--server-wait", "server_wait_s",
              "How long to wait for a server that is still starting (nothing listening, "
              "HTTP 502/503/504) before the first request, and for it to answer again "
              "after a failed cell (s).", type=Seconds(zero_ok=True), show_default=True,
              group=SERVER),
    RunOption("--contexts", "contexts", "e.g. 8k,16k,32k,max (default: 8K…128K and max).",
              type=Contexts(), group=MATRIX),
    RunOption("--concurrency", "concurrency", "e.g. 1,2,4 (default: 1,2,…,128; at most 16,384).",
              type=Levels(), group=MATRIX),
    RunOption("--prefill-contexts", "prefill_contexts",
              "Prefill contexts (default: the decode ones).", type=Contexts(), group=MATRIX),
    RunOption("--no-prefill", "prefill", "Skip the prefill phase.", is_flag=True, to_field=_not,
              group=MATRIX),
    RunOption("--max-output", "settings.max_output", "Max output tokens.", type=Tokens(),
              show_default=True, group=MATRIX),
    RunOption("--kv-budget", "kv_budget", "KV-cache budget in tokens (overrides detection).",
              type=Tokens(), group=MATRIX),
    RunOption("--prefix-reuse", "prefix_reuse",
              "Prefix-reuse cells at these percents of each prompt shared with other "
              "requests, e.g. 0,50,90,99, at the prefill contexts (default: none). The reuse the "
              "server delivered is measured twice and checked against the target.",
              type=Percents(), group=MATRIX),
    RunOption("--turns", "turns",
              "Conversation cells at these turns, e.g. 1,4,16,32: each stream resends its "
              "whole history each turn, at the decode contexts (default: none).",
              type=Turns(), group=MATRIX),
    RunOption("--traffic-concurrency", "traffic_concurrency",
              "Streams of the prefix-reuse and conversation cells, e.g. 1,4 (default: 1).",
              type=Levels(), group=MATRIX),
    RunOption("--rate", "rate",
              "Rate cells at these offered rates, requests/s, e.g. 0.5,1,2,4,8: requests sent "
              "on a seeded schedule (open loop) for --duration, at the decode contexts, after "
              "every other cell (default: none).", type=Rates(), group=MATRIX),
    RunOption("--arrivals", "arrivals",
              "The rate cells' arrival process: poisson, constant, or gamma:K (K > 0; gaps' "
              "CV 1/sqrt(K)).", type=Arrivals(), show_default=True, group=MATRIX),
    RunOption("--arrival-seed", "arrival_seed",
              "Seed of the rate cells' schedules (default: derived from the run id); "
              "recorded, so a run can be replayed.", type=click.IntRange(0, 2**63 - 1),
              group=MATRIX),
    RunOption("--rate-cap", "rate_cap",
              "Most rate-cell requests in flight at once; one due while it is full waits "
              "in the client (send lag) (default: no cap).",
              type=click.IntRange(1, MAX_CONCURRENCY), group=MATRIX),
    RunOption("--rate-output", "rate_output",
              "Output tokens of every rate-cell request (max_tokens, with the engine's "
              "ignore_eos) (default: min(--max-output, 256)).", type=Tokens(), group=MATRIX),
    RunOption("--rate-reuse", "rate_reuse",
              "Rate cells at these percents of each prompt shared with other requests, e.g. "
              "90 or 0,90: a rate cell per (reuse, rate), its groups' prefixes primed first; "
              "the reuse delivered is checked as a prefix cell's (default: unique prompts).",
              type=Percents(), group=MATRIX),
    RunOption("--prompt-source", "prompt_source",
              "Where prompt text comes from: filler (a fixed word list), natural (plain "
              "English prose the project generates: drafts guess it well) or adversarial "
              "(random strings: drafts guess it badly). Every prompt keeps its exact "
              "context. Not with --prompts.", type=click.Choice(BUILT_IN), show_default=True,
              group=MATRIX),
    RunOption("--prompts", "prompts_file",
              "A prompt file: ShareGPT-style JSON or JSONL of {\"prompt\": ...} or chat "
              "{\"messages\": [...]} (docs/methodology.md, Prompt sources); each prompt is "
              "cut or padded with more of the file to the cell's exact context. Checked "
              "whole before any cell runs.", type=click.Path(dir_okay=False), to_field=_path,
              group=MATRIX),
    RunOption("--prompt-seed", "prompt_seed",
              "Seed that picks each prompt of a natural, adversarial or file source "
              "(default: derived from the run id); recorded.", type=click.IntRange(0, 2**63 - 1),
              group=MATRIX),
    RunOption("--output-lengths", "settings.output_lengths",
              "How many tokens each decode and rate request asks (max_tokens): fixed (every "
              "request the cell's, as the matrix has it), uniform:A-B or normal:MEAN,SD,MIN,MAX "
              "(bounded), drawn per request from --length-seed and kept per request, or file "
              "(with --prompts: its item's reply length, at most --max-output) "
              "(docs/methodology.md, Length mixes). Prefill cells ask 1 token.",
              type=LengthSpec(), show_default=True, group=MATRIX),
    RunOption("--input-lengths", "settings.input_lengths",
              "Prompt length of each rate request (rate cells only: decode and prefill cells keep "
              "their exact contexts): fixed (the cell's context), uniform:A-B or "
              "normal:MEAN,SD,MIN,MAX as fractions of the cell's context (its upper bound), drawn "
              "per request from --length-seed, or file (with --prompts: each prompt its item's own "
              "length, capped at the context); kept per request in input_target "
              "(docs/methodology.md, Length mixes).",
              type=InputLengthSpec(), show_default=True, group=MATRIX),
    RunOption("--length-seed", "settings.length_seed",
              "Seed of the drawn output and input lengths (default: derived from the run id); recorded.",
              type=click.IntRange(0, 2**63 - 1), default=None, group=MATRIX),
    RunOption("--honor-eos", "settings.honor_eos",
              "Do not ask the engine to ignore end-of-sequence: a request may end before its "
              "max_tokens. Per-request tok/s then mixes lengths: compare only runs with the "
              "same setting (docs/methodology.md, Length mixes).", is_flag=True, group=MATRIX),
    RunOption("--temperature", "settings.temperature",
              "Sampling temperature sent in every request, 0..2 (default: none sent: the "
              "server's default). Speculative decoding accepts more drafts at 0 (greedy).",
              type=Sampling(0.0, 2.0), default=None, group=MATRIX),
    RunOption("--top-p", "settings.top_p",
              "Nucleus sampling top_p sent in every request, (0, 1] (default: the server's).",
              type=Sampling(0.0, 1.0, open_low=True), default=None, group=MATRIX),
    RunOption("--dry-run", "dry_run",
              "Print the plan and exit, writing nothing. A server that does not answer "
              "within 2 s is not waited for: the plan is printed from the flags alone and "
              "says what it could not know (max context, KV budget, slots).", is_flag=True,
              group=MATRIX),
    RunOption("--duration", "settings.duration_s", "Window (s).", type=Seconds(),
              show_default=True, group=TIMING),
    RunOption("--repeats", "settings.repeats",
              "Windows per decode cell, back to back on the same streams; with 2 or "
              "more the pages show each figure's median over them with a 95% interval.",
              type=click.IntRange(1, 100), show_default=True, group=TIMING),
    RunOption("--prefill-repeats", "settings.prefill_repeats",
              "Cold requests per prefill cell, each with a unique prefix (one the server "
              "answered from its prefix cache is sent again, up to 3× as many tries).",
              type=click.IntRange(1, 1000), show_default=True, group=TIMING),
    RunOption("--warmup-timeout", "settings.warmup_timeout_s",
              "Longest wait for every stream of a decode cell to produce tokens before its "
              "window opens (s); past it the window opens anyway and the cell notes it.",
              type=Seconds(), show_default=True, group=TIMING),
    RunOption("--warmup-stable", "settings.stable_s",
              "Seconds every stream must be producing before the window opens.",
              type=Seconds(zero_ok=True), show_default=True, group=TIMING),
    RunOption("--stall-timeout", "settings.stall_timeout_s",
              "Fail a stream that sends no bytes for this long once tokens flow (s).",
              type=Seconds(), show_default=True, group=TIMING),
    RunOption("--ttft-timeout", "settings.ttft_timeout_s",
              "Fail a request with no first token after this long (s): queued "
              "long-context prefills legitimately take minutes.", type=Seconds(),
              show_default=True, group=TIMING),
    RunOption("--out", "out", f"Run directory to create [default: {DEFAULT_OUT}].",
              type=click.Path(file_okay=False), to_field=_path, group=OUTPUT),
    RunOption("--resume", "resume",
              "Continue run directory R: its matrix and parameters come from R's run.yaml; "
              "--contexts/--concurrency/--prefill-contexts add cells; finished cells are kept.",
              type=click.Path(file_okay=False), to_field=_path, group=OUTPUT),
    RunOption("--retry-errors", "retry_errors",
              "With --resume: measure R's Error cells again (their earlier rows are kept "
              "in superseded_requests.parquet).", is_flag=True, group=OUTPUT),
    RunOption("--run-card", "run_card",
              "YAML with hardware/engine/model fields, launch_command, notes, submitter.",
              type=click.Path(dir_okay=False), default=None, to_field=_run_card, group=OUTPUT),
    RunOption("--launch-command", "launch_command", "The server's launch command, if not local.",
              group=OUTPUT),
    RunOption("--workers", "workers",
              "Processes a decode cell's streams are spread over, each with its own "
              "event loop and sockets (the plan says how many and why). auto: as many "
              "as the planned event rate needs (250 tok/s a stream, 35,000 events/s a "
              "process), at most cores - 1; 1: every cell in this process.",
              type=Workers(), show_default=True, group=SCALE),
    RunOption("--shard", "shard",
              "i/N: this host is shard i of N hosts driving one run (with --coordinator). "
              "Shard 0 coordinates: it plans, writes the run directory and spreads each "
              "decode cell's streams over the N hosts; shard i ≥ 1 measures for it "
              f"(deploy/kubernetes/README.md). Every host needs the same secret in "
              f"${SECRET_ENV} (16 characters or more): the hosts prove it to each "
              "other, and every message between them is authenticated with it.",
              type=ShardSpec(), group=SCALE),
    RunOption("--coordinator", "coordinator",
              "HOST:PORT where shard 0 listens for the other shards (shard 0 binds it).",
              type=Address(), group=SCALE),
    RunOption("--join-timeout", "join_timeout_s",
              "With --shard: how long shard 0 waits for every shard to join (before the "
              "first cell, and for a lost shard before the next) and a shard for shard 0.",
              type=Seconds(), show_default=True, group=SCALE),
    RunOption("--source-address", "source_addresses",
              "Local address the streams' connections come from, repeatable: each "
              "brings its own ephemeral ports (one address reaches one server address "
              "with about 28,000). Automatic on a 127.0.0.1 server: 127.0.0.x. With "
              "--shard, each host's own.", type=SourceAddress(), multiple=True, to_field=tuple,
              group=SCALE),
    RunOption("--gpu-telemetry", "gpu_telemetry",
              "auto: sample this host's GPUs (power, energy, clocks, throttling) "
              f"{RATE_HZ}× a second into gpu_metrics.parquet when NVML or amdsmi finds "
              "some and the server runs here; off: none.", type=click.Choice(MODES),
              show_default=True, group=TELEMETRY),
)

# Fields no flag sets: `given` is the command's own record of what was typed (and
# prompt_file what --prompts read);
# the drain timeout is the collector's, not the user's.
NOT_FLAGS = frozenset({"given", "settings", "settings.drain_timeout_s", "prompt_file"})

check_options(RUN_OPTIONS)
