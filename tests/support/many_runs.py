"""A site's worth of runs, quick to write and to build: the tests of the site at scale.

A real site holds hundreds of runs over a few model families, several GPUs
and engines, and the same setup measured again under newer engine versions
and on later dates (a *series*). The charts, rankings, index and history
pages break on exactly that shape (many lines, same labels, one family much
bigger than the others), so this module writes it, deterministically from a
seed. Most runs are imported-style (published numbers only: no raw data, so a
300-run site builds in seconds); `measured` of them are small measured runs
with raw chunks, so pages with percentiles appear too.

The numbers follow a plausible shape (total tok/s grows with concurrency and
saturates, per-request tok/s and TTFT worsen with it and with context; each
family, GPU, engine and version scales them), not any real hardware's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from rundir import contract
from tests.support.synthetic_runs import make_imported_run, make_measured_run

# (family model name, relative speed): a 1T model is far slower than a 4B one.
MODELS = [("Qwen3.5-4B", 4.0), ("Qwen3.5-32B", 1.6), ("Llama-4-Scout", 1.2),
          ("Kimi-K2.6", 0.45), ("gpt-oss-120b", 1.4), ("Gemma-4-27B", 1.5),
          ("DeepSeek-V4", 0.4), ("Mistral-Large-3", 0.7)]
# Family sizes are uneven on a real site: the first families get most runs.
MODEL_WEIGHTS = [0.30, 0.18, 0.12, 0.12, 0.10, 0.08, 0.06, 0.04]
GPUS = [("H200 SXM", 8, 141.0, 1.0), ("RTX PRO 6000 Blackwell Server Edition", 1, 96.0, 0.35),
        ("B200", 8, 180.0, 1.5), ("MI355X", 8, 288.0, 1.2), ("L40S", 2, 48.0, 0.2)]
ENGINES = {"vllm": ["0.28.0", "0.29.0", "0.30.1", "0.31.0rc1.dev452+g73a583112"],
           "sglang": ["0.5.0", "0.5.2", "0.5.3"],
           "llama.cpp": ["b6000", "b6200"]}
QUANTS = ["BF16", "FP8", "NVFP4"]
CONTEXTS = [8192, 32768, 131072]
CONCURRENCY = [1, 4, 16, 64]
START = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def _cells(rng: np.random.Generator, speed: float) -> list[dict[str, Any]]:
    """Decode and prefill cells of one run at a given relative speed."""
    cells = []
    for ctx in CONTEXTS:
        ctx_factor = 1.0 / (1.0 + ctx / 262144)
        for n in CONCURRENCY:
            one = 60.0 * speed * ctx_factor * rng.uniform(0.95, 1.05)
            per_request = one / (1.0 + 0.02 * n)
            total = per_request * n
            cells.append({"phase": contract.DECODE, "context": ctx, "concurrency": n,
                          "status": contract.VALID, "total_tok_s": round(total, 1),
                          "per_request_tok_s": round(per_request, 1),
                          "ttft_ms": round(ctx / (40.0 * speed) * (1 + 0.1 * n), 1),
                          "tbt_ms": round(1000.0 / per_request, 2),
                          "avg_active": float(n), "completed": 4 * n,
                          "output_tokens": int(total * 30), "measured_s": 30.0})
        cells.append({"phase": contract.PREFILL, "context": ctx, "concurrency": 1,
                      "status": contract.VALID,
                      "total_tok_s": round(20000.0 * speed * rng.uniform(0.95, 1.05), 1)})
    return cells


def _setup(rng: np.random.Generator) -> dict[str, Any]:
    """A setup (what a series shares): model, GPU, engine, quantization."""
    m = int(rng.choice(len(MODELS), p=MODEL_WEIGHTS))
    g = int(rng.integers(len(GPUS)))
    engine = str(rng.choice(list(ENGINES)))
    return {"model": MODELS[m], "gpu": GPUS[g], "engine": engine,
            "quant": str(rng.choice(QUANTS))}


def _info(setup: dict[str, Any], version: str, at: datetime) -> dict[str, Any]:
    model, _ = setup["model"]
    gpu, count, vram, _ = setup["gpu"]
    return {"measured_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "hardware": {"gpu_name": gpu, "gpu_count": count, "vram_gb_per_gpu": vram},
            "engine": {"name": setup["engine"], "version": version,
                       "quantization": setup["quant"]},
            "model": {"name": model, "served_name": model.lower(),
                      "repository_id": f"example/{model}"}}


def make_many_runs(root: Path, n: int, *, seed: int = 0, measured: int = 0,
                   measured_shape: dict[str, Any] | None = None) -> list[Path]:
    """Write n run directories under root (the last `measured` with raw data); return them.

    `measured_shape` overrides make_measured_run's arguments for the measured
    runs (contexts, concurrency, duration_s, ...): a bigger matrix per run.

    Runs come in series: a setup is measured again (a later engine version, or
    the same version on a later date, sometimes slower: a regression) until
    about a third of the runs are repeats of an earlier setup."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    setups: list[dict[str, Any]] = []
    paths = []
    for i in range(n):
        if setups and rng.random() < 0.35:
            setup = setups[int(rng.integers(len(setups)))]
            setup["runs"] += 1
        else:
            setup = _setup(rng) | {"runs": 0}
            setups.append(setup)
        versions = ENGINES[setup["engine"]]
        version = versions[min(setup["runs"], len(versions) - 1)]
        at = START + timedelta(days=3 * setup["runs"] + int(rng.integers(40)),
                               minutes=int(rng.integers(600)))
        speed = setup["model"][1] * setup["gpu"][3] * (1 + 0.04 * setup["runs"])
        if setup["runs"] and rng.random() < 0.15:
            speed *= 0.8  # this version regressed
        run_id = f"many-{i:04d}"
        info = _info(setup, version, at)
        if i >= n - measured:
            shape = {"contexts": [1024, 4096], "concurrency": [1, 4], "duration_s": 0.5,
                     "prefill_contexts": [1024], **(measured_shape or {})}
            paths.append(make_measured_run(root / run_id, run_id=run_id,
                                           tokens_per_s=40.0 * speed, seed=seed + i,
                                           info=info, **shape))
        else:
            paths.append(make_imported_run(root / run_id, run_id=run_id,
                                           cells=_cells(rng, speed), info=info))
    return paths


__all__ = ["make_many_runs"]
