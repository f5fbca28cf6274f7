"""Narrower 95% intervals over a repeated cell's window values: candidates, not published.

benchmarks/interval_coverage.py measures them beside the builder's two-stage
bootstrap (rundir/intervals.py). From k = 5 windows their union (`windows_interval`)
was 2.5–8× narrower and held the truth in every scenario but one: when
consecutive windows drift together, it held 85–86% against the bootstrap's
90–91%, and called identical runs different 3.4% of the time against 1.1–1.7%.
Back-to-back windows on the same streams are correlated by design
(docs/methodology.md, "Repeats and intervals"), so the builder keeps the wider,
conservative interval; these stay here, measured, for the next attempt.
"""

from __future__ import annotations

import math

import numpy as np

LEVEL = 0.95


def windows_interval(values: np.ndarray) -> tuple[float, float]:
    """The union of `t_interval` and `rank_interval` of k ≥ 2 window values,
    never below 0 (every figure is a positive rate or time): it holds the
    truth with at least about the larger of their chances, whether the
    windows are normal (t) or skewed or in two groups (rank)."""
    t_lo, t_hi = t_interval(values)
    r_lo, r_hi = rank_interval(values)
    return max(0.0, min(t_lo, r_lo)), max(t_hi, r_hi)


def t_interval(values: np.ndarray) -> tuple[float, float]:
    """Student's t interval of k ≥ 2 window values, mean ± t(k−1)·s/√k,
    stretched to hold their median (the published figure) where it lies
    outside. Exact when the windows are independent and normal."""
    v = np.asarray(values, dtype=np.float64)
    k = len(v)
    half = t975(k - 1) * float(v.std(ddof=1)) / math.sqrt(k)
    mean, median = float(v.mean()), float(np.median(v))
    return min(mean - half, median), max(mean + half, median)


# Student t's 97.5% points for 1..30 degrees of freedom (to 5 decimals).
_T975 = (12.70620, 4.30265, 3.18245, 2.77645, 2.57058, 2.44691, 2.36462, 2.30600, 2.26216,
         2.22814, 2.20099, 2.17881, 2.16037, 2.14479, 2.13145, 2.11991, 2.10982, 2.10092,
         2.09302, 2.08596, 2.07961, 2.07387, 2.06866, 2.06390, 2.05954, 2.05553, 2.05183,
         2.04841, 2.04523, 2.04227)
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """Student t's 97.5% point for `df` ≥ 1 degrees of freedom: a table to 30,
    then the Cornish-Fisher expansion (Abramowitz and Stegun 26.7.5: off by
    under 1e-6 from 30), so the builder needs no scipy."""
    if df < 1:
        raise ValueError(f"df: expected >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    x = _Z975
    terms = ((x ** 3 + x) / 4,
             (5 * x ** 5 + 16 * x ** 3 + 3 * x) / 96,
             (3 * x ** 7 + 19 * x ** 5 + 17 * x ** 3 - 15 * x) / 384,
             (79 * x ** 9 + 776 * x ** 7 + 1482 * x ** 5 - 1920 * x ** 3 - 945 * x) / 92160)
    return x + sum(g / df ** (i + 1) for i, g in enumerate(terms))


def _below(k: int, r: int) -> float:
    """P(Bin(k, ½) < r): the chance that fewer than r of k values lie below their median."""
    return sum(math.comb(k, i) for i in range(r)) / 2.0 ** k


def rank_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """A distribution-free interval for the median of the distribution k
    independent values come from. [r-th smallest, r-th largest] holds it with
    chance 1 − 2·P(Bin(k, ½) < r) whatever the distribution; between the two r
    either side of `level`, interpolated to hold it with about `level`
    (Hettmansperger and Sheather 1986, the sign interval's usual form). Min to
    max where even that falls short of `level` (k ≤ 5: 94% at k = 5)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    k = len(x)
    r = 1
    while r + 1 <= k // 2 and 1.0 - 2.0 * _below(k, r + 1) >= level:
        r += 1
    outer = 1.0 - 2.0 * _below(k, r)
    inner = 1.0 - 2.0 * _below(k, r + 1) if r + 1 <= (k + 1) // 2 else 0.0
    if outer < level or inner <= 0.0:
        return float(x[r - 1]), float(x[k - r])
    share = (outer - level) / (outer - inner)
    weight = (k - r) * share / (r + (k - 2 * r) * share)
    return (float((1.0 - weight) * x[r - 1] + weight * x[r]),
            float((1.0 - weight) * x[k - r] + weight * x[k - r - 1]))


