"""The ``bench import`` command (registered in ``bench/cli.py`` as ``import_cmd``).

Why errors look the way they do: a failed import prints one line,
``error: FILE:LINE: what is wrong``, exits non-zero and writes nothing, so it
reads like a compiler error and scripts can stop on it.
"""

from __future__ import annotations

from pathlib import Path

import click

from bench.importer.parse import PageError
from bench.importer.write import TargetError, import_file
from bench.redact import redact


def _fail(message: str) -> None:
    """One line; redacted, since a parse error may quote the page's text."""
    click.echo(f"error: {redact(message)}", err=True)
    raise click.exceptions.Exit(1)


@click.command("import")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data"),
    show_default=True,
    help="Folder that receives the run directory <run_id>/ (not the run directory itself).",
)
def import_cmd(path: Path, out: Path) -> None:
    """Import a published Speed test matrix page saved as text (PATH) as a run directory.

    The run id is derived from the page's content, so importing the same page
    again is a no-op; a folder holding a different run is never overwritten.
    Prints the run directory's path.
    """
    try:
        result = import_file(path, out)
    except PageError as exc:
        _fail(f"{path}:{exc.line}: {exc.message}" if exc.line else f"{path}: {exc.message}")
        return
    except TargetError as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(f"{exc.filename or path}: {exc.strerror or exc}")
        return
    click.echo(str(result.path))
    if not result.created:
        click.echo(f"{result.path}: already imported, unchanged", err=True)


if __name__ == "__main__":  # pragma: no cover - `python -m bench.importer.cli`
    import_cmd()
