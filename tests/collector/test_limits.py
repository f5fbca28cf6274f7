"""The host's own limits, met before a cell opens a stream (issue 30, item 11).

A process's open-file limit (`ulimit -n`) and a source address of the wrong
family used to show up only as failed streams: 1,757 of 2,000 connections
failing with "Too many open files" read as a first-token timeout, and
`--source-address ::1` against an IPv4 server was silently ignored.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks._stub_server import StubServer
from rundir.contract import VALID
from rundir.io import read_run

REPO = Path(__file__).resolve().parents[2]
FAST = ["--duration", "1", "--warmup-stable", "0.3", "--no-prefill", "--server-wait", "5",
        "--contexts", "256", "--max-output", "300", "--gpu-telemetry", "off"]


def bench_with_files(soft: int, hard: int, *args: str) -> subprocess.CompletedProcess:
    """`bench run` in a process whose open-file limit is (soft, hard)."""
    code = ("import resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            "from bench.cli import main; sys.exit(main())")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, "run", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_a_cell_past_the_hard_open_file_limit_is_refused_before_any_stream(tmp_path: Path) -> None:
    with StubServer(tmp_path / "stub", procs=1, tok_per_s=50) as stub:
        res = bench_with_files(200, 200, "--base-url", stub.base_url, "--out",
                               str(tmp_path / "r"), *FAST, "--concurrency", "300")
        stub.stop()
    assert res.returncode != 0
    said = [ln for ln in res.stderr.splitlines() if "open files" in ln]
    assert said and "300 streams" in said[0] and "ulimit" in said[0], res.stderr
    assert "Traceback" not in res.stderr
    stored = tmp_path / "r" / "requests.parquet"
    assert not stored.exists() or read_run(tmp_path / "r").requests.num_rows == 0


def test_a_soft_open_file_limit_is_raised_to_what_the_cell_needs(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with StubServer(tmp_path / "stub", procs=1, tok_per_s=50) as stub:
        res = bench_with_files(100, 4096, "--base-url", stub.base_url, "--out", str(out), *FAST,
                               "--concurrency", "120")
        stub.stop()
    assert res.returncode == 0, res.stderr
    assert "Open files: the limit raised from 100 to 184" in res.stderr
    cell = read_run(out).cells.to_pylist()[0]
    assert cell["status"] == VALID, cell


def test_a_source_address_of_the_other_family_is_refused_in_one_line(tmp_path: Path) -> None:
    with StubServer(tmp_path / "stub", procs=1, tok_per_s=50) as stub:
        res = bench_with_files(1024, 4096, "--base-url", stub.base_url, "--out",
                               str(tmp_path / "r"), *FAST, "--concurrency", "1",
                               "--source-address", "::1")
        sent = stub.stop()
    assert res.returncode != 0
    said = [ln for ln in res.stderr.splitlines() if "--source-address ::1" in ln]
    assert said and "IPv4 addresses only" in said[0], res.stderr
    assert not sent  # no stream went out from an address the flag did not ask for
    assert "Traceback" not in res.stderr


def bench_failing_flush(n: int, *args: str) -> subprocess.CompletedProcess:
    """`bench run` whose n-th store of the run directory meets a MemoryError (as a
    process under `ulimit -v` does, wherever its memory runs out)."""
    code = ("import sys, bench.run.store as s; real = s.RunStore.flush; calls = [0]\n"
            "def flush(self, *a, **k):\n"
            "    calls[0] += 1\n"
            f"    if calls[0] == {n}: raise MemoryError\n"
            "    return real(self, *a, **k)\n"
            "s.RunStore.flush = flush\n"
            "from bench.cli import main; sys.exit(main())")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, "run", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_out_of_memory_after_a_cell_is_one_line_and_keeps_it(tmp_path: Path) -> None:
    """Under a 600 MB address-space limit a run died with a bare traceback."""
    out = tmp_path / "r"
    with StubServer(tmp_path / "stub", procs=1, tok_per_s=50) as stub:
        res = bench_failing_flush(3, "--base-url", stub.base_url, "--out", str(out), *FAST,
                                  "--concurrency", "1,2")
        stub.stop()
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: out of memory") and f"--resume {out}" in last, last
    cells = {c["concurrency"]: c["status"] for c in read_run(out).cells.to_pylist()}
    assert cells[1] == VALID


def test_out_of_memory_before_any_cell_is_one_line(tmp_path: Path) -> None:
    with StubServer(tmp_path / "stub", procs=1, tok_per_s=50) as stub:
        res = bench_failing_flush(1, "--base-url", stub.base_url, "--out",
                                  str(tmp_path / "r"), *FAST, "--concurrency", "1")
        stub.stop()
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: out of memory"), res.stderr
