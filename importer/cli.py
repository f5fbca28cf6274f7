"""The ``bench import`` command (added to the ``bench`` group in ``bench/cli.py``).

Why errors look the way they do: a failed import prints one line,
``error: FILE:LINE: what is wrong``, exits non-zero and writes nothing, so it
reads like a compiler error and scripts can stop on it.
"""

from __future__ import annotations

from pathlib import Path

import click

from importer.copyrun import import_run_dir
from importer.llmbench import import_json_file
from importer.llmbench_read import JsonImportError, is_json_file
from importer.parse import PageError
from importer.peers import PeerFormatError, sniff_format
from importer.peers.folder import plan, runs_of, write_runs
from importer.peers.load import LoadError
from importer.peers.setup import DeclaredSetup, SetupError, combine, from_flags, from_run_dir
from importer.write import TargetError, import_file
from rundir.clierrors import EXIT_FAILED, fail
from rundir.contract import ContractError
from rundir.redact import redact


def _fail(message: str) -> None:
    """One line; redacted, since a parse error may quote the page's text."""
    fail(redact(message), EXIT_FAILED)


@click.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data"),
    show_default=True,
    help="Folder that receives the run directory <run_id>/ (not the run directory itself).",
)
@click.option("--concurrency", type=int, default=None,
              help="A tool run's closed-loop concurrency, where its file does not say it.")
@click.option("--rate", type=float, default=None,
              help="A tool run's offered request rate (req/s), where its file does not say it.")
@click.option("--input-tokens", "input_tokens", type=int, default=None,
              help="A tool run's prompt length, where neither its file nor its requests say it.")
@click.option("--setup-from", "setup_from", type=click.Path(path_type=Path), default=None,
              help="One of our run directories of the same server: its hardware, engine and model "
                   "facts are recorded (as declared) in the imported tool run.")
@click.option("--hardware", default=None, help="A tool run's GPU (or hardware) name, declared.")
@click.option("--gpu-count", "gpu_count", type=int, default=None, help="How many of --hardware.")
@click.option("--engine", default=None, help="A tool run's engine, NAME or NAME=VERSION, declared.")
@click.option("--model", default=None,
              help="A tool run's model display name, declared (the tool's own name stays the served name).")
def import_cmd(path: Path, out: Path, concurrency: int | None, rate: float | None,
               input_tokens: int | None, setup_from: Path | None, hardware: str | None, gpu_count: int | None,
               engine: str | None, model: str | None) -> None:
    """Import PATH as a run directory: another benchmark tool's output (AIPerf,
    vllm bench serve, SGLang, guidellm, inference-perf, MLPerf Endpoints: those
    importer.peers reads), a published Speed test matrix page saved as text, an
    llm-inference-bench JSON report (benchmark_results.json), or a run directory
    from elsewhere (copied whole to OUT/<run_id>/, validated first).

    The kind is told from the content, not the extension: a file starting with
    '{' is read as the tool's JSON. The run id is derived from the measurements
    (the published numbers and when they were measured), so importing the same
    source again, saved another way or from another folder, is a no-op that
    names the run directory already holding it, under whatever id; a folder
    holding a different run is never overwritten. A run directory is already
    there when a folder under OUT holds its run id with the same files (or, for
    an imported run, the same source). The JSON is kept, redacted, under the
    run's raw/. Prints the run directory's path.

    A folder that is not a run directory is searched (recursively) for tool
    files: one tool run's several exports become one run at the richest tier;
    one line per run written and per file skipped. The load and setup flags
    apply to tool files only.
    """
    try:
        setup = combine(from_run_dir(setup_from) if setup_from is not None else None,
                        from_flags(hardware, gpu_count, engine, model))
    except SetupError as exc:
        _fail(str(exc))
        return
    tool_flags = setup is not None or concurrency is not None or rate is not None \
        or input_tokens is not None
    if path.is_dir() and not (path / "run.yaml").is_file() \
            and _import_folder(path, out, concurrency, rate, input_tokens, setup):
        return  # else: no tool file in it, so it is read as a run directory (and refused as one)
    try:
        sniffed = None if path.is_dir() else sniff_format(path)
        if tool_flags and sniffed is None:
            _fail(f"{path}: --concurrency, --rate, --input-tokens and the setup flags are for another "
                  "tool's files; "
                  "this is not one a tool reader recognises")
            return
        if path.is_dir():
            result = import_run_dir(path, out)
        elif sniffed is not None:  # another benchmark tool's output, told by its content
            results = write_runs(runs_of(path, concurrency, rate, sniffed, input_tokens), out, setup)
            for extra in results[1:]:
                click.echo(f"{extra.path}" + (f": {extra.message()}" if extra.message() else ""))
            result = results[0]
        elif is_json_file(path):
            result = import_json_file(path, out)
        else:
            result = import_file(path, out)
    except PeerFormatError as exc:
        _fail(exc.located(path))
        return
    except LoadError as exc:
        _fail(str(exc))
        return
    except JsonImportError as exc:
        _fail(f"{path}: {exc}")
        return
    except PageError as exc:
        _fail(f"{path}:{exc.line}: {exc.message}" if exc.line else f"{path}: {exc.message}")
        return
    except TargetError as exc:
        _fail(str(exc))
        return
    except ContractError as exc:  # a run directory that does not read under the contract
        _fail(" ".join(str(exc).split()))
        return
    except OSError as exc:
        _fail(f"{exc.filename or path}: {exc.strerror or exc}")
        return
    click.echo(str(result.path))
    line = result.message()
    if line is not None:
        click.echo(line, err=True)


def _import_folder(folder: Path, out: Path, concurrency: int | None, rate: float | None,
                   input_tokens: int | None, setup: DeclaredSetup | None) -> bool:
    """Every tool file under folder: one line per run and per file skipped; non-zero exit
    when a recognised file did not read or did not write (nothing of it is written).
    False, printing nothing, when no file in it is a tool's."""
    todo, skipped = plan(folder, concurrency, rate, input_tokens)
    failed = [s for s in skipped if s.error]
    if not todo and not failed:
        return False
    for runs in todo:
        try:
            for result in write_runs(runs, out, setup):
                line = result.message()
                click.echo(f"{result.path} (from {runs[0].source_file})" + (f": {line}" if line else ""))
        except (PeerFormatError, TargetError, OSError) as exc:
            msg = exc.located(runs[0].source_file) if isinstance(exc, PeerFormatError) else f"{exc}"
            click.echo(f"error: {redact(' '.join(msg.split()))}", err=True)
            failed.append(exc)  # type: ignore[arg-type]
    for outcome in skipped:
        if outcome.error:
            click.echo(f"error: {redact(' '.join(outcome.error.split()))}", err=True)
        else:
            click.echo(outcome.line())
    if failed:
        raise SystemExit(EXIT_FAILED)
    return True


if __name__ == "__main__":  # pragma: no cover - `python -m importer.cli`
    import_cmd()
