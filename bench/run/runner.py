"""A whole sweep: probe the server, plan, run every cell, keep everything.

The measured data is flushed to the run directory after every finished
cell, so an interrupted or failed run loses at most the cell that was
running. One process writes a run directory at a time (bench.core.lock). A
resumed run writes nothing before its first new cell finishes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import __version__
from bench.core.errors import FlagError, RunError, io_reason
from bench.core.eventloop import asyncio_run
from bench.core.lock import LOCK_FILE, LockHeld, RunLock
from bench.core.plan import Cell, Plan, make_plan
from bench.core.workers import AUTO, RateLoad, WorkerPlan, host_cores, plan_workers
from bench.measure.cells import Settings
from bench.run.length_setup import check_length_flags, check_resumed_lengths, length_parameters, run_settings
from bench.run.nextstep import next_steps
from bench.run.progress import Progress
from bench.run.prompt_setup import check_prompt_flags, check_resumed_source, prompt_parameters
from bench.run.resume import FlagConflict, resumed_inputs
from bench.run.runcard import RunCard
from bench.run.store import RunStore, clean_stale_temps, session_tag
from bench.run.sweep import sweep
from bench.run.traffic_options import (
    check_rate_flags,
    merge_traffic_parameters,
    rate_settings,
    traffic_parameters,
)
from bench.server.engines import ServerError, ServerInfo, ServerNotReady, probe_server
from bench.server.provenance import (
    ImageDigestError,
    SourceRevisionError,
    collector_image,
    collector_revision,
    detect_hardware,
    local_launch_command,
)
from bench.workload.prompt_files import PromptFile
from rundir.contract import (
    DECODE,
    ERROR,
    PENDING,
    RATE,
    SCHEMA_VERSION,
    Clock,
    ContractError,
    Engine,
    KvBudget,
    Model,
    Parameters,
    RunInfo,
)
from rundir.io import read_run_info
from rundir.redact import REDACTED, is_secret_name, redact, redact_tree, redact_url, url_secrets
from rundir.slugs import slugify

__all__ = ["FlagError", "RunError", "RunOptions", "RunResult", "run_benchmark", "secrets_of"]

TOOL_NAME = "speed-matrix"
SERVER_POLL_S = 0.5  # how often a starting server is asked again
DRY_RUN_REACH_S = 2.0  # --dry-run waits this long for a server to answer, then plans without it
UNKNOWN_ENGINE = "unknown engine"


@dataclass
class RunOptions:
    base_url: str
    out: Path | None = None
    api_key: str | None = None
    model: str | None = None
    contexts: list | None = None
    concurrency: list[int] | None = None
    prefill_contexts: list | None = None
    prefill: bool = True
    kv_budget: int | None = None
    settings: Settings = field(default_factory=Settings)
    launch_command: str | None = None
    run_card: RunCard = field(default_factory=RunCard)
    resume: Path | None = None
    retry_errors: bool = False
    dry_run: bool = False
    server_wait_s: float = 30.0
    gpu_telemetry: str = "auto"  # "off": no GPU sampling, no gpu_metrics.parquet
    workers: int | str = AUTO  # processes a decode cell's streams are spread over (bench/core/workers.py)
    # --shard i/N with --coordinator HOST:PORT: one of N hosts driving one run
    # (0: the coordinator, bench/distributed/coordinator.py; else bench/distributed/remote.py)
    shard: tuple[int, int] | None = None
    coordinator: tuple[str, int] | None = None
    join_timeout_s: float = 600.0
    source_addresses: tuple[str, ...] = ()  # --source-address (bench/core/sources.py)
    # Traffic cells (bench/core/plan.py traffic_cells): --prefix-reuse percents, --turns,
    # and their streams; None: none planned, the run is the matrix alone
    prefix_reuse: list[int] | None = None
    turns: list[int] | None = None
    traffic_concurrency: list[int] | None = None
    # Rate cells (bench/core/plan.py rate_cells, bench/measure/rate_cells.py): --rate
    # (requests/s), its arrival process, seed, cap on requests in flight, output tokens
    rate: list[float] | None = None
    arrivals: str = "poisson"
    arrival_seed: int | None = None
    rate_cap: int | None = None
    rate_output: int | None = None
    rate_reuse: list[int] | None = None  # --rate-reuse: percents; rate cells per (reuse, rate)
    # Prompt source (bench/run/prompt_setup.py): --prompt-source, or --prompts FILE (read
    # and checked before anything is measured, into prompt_file), and --prompt-seed
    prompt_source: str = "filler"
    prompts_file: Path | None = None
    prompt_seed: int | None = None
    prompt_file: PromptFile | None = None
    # option name -> value, for the options set on the command line (a
    # resumed run compares them with its run.yaml)
    given: dict[str, object] = field(default_factory=dict)


@dataclass
class RunResult:
    run_dir: Path
    counts: Counter  # cell status -> cells, as stored

    @property
    def errors(self) -> int:
        return self.counts.get(ERROR, 0)


def secrets_of(opts: RunOptions) -> list[str]:
    """Literal secrets of this run: its key, the environment's keys and tokens,
    and the userinfo of --base-url."""
    keys = [opts.api_key or "", os.environ.get("OPENAI_API_KEY", "")]
    # Named like a credential by its last word (HF_TOKEN, VLLM_API_KEY), so that
    # TOKENIZER_PATH or a *_KEYS list does not erase a path wherever it appears.
    keys += [v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= 8]
    keys += url_secrets(opts.base_url)
    return [k for k in keys if k]


def run_benchmark(opts: RunOptions, progress: Progress) -> RunResult | None:
    """Measure (or, with dry_run, only plan) a run; None for a dry run."""
    secrets = secrets_of(opts)

    def clean(text: str) -> str:
        return redact(text, secrets)

    if opts.out is not None and opts.resume is not None:
        raise FlagError("--out and --resume: give one (--out starts a run, --resume continues one)")
    if opts.retry_errors and opts.resume is None:
        raise FlagError("--retry-errors: only with --resume R (it re-measures R's Error cells)")
    check_rate_flags(opts)
    opts = check_length_flags(opts)
    if (opts.shard is None) != (opts.coordinator is None):
        raise FlagError("--shard i/N and --coordinator HOST:PORT: give both (or neither)")
    if opts.shard is not None and opts.given.get("workers") is not None:
        raise FlagError(f"--workers with --shard: each shard is one process; to drive the "
                        f"server with more processes, run more shards (e.g. two on one host, "
                        f"--shard 1/{opts.shard[1] + 1} and --shard 2/{opts.shard[1] + 1})")
    if opts.shard is not None and opts.shard[0] > 0:
        return _serve_shard(opts, progress)
    opts = check_prompt_flags(opts)  # a prompt file is read and checked whole, before the server
    if opts.resume is not None:
        return _resume(opts, progress, clean)
    return _fresh(opts, progress, clean)


# -- a new run --------------------------------------------------------------


def _fresh(opts: RunOptions, progress: Progress, clean) -> RunResult | None:
    if opts.dry_run:
        info = _probe_for_plan(opts, opts.model, clean, progress)
    else:
        info = _probe(opts, opts.model, clean, progress)
    kv_budget = opts.kv_budget or info.kv_budget
    kv_source = "--kv-budget" if opts.kv_budget else info.kv_budget_source
    s = opts.settings
    plan = make_plan(
        contexts=opts.contexts, concurrency=opts.concurrency, max_output=s.max_output,
        max_model_len=info.max_model_len, kv_budget=kv_budget, prefill=opts.prefill,
        prefill_contexts=opts.prefill_contexts, slots=info.slots,
        prefix_reuse=opts.prefix_reuse, turns=opts.turns,
        traffic_concurrency=opts.traffic_concurrency, rates=opts.rate, rate_cap=opts.rate_cap,
        rate_output_tokens=opts.rate_output, arrivals=opts.arrivals, rate_reuse=opts.rate_reuse,
    )
    if not plan.cells:
        raise RunError("the plan is empty: no context fits the server's max model length")
    if opts.prefix_reuse and not plan.prefill_contexts:
        raise FlagError("--prefix-reuse: prefix cells run at the prefill contexts, and this plan has "
                        "none (drop --no-prefill, or give --prefill-contexts)")
    run_dir, run_info = _new_run_info(opts, info, plan, kv_budget, kv_source, clean)
    opts = dataclasses.replace(opts, settings=run_settings(s, run_info.parameters))  # its drawn seed
    store = RunStore(run_dir, run_info, plan.cells, secrets_of(opts))
    todo = plan.to_run
    plan.workers = _workers(opts, todo, plan.rate_output or 0)
    if opts.dry_run:
        progress.show_plan(_shown(info, clean), plan, todo, s, kv_budget, kv_source, run_dir)
        return None
    lock = _claim_new(run_dir)  # before the plan is shown: a second writer's one line
    try:
        progress.show_plan(_shown(info, clean), plan, todo, s, kv_budget, kv_source, run_dir)
        try:  # the plan, all pending: a run killed in its first cell can be resumed
            store.flush()
        except (OSError, ContractError) as exc:
            raise RunError(f"cannot write the run directory: {io_reason(exc, run_dir)}") from None
        return _measure(opts, info, plan, todo, store, progress, clean, run_info.run_id)
    finally:
        lock.release()


def _claim_new(run_dir: Path) -> RunLock:
    """Create --out and lock it; refuse a directory that holds anything."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock(run_dir)
        lock.acquire()
    except LockHeld as exc:
        raise RunError(f"--out: {exc}") from None
    except OSError as exc:
        raise RunError(f"--out: cannot create {run_dir}: {io_reason(exc, run_dir)}") from None
    if any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        lock.release()
        raise RunError(f"--out: {run_dir} already exists and is not empty "
                       f"(use --resume {run_dir} to continue it)")
    return lock


def _new_run_info(opts: RunOptions, info: ServerInfo, plan: Plan, kv_budget, kv_source, clean):
    now = dt.datetime.now(dt.UTC)
    run_id = f"{now:%Y%m%d-%H%M%S}-{slugify(clean(info.model))}-{slugify(clean(info.engine))}"
    run_dir = Path(opts.out) if opts.out else Path("runs") / run_id
    if opts.out:
        run_id = slugify(run_dir.name)
    secrets = secrets_of(opts)
    card = redact_tree(opts.run_card, secrets)  # every field, not only the free-text ones
    # The card was checked as it was read; what the collector detected is checked
    # with the whole run when run.yaml is first written, before any cell is measured.
    hardware = card.hardware.over(detect_hardware())
    engine = card.engine.over(Engine(name=info.engine, version=info.version, commit=info.commit,
                                     backend=info.backend))
    model = card.model.over(Model(served_name=info.model, max_model_len=info.max_model_len))
    s = opts.settings
    launch = (opts.launch_command or card.launch_command
              or local_launch_command(info.base_url, secrets))
    try:
        image = collector_image(os.environ)
        revision = collector_revision(os.environ)
    except (ImageDigestError, SourceRevisionError) as exc:
        raise RunError(str(exc)) from None
    run = RunInfo(
        schema_version=SCHEMA_VERSION, run_id=run_id, measured_at=now.isoformat(timespec="seconds"),
        submitter=card.submitter, hardware=hardware, engine=engine, model=model,
        parameters=Parameters(
            contexts=plan.contexts, concurrency=plan.concurrency,
            prefill_contexts=plan.prefill_contexts, duration_s=s.duration_s,
            max_output_tokens=s.max_output, prefill_mode="Cold requests, unique prefixes",
            prefill_repeats=s.prefill_repeats, decode_test="Fixed duration",
            tool_name=TOOL_NAME, tool_version=__version__, collector_image=image,
            collector_revision=revision,
            repeats=s.repeats if s.repeats > 1 else None,
            **traffic_parameters(opts, run_id),
            **prompt_parameters(opts, run_id),
            **length_parameters(s, run_id, opts.given.get("length_seed") is not None),
        ),
        clock=Clock(monotonic_anchor_ns=time.monotonic_ns(), wall_anchor_ns=time.time_ns()),
        kv_budget=KvBudget(tokens=kv_budget, source=kv_source if kv_budget else None),
        launch_command=clean(launch) if launch else None,
        notes=clean(card.notes or ""),
    )
    return run_dir, run


# -- a resumed run ----------------------------------------------------------


def _resume(opts: RunOptions, progress: Progress, clean) -> RunResult | None:
    run_dir = Path(opts.resume)
    if not run_dir.is_dir():
        raise RunError(f"--resume: {run_dir}: no such run directory")
    lock = None
    if not opts.dry_run:
        lock = RunLock(run_dir)
        try:
            lock.acquire()
        except LockHeld as exc:
            raise RunError(f"--resume: {exc}") from None
        except OSError as exc:
            raise RunError(f"--resume: cannot lock {run_dir}: {io_reason(exc, run_dir)}") from None
    try:
        return _resume_locked(opts, run_dir, progress, clean)
    finally:
        if lock is not None:
            lock.release()


def _resume_locked(opts: RunOptions, run_dir: Path, progress: Progress, clean) -> RunResult | None:
    given = dict(opts.given)
    if given.get("model"):  # compared with run.yaml's served name, which is redacted
        given["model"] = clean(given["model"])
    try:
        old = read_run_info(run_dir)
        wanted = resumed_inputs(run_dir, old, given, opts.settings)
    except ContractError as exc:
        raise RunError(f"--resume: {clean(str(exc))}") from None
    except FlagConflict as exc:
        raise FlagError(str(exc)) from None
    check_resumed_source(opts, old.parameters, run_dir)
    check_resumed_lengths(opts, old.parameters, run_dir)
    if not opts.dry_run:
        clean_stale_temps(run_dir)  # a killed writer's; we hold the lock
    served = _served_name(opts, wanted.model, clean)
    if opts.dry_run:
        info = _probe_for_plan(opts, served, clean, progress, resuming=run_dir,
                               stored=old.model, kv_known=wanted.kv_budget is not None)
    else:
        info = _probe(opts, served, clean, progress, resuming=run_dir)
    _same_server(run_dir, old, info, clean)
    kv_budget, kv_source = wanted.kv_budget, wanted.kv_source
    if kv_budget is None:
        kv_budget, kv_source = info.kv_budget, info.kv_budget_source
    s = run_settings(wanted.settings, old.parameters)
    opts = dataclasses.replace(rate_settings(opts, old, run_dir), settings=s)
    plan = make_plan(
        contexts=wanted.contexts, concurrency=wanted.concurrency, max_output=s.max_output,
        max_model_len=info.max_model_len, kv_budget=kv_budget,
        prefill=bool(wanted.prefill_contexts), prefill_contexts=wanted.prefill_contexts or None,
        slots=info.slots, prefix_reuse=opts.prefix_reuse, turns=opts.turns,
        traffic_concurrency=opts.traffic_concurrency, rates=opts.rate, rate_cap=opts.rate_cap,
        rate_output_tokens=opts.rate_output, arrivals=opts.arrivals, rate_reuse=opts.rate_reuse,
    )
    try:
        store = RunStore.resume(run_dir, old, secrets_of(opts))
    except ContractError as exc:
        raise RunError(f"--resume: {clean(str(exc))}") from None
    store.add_planned(plan.cells)
    p = old.parameters  # the plan may have grown: run.yaml says so at the next flush
    p.contexts = sorted({*p.contexts, *plan.contexts})
    p.concurrency = sorted({*p.concurrency, *plan.concurrency})
    p.prefill_contexts = sorted({*p.prefill_contexts, *plan.prefill_contexts})
    merge_traffic_parameters(p, opts, old.run_id)  # flags given again add cells
    if old.kv_budget.tokens is None and kv_budget is not None:
        old.kv_budget = KvBudget(tokens=kv_budget, source=kv_source)
    retry = (PENDING, ERROR) if opts.retry_errors else (PENDING,)
    planned = {c.key for c in plan.cells}  # a run's traffic cells come back from its cells.parquet
    cells = [*plan.cells, *(Cell(*k) for k in store.rows if k not in planned)]
    for cell in cells:
        row = store.rows[cell.key]
        cell.status, cell.reason = row["status"], row["reason"]
    todo = [c for c in cells if c.status in retry]
    plan.cells = cells
    plan.workers = _workers(opts, todo, p.rate_output_tokens or 0)
    progress.show_plan(_shown(info, clean), plan, todo, s, kv_budget, kv_source, run_dir)
    if opts.dry_run:
        return None
    if not todo:
        errors = sum(1 for r in store.rows.values() if r["status"] == ERROR)
        hint = f" ({errors} Error cells: add --retry-errors to measure them again)" if errors else ""
        progress.note(f"nothing left to measure in {run_dir}{hint}")
        counts = Counter(r["status"] for r in store.rows.values())
        for line in next_steps(run_dir):
            progress.note(line)
        progress.summary(counts)
        return RunResult(run_dir, counts)
    tag = session_tag(old.run_id, store.request_ids())
    opts = dataclasses.replace(opts, settings=s)
    return _measure(opts, info, plan, todo, store, progress, clean, tag)


def _serve_shard(opts: RunOptions, progress: Progress) -> None:
    """Shard i ≥ 1 of --shard i/N: no run directory of its own; the coordinator's
    run directory holds what it measures."""
    given = sorted(k for k in ("out", "resume", "retry_errors", "dry_run")
                   if opts.given.get(k) not in (None, False))
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise FlagError(f"{flags}: shard 0 (the coordinator) alone takes "
                        f"{'this' if len(given) == 1 else 'these'}; shard {opts.shard[0]} "
                        "measures for it")
    from bench.distributed.remote import serve_shard

    assert opts.shard is not None and opts.coordinator is not None
    serve_shard(opts.shard[0], opts.shard[1], opts.coordinator, opts.base_url, opts.api_key,
                secrets_of(opts), opts.join_timeout_s, progress.note, opts.source_addresses)
    return None


def _workers(opts: RunOptions, todo: list[Cell], rate_output: int):
    """The run's worker plan for the decode and rate cells it will measure
    (`rate_output`: a rate cell's output tokens a request)."""
    if opts.shard is not None:
        n = opts.shard[1]
        return WorkerPlan(n, False, f"--shard 0/{n}: one process on each of {n} hosts, "
                                    "this one coordinating")
    return plan_workers(opts.workers, [c.concurrency for c in todo if c.phase == DECODE],
                        host_cores(), [RateLoad(c.rate or 0, rate_output, c.concurrency)
                                       for c in todo if c.phase == RATE])


def _served_name(opts: RunOptions, stored: str | None, clean) -> str | None:
    """The name to ask the server for: run.yaml's, unless it was redacted (a
    served name holding the key): then --model's, or None (the first served,
    checked against run.yaml's by _same_server)."""
    if not stored or REDACTED not in stored:
        return stored
    return opts.model if opts.model and clean(opts.model) == stored else None


def _same_server(run_dir: Path, old: RunInfo, info: ServerInfo, clean) -> None:
    """A resumed run measures the same model at the same max model length."""
    shown = redact_url(info.base_url)
    stored = old.model.served_name
    if stored and clean(info.model) != clean(stored):
        hint = " (pass --model with the served name)" if REDACTED in stored else ""
        raise RunError(f"--resume: {run_dir} measured model {stored!r}; the "
                       f"server at {shown} serves {info.model!r}{hint}")
    if old.model.max_model_len and info.max_model_len and info.max_model_len != old.model.max_model_len:
        raise RunError(f"--resume: {run_dir} was measured at max model length "
                       f"{old.model.max_model_len:,}; the server at {shown} reports "
                       f"{info.max_model_len:,} (not comparable: start a new run with --out)")


# -- measuring ----------------------------------------------------------------


def _probe(opts: RunOptions, model: str | None, clean, progress: Progress,
           resuming: Path | None = None, wait: bool = True) -> ServerInfo:
    """The server's facts, as RunError (one line) when it cannot be benchmarked;
    `wait` False: asked once, a server not ready yet raised as ServerNotReady."""
    passed_on = () if wait else ServerNotReady  # _probe_when_ready words its own
    try:
        if not wait:
            return probe_server(opts.base_url, opts.api_key, model)
        return _probe_when_ready(opts, model, clean, progress)
    except passed_on:
        raise
    except ServerError as exc:
        text = clean(str(exc))
        if resuming is not None and model and "not served here" in text and not opts.given.get("model"):
            text = f"--resume: {resuming} measured model {model!r}, which {text.split(': ', 1)[-1]}"
        raise RunError(text) from None
    except (httpx.HTTPError, OSError) as exc:  # a safety net: engines.py words its own
        raise RunError(f"the server at {redact_url(opts.base_url)} did not answer as expected "
                       f"({type(exc).__name__}: {clean(str(exc))})") from None


def _probe_for_plan(opts: RunOptions, model: str | None, clean, progress: Progress,
                    resuming: Path | None = None, stored: Model | None = None,
                    kv_known: bool = False) -> ServerInfo:
    """--dry-run's server: probed once, never waited for. A server that does not
    answer within DRY_RUN_REACH_S (a typo'd port, one still loading) yields a plan
    from the flags (and a resumed run's run.yaml) alone, whose notes say what only
    the server knows. One that answers and refuses (a wrong key, a model not
    served) still ends in its one line."""
    not_reached = _unreachable(opts.base_url, clean)
    if not_reached is None:
        try:
            return _probe(opts, model, clean, progress, resuming, wait=False)
        except ServerNotReady as exc:  # it answered 502/503/504: still starting
            not_reached = clean(str(exc))
    max_len = stored.max_model_len if stored is not None else None
    model = model or (stored.served_name if stored is not None else None)  # even redacted
    unknown = ["its engine"]
    if not model:
        unknown.append("the served model")
    if max_len is None:
        unknown.append("its max model length (a max context is dropped)")
    if not (kv_known or opts.kv_budget):
        unknown.append("its KV budget (no Over-capacity pre-check)")
    unknown.append("its slots (how many streams it runs at once)")
    notes = [f"planned without the server: {not_reached}",
             "not known without it: " + ", ".join(unknown)]
    return ServerInfo(base_url=opts.base_url, engine=UNKNOWN_ENGINE,
                      model=model or "unknown model", max_model_len=max_len,
                      notes=notes)


def _unreachable(base_url: str, clean) -> str | None:
    """Why nothing answers at --base-url within DRY_RUN_REACH_S (any HTTP answer is
    an answer); None when something does."""
    root = base_url.rstrip("/")
    root = root[:-3] if root.endswith("/v1") else root
    try:
        with httpx.Client(timeout=DRY_RUN_REACH_S) as client:
            client.get(f"{root}/v1/models")
    except httpx.HTTPError as exc:
        return clean(f"no server answered at {redact_url(root)} within {DRY_RUN_REACH_S:g} s "
                     f"({type(exc).__name__})")
    return None


def _probe_when_ready(opts: RunOptions, model: str | None, clean, progress: Progress) -> ServerInfo:
    """probe_server, waiting up to --server-wait for a server that is still
    starting (nothing listening yet, or 502/503/504 such as llama-server's
    "Loading model"), with one line per new thing it waits for. Anything else
    (a refused key, a malformed answer) fails at once."""
    deadline = time.monotonic() + opts.server_wait_s
    said = None
    while True:
        try:
            return probe_server(opts.base_url, opts.api_key, model)
        except ServerNotReady as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerError(f"{exc} (waited {opts.server_wait_s:g} s, --server-wait)"
                                  if opts.server_wait_s else str(exc)) from None
            if exc.waiting_for != said:
                said = exc.waiting_for
                progress.note(clean(f"waiting for the server at {redact_url(opts.base_url)}: "
                                    f"{said} (up to {left:.0f} s more, --server-wait)"))
            time.sleep(min(SERVER_POLL_S, left))


def _shown(info: ServerInfo, clean) -> ServerInfo:
    """ServerInfo as printed: no password in the URL, no secret in the
    server's own strings (a served model name may hold the key)."""
    return dataclasses.replace(
        info, base_url=redact_url(info.base_url), model=clean(info.model),
        engine=clean(info.engine), version=info.version and clean(info.version),
        notes=[clean(note) for note in info.notes])


def _measure(opts, info, plan, todo, store: RunStore, progress: Progress, clean, tag: str) -> RunResult:
    asyncio_run(sweep(opts, info, plan, todo, store, progress, clean, tag, secrets_of(opts)))
    counts = Counter(r["status"] for r in store.rows.values())
    for line in next_steps(store.run_dir):  # the counts stay the last line
        progress.note(line)
    progress.summary(counts)
    return RunResult(store.run_dir, counts)
