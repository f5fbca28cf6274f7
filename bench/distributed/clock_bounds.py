"""How far a remote shard's clock bound could move a cell's published figures (pure).

Why: with `--shard i/N` every time of shard k's records is converted to
shard 0's clock with an offset known only within ± U_k (bench/distributed/clocksync.py:
half the shortest round trip, plus the drift over the cell). Times within
one request are differences of one host's stamps and carry no offset
error, but where a shard's streams sit against the window's edges does: a
bound of ±0.5 s on a 5 s window could add or drop a tenth of the shard's
tokens. Stating the bound in the reason was not enough: a figure it can
move past half its displayed step flags the cell client-bound, exactly as
the collector's own late reads do (bench/measure/stamp_bounds.py, whose display
steps and FigureBound this uses).

How: the cell's figures (rundir.metrics.decode_metrics, as the page
computes them) are computed again with each remote shard's times moved by
+U_k and by −U_k, each shard alone and all of them together (the first
MAX_ALONE shards by bound alone), and a figure's bound is its largest
change. A shard's streams end at the window's end on its own clock, so
moving them earlier leaves a gap at the end that nothing fills, as the
truth would.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.measure.stamp_bounds import (
    AVERAGE_STEP,
    COUNT_STEP,
    TBT_STEP_MS,
    FigureBound,
    tok_s_step,
    ttft_step,
)
from rundir import metrics
from rundir.contract import PURPOSE_MEASURE

MAX_ALONE = 16  # shards moved one at a time (the largest bounds); all move together as well


def _figures(m: metrics.DecodeMetrics | None) -> dict[str, float | None]:
    if m is None:
        return {}
    return {"total tok/s": m.total_tok_s, "per-request tok/s": m.per_request_tok_s,
            "time between tokens": m.tbt_ms, "TTFT": m.ttft_ms,
            "completed requests": float(m.completed), "average active": m.avg_active_client}


def _step(name: str, value: float) -> tuple[float, str]:
    if name in ("total tok/s", "per-request tok/s"):
        return tok_s_step(value), ""
    if name == "time between tokens":
        return TBT_STEP_MS, " ms"
    if name == "TTFT":
        return ttft_step(value), " ms"
    return (COUNT_STEP if name == "completed requests" else AVERAGE_STEP), ""


def _moved(chunks: metrics.Chunks, shift_req: np.ndarray, start_ns: int, end_ns: int,
           done: np.ndarray) -> metrics.DecodeMetrics | None:
    """The figures with request i's times moved by shift_req[i] ns."""
    off = chunks.starts()
    per_chunk = np.repeat(shift_req, np.diff(off))
    end = np.where(chunks.end_ns >= 0, chunks.end_ns + shift_req, chunks.end_ns)
    moved = metrics.Chunks(chunks.chunk_ns + per_chunk, chunks.tokens, chunks.cum,
                           chunks.send_ns + shift_req, end, off)
    try:
        return metrics.decode_metrics(moved, start_ns, end_ns, done)
    except ValueError:
        return None


def clock_figure_bounds(requests: pa.Table, start_ns: int, end_ns: int,
                        bounds: dict[str, int]) -> list[FigureBound]:
    """Each published figure's bound from the shards' clock bounds:
    `bounds` maps a shard's request-id prefix (`<tag>-w<k>`) to its U_k (ns)."""
    rows = requests.filter(pc.equal(requests.column("purpose"), PURPOSE_MEASURE))
    chunks = metrics.Chunks.from_table(rows)
    bounds = {p: u for p, u in bounds.items() if u > 0}
    if not chunks.n_requests or not bounds:
        return []
    ids = rows.column("request_id").to_pylist()
    cancelled = np.asarray(rows.column("cancelled").to_numpy(zero_copy_only=False), dtype=bool)
    failed = np.asarray(pc.is_valid(rows.column("error")).to_numpy(zero_copy_only=False),
                        dtype=bool)
    done = ~cancelled & ~failed
    published = _figures(metrics.decode_metrics(chunks, start_ns, end_ns, done))
    members = {p: np.array([i.startswith(p + "-") for i in ids], dtype=bool) for p in bounds}
    members = {p: m for p, m in members.items() if m.any()}
    if not members:
        return []
    together = sum(m * bounds[p] for p, m in members.items())
    scenarios = [together, -together]
    if len(members) > 1:
        for p in sorted(members, key=lambda p: -bounds[p])[:MAX_ALONE]:
            scenarios += [members[p] * bounds[p], members[p] * -bounds[p]]
    moved = {name: 0.0 for name, v in published.items() if v is not None}
    for shift in scenarios:
        got = _figures(_moved(chunks, np.asarray(shift, dtype=np.int64), start_ns, end_ns, done))
        for name in moved:
            other = got.get(name)
            change = math.inf if other is None else abs(other - published[name])  # type: ignore[operator]
            moved[name] = max(moved[name], change)
    out = []
    for name, by in moved.items():
        step, unit = _step(name, published[name])  # type: ignore[arg-type]
        out.append(FigureBound(name, by, step, unit))
    return out


def clock_reason(requests: pa.Table, start_ns: int, end_ns: int,
                 shards: list[tuple[int, str, int]]) -> str | None:
    """Why the shards' clock bounds could have moved a published figure past
    its display step, or None; `shards`: (index, request-id prefix, U ns)."""
    bounds = {prefix: u for _, prefix, u in shards}
    shown = [b.describe() for b in clock_figure_bounds(requests, start_ns, end_ns, bounds)
             if b.visible]
    if not shown:
        return None
    worst = max(shards, key=lambda s: s[2])
    return (f"clock offsets: shard {worst[0]}'s is known within ±{worst[2] / 1e6:.3g} ms, "
            f"so where its streams sit against the window's edges is not: "
            + "; ".join(shown))
