"""How far the client's own delays could have moved each published figure of a
decode cell, read off the kernel receive stamps themselves (pure, numpy).

Why the stamps: a kernel receive stamp is the time the packet arrived, however
late the collector reads it, except that TCP merges packets waiting in a socket
and keeps the newest stamp. So every SSE event of one read carries that read's
stamp (bench/measure/stream.py, bench/measure/sse.py), and only the events that share a stamp
with a later event of the same stream can be earlier than their stamp: their
true arrival lies between the stream's previous distinct stamp (or the
request's send) and their stamp. Every other stamp is exact.

One exception, deliberately: events that follow a stream's last token chunk
(the final usage chunk, written right after it in the same step, as the
reference server does) do not make that last token uncertain; without it
every finished stream would look merged at its end. A server that sent the
usage chunk a token gap later would make this optimistic for the last
token. Events between tokens count.

From those intervals each figure gets bounds (rundir/metrics.py defines the
figures): total tok/s through the tokens whose interval straddles a window
edge; per-request tok/s and time between tokens through each request's first
and last in-window token chunks (interior ones cannot move them); TTFT through
each request's first token chunk; a median through the medians of the
per-request bounds; average active and completed requests through the read
delay of each stream's end (`end_ns` is when the collector read it, the true
end lies between its last stamp and then). The rule (bench/measure/monitor.py)
flags a figure whose bound exceeds half the step it is shown with
(rundir/words.py, site_builder/formats.py).

Every other published level of TTFT, time between tokens and per-request
tok/s (p90, p95, p99, p99.9: rundir/tails.py) is bounded the same way: a
percentile (linear interpolation, as numpy's) never falls when a sample
rises, so the level of the per-request lows and of the highs bracket it,
and a request that may or may not count is placed at either extreme. Each
bound names its level ("TTFT median", "TTFT p99"): a median can be exact
while a tail is not. A process that stopped reading its streams inside the
window is added too (bench/measure/reader_stalls.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.measure.figure_bound import FigureBound
from bench.measure.reader_stalls import reader_stalls
from rundir import metrics, tails
from rundir.contract import PURPOSE_MEASURE
from rundir.words import round_half_up


def tok_s_step(tok_s: float) -> float:
    """The step tok/s is shown with (rundir/words.py: 6,216.0; 17.6K; 1.2M)."""
    if tok_s < 9_999.95:
        return 0.1
    if tok_s < 999_950:
        return 100.0
    return 100_000.0


def ttft_step(ms: float) -> float:
    """TTFT: whole milliseconds, one decimal below 10 ms (rundir/words.py)."""
    return 0.1 if abs(round_half_up(ms, 1)) < 10 else 1.0


TBT_STEP_MS = 0.1  # site_builder/formats.py: one decimal at any size
AVERAGE_STEP = 0.1  # average active requests: one decimal
COUNT_STEP = 1.0


def earliest_arrival(chunks: metrics.Chunks) -> np.ndarray:
    """Per chunk, the earliest time it can truly have arrived (ns): its stamp,
    unless it shares the stamp with a later chunk of its stream up to the
    stream's last token chunk; then the stream's previous distinct stamp, or
    the request's send time when there is none."""
    stamps, off = chunks.chunk_ns, chunks.starts()
    n = len(stamps)
    out = stamps.copy()
    if n < 2:
        return out
    opens = np.zeros(n, dtype=bool)
    opens[off[:-1][off[1:] > off[:-1]]] = True  # a request's first chunk
    same = np.zeros(n, dtype=bool)
    np.equal(stamps[1:], stamps[:-1], out=same[1:])
    same &= ~opens  # same read as the chunk before
    cand = np.flatnonzero((chunks.tokens[:-1] > 0) & same[1:])  # token, a later chunk in its read
    if not len(cand):
        return out
    req = np.searchsorted(off, cand, side="right") - 1
    tok = np.flatnonzero(chunks.tokens > 0)
    last_tok = tok[np.searchsorted(tok, off[req + 1]) - 1]  # >= cand: cand is a token chunk
    cand, req = cand[cand + 1 <= last_tok], req[cand + 1 <= last_tok]
    heads = np.flatnonzero(~same)
    head = heads[np.searchsorted(heads, cand, side="right") - 1]  # first chunk of cand's read
    prev = np.where(opens[head], chunks.send_ns[req], stamps[np.maximum(head - 1, 0)])
    out[cand] = np.minimum(prev, stamps[cand])
    return out


def _median_bounds(lo: np.ndarray, hi: np.ndarray, maybe: int,
                   floor: float = 0.0) -> tuple[float, float]:
    """Bounds of a median whose members lie in [lo, hi], with `maybe` more
    values that may or may not belong (counted at the floor and at infinity:
    a median can only fall by adding a low value or rise by adding a high one)."""
    lo = np.concatenate((lo, np.full(maybe, floor)))
    hi = np.concatenate((hi, np.full(maybe, np.inf)))
    return float(np.median(lo)), float(np.median(hi))


def _moved(published: float, low: float, high: float) -> float:
    return max(published - low, high - published, 0.0)


def _percentile(values: np.ndarray, percent: float) -> float:
    """np.percentile (linear) of values that may hold inf: inf wherever the
    interpolation reaches an infinite sample (numpy would give NaN)."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    x = (len(v) - 1) * percent / 100
    i = int(math.floor(x))
    if i + 1 >= len(v):
        return float(v[-1])
    a, b, g = float(v[i]), float(v[i + 1]), x - i
    if g == 0 or a == b:
        return a
    return math.inf if math.isinf(b) else a + (b - a) * g


def _level_bounds(name: str, metric: tails.TailMetric, value: np.ndarray, low: np.ndarray,
                  high: np.ndarray, maybe: int, step: Callable[[float], float],
                  unit: str = "") -> list[FigureBound]:
    """The bound of every published level above the median (rundir/tails.py:
    shown only with enough samples) of a per-request figure whose published
    samples are `value`, each truly in [low, high], with `maybe` more
    requests that may belong (placed at 0 and at inf)."""
    low = np.concatenate((low, np.zeros(maybe)))
    high = np.concatenate((high, np.full(maybe, np.inf)))
    out = []
    for level in tails.LEVELS[1:]:
        if len(value) < tails.MIN_SAMPLES[level]:
            continue
        rank = metric.rank(level)
        published = float(np.percentile(value, rank))
        moved = _moved(published, _percentile(low, rank), _percentile(high, rank))
        out.append(FigureBound(name, moved, step(published), unit, level))
    return out


def figure_bounds(chunks: metrics.Chunks, start_ns: int, end_ns: int,
                  done: np.ndarray) -> list[FigureBound]:
    """The bound of every published decode figure of the window [start_ns,
    end_ns]; `done` marks the requests that finished normally (as for
    `rundir.metrics.decode_metrics`)."""
    s, e = int(start_ns), int(end_ns)
    dur_s = max(1, e - s) / 1e9
    stamps, tokens = chunks.chunk_ns, chunks.tokens
    low = earliest_arrival(chunks)
    out: list[FigureBound] = []
    # total tok/s: tokens that may be on the other side of an edge
    inwin = (stamps >= s) & (stamps <= e)
    total = float(tokens.sum(where=inwin)) / dur_s
    early = float(tokens.sum(where=inwin & (low < s)))
    late = float(tokens.sum(where=(stamps > e) & (low <= e)))
    out.append(FigureBound("total tok/s", max(early, late) / dur_s, tok_s_step(total)))
    pos = np.flatnonzero(tokens > 0)
    off = chunks.starts()
    a, b = np.searchsorted(pos, off[:-1]), np.searchsorted(pos, off[1:])
    if len(pos):
        out += _rate_bounds(stamps[pos], low[pos], np.cumsum(tokens[pos]), a, b, s, e)
        out += _ttft_bound(stamps[pos], low[pos], chunks.send_ns, a, b)
    out += _end_bounds(chunks, low, pos, a, b, s, e, np.asarray(done, dtype=bool))
    return out


def _rate_bounds(st: np.ndarray, lo: np.ndarray, cum: np.ndarray, a: np.ndarray,
                 b: np.ndarray, s: int, e: int) -> list[FigureBound]:
    """Per-request tok/s and time between tokens. Over each request's token
    chunks (stamps `st`, earliest arrivals `lo`, both ascending): the true first
    in-window chunk lies between the first stamped at or after s and the first
    surely after s, the true last between the last stamped by e and the last
    possibly by e; span and tokens follow."""
    last = len(st) - 1

    def count(flag: np.ndarray) -> np.ndarray:
        cs = np.concatenate(([0], np.cumsum(flag)))
        return cs[b] - cs[a]

    f, lst = a + count(st < s), a + count(st <= e) - 1
    f_max, l_max = a + count(lo < s), a + count(lo <= e) - 1
    fi, li = np.clip(f, 0, last), np.clip(lst, 0, last)
    fmi, lmi = np.clip(f_max, 0, last), np.clip(l_max, 0, last)
    span = (st[li] - st[fi]).astype(np.float64)
    toks = (cum[li] - cum[fi]).astype(np.float64)
    published = (f < b) & (lst > f) & (span > 0) & (toks > 0)
    span_max = (np.minimum(st[lmi], e) - np.maximum(lo[fi], s)).astype(np.float64)
    tok_max = (cum[lmi] - cum[fi]).astype(np.float64)
    possible = (f < b) & (l_max > f) & (span_max > 0) & (tok_max > 0)
    span_min = (lo[li] - st[fmi]).astype(np.float64)
    tok_min = (cum[li] - cum[fmi]).astype(np.float64)
    sure = (f_max < b) & (lst > f_max) & (span_min > 0) & (tok_min > 0)
    if not published.any():
        return []
    maybe = int((possible & ~published).sum())
    m, k = published, published & sure
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = toks[m] / span[m] * 1e9
        rate_lo = np.where(k[m], tok_min[m] / span_max[m] * 1e9, 0.0)
        rate_hi = np.where(k[m], tok_max[m] / span_min[m] * 1e9, np.inf)
        gap = span[m] / toks[m] / 1e6
        gap_lo = np.where(k[m], span_min[m] / tok_max[m] / 1e6, 0.0)
        gap_hi = np.where(k[m], span_max[m] / tok_min[m] / 1e6, np.inf)
    per_request = float(np.median(rate))
    tbt = float(np.median(gap))
    return [
        FigureBound("per-request tok/s",
                    _moved(per_request, *_median_bounds(rate_lo, rate_hi, maybe)),
                    tok_s_step(per_request), level="median"),
        FigureBound("time between tokens", _moved(tbt, *_median_bounds(gap_lo, gap_hi, maybe)),
                    TBT_STEP_MS, " ms", "median"),
        *_level_bounds("per-request tok/s", tails.PER_REQUEST, rate, rate_lo, rate_hi, maybe,
                       tok_s_step),
        *_level_bounds("time between tokens", tails.TBT, gap, gap_lo, gap_hi, maybe,
                       lambda _v: TBT_STEP_MS, " ms"),
    ]


def _ttft_bound(st: np.ndarray, lo: np.ndarray, send: np.ndarray, a: np.ndarray,
                b: np.ndarray) -> list[FigureBound]:
    """TTFT (every measured request with a token, as the page takes it)."""
    has = b > a
    if not has.any():
        return []
    first = a[has]
    pub = (st[first] - send[has]) / 1e6
    earliest = (lo[first] - send[has]) / 1e6
    ttft = float(np.median(pub))
    return [FigureBound("TTFT", _moved(ttft, float(np.median(earliest)), ttft),
                        ttft_step(ttft), " ms", "median"),
            *_level_bounds("TTFT", tails.TTFT, pub, earliest, pub, 0, ttft_step, " ms")]


def _end_bounds(chunks: metrics.Chunks, low: np.ndarray, pos: np.ndarray, a: np.ndarray,
                b: np.ndarray, s: int, e: int, done: np.ndarray) -> list[FigureBound]:
    """Average active and completed requests: a finished stream truly ended
    between its last stamp and `end_ns` (when the collector read the end);
    a first token (the client's own count of active streams) between its
    earliest arrival and its stamp."""
    off, end = chunks.starts(), chunks.end_ns
    nonempty = off[1:] > off[:-1]
    if not len(chunks.chunk_ns):  # no stream got a chunk: no stamp to be uncertain about
        return []
    last_ns = np.where(nonempty, chunks.chunk_ns[np.maximum(off[1:] - 1, 0)], -1)
    ended = done & nonempty & (end >= 0)
    late = np.clip(np.minimum(end, e) - np.maximum(last_ns, s), 0, None)
    uncertain = float(late[ended].sum())
    if len(pos):
        has = b > a
        first = pos[a[has]]
        uncertain += float(np.clip(np.minimum(chunks.chunk_ns[first], e)
                                   - np.maximum(low[first], s), 0, None).sum())
    counted = ended & (end >= s) & (end <= e)
    fewer = int((counted & (last_ns < s)).sum())
    more = int((ended & (end > e) & (last_ns <= e)).sum())
    return [FigureBound("average active", uncertain / max(1, e - s), AVERAGE_STEP),
            FigureBound("completed requests", float(max(fewer, more)), COUNT_STEP)]


def table_bounds(requests: pa.Table, start_ns: int, end_ns: int) -> list[FigureBound]:
    """`figure_bounds` of a cell's requests.parquet rows (its measured
    streams), and every process that stopped reading its streams inside the
    window (bench/measure/reader_stalls.py)."""

    rows = requests.filter(pc.equal(requests.column("purpose"), PURPOSE_MEASURE))
    chunks = metrics.Chunks.from_table(rows)
    if not chunks.n_requests:
        return []
    cancelled = np.asarray(rows.column("cancelled").to_numpy(zero_copy_only=False), dtype=bool)
    failed = np.asarray(pc.is_valid(rows.column("error")).to_numpy(zero_copy_only=False),
                        dtype=bool)
    ids = rows.column("request_id").to_pylist()
    return (figure_bounds(chunks, start_ns, end_ns, ~cancelled & ~failed)
            + reader_stalls(chunks, ids, start_ns, end_ns))


def stamp_reason(bounds: list[FigureBound]) -> str | None:
    """Why the collector's late reads (merged stamps, ends read late) could
    have moved a published figure past its display precision, or None."""
    shown = [bound.describe() for bound in bounds if bound.visible]
    if not shown:
        return None
    return "late reads: " + "; ".join(shown)
