"""Average active requests and the server's gauges (pure, no I/O): how many
streams were really running in a window, and whether requests queued.

The server's waiting gauge, summed over its label sets and held between
samples, turns the client's "in flight" into "running"; without it (or
when it is too sparse to speak for the window) only the client's streams
that are receiving tokens count (`rundir.metrics.client_active`). The
rules are in docs/methodology.md ("Average active requests").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir.contract import METRIC_WAITING
from rundir.metrics import Chunks, client_active, last_chunk_ns

QUEUED_ACTIVE_RATIO = 0.95
# A server gauge summed over its label sets: (scrape times, values), or None.
Gauge = tuple[np.ndarray, np.ndarray] | None


def gauge_series(t_ns: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum a gauge over its label sets: one value per scrape time."""
    if not len(t_ns):
        return t_ns, values
    times, inverse = np.unique(t_ns, return_inverse=True)
    sums = np.zeros(len(times))
    np.add.at(sums, inverse, values)
    return times, sums


def gauge_max_in(times: np.ndarray, values: np.ndarray, start_ns: int, end_ns: int) -> float | None:
    inside = (times >= start_ns) & (times <= end_ns)
    return float(values[inside].max()) if inside.any() else None


def is_queued(concurrency: int, avg_active: float | None, max_waiting: float | None) -> bool:
    """Requests queued: the server's waiting gauge rose above zero in the
    window, or fewer than 95% of the requested streams were running."""
    if max_waiting is not None and max_waiting > 0:
        return True
    return avg_active is not None and avg_active < QUEUED_ACTIVE_RATIO * concurrency


def _stops(chunks: Chunks) -> np.ndarray:
    """Per request: when its stream ended (last chunk if the end is unknown)."""
    return np.where(chunks.end_ns >= 0, chunks.end_ns,
                    np.maximum(last_chunk_ns(chunks), chunks.send_ns))


ACTIVITY_GRID_NS = 1_000_000  # 1 ms steps


def summed_gauge(server_metrics: pa.Table | None, name: str) -> Gauge:
    """A server gauge summed over its label sets, or None when the server has
    none. Callers that judge many cells build it once and pass it on."""
    if server_metrics is None or not len(server_metrics):
        return None
    rows = server_metrics.filter(pc.equal(server_metrics.column("name"), name))
    if not len(rows):
        return None
    t = np.asarray(rows.column("t_ns").to_numpy(), dtype=np.int64)
    v = np.asarray(rows.column("value").to_numpy(), dtype=np.float64)
    return gauge_series(t, v)


GAUGE_MAX_GAP_NS = 3_000_000_000  # three of the sampler's 1 s intervals
GAUGE_MIN_SAMPLES = 2


@dataclass(frozen=True)
class GaugeCoverage:
    """How well the server's sampled gauge covers a window: the samples that
    speak for it (inside, plus the one held from before its start when that
    is recent) and the longest stretch of the window without a fresh sample."""

    samples: int
    max_gap_ns: int

    @property
    def enough(self) -> bool:
        return self.samples >= GAUGE_MIN_SAMPLES and self.max_gap_ns <= GAUGE_MAX_GAP_NS

    def describe(self, start_ns: int, end_ns: int) -> str:
        return (f"the server's gauges were too sparse ({self.samples} samples for the "
                f"{(end_ns - start_ns) / 1e9:.1f} s window, longest gap {self.max_gap_ns / 1e9:.1f} s; "
                f"at least {GAUGE_MIN_SAMPLES} and at most {GAUGE_MAX_GAP_NS / 1e9:g} s apart needed): "
                f"average active counts the client's streams receiving tokens")


def gauge_coverage(times: np.ndarray, start_ns: int, end_ns: int) -> GaugeCoverage:
    """Coverage of [start_ns, end_ns] by sample times (ascending)."""
    times = np.asarray(times, dtype=np.int64)
    before = int(np.searchsorted(times, start_ns, side="right"))  # times[:before] <= start
    inside = times[before:int(np.searchsorted(times, end_ns, side="right"))]
    anchor = int(times[before - 1]) if before else int(start_ns)
    points = np.concatenate(([anchor], inside, [end_ns]))
    gap = int(np.diff(points).max()) if len(points) > 1 else 0
    held = before and start_ns - int(times[before - 1]) <= GAUGE_MAX_GAP_NS
    return GaugeCoverage(int(len(inside) + (1 if held else 0)), gap)


@dataclass(frozen=True)
class Activity:
    """Average active requests over a window and what it was derived from."""

    avg_active: float
    max_waiting: float | None  # the largest waiting count the server reported in W
    coverage: GaugeCoverage | None  # None: the server has no waiting gauge
    from_server: bool  # in flight − waiting (True) or the client's producing streams


def window_activity_detail(
    chunks: Chunks, server_metrics: pa.Table | None, start_ns: int, end_ns: int
) -> Activity:
    """`window_activity_from_gauge` with the waiting gauge read from the
    server's metrics table (one cell's judgement: the collector)."""
    return window_activity_from_gauge(
        chunks, summed_gauge(server_metrics, METRIC_WAITING), start_ns, end_ns)


def window_activity_from_gauge(chunks: Chunks, waiting: Gauge, start_ns: int, end_ns: int) -> Activity:
    """Average active requests over the window, and the largest waiting
    count the server reported inside it; `waiting` is the server's waiting
    gauge summed over label sets (`summed_gauge`), built once per run.

    With the server's waiting gauge (summed over label sets, held between
    samples): active = requests in flight (sent, not yet ended) − waiting.
    That is exact whenever nothing waits, unlike a running gauge sampled
    once a second, which misses the short gaps between a stream's end and
    its restart (and was seen to lag by seconds on vLLM's CPU build).
    Without a waiting gauge a queued request cannot be told from a running
    one by the client, so only streams that are receiving tokens (first
    token to end) count. A gauge sampled too sparsely over the window (a
    /metrics that stops answering under overload) is treated as absent:
    nothing is derived from one stale sample.
    """
    if waiting is None:
        return Activity(client_active(chunks, start_ns, end_ns), None, None, False)
    wt, ws = waiting  # times ascending (gauge_series)
    coverage = gauge_coverage(wt, start_ns, end_ns)
    if not coverage.enough:
        return Activity(client_active(chunks, start_ns, end_ns), None, coverage, False)
    first = int(np.searchsorted(wt, start_ns, side="left"))
    held = int(np.searchsorted(wt, start_ns, side="right"))  # wt[:held] <= start
    last = int(np.searchsorted(wt, end_ns, side="right"))  # wt[:last] <= end
    max_waiting = float(ws[first:last].max()) if last > first else None  # gauge_max_in
    # Mean over the 1 ms grid of (in flight − waiting, floored at 0). Both are
    # step functions of the grid index, so the sum is taken per stretch
    # between their changes: the value of evaluating every grid point (to the
    # bit when the gauge holds whole numbers, as request counts do).
    n_grid = -((start_ns - end_ns) // ACTIVITY_GRID_NS)
    sends = _grid_index(chunks.send_ns, start_ns, n_grid)
    stops = _grid_index(_stops(chunks), start_ns, n_grid)
    # Only the samples from the one held at the start to the window's end set a
    # stretch of positive length; the others add terms of zero. Leaving those
    # out moves the terms of the sum, which is exact (so the same) when every
    # term is a whole number: whole gauge values, as counts are.
    lo = max(held - 1, 0)
    part = ws[lo:last]
    if len(part) and bool((part == np.floor(part)).all()) and (
            float(np.abs(part).max()) + chunks.n_requests + 1) * n_grid < 2**52:
        wt, ws = wt[lo:last], part
    samples = _grid_index(wt, start_ns, n_grid)
    bounds = np.sort(np.concatenate(([0, n_grid], sends, stops, samples)))
    at = bounds[:-1]  # each stretch [bounds[i], bounds[i + 1]) is constant (or empty)
    n_samples = np.searchsorted(samples, at, side="right")
    waiting = np.where(n_samples > 0, ws[np.clip(n_samples - 1, 0, None)], 0.0)
    in_flight = (np.searchsorted(np.sort(sends), at, side="right")
                 - np.searchsorted(np.sort(stops), at, side="right"))
    active = np.clip(in_flight - waiting, 0, None)
    return Activity(float((active * np.diff(bounds)).sum() / n_grid), max_waiting, coverage, True)


def _grid_index(times: np.ndarray, start_ns: int, n_grid: int) -> np.ndarray:
    """The first grid point (start_ns + j * ACTIVITY_GRID_NS) at or after each time."""
    first = -((start_ns - np.asarray(times, dtype=np.int64)) // ACTIVITY_GRID_NS)  # ceil
    return np.clip(first, 0, n_grid)
