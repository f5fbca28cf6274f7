"""Sanity checks of a measured decode cell (pure): is the window's number
one number, or a frozen server averaged with a running one? And can the
server's answers carry a decode figure at all: streams that end 'length'
before max_tokens, no stream with a second token, a chunk count nothing
confirmed?

Both halves run them on the same raw data: the collector to judge a cell
while it runs, the builder so that a run written by an older collector (or
by hand) cannot publish a figure the checks would have refused. The rules
are stated in docs/methodology.md ("Stalls and consistency", "Counting tokens").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from rundir.contract import COUNT_CHUNKS_UNVERIFIED, COUNT_PEER_SPREAD
from rundir.metrics import Chunks, DecodeMetrics, window_scan

STALL_MIN_NS = 1_000_000_000  # a silence this long is never normal token spacing
STALL_WINDOW_SHARE = 0.05  # ... nor one this large a share of the window
STALL_GAP_MULTIPLE = 10  # ... nor this many times the cell's usual spacing
CONSISTENCY_TOLERANCE = 0.25  # |total − rate × producing| / (rate × producing)
# A silence the collector caused (it stopped reading) ends in a backlog: the tokens
# the server kept sending waited in the socket and arrive together. One ended by at
# least this share of what the window's rate would have delivered in the silence,
# within BACKLOG_SPAN of its end, was not the server's.
BACKLOG_SHARE = 0.5
BACKLOG_SPAN_NS = 100_000_000  # (or 10 × the median gap, when that is longer)
# A request's token count may differ this much from the server's own count of
# it (its final usage, or max_tokens for a 'length' finish) before it is refused.
COUNT_TOLERANCE = 0.005


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


def _no_silence_over_limit(arrivals: np.ndarray, start_ns: int, end_ns: int) -> bool:
    """True when, without sorting, the window is known to hold no silence longer
    than stall_limit_ns (so stall_problem finds none); False: not known, sort.

    The median of the n + 1 gaps (summing to the window) is at most the window
    / ((n + 1) // 2): when 10 × that stays below the other two terms, the limit
    L is theirs. A silence longer than L >= 2h contains a whole bucket
    [start + k h, start + (k + 1) h) of the window, which then holds no
    arrival; so if every whole bucket holds one, no silence exceeds L."""
    duration = end_ns - start_ns
    floor = max(STALL_MIN_NS, STALL_WINDOW_SHARE * duration)
    median_bound = duration / max(1, (len(arrivals) + 1) // 2)
    if not STALL_GAP_MULTIPLE * median_bound * (1 + 1e-9) < floor:
        return False
    half = int(floor) // 2
    whole = duration // half  # buckets lying wholly inside the window
    if whole < 1 or whole > 1_000_000:
        return False
    # Every bucket holding an arrival of a sample (every 16th) holds one of all.
    for step in (16, 1) if len(arrivals) > 64 * whole else (1,):
        bucket = arrivals[::step] - start_ns
        bucket //= half
        seen = np.zeros(whole + 1, dtype=bool)
        seen[np.minimum(bucket, whole)] = True
        if seen[:whole].all():
            return True
    return False


def stall_problem(chunks: Chunks, start_ns: int, end_ns: int) -> str | None:
    """A stretch of the window in which no token reached any stream, unless
    it ends in the backlog of a collector that stopped reading (its own stall,
    which the client-bound flag reports)."""
    w = window_scan(chunks, start_ns, end_ns)
    if not len(w.chunk_ns):
        return None  # no token at all: the caller says so in its own words
    if _no_silence_over_limit(w.chunk_ns, start_ns, end_ns):
        return None  # the usual case, settled without sorting every arrival
    gaps = token_gaps_ns(chunks, start_ns, end_ns)
    limit = stall_limit_ns(end_ns - start_ns, gaps)
    starts = start_ns + np.concatenate(([0], np.cumsum(gaps)[:-1]))
    rate = w.output_tokens / max(1, end_ns - start_ns)
    span = int(max(BACKLOG_SPAN_NS, STALL_GAP_MULTIPLE * float(np.median(gaps))))
    stalls = [(int(gaps[i]), int(starts[i])) for i in np.flatnonzero(gaps > limit)
              if not ends_in_backlog(chunks, int(starts[i]), int(gaps[i]), rate, span)]
    if not stalls:
        return None
    longest, at = max(stalls)
    return (f"the server stalled: no token reached any stream for {longest / 1e9:.1f} s "
            f"inside the window (from {(at - start_ns) / 1e9:.1f} s; limit {limit / 1e9:.1f} s)")


def consistency_problem(m: DecodeMetrics) -> str | None:
    """Total tok/s must agree with the streams' rate × the streams that were
    receiving tokens (first token to end, time-weighted): both describe the
    same streams over the same window. The rate is pooled (every stream's
    tokens after its first over all their timed spans), not the published
    median: a server whose requests run at different speeds (a slow tail) is
    consistent, and only time the count says streams were receiving tokens
    but none came (a stream stuck while the others run) is not. Requests
    being prefilled or restarted are left out of that count on purpose: they
    are active on the server but deliver nothing yet (a 1 s prompt per 2 s
    answer legitimately makes the total a third below rate × active)."""
    producing = m.avg_active_client
    rate = m.pooled_tok_s if m.pooled_tok_s is not None else m.per_request_tok_s
    if rate is None or producing <= 0:
        return None
    expected = rate * producing
    if expected <= 0 or abs(m.total_tok_s - expected) <= CONSISTENCY_TOLERANCE * expected:
        return None
    return (f"inconsistent figures: total {m.total_tok_s:.1f} tok/s against "
            f"{rate:.1f} tok/s a stream × {producing:.2f} streams receiving tokens = "
            f"{expected:.1f} (off by more than {CONSISTENCY_TOLERANCE:.0%})")


def decode_problems(chunks: Chunks, start_ns: int, end_ns: int, m: DecodeMetrics,
                    client_bound: bool | None = False) -> list[str]:
    """Every reason the cell's figures cannot be published as measured.

    The stall check always runs: a silence the collector caused ends in a
    backlog and is not counted (stall_problem), so a server that froze is
    named even when the busy host also flagged the cell client-bound. The
    consistency check is left to that flag: a collector that cannot keep up
    makes TCP merge what waited under later stamps, a skew the server did
    not cause. `client_bound` None means the flag was never recorded (a
    collector older than it): whether that collector kept up is unknown, so
    the consistency check is not run either; the builder refutes a stored
    status only with checks whose inputs it has, as the collector had them."""
    unknown = client_bound is None
    found = [no_decode_problem(m), stall_problem(chunks, start_ns, end_ns),
             None if unknown or client_bound else consistency_problem(m)]
    return [p for p in found if p]


def no_decode_problem(m: DecodeMetrics) -> str | None:
    """A decode rate needs a stream with two token chunks inside the window:
    without one there is no per-request rate or time between tokens, and a
    total made of first tokens (streams that end after one) is no decode figure."""
    if m.per_request_tok_s is not None:
        return None
    return ("no stream received a second token inside the window: "
            "no decode rate (per-request tok/s, time between tokens) to publish")


def _tokens_span(values: np.ndarray) -> str:
    lo, hi = int(values.min()), int(values.max())
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def length_problem(finish: Sequence[str | None], tokens: np.ndarray, completed: np.ndarray,
                   max_tokens: int | np.ndarray | None) -> str | None:
    """Completed requests that ended 'length' short of max_tokens: the server
    cannot have reached the limit, so either it stopped for another reason and
    said 'length', or the tokens were counted wrong (several per chunk).
    `max_tokens`: the cell's, or per request what each asked (a length mix)."""
    if max_tokens is None or not len(tokens):
        return None
    asked = np.broadcast_to(np.asarray(max_tokens, dtype=np.int64), tokens.shape)
    length = completed & (np.asarray(finish, dtype=object) == "length") & (asked > 0)
    early = length & (tokens < asked * (1 - COUNT_TOLERANCE))
    if not early.any():
        return None
    return (f"{int(early.sum())} of {int(completed.sum())} completed requests ended 'length' "
            f"after {_tokens_span(tokens[early])} of max_tokens {_tokens_span(asked[early])} tokens: "
            "short of max_tokens (a full context per slot, or a wrong count or finish)")


def stop_note(finish: Sequence[str | None], tokens: np.ndarray, completed: np.ndarray) -> str | None:
    """Completed requests that ended 'stop' although ignore_eos was asked: the
    server ignored it, so streams restart sooner than the cell planned. The
    tokens they sent are real (the figures stand); the reason says so."""
    stop = completed & (np.asarray(finish, dtype=object) == "stop")
    if not stop.any():
        return None
    return (f"{int(stop.sum())} of {int(completed.sum())} completed requests ended 'stop' "
            f"after {_tokens_span(tokens[stop])} tokens although ignore_eos was asked")


def counting_problem(token_counting: str | None) -> str | None:
    """A cell whose chunk count nothing confirmed has no figure to publish
    (docs/methodology.md, "Counting tokens"); older values are read as written."""
    if token_counting == COUNT_PEER_SPREAD:
        return ("token count not verified: the imported tool kept only each request's total, "
                "spread over its chunks by rule, and the total differs from the chunks")
    if token_counting != COUNT_CHUNKS_UNVERIFIED:
        return None
    return ("token count not verified: one token per text chunk, and neither the server's "
            "usage nor its tokenizer confirmed it")


def request_tokens(chunks: Chunks) -> np.ndarray:
    """Per request, its cumulative token count after its last chunk (0: none)."""
    off = chunks.starts()
    out = np.zeros(chunks.n_requests, dtype=np.int64)
    has = off[1:] > off[:-1]
    out[has] = chunks.cum[off[1:][has] - 1]
    return out


def stored_problems(requests: pa.Table, chunks: Chunks, completed: np.ndarray,
                    token_counting: str | None, max_tokens: int | None) -> list[str]:
    """The count and finish checks the collector ran, from what a run
    directory stores: a decode cell's measure requests (requests.parquet rows,
    their `chunks`), its `token_counting`, and run.yaml's max_output_tokens,
    or per request its `output_target` where the run drew lengths."""
    finish = (requests.column("finish_reason").to_numpy(zero_copy_only=False)
              if len(requests) and max_tokens else [])  # only length_problem reads it
    asked: int | np.ndarray | None = max_tokens
    if max_tokens and len(requests) and "output_target" in requests.column_names \
            and requests.column("output_target").null_count < len(requests):
        asked = requests.column("output_target").fill_null(max_tokens).to_numpy()
    found = [counting_problem(token_counting),
             length_problem(finish, request_tokens(chunks), completed, asked)]
    return [p for p in found if p]
