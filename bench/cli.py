"""`bench`: the collector's command line.

Errors a user can cause (bad flag, no server, wrong key, bad run card)
end with one line on stderr and exit code 2 or 1, never a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
import yaml

from bench import __version__
from bench.cells import Settings
from bench.plan import PlanError, parse_concurrency, parse_contexts, parse_tokens
from bench.progress import Progress
from bench.redact import redact
from bench.runner import RunError, RunOptions, run_benchmark


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@click.group()
@click.version_option(__version__, prog_name="bench")
def main() -> None:
    """Measure LLM inference servers over a context × concurrency matrix."""


@main.command("run")
@click.option("--base-url", required=True, help="Server URL, e.g. http://127.0.0.1:8000")
@click.option("--api-key", default=None, help="API key (default: $OPENAI_API_KEY).")
@click.option("--model", default=None, help="Served model name (default: the first listed).")
@click.option("--contexts", default=None, help="e.g. 8k,16k,32k,max (default: 8K…128K and max).")
@click.option("--concurrency", default=None, help="e.g. 1,2,4 (default: 1,2,…,128).")
@click.option("--prefill-contexts", default=None, help="Prefill contexts (default: the decode ones).")
@click.option("--no-prefill", is_flag=True, help="Skip the prefill phase.")
@click.option("--duration", default=30.0, show_default=True, type=float, help="Window (s).")
@click.option("--max-output", default="4096", show_default=True, help="Max output tokens.")
@click.option("--prefill-repeats", default=3, show_default=True, type=click.IntRange(1))
@click.option("--warmup-timeout", default=120.0, show_default=True, type=float)
@click.option("--warmup-stable", default=3.0, show_default=True, type=float,
              help="Seconds every stream must be producing before the window opens.")
@click.option("--server-wait", default=30.0, show_default=True, type=float,
              help="After a failed cell, how long to wait for the server to answer again (s).")
@click.option("--stall-timeout", default=60.0, show_default=True, type=float,
              help="Fail a stream that sends no bytes for this long once tokens flow (s).")
@click.option("--ttft-timeout", default=900.0, show_default=True, type=float,
              help="Fail a request with no first token after this long (s): queued "
                   "long-context prefills legitimately take minutes.")
@click.option("--kv-budget", default=None, help="KV-cache budget in tokens (overrides detection).")
@click.option("--launch-command", default=None, help="The server's launch command, if not local.")
@click.option("--run-card", type=click.Path(dir_okay=False), default=None,
              help="YAML with hardware/engine/model fields, launch_command, notes, submitter.")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Run directory.")
@click.option("--resume", type=click.Path(file_okay=False), default=None,
              help="Continue a run directory: re-run only missing or unfinished cells.")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
def run_cmd(**kw) -> None:
    """Sweep the matrix against a running server and write a run directory."""
    api_key = kw["api_key"] or os.environ.get("OPENAI_API_KEY") or None
    try:
        settings = Settings(
            duration_s=_positive(kw["duration"], "--duration"),
            max_output=parse_tokens(kw["max_output"], "--max-output"),
            prefill_repeats=kw["prefill_repeats"],
            warmup_timeout_s=_positive(kw["warmup_timeout"], "--warmup-timeout"),
            stall_timeout_s=_positive(kw["stall_timeout"], "--stall-timeout"),
            ttft_timeout_s=_positive(kw["ttft_timeout"], "--ttft-timeout"),
            stable_s=max(0.0, kw["warmup_stable"]),
        )
        opts = RunOptions(
            base_url=kw["base_url"], api_key=api_key, model=kw["model"],
            contexts=parse_contexts(kw["contexts"]),
            concurrency=parse_concurrency(kw["concurrency"]),
            prefill_contexts=parse_contexts(kw["prefill_contexts"]),
            prefill=not kw["no_prefill"],
            kv_budget=parse_tokens(kw["kv_budget"], "--kv-budget") if kw["kv_budget"] else None,
            settings=settings, launch_command=kw["launch_command"],
            run_card=_run_card(kw["run_card"]),
            out=Path(kw["out"]) if kw["out"] else None,
            resume=Path(kw["resume"]) if kw["resume"] else None, dry_run=kw["dry_run"],
            server_wait_s=max(0.0, kw["server_wait"]),
        )
        run_dir = run_benchmark(opts, Progress())
    except (PlanError, RunError) as exc:
        fail(redact(str(exc), [api_key or ""]))
    except ValueError as exc:  # e.g. a malformed --base-url
        fail(redact(str(exc), [api_key or ""]), 2)
    if run_dir is not None:
        click.echo(str(run_dir))


def _positive(value: float, flag: str) -> float:
    if value <= 0:
        raise PlanError(f"{flag}: expected a positive number, got {value}")
    return value


def _run_card(path: str | None) -> dict:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError(f"--run-card: cannot read {path}: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise PlanError(f"--run-card: {path}: expected a mapping at the top level")
    allowed = {"hardware", "engine", "model", "launch_command", "notes", "submitter"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise PlanError(f"--run-card: {path}: unknown field {unknown[0]!r} "
                        f"(expected {', '.join(sorted(allowed))})")
    return data


def _register_optional() -> None:
    try:
        from bench.importer.cli import import_cmd
    except ImportError:
        return
    main.add_command(import_cmd, "import")


_register_optional()

if __name__ == "__main__":
    main()
