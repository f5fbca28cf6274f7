"""One writer per run directory: an exclusive lock held for the whole run.

Why: two `bench run` on the same `--out` (or `--resume`) would each rewrite
every file after every cell, and the last to flush silently wins. The lock
is `fcntl.flock` on a file inside the run directory, so the kernel releases
it when the holder exits, however it exits: a killed writer never leaves a
stale lock behind. The file holds the holder's pid, for the message the
second writer prints. It stays in place (unlinking a lock file races with
the next taker); the builder reads only the contract's files and ignores it.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".bench.lock"


class LockHeld(RuntimeError):
    """Another process holds the run directory; the message is one line."""


class RunLock:
    """`with RunLock(run_dir):` holds the run directory exclusively."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock at once or raise LockHeld naming the holder's pid;
        the run directory must exist."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_pid(fd)
                os.close(fd)
                raise LockHeld(
                    f"{self.run_dir} is in use by another `bench run` (pid {holder}); "
                    "wait for it to finish or stop it first"
                ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # no pid of a process that no longer holds it
        except OSError:
            pass
        os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"
