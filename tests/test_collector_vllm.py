"""The collector against a real vLLM (CPU build, tiny model)."""

from __future__ import annotations

import re
import time

import httpx
import numpy as np
import pytest

from rundir.io import read_run
from tests.conftest import run_cli

pytestmark = pytest.mark.engine_vllm


def kv_tokens_from_metrics(base_url: str) -> int:
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    return int(re.search(r'kv_cache_size_tokens="(\d+)"', line).group(1))


def test_plan_reads_kv_budget_and_skips_over_capacity(vllm_server, tmp_path) -> None:
    budget = kv_tokens_from_metrics(vllm_server.base_url)
    contexts, levels, max_out = [8192, 16384, 28000], [1, 8, 64, 128], 4096
    res = run_cli("bench", "run", "--base-url", vllm_server.base_url, "--dry-run",
                  "--contexts", ",".join(map(str, contexts)),
                  "--concurrency", ",".join(map(str, levels)), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stderr.split())
    assert f"KV budget: {budget:,} tokens (vllm:cache_config_info kv_cache_size_tokens)" in text
    skipped = set(re.findall(r"skip decode (\d+)K × (\d+): Over capacity", text))
    expected = {(str(c // 1024), str(n)) for c in contexts for n in levels
                if n * (c + max_out) > budget}
    assert expected and skipped == expected
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_usage_counts_and_server_counters_agree(vllm_server, tmp_path) -> None:
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", vllm_server.base_url, "--out", str(out),
                  "--contexts", "1k", "--concurrency", "16", "--max-output", "256",
                  "--duration", "4", "--warmup-stable", "1", "--no-prefill")
    assert res.returncode == 0, res.stderr
    time.sleep(2)  # let the engine publish its last step's counters
    final = httpx.get(f"{vllm_server.base_url}/metrics", timeout=30).text
    final_gen = sum(float(ln.rsplit(" ", 1)[1]) for ln in final.splitlines()
                    if ln.startswith("vllm:generation_tokens_total{"))
    run = read_run(out)
    cell = run.cells.to_pylist()[0]
    assert cell["token_counting"] == "usage_continuous"
    rows = run.requests.to_pylist()
    multi = 0
    for r in rows:
        inc = np.diff(np.r_[0, r["chunk_tokens"]])
        multi += int((inc > 1).sum())
        if not r["cancelled"] and r["error"] is None:
            assert r["chunk_tokens"][-1] == (256 if r["purpose"] == "measure" else 1)
    client_total = sum(r["chunk_tokens"][-1] for r in rows if r["chunk_tokens"])
    sm = run.server_metrics.to_pylist()
    gen = sorted((s["t_ns"], s["value"]) for s in sm if s["name"] == "generation_tokens_total")
    server_total = final_gen - gen[0][1]
    # cancelled streams may have had a few tokens generated but not yet delivered
    assert abs(client_total - server_total) <= 0.005 * server_total, (client_total, server_total)
    print(f"chunks carrying several tokens: {multi}")
