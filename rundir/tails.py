"""Tails: every latency of a cell at any percentile, exactly, from the raw stamps.

The medians a page shows by default are one rank of a distribution we keep
whole (every request's send, every chunk's arrival), so any rank is exact:
no sampling, no summary sketch. This module defines the ranks once; the
builder publishes them, the reference-server tests check them against the
server's own schedule.

Definitions (docs/methodology.md, "Tails"):

* **The sample unit is the request**, for every latency: a request's TTFT,
  its time between tokens (window span after its first in-window token ÷
  the tokens after it, so a 3-token chunk counts 3 gaps), its tok/s (the
  inverse), its end-to-end latency (send → end, completed requests that
  ended inside the window). So p50 is the median the pages already publish,
  and an SLO is met or missed by a request. Gaps pooled over the cell would
  weight long streams more and, with chunked delivery, rank per-token gaps
  the server never sent (a 3-token chunk has one arrival, not three).
* **Rank**: linear interpolation between the closest ranks (numpy's
  default, Hyndman-Fan type 7), which is what `np.median` does at 0.5.
* **Levels** are named by the tail a reader worries about: p90 of a latency
  is its slow 10%; for a rate (per-request tok/s, higher is better) the same
  level is its slow 10%, the 10th percentile (`per_request_tok_s_p10`).
* **Too few samples**: a rank q (or 1 − q for a rate) is published only
  with n ≥ 1/(1 − q) samples, so at least one sample lies beyond it on
  average: p90 needs 10, p95 20, p99 100, p99.9 1,000. p50 is the median as
  published today (one sample suffices). Below that the value is None
  (printed "—"), never an extrapolation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rundir.metrics import Chunks, first_token_ns, stream_rates

# The selector's levels, by the share of samples at or better than the value.
LEVELS: tuple[str, ...] = ("p50", "p90", "p95", "p99", "p99.9")
QUANTILE: dict[str, float] = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p99.9": 0.999}
# n ≥ 1 / (1 − q), written out so no float rounding moves a threshold.
MIN_SAMPLES: dict[str, int] = {"p50": 1, "p90": 10, "p95": 20, "p99": 100, "p99.9": 1000}
DEFAULT_LEVEL = "p50"


@dataclass(frozen=True)
class TailMetric:
    """A per-request figure published at every level."""

    key: str  # the median's CellResult attribute / downloads column (e2e_ms: new)
    higher_is_better: bool

    def rank(self, level: str) -> float:
        """The percentile (0-100) a level means for this metric: its slow side."""
        q = QUANTILE[level]
        return 100.0 * (1.0 - q if self.higher_is_better else q)

    def column(self, level: str) -> str:
        """The downloads' column: ttft_ms_p99, per_request_tok_s_p1, tbt_ms_p99_9."""
        return f"{self.key}_{rank_name(self.rank(level))}"

    def count_column(self) -> str:
        """The column of the number of samples behind every level: ttft_ms_n."""
        return f"{self.key}_n"


def rank_name(percent: float) -> str:
    """p50, p99, p99_9, p0_1: a percentile as a column suffix."""
    text = f"{percent:.1f}".rstrip("0").rstrip(".")
    return "p" + text.replace(".", "_")


TTFT = TailMetric("ttft_ms", False)
TBT = TailMetric("tbt_ms", False)
PER_REQUEST = TailMetric("per_request_tok_s", True)
E2E = TailMetric("e2e_ms", False)
METRICS: tuple[TailMetric, ...] = (TTFT, TBT, PER_REQUEST, E2E)
BY_KEY: dict[str, TailMetric] = {m.key: m for m in METRICS}


def percentile(samples: np.ndarray, metric: TailMetric, level: str) -> float | None:
    """The metric's value at a level over its samples, or None when too few
    (NaN, a request without the figure, is no sample: as in tail_columns)."""
    values = np.asarray(samples, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) < MIN_SAMPLES[level]:
        return None
    return float(np.percentile(values, metric.rank(level)))


def tail_columns(samples: np.ndarray, metric: TailMetric) -> dict[str, float | None]:
    """Every level of one metric, by download column, with its sample count
    (one partial sort for all the levels the sample count allows)."""
    values = np.asarray(samples, dtype=np.float64)
    values = values[np.isfinite(values)]
    out: dict[str, float | None] = dict.fromkeys((metric.column(lv) for lv in LEVELS), None)
    shown = [lv for lv in LEVELS if len(values) >= MIN_SAMPLES[lv]]
    if shown:
        ordered = np.sort(values).tolist()
        for lv in shown:
            out[metric.column(lv)] = sorted_percentile(ordered, metric.rank(lv))
    out[metric.count_column()] = len(values)
    return out


def sorted_percentile(ordered: list[float], percent: float) -> float:
    """np.percentile(values, percent) (linear) of ascending, finite values,
    operation for operation as numpy computes it (virtual index (n - 1) q,
    its floor and the next rank, numpy's _lerp), without numpy's per-call
    overhead: a cell's tails are a few hundred values, ranked at several levels."""
    n = len(ordered)
    virtual = (n - 1) * (percent / 100)
    if virtual >= n - 1:
        return ordered[-1]
    lo = math.floor(virtual)
    a, b = ordered[lo], ordered[lo + 1]
    gamma = virtual - lo
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


@dataclass(frozen=True)
class RequestFigures:
    """Per request of a decode cell (aligned arrays; NaN where a figure does not exist).

    The samples of every tail and of the SLO judgement: a request's TTFT
    (any request that produced a token), its in-window time between tokens
    and tok/s (requests with a token after their first in-window token, over
    a positive span), its end-to-end latency (completed inside the window)
    and its tokens inside the window (what goodput counts).
    """

    ttft_ms: np.ndarray
    tbt_ms: np.ndarray
    per_request_tok_s: np.ndarray
    e2e_ms: np.ndarray
    window_tokens: np.ndarray

    def samples(self, metric: TailMetric) -> np.ndarray:
        values = getattr(self, metric.key)
        return values[np.isfinite(values)]


def request_figures(chunks: Chunks, start_ns: int, end_ns: int,
                    completed_mask: np.ndarray) -> RequestFigures:
    """Each request's figures over the window [start_ns, end_ns] (the same
    scan and rules as rundir.metrics.decode_metrics, whose medians they give)."""
    n = chunks.n_requests
    stream = stream_rates(chunks, start_ns, end_ns)
    tbt = np.full(n, np.nan)
    rate = np.full(n, np.nan)
    tbt[stream.rows] = stream.tbt_ms
    rate[stream.rows] = stream.tok_s
    first_tok = first_token_ns(chunks)
    ttft = np.where(first_tok >= 0, (first_tok - chunks.send_ns) / 1e6, np.nan)
    ended_in = (chunks.end_ns >= start_ns) & (chunks.end_ns <= end_ns) & completed_mask
    e2e = np.where(ended_in, (chunks.end_ns - chunks.send_ns) / 1e6, np.nan)
    return RequestFigures(ttft, tbt, rate, e2e, stream.window_tokens.copy())  # memo: not shared


def decode_tails(figures: RequestFigures) -> dict[str, float | None]:
    """Every tail column of a decode cell (ttft_ms_p50 … e2e_ms_n)."""
    out: dict[str, float | None] = {}
    for metric in METRICS:
        out.update(tail_columns(figures.samples(metric), metric))
    return out


def prefill_tails(ttft_ms: np.ndarray) -> dict[str, float | None]:
    """A prefill cell's tails: its cold TTFT samples (few: mostly p50 only)."""
    return tail_columns(ttft_ms, TTFT)


def all_columns(phase_metrics: tuple[TailMetric, ...] = METRICS) -> list[str]:
    """Every tail column of the downloads, in a stable order (levels, then the count)."""
    out: list[str] = []
    for metric in phase_metrics:
        out += [metric.column(lv) for lv in LEVELS] + [metric.count_column()]
    return out
