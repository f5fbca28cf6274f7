"""A server with fewer slots than a cell's streams, and llama.cpp's KV budget
(issue 32, items 2 and 3), through the real `bench run` against the reference
server speaking as llama-server.

With 2 slots a ×4 cell's other two streams wait in the server's queue and
cannot produce tokens: the collector used to wait the whole --warmup-timeout
for them, silently, every such cell. Now the plan names the slots and the
cells beyond them, the terminal says it as the cell starts, readiness waits
for the 2 streams that can run, and the cell is Requests queued, never
published as 4 concurrent streams.

llama-server's slots tell the context one request may fill, not the KV
cache's size (docs/engines.md): the plan said their sum, "65,536 tokens" for
`-c 32768` and 2 slots of a unified cache. The budget is unknown unless
--kv-budget gives it, and the plan says to pass the server's -c; with it,
the Over-capacity pre-check counts only the streams that run at once
(queued requests hold no KV cache).
"""

from __future__ import annotations

from pathlib import Path

from rundir.io import read_run
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401
from tests.support.engine_expectations import REF_MAX_MODEL_LEN

# Long enough that a test failing without the fix shows it (the ×4 cell waits it out),
# short enough that it fails in seconds, not minutes.
WARMUP_TIMEOUT_S = 30
FAST = ["--duration", "2", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "3",
        "--warmup-timeout", str(WARMUP_TIMEOUT_S)]


def test_dry_run_names_the_slots_and_the_cells_beyond_them(refserver, tmp_path: Path) -> None:
    srv = refserver(engine="llamacpp", slots=2)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", "--no-prefill",
                  "--contexts", "4k", "--concurrency", "1,2,4,8", "--max-output", "4096",
                  "--out", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stderr.split())  # as a reader sees it, whatever the wrapping
    # not the slots' contexts summed (2 × 32,768): llama.cpp does not tell its cache's size
    assert (f"KV budget: unknown (llama.cpp /slots tells each slot's context (2 slots × "
            f"{REF_MAX_MODEL_LEN:,}), not the KV cache's size: pass --kv-budget with the -c the "
            f"server was started with)") in out, out
    assert f"{2 * REF_MAX_MODEL_LEN:,}" not in out
    assert "Server slots: 2 (at most 2 requests run at once)" in out
    assert "×4, ×8 have more streams than slots" in out and "Requests queued" in out
    assert "skip decode" not in out, out
    assert "Will run 4 cells" in out


def test_over_capacity_counts_the_streams_that_run_at_once(refserver, tmp_path: Path) -> None:
    """With the budget given (the -c of `llama-server -c 32768 -np 2`, as the plan
    asks), a cell needs the KV cache of the streams that run at once: queued
    requests hold none."""
    srv = refserver(engine="llamacpp", slots=2)
    budget = ["--kv-budget", str(REF_MAX_MODEL_LEN)]
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", "--no-prefill",
                  "--contexts", "12k", "--concurrency", "1,2,4", "--max-output", "4096",
                  "--out", str(tmp_path / "run"), *budget)
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stderr.split())
    # 2 × (12,288 + 4,096) = 32,768 ≤ 32,768 fits; ×4 needs as much (2 of its 4 at once)
    assert "skip decode" not in out, out
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", "--no-prefill",
                  "--contexts", "13k", "--concurrency", "1,2,4", "--max-output", "4096",
                  "--out", str(tmp_path / "run"), *budget)
    out = " ".join(res.stderr.split())
    assert "skip decode 13K × 2: Over capacity" in out, out
    assert ("skip decode 13K × 4: Over capacity — needs 34,816 KV tokens (2 × (13,312 + 4,096): "
            "2 of its 4 streams run at once, one per slot), server budget is 32,768") in out, out


def test_more_streams_than_slots_is_measured_without_a_blind_wait(refserver, tmp_path: Path) -> None:
    srv = refserver(engine="llamacpp", slots=2, tokens_per_s=200)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--contexts", "256", "--concurrency", "2,4", "--max-output", "400")
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stderr.split())
    assert ("decode 256×4: 4 streams, 2 server slots: 2 run at once and 2 wait in the server's "
            "queue; the window opens once 2 streams produce tokens") in said, said
    cells = {c["concurrency"]: c for c in read_run(out).cells.to_pylist() if c["phase"] == "decode"}
    assert cells[2]["status"] == "valid", cells[2]
    four = cells[4]
    assert four["status"] == "requests_queued", four
    assert "4 streams, 2 server slots: at most 2 ran at once" in four["reason"], four["reason"]
    assert "readiness not reached" not in four["reason"], four["reason"]
    # readiness waited for the 2 streams that can run, not out the timeout
    assert four["warmup_s"] < WARMUP_TIMEOUT_S, four
    # its numbers stand, flagged: the server's waiting gauge saw the other two queue
    assert "waiting gauge reached 2" in four["reason"], four["reason"]
