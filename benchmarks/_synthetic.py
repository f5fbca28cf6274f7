"""Real-size synthetic measured runs, generated with numpy (no loop per chunk).

`tests/synthetic_runs.make_measured_run` simulates a run chunk by chunk in
Python: right for small test runs, far too slow for the builder benchmarks,
which need runs the size of a real sweep (60 cells, about 3 million chunks).
This module produces the same shape of data the same way the collector
records it: a prefix-fill request per stream, then C streams running
requests back to back (a 0-token role chunk, then chunks of 1..k tokens
after log-normal gaps), requests reaching the max output finish with
"length" and are replaced, those still open at the window's end are
cancelled 5 ms after it (so some chunks must be clipped), cold prefill
samples, and a server "running" gauge split over two label sets plus a
"waiting" gauge. Everything is written through `rundir.io`, so the files
pass the contract.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rundir import contract
from rundir.io import write_run_info, write_table
from tests.support.synthetic_runs import MS, T0, S, _cell_row, _merge, _rows_table, run_info

CONTEXTS = [8192, 16384, 32768, 65536, 131072, 257024]
CONCURRENCY = [1, 2, 4, 8, 16, 32, 64, 128, 256]  # 54 decode + 6 prefill = 60 cells
MODELS = ["Qwen3.5-4B", "Qwen3.5-32B", "Llama-4-Scout", "Kimi-K2.6", "gpt-oss-120b",
          "Gemma-4-27B", "DeepSeek-V4", "Mistral-Large-3"]
GPUS = [("H200 SXM", 8, 141.0), ("RTX PRO 6000 Blackwell Server Edition", 1, 96.0),
        ("B200", 8, 180.0), ("MI355X", 8, 288.0), ("L40S", 2, 48.0)]
ENGINES = [("vllm", "0.30.1"), ("sglang", "0.5.2"), ("llama.cpp", "b6000")]


class _Table:
    """Column lists of requests.parquet, filled cell by cell, then concatenated."""

    def __init__(self) -> None:
        self.parts: list[dict[str, Any]] = []
        self.n = 0

    def add(self, n: int, lengths: np.ndarray, ns: np.ndarray, cum: np.ndarray,
            **cols: Any) -> None:
        """Append n requests; scalars in cols are repeated, arrays taken as they are."""
        part = {k: (np.asarray(v) if not np.isscalar(v) and v is not None else [v] * n)
                for k, v in cols.items()}
        part["_lengths"], part["_ns"], part["_cum"] = lengths, ns, cum
        self.parts.append(part)
        self.n += n

    def table(self) -> pa.Table:
        cols: dict[str, Any] = {}
        for f in contract.REQUESTS_SCHEMA:
            if f.name in ("chunk_ns", "chunk_tokens", "request_id"):
                continue
            vals: list[Any] = []
            for p in self.parts:
                v = p.get(f.name)
                vals.extend(list(v) if v is not None else [None] * len(p["_lengths"]))
            cols[f.name] = pa.array(vals, type=f.type)
        lengths = np.concatenate([p["_lengths"] for p in self.parts]).astype(np.int32)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        cols["chunk_ns"] = pa.ListArray.from_arrays(
            pa.array(offsets), pa.array(np.concatenate([p["_ns"] for p in self.parts])))
        cols["chunk_tokens"] = pa.ListArray.from_arrays(
            pa.array(offsets), pa.array(np.concatenate([p["_cum"] for p in self.parts])))
        cols["request_id"] = pa.array([f"r{i:07d}" for i in range(self.n)])
        return pa.table({f.name: cols[f.name] for f in contract.REQUESTS_SCHEMA},
                        schema=contract.REQUESTS_SCHEMA)


def _streams(rng: np.random.Generator, conc: int, start: int, we: int, rate: float,
             ttft_s: float, max_out: int, k_max: int) -> dict[str, np.ndarray]:
    """All measure requests of one decode cell: flattened chunks plus per-request fields."""
    cutoff = we + 5 * MS
    span_s = (cutoff - start) / S
    mean_k = (k_max + 1) / 2
    n = int(span_s * rate / mean_k * 1.3) + 2 * int(span_s * rate / max_out + 2) + 32
    while True:
        k = rng.integers(1, k_max + 1, size=(conc, n))
        total = np.cumsum(k, axis=1)
        req = (total - k) // max_out  # request a chunk belongs to: tokens before it
        cum = np.minimum(total - req * max_out, max_out)
        first = np.ones_like(req, dtype=bool)
        first[:, 1:] = req[:, 1:] != req[:, :-1]
        ttft = ttft_s * S * rng.uniform(0.8, 1.25, size=(conc, n))
        gap = k * rng.lognormal(0.0, 0.15, size=(conc, n)) / rate * S
        gap = np.where(first, ttft + 2 * MS, gap)
        gap[:, 0] = ttft[:, 0] + np.arange(conc) * 2 * MS
        t = start + np.cumsum(gap, axis=1).astype(np.int64)
        send = t - np.where(first, ttft, 0).astype(np.int64)
        send = np.maximum.accumulate(np.where(first, send, 0), axis=1)  # each chunk's request send
        if (t[:, -1] > cutoff).all():
            break
        n *= 2
    keep = (t <= cutoff) & (send < we)
    rows, cols = np.nonzero(keep)  # row-major: by stream, then time
    key = rows * (n + 1) + req[rows, cols]
    starts = np.flatnonzero(np.diff(key, prepend=-1))
    lengths = np.diff(np.append(starts, len(key)))
    ns, toks = t[rows, cols], cum[rows, cols]
    last = starts + lengths - 1
    done = toks[last] >= max_out
    end = np.where(done, ns[last] + MS, cutoff)
    role = ns[starts] - MS // 4
    ns = np.insert(ns, starts, role)
    toks = np.insert(toks, starts, 0)
    return {"lengths": lengths + 1, "ns": ns, "cum": toks, "slot": rows[starts],
            "send": send[rows[starts], cols[starts]], "end": end, "done": done}


def make_large_run(
    path: Path,
    *,
    run_id: str,
    seed: int = 0,
    contexts: list[int] | None = None,
    concurrency: list[int] | None = None,
    tokens_per_s: float = 540.0,
    duration_s: float = 30.0,
    warmup_s: float = 2.0,
    max_output_tokens: int = 1024,
    tokens_per_chunk: int = 2,
    prefill_repeats: int = 3,
    kv_budget_tokens: int | None = 6_000_000,
    info: dict[str, Any] | None = None,
) -> int:
    """Write a real-size measured run to path; return its number of chunks."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    contexts = list(contexts or CONTEXTS)
    concurrency = list(concurrency or CONCURRENCY)
    tab = _Table()
    cells: list[dict[str, Any]] = []
    now = T0 + 100 * MS
    intervals: list[tuple[np.ndarray, np.ndarray]] = []
    for ctx in contexts:  # cold prefill samples, one output token each
        ttfts = (ctx / (30_000 * (1 - ctx / 2_000_000)) * S
                 * rng.uniform(0.97, 1.03, prefill_repeats)).astype(np.int64)
        send = now + np.concatenate(([0], np.cumsum(ttfts[:-1] + 20 * MS)))
        first = send + ttfts
        ns = np.stack([first - MS // 2, first], axis=1).ravel()
        cum = np.tile(np.array([0, 1], dtype=np.int64), prefill_repeats)
        tab.add(prefill_repeats, np.full(prefill_repeats, 2), ns, cum, phase=contract.PREFILL,
                context=ctx, concurrency=1, purpose=contract.PURPOSE_PREFILL, stream_index=0,
                send_ns=send, end_ns=first + MS, prompt_tokens=ctx, cached_tokens=0,
                finish_reason="length", cancelled=False)
        intervals.append((send, first + MS))
        cells.append(_cell_row(contract.PREFILL, ctx, 1, contract.VALID, window_start_ns=int(now),
                               window_end_ns=int(first[-1] + 20 * MS),
                               token_counting=contract.COUNT_USAGE_CONTINUOUS))
        now = int(first[-1] + 20 * MS)
    special = {(contexts[0], concurrency[-1]): contract.REQUESTS_QUEUED,
               (contexts[1], concurrency[2]): contract.LOOPED, (contexts[2], concurrency[1]): contract.ERROR}
    queued: list[tuple[int, int]] = []
    for ctx in contexts:
        for conc in concurrency:
            status = special.get((ctx, conc), contract.VALID)
            if kv_budget_tokens is not None and conc * (ctx + max_output_tokens) > kv_budget_tokens:
                cells.append(_cell_row(contract.DECODE, ctx, conc, contract.OVER_CAPACITY,
                                       reason=f"needs {conc * (ctx + max_output_tokens):,} KV "
                                              f"tokens, the server holds {kv_budget_tokens:,}"))
                continue
            rate = tokens_per_s / (1 + 0.04 * (conc - 1)) / (1 + ctx / 65536)
            ttft_s = 0.02 + ctx / 4e6 + 0.003 * conc
            fill_send = now + np.arange(conc, dtype=np.int64) * MS
            tab.add(conc, np.ones(conc, dtype=np.int64), fill_send + 29 * MS,
                    np.ones(conc, dtype=np.int64), phase=contract.DECODE, context=ctx,
                    concurrency=conc, purpose=contract.PURPOSE_PREFIX_FILL,
                    stream_index=np.arange(conc), send_ns=fill_send, end_ns=fill_send + 30 * MS,
                    prompt_tokens=ctx, cached_tokens=0, finish_reason="length", cancelled=False)
            intervals.append((fill_send, fill_send + 30 * MS))
            start = now + 50 * MS
            ws = start + int(warmup_s * S)
            we = ws + int(duration_s * S)
            s = _streams(rng, conc, start, we, rate, ttft_s, max_output_tokens, tokens_per_chunk)
            m = len(s["lengths"])
            err = (s["slot"] == 0) & (status == contract.ERROR)
            done = s["done"] & ~err
            tail = ("the same line again. " * 20) if status == contract.LOOPED else "…end of a story."
            tab.add(m, s["lengths"], s["ns"], s["cum"], phase=contract.DECODE, context=ctx,
                    concurrency=conc, purpose=contract.PURPOSE_MEASURE, stream_index=s["slot"],
                    send_ns=s["send"], end_ns=s["end"], prompt_tokens=ctx,
                    cached_tokens=ctx - ctx % 256,
                    finish_reason=np.where(done, "length", None),
                    error=np.where(err, "stream closed: server returned HTTP 500", None),
                    cancelled=~done & ~err, content_tail=tail)
            intervals.append((s["send"], s["end"]))
            if status == contract.REQUESTS_QUEUED:
                queued.append((ws, we))
            reason = {contract.LOOPED: "the same 40 tokens repeated 12 times",
                      contract.ERROR: "stream closed: server returned HTTP 500"}.get(status)
            cells.append(_cell_row(contract.DECODE, ctx, conc, status, reason=reason,
                                   window_start_ns=ws, window_end_ns=we, warmup_s=warmup_s,
                                   token_counting=contract.COUNT_USAGE_CONTINUOUS))
            now = we + 200 * MS
    requests = tab.table()
    params = {"contexts": contexts, "concurrency": concurrency, "prefill_contexts": contexts,
              "duration_s": duration_s, "max_output_tokens": max_output_tokens,
              "prefill_repeats": prefill_repeats}
    extra = _merge({"parameters": params, "kv_budget": {"tokens": kv_budget_tokens,
                                                        "source": "synthetic"}}, info)
    path.mkdir(parents=True, exist_ok=True)
    write_run_info(path, run_info(run_id, info=extra))
    write_table(path, contract.CELLS_FILE, _rows_table(cells, contract.CELLS_SCHEMA))
    write_table(path, contract.REQUESTS_FILE, requests)
    write_table(path, contract.SERVER_METRICS_FILE, _gauges(intervals, T0, now, queued))
    return int(pa.compute.sum(pa.compute.list_value_length(requests.column("chunk_ns"))).as_py())


def _gauges(intervals: list[tuple[np.ndarray, np.ndarray]], t_from: int, t_to: int,
            queued: list[tuple[int, int]]) -> pa.Table:
    """server_metrics.parquet: running (two label sets) and waiting, every 250 ms."""
    sends = np.sort(np.concatenate([a for a, _ in intervals]))
    ends = np.sort(np.concatenate([b for _, b in intervals]))
    t = np.arange(t_from, t_to, 250 * MS, dtype=np.int64)
    running = (np.searchsorted(sends, t, side="right") - np.searchsorted(ends, t, side="right"))
    waiting = np.zeros(len(t))
    for qs, qe in queued:
        inq = (t >= qs) & (t <= qe) & (running > 0)
        running = np.where(inq, running - 1, running)
        waiting[inq] = 1.0
    half = running // 2
    n = len(t)
    return pa.table({
        "t_ns": np.concatenate([t, t, t]),
        "name": [contract.METRIC_RUNNING] * (2 * n) + [contract.METRIC_WAITING] * n,
        "source": ["vllm:num_requests_running"] * (2 * n) + ["vllm:num_requests_waiting"] * n,
        "labels": ['engine="0"'] * n + ['engine="1"'] * n + ['engine="0"'] * n,
        "value": np.concatenate([running - half, half, waiting]).astype(np.float64),
    }, schema=contract.SERVER_METRICS_SCHEMA)


def run_identity(i: int) -> dict[str, Any]:
    """run.yaml overrides that spread runs over models, GPUs and engines (model pages group them)."""
    gpu, count, vram = GPUS[i % len(GPUS)]
    engine, version = ENGINES[i % len(ENGINES)]
    return {"model": {"name": MODELS[i % len(MODELS)]},
            "hardware": {"gpu_name": gpu, "gpu_count": count, "vram_gb_per_gpu": vram},
            "engine": {"name": engine, "version": version}}


def estimate_chunks(contexts: list[int] | None = None, concurrency: list[int] | None = None,
                    tokens_per_s: float = 540.0, duration_s: float = 30.0, warmup_s: float = 2.0,
                    max_output_tokens: int = 1024, tokens_per_chunk: int = 2,
                    kv_budget_tokens: int | None = 6_000_000) -> int:
    """Expected chunks of make_large_run with these settings (to size it without writing)."""
    total = 0.0
    for ctx in contexts or CONTEXTS:
        for conc in concurrency or CONCURRENCY:
            if kv_budget_tokens is not None and conc * (ctx + max_output_tokens) > kv_budget_tokens:
                continue
            rate = tokens_per_s / (1 + 0.04 * (conc - 1)) / (1 + ctx / 65536)
            total += conc * (warmup_s + duration_s) * rate / ((tokens_per_chunk + 1) / 2)
    return math.ceil(total)
