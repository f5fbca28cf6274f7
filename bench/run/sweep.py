"""Measuring a planned run: every cell in turn, each stored as it ends.

The sweep owns the run's machinery (stream client, prompts, the server's
gauges, GPU telemetry, the live display) and, with `--workers N` > 1, the
shard processes a decode cell's streams are spread over (bench/distributed/shards.py,
bench/core/workers.py), and a rate cell's schedule (bench/distributed/rate_shards.py).
A server that fails, a refused key or Ctrl-C ends the run between cells
with one line; every finished cell is already stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import signal
import time
from typing import NamedTuple
from urllib.parse import urlsplit

import httpx

from bench.core.errors import RunError, io_reason
from bench.core.limits import ensure_open_files, out_of_memory
from bench.core.plan import Cell, Plan
from bench.core.sources import check_families, plan_sources, port_range
from bench.core.workers import RateLoad, cell_shards, rate_shards
from bench.distributed.coordinator import Coordinator
from bench.distributed.rate_shards import ShardedRateRunner
from bench.distributed.shard_messages import ShardSetup
from bench.distributed.shards import ShardedCellRunner, ShardPool, ShardSource
from bench.measure.cells import CellOutcome, CellRunner
from bench.measure.rate_cells import RateRunner
from bench.measure.stream import StreamClient
from bench.measure.traffic_cells import TrafficRunner
from bench.run.progress import Progress
from bench.run.prompt_setup import reply_line, source_of
from bench.run.store import RunStore
from bench.server.engines import ServerError, ServerInfo, probe_server
from bench.server.sampler import MetricsSampler
from bench.server.telemetry import start_telemetry
from bench.workload.prompts import PromptFactory
from rundir.contract import CONVERSATION, DECODE, ERROR, PENDING, RATE, ContractError
from rundir.lengths import OUTPUT_FILE, parse_input_mix, parse_mix
from rundir.redact import redact_url
from rundir.words import context_label

AUTH_DENIED = (401, 403)


class Spread(NamedTuple):
    """What a cell's streams were spread over, as cells.parquet records it: a
    prefill cell and a one-process decode cell run in this process (1, 1);
    --workers N spreads a decode cell over up to N processes here (N, 1);
    --shard i/N over one process on each of N hosts (N, N)."""

    processes: int
    hosts: int


def _streams_here(plan: Plan, todo: list[Cell], hosts: int, duration_s: float,
                  one_rate: bool = False) -> int:
    """The most streams one process of this host holds at once: a decode
    cell's share (shard processes inherit this process's limit; `hosts`
    share a cell of --shard i/N), a prefill cell's one; `one_rate`: rate cells run in
    this process alone (an input mix's)."""
    most = 1
    for cell in todo:
        if cell.phase == DECODE:
            share = hosts if hosts > 1 else cell_shards(plan.workers, cell.concurrency)
            most = max(most, math.ceil(cell.concurrency / share))
        elif cell.phase == RATE:  # its cap, or every request of its window at once
            share = 1 if one_rate else hosts if hosts > 1 else _rate_shards(plan, cell)
            most = max(most, math.ceil((cell.concurrency or rate_requests_bound(cell, duration_s))
                                       / share))
        elif cell.traffic:  # a traffic cell's streams all run here
            most = max(most, cell.concurrency)
    return most


def rate_requests_bound(cell: Cell, duration_s: float) -> int:
    """The most requests an uncapped rate cell can have open: all of its window's
    (a Poisson count past 6 sigma above rate × duration is never seen)."""
    mean = (cell.rate or 0) * duration_s
    return math.ceil(mean + 6 * math.sqrt(mean) + 1)


def _rate_shards(plan: Plan, cell: Cell) -> int:
    """The processes of this host a rate cell's schedule is split over (--workers)."""
    return rate_shards(plan.workers, RateLoad(cell.rate or 0, plan.rate_output or 0, cell.concurrency))


def label(cell: Cell) -> str:
    return f"{cell.phase} {context_label(cell.context)}×{cell.concurrency}{cell.part}"


def queued_start(cell: Cell, slots: int) -> str:
    """The line a decode cell with more streams than slots prints as it starts."""
    c = cell.concurrency
    return (f"{label(cell)}: {c} streams, {slots} server slot{'' if slots == 1 else 's'}: {slots} run "
            f"at once and {c - slots} wait in the server's queue; the window opens once {slots} "
            f"stream{'' if slots == 1 else 's'} produce tokens, and the cell is Requests queued")


async def sweep(opts, info: ServerInfo, plan: Plan, todo: list[Cell], store: RunStore,
                progress: Progress, clean, tag: str, secrets: list[str]) -> None:
    """Measure `todo` in order, storing each cell as it ends (`opts`: the
    run's RunOptions; `clean`: redacts the run's `secrets`; `tag`: the
    session's request-id prefix)."""
    s = opts.settings
    url = redact_url(info.base_url)
    where = urlsplit(info.base_url)
    try:
        check_families(where.hostname or "", where.port or 80, opts.source_addresses)
        hosts_n = opts.shard[1] if opts.shard is not None else 1
        mixed = not parse_input_mix(s.input_lengths).fixed  # its rate cells run in this process
        raised = ensure_open_files(_streams_here(plan, todo, hosts_n, s.duration_s, mixed),
                                   "the largest cell")
    except ValueError as exc:
        raise RunError(str(exc)) from None
    sources, why = plan_sources(where.hostname or "", opts.source_addresses,
                                max((c.concurrency for c in todo), default=1), port_range())
    client = StreamClient(info.base_url, opts.api_key, s.stall_timeout_s,
                          ttft_timeout_s=s.ttft_timeout_s, source_addresses=sources)
    prompts = PromptFactory(info, opts.api_key, tag, source_of(store.info.parameters, opts.prompt_file))
    if parse_mix(s.output_lengths).kind == OUTPUT_FILE and opts.prompt_file is not None:
        prompts.reply_cap = s.max_output  # each prompt carries its item's reply length
        progress.note(reply_line(opts.prompt_file))
    sampler = MetricsSampler(info, opts.api_key)
    telemetry = start_telemetry(opts.gpu_telemetry, info.base_url, progress.note)
    runner = CellRunner(info, client, prompts, sampler, s, clean)
    rates = RateRunner.from_parameters(runner, store.info.parameters)
    traffic = TrafficRunner(runner, lambda cell: [
        c.turn for c in todo if c.phase == CONVERSATION and c.turn is not None
        and (c.context, c.concurrency) == (cell.context, cell.concurrency)])
    pool = ShardPool(lambda k, prefix: ShardSetup(k, prefix, info, opts.api_key, s, tuple(secrets),
                                                  sources), tag)
    hosts = None  # where a sharded decode cell's streams run (bench/distributed/shards.py)
    source: ShardSource = pool
    if opts.shard is not None:  # shard 0 of --shard i/N: the hosts' shards (bench/distributed/coordinator.py)
        source = hosts = Coordinator(opts.coordinator, opts.shard[1], lambda k, prefix: _setup(
            k, prefix, info, opts.api_key, s, secrets, sources), tag, progress.note,
            opts.join_timeout_s)
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
    if hosts is not None:
        try:
            await hosts.open(interrupted)  # the start barrier: every shard joined, or Ctrl-C
            if interrupted.is_set():
                raise _interrupted(store)
        except BaseException:
            hosts.close()
            loop.remove_signal_handler(signal.SIGINT)
            raise
    sampler.start()
    telemetry.start()
    progress.start(plan, store, telemetry)
    for line in (why, raised):
        if line:
            progress.note(line)
    try:
        for cell in todo:
            progress.begin(cell)
            if plan.queued([cell]):  # said as it starts, not after a silent wait
                progress.note(queued_start(cell, plan.slots))
            # a rate cell at a reuse level primes its groups and runs in this process, as
            # does one with an input mix (its prompts built per request)
            shards = (1 if cell.phase not in (DECODE, RATE) or cell.reuse is not None
                      or (cell.phase == RATE and mixed)
                      else hosts.n if hosts is not None
                      else _rate_shards(plan, cell) if cell.phase == RATE
                      else cell_shards(plan.workers, cell.concurrency))
            # one process on each host; --workers: the cell's share, on this host
            spread = Spread(shards, shards if hosts is not None else 1)
            measurer = _measurer(cell, shards, runner, rates, traffic, source)
            outcome = await _run_cell(measurer, cell, interrupted, store, clean, url)
            _save_cell(cell, outcome, spread, store, sampler, telemetry, progress, clean)
            # Collect now and freeze the survivors, so a garbage-collection
            # pass over everything measured so far cannot stall the next window.
            gc.collect()
            gc.freeze()
            if interrupted.is_set():
                raise _interrupted(store)
            if outcome.status == ERROR and not await _server_back(info, opts):
                raise RunError(
                    f"the server at {url} stopped answering during {label(cell)} "
                    f"({outcome.reason}); {_kept(store)}"
                )
    except MemoryError:
        gc.collect()  # room for the line and the cleanup below
        raise RunError(f"{out_of_memory()}; {_kept(store)}") from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        sampler.stop()
        telemetry.stop()
        prompts.close()
        pool.close()
        if hosts is not None:
            hosts.close()
        progress.stop()


def _measurer(cell: Cell, shards: int, runner: CellRunner, rates: RateRunner,
              traffic: TrafficRunner, source: ShardSource):
    """What measures `cell` over `shards` processes (1: this one)."""
    if cell.phase == RATE:
        return rates if shards == 1 else ShardedRateRunner(rates, source, shards)
    if cell.traffic:
        return traffic
    return runner if shards == 1 else ShardedCellRunner(runner, source, shards)


def _setup(k: int, prefix: str, info: ServerInfo, api_key: str | None, s, secrets: list[str],
           sources: tuple[str, ...]) -> ShardSetup:
    """A shard's setup: a remote one (k ≥ 1) gets neither the key nor the
    secrets nor the URL nor this host's source addresses (its own command
    line gives them)."""
    if k == 0:
        return ShardSetup(k, prefix, info, api_key, s, tuple(secrets), tuple(sources))
    return ShardSetup(k, prefix, dataclasses.replace(info, base_url=""), None, s, ())


async def _run_cell(runner: CellRunner | ShardedCellRunner | TrafficRunner | RateRunner
                    | ShardedRateRunner, cell: Cell,
                    interrupted: asyncio.Event, store: RunStore, clean, url: str) -> CellOutcome:
    """Measure one cell; a server that fails, refuses the key or an interrupt
    ends the run here, before anything of the cell is stored."""
    try:
        if isinstance(runner, TrafficRunner | RateRunner | ShardedRateRunner):
            outcome = await runner.run(cell, interrupted)
        elif cell.phase == DECODE:
            outcome = await runner.decode(cell, interrupted)
        else:
            outcome = await runner.prefill(cell)
    except ServerError as exc:  # e.g. /tokenize gone: the server died between cells
        raise RunError(f"the server at {url} failed before {label(cell)}: "
                       f"{clean(str(exc))}; {_kept(store)}") from None
    except (httpx.HTTPError, OSError) as exc:
        raise RunError(f"the server at {url} stopped answering before {label(cell)} "
                       f"({type(exc).__name__}: {clean(str(exc))}); {_kept(store)}") from None
    except RunError as exc:  # e.g. a lost shard that did not join again
        if "--resume" in str(exc):
            raise
        raise RunError(f"{exc}; {_kept(store)}") from None
    denied = next((r for r in outcome.records if r.status in AUTH_DENIED), None)
    if denied is not None:  # /v1/models let us in; the completions do not
        raise RunError(
            f"the API key is wrong or missing: the server at {url} answered HTTP "
            f"{denied.status} to the first request of {label(cell)} (pass --api-key "
            f"or set OPENAI_API_KEY); {_kept(store)}"
        )
    if outcome.status == PENDING:  # interrupted: the cell stays as it was
        raise _interrupted(store)
    return outcome


def _save_cell(cell: Cell, outcome: CellOutcome, spread: Spread, store: RunStore,
               sampler: MetricsSampler, telemetry, progress: Progress, clean) -> None:
    """Store a measured cell (with what measured it) and flush the run directory,
    then show it."""
    if outcome.reason:
        outcome.reason = clean(outcome.reason)
    if not outcome.records:  # nothing sent (shard processes that did not start): nothing spread
        store.record(cell, outcome)
    else:
        store.record(cell, outcome, spread.processes, spread.hosts)
    gpu = telemetry.table() if telemetry.enabled else None  # saved, and the display's J/token
    try:
        store.flush(sampler.table() if sampler.enabled else None, gpu)
    except (OSError, ContractError) as exc:
        raise RunError(f"cannot save {label(cell)}: {io_reason(exc, store.run_dir)}; "
                       f"the cells measured before it are kept in {store.run_dir}; "
                       f"continue with `--resume {store.run_dir}`") from None
    progress.end(cell, outcome, gpu)


def _kept(store: RunStore) -> str:
    return f"measured cells are kept in {store.run_dir}; continue with `--resume {store.run_dir}`"


def _interrupted(store: RunStore) -> RunError:
    return RunError(f"interrupted: every finished cell is kept in {store.run_dir}; "
                    f"continue with --resume {store.run_dir}")


async def _server_back(info: ServerInfo, opts) -> bool:
    """After a failed cell: is the server (still, or again) answering?"""
    deadline = time.monotonic() + opts.server_wait_s
    while True:
        try:
            await asyncio.to_thread(probe_server, info.base_url, opts.api_key, info.model)
            return True
        except (ServerError, httpx.HTTPError):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(1.0)
