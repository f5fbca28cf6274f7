"""A whole sweep: probe the server, plan, run every cell, keep everything.

The measured data is flushed to the run directory after every cell, so an
interrupted or failed run loses at most the cell that was running.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import __version__
from bench.cells import CellRunner, Settings
from bench.engines import ServerError, ServerInfo, probe_server
from bench.plan import Plan, make_plan
from bench.progress import Progress
from bench.prompts import PromptFactory
from bench.provenance import detect_hardware, local_launch_command
from bench.redact import redact
from bench.sampler import MetricsSampler
from bench.store import RunStore
from bench.stream import StreamClient
from rundir.contract import (
    DECODE,
    ERROR,
    PENDING,
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

TOOL_NAME = "speed-matrix"


class RunError(RuntimeError):
    """Ends the run with one line for the user."""


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
    run_card: dict = field(default_factory=dict)
    resume: Path | None = None
    dry_run: bool = False
    server_wait_s: float = 30.0


def secrets_of(opts: RunOptions) -> list[str]:
    keys = [opts.api_key or "", os.environ.get("OPENAI_API_KEY", "")]
    keys += [v for k, v in os.environ.items() if re.search("KEY|TOKEN|SECRET|PASSWORD", k) and len(v) >= 8]
    return [k for k in keys if k]


def run_benchmark(opts: RunOptions, progress: Progress) -> Path | None:
    secrets = secrets_of(opts)

    def clean(text: str) -> str:
        return redact(text, secrets)

    try:
        info = probe_server(opts.base_url, opts.api_key, opts.model)
    except ServerError as exc:
        raise RunError(clean(str(exc))) from None
    kv_budget = opts.kv_budget or info.kv_budget
    kv_source = "--kv-budget" if opts.kv_budget else info.kv_budget_source
    s = opts.settings
    plan = make_plan(
        contexts=opts.contexts, concurrency=opts.concurrency, max_output=s.max_output,
        max_model_len=info.max_model_len, kv_budget=kv_budget, prefill=opts.prefill,
        prefill_contexts=opts.prefill_contexts,
    )
    if not plan.cells:
        raise RunError("the plan is empty: no context fits the server's max model length")
    run_dir, run_info = _run_dir_and_info(opts, info, plan, kv_budget, kv_source, clean)
    store = RunStore(run_dir, run_info, plan.cells)
    done = store.adopt_finished() if opts.resume else set()
    for cell in plan.cells:
        if cell.key in done:
            cell.status = store.rows[cell.key]["status"]
    todo = [c for c in plan.cells if c.key not in done and c.status == PENDING]
    progress.show_plan(info, plan, todo, s, kv_budget, kv_source, run_dir)
    if opts.dry_run:
        return None
    store.flush()
    asyncio_run(_sweep(opts, info, plan, todo, store, progress, clean))
    return run_dir


def asyncio_run(coro) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)


async def _sweep(opts, info: ServerInfo, plan: Plan, todo, store: RunStore, progress, clean) -> None:
    s = opts.settings
    client = StreamClient(info.base_url, opts.api_key, s.stall_timeout_s,
                          ttft_timeout_s=s.ttft_timeout_s)
    prompts = PromptFactory(info, opts.api_key, store.info.run_id)
    sampler = MetricsSampler(info, opts.api_key)
    runner = CellRunner(info, client, prompts, sampler, s, clean)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        progress.note(
            "interrupt: closing the current cell and saving every finished one "
            "(Ctrl-C again to abort)"
        )

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    sampler.start()
    progress.start(plan, store)
    try:
        for cell in todo:
            progress.begin(cell)
            if cell.phase == DECODE:
                outcome = await runner.decode(cell, interrupted)
            else:
                outcome = await runner.prefill(cell)
            if outcome.reason:
                outcome.reason = clean(outcome.reason)
            store.record(cell, outcome)
            store.flush(sampler.table() if sampler.enabled else None)
            progress.end(cell, outcome)
            # Collect now and freeze the survivors, so a garbage-collection
            # pass over everything measured so far cannot stall the next window.
            gc.collect()
            gc.freeze()
            if interrupted.is_set() or outcome.status == PENDING:
                raise RunError(
                    f"interrupted: every finished cell is kept in {store.run_dir}; "
                    f"continue with --resume {store.run_dir}"
                )
            if outcome.status == ERROR and not await _server_back(info, opts):
                raise RunError(
                    f"the server at {info.base_url} stopped answering during "
                    f"{cell.phase} {cell.context}×{cell.concurrency} ({outcome.reason}); "
                    f"measured cells are kept in {store.run_dir}; continue with --resume {store.run_dir}"
                )
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        sampler.stop()
        prompts.close()
        progress.stop()


async def _server_back(info: ServerInfo, opts: RunOptions) -> bool:
    """After a failed cell: is the server (still, or again) answering?"""
    deadline = time.monotonic() + opts.server_wait_s
    while True:
        try:
            await asyncio.to_thread(probe_server, info.base_url, opts.api_key, info.model)
            return True
        except ServerError:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(1.0)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower()[:60] or "run"


def _run_dir_and_info(opts, info: ServerInfo, plan: Plan, kv_budget, kv_source, clean):
    now = dt.datetime.now(dt.UTC)
    if opts.resume:
        run_dir = Path(opts.resume)
        try:
            old = read_run_info(run_dir)
        except ContractError as exc:
            raise RunError(f"--resume: {exc}") from None
        old.parameters.contexts, old.parameters.concurrency = plan.contexts, plan.concurrency
        return run_dir, old
    run_id = f"{now:%Y%m%d-%H%M%S}-{_slug(info.model)}-{_slug(info.engine)}"
    run_dir = Path(opts.out) if opts.out else Path("runs") / run_id
    if opts.out:
        run_id = _slug(run_dir.name)
    if not opts.dry_run and run_dir.exists() and any(run_dir.iterdir()):
        raise RunError(f"--out: {run_dir} already exists and is not empty (use --resume to continue it)")
    card = opts.run_card
    hardware = detect_hardware()
    for key, value in (card.get("hardware") or {}).items():
        setattr(hardware, key, value)
    engine = Engine(name=info.engine, version=info.version, commit=info.commit, backend=info.backend)
    for key, value in (card.get("engine") or {}).items():
        setattr(engine, key, value)
    model = Model(served_name=info.model, max_model_len=info.max_model_len)
    for key, value in (card.get("model") or {}).items():
        setattr(model, key, value)
    s = opts.settings
    launch = opts.launch_command or card.get("launch_command") or local_launch_command(info.base_url)
    run = RunInfo(
        schema_version=SCHEMA_VERSION, run_id=run_id, measured_at=now.isoformat(timespec="seconds"),
        submitter=card.get("submitter"), hardware=hardware, engine=engine, model=model,
        parameters=Parameters(
            contexts=plan.contexts, concurrency=plan.concurrency,
            prefill_contexts=plan.prefill_contexts, duration_s=s.duration_s,
            max_output_tokens=s.max_output, prefill_mode="Cold requests, unique prefixes",
            prefill_repeats=s.prefill_repeats, decode_test="Fixed duration",
            tool_name=TOOL_NAME, tool_version=__version__,
        ),
        clock=Clock(monotonic_anchor_ns=time.monotonic_ns(), wall_anchor_ns=time.time_ns()),
        kv_budget=KvBudget(tokens=kv_budget, source=kv_source),
        launch_command=clean(launch) if launch else None,
        notes=clean(str(card.get("notes") or "")),
    )
    # Round-trip through the contract so a bad run card fails now, not at read time.
    try:
        RunInfo.from_dict(yaml.safe_load(yaml.safe_dump(run.to_dict())), where="run card")
    except ContractError as exc:
        raise RunError(str(exc)) from None
    return run_dir, run
