"""One writer per run directory: an exclusive lock held for the whole run.

Why: two `bench run` on the same `--out` (or `--resume`) would each rewrite
every file after every cell, and the last to flush silently wins. The lock
is `fcntl.flock` on a file inside the run directory, so the kernel releases
it when the holder exits, however it exits: a killed writer never leaves a
stale lock behind. The file holds the holder's pid, for the message the
second writer prints. The holder removes it when it lets go, so a finished
run leaves no empty `.bench.lock` behind (issue 32); removing it while still
holding the lock is safe because a taker checks, once it holds a lock, that
the file it locked is still the one at the path, and starts again if not
(the builder reads only the contract's files and ignores it either way).
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
        while True:
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
            if _still_there(fd, self.path):
                break
            os.close(fd)  # its holder removed it as we opened it: take the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.unlink(self.path)  # still held: a taker that opened it sees it gone
        except OSError:
            try:
                os.ftruncate(fd, 0)  # kept: no pid of a process that no longer holds it
            except OSError:
                pass
        os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _still_there(fd: int, path: Path) -> bool:
    """Whether the locked descriptor is still the file at `path`."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"
