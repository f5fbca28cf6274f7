"""Per-cell raw views for the drill-down pages: distributions and a timeline.

Computed once from the raw chunks at aggregation time and cached with the
run's aggregates, so a page build never reads Parquet for a cached run.
Everything here is plain lists (JSON-ready) and binned with numpy, so a
128-stream, 30-second cell turns into a few kilobytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir.metrics import Chunks, first_token_ns, ttft_ms

TBT_BINS = 40
MAX_ERRORS = 5
MAX_TAILS = 3
TAIL_CHARS = 400


def _round(values: np.ndarray, digits: int = 3) -> list[float]:
    return [float(v) for v in np.round(np.asarray(values, dtype=np.float64), digits)]


def token_gaps_ms(chunks: Chunks, start_ns: int, end_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-token gaps inside the window and their weights (tokens per chunk).

    A chunk carrying k tokens after a gap of d counts as k gaps of d / k,
    the same per-token view the Time between tokens metric takes.
    """
    mask = (chunks.ns >= start_ns) & (chunks.ns <= end_ns) & (chunks.tokens > 0)
    ns, req, tok = chunks.ns[mask], chunks.req[mask], chunks.tokens[mask]
    if len(ns) < 2:
        return np.zeros(0), np.zeros(0)
    same = req[1:] == req[:-1]
    gaps = (ns[1:] - ns[:-1])[same].astype(np.float64) / 1e6
    weights = tok[1:][same].astype(np.float64)
    return gaps / weights, weights


def _histogram(values: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    if not len(values):
        return {"edges": [], "counts": [], "overflow": 0}
    hi = float(np.quantile(values, 0.99)) if len(values) > 20 else float(values.max())
    hi = hi if hi > 0 else float(values.max()) or 1.0
    edges = np.linspace(0.0, hi * 1.0001, TBT_BINS + 1)
    counts, _ = np.histogram(values, bins=edges, weights=weights)
    overflow = float(weights[values > edges[-1]].sum())
    return {"edges": _round(edges), "counts": _round(counts, 1), "overflow": overflow}


def _timeline(chunks: Chunks, start_ns: int, end_ns: int) -> dict[str, list[float]]:
    duration = end_ns - start_ns
    n_bins = int(np.clip(round(duration / 0.5e9), 10, 120))
    edges = np.linspace(start_ns, end_ns, n_bins + 1)
    inwin = (chunks.ns >= start_ns) & (chunks.ns <= end_ns)
    toks, _ = np.histogram(chunks.ns[inwin], bins=edges, weights=chunks.tokens[inwin])
    width_s = duration / n_bins / 1e9
    centers = (edges[:-1] + edges[1:]) / 2
    first = first_token_ns(chunks)
    last_chunk = np.full(chunks.n_requests, -1, dtype=np.int64)
    if len(chunks.req):
        np.maximum.at(last_chunk, chunks.req, chunks.ns)
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


def gauge_in_window(
    series: tuple[np.ndarray, np.ndarray] | None, start_ns: int, end_ns: int
) -> dict[str, list[float]] | None:
    """A summed gauge's samples over the window (plus the value held at its start)."""
    if series is None:
        return None
    times, values = series
    before = np.flatnonzero(times <= start_ns)
    inside = np.flatnonzero((times > start_ns) & (times <= end_ns))
    idx = np.concatenate(([before[-1]] if len(before) else [], inside)).astype(np.int64)
    if not len(idx):
        return None
    t = np.maximum(times[idx], start_ns)
    return {"t_s": _round((t - start_ns) / 1e9), "value": _round(values[idx], 2)}


def _outcomes(requests: pa.Table) -> dict[str, Any]:
    n = len(requests)
    if not n:
        return {"total": 0, "finished": 0, "cancelled": 0, "errors": 0, "finish_reasons": {}}
    cancelled = int(pc.sum(requests.column("cancelled")).as_py() or 0)
    errors = n - requests.column("error").null_count
    reasons: dict[str, int] = {}
    for r in requests.column("finish_reason").to_pylist():
        if r is not None:
            reasons[r] = reasons.get(r, 0) + 1
    return {
        "total": n,
        "finished": sum(reasons.values()),
        "cancelled": cancelled,
        "errors": errors,
        "finish_reasons": dict(sorted(reasons.items())),
    }


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
    running: tuple[np.ndarray, np.ndarray] | None = None,
    waiting: tuple[np.ndarray, np.ndarray] | None = None,
    with_tails: bool = False,
) -> dict[str, Any]:
    """Everything the decode drill-down page draws, from the cell's measure requests."""
    gaps, weights = token_gaps_ms(chunks, start_ns, end_ns)
    return {
        "kind": "decode",
        "window_ns": [int(start_ns), int(end_ns)],
        "ttft_ms": _round(ttft_ms(chunks)),
        "tbt": _histogram(gaps, weights),
        "timeline": _timeline(chunks, start_ns, end_ns),
        "running": gauge_in_window(running, start_ns, end_ns),
        "waiting": gauge_in_window(waiting, start_ns, end_ns),
        "outcomes": _outcomes(requests),
        "errors": _errors(requests),
        "tails": _tails(requests) if with_tails else [],
    }


def prefill_detail(requests: pa.Table, chunks: Chunks, prompt_tokens: np.ndarray) -> dict[str, Any]:
    """The cold samples of a prefill cell, one row each."""
    first = first_token_ns(chunks)
    cached = requests.column("cached_tokens").to_pylist() if len(requests) else []
    samples = []
    t0 = int(chunks.send_ns.min()) if chunks.n_requests else 0
    for i in range(chunks.n_requests):
        ttft = (first[i] - chunks.send_ns[i]) / 1e6 if first[i] >= 0 else None
        ok = ttft is not None and ttft > 0 and prompt_tokens[i] > 0
        rate = prompt_tokens[i] / (ttft / 1e3) if ok else None
        samples.append(
            {
                "sent_s": round((int(chunks.send_ns[i]) - t0) / 1e9, 3),
                "prompt_tokens": int(prompt_tokens[i]) if prompt_tokens[i] > 0 else None,
                "cached_tokens": cached[i],
                "ttft_ms": round(ttft, 3) if ttft is not None else None,
                "prompt_tok_s": round(float(rate), 2) if rate is not None else None,
            }
        )
    return {
        "kind": "prefill",
        "samples": samples,
        "outcomes": _outcomes(requests),
        "errors": _errors(requests),
        "tails": [],
    }
