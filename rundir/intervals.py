"""95% intervals of a repeated cell's figures: a two-stage bootstrap (pure).

A cell measured with `--repeats k` publishes, for each figure, the median of
its k per-window values. Its interval resamples both sources of noise the
data holds (docs/methodology.md, "Repeats and intervals"):

1. the windows: k windows drawn with replacement (the drift between
   consecutive windows of one steady state);
2. the requests within each drawn window, drawn with replacement, and the
   window's figure recomputed from them (the sampling noise of a window of
   a few dozen to a few thousand requests).

Why not windows alone: with k = 3 a bootstrap over three numbers can only
return [min, max], which covers the median with probability 1 − 2·(1/2)³ =
75%, not 95%. Why not requests alone: pooled requests ignore that windows
differ by more than their requests' spread (the server's state drifts).
Resampling both stages counts the within-window variance once more than a
textbook estimate would, so the interval errs wide: a "significant"
difference drawn from it is a conservative claim.

Deterministic: the generator is seeded from the caller's key (the cell and
the figure), so the same build gives the same bytes whatever the order of
cells. None of the bootstrap runs for a one-window cell: it has no published
interval. What a one-window cell has instead is its *noise band*
(`one_window_bands`): the interval its own samples give, widened for the
drift one window cannot see. The pages never print it as an interval; the
change rule (site_builder/changes.py) alone reads it, so a series' badge
calls a one-window change only when it clears that band.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rundir.metrics import Chunks
from rundir.tails import RequestFigures

LEVEL = 0.95
REPLICATES = 2000
_BLOCK = 4_000_000  # resampled values held at once (32 MB of float64)
STATISTICS = ("median", "mean")  # a window's figure: median of its requests, or mean of its slices
SLICES = 10  # total tok/s: a window's equal time slices, resampled as its noise
# One window's noise band (one_window_bands): Student's t at 97.5% for SLICES - 1 = 9
# degrees of freedom; the fewest requests whose median gets a 95% rank interval
# (6: [min, max] covers it with 1 - 2/2**6 = 96.9%); and how much wider than its own
# slices' spread windows of one steady state were measured to differ (the llama.cpp
# sample's sub-windows: 1.5-3.2x; docs/methodology.md, "One window: its noise band").
T975_SLICES = 2.2622
MIN_REQUESTS = 6
DRIFT = 3.2


def median_over_windows(values: Sequence[float | None]) -> float | None:
    """The published figure of a repeated cell: the median of its windows' values
    (windows without one, e.g. no first token inside them, are left out)."""
    known = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.median(known)) if known else None


def seed_for(key: str) -> int:
    """A stable seed for one interval (crc32 of its key: cell and figure)."""
    return zlib.crc32(key.encode("utf-8"))


def two_stage_interval(samples: Sequence[np.ndarray], statistic: str, seed: int,
                       replicates: int = REPLICATES) -> tuple[float, float] | None:
    """The 95% percentile interval of the median over windows of a per-window
    figure, `statistic` ("median" or "mean") of each window's sample values.

    `samples`: one array per window (its requests' values, NaN or empty where
    a request has none; or its time slices' rates). None when fewer than two
    windows have a value: one window gives no spread to resample."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: expected one of {STATISTICS}, got {statistic!r}")
    windows = [v[np.isfinite(v)] for v in (np.asarray(s, dtype=np.float64) for s in samples)]
    windows = [v for v in windows if len(v)]
    if len(windows) < 2:
        return None
    rng = np.random.default_rng(seed)
    per_window = np.column_stack([_resampled(v, statistic, replicates, rng) for v in windows])
    k = len(windows)
    drawn = rng.integers(0, k, size=(replicates, k))
    medians = np.median(np.take_along_axis(per_window, drawn, axis=1), axis=1)
    tail = 100.0 * (1.0 - LEVEL) / 2.0
    lo, hi = np.percentile(medians, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _resampled(values: np.ndarray, statistic: str, replicates: int,
               rng: np.random.Generator) -> np.ndarray:
    """`replicates` values of the window's figure, each over its requests drawn
    with replacement (in blocks, so a window of many requests stays small)."""
    n = len(values)
    rows = max(1, _BLOCK // n)
    out = np.empty(replicates)
    for lo in range(0, replicates, rows):
        hi = min(replicates, lo + rows)
        draw = values[rng.integers(0, n, size=(hi - lo, n))]
        out[lo:hi] = draw.mean(axis=1) if statistic == "mean" else np.median(draw, axis=1)
    return out


# The figures a repeated cell publishes as a median over windows, with the
# statistic that makes each window's value from its requests' values.
FIGURES: dict[str, str] = {"total_tok_s": "mean", "per_request_tok_s": "median",
                           "ttft_ms": "median", "tbt_ms": "median"}


def slice_rates(chunks: Chunks, start_ns: int, end_ns: int, slices: int = SLICES) -> np.ndarray:
    """Tokens per second in each of `slices` equal parts of the window [start, end]
    (their mean is the window's total tok/s). Why slices and not requests for
    total tok/s: the window always holds C streams, so its output is not a sum
    of independent requests (resampling them would count one stream twice and
    drop another); its noise is how the output rate moves over time."""
    edges = np.linspace(start_ns, end_ns, slices + 1)
    counts, _ = np.histogram(chunks.chunk_ns, bins=edges, weights=chunks.tokens)
    return counts / ((end_ns - start_ns) / slices / 1e9)


def window_samples(figures: RequestFigures, first_window: np.ndarray, window: int,
                   rates: np.ndarray) -> dict[str, np.ndarray]:
    """One window's values behind each figure of FIGURES: its slices' output
    rates (`slice_rates`), and its requests' figures over the window
    (rundir.tails.request_figures), TTFT for the requests whose first token
    is the window's (rundir.windows.first_token_window)."""
    return {
        "total_tok_s": rates,
        "per_request_tok_s": figures.per_request_tok_s,
        "ttft_ms": figures.ttft_ms[first_window == window],
        "tbt_ms": figures.tbt_ms,
    }


def window_value(samples: dict[str, np.ndarray], key: str) -> float | None:
    """A window's figure from its samples (the same value rundir.metrics gives it)."""
    values = samples[key]
    values = values[np.isfinite(values)]
    if FIGURES[key] == "mean":
        return float(values.mean()) if len(values) else None
    return float(np.median(values)) if len(values) else None


def mean_band(values: np.ndarray) -> tuple[float, float] | None:
    """The 95% Student's t interval of the mean of a window's SLICES slice rates."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) != SLICES:
        return None
    mean, half = float(values.mean()), T975_SLICES * float(values.std(ddof=1)) / math.sqrt(SLICES)
    return mean - half, mean + half


def median_band(values: np.ndarray) -> tuple[float, float] | None:
    """The distribution-free 95% rank interval of the median of a window's requests:
    [x_(j), x_(n+1-j)] for the largest j with 2 P(Binomial(n, 1/2) < j) <= 5%;
    None under MIN_REQUESTS values (no pair of ranks reaches 95%)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x)]
    n = len(x)
    if n < MIN_REQUESTS:
        return None
    tail, j, log_half = 0.0, 0, n * math.log(0.5)
    while True:  # P(B <= j) accumulated term by term, in logs (n may be thousands)
        term = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                        + log_half)
        if 2 * (tail + term) > 1.0 - LEVEL:
            break
        tail, j = tail + term, j + 1
    return float(x[j - 1]), float(x[n - j])


def widened(center: float, band: tuple[float, float], factor: float = DRIFT) -> list[float]:
    """`band` stretched `factor` times about `center`, each side on its own (never
    below 0: every figure it is used for is a rate or a time)."""
    return [max(0.0, center - factor * (center - band[0])), center + factor * (band[1] - center)]


def one_window_bands(samples: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """A one-window cell's noise band per figure of FIGURES: its own 95% interval
    (the slices' t interval for total tok/s, the requests' rank interval for the
    medians) widened DRIFT times about the window's figure. Why widened: inside one
    window the slices and requests show only the noise of that window; windows of
    the same steady state were measured to differ up to DRIFT times more, and two
    runs minutes apart differ by at least that. Figures without enough samples get
    none (their changes are not established)."""
    out: dict[str, list[float]] = {}
    for name, statistic in FIGURES.items():
        values = np.asarray(samples[name], dtype=np.float64)
        band = mean_band(values) if statistic == "mean" else median_band(values)
        center = window_value(samples, name)
        if band is not None and center is not None:
            out[name] = widened(center, band)
    return out


@dataclass(frozen=True)
class Repeated:
    """A repeated cell's figures: per window, their median, and their intervals."""

    per_window: list[dict[str, float | None]]
    medians: dict[str, float | None]
    intervals: dict[str, list[float]]


def repeated(windows: Sequence[dict[str, np.ndarray]], key: str) -> Repeated:
    """Medians over the windows and their 95% intervals (seeded by `key`, the cell)."""
    per_window = [{name: window_value(w, name) for name in FIGURES} for w in windows]
    medians = {name: median_over_windows([w[name] for w in per_window]) for name in FIGURES}
    intervals: dict[str, list[float]] = {}
    for name, statistic in FIGURES.items():
        found = two_stage_interval([w[name] for w in windows], statistic,
                                   seed_for(f"{key}:{name}"))
        if found is not None and medians[name] is not None:
            intervals[name] = list(found)
    return Repeated(per_window, medians, intervals)
