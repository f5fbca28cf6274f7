# ruff: noqa: E501  (QWEN_SEED_TEXT at the end is a published page kept verbatim)
"""Realistic run directories with known raw chunks, written through `rundir.io`.

Used by the site tests (aggregation, pages, browser) and by benchmarks. A
measured run is simulated the way the collector records one: per decode
cell a prefix-fill request per stream, then C streams that each run
requests back to back (role chunk with 0 tokens, then token chunks of 1..k
tokens, since speculative decoding sends several at once); requests that
reach the max output finish with "length" and are replaced; those still
open when the window closes are cancelled a few ms later (so some chunks
land after the window and must be clipped). Prefill cells are cold
samples with one output token. The server's "running" gauge is sampled
every 250 ms and split over two label sets (so readers must sum them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rundir import contract
from rundir.contract import RunInfo
from rundir.io import write_run_info, write_table

MS = 1_000_000
S = 1_000_000_000
T0 = 5_000 * S  # the run's monotonic clock starts somewhere arbitrary
WALL0 = 1_764_400_000 * S  # 2025-11-29 07:06:40 UTC


def _merge(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def run_info(run_id: str, *, source: str = contract.SOURCE_MEASURED, info: dict | None = None) -> RunInfo:
    """A complete run.yaml for a synthetic run; `info` overrides any field (nested)."""
    base: dict[str, Any] = {
        "schema_version": contract.SCHEMA_VERSION,
        "run_id": run_id,
        "source": source,
        "measured_at": "2025-11-29T07:06:40Z",
        "submitter": "tester",
        "hardware": {
            "type": "Discrete GPU",
            "gpu_name": "RTX PRO 6000 Blackwell Server Edition",
            "gpu_count": 1,
            "vram_gb_per_gpu": 96.0,
            "cpu": "AMD EPYC 9555",
            "os": "linux",
            "driver": "580.95.05",
            "cuda": "13.0",
        },
        "engine": {
            "name": "vllm",
            "version": "0.11.0",
            "quantization": "BF16",
            "backend": "cuda",
            "repository": "github.com/vllm-project/vllm",
            "build": "cuda-13.0",
            "commit": "0123456789ab",
        },
        "model": {
            "name": "Synth-4B",
            "served_name": "synth",
            "repository_id": "example/Synth-4B",
            "revision": "main",
            "max_model_len": 262144,
        },
        "parameters": {
            "contexts": [],
            "concurrency": [],
            "prefill_contexts": [],
            "duration_s": 2.0,
            "max_output_tokens": 64,
            "prefill_mode": "Cold requests",
            "prefill_repeats": 1,
            "decode_test": "Fixed duration",
            "tool_name": "speed-matrix",
            "tool_version": "0.1.0",
        },
        "clock": {"monotonic_anchor_ns": T0, "wall_anchor_ns": WALL0},
        "kv_budget": {"tokens": None, "source": None},
        "launch_command": (
            "vllm serve example/Synth-4B --served-model-name synth --api-key <redacted>"
        ),
        "notes": "",
        "imported": None,
    }
    return RunInfo.from_dict(_merge(base, info))


def _rows_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.table(cols, schema=schema)


def _cell_row(phase: str, ctx: int, conc: int, status: str, **kw: Any) -> dict[str, Any]:
    row = {"phase": phase, "context": ctx, "concurrency": conc, "status": status,
           "client_bound": False}
    row.update(kw)
    return row


class _Sim:
    """Generates one run's requests on a single monotonic timeline."""

    def __init__(self, rng: np.random.Generator, max_output: int, tokens_per_chunk: int,
                 error_text: str, wobble: float = 0.0, seed: int = 0) -> None:
        self.rng = rng
        # A busy host: the rate times a factor drawn per 250 ms block (lognormal, sigma
        # `wobble`), from its own generator so wobble = 0 leaves every other draw as it was.
        self.wobble = wobble
        self.blocks: dict[int, float] = {}
        self.block_rng = np.random.default_rng(seed + 7919)
        self.error_text = error_text
        self.max_output = max_output
        self.k = tokens_per_chunk
        self.t = T0 + 100 * MS
        self.requests: list[dict[str, Any]] = []
        self.intervals: list[tuple[int, int]] = []  # (send, end) of every request, for gauges
        self.n = 0

    def _req(self, **kw: Any) -> dict[str, Any]:
        self.n += 1
        row = {"request_id": f"r{self.n:06d}", "stream_index": 0, "prompt_tokens": None,
               "cached_tokens": None, "finish_reason": None, "error": None, "cancelled": False,
               "content_tail": None, "reasoning_tail": None}
        row.update(kw)
        self.requests.append(row)
        self.intervals.append((row["send_ns"], row["end_ns"]))
        return row

    def prefill(self, ctx: int, repeats: int, prefill_tok_s: float) -> None:
        for _ in range(repeats):
            send = self.t
            ttft = int(ctx / prefill_tok_s * S * self.rng.uniform(0.97, 1.03))
            first = send + ttft
            self._req(phase=contract.PREFILL, context=ctx, concurrency=1, purpose=contract.PURPOSE_PREFILL,
                      send_ns=send, end_ns=first + MS, prompt_tokens=ctx, cached_tokens=0,
                      finish_reason="length", chunk_ns=[first - MS // 2, first],
                      chunk_tokens=[0, 1])
            self.t = first + 20 * MS

    def decode(self, ctx: int, conc: int, rate: float, warmup_s: float, duration_s: float,
               ttft_s: float, status: str) -> tuple[int, int]:
        # Prefix fill: one cold request per stream slot warms the prompt cache.
        for i in range(conc):
            send = self.t + i * MS
            self._req(phase=contract.DECODE, context=ctx, concurrency=conc, stream_index=i,
                      purpose=contract.PURPOSE_PREFIX_FILL, send_ns=send, end_ns=send + 30 * MS,
                      prompt_tokens=ctx, cached_tokens=0, finish_reason="length",
                      chunk_ns=[send + 29 * MS], chunk_tokens=[1])
        start_streams = self.t + 50 * MS
        ws = start_streams + int(warmup_s * S)
        we = ws + int(duration_s * S)
        for i in range(conc):
            t = start_streams + i * 2 * MS
            while t < we:
                t = self._stream(ctx, conc, i, t, we, rate, ttft_s, status)
        self.t = we + 200 * MS
        return ws, we

    def _load(self, t: int) -> float:
        if not self.wobble:
            return 1.0
        block = (t - T0) // (250 * MS)
        if block not in self.blocks:
            self.blocks[block] = float(self.block_rng.lognormal(0.0, self.wobble))
        return self.blocks[block]

    def _stream(self, ctx, conc, slot, send, we, rate, ttft_s, status) -> int:
        rng = self.rng
        first = send + int(ttft_s * S * rng.uniform(0.8, 1.25))
        ns, cum = [first - MS // 4], [0]  # role chunk, no tokens
        t, total = first, 0
        cutoff = we + 5 * MS  # cancellation lands a few ms after the window closes
        while total < self.max_output and t <= cutoff:
            k = int(rng.integers(1, self.k + 1))
            k = min(k, self.max_output - total)
            if total:  # the first chunk arrives at TTFT; later ones after k token gaps
                t += int(sum(rng.lognormal(0.0, 0.15, size=k)) / (rate * self._load(t)) * S)
                if t > cutoff:
                    break
            total += k
            ns.append(t)
            cum.append(total)
        done = total >= self.max_output
        error = None
        if status == contract.ERROR and slot == 0:
            error, done = self.error_text, False
        end = ns[-1] + MS if done else cutoff
        tail = ("the same line again. " * 20) if status == contract.LOOPED else "…end of a story."
        self._req(phase=contract.DECODE, context=ctx, concurrency=conc, stream_index=slot,
                  purpose=contract.PURPOSE_MEASURE, send_ns=send, end_ns=end, prompt_tokens=ctx,
                  cached_tokens=ctx - ctx % 256, finish_reason="length" if done else None,
                  error=error, cancelled=not done and error is None, chunk_ns=ns,
                  chunk_tokens=cum, content_tail=tail)
        return end + MS if (done or error) else we + S


def _gauge_rows(intervals: Iterable[tuple[int, int]], t_from: int, t_to: int,
                queued: list[tuple[int, int]]) -> list[dict[str, Any]]:
    iv = np.array(list(intervals), dtype=np.int64).reshape(-1, 2)
    rows = []
    for t in range(t_from, t_to, 250 * MS):
        running = int(((iv[:, 0] <= t) & (t < iv[:, 1])).sum()) if len(iv) else 0
        waiting = 0.0
        for qs, qe in queued:
            if qs <= t <= qe and running:
                running, waiting = running - 1, 1.0
        half = running // 2
        for labels, value in (('engine="0"', running - half), ('engine="1"', half)):
            rows.append({"t_ns": t, "name": contract.METRIC_RUNNING, "source": "vllm:num_requests_running",
                         "labels": labels, "value": float(value)})
        rows.append({"t_ns": t, "name": contract.METRIC_WAITING, "source": "vllm:num_requests_waiting",
                     "labels": 'engine="0"', "value": waiting})
    return rows


def make_measured_run(
    path: Path,
    *,
    run_id: str,
    contexts: list[int],
    concurrency: list[int],
    tokens_per_s: float = 60.0,
    seed: int = 0,
    duration_s: float = 2.0,
    warmup_s: float = 0.3,
    max_output_tokens: int = 64,
    tokens_per_chunk: int = 3,
    prefill_contexts: list[int] | None = None,
    prefill_repeats: int = 1,
    prefill_tok_s: float = 20_000.0,
    kv_budget_tokens: int | None = None,
    statuses: dict[tuple[int, int], str] | None = None,
    reasons: dict[tuple[int, int], str] | None = None,
    error_text: str = "stream closed: server returned HTTP 500",
    client_bound: set[tuple[int, int]] | None = None,
    server_metrics: bool = True,
    info: dict[str, Any] | None = None,
    rate_wobble: float = 0.0,
) -> Path:
    """Write a measured run directory with simulated raw chunks; return its path.

    A decode cell is Over capacity when concurrency × (context + max output)
    exceeds kv_budget_tokens; `statuses` forces a status per (context,
    concurrency) (requests_queued also makes the server's waiting gauge rise);
    `reasons` overrides a cell's reason text, `error_text` the failed stream's
    error, and `client_bound` marks cells the client limited. `rate_wobble` > 0
    simulates a busy host: the decode rate moves by a lognormal factor (that
    sigma) every 250 ms.
    """
    path = Path(path)
    rng = np.random.default_rng(seed)
    statuses = dict(statuses or {})
    prefill_contexts = list(contexts if prefill_contexts is None else prefill_contexts)
    sim = _Sim(rng, max_output_tokens, tokens_per_chunk, error_text, rate_wobble, seed)
    cells: list[dict[str, Any]] = []
    for ctx in prefill_contexts:
        start = sim.t
        sim.prefill(ctx, prefill_repeats, prefill_tok_s * (1 - ctx / 2_000_000))
        cells.append(_cell_row(contract.PREFILL, ctx, 1, contract.VALID, window_start_ns=start,
                               window_end_ns=sim.t, token_counting=contract.COUNT_USAGE_CONTINUOUS))
    queued: list[tuple[int, int]] = []
    for ctx in contexts:
        for conc in concurrency:
            status = statuses.get((ctx, conc), contract.VALID)
            fits = kv_budget_tokens is None or conc * (ctx + max_output_tokens) <= kv_budget_tokens
            if not fits and (ctx, conc) not in statuses:
                status = contract.OVER_CAPACITY
            if status in (contract.OVER_CAPACITY, contract.PENDING):
                reason = None
                if status == contract.OVER_CAPACITY and kv_budget_tokens:
                    reason = (f"needs {conc * (ctx + max_output_tokens):,} KV tokens, "
                              f"the server holds {kv_budget_tokens:,}")
                reason = (reasons or {}).get((ctx, conc), reason)
                cells.append(_cell_row(contract.DECODE, ctx, conc, status, reason=reason))
                continue
            rate = tokens_per_s / (1 + 0.04 * (conc - 1)) / (1 + ctx / 65536)
            ttft_s = 0.02 + ctx / 4e6 + 0.003 * conc
            ws, we = sim.decode(ctx, conc, rate, warmup_s, duration_s, ttft_s, status)
            if status == contract.REQUESTS_QUEUED:
                queued.append((ws, we))
            reason = {contract.LOOPED: "the same 40 tokens repeated 12 times",
                      contract.ERROR: error_text}.get(status)
            reason = (reasons or {}).get((ctx, conc), reason)
            cells.append(_cell_row(contract.DECODE, ctx, conc, status, reason=reason,
                                   window_start_ns=ws, window_end_ns=we, warmup_s=warmup_s,
                                   token_counting=contract.COUNT_USAGE_CONTINUOUS,
                                   client_bound=(ctx, conc) in (client_bound or set())))
    params = {"contexts": list(contexts), "concurrency": list(concurrency),
              "prefill_contexts": prefill_contexts, "duration_s": duration_s,
              "max_output_tokens": max_output_tokens, "prefill_repeats": prefill_repeats}
    extra = _merge({"parameters": params, "kv_budget": {"tokens": kv_budget_tokens,
                   "source": "synthetic" if kv_budget_tokens else None}}, info)
    path.mkdir(parents=True, exist_ok=True)
    write_run_info(path, run_info(run_id, info=extra))
    write_table(path, contract.CELLS_FILE, _rows_table(cells, contract.CELLS_SCHEMA))
    write_table(path, contract.REQUESTS_FILE, _rows_table(sim.requests, contract.REQUESTS_SCHEMA))
    if server_metrics:
        rows = _gauge_rows(sim.intervals, T0, sim.t, queued)
        write_table(path, contract.SERVER_METRICS_FILE, _rows_table(rows, contract.SERVER_METRICS_SCHEMA))
    return path


PUB_FIELDS = {
    "total_tok_s": "pub_total_tok_s",
    "per_request_tok_s": "pub_per_request_tok_s",
    "ttft_ms": "pub_ttft_ms",
    "tbt_ms": "pub_tbt_ms",
    "avg_active": "pub_avg_active",
    "completed": "pub_completed",
    "output_tokens": "pub_output_tokens",
    "measured_s": "pub_measured_s",
}


def make_imported_run(
    path: Path,
    *,
    run_id: str,
    cells: list[dict[str, Any]],
    info: dict[str, Any] | None = None,
    source_file: str = "published-page.txt",
) -> Path:
    """Write an imported run: published numbers in the pub_* columns, no requests.parquet.

    Each cell is a dict with phase, context, concurrency, status and any of
    total_tok_s, per_request_tok_s, ttft_ms, tbt_ms, avg_active, completed,
    output_tokens, measured_s (prefill rows: total_tok_s is prompt tok/s).
    """
    path = Path(path)
    rows = []
    for cell in cells:
        row = _cell_row(cell["phase"], int(cell["context"]), int(cell["concurrency"]),
                        cell.get("status", contract.VALID), reason=cell.get("reason"))
        for ours, pub in PUB_FIELDS.items():
            row[pub] = cell.get(ours)
        rows.append(row)
    decode = [r for r in rows if r["phase"] == contract.DECODE]
    params = {
        "contexts": sorted({r["context"] for r in decode}),
        "concurrency": sorted({r["concurrency"] for r in decode}),
        "prefill_contexts": sorted({r["context"] for r in rows if r["phase"] == contract.PREFILL}),
        "duration_s": 30.0,
        "max_output_tokens": 4096,
    }
    extra = _merge({"parameters": params, "measured_at": None,
                    "imported": {"source_file": source_file, "source_sha256": None,
                                 "format": "seed-text"}}, info)
    path.mkdir(parents=True, exist_ok=True)
    write_run_info(path, run_info(run_id, source=contract.SOURCE_IMPORTED, info=extra))
    write_table(path, contract.CELLS_FILE, _rows_table(rows, contract.CELLS_SCHEMA))
    return path


# --------------------------------------------------------------------------
# a small sample site: what the page, link and browser tests look at
# --------------------------------------------------------------------------

PWN_SCRIPT = "<script>window.__pwned=1</script>"
PWN_IMG = '<img src=x onerror="window.__pwned=1">'
PWN_ATTR = '"><svg onload="window.__pwned=1">'
XSS_NOTES = f"""# Notes {PWN_SCRIPT}

{PWN_SCRIPT}

{PWN_IMG}

A [javascript link](javascript:window.__pwned=1), a [data link](data:text/html,{PWN_SCRIPT}),
an image ![tracker](https://tracker.example/pixel.png) and a [fine link](https://example.com/x).

| a | b |
|---|---|
| {PWN_ATTR} | `code` |
"""


def make_xss_run(path: Path, *, run_id: str = "xss <script>window.__pwned=1</script>") -> Path:
    """A measured run whose every free-text field carries an HTML/JS payload."""
    payload = {
        "submitter": f"mallory{PWN_IMG}",
        "hardware": {"type": PWN_ATTR, "gpu_name": f"GPU{PWN_SCRIPT}", "cpu": PWN_IMG,
                     "os": PWN_ATTR, "driver": PWN_SCRIPT, "cuda": PWN_IMG},
        "engine": {"name": f"eng{PWN_IMG}", "version": PWN_ATTR, "quantization": PWN_SCRIPT,
                   "backend": PWN_IMG, "repository": "javascript:window.__pwned=1",
                   "build": PWN_ATTR, "commit": PWN_SCRIPT},
        "model": {"name": f"Evil{PWN_SCRIPT}", "served_name": PWN_IMG,
                  "repository_id": f"x/{PWN_ATTR}", "revision": PWN_SCRIPT},
        "parameters": {"decode_test": PWN_IMG, "prefill_mode": PWN_SCRIPT,
                       "tool_name": PWN_ATTR, "tool_version": PWN_IMG},
        "kv_budget": {"source": PWN_SCRIPT},
        "launch_command": f"vllm serve {PWN_SCRIPT} --flag '{PWN_ATTR}' {PWN_IMG}",
        "notes": XSS_NOTES,
    }
    return make_measured_run(
        path, run_id=run_id, contexts=[1024], concurrency=[1, 2], duration_s=0.5, seed=5,
        statuses={(1024, 2): contract.ERROR}, reasons={(1024, 2): f"boom {PWN_IMG}"},
        error_text=f"HTTP 500 {PWN_SCRIPT}", info=payload,
    )


def make_sample_data(root: Path) -> Path:
    """Two measured runs of one model, one imported seed run, one XSS run."""
    data = Path(root)
    make_measured_run(
        data / "synth-a", run_id="synth-a", contexts=[1024, 4096, 16384],
        concurrency=[1, 2, 4, 8], duration_s=0.6, seed=1, kv_budget_tokens=40_000,
        statuses={(1024, 8): contract.REQUESTS_QUEUED, (4096, 8): contract.LOOPED},
        client_bound={(1024, 4)},
        info={"notes": "Measured on a **quiet** box.\n\n## Setup\n\nSee the "
                       "[methodology](../../methodology.html#term-ttft)."},
    )
    make_measured_run(
        data / "synth-b", run_id="synth-b", contexts=[1024, 4096], concurrency=[1, 2, 4],
        duration_s=0.6, seed=2, tokens_per_s=95.0, prefill_tok_s=45_000.0,
        info={"hardware": {"gpu_name": "H200 SXM", "gpu_count": 8, "vram_gb_per_gpu": 141.0},
              "engine": {"name": "sglang", "version": "0.5.2", "quantization": "FP8"}},
    )
    make_seed_run(data / "qwen-seed", QWEN_SEED_TEXT, run_id="qwen-seed")
    make_xss_run(data / "xss")
    return data


# --------------------------------------------------------------------------
# published seed pages (saved as text from a browser) -> imported runs
# --------------------------------------------------------------------------

STATUS_CODES = {"Valid": contract.VALID, "Over capacity": contract.OVER_CAPACITY,
                "Requests queued": contract.REQUESTS_QUEUED, "Looped": contract.LOOPED, "Error": contract.ERROR,
                "Not measured": contract.PENDING}
SEED_COLUMNS = ["phase", "context", "concurrency", "status", "total_tok_s", "per_request_tok_s",
                "ttft_ms", "tbt_ms", "avg_active", "completed", "output_tokens", "measured_s"]


def parse_number(text: str) -> float | None:
    """``32.7K`` -> 32700, ``6,216.0`` -> 6216, ``56 ms`` -> 56, ``30.0 s`` -> 30, ``—`` -> None."""
    t = text.strip()
    if t in ("—", ""):
        return None
    for unit in (" ms", " s", " tokens"):
        t = t.removesuffix(unit)
    scale = {"K": 1e3, "M": 1e6}.get(t[-1:], 1.0)
    return float(t.rstrip("KM").replace(",", "")) * scale


def context_tokens(label: str) -> int:
    """``251K`` -> 257,024 tokens (any context whose label is 251K would do)."""
    return int(label.removesuffix("K")) * 1024 if label.endswith("K") else int(label)


def _block(lines: list[str], start: str, stop: str) -> dict[str, str]:
    i, j = lines.index(start) + 1, lines.index(stop)
    items = [x[2:] if x.startswith("- ") else x for x in lines[i:j]]
    return dict(zip(items[::2], items[1::2], strict=True))


def parse_seed(text: str) -> dict[str, Any]:
    """A published page's text -> {"info": run.yaml overrides, "cells": [...]} (minimal parse)."""
    lines = text.splitlines()
    hw = _block(lines, "Hardware", "Engine")
    en = _block(lines, "Engine", "Run")
    rn = _block(lines, "Run", "Launch command")
    count = int(hw.get("GPU count", "1"))
    vram = hw["VRAM"].split("× ")[-1] if count > 1 else hw["VRAM"]
    tool, _, tool_version = rn["Benchmark tool"].rpartition(" v")
    launch = text.split("Launch command\n", 1)[1].split("\nprompt tok/s by context length", 1)[0]
    title = lines[1]
    info = {
        "measured_at": None,
        "submitter": None,
        "hardware": {"type": hw.get("Type"), "gpu_name": hw.get("GPU"), "gpu_count": count,
                     "vram_gb_per_gpu": float(vram.rstrip(")").removesuffix(" GB")),
                     "cpu": hw.get("CPU"), "os": hw.get("OS"), "driver": hw.get("Driver"),
                     "cuda": hw.get("CUDA")},
        "engine": {"name": en.get("Engine"), "version": en.get("Version"),
                   "quantization": en.get("Quantization"), "backend": en.get("Backend"),
                   "repository": en.get("Repository"), "build": en.get("Build"),
                   "commit": en.get("Commit")},
        "model": {"name": title.split(" on ")[0], "served_name": rn.get("Served model"),
                  "repository_id": None, "revision": rn.get("Revision"), "max_model_len": None},
        "parameters": {"tool_name": tool, "tool_version": tool_version,
                       "decode_test": rn.get("Decode test"), "prefill_mode": rn.get("Prefill mode"),
                       "duration_s": parse_number(rn["Time per measurement"]),
                       "max_output_tokens": int(parse_number(rn["Max output"]) or 0)},
        "launch_command": launch.removesuffix("Prefill").rstrip("\n"),
    }
    cells = []
    for line in lines:
        if not line.startswith(("| Prefill |", "| Sustained decode |")):
            continue
        fields = [x.strip() for x in line.strip().strip("|").split("|")]
        cell: dict[str, Any] = dict(zip(SEED_COLUMNS, fields, strict=True))
        cell["phase"] = contract.PREFILL if cell["phase"] == "Prefill" else contract.DECODE
        cell["context"] = context_tokens(cell["context"])
        cell["concurrency"] = int(cell["concurrency"])
        cell["status"] = STATUS_CODES[cell["status"]]
        for key in SEED_COLUMNS[4:]:
            cell[key] = parse_number(cell[key])
        for key in ("completed", "output_tokens"):
            cell[key] = None if cell[key] is None else int(cell[key])
        cells.append(cell)
    return {"info": info, "cells": cells}


def make_seed_run(path: Path, text: str, *, run_id: str, info: dict | None = None) -> Path:
    """An imported run carrying exactly the numbers of a published page's text."""
    seed = parse_seed(text)
    return make_imported_run(path, run_id=run_id, cells=seed["cells"],
                             info=_merge(seed["info"], info), source_file=f"{run_id}.txt")


# The published page of Qwen3.5-4B BF16 on one RTX PRO 6000, verbatim (the same text as
# tests/data/import/seeds/qwen3.5-4b-bf16-rtxpro6000.txt; tests/site/test_site_seed.py checks).
QWEN_SEED_TEXT = """Speed test matrix
Qwen3.5-4B on RTX PRO 6000 Blackwell Server Edition 96GB
vllm · 0.30.1rc1.dev452+g73a583112 · BF166 contexts (8K–251K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, 64K, 128K, 251K, 256K
Hardware
- Type
- Discrete GPU
- GPU
- RTX PRO 6000 Blackwell Server Edition
- VRAM
- 96 GB
- OS
- linux
Engine
- Engine
- vllm
- Version
- 0.30.1rc1.dev452+g73a583112
- Quantization
- BF16
- Backend
- cuda
- Repository
- github.com/vllm-project/vllm
- Build
- cuda-13.2
- Commit
73a5831127a9
Run
- Served model
- qwen
- Revision
- main
- Benchmark tool
- llm-inference-bench v0.7.6
- Decode test
- Fixed duration
- Prefill mode
- Measured during decode warm-up
- Time per measurement
- 30 s
- Max output
- 4,096 tokens
Launch command
env MAX_JOBS=2 FLASHINFER_NVCC_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=1 "$HOME/env_rtxpro6k-z-lab-vllm-73a5831127a9/bin/vllm" serve Qwen/Qwen3.5-4B --served-model-name qwen --trust-remote-code --tensor-parallel-size 1 --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser qwen3_coder --max-model-len 262144 --gpu-memory-utilization 0.86 --host 0.0.0.0 --port 8000 --api-key <redacted> --speculative-config '{"method":"dflash","model":"z-lab/Qwen3.5-4B-DFlash","num_speculative_tokens":7}'Prefill
prompt tok/s by context length8K context32.7K250 ms TTFT
16K context32.9K493 ms TTFT
32K context29.9K1,079 ms TTFT
64K context24.9K2,588 ms TTFT
128K context18.6K6,923 ms TTFT
251K context12.4K20,344 ms TTFT
256K context12.3K20,999 ms TTFT
Sustained decode
total tok/s · rows are context length, columns are simultaneous requests| Context | 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 |
|---|---|---|---|---|---|---|---|---|
| 8K | 203.956 ms TTFT | 400.881 ms TTFT | 754.186 ms TTFT | 1,327.392 ms TTFT | 1,829.9305 ms TTFT | 2,433.6657 ms TTFT | 2,692.11,064 ms TTFT | 2,777.1Requests queued2,079 ms TTFT |
| 16K | 176.873 ms TTFT | 330.8103 ms TTFT | 670.5101 ms TTFT | 1,160.7127 ms TTFT | 1,504.0520 ms TTFT | 2,038.5869 ms TTFT | 2,185.11,525 ms TTFT | Over capacity |
| 32K | 133.3105 ms TTFT | 258.0133 ms TTFT | 511.8130 ms TTFT | 864.2332 ms TTFT | 1,152.7529 ms TTFT | 1,480.5922 ms TTFT | Over capacity | Over capacity |
| 64K | 87.9147 ms TTFT | 173.2230 ms TTFT | 343.3317 ms TTFT | 613.1485 ms TTFT | 742.4827 ms TTFT | Over capacity | Over capacity | Over capacity |
| 128K | 53.9332 ms TTFT | 100.3445 ms TTFT | 202.9608 ms TTFT | 382.4956 ms TTFT | Over capacity | Over capacity | Over capacity | Over capacity |
| 251K | 28.4654 ms TTFT | 62.4911 ms TTFT | 117.61,308 ms TTFT | Over capacity | Over capacity | Over capacity | Over capacity | Over capacity |
Requests queued: the server could not run all requests at once, so some waited in a queue. Over capacity: not run because this many requests at this context would exceed the server's KV cache.
TTFT is measured after the benchmark warms the server's prompt cache, so it mostly excludes prefill.
All measurements
Latencies are medians. Total tok/s is output across all simultaneous requests.| Phase | Context | Requests at once | Status | Total tok/s | Per request tok/s | TTFT | Time between tokens | Average active requests | Completed requests | Output tokens | Measured for |
|---|---|---|---|---|---|---|---|---|---|---|---|
| Prefill | 8K | 1 | Valid | 32.7K | — | 250 ms | — | — | 1 | — | — |
| Prefill | 16K | 1 | Valid | 32.9K | — | 493 ms | — | — | 1 | — | — |
| Prefill | 32K | 1 | Valid | 29.9K | — | 1,079 ms | — | — | 1 | — | — |
| Prefill | 64K | 1 | Valid | 24.9K | — | 2,588 ms | — | — | 1 | — | — |
| Prefill | 128K | 1 | Valid | 18.6K | — | 6,923 ms | — | — | 1 | — | — |
| Prefill | 251K | 1 | Valid | 12.4K | — | 20,344 ms | — | — | 1 | — | — |
| Prefill | 256K | 1 | Valid | 12.3K | — | 20,999 ms | — | — | 1 | — | — |
| Sustained decode | 8K | 1 | Valid | 203.9 | 208.2 | 56 ms | 4.8 ms | 1.0 | 1 | 6,116 | 30.0 s |
| Sustained decode | 8K | 2 | Valid | 400.8 | 207.8 | 81 ms | 4.8 ms | 2.0 | 2 | 12,023 | 30.0 s |
| Sustained decode | 8K | 4 | Valid | 754.1 | 190.8 | 86 ms | 5.2 ms | 4.0 | 4 | 22,622 | 30.0 s |
| Sustained decode | 8K | 8 | Valid | 1,327.3 | 169.8 | 92 ms | 5.9 ms | 8.0 | 8 | 39,800 | 30.0 s |
| Sustained decode | 8K | 16 | Valid | 1,829.9 | 118.6 | 305 ms | 8.4 ms | 16.0 | 4 | 54,886 | 30.0 s |
| Sustained decode | 8K | 32 | Valid | 2,433.6 | 77.6 | 657 ms | 12.9 ms | 32.0 | 0 | 72,933 | 30.0 s |
| Sustained decode | 8K | 64 | Valid | 2,692.1 | 43.5 | 1,064 ms | 23.0 ms | 64.0 | 0 | 80,687 | 30.0 s |
| Sustained decode | 8K | 128 | Requests queued | 2,777.1 | 23.1 | 2,079 ms | 43.3 ms | 127.4 | 0 | 83,240 | 30.0 s |
| Sustained decode | 16K | 1 | Valid | 176.8 | 183.3 | 73 ms | 5.5 ms | 1.0 | 1 | 5,300 | 30.0 s |
| Sustained decode | 16K | 2 | Valid | 330.8 | 167.8 | 103 ms | 6.0 ms | 2.0 | 2 | 9,918 | 30.0 s |
| Sustained decode | 16K | 4 | Valid | 670.5 | 169.6 | 101 ms | 5.9 ms | 4.0 | 4 | 20,112 | 30.0 s |
| Sustained decode | 16K | 8 | Valid | 1,160.7 | 152.4 | 127 ms | 6.6 ms | 8.0 | 8 | 34,810 | 30.0 s |
| Sustained decode | 16K | 16 | Valid | 1,504.0 | 95.9 | 520 ms | 10.4 ms | 16.0 | 0 | 45,088 | 30.0 s |
| Sustained decode | 16K | 32 | Valid | 2,038.5 | 65.5 | 869 ms | 15.3 ms | 32.0 | 0 | 61,135 | 30.0 s |
| Sustained decode | 16K | 64 | Valid | 2,185.1 | 35.6 | 1,525 ms | 28.1 ms | 64.0 | 0 | 65,411 | 29.9 s |
| Sustained decode | 16K | 128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 32K | 1 | Valid | 133.3 | 142.0 | 105 ms | 7.1 ms | 1.0 | 1 | 3,999 | 30.0 s |
| Sustained decode | 32K | 2 | Valid | 258.0 | 145.9 | 133 ms | 6.9 ms | 2.0 | 2 | 7,739 | 30.0 s |
| Sustained decode | 32K | 4 | Valid | 511.8 | 136.1 | 130 ms | 7.4 ms | 4.0 | 4 | 15,352 | 30.0 s |
| Sustained decode | 32K | 8 | Valid | 864.2 | 110.5 | 332 ms | 9.1 ms | 8.0 | 0 | 25,925 | 30.0 s |
| Sustained decode | 32K | 16 | Valid | 1,152.7 | 73.3 | 529 ms | 13.6 ms | 16.0 | 0 | 34,566 | 30.0 s |
| Sustained decode | 32K | 32 | Valid | 1,480.5 | 47.8 | 922 ms | 20.9 ms | 32.0 | 0 | 44,397 | 30.0 s |
| Sustained decode | 32K | 64 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 32K | 128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 64K | 1 | Valid | 87.9 | 89.0 | 147 ms | 11.2 ms | 1.0 | 0 | 2,634 | 30.0 s |
| Sustained decode | 64K | 2 | Valid | 173.2 | 88.2 | 230 ms | 11.3 ms | 2.0 | 0 | 5,194 | 30.0 s |
| Sustained decode | 64K | 4 | Valid | 343.3 | 87.7 | 317 ms | 11.4 ms | 4.0 | 0 | 10,289 | 30.0 s |
| Sustained decode | 64K | 8 | Valid | 613.1 | 78.8 | 485 ms | 12.7 ms | 8.0 | 0 | 18,375 | 30.0 s |
| Sustained decode | 64K | 16 | Valid | 742.4 | 47.9 | 827 ms | 20.9 ms | 16.0 | 0 | 22,236 | 30.0 s |
| Sustained decode | 64K | 32 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 64K | 64 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 64K | 128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 128K | 1 | Valid | 53.9 | 56.3 | 332 ms | 17.7 ms | 1.0 | 0 | 1,614 | 30.0 s |
| Sustained decode | 128K | 2 | Valid | 100.3 | 51.4 | 445 ms | 19.5 ms | 2.0 | 0 | 3,006 | 30.0 s |
| Sustained decode | 128K | 4 | Valid | 202.9 | 51.8 | 608 ms | 19.4 ms | 4.0 | 0 | 6,079 | 30.0 s |
| Sustained decode | 128K | 8 | Valid | 382.4 | 49.7 | 956 ms | 20.1 ms | 8.0 | 0 | 11,464 | 30.0 s |
| Sustained decode | 128K | 16 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 128K | 32 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 128K | 64 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 128K | 128 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 1 | Valid | 28.4 | 29.7 | 654 ms | 33.7 ms | 1.0 | 0 | 853 | 30.0 s |
| Sustained decode | 251K | 2 | Valid | 62.4 | 32.8 | 911 ms | 30.6 ms | 2.0 | 0 | 1,869 | 30.0 s |
| Sustained decode | 251K | 4 | Valid | 117.6 | 30.3 | 1,308 ms | 33.0 ms | 4.0 | 0 | 3,527 | 30.0 s |
| Sustained decode | 251K | 8 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 16 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 32 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 64 | Over capacity | — | — | — | — | — | — | — | — |
| Sustained decode | 251K | 128 | Over capacity | — | — | — | — | — | — | — | — |
Requests queued: the server could not run all requests at once, so some waited in a queue. Over capacity: not run because this many requests at this context would exceed the server's KV cache."""
