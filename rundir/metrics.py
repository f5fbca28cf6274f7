"""The page metrics, computed from raw chunks: pure, vectorised, no I/O.

One definition serves both halves: the collector uses it to judge a cell
while it runs (statuses), the builder to recompute every published number.
Definitions are in docs/methodology.md; the short version:

* a chunk's tokens = increase of the cumulative completion-token count;
* output tokens = tokens in chunks that arrived inside the window [s, e];
* per-request rate = tokens after its first in-window token chunk /
  time from that chunk to its last in-window token chunk (so a chunk of
  three tokens counts three gaps, not one);
* TTFT = first token-carrying chunk − send time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir.contract import METRIC_WAITING

QUEUED_ACTIVE_RATIO = 0.95


@dataclass(frozen=True)
class Chunks:
    """Flattened chunks of a set of requests, ordered by request then time."""

    ns: np.ndarray  # arrival time per chunk
    tokens: np.ndarray  # tokens carried by each chunk (increments)
    cum: np.ndarray  # cumulative tokens after each chunk
    req: np.ndarray  # request index per chunk
    send_ns: np.ndarray  # per request
    end_ns: np.ndarray  # per request (-1 when unknown)
    n_requests: int

    @classmethod
    def from_table(cls, requests: pa.Table) -> Chunks:
        n = len(requests)
        ns_col = requests.column("chunk_ns").combine_chunks() if n else None
        if not n:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z, z, z, z, z, 0)
        tok_col = requests.column("chunk_tokens").combine_chunks()
        ns = np.asarray(pc.list_flatten(ns_col).to_numpy(zero_copy_only=False), dtype=np.int64)
        cum = np.asarray(pc.list_flatten(tok_col).to_numpy(zero_copy_only=False), dtype=np.int64)
        lengths = np.asarray(
            pc.fill_null(pc.list_value_length(ns_col), 0).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        req = np.repeat(np.arange(n, dtype=np.int64), lengths)
        tokens = np.diff(cum, prepend=0)
        starts = np.cumsum(lengths) - lengths
        nonempty = lengths > 0
        tokens[starts[nonempty]] = cum[starts[nonempty]]
        send = np.asarray(requests.column("send_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
        end = np.asarray(
            pc.fill_null(requests.column("end_ns"), -1).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        return cls(ns, tokens, cum, req, send, end, n)


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


def _first_last(req: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices of the first and last element of each run of equal req values."""
    if not len(req):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    change = np.flatnonzero(np.diff(req)) + 1
    first = np.concatenate(([0], change))
    last = np.concatenate((change - 1, [len(req) - 1]))
    return first, last, req[first]


def first_token_ns(chunks: Chunks) -> np.ndarray:
    """Per request, the arrival time of its first token-carrying chunk (-1: none)."""
    out = np.full(chunks.n_requests, -1, dtype=np.int64)
    mask = chunks.tokens > 0
    first, _, reqs = _first_last(chunks.req[mask])
    out[reqs] = chunks.ns[mask][first]
    return out


def ttft_ms(chunks: Chunks) -> np.ndarray:
    """TTFT of every request that produced a token, in milliseconds."""
    first = first_token_ns(chunks)
    ok = first >= 0
    return (first[ok] - chunks.send_ns[ok]) / 1e6


@dataclass(frozen=True)
class DecodeMetrics:
    output_tokens: int
    duration_s: float
    total_tok_s: float
    per_request_tok_s: float | None
    tbt_ms: float | None
    ttft_ms: float | None
    completed: int
    avg_active_client: float


def decode_metrics(chunks: Chunks, start_ns: int, end_ns: int, completed_mask: np.ndarray) -> DecodeMetrics:
    """Metrics of one decode cell over its window [start_ns, end_ns].

    completed_mask marks requests that finished normally (not cancelled,
    no error); those whose end falls inside the window count as completed.
    """
    duration_ns = end_ns - start_ns
    if duration_ns <= 0:
        raise ValueError("measurement window must have a positive duration")
    inwin = (chunks.ns >= start_ns) & (chunks.ns <= end_ns)
    output = int(chunks.tokens[inwin].sum())
    tok = inwin & (chunks.tokens > 0)
    req = chunks.req[tok]
    ns = chunks.ns[tok]
    toks = chunks.tokens[tok]
    first, last, _ = _first_last(req)
    if len(first):
        sums = np.add.reduceat(toks, first)
        after_first = sums - toks[first]
        span = (ns[last] - ns[first]).astype(np.float64)
        ok = (span > 0) & (after_first > 0)
        rates = after_first[ok] / (span[ok] / 1e9)
        gaps_ms = (span[ok] / 1e6) / after_first[ok]
    else:
        rates = gaps_ms = np.zeros(0)
    ttfts = ttft_ms(chunks)
    ended_in = (chunks.end_ns >= start_ns) & (chunks.end_ns <= end_ns) & completed_mask
    return DecodeMetrics(
        output_tokens=output,
        duration_s=duration_ns / 1e9,
        total_tok_s=output / (duration_ns / 1e9),
        per_request_tok_s=_median(rates),
        tbt_ms=_median(gaps_ms),
        ttft_ms=_median(ttfts),
        completed=int(ended_in.sum()),
        avg_active_client=client_active(chunks, start_ns, end_ns),
    )


def client_active(chunks: Chunks, start_ns: int, end_ns: int) -> float:
    """Time-weighted mean over the window of streams that have received a
    first token and not yet ended (the fallback for a server gauge)."""
    first = first_token_ns(chunks)
    ok = first >= 0
    if not ok.any():
        return 0.0
    last_chunk = np.full(chunks.n_requests, -1, dtype=np.int64)
    _, last, reqs = _first_last(chunks.req)
    last_chunk[reqs] = chunks.ns[last]
    stop = np.where(chunks.end_ns >= 0, chunks.end_ns, last_chunk)
    lo = np.maximum(first[ok], start_ns)
    hi = np.minimum(stop[ok], end_ns)
    overlap = np.clip(hi - lo, 0, None).sum()
    return float(overlap) / float(end_ns - start_ns)


def gauge_series(t_ns: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum a gauge over its label sets: one value per scrape time."""
    if not len(t_ns):
        return t_ns, values
    times, inverse = np.unique(t_ns, return_inverse=True)
    sums = np.zeros(len(times))
    np.add.at(sums, inverse, values)
    return times, sums


def gauge_time_mean(times: np.ndarray, values: np.ndarray, start_ns: int, end_ns: int) -> float | None:
    """Time-weighted mean over [start, end] of a sampled gauge held between samples."""
    if not len(times):
        return None
    before = np.flatnonzero(times <= start_ns)
    inside = np.flatnonzero((times > start_ns) & (times < end_ns))
    if not len(before) and not len(inside):
        return None
    idx = np.concatenate(([before[-1]] if len(before) else [], inside)).astype(np.int64)
    t = times[idx].astype(np.int64)
    t[0] = max(t[0], start_ns)
    bounds = np.append(t, end_ns)
    weights = np.diff(bounds).astype(np.float64)
    if weights.sum() <= 0:
        return None
    return float((values[idx] * weights).sum() / weights.sum())


def gauge_max_in(times: np.ndarray, values: np.ndarray, start_ns: int, end_ns: int) -> float | None:
    inside = (times >= start_ns) & (times <= end_ns)
    return float(values[inside].max()) if inside.any() else None


def is_queued(concurrency: int, avg_active: float | None, max_waiting: float | None) -> bool:
    """Requests queued: the server's waiting gauge rose above zero in the
    window, or fewer than 95% of the requested streams were running."""
    if max_waiting is not None and max_waiting > 0:
        return True
    return avg_active is not None and avg_active < QUEUED_ACTIVE_RATIO * concurrency


@dataclass(frozen=True)
class PrefillMetrics:
    prompt_tok_s: float | None
    ttft_ms: float | None
    samples: int


def prefill_metrics(chunks: Chunks, prompt_tokens: np.ndarray) -> PrefillMetrics:
    """Prompt tokens / TTFT of each cold sample; medians of the repeats."""
    first = first_token_ns(chunks)
    ok = (first >= 0) & (prompt_tokens > 0)
    ttft_ns = (first - chunks.send_ns)[ok].astype(np.float64)
    ok_pos = ttft_ns > 0
    rates = prompt_tokens[ok][ok_pos] / (ttft_ns[ok_pos] / 1e9)
    return PrefillMetrics(
        prompt_tok_s=_median(rates),
        ttft_ms=_median(ttft_ns[ok_pos] / 1e6),
        samples=int(ok_pos.sum()),
    )


def _count_at(starts: np.ndarray, stops: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """How many [start, stop) intervals contain each time in grid."""
    return np.searchsorted(np.sort(starts), grid, side="right") - np.searchsorted(
        np.sort(stops), grid, side="right"
    )


def _stops(chunks: Chunks) -> np.ndarray:
    """Per request: when its stream ended (last chunk if the end is unknown)."""
    last_chunk = np.full(chunks.n_requests, -1, dtype=np.int64)
    _, last, reqs = _first_last(chunks.req)
    last_chunk[reqs] = chunks.ns[last]
    return np.where(chunks.end_ns >= 0, chunks.end_ns, np.maximum(last_chunk, chunks.send_ns))


ACTIVITY_GRID_NS = 1_000_000  # 1 ms steps


def window_activity(
    chunks: Chunks, server_metrics: pa.Table | None, start_ns: int, end_ns: int
) -> tuple[float, float | None]:
    """Average active requests over the window, and the largest waiting
    count the server reported inside it.

    With the server's waiting gauge (summed over label sets, held between
    samples): active = requests in flight (sent, not yet ended) − waiting.
    That is exact whenever nothing waits, unlike a running gauge sampled
    once a second, which misses the short gaps between a stream's end and
    its restart (and was seen to lag by seconds on vLLM's CPU build).
    Without a waiting gauge a queued request cannot be told from a running
    one by the client, so only streams that are receiving tokens (first
    token to end) count.
    """
    max_waiting = None
    wt = ws = None
    if server_metrics is not None and len(server_metrics):
        t = np.asarray(server_metrics.column("t_ns").to_numpy(), dtype=np.int64)
        names = np.asarray(server_metrics.column("name").to_numpy(zero_copy_only=False))
        values = np.asarray(server_metrics.column("value").to_numpy(), dtype=np.float64)
        sel = names == METRIC_WAITING
        if sel.any():
            wt, ws = gauge_series(t[sel], values[sel])
            max_waiting = gauge_max_in(wt, ws, start_ns, end_ns)
            if wt[0] > end_ns:
                wt = ws = None
    if wt is None:
        return client_active(chunks, start_ns, end_ns), max_waiting
    grid = np.arange(start_ns, end_ns, ACTIVITY_GRID_NS, dtype=np.int64)
    idx = np.searchsorted(wt, grid, side="right") - 1
    waiting = np.where(idx >= 0, ws[np.clip(idx, 0, None)], 0.0)
    in_flight = _count_at(chunks.send_ns, _stops(chunks), grid)
    return float(np.clip(in_flight - waiting, 0, None).mean()), max_waiting
