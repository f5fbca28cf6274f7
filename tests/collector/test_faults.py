"""Faults: each leaves a valid run directory, every cell measured so far
intact, the affected cell marked Error with its reason, and the run going
on or ending with one clear message. Secrets never leak."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rundir.io import read_run
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "2", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "2",
        "--max-output", "400", "--contexts", "128"]
# Decode at 50 tok/s: a 400-token stream (FAST) lasts 8 s, longer than readiness and the
# window together, so no stream ends and restarts inside a window. At 200 tok/s each one
# did, and a collector starved on a loaded host took over 100 ms to restart it: an
# average of 0.94 active streams of 1, Requests queued, where a test wanted Valid.
STEADY = 50
D2 = ("decode", 128, 2)  # the second cell of a 128 × 1,2(,4) run


def start_bench(srv, out: Path, *extra: str) -> subprocess.Popen:
    """`bench run` in the background, for faults injected while it runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.cli", "run", "--base-url", srv.base_url, "--out", str(out),
         *FAST, *extra],
        env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


def cells(run_dir: Path) -> dict[tuple[str, int, int], dict]:
    return {(c["phase"], c["context"], c["concurrency"]): c
            for c in read_run(run_dir).cells.to_pylist()}


@pytest.mark.parametrize("fault, expect", [
    ({"status_every": {"n": 3, "code": 429}}, "HTTP 429"),
    ({"status_every": {"n": 3, "code": 500}}, "HTTP 500"),
    ({"reset_after_tokens": 20, "fault_every": 3}, "connection lost"),
    ({"malformed_after_tokens": 20, "fault_every": 3}, "malformed SSE event"),
    ({"fail_after_tokens": 20, "fault_every": 3}, "server error mid-stream"),
])
def test_stream_faults_mark_the_cell_error(refserver, tmp_path, fault, expect) -> None:
    srv = refserver(tokens_per_s=200, **fault)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "2")
    # the server still answers: the run goes on, and ends with exit status 3 (Error cells)
    assert res.returncode == 3, res.stderr
    cell = cells(out)[("decode", 128, 2)]
    assert cell["status"] == "error" and expect in cell["reason"], cell["reason"]


def test_queued_prefix_warmup_is_not_a_stall(refserver, tmp_path) -> None:
    """A cell's prefix warm-ups queue behind one another (one slot, slow
    prefill): the last waits far longer than the stall limit for its first
    token, and the cell is still measured."""
    srv = refserver(tokens_per_s=200, slots=1, prefill_tok_per_s=1000)
    out = tmp_path / "q"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--contexts", "1k", "--concurrency", "4", "--stall-timeout", "1.5",
                  "--warmup-timeout", "3")
    assert res.returncode == 0, res.stderr
    rows = read_run(out).requests.to_pylist()
    fills = [r for r in rows if r["purpose"] == "prefix_fill"]
    assert len(fills) == 4 and all(r["error"] is None for r in fills)
    waits = sorted((r["end_ns"] - r["send_ns"]) / 1e9 for r in fills)
    assert waits[-1] > 3.0  # four 1,024-token prefills at 1,000 tok/s, one at a time
    cell = read_run(out).cells.to_pylist()[0]
    assert cell["status"] != "error", cell


def test_stall_is_an_error_after_the_timeout(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, stall_after_tokens=10, stall_s=6, fault_every=2)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "2", "--stall-timeout", "1.5")
    assert res.returncode == 3, res.stderr
    cell = cells(out)[("decode", 128, 2)]
    assert cell["status"] == "error" and "stalled" in cell["reason"]


def test_wrong_api_key_fails_fast(refserver, tmp_path) -> None:
    srv = refserver(api_key="right-key-123456")
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--api-key", "wrong-key-654321",
                  "--out", str(tmp_path / "run"))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "401" in lines[0] and "API key" in lines[0]
    assert "wrong-key-654321" not in res.stderr + res.stdout
    assert not (tmp_path / "run").exists()


def test_api_key_never_leaves_the_process(refserver, tmp_path) -> None:
    key = "sk-test-SECRET-0123456789abcdef"
    srv = refserver(api_key=key, tokens_per_s=200, status_every={"n": 4, "code": 500})
    outputs = []
    for how in ("flag", "env"):
        out = tmp_path / how
        args = ["bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                "--concurrency", "1,2", "--launch-command", f"vllm serve m --api-key {key}"]
        env = {"OPENAI_API_KEY": key} if how == "env" else {}
        if how == "flag":
            args += ["--api-key", key]
        res = run_cli(*args, env=env)
        assert res.returncode == 3, res.stderr  # an HTTP 500 made a cell Error
        outputs.append(res.stdout + res.stderr)
        assert "<redacted>" in read_run(out).info.launch_command
    for blob in outputs:
        assert key not in blob
    for path in [*(tmp_path / "flag").rglob("*"), *(tmp_path / "env").rglob("*")]:
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


# The server exits, as in a crash, once the second cell's first measured stream
# (its request 3, after two one-token prefix warm-ups) has sent 5 tokens: the cell
# is streaming and cannot have ended, since it ends only after readiness and a
# whole window, both counted from every stream's first token.
DIES_IN_D2 = {"cell": list(D2), "at": 3, "do": "exit", "after_tokens": 5}


def test_server_killed_mid_run_keeps_measured_cells(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY, inject=[DIES_IN_D2])
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "1,2,4", "--duration", "3")
    _, stderr = proc.communicate(timeout=300)
    assert srv.proc.wait(30) == 3  # it died where the test said, not by some other fault
    assert proc.returncode == 1
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: the server at") and "--resume" in last
    got = cells(out)
    assert got[("decode", 128, 1)]["status"] == "valid"
    assert got[D2]["status"] == "error"
    assert got[("decode", 128, 4)]["status"] == "pending"
    # the server comes back (its fault does not fire twice: request numbers go on
    # across a restart): --resume runs only what is missing or unfinished
    srv.restart()
    # R's 3 s windows, not FAST's 2 s: a resumed run keeps its parameters
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--warmup-stable", "0.5", "--server-wait", "2", "--retry-errors")
    assert res.returncode == 0, res.stderr
    again = cells(out)
    assert again[("decode", 128, 1)] == got[("decode", 128, 1)]  # kept, not re-run
    assert again[D2]["status"] == "valid"  # --retry-errors
    assert again[("decode", 128, 4)]["status"] == "valid"


def test_server_restarted_mid_run_goes_on(refserver, tmp_path) -> None:
    """The server dies at the second cell's first measured stream and is
    started again: that cell is Error, the collector waits for the server
    (--server-wait) and measures the next cell."""
    srv = refserver(tokens_per_s=STEADY, inject=[DIES_IN_D2])
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "1,2,4", "--server-wait", "300")
    try:
        assert srv.proc.wait(300) == 3  # died inside the second cell
        srv.restart()  # on the same port
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, stderr
    got = cells(out)
    assert got[("decode", 128, 1)]["status"] == "valid"
    assert got[D2]["status"] == "error"
    assert got[("decode", 128, 4)]["status"] == "valid"


def test_server_dying_before_a_cells_first_token_is_one_line(refserver, tmp_path) -> None:
    """The server exits as the second cell's first measured stream arrives,
    before any stream of that cell has a token."""
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 3, "do": "exit"}])
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1,2")
    assert srv.proc.wait(30) == 3
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.returncode == 1 and res.stderr.strip().splitlines()[-1].startswith(
        "error: the server at")
    assert cells(out)[D2]["status"] == "error"


def interrupt(proc: subprocess.Popen) -> str:
    """Ctrl-C the collector; its stderr. The deadline is generous: each test
    holds the collector in a phase it could not leave for far longer."""
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    return stderr


def waiting(srv) -> float:
    """The server's vLLM waiting gauge."""
    with urllib.request.urlopen(srv.base_url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_waiting"))


def test_interrupt_keeps_finished_cells_and_resumes(refserver, tmp_path) -> None:
    """Ctrl-C once the server has the second cell's first measured stream,
    which it holds unanswered: the cell cannot reach readiness (for up to
    --warmup-timeout 600 s), so the collector is inside it when interrupted,
    and only stopping at once ends it within the deadline."""
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "1,2", "--duration", "3",
                       "--warmup-timeout", "600")
    srv.wait_arrival(D2, 3)
    stderr = interrupt(proc)
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: interrupted") and f"--resume {out}" in last
    got = cells(out)
    assert got[("decode", 128, 1)]["status"] == "valid"
    assert got[D2]["status"] == "pending"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--warmup-stable", "0.5", "--server-wait", "2")
    assert res.returncode == 0, res.stderr
    again = cells(out)
    assert again[("decode", 128, 1)] == got[("decode", 128, 1)]
    assert again[D2]["status"] == "valid"


def test_interrupt_during_prefix_warmup_stops_at_once(refserver, tmp_path) -> None:
    """Ctrl-C while the cell's prefix warm-ups queue on a busy server: the
    collector stops them and exits; it does not wait for them and then
    start the cell's streams (seen on an H200 whose llama-server stalled)."""
    # one token a second: a warm-up of 128 tokens takes 128 s, four in a row over 8 minutes,
    # so only a collector that stops them exits within the deadline
    srv = refserver(tokens_per_s=200, slots=1, prefill_tok_per_s=1)
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "4")
    deadline = time.monotonic() + 120
    while waiting(srv) < 3:  # the warm-ups have reached the server: one runs, three queue
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the prefix warm-ups never queued"
        time.sleep(0.05)
    stderr = interrupt(proc)
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    assert cells(out)[("decode", 128, 4)]["status"] == "pending"
    measured = [r for r in srv.truth(min_records=4) if (r["max_tokens"] or 0) > 1]
    assert not measured, "a measurement stream started after Ctrl-C"
