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


def token_gaps_ns(chunks: Chunks, start_ns: int, end_ns: int) -> np.ndarray:
    """Gaps between consecutive token arrivals in the window, any stream,
    counting from the window's start and to its end."""
    w = window_scan(chunks, start_ns, end_ns)
    points = np.concatenate(([start_ns], np.sort(w.ns), [end_ns])).astype(np.int64)
    return np.diff(points)


def stall_limit_ns(duration_ns: int, gaps_ns: np.ndarray) -> int:
    """The longest silence a healthy cell may show: max(1 s, 5% of the
    window, 10 × the median gap between token arrivals)."""
    typical = float(np.median(gaps_ns)) if len(gaps_ns) else 0.0
    return int(max(STALL_MIN_NS, STALL_WINDOW_SHARE * duration_ns, STALL_GAP_MULTIPLE * typical))


def stall_problem(chunks: Chunks, start_ns: int, end_ns: int) -> str | None:
    """A stretch of the window in which no token reached any stream."""
    gaps = token_gaps_ns(chunks, start_ns, end_ns)
    if len(gaps) < 2:
        return None  # no token at all: the caller says so in its own words
    longest = int(gaps.max())
    limit = stall_limit_ns(end_ns - start_ns, gaps)
    if longest <= limit:
        return None
    at = float(np.argmax(gaps))
    offset_s = float(np.concatenate(([0], np.cumsum(gaps)))[int(at)]) / 1e9
    return (f"the server stalled: no token reached any stream for {longest / 1e9:.1f} s "
            f"inside the window (from {offset_s:.1f} s; limit {limit / 1e9:.1f} s)")


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

    A client-bound cell (the collector could not keep up) is left to that
    flag: a collector that stops reading makes TCP merge what waited under
    later stamps, a silence and a skew the server did not cause."""
    if client_bound:
        return []
    found = [stall_problem(chunks, start_ns, end_ns), consistency_problem(m)]
    return [p for p in found if p]
