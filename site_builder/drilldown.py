"""Per-cell raw views for the drill-down pages: distributions and a timeline.

Computed once from the raw chunks at aggregation time and cached with the
run's aggregates, so a page build never reads Parquet for a cached run.
Everything here is plain lists (JSON-ready) and binned with numpy, so a
128-stream, 30-second cell turns into a few kilobytes. The in-window chunks
come from the same memoised scan as the cell's metrics, and histograms use
equal-width binning (no sort), since a real run holds millions of chunks.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

from rundir.activity import Gauge
from rundir.contract import PREFILL_REJECTED_PREFIX
from rundir.metrics import Chunks, first_token_ns, has_negative_tokens, ttft_ms, window_scan
from rundir.tails import RequestFigures

TBT_BINS = 40
MAX_ERRORS = 5
MAX_TAILS = 3
TAIL_CHARS = 400


BLOCK = 1 << 16  # elements per step of the histograms: keeps their temporaries in cache


def _round(values: np.ndarray, digits: int = 3) -> list[float]:
    return np.round(np.asarray(values, dtype=np.float64), digits).tolist()


def token_gaps_ms(chunks: Chunks, start_ns: int, end_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-token gaps inside the window and their weights (tokens per chunk).

    A chunk carrying k tokens after a gap of d counts as k gaps of d / k,
    the same per-token view the Time between tokens metric takes.
    """
    w = window_scan(chunks, start_ns, end_ns)
    if len(w.pos) < 2:
        return np.zeros(0), np.zeros(0)
    out = np.true_divide(np.diff(w.chunk_ns), 1e6)  # the gap (integer ns) in ms, as a float
    weights = w.tokens[1:]
    out /= weights  # each count converted as it divides: no float copy of all the counts
    new_request = w.lo[w.hi > w.lo][1:]  # entries that start another request
    if len(new_request):
        same = np.ones(len(out), dtype=bool)
        same[new_request - 1] = False
        out, weights = out[same], weights[same]
    return out, weights.astype(np.float64)


def _quantile(values: np.ndarray, q: float) -> float:
    """np.quantile(values, q) (linear), from a partial partition of the top few
    values instead of the whole array; falls back to np.quantile when unsure."""
    n = len(values)
    if n < 4_000:
        return float(np.quantile(values, q))
    vi = (n - 1) * q
    lo = math.floor(vi)
    if lo + 1 > n - 1:
        return float(np.quantile(values, q))
    step = max(1, n // 2_000)  # ~2,000 values place the bound (a miss only costs time)
    bound = float(np.quantile(values[::step], max(0.0, q - 0.01)))
    keep = np.less(values, bound)
    np.logical_not(keep, out=keep)  # not below the bound: NaNs stay in
    top = values[keep]
    below = n - len(top)
    if below > lo or np.isnan(top).any():  # the sample misjudged the tail, or NaNs
        return float(np.quantile(values, q))
    part = np.partition(top, [lo - below, lo + 1 - below])
    a, b = float(part[lo - below]), float(part[lo + 1 - below])
    gamma = vi - lo  # numpy's _lerp, operation for operation
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def _histogram(values: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    if not len(values):
        return {"edges": [], "counts": [], "overflow": 0}
    hi = _quantile(values, 0.99) if len(values) > 20 else float(values.max())
    hi = hi if hi > 0 else float(values.max()) or 1.0
    edges = np.linspace(0.0, hi * 1.0001, TBT_BINS + 1)
    counts, overflow = _equal_bins(values, weights, edges)
    return {"edges": _round(edges), "counts": _round(counts, 1), "overflow": overflow}


def _equal_bins(values: np.ndarray, weights: np.ndarray, edges: np.ndarray,
                ) -> tuple[np.ndarray, float]:
    """np.histogram(values, bins=edges, weights=weights) for equal-width edges from 0,
    and the weight beyond the last edge, in one blocked pass.

    Each value's bin comes from one multiply; the few within 1e-7 of a bin
    boundary (where rounding could matter) or outside the edges are placed
    by exact comparison with the edges, as np.histogram places them.
    """
    n = len(edges) - 1
    if not edges[-1] > 0 or not np.isfinite(edges[-1]):  # odd data: numpy decides (or raises)
        counts, _ = np.histogram(values, bins=edges, weights=weights)
        return counts, float(weights[values > edges[-1]].sum())
    scale = n / float(edges[-1])
    counts = np.zeros(n + 2)  # bins, then: beyond the last edge, below the first
    for i in range(0, len(values), BLOCK):
        x, w = values[i:i + BLOCK], weights[i:i + BLOCK]
        frac = x * scale
        whole = np.trunc(frac)  # np.modf, whose loop is ~50x slower than trunc's
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, in the overflow bin all the same
            frac -= whole  # exact: the fraction modf gives (its sign of zero aside)
        np.minimum(whole, n, out=whole)
        idx = whole.astype(np.intp)
        frac -= 0.5
        np.abs(frac, out=frac)
        check = np.flatnonzero(frac > 0.5 - 1e-7)  # near a boundary, or below 0
        if len(check):
            exact = np.searchsorted(edges, x[check], side="right") - 1
            exact[x[check] == edges[-1]] = n - 1  # the last bin includes its right edge
            exact[exact > n] = n
            exact[exact < 0] = n + 1
            idx[check] = exact
        counts += np.bincount(idx, weights=w, minlength=n + 2)
    return counts[:n], float(counts[n])


def _int_threshold(edge: float) -> int:
    """The smallest integer v with float(v) >= edge."""
    v = math.ceil(edge)
    while float(v - 1) >= edge:
        v -= 1
    while float(v) < edge:
        v += 1
    return v


def _splits_like_floor(edges: np.ndarray, start_ns: int, d: int) -> bool:
    """True when every inner edge splits the integers where start + ceil(k * d / n) does."""
    n = len(edges) - 1
    if d * n >= 2**62:
        return False
    k = np.arange(1, n, dtype=np.int64)
    want = start_ns + -(-(k * d) // n)
    inner = edges[1:-1]
    if len(inner) and np.abs(inner).max() < 2**53:  # every integer is a float here: ceil is it
        return bool(np.array_equal(np.ceil(inner).astype(np.int64), want))
    return all(_int_threshold(float(e)) == int(w) for e, w in zip(inner, want, strict=True))


def _time_bins(ns: np.ndarray, weights: np.ndarray, start_ns: int, end_ns: int,
               edges: np.ndarray) -> np.ndarray:
    """np.histogram(ns, bins=edges, weights=weights) for in-window times, by
    integer arithmetic when the float edges split the integers exactly as
    floor((t - start) * n / duration) does (always, short of huge clocks)."""
    n, d = len(edges) - 1, end_ns - start_ns
    if not _splits_like_floor(edges, start_ns, d):
        return np.histogram(ns, bins=n, range=(float(edges[0]), float(edges[-1])),
                            weights=weights)[0]
    counts = np.zeros(n + 1)
    for i in range(0, len(ns), BLOCK):  # blocked: temporaries stay in cache
        k = ns[i:i + BLOCK] - start_ns
        k *= n
        k //= d
        counts += np.bincount(k, weights=weights[i:i + BLOCK], minlength=n + 1)
    counts[n - 1] += counts[n]  # the end of the window belongs to the last bin
    counts = counts[:n]
    return np.rint(counts).astype(weights.dtype) if weights.dtype.kind in "iu" else counts


def _bin_count(duration_ns: int) -> int:
    """Bins of a timeline: about half a second each (shared by the token and power timelines)."""
    return int(np.clip(round(duration_ns / 0.5e9), 10, 120))


def _timeline(chunks: Chunks, start_ns: int, end_ns: int) -> dict[str, list[float]]:
    duration = end_ns - start_ns
    n_bins = _bin_count(duration)
    edges = np.linspace(start_ns, end_ns, n_bins + 1)
    if has_negative_tokens(chunks):
        inwin = (chunks.chunk_ns >= start_ns) & (chunks.chunk_ns <= end_ns)
        toks, _ = np.histogram(chunks.chunk_ns[inwin], bins=edges, weights=chunks.tokens[inwin])
    else:  # chunks without tokens add nothing: bin the token-carrying ones only
        w = window_scan(chunks, start_ns, end_ns)
        toks = _time_bins(w.chunk_ns, w.tokens, start_ns, end_ns, edges)
    width_s = duration / n_bins / 1e9
    centers = (edges[:-1] + edges[1:]) / 2
    first = first_token_ns(chunks)
    last_chunk = np.full(chunks.n_requests, -1, dtype=np.int64)
    off = chunks.starts()
    nonempty = off[1:] > off[:-1]
    if nonempty.any():
        last_chunk[nonempty] = np.maximum(np.maximum.reduceat(chunks.chunk_ns, off[:-1][nonempty]), -1)
    stop = np.where(chunks.end_ns >= 0, chunks.end_ns, last_chunk)
    ok = first >= 0
    started = first[ok][None, :] <= centers[:, None]
    active = (started & (centers[:, None] < stop[ok][None, :])).sum(axis=1)
    return {
        "t_s": _round((edges[:-1] - start_ns) / 1e9),
        "width_s": [round(width_s, 4)],
        "tok_s": _round(toks / width_s, 2),
        "client_active": [int(a) for a in active],
    }


def _bin_means(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of the readings in each bin (NaN where a bin has none)."""
    ok = ~np.isnan(v)
    idx = np.searchsorted(edges, t[ok], side="right") - 1
    idx[t[ok] == edges[-1]] = len(edges) - 2  # the window's end belongs to the last bin
    keep = (idx >= 0) & (idx < len(edges) - 1)
    n = len(edges) - 1
    sums = np.bincount(idx[keep], weights=v[ok][keep], minlength=n)
    counts = np.bincount(idx[keep], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _nullable(values: np.ndarray, digits: int) -> list[float | None]:
    """Python's round(v, digits) of each value, None for NaN.

    round() is correctly rounded: the integer nearest v x 10^digits (ties to
    even), over 10^digits. numpy's rint(v x 10^digits) / 10^digits gives the
    same float wherever the float product is clear of a tie (it is within half
    an ulp of the true product), so only values near one, NaNs and huge ones
    are left to round() itself: a cell's per-request lists cost one pass."""
    plain = np.asarray(values, dtype=np.float64)
    scale = 10.0 ** digits
    scaled = plain * scale
    out = (np.rint(scaled) / scale).tolist()
    size = np.abs(scaled)
    off_tie = np.abs(size - np.floor(size) - 0.5)
    doubt = ~((off_tie > size * 2.0**-50) & (size < 2.0**52))  # NaN: in doubt too
    for i in np.flatnonzero(doubt).tolist():
        v = float(plain[i])
        out[i] = None if v != v else round(v, digits)  # NaN: unequal to itself
    return out


def power_timeline(gpu: pa.Table | None, start_ns: int, end_ns: int) -> dict[str, Any] | None:
    """GPU power (all GPUs summed) and SM clock (mean over GPUs) on the token
    timeline's bins, so both charts share their x axis; None without telemetry.

    Each GPU's readings are averaged per bin; a bin where some GPU has no power
    reading gets no total (a part of the GPUs would understate it)."""
    if gpu is None or not len(gpu) or end_ns <= start_ns:
        return None
    t = gpu.column("t_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    which = gpu.column("gpu").to_numpy(zero_copy_only=False).astype(np.int64)
    watts = gpu.column("power_w").to_numpy(zero_copy_only=False).astype(np.float64)
    sm = gpu.column("sm_clock_mhz").to_numpy(zero_copy_only=False).astype(np.float64)
    inwin = (t >= start_ns) & (t <= end_ns)
    if not inwin.any():
        return None
    n_bins = _bin_count(end_ns - start_ns)
    edges = np.linspace(start_ns, end_ns, n_bins + 1)
    ids = np.unique(which)
    power = np.vstack([_bin_means(t[which == g], watts[which == g], edges) for g in ids])
    clocks = np.vstack([_bin_means(t[which == g], sm[which == g], edges) for g in ids])
    total = power.sum(axis=0)  # NaN where any GPU lacks a reading
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN bin: no clock
        clock = np.nanmean(clocks, axis=0)
    if np.isnan(total).all() and np.isnan(clock).all():
        return None
    return {
        "t_s": _round((edges[:-1] - start_ns) / 1e9),
        "width_s": [round((end_ns - start_ns) / n_bins / 1e9, 4)],
        "gpus": len(ids),
        "power_w": _nullable(total, 1),
        "sm_clock_mhz": _nullable(clock, 0),
    }


def gauge_in_window(series: Gauge, start_ns: int, end_ns: int) -> dict[str, list[float]] | None:
    """A summed gauge's samples over the window (plus the value held at its start)."""
    if series is None:
        return None
    times, values = series  # times ascending (rundir.activity.gauge_series)
    held = int(np.searchsorted(times, start_ns, side="right"))  # times[:held] <= start
    last = int(np.searchsorted(times, end_ns, side="right"))
    idx = np.arange(max(held - 1, 0), max(last, held), dtype=np.int64)
    if not len(idx):
        return None
    t = np.maximum(times[idx], start_ns)
    return {"t_s": _round((t - start_ns) / 1e9), "value": _round(values[idx], 2)}


def _outcomes(requests: pa.Table, done: np.ndarray) -> dict[str, Any]:
    """What became of each request, in disjoint groups that add up to `total`.

    `done` is the builder's completed mask (finish reason, no error, not
    cancelled), so "finished" counts exactly the requests the Completed
    requests metric draws from; a request with an error counts as failed (or
    rejected) even when the server also sent a finish reason.
    """
    n = len(requests)
    zero = {"total": 0, "finished": 0, "cancelled": 0, "rejected": 0, "errors": 0,
            "unfinished": 0, "finish_reasons": {}}
    if not n:
        return zero
    errors = requests.column("error").to_pylist()
    cancelled = requests.column("cancelled").to_pylist()
    rejected = [e is not None and e.startswith(PREFILL_REJECTED_PREFIX) for e in errors]
    failed = [e is not None and not r for e, r in zip(errors, rejected, strict=True)]
    was_cancelled = [bool(k) and e is None for k, e in zip(cancelled, errors, strict=True)]
    reasons: dict[str, int] = {}
    for r, ok in zip(requests.column("finish_reason").to_pylist(), done, strict=True):
        if ok:
            reasons[r] = reasons.get(r, 0) + 1
    out = {
        "total": n,
        "finished": int(np.count_nonzero(done)),
        "cancelled": sum(was_cancelled),
        "rejected": sum(rejected),
        "errors": sum(failed),
        "finish_reasons": dict(sorted(reasons.items())),
    }
    out["unfinished"] = n - sum(v for k, v in out.items() if k not in ("total", "finish_reasons"))
    return out


def _errors(requests: pa.Table) -> list[str]:
    out: list[str] = []
    for e in requests.column("error").to_pylist() if len(requests) else []:
        if e and e not in out:
            out.append(e[:TAIL_CHARS])
        if len(out) >= MAX_ERRORS:
            break
    return out


def _tails(requests: pa.Table) -> list[str]:
    out: list[str] = []
    for t in requests.column("content_tail").to_pylist() if len(requests) else []:
        if t:
            out.append(t[-TAIL_CHARS:])
        if len(out) >= MAX_TAILS:
            break
    return out


def decode_detail(
    requests: pa.Table,
    chunks: Chunks,
    start_ns: int,
    end_ns: int,
    *,
    done: np.ndarray,
    running: Gauge = None,
    waiting: Gauge = None,
    with_tails: bool = False,
    gpu: pa.Table | None = None,
) -> dict[str, Any]:
    """Everything the decode drill-down page draws, from the cell's measure requests.

    `done` marks the requests that finished normally (the builder's completed mask);
    `gpu` is the run's GPU telemetry (gpu_metrics.parquet), if it has any.
    """
    gaps, weights = token_gaps_ms(chunks, start_ns, end_ns)
    return {
        "kind": "decode",
        "window_ns": [int(start_ns), int(end_ns)],
        "ttft_ms": _round(ttft_ms(chunks)),
        "tbt": _histogram(gaps, weights),
        "timeline": _timeline(chunks, start_ns, end_ns),
        "power": power_timeline(gpu, start_ns, end_ns),
        "running": gauge_in_window(running, start_ns, end_ns),
        "waiting": gauge_in_window(waiting, start_ns, end_ns),
        "outcomes": _outcomes(requests, done),
        "errors": _errors(requests),
        "tails": _tails(requests) if with_tails else [],
    }


def per_request(figures: RequestFigures) -> dict[str, list[float | None]]:
    """Each request's figures (aligned; None where one does not exist), the
    samples behind the cell's tails: what the distributions draw and an SLO
    judges request by request (rundir/tails.py)."""
    return {
        "ttft_ms": _nullable(figures.ttft_ms, 3),
        "tbt_ms": _nullable(figures.tbt_ms, 4),
        "e2e_ms": _nullable(figures.e2e_ms, 3),
        "window_tokens": figures.window_tokens.tolist(),
    }


# A drawn CDF's points at most: its rank grid, its x grid, the steps around each
# marked level (LEVEL_STEPS either side) and the two extremes.
CDF_RANKS, CDF_XS, LEVEL_STEPS = 240, 120, 3


def cdf_steps(values: list[float | None], marks: list[float], *, log: bool
              ) -> list[tuple[float, float]]:
    """The empirical CDF of values (None skipped) as step corners (x, share of
    values at or below x), from (min, 0) up to (max, 1), for a step-after line.

    Run at page time on the cached per-request lists. A large cell's curve is
    thinned to at most ~400 corners: an even grid of ranks, an even grid of x
    (logarithmic when the axis is), the exact steps around each marked value
    (`marks`: the published percentiles) and the extremes. Between two kept
    corners the line holds the lower share, so a thinned curve never claims a
    share the data do not reach."""
    v = np.sort(np.asarray([x for x in values if x is not None], dtype=np.float64))
    n = len(v)
    if not n:
        return []
    keep = [np.linspace(0, n - 1, min(n, CDF_RANKS)).round().astype(np.int64), np.array([n - 1])]
    grid = (np.geomspace(v[0], v[-1], CDF_XS) if log and v[0] > 0
            else np.linspace(v[0], v[-1], CDF_XS))
    keep.append(np.searchsorted(v, grid, side="right") - 1)
    for m in marks:
        at = int(np.searchsorted(v, m, side="left"))
        keep.append(np.arange(at - LEVEL_STEPS, at + LEVEL_STEPS + 1))
    idx = np.unique(np.clip(np.concatenate(keep), 0, n - 1))
    last = np.searchsorted(v, v[idx], side="right") - 1  # a tie's step is its last copy
    idx = np.unique(last)
    share = (idx + 1) / n
    return [(float(v[0]), 0.0)] + list(zip(v[idx].tolist(), np.round(share, 5).tolist(), strict=True))


def _sample_use(used: bool, error: str | None) -> str:
    """Why a prefill sample is or is not in the published figure (a glossary key)."""
    if used:
        return "used"
    if error is None:
        return "untimed"
    return "rejected" if error.startswith(PREFILL_REJECTED_PREFIX) else "failed"


def _rejection(error: str) -> str:
    """The collector's reason for a rejection, without the prefix and the cached-token
    count (the page's Cached tokens column shows that, formatted)."""
    why = error.removeprefix(PREFILL_REJECTED_PREFIX).strip()
    return re.sub(r"\s*\(\d+ cached tokens\)$", "", why)[:TAIL_CHARS]


def prefill_detail(requests: pa.Table, chunks: Chunks, prompt_tokens: np.ndarray, *,
                   used: np.ndarray, done: np.ndarray) -> dict[str, Any]:
    """The samples of a prefill cell, one row each, marked by whether the published
    figure uses them: `used` is the builder's own mask (rundir.metrics.prefill_used), so
    the page and the figure cannot disagree; `done` is its completed mask."""
    first = first_token_ns(chunks)
    cached = requests.column("cached_tokens").to_pylist() if len(requests) else []
    errors = requests.column("error").to_pylist() if len(requests) else []
    samples = []
    t0 = int(chunks.send_ns.min()) if chunks.n_requests else 0
    for i in range(chunks.n_requests):
        ttft = (first[i] - chunks.send_ns[i]) / 1e6 if first[i] >= 0 else None
        rate = prompt_tokens[i] / (ttft / 1e3) if used[i] else None
        use = _sample_use(bool(used[i]), errors[i])
        samples.append(
            {
                "sent_s": round((int(chunks.send_ns[i]) - t0) / 1e9, 3),
                "prompt_tokens": int(prompt_tokens[i]) if prompt_tokens[i] > 0 else None,
                "cached_tokens": cached[i],
                "ttft_ms": round(ttft, 3) if ttft is not None else None,
                "prompt_tok_s": round(float(rate), 2) if rate is not None else None,
                "use": use,
                "why": _rejection(errors[i]) if use == "rejected" else None,
            }
        )
    return {
        "kind": "prefill",
        "samples": samples,
        "used": int(np.count_nonzero(used)),
        "outcomes": _outcomes(requests, done),
        "errors": _errors(requests),
        "tails": [],
    }
