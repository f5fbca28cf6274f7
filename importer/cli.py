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
from importer.peers.write import write_peer_run
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
def import_cmd(path: Path, out: Path) -> None:
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
    """
    try:
        sniffed = None if path.is_dir() else sniff_format(path)
        if path.is_dir():
            result = import_run_dir(path, out)
        elif sniffed is not None:  # another benchmark tool's output, told by its content
            result = write_peer_run(sniffed[1](path), out)
        elif is_json_file(path):
            result = import_json_file(path, out)
        else:
            result = import_file(path, out)
    except PeerFormatError as exc:
        _fail(exc.located(path))
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


if __name__ == "__main__":  # pragma: no cover - `python -m importer.cli`
    import_cmd()
