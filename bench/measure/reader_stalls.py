"""A collector process that stopped reading, found in its own streams' stamps (pure).

Why: with `--workers N` each process reads its share of a cell's streams,
and one that freezes (SIGSTOP, swapped out, a long GC) leaves its streams
silent while the others run: the cell's stall check, which looks for a
silence of every stream, never sees it, and with kernel receive stamps on
every read the delay rule is not asked (bench/measure/monitor.py). Its stamps still
show it: a silence of all its streams that ends in a backlog, the tokens
the server kept sending arriving together when reading resumed (read-time
stamps, or one kernel stamp for the lot), a stall the server never had,
drawn in the cell's time-between-tokens distribution. A frozen server
resumes at its own pace and brings no backlog.

So each process's streams (request ids name it: `<tag>-w<k>-<n>`; the rest
were read by the judging process) are searched as the cell's stall check
searches the whole cell (rundir/decode_checks.py: a silence counted from the
window's start and to its end, ended by at least half the tokens the
window's rate would have delivered in it), over max(1 s, 10 × the median gap
between its token arrivals): the stall check's limit without its 5% of the
window, which lets a long window average a server's hiccup away, while a
collector's stall drawn as the server's is as wrong in a long window as in
a short one. Each one found makes the cell client-bound, naming the process,
how long and from when. One process is the whole cell: its silence ending in
a backlog is the one the stall check leaves to the client-bound flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from bench.measure.figure_bound import FigureBound
from rundir import decode_checks
from rundir.metrics import Chunks, window_scan

_PROCESS = re.compile(r"-w(\d+)(?:g(\d+))?-\d+$")


def process_of(request_id: str) -> str:
    """Which process read a request: "shard 2" (its 3rd start: "shard 2 (start 3)"),
    or "" for the judging process itself."""
    m = _PROCESS.search(request_id)
    if m is None:
        return ""
    return f"shard {m.group(1)}" + (f" (start {m.group(2)})" if m.group(2) else "")


@dataclass(frozen=True)
class ReaderStall(FigureBound):
    """A process that stopped reading its streams inside the window: always
    worth saying (the silence is past what a server may fall silent)."""

    text: str = ""

    @property
    def visible(self) -> bool:
        return True

    def describe(self) -> str:
        return self.text


def _stall_of(chunks: Chunks, start_ns: int,
              end_ns: int) -> tuple[int, int, int, int, int] | None:
    """The longest silence of these streams in the window that ends in a
    backlog: (length, start, limit, the burst's span: ns; tokens in the
    burst), or None."""
    w = window_scan(chunks, start_ns, end_ns)
    if not len(w.chunk_ns):
        return None
    gaps = decode_checks.token_gaps_ns(chunks, start_ns, end_ns)
    limit = int(max(decode_checks.STALL_MIN_NS,
                    decode_checks.STALL_GAP_MULTIPLE * float(np.median(gaps))))
    starts = start_ns + np.concatenate(([0], np.cumsum(gaps)[:-1]))
    rate = w.output_tokens / max(1, end_ns - start_ns)
    span = int(max(decode_checks.BACKLOG_SPAN_NS,
                   decode_checks.STALL_GAP_MULTIPLE * float(np.median(gaps))))
    found = None
    for i in np.flatnonzero(gaps > limit):
        at, length = int(starts[i]), int(gaps[i])
        if not decode_checks.ends_in_backlog(chunks, at, length, rate, span):
            continue
        if found is None or length > found[0]:
            arrivals = chunks.chunk_ns
            after = arrivals[arrivals >= at + length]
            burst = (arrivals >= after.min()) & (arrivals <= after.min() + span)
            found = (length, at, limit, span, int(chunks.tokens[burst].sum()))
    return found


def reader_stalls(chunks: Chunks, request_ids: list[str], start_ns: int,
                  end_ns: int) -> list[FigureBound]:
    """Every process whose streams (`chunks`, the cell's measured requests,
    `request_ids` aligned) stopped being read inside [start_ns, end_ns]."""
    by_process: dict[str, list[int]] = {}
    for i, rid in enumerate(request_ids):
        by_process.setdefault(process_of(rid), []).append(i)
    out: list[FigureBound] = []
    for name, rows in sorted(by_process.items()):
        stall = _stall_of(chunks.subset(np.array(rows)), start_ns, end_ns)
        if stall is None:
            continue
        length, at, limit, span, burst = stall
        who = f"{name}'s {len(rows)} streams" if name else f"its {len(rows)} streams"
        out.append(ReaderStall(
            "reading", length / 1e6, limit / 1e6, " ms",
            text=(f"the collector stopped reading {who} for {length / 1e9:.2f} s from "
                  f"{(at - start_ns) / 1e9:.1f} s into the window (a server may fall "
                  f"silent {limit / 1e9:.1f} s), then read {burst:,} tokens within "
                  f"{span / 1e6:.0f} ms: what the server sent meanwhile had waited, so the "
                  "time between tokens there is the collector's, not the server's")))
    return out
