"""Sanity checks of a measured decode cell (pure): is the window's number
one number, or a frozen server averaged with a running one?

Both halves run them on the same raw data: the collector to judge a cell
while it runs, the builder so that a run written by an older collector (or
by hand) cannot publish a figure the checks would have refused. The rules
are stated in docs/methodology.md ("Stalls and consistency").
"""

from __future__ import annotations

import numpy as np

from rundir.metrics import Chunks, DecodeMetrics, window_scan

STALL_MIN_NS = 1_000_000_000  # a silence this long is never normal token spacing
STALL_WINDOW_SHARE = 0.05  # ... nor one this large a share of the window
STALL_GAP_MULTIPLE = 10  # ... nor this many times the cell's usual spacing
CONSISTENCY_TOLERANCE = 0.25  # |total − per-request × producing| / (per-request × producing)
# A silence the collector caused (it stopped reading) ends in a backlog: the tokens
# the server kept sending waited in the socket and arrive together. One ended by at
# least this share of what the window's rate would have delivered in the silence,
# within BACKLOG_SPAN of its end, was not the server's.
BACKLOG_SHARE = 0.5
BACKLOG_SPAN_NS = 100_000_000  # (or 10 × the median gap, when that is longer)


def token_gaps_ns(chunks: Chunks, start_ns: int, end_ns: int) -> np.ndarray:
    """Gaps between consecutive token arrivals in the window, any stream,
    counting from the window's start and to its end."""
    w = window_scan(chunks, start_ns, end_ns)
    points = np.concatenate(([start_ns], np.sort(w.chunk_ns), [end_ns])).astype(np.int64)
    return np.diff(points)


def stall_limit_ns(duration_ns: int, gaps_ns: np.ndarray) -> int:
    """The longest silence a healthy cell may show: max(1 s, 5% of the
    window, 10 × the median gap between token arrivals)."""
    typical = float(np.median(gaps_ns)) if len(gaps_ns) else 0.0
    return int(max(STALL_MIN_NS, STALL_WINDOW_SHARE * duration_ns, STALL_GAP_MULTIPLE * typical))


def ends_in_backlog(chunks: Chunks, silence_start_ns: int, silence_ns: int,
                    rate_tok_per_ns: float, span_ns: int) -> bool:
    """Whether the tokens arriving right after a silence (any stream, inside
    or after the window) make up the backlog a server that kept sending would
    leave: at least BACKLOG_SHARE of silence × the window's rate."""
    arrivals = chunks.chunk_ns
    after = arrivals[arrivals >= silence_start_ns + silence_ns]
    if not len(after):
        return False
    first = int(after.min())
    burst = (arrivals >= first) & (arrivals <= first + span_ns)
    return float(chunks.tokens[burst].sum()) >= BACKLOG_SHARE * silence_ns * rate_tok_per_ns


def stall_problem(chunks: Chunks, start_ns: int, end_ns: int) -> str | None:
    """A stretch of the window in which no token reached any stream, unless
    it ends in the backlog of a collector that stopped reading (its own stall,
    which the client-bound flag reports)."""
    gaps = token_gaps_ns(chunks, start_ns, end_ns)
    if len(gaps) < 2:
        return None  # no token at all: the caller says so in its own words
    limit = stall_limit_ns(end_ns - start_ns, gaps)
    starts = start_ns + np.concatenate(([0], np.cumsum(gaps)[:-1]))
    rate = window_scan(chunks, start_ns, end_ns).output_tokens / max(1, end_ns - start_ns)
    span = int(max(BACKLOG_SPAN_NS, STALL_GAP_MULTIPLE * float(np.median(gaps))))
    stalls = [(int(gaps[i]), int(starts[i])) for i in np.flatnonzero(gaps > limit)
              if not ends_in_backlog(chunks, int(starts[i]), int(gaps[i]), rate, span)]
    if not stalls:
        return None
    longest, at = max(stalls)
    return (f"the server stalled: no token reached any stream for {longest / 1e9:.1f} s "
            f"inside the window (from {(at - start_ns) / 1e9:.1f} s; limit {limit / 1e9:.1f} s)")


def consistency_problem(m: DecodeMetrics) -> str | None:
    """Total tok/s must agree with per-request tok/s × the streams that were
    receiving tokens (first token to end, time-weighted): both describe the
    same streams over the same window. Requests being prefilled or restarted
    are left out of that count on purpose: they are active on the server but
    deliver nothing yet (a 1 s prompt per 2 s answer legitimately makes the
    total a third below per-request × active)."""
    producing = m.avg_active_client
    if m.per_request_tok_s is None or producing <= 0:
        return None
    expected = m.per_request_tok_s * producing
    if expected <= 0 or abs(m.total_tok_s - expected) <= CONSISTENCY_TOLERANCE * expected:
        return None
    return (f"inconsistent figures: total {m.total_tok_s:.1f} tok/s against per-request "
            f"{m.per_request_tok_s:.1f} tok/s × {producing:.2f} streams receiving tokens = "
            f"{expected:.1f} (off by more than {CONSISTENCY_TOLERANCE:.0%})")


def decode_problems(chunks: Chunks, start_ns: int, end_ns: int, m: DecodeMetrics,
                    client_bound: bool = False) -> list[str]:
    """Every reason the cell's figures cannot be published as measured.

    The stall check always runs: a silence the collector caused ends in a
    backlog and is not counted (stall_problem), so a server that froze is
    named even when the busy host also flagged the cell client-bound. The
    consistency check is left to that flag: a collector that cannot keep up
    makes TCP merge what waited under later stamps, a skew the server did
    not cause."""
    found = [stall_problem(chunks, start_ns, end_ns),
             None if client_bound else consistency_problem(m)]
    return [p for p in found if p]
