"""A server that is still starting when `bench run` begins (issue 18, item 9).

llama-server answers every endpoint 503 "Loading model" until its model is
loaded, and a vLLM server refuses connections until its API server is up.
Before the first request the collector waits up to `--server-wait` for
either, printing what it waits for; anything else (a refused key, a
malformed answer) still fails at once. The reference server's loading phase
is counted in requests (`loading_answers`), not in seconds, and the
not-yet-listening case starts the server only once the collector has said it
waits: nothing here depends on the host's speed.
"""

from __future__ import annotations

import os
import subprocess
import sys

from rundir.io import read_run
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "1", "--warmup-stable", "0.2", "--no-prefill", "--max-output", "200",
        "--contexts", "128", "--concurrency", "1"]
WAITING = "waiting for the server at"


def test_a_loading_llama_server_is_waited_for(refserver, tmp_path) -> None:
    srv = refserver(engine="llamacpp", tokens_per_s=200, loading_answers=4)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--server-wait", "120", timeout=300)
    assert res.returncode == 0, res.stderr
    # once per new thing waited for, naming it and the flag (the console wraps at 80 columns)
    said = " ".join(res.stderr.split())
    assert said.count(WAITING) == 1, res.stderr
    assert f"{WAITING} {srv.base_url}: HTTP 503 ('Loading model') (up to" in said
    assert "--server-wait" in said.split(WAITING, 1)[1]
    assert [c["status"] for c in read_run(out).cells.to_pylist()] == ["valid"]


def test_a_server_still_loading_after_the_wait_is_one_line(refserver, tmp_path) -> None:
    srv = refserver(engine="llamacpp", loading_answers=10**6)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--server-wait", "0", timeout=120)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "HTTP 503 ('Loading model')" in lines[0], res.stderr
    assert "not ready" in lines[0] and "Traceback" not in res.stderr
    assert not out.exists()


def test_a_server_not_listening_yet_is_waited_for(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200)
    srv.stop()  # its port is known and closed: "connection refused" until it starts
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.cli", "run", "--base-url", srv.base_url, "--out", str(out),
         *FAST, "--server-wait", "300"],
        env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        first = proc.stderr.readline()  # blocks until the collector says it waits
        assert WAITING in first and "ConnectError" in first, first
        srv.restart(kill=False)
        _, rest = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, first + rest
    assert [c["status"] for c in read_run(out).cells.to_pylist()] == ["valid"]


def test_a_refused_key_is_not_waited_for(refserver, tmp_path) -> None:
    """A wrong key is an answer, not a server starting: it fails at once even
    with a long --server-wait (a wait would show as the waiting line)."""
    srv = refserver(api_key="right-key-4242")
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--api-key", "wrong-key-1313",
                  "--out", str(tmp_path / "run"), *FAST, "--server-wait", "600", timeout=300)
    assert res.returncode == 1 and WAITING not in res.stderr, res.stderr
    assert "API key" in res.stderr and "wrong-key-1313" not in res.stderr


# ---- a stream whose HTTP framing lies (issue 18, item 11) ---------------------


def test_a_negative_chunk_size_fails_the_stream(refserver, tmp_path) -> None:
    """`-5` as an HTTP chunk size (int(x, 16) takes it) made the parser drop
    one event and repeat the next, and the cell came out Valid. A size line
    that is not hex digits fails the stream, as `zz` already did."""
    srv = refserver(tokens_per_s=200, bad_chunk_size_after_tokens=20, bad_chunk_size="-7",
                    fault_every=2)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST[:-1], "2",
                  "--server-wait", "2", timeout=300)
    assert res.returncode == 3, res.stderr  # the run goes on and ends with an Error cell
    (cell,) = read_run(out).cells.to_pylist()
    assert cell["status"] == "error" and "malformed HTTP chunk size" in cell["reason"], cell
