"""The host's limits on one collector process: open files and memory.

Open files (`ulimit -n`) are checked before any stream is opened. Why: each
stream holds one socket, and a process may hold only RLIMIT_NOFILE open
files (1,024 by default on most Linux hosts). Past it, every connect fails
with EMFILE ("Too many open files") and a cell of 2,000 streams ends with
most of them failed, which reads as a server fault. The soft limit may be
raised up to the hard one without privileges, so the run raises it as far
as the largest cell needs; when even the hard limit is too small the run
stops before its first cell, in one line naming the limit and how to lift it.

Memory (`ulimit -v`) cannot be checked ahead: a MemoryError is worded here
(`out_of_memory`), in one line naming the limit, wherever the run meets it.
"""

from __future__ import annotations

import resource

# Files a collector process holds besides its streams: Python and its
# libraries, the run directory's writers, the metrics sampler's and
# telemetry's connections, a shard's pipes.
OVERHEAD_FILES = 64


def needed_files(streams: int) -> int:
    """Open files one process needs to hold `streams` streams at once."""
    return streams + OVERHEAD_FILES


def ensure_open_files(streams: int, what: str) -> str | None:
    """Raise this process's soft RLIMIT_NOFILE to what `streams` need.

    Returns a line saying it was raised (None if it already sufficed);
    ValueError (one line naming `what`, the need and the limit) when the
    hard limit is too small."""
    need = needed_files(streams)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ValueError(
            f"{what} needs about {need:,} open files ({streams:,} streams + {OVERHEAD_FILES}) "
            f"but this process may open at most {hard:,} (ulimit -Hn): raise the limit "
            f"(ulimit -n {need}) or spread the streams over --workers / --shard hosts")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return f"Open files: the limit raised from {soft:,} to {need:,} for {what} (ulimit -n)"


def out_of_memory() -> str:
    """The one line for a MemoryError: which limit it met, when the process has one
    (`ulimit -v`: under 600 MB a run died with a bare traceback)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return "out of memory: the host has none left for this process"
    return (f"out of memory: this process may use at most {soft / 2**20:,.0f} MB of address "
            "space (ulimit -v); raise the limit, or spread the streams over --workers")
