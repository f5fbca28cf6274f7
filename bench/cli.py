"""`bench`: the collector's command line.

Errors a user can cause (bad flag, no server, wrong key, bad run card, a
second writer, a full disk) end with one line on stderr, never a
traceback, and an exit status a script can act on (see `bench run --help`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from bench import __version__
from bench.core.limits import out_of_memory
from bench.core.plan import PlanError
from bench.distributed.peer_auth import SECRET_ENV, secret_problem
from bench.measure.cells import Settings
from bench.params import (
    Address,
    ApiKey,
    BaseUrl,
    Contexts,
    Levels,
    Seconds,
    ShardSpec,
    SourceAddress,
    Tokens,
    Workers,
    api_key_problem,
)
from bench.run.progress import Progress
from bench.run.runcard import RunCard, read_run_card
from bench.run.runner import FlagError, RunError, RunOptions, run_benchmark, secrets_of
from bench.server.telemetry import MODES, RATE_HZ
from importer.cli import import_cmd
from rundir.clierrors import EXIT_FAILED, EXIT_USAGE, OneLineGroup, fail
from rundir.contract import ContractError
from rundir.redact import redact

EXIT_STOPPED = EXIT_FAILED  # the run stopped early, or could not start
EXIT_ERROR_CELLS = 3  # the run finished, and some cells ended Error


@click.group(cls=OneLineGroup)
@click.version_option(__version__, prog_name="bench")
def main() -> None:
    """Measure LLM inference servers over a context × concurrency matrix."""


RUN_HELP = """Sweep the matrix against a running server and write a run directory.

\b
Exit status:
  0  every planned cell was measured and none ended Error
  1  the run stopped (server gone, wrong API key, Ctrl-C, disk full,
     another bench run holds the directory ...): measured cells are
     kept; continue with --resume R
  2  a bad flag, or flags that contradict each other or R's run.yaml
  3  the run finished but some cells ended Error (the last line of
     stderr counts them; --resume R --retry-errors measures them again)
"""


@main.command("run", help=RUN_HELP)
@click.option("--base-url", required=True, type=BaseUrl(),
              help="Server URL, e.g. http://127.0.0.1:8000")
@click.option("--api-key", default=None, type=ApiKey(),
              help="API key (default: $OPENAI_API_KEY).")
@click.option("--model", default=None, help="Served model name (default: the first listed).")
@click.option("--contexts", default=None, type=Contexts(),
              help="e.g. 8k,16k,32k,max (default: 8K…128K and max).")
@click.option("--concurrency", default=None, type=Levels(),
              help="e.g. 1,2,4 (default: 1,2,…,128; at most 16,384).")
@click.option("--prefill-contexts", default=None, type=Contexts(),
              help="Prefill contexts (default: the decode ones).")
@click.option("--no-prefill", is_flag=True, help="Skip the prefill phase.")
@click.option("--duration", default=30.0, show_default=True, type=Seconds(), help="Window (s).")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Windows per decode cell, back to back on the same streams; with 2 or "
                   "more the pages show each figure's median over them with a 95% interval.")
@click.option("--max-output", default="4096", show_default=True, type=Tokens(),
              help="Max output tokens.")
@click.option("--prefill-repeats", default=3, show_default=True, type=click.IntRange(1, 1000))
@click.option("--warmup-timeout", default=120.0, show_default=True, type=Seconds())
@click.option("--warmup-stable", default=3.0, show_default=True, type=Seconds(zero_ok=True),
              help="Seconds every stream must be producing before the window opens.")
@click.option("--server-wait", default=30.0, show_default=True, type=Seconds(zero_ok=True),
              help="How long to wait for a server that is still starting (nothing listening, "
                   "HTTP 502/503/504) before the first request, and for it to answer again "
                   "after a failed cell (s).")
@click.option("--stall-timeout", default=60.0, show_default=True, type=Seconds(),
              help="Fail a stream that sends no bytes for this long once tokens flow (s).")
@click.option("--ttft-timeout", default=900.0, show_default=True, type=Seconds(),
              help="Fail a request with no first token after this long (s): queued "
                   "long-context prefills legitimately take minutes.")
@click.option("--kv-budget", default=None, type=Tokens(),
              help="KV-cache budget in tokens (overrides detection).")
@click.option("--launch-command", default=None, help="The server's launch command, if not local.")
@click.option("--run-card", type=click.Path(dir_okay=False), default=None,
              help="YAML with hardware/engine/model fields, launch_command, notes, submitter.")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Run directory.")
@click.option("--resume", type=click.Path(file_okay=False), default=None,
              help="Continue run directory R: its matrix and parameters come from R's run.yaml; "
                   "--contexts/--concurrency/--prefill-contexts add cells; finished cells are kept.")
@click.option("--retry-errors", is_flag=True,
              help="With --resume: measure R's Error cells again (their earlier rows are kept "
                   "in superseded_requests.parquet).")
@click.option("--gpu-telemetry", type=click.Choice(MODES), default="auto", show_default=True,
              help="auto: sample this host's GPUs (power, energy, clocks, throttling) "
                   f"{RATE_HZ}× a second into gpu_metrics.parquet when NVML or amdsmi finds "
                   "some and the server runs here; off: none.")
@click.option("--workers", default="auto", show_default=True, type=Workers(),
              help="Processes a decode cell's streams are spread over, each with its own "
                   "event loop and sockets (the plan says how many and why). auto: as many "
                   "as the planned event rate needs (250 tok/s a stream, 35,000 events/s a "
                   "process), at most cores - 1; 1: every cell in this process.")
@click.option("--shard", default=None, type=ShardSpec(),
              help="i/N: this host is shard i of N hosts driving one run (with --coordinator). "
                   "Shard 0 coordinates: it plans, writes the run directory and spreads each "
                   "decode cell's streams over the N hosts; shard i ≥ 1 measures for it "
                   f"(deploy/kubernetes/README.md). Every host needs the same secret in "
                   f"${SECRET_ENV} (16 characters or more): the hosts prove it to each "
                   "other, and every message between them is authenticated with it.")
@click.option("--coordinator", default=None, type=Address(),
              help="HOST:PORT where shard 0 listens for the other shards (shard 0 binds it).")
@click.option("--join-timeout", default=600.0, show_default=True, type=Seconds(),
              help="With --shard: how long shard 0 waits for every shard to join (before the "
                   "first cell, and for a lost shard before the next) and a shard for shard 0.")
@click.option("--source-address", multiple=True, type=SourceAddress(),
              help="Local address the streams' connections come from, repeatable: each "
                   "brings its own ephemeral ports (one address reaches one server address "
                   "with about 28,000). Automatic on a 127.0.0.1 server: 127.0.0.x. With "
                   "--shard, each host's own.")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
def run_cmd(**kw: Any) -> None:
    if kw["shard"] is not None and (problem := secret_problem()):
        fail(f"--shard: {problem}", EXIT_USAGE)  # names the variable, never its value
    api_key = kw["api_key"] or os.environ.get("OPENAI_API_KEY") or None
    if not kw["api_key"] and api_key and (problem := api_key_problem(api_key)):
        fail(f"OPENAI_API_KEY (the default of --api-key): {problem}", EXIT_USAGE)
    ctx = click.get_current_context()
    given = {name: value for name, value in kw.items()
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                                   ParameterSource.ENVIRONMENT)}
    opts = RunOptions(base_url=kw["base_url"], api_key=api_key)
    secrets = secrets_of(opts)
    try:
        settings = Settings(
            duration_s=kw["duration"],
            max_output=kw["max_output"],
            prefill_repeats=kw["prefill_repeats"],
            repeats=kw["repeats"],
            warmup_timeout_s=kw["warmup_timeout"],
            stall_timeout_s=kw["stall_timeout"],
            ttft_timeout_s=kw["ttft_timeout"],
            stable_s=kw["warmup_stable"],
        )
        card = read_run_card(Path(kw["run_card"])) if kw["run_card"] else RunCard()
        opts = RunOptions(
            base_url=kw["base_url"], api_key=api_key, model=kw["model"],
            contexts=kw["contexts"], concurrency=kw["concurrency"],
            prefill_contexts=kw["prefill_contexts"], prefill=not kw["no_prefill"],
            kv_budget=kw["kv_budget"], settings=settings, launch_command=kw["launch_command"],
            run_card=card, out=Path(kw["out"]) if kw["out"] else None,
            resume=Path(kw["resume"]) if kw["resume"] else None,
            retry_errors=kw["retry_errors"], dry_run=kw["dry_run"],
            server_wait_s=kw["server_wait"], given=given, gpu_telemetry=kw["gpu_telemetry"],
            workers=kw["workers"], shard=kw["shard"], coordinator=kw["coordinator"],
            join_timeout_s=kw["join_timeout"], source_addresses=tuple(kw["source_address"]),
        )
        result = run_benchmark(opts, Progress())
    except (FlagError, PlanError, ContractError) as exc:
        fail(redact(str(exc), secrets), EXIT_USAGE)
    except RunError as exc:
        fail(redact(str(exc), secrets), EXIT_STOPPED)
    except OSError as exc:  # a safety net: every known write is worded where it happens
        fail(redact(f"{exc.filename or 'I/O'}: {exc.strerror or exc}", secrets), EXIT_STOPPED)
    except MemoryError:  # before the sweep (which names the run directory to resume)
        fail(out_of_memory(), EXIT_STOPPED)
    if result is None:
        return
    click.echo(str(result.run_dir))
    if result.errors:
        sys.exit(EXIT_ERROR_CELLS)


main.add_command(import_cmd)

if __name__ == "__main__":
    main()
