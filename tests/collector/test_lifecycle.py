"""A run's lifecycle under faults: one writer per directory, a killed writer's
leftovers, the server dying between cells, a full disk, a key the completion
endpoints refuse, and an exit status a script can trust."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rundir.io import read_run
from tests.collector.test_faults import D2, FAST, STEADY, cells, start_bench
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture, release, wait_arrival  # noqa: F401

C1 = ("decode", 128, 1)


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def holder_pid(run_dir: Path, timeout: float = 30) -> int:
    """The pid in the run's lock file, once the writer has taken it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = (run_dir / ".bench.lock").read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit():
            return int(text)
        assert time.monotonic() < deadline, "the writer never took its lock"
        time.sleep(0.05)


def test_a_second_writer_is_refused_with_the_holders_pid(refserver, tmp_path) -> None:
    """The first writer is held inside its first cell (the server does not answer
    its first request until released) while two more writers try the directory."""
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(C1), "at": 1, "do": "hold"}])
    out = tmp_path / "run"
    first = start_bench(srv, out, "--concurrency", "1,2")
    try:
        srv.wait_arrival(C1, 1)
        assert holder_pid(out) == first.pid
        for how in ("--out", "--resume"):
            res = run_cli("bench", "run", "--base-url", srv.base_url, how, str(out), *FAST)
            assert res.returncode == 1, res.stderr
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
            assert str(out) in lines[0] and f"pid {first.pid}" in lines[0], lines[0]
        assert srv.release() == 1
        _, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, stderr  # the first writer's run is whole
    assert {c["status"] for c in cells(out).values()} == {"valid"}
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST)
    assert res.returncode == 1 and res.stderr.strip() == (
        f"error: --out: {out} already exists and is not empty (use --resume {out} to continue it)")


def test_a_killed_writer_leaves_no_lock_and_its_temp_files_are_cleaned(refserver, tmp_path) -> None:
    # the second cell's first request is held: the writer is inside it, cell 1 stored
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 1, "do": "hold"}])
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "1,2", "--duration", "3")
    srv.wait_arrival(D2, 1)
    proc.kill()  # SIGKILL: no cleanup of any kind
    proc.communicate(timeout=30)
    # what a writer killed inside rundir.io.atomic_write leaves behind
    stale = [".cells.parquet.k1l2x9.tmp", ".requests.parquet.a8b7c6.tmp", ".run.yaml.q1w2e3.tmp"]
    for name in stale:
        (out / name).write_bytes(b"half a file")
    mine = [".notes.tmp", "notes.txt"]  # not ours: left alone
    for name in mine:
        (out / name).write_text("keep me")
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--warmup-stable", "0.5")
    assert res.returncode == 0, res.stderr
    assert not [n for n in stale if (out / n).exists()]
    assert all((out / n).read_text() == "keep me" for n in mine)
    assert {c["status"] for c in cells(out).values()} == {"valid"}


def test_server_dying_between_cells_ends_with_one_line_and_resumes(refserver, tmp_path) -> None:
    """The server exits at the next cell's first /tokenize: once a 100-line
    httpx traceback."""
    srv = refserver(tokens_per_s=STEADY, exit_on_tokenize_after=2)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1,2")
    assert res.returncode == 1
    line = last_line(res.stderr)
    assert line.startswith(f"error: the server at {srv.base_url} failed before decode 128×2")
    assert line.endswith(f"measured cells are kept in {out}; continue with `--resume {out}`")
    got = cells(out)
    assert got[("decode", 128, 1)]["status"] == "valid"
    assert got[("decode", 128, 2)]["status"] == "pending"
    srv.restart()
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--warmup-stable", "0.5")
    assert res.returncode == 0, res.stderr
    assert cells(out)[("decode", 128, 2)]["status"] == "valid"


# -- a full disk --------------------------------------------------------------

def _tmpfs_works() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
        capture_output=True, timeout=30,
    )
    return probe.returncode == 0


class _Url:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


def enospc_driver(base_url: str, arrivals: str, disk: str, copy_to: str, result: str) -> None:
    """Runs in a private mount namespace with a tiny tmpfs at `disk`: start
    `bench run` there; once the server holds the second cell's first request
    (the first cell is stored), fill the disk and let the request go; then copy
    what it left to `copy_to` and write its exit status and stderr to `result`."""
    out = Path(disk) / "run"
    proc = start_bench(_Url(base_url), out, "--concurrency", "1,2")
    wait_arrival(arrivals, D2, 1)
    with open(Path(disk) / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    assert release(base_url) == 1
    _, stderr = proc.communicate(timeout=300)
    (Path(disk) / "filler").unlink()
    shutil.copytree(out, copy_to)
    Path(result).write_text(json.dumps({"rc": proc.returncode, "stderr": stderr}))


def _check_full_disk(out: Path, rc: int, stderr: str) -> None:
    assert rc == 1, stderr
    line = last_line(stderr)
    assert line.startswith("error: cannot save decode 128×2: ") and "No space left on device" in line
    assert "the cells measured before it are kept in" in line and "--resume" in line
    got = cells(out)  # the directory reads whole: every file as it was or complete
    assert got[("decode", 128, 1)]["status"] == "valid"
    assert got[("decode", 128, 2)]["status"] == "pending"
    assert {r["concurrency"] for r in read_run(out).requests.to_pylist()} == {1}


@pytest.mark.skipif(not _tmpfs_works(), reason="no unprivileged mount namespace for a tmpfs")
def test_full_disk_on_a_real_tmpfs(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 1, "do": "hold"}])
    disk, copy, result = tmp_path / "disk", tmp_path / "copy", tmp_path / "result.json"
    disk.mkdir()
    driver = (f"from tests.collector.test_lifecycle import enospc_driver; "
              f"enospc_driver({srv.base_url!r}, {str(srv.arrivals_path)!r}, {str(disk)!r}, "
              f"{str(copy)!r}, {str(result)!r})")
    script = f'mount -t tmpfs -o size=512k tmpfs "{disk}" && exec "{sys.executable}" -c "{driver}"'
    res = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr
    got = json.loads(result.read_text())
    _check_full_disk(copy, got["rc"], got["stderr"])
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(copy),
                  "--warmup-stable", "0.5")
    assert res.returncode == 0, res.stderr
    assert cells(copy)[("decode", 128, 2)]["status"] == "valid"


INJECT = """
import errno, os, sys
from pathlib import Path
import rundir.io
real = rundir.io.atomic_write
seen = []
def atomic_write(path, write):
    if Path(path).name == "requests.parquet":
        seen.append(path)
        if len(seen) >= 3:  # the plan, cell 1, then cell 2: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(path, write)
rundir.io.atomic_write = atomic_write
from bench.cli import main
sys.argv[0] = "bench"
main()
"""


def test_full_disk_injected_write_error(refserver, tmp_path) -> None:
    """The same fault where no tmpfs can be mounted: ENOSPC from the third
    write of requests.parquet."""
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-c", INJECT, "run", "--base-url", srv.base_url, "--out", str(out),
         *FAST, "--concurrency", "1,2"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    _check_full_disk(out, res.returncode, res.stderr)
    assert f"{out / 'requests.parquet'}: No space left on device" in res.stderr


# -- the API key --------------------------------------------------------------

@pytest.mark.parametrize("key", ["wrong-key-654321", None])
def test_key_refused_only_by_the_completion_endpoints_stops_at_once(refserver, tmp_path, key) -> None:
    """llama-server checks the key on completions, not on /v1/models: the probe
    passes, the first completion gets 401. Once every cell ended Error and the
    run exited 0."""
    srv = refserver(tokens_per_s=STEADY, api_key="right-key-123456", api_key_scope="completions")
    out = tmp_path / "run"
    args = ["bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
            "--concurrency", "1,2"]
    env = {"OPENAI_API_KEY": ""}
    res = run_cli(*args, *(["--api-key", key] if key else []), env=env)
    assert res.returncode == 1
    line = last_line(res.stderr)
    assert line.startswith("error: the API key is wrong or missing"), line
    assert "401" in line and "--resume" in line
    if key:
        assert key not in res.stdout + res.stderr
    assert {c["status"] for c in cells(out).values()} == {"pending"}  # nothing mis-stored
    assert read_run(out).requests.num_rows == 0
    assert srv.truth() == []  # refused requests are not logged: none was accepted
    res = run_cli(*args[:4], "--resume", str(out), "--api-key", "right-key-123456",
                  "--warmup-stable", "0.5")
    assert res.returncode == 0, res.stderr
    assert {c["status"] for c in cells(out).values()} == {"valid"}


# -- exit status ----------------------------------------------------------------

def test_error_cells_give_exit_status_3_and_a_summary(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, status_every={"n": 1, "code": 500}, kv_budget_tokens=1100)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1,4")
    assert res.returncode == 3, res.stderr
    assert last_line(res.stderr) == "2 cells: 0 valid, 1 error, 1 skipped (over capacity)"
    assert res.stdout.strip() == str(out)


def test_a_clean_run_exits_0_with_a_summary(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    assert last_line(res.stderr) == "1 cell: 1 valid, 0 error, 0 skipped (over capacity)"


def test_a_password_in_the_base_url_never_reaches_the_terminal_or_a_file(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    secret = "s3cret-pass-xyz"
    url = srv.base_url.replace("http://", f"http://user:{secret}@")
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", url, "--out", str(out), *FAST, "--concurrency", "1",
                  "--launch-command", f"proxy --listen 8000 --upstream-user-word {secret}")
    assert res.returncode == 0, res.stderr
    assert "user:<redacted>@" in res.stderr
    assert read_run(out).info.launch_command.endswith("--upstream-user-word <redacted>")
    gone = run_cli("bench", "run", "--base-url", f"http://user:{secret}@127.0.0.1:1",
                   "--out", str(tmp_path / "gone"), "--server-wait", "1")  # waits, then one line
    assert gone.returncode == 1 and "no server answers" in gone.stderr
    for blob in (res.stdout, res.stderr, gone.stdout, gone.stderr):
        assert secret not in blob
    for path in out.iterdir():
        assert secret.encode() not in path.read_bytes(), path


def test_an_out_that_cannot_be_created_is_one_line(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200)
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST)
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --out: cannot create {out}"), res.stderr
