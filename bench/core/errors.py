"""The errors that end a run with one line (bench/cli.py words the exit)."""

from __future__ import annotations

from pathlib import Path


class RunError(RuntimeError):
    """Ends the run with one line for the user (exit status 1)."""


class FlagError(RunError):
    """Flags that contradict each other or the resumed run (exit status 2)."""


def io_reason(exc: Exception, run_dir: Path) -> str:
    """One line for a failed write: the file and the system's reason."""
    if isinstance(exc, OSError) and exc.strerror:
        name = f"{exc.filename}: " if exc.filename else f"{run_dir}: "
        return f"{name}{exc.strerror}"
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"{run_dir}: {first}"
