"""Power, energy and throttling of one cell, from the run's GPU telemetry.

Pure arithmetic on `gpu_metrics.parquet` rows (see docs/data-format.md): the
builder calls it per cell with the cell's window and token count, so a page's
joules per token trace back to the samples. Nothing here is guessed: a GPU
whose samples do not cover the window gets no energy figure.

Rules (docs/methodology.md states them for readers):
- Each GPU's readings are a step function between samples for throttle state
  and a straight line between samples for power and the energy counter; the
  window's edges are interpolated between the samples either side.
- Energy prefers the driver's energy counter (difference of the counter at the
  window's edges) and falls back to the trapezoid integral of power when any
  sample of that GPU in reach of the window lacks the counter or it runs backwards,
  or the samples stop short of an edge (then the nearest power reading is held).
- Average power is energy over the window's length; peak power the highest
  sample (or interpolated edge value) in the window.
- A throttle class's share is the fraction of the window some GPU had one of
  its bits set (GPU idle and the application-clocks setting are ignored: they
  are normal operation); a share above THROTTLE_FLAG_SHARE flags the cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

# NVML clocks-event (formerly "clocks throttle") reason bits, as in nvml.h /
# nvidia-ml-py `nvmlClocksEventReason*`; the throttle_reasons column holds them.
NVML_GPU_IDLE = 0x1  # ignored: nothing to do is not throttling
NVML_APPLICATIONS_CLOCKS_SETTING = 0x2  # ignored: clocks held at the configured limit
NVML_SW_POWER_CAP = 0x4
NVML_HW_SLOWDOWN = 0x8  # hardware cut clocks by half or more
NVML_SYNC_BOOST = 0x10  # held down to match other GPUs of a sync-boost group
NVML_SW_THERMAL_SLOWDOWN = 0x20
NVML_HW_THERMAL_SLOWDOWN = 0x40
NVML_HW_POWER_BRAKE_SLOWDOWN = 0x80
NVML_DISPLAY_CLOCK_SETTING = 0x100

POWER_CAPPED = "power-capped"
THERMAL = "thermal"
CLOCKS_BELOW_APPLICATION = "clocks below application clocks"
# Throttle classes the pages name, and the bits that make each one active.
THROTTLE_CLASSES: dict[str, int] = {
    POWER_CAPPED: NVML_SW_POWER_CAP | NVML_HW_POWER_BRAKE_SLOWDOWN,
    THERMAL: NVML_SW_THERMAL_SLOWDOWN | NVML_HW_THERMAL_SLOWDOWN,
    CLOCKS_BELOW_APPLICATION: NVML_HW_SLOWDOWN | NVML_SYNC_BOOST | NVML_DISPLAY_CLOCK_SETTING,
}
# A class active for more than this share of the window flags the cell.
THROTTLE_FLAG_SHARE = 0.10
# Samples may miss a window edge by this much (a sampling period is ~0.1 s):
# the nearest sample's reading is held up to the edge. Further away: no figure.
EDGE_SLACK_NS = 500_000_000


@dataclass
class GpuFigures:
    """One GPU over one window."""

    gpu: int
    avg_w: float | None
    peak_w: float | None
    energy_j: float | None
    energy_source: str | None  # "counter" or "integral"
    throttle_shares: dict[str, float] = field(default_factory=dict)


@dataclass
class CellEnergy:
    """A cell's power and energy figures (None where the telemetry cannot say)."""

    gpus: list[GpuFigures]
    avg_w: float | None  # all GPUs together
    peak_w: float | None  # highest sum of the GPUs' readings at one sample time
    energy_j: float | None
    energy_source: str | None  # "counter", "integral" or "mixed"
    j_per_token: float | None
    tok_s_per_kw: float | None
    throttle_shares: dict[str, float]
    throttle_flags: list[str]  # classes over THROTTLE_FLAG_SHARE, in THROTTLE_CLASSES order


def _interp(t: np.ndarray, v: np.ndarray, at: float) -> float:
    """v at time `at` on the line through the samples (held beyond the ends)."""
    return float(np.interp(at, t, v))


def _covers(t: np.ndarray, start: int, end: int) -> bool:
    return len(t) > 0 and t[0] <= start + EDGE_SLACK_NS and t[-1] >= end - EDGE_SLACK_NS


def _integral(t: np.ndarray, w: np.ndarray, start: int, end: int) -> float:
    """Trapezoid integral of power (W) over [start, end] in joules."""
    inside = (t > start) & (t < end)
    ts = np.concatenate(([start], t[inside], [end])).astype(np.float64)
    ws = np.concatenate(([_interp(t, w, start)], w[inside], [_interp(t, w, end)]))
    return float(np.sum((ws[1:] + ws[:-1]) / 2 * np.diff(ts)) / 1e9)


def _counter(t: np.ndarray, mj: np.ndarray, start: int, end: int) -> float | None:
    """Energy in joules from the counter's values at the window edges, or None
    when the counter is missing near the window or runs backwards (a reset), or
    the samples do not bracket the window (a held counter would count nothing)."""
    if t[0] > start or t[-1] < end:
        return None
    reach = (t >= t[max(0, np.searchsorted(t, start, "right") - 1)]) & (
        t <= t[min(len(t) - 1, np.searchsorted(t, end, "left"))])
    if np.isnan(mj[reach]).any() or (np.diff(mj[reach]) < 0).any():
        return None
    ok = ~np.isnan(mj)
    return (_interp(t[ok], mj[ok], end) - _interp(t[ok], mj[ok], start)) / 1000.0


def _steps(t: np.ndarray, start: int, end: int) -> np.ndarray:
    """Edges of the step function's pieces inside the window."""
    return np.concatenate(([start], t[(t > start) & (t < end)], [end]))


def _state_at(t: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The held reading at each time (the last sample at or before it; the
    first sample's reading before the first sample)."""
    idx = np.clip(np.searchsorted(t, at, "right") - 1, 0, len(t) - 1)
    return values[idx]


def _gpu_figures(gpu: int, t: np.ndarray, w: np.ndarray, mj: np.ndarray,
                 bits: np.ndarray, start: int, end: int) -> GpuFigures:
    covered = _covers(t, start, end)
    ok_w = ~np.isnan(w)
    energy, source, avg, peak = None, None, None, None
    if covered and ok_w.any():
        tw, ww = t[ok_w], w[ok_w]
        if _covers(tw, start, end):
            inside = ww[(tw >= start) & (tw <= end)]
            edges = [_interp(tw, ww, start), _interp(tw, ww, end)]
            peak = float(max([*inside.tolist(), *edges]))
    if covered:
        energy = _counter(t, mj, start, end)
        source = "counter" if energy is not None else None
        if energy is None and ok_w.any() and _covers(t[ok_w], start, end):
            energy, source = _integral(t[ok_w], w[ok_w], start, end), "integral"
        if energy is not None:
            avg = energy / ((end - start) / 1e9)
    shares: dict[str, float] = {}
    known = bits >= 0
    if covered and known.any():
        tb, bb = t[known], bits[known]
        edges = _steps(tb, start, end)
        held = _state_at(tb, bb, edges[:-1])
        spans = np.diff(edges).astype(np.float64)
        for name, mask in THROTTLE_CLASSES.items():
            shares[name] = float(spans[(held & mask) != 0].sum() / (end - start))
    return GpuFigures(gpu, avg, peak, energy, source, shares)


def _union_shares(per_gpu: list[tuple[np.ndarray, np.ndarray]], start: int,
                  end: int) -> dict[str, float]:
    """Share of the window some GPU had each class active."""
    if not per_gpu:
        return {}
    edges = np.unique(np.concatenate([_steps(t, start, end) for t, _ in per_gpu]))
    spans = np.diff(edges).astype(np.float64)
    out = {}
    for name, mask in THROTTLE_CLASSES.items():
        active = np.zeros(len(spans), dtype=bool)
        for t, bits in per_gpu:
            active |= (_state_at(t, bits, edges[:-1]) & mask) != 0
        out[name] = float(spans[active].sum() / (end - start))
    return out


def _column(table: pa.Table, name: str, dtype: type) -> np.ndarray:
    """A column as numpy, empty readings as NaN (floats) or -1 (bitmasks)."""
    col = table.column(name)
    if dtype is float:
        return col.to_numpy(zero_copy_only=False).astype(np.float64)
    return np.array([-1 if v is None else v for v in col.to_pylist()], dtype=np.int64)


def cell_energy(metrics: pa.Table, start_ns: int, end_ns: int,
                tokens: int | None) -> CellEnergy | None:
    """Figures for the window [start_ns, end_ns] of the run's monotonic clock.

    `metrics` holds gpu_metrics.parquet rows (columns t_ns, gpu, power_w,
    energy_mj, throttle_reasons at least); `tokens` is the output tokens of a
    decode window or the prompt tokens of prefill samples. None when there is
    no telemetry for the window at all.
    """
    if metrics is None or metrics.num_rows == 0 or end_ns <= start_ns:
        return None
    t_all = metrics.column("t_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    gpu_all = metrics.column("gpu").to_numpy(zero_copy_only=False).astype(np.int64)
    w_all = _column(metrics, "power_w", float)
    mj_all = _column(metrics, "energy_mj", float)
    bits_all = _column(metrics, "throttle_reasons", int)
    gpus, steps, uncovered = [], [], False
    for gpu in np.unique(gpu_all):
        rows = np.flatnonzero(gpu_all == gpu)
        rows = rows[np.argsort(t_all[rows], kind="stable")]
        t = t_all[rows]
        if not _covers(t, start_ns, end_ns):
            uncovered = True  # a GPU of the run unseen here: no total for the cell
            continue
        gpus.append(_gpu_figures(int(gpu), t, w_all[rows], mj_all[rows], bits_all[rows],
                                 start_ns, end_ns))
        known = bits_all[rows] >= 0
        if known.any():
            steps.append((t[known], bits_all[rows][known]))
    if not gpus:
        return None
    shares = _union_shares(steps, start_ns, end_ns)
    whole = not uncovered and all(g.energy_j is not None for g in gpus)
    energy = sum(g.energy_j for g in gpus) if whole else None  # type: ignore[misc]
    sources = {g.energy_source for g in gpus}
    source = (sources.pop() if len(sources) == 1 else "mixed") if whole else None
    seconds = (end_ns - start_ns) / 1e9
    avg = energy / seconds if energy is not None else None
    peak = None if uncovered else _total_peak(t_all, gpu_all, w_all, [g.gpu for g in gpus],
                                              start_ns, end_ns)
    per_token = energy / tokens if energy is not None and tokens else None
    per_kw = (tokens / seconds) / (avg / 1000.0) if avg and tokens else None
    flags = [name for name in THROTTLE_CLASSES if shares.get(name, 0.0) > THROTTLE_FLAG_SHARE]
    return CellEnergy(gpus, avg, peak, energy, source, per_token, per_kw, shares, flags)


def _total_peak(t: np.ndarray, gpu: np.ndarray, w: np.ndarray, which: list[int],
                start: int, end: int) -> float | None:
    """Highest sum over GPUs of their power, each read (interpolated) at every
    sample time in the window and at its edges."""
    ok = ~np.isnan(w)
    series = []
    for g in which:
        sel = ok & (gpu == g)
        if not _covers(np.sort(t[sel]), start, end):
            return None
        order = np.argsort(t[sel], kind="stable")
        series.append((t[sel][order], w[sel][order]))
    times = np.unique(np.concatenate(
        [[start, end], *[ts[(ts >= start) & (ts <= end)] for ts, _ in series]]))
    total = sum(np.interp(times, ts, ws) for ts, ws in series)
    return float(np.max(total))


def spans_energy(metrics: pa.Table, spans: list[tuple[int, int]],
                 tokens: int | None) -> CellEnergy | None:
    """Figures over several disjoint windows taken together (a prefill cell's
    samples, each from send to first token): energies add up, power and
    throttle shares are weighted by each window's length, peaks are the highest.
    None unless every window has telemetry (a part would understate the energy)."""
    parts = [cell_energy(metrics, s, e, None) for s, e in spans if e > s]
    if not parts or any(p is None for p in parts):
        return None
    lengths = [(e - s) / 1e9 for s, e in spans if e > s]
    seconds = sum(lengths)
    whole = all(p.energy_j is not None for p in parts)  # type: ignore[union-attr]
    energy = sum(p.energy_j for p in parts) if whole else None  # type: ignore[misc,union-attr]
    sources = {p.energy_source for p in parts}  # type: ignore[union-attr]
    source = (sources.pop() if len(sources) == 1 else "mixed") if whole else None
    avg = energy / seconds if energy is not None else None
    peaks = [p.peak_w for p in parts]  # type: ignore[union-attr]
    peak = max(peaks) if all(x is not None for x in peaks) else None  # type: ignore[type-var]
    shares = {name: sum(p.throttle_shares.get(name, 0.0) * n  # type: ignore[union-attr]
                        for p, n in zip(parts, lengths, strict=True)) / seconds
              for name in THROTTLE_CLASSES}
    per_token = energy / tokens if energy is not None and tokens else None
    per_kw = (tokens / seconds) / (avg / 1000.0) if avg and tokens else None
    flags = [name for name in THROTTLE_CLASSES if shares[name] > THROTTLE_FLAG_SHARE]
    return CellEnergy([], avg, peak, energy, source, per_token, per_kw, shares, flags)
