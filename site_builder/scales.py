"""The numbers behind the no-JS pictures' axes: nice steps, ticks, bins, scales.

`fallback` draws every axis and histogram from here. A step is 1, 2 or 5 ×
10^k (d3's rule) held exactly (`Step`), so a tick or bin edge is the float
nearest its decimal value (0.3, never 0.30000000000000004) and every
comparison that places a value is exact. Plain float arithmetic
(``floor(lo / step) * step``) lands a hair above lo for values like 43.66 and
made a measured run unpublishable: a value fell below its first bin.

Contracts, checked by tests/site/test_site_properties.py: an axis covers its values
(start <= lo, end >= hi) with strictly increasing ticks; a value lands in the
bin whose [lo, hi) holds it, the largest in the last bin, closed; a scale maps
its domain's ends exactly to its range's ends. NaN and ±inf are refused with a
ValueError, except where a docstring says they are filtered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

# Values beyond this are refused: a bin edge or tick past them could overflow.
LIMIT = 1e300
# An axis may reach past the values it shows by a step (a bin's far edge, a
# nice end): its ends are allowed this far, still far from overflow (1.8e308).
AXIS_LIMIT = 10 * LIMIT


def finite(value: float, what: str) -> float:
    """`value` as a float; ValueError naming `what` when it is NaN or infinite."""
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{what} must be a finite number, got {v!r}")
    return v


def _in_limit(values: Sequence[float], what: str, limit: float = LIMIT) -> None:
    if max(abs(v) for v in values) > limit:
        raise ValueError(f"{what} must lie within ±{limit:g}")


@dataclass(frozen=True)
class Step:
    """m × 10^e with m in (1, 2, 5): a nice step, exact."""

    m: int
    e: int

    @property
    def exact(self) -> Fraction:
        return Fraction(self.m) * Fraction(10) ** self.e

    def at(self, k: int) -> float:
        """k steps from 0, as the float nearest the exact decimal (int / int
        division is correctly rounded)."""
        q = self.exact * k
        return q.numerator / q.denominator

    def floor_of(self, x: float) -> int:
        """floor(x / step), exactly."""
        return math.floor(Fraction(x) / self.exact)

    def ceil_of(self, x: float) -> int:
        """ceil(x / step), exactly."""
        return math.ceil(Fraction(x) / self.exact)

    def up(self) -> Step:
        """The next nice step: 1 -> 2 -> 5 -> 10."""
        return Step(2, self.e) if self.m == 1 else Step(5, self.e) if self.m == 2 else Step(1, self.e + 1)

    @property
    def decimals(self) -> int:
        """Decimals that write every multiple of the step exactly (0.05 -> 2)."""
        return max(0, -self.e)


def _guess(span: float, count: int) -> Step:
    """d3's tick step for span / count: the nice number nearest it (in log terms)."""
    raw = span / count
    if not raw > 0:  # the quotient underflowed: the smallest step a float can hold
        return Step(5, -324)
    e = math.floor(math.log10(raw))
    err = float(Fraction(raw) / Fraction(10) ** e)
    if err >= 7.07:
        return Step(1, e + 1)
    return Step(5 if err >= 3.16 else 2 if err >= 1.41 else 1, e)


def _distinct(step: Step, lo: float, hi: float) -> bool:
    """Whether edges a step apart stay distinct floats around [lo, hi] (the step
    spans at least 4 units in the last place of the largest magnitude)."""
    return step.exact >= 4 * Fraction(math.ulp(max(abs(lo), abs(hi))))


def _span(step: Step, lo: float, hi: float) -> tuple[int, int]:
    """(a, b): the last multiple of step whose float is <= lo and the first whose
    float is >= hi (b > a), so no end bin or tick is left empty by rounding."""
    a, b = step.floor_of(lo), step.ceil_of(hi)
    while step.at(a + 1) <= lo:  # lo's float may equal the next multiple's float
        a += 1
    while b - 1 > a and step.at(b - 1) >= hi:
        b -= 1
    return a, max(b, a + 1)


def nice_step(span: float, count: int) -> float:
    """d3's tick step: 1, 2 or 5 × 10^k, about span / count; 1.0 for an empty
    span (<= 0). NaN or infinite span: ValueError."""
    span = finite(span, "span")
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    return _guess(span, count).at(1) if span > 0 else 1.0


@dataclass(frozen=True)
class Axis:
    """A nice linear axis: [start, end] covers the values, a tick every step."""

    start: float
    end: float
    step: Step
    ticks: list[float]

    def label(self, v: float) -> str:
        """A tick's text with the step's decimals, so neighbours never read alike."""
        return f"{v:,.{self.step.decimals}f}"


def axis(lo: float, hi: float, count: int, *, integer: bool = False) -> Axis:
    """About `count` nice steps over [lo, hi]; start <= lo and end >= hi exactly
    (start < end always: one value gets a step of its own size, as Vega-Lite
    bins it); `integer`: whole steps only (counts). NaN, infinite, reversed or
    beyond ±AXIS_LIMIT: ValueError."""
    lo, hi = finite(lo, "axis start"), finite(hi, "axis end")
    if hi < lo:
        raise ValueError(f"axis end {hi!r} is below its start {lo!r}")
    _in_limit((lo, hi), "an axis's ends", AXIS_LIMIT)
    step = _guess(hi - lo or abs(lo) or 1.0, max(1, count))
    while not _distinct(step, lo, hi) or (integer and step.exact < 1):
        step = step.up()
    a, b = _span(step, lo, hi)
    return Axis(step.at(a), step.at(b), step, [step.at(k) for k in range(a, b + 1)])


def nice_ticks(hi: float, count: int = 5, integer: bool = False) -> tuple[float, list[float]]:
    """A domain [0, top] with top >= hi on a nice step, and its ticks; hi <= 0
    gives [0, 1] (nothing to show); NaN or infinite hi: ValueError."""
    hi = finite(hi, "axis maximum")
    ax = axis(0.0, hi if hi > 0 else 1.0, count, integer=integer)
    return ax.end, ax.ticks


def value_bins(values: Sequence[float], maxbins: int = 30) -> list[tuple[float, float, float]]:
    """(lo, hi, count) of nice equal-width bins, at most maxbins, like Vega-Lite's
    bin: each value counts in the bin whose [lo, hi) holds it, the largest in the
    last bin, closed; neither end bin is empty. NaN and ±inf are filtered (not
    measurements); values beyond ±LIMIT or maxbins < 2 (a range across a bin
    edge always needs two): ValueError."""
    if maxbins < 2:
        raise ValueError(f"maxbins must be at least 2, got {maxbins}")
    arr = np.asarray(values, dtype=np.float64).ravel()
    arr = arr[np.isfinite(arr)]
    if not len(arr):
        return []
    lo, hi = float(arr.min()), float(arr.max())
    _in_limit((lo, hi), "binned values")
    step = _guess(hi - lo or abs(lo) or 1.0, maxbins)
    while True:  # ends: <= 2 bins once the step passes max(|lo|, |hi|)
        if _distinct(step, lo, hi):
            a, b = _span(step, lo, hi)
            if b - a <= maxbins:
                break
        step = step.up()
    edges = np.array([step.at(k) for k in range(a, b + 1)])
    idx = np.searchsorted(edges, arr, side="right") - 1  # edges[i] <= v < edges[i + 1]
    counts = np.bincount(np.minimum(idx, len(edges) - 2), minlength=len(edges) - 1)
    return [(float(edges[i]), float(edges[i + 1]), float(c)) for i, c in enumerate(counts)]


def linear(domain: tuple[float, float], span: tuple[float, float]) -> Callable[[float], float]:
    """v -> position, mapping domain[0] to span[0] and domain[1] to span[1]
    exactly; an empty domain maps everything to the middle. Non-finite ends or a
    domain whose width overflows: ValueError."""
    d0, d1 = finite(domain[0], "domain start"), finite(domain[1], "domain end")
    r0, r1 = finite(span[0], "range start"), finite(span[1], "range end")
    width = finite(d1 - d0, "domain width")
    if width == 0:
        mid = (r0 + r1) / 2
        return lambda v: mid

    def scale(v: float) -> float:
        t = (v - d0) / width
        return r0 * (1 - t) + r1 * t  # exact at t = 0 and t = 1
    return scale


def log2(domain: tuple[float, float], span: tuple[float, float]) -> Callable[[float], float]:
    """`linear` over log2 of positive values (concurrency levels); a domain end
    or a value <= 0: ValueError."""
    if not (domain[0] > 0 and domain[1] > 0):
        raise ValueError(f"a log scale needs a positive domain, got {domain!r}")
    inner = linear((math.log2(domain[0]), math.log2(domain[1])), span)

    def scale(v: float) -> float:
        if not v > 0:
            raise ValueError(f"a log scale cannot place {v!r}")
        return inner(math.log2(v))
    return scale
