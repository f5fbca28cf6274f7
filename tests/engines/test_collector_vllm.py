"""The collector against a real vLLM (CPU build, tiny model)."""

from __future__ import annotations

import re
import time

import httpx
import numpy as np
import pytest

from rundir.io import read_run
from tests.conftest import run_cli
from tests.support.engine_expectations import BY_DIALECT

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


def engine_counters(base_url: str) -> dict[str, float]:
    """The engine's own token and finished-request counters, summed over label sets."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    wanted = {
        "vllm:generation_tokens_total{": "generated",
        'vllm:request_success_total{engine="0",finished_reason="length"': "length_finished",
        'vllm:request_success_total{engine="0",finished_reason="abort"': "aborted",
        "vllm:request_generation_tokens_sum{": "finished_tokens",
        "vllm:num_requests_running{": "running",
    }
    out = dict.fromkeys(wanted.values(), 0.0)
    for ln in text.splitlines():
        for prefix, key in wanted.items():
            if ln.startswith(prefix):
                out[key] += float(ln.rsplit(" ", 1)[1])
    return out


def settled_counters(base_url: str, timeout_s: float = 60.0) -> dict[str, float]:
    """Counters once nothing runs and two reads a second apart agree (the
    engine publishes them after each step, seconds late on a busy CPU)."""
    deadline = time.monotonic() + timeout_s
    last = engine_counters(base_url)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = engine_counters(base_url)
        if now == last and now["running"] == 0:
            return now
        last = now
    raise AssertionError(f"vLLM counters did not settle in {timeout_s:.0f} s: {last}")


def test_usage_counts_and_server_counters_agree(vllm_server, tmp_path) -> None:
    """Every token the client counted, the engine generated; every request the
    engine finished by length, the client saw whole.

    Streams still open at the window's end are cancelled, and the engine may
    generate a few of their tokens before it sees the abort (hundreds on a
    loaded 2-core CI machine), so totals are bounded, not equal; the exact
    check is on the requests that ran to their max output.
    """
    max_out = 256
    before = settled_counters(vllm_server.base_url)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", vllm_server.base_url, "--out", str(out),
                  "--contexts", "1k", "--concurrency", "16", "--max-output", str(max_out),
                  "--duration", "4", "--warmup-stable", "1", "--no-prefill")
    assert res.returncode == 0, res.stderr
    after = settled_counters(vllm_server.base_url)
    delta = {k: after[k] - before[k] for k in after}
    run = read_run(out)
    cell = run.cells.to_pylist()[0]
    assert cell["token_counting"] == BY_DIALECT["vllm"].token_counting
    rows = run.requests.to_pylist()
    multi = 0
    whole = 0  # requests the client saw finish by length
    for r in rows:
        inc = np.diff(np.r_[0, r["chunk_tokens"]])
        multi += int((inc > 1).sum())
        if not r["cancelled"] and r["error"] is None:
            assert r["finish_reason"] == "length"
            assert r["chunk_tokens"][-1] == (max_out if r["purpose"] == "measure" else 1)
            whole += 1
    cancelled = [r for r in rows if r["cancelled"]]
    delivered = [r["chunk_tokens"][-1] if r["chunk_tokens"] else 0 for r in cancelled]
    whole_tokens = sum(r["chunk_tokens"][-1] for r in rows
                       if not r["cancelled"] and r["error"] is None)
    # A cancelled stream whose last tokens were still in flight may have
    # finished by length on the server.
    late = delta["length_finished"] - whole
    assert 0 <= late <= len(cancelled), (delta, whole, len(cancelled))
    # vLLM 0.32 records no stats for aborted requests (seen: 0 aborts after
    # 13 cancelled streams); should one be recorded, its tokens are at most max_out
    exact = whole_tokens + late * max_out
    assert exact <= delta["finished_tokens"] <= exact + delta["aborted"] * max_out, (
        delta, whole_tokens, late)
    client_total = whole_tokens + sum(delivered)
    undelivered_max = sum(max_out - d for d in delivered)
    assert client_total <= delta["generated"] <= client_total + undelivered_max, (
        client_total, delta["generated"], undelivered_max)
    print(f"chunks carrying several tokens: {multi}; generated after cancel: "
          f"{delta['generated'] - client_total:.0f} (at most {undelivered_max})")
