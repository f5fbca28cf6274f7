"""`bench run --workers N`: a decode cell's streams spread over N processes.

Against the reference server and its truth log: every request of a sharded
cell is in requests.parquet once, every shard honoured the parent's window,
and the figures agree with the server's own log as closely as one process's
do; a shard killed mid-cell fails that cell, naming it, and loses nothing
stored before. Plus the worker plan and the concurrency limit. Faults land
by request count (the server's arrivals log), never by sleeping.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.core.workers import (
    AUTO,
    PLANNED_STREAM_TOK_S,
    WORKER_EVENTS_PER_S,
    cell_shards,
    host_cores,
    plan_workers,
    shard_slots,
)
from bench.measure.monitor import WindowDelays, shards_bound_reason
from bench.measure.stamp_bounds import FigureBound
from rundir.contract import PURPOSE_MEASURE, PURPOSE_PREFIX_FILL
from rundir.io import read_run
from tests.collector.test_ground_truth import page_metrics, truth_metrics
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "3", "--warmup-stable", "1", "--no-prefill", "--server-wait", "3",
        "--contexts", "256", "--max-output", "300"]


MEDIANS = ("per-request tok/s", "time between tokens")


def shard_of(request_id: str) -> str:
    """The process a request was sent from: `w<k>` for a shard, `parent` else."""
    m = re.search(r"-(w\d+(?:g\d+)?)-\d+$", request_id)
    return m.group(1) if m else "parent"


# -- the plan -------------------------------------------------------------------


def test_auto_takes_what_the_planned_rate_needs_up_to_cores_minus_one() -> None:
    default = plan_workers(AUTO, [1, 2, 4, 8, 16, 32, 64, 128], cores=64)
    assert default.count == 1 and default.auto  # the default matrix stays in one process
    assert "128 streams × 250 tok/s planned = 32,000 events/s" in default.why
    big = plan_workers(AUTO, [16_384], cores=64)
    want = -(-16_384 * PLANNED_STREAM_TOK_S // WORKER_EVENTS_PER_S)
    assert want > 63 and big.count == 63 and f"{want} wanted, at most 63 on 64 cores" in big.why
    assert plan_workers(AUTO, [512], cores=2).count == 1
    assert plan_workers(AUTO, [512], cores=16).count == 4
    explicit = plan_workers(2, [1], cores=2)
    assert explicit.count == 2 and not explicit.auto and "share cores" in explicit.why


def test_a_cell_is_spread_over_no_more_processes_than_it_needs() -> None:
    explicit = plan_workers(4, [1, 2, 64], cores=16)
    assert [cell_shards(explicit, c) for c in (1, 2, 3, 64)] == [1, 2, 3, 4]
    auto = plan_workers(AUTO, [1024], cores=16)
    assert [cell_shards(auto, c) for c in (1, 128, 256, 1024)] == [1, 1, 2, 8]
    assert cell_shards(None, 64) == 1
    assert shard_slots(5, 2) == [[0, 2, 4], [1, 3]]
    assert sorted(i for s in shard_slots(16_384, 7) for i in s) == list(range(16_384))


def _delays(kernel: bool, stall_ns: int = 0) -> WindowDelays:
    d = WindowDelays(0, 1_000_000_000, events=1000, kernel_events=1000 if kernel else 0)
    if stall_ns:  # a loop stalled for half the window: the delay rule fires
        d.stalls = {40: [1, stall_ns]}
    return d


def test_a_cell_is_client_bound_if_any_shard_is() -> None:
    calm = [(1, _delays(True)), (2, _delays(True))]
    assert shards_bound_reason(calm, 5.0, []) is None
    merged = [FigureBound("total tok/s", 10.0, 0.1)]
    assert "late reads" in shards_bound_reason(calm, 5.0, merged)
    # shard 2 read without kernel stamps and stalled: it alone makes the cell bound
    mixed = [(1, _delays(True)), (2, _delays(False, stall_ns=500_000_000))]
    why = shards_bound_reason(mixed, 5.0, [])
    assert why is not None and why.startswith("shard 2: ") and "shard 1" not in why


# -- the command line -----------------------------------------------------------


def test_concurrency_past_16384_is_refused_in_one_line(tmp_path) -> None:
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", "--concurrency",
                  "1,16385", "--out", str(tmp_path / "r"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "16,384" in lines[0] and "16385" in lines[0], res.stderr
    assert not (tmp_path / "r").exists()


def test_the_plan_says_how_many_workers_and_why(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=100)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", *FAST,
                  "--concurrency", "1,512", "--workers", "auto")
    assert res.returncode == 0, res.stderr
    cores = host_cores()
    want = min(4, max(1, cores - 1))
    line = next(t for t in res.stderr.splitlines() if t.startswith("Workers:"))
    assert line.startswith(f"Workers: {want} (auto: 512 streams × 250 tok/s planned = "
                           "128,000 events/s, one process per 35,000"), line
    assert ("4 wanted" in line) == (cores - 1 < 4)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", *FAST,
                  "--concurrency", "4", "--workers", "3")
    assert "Workers: 3 (--workers" in res.stderr, res.stderr
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", "--workers", "0")
    assert res.returncode == 2 and "--workers" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# -- against the reference server ---------------------------------------------


def collect(srv, out: Path, workers: str) -> None:
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "2,4", "--workers", workers)
    assert res.returncode == 0, res.stderr


def check_rows(srv, run_dir: Path, shards: set[str]) -> None:
    """Every completion request the server saw is one row; stamps in order;
    with shards, every shard ran across both edges of the parent's window."""
    run = read_run(run_dir)
    rows = run.requests.to_pylist()
    ids = [r["request_id"] for r in rows]
    assert len(ids) == len(set(ids))
    truth = srv.truth(min_records=len(ids))
    tag = read_run(run_dir).info.run_id
    assert {r["request_id"] for r in truth if r["request_id"].startswith(tag)} == set(ids)
    for r in rows:
        stamps = r["chunk_ns"] or []
        assert stamps == sorted(stamps) and r["send_ns"] <= (stamps or [r["send_ns"]])[0]
        assert r["end_ns"] is None or not stamps or stamps[-1] <= r["end_ns"]
    for cell in run.cells.to_pylist():
        s, e = cell["window_start_ns"], cell["window_end_ns"]
        mine = [r for r in rows if r["concurrency"] == cell["concurrency"]]
        measured = [r for r in mine if r["purpose"] == PURPOSE_MEASURE]
        assert {r["stream_index"] for r in measured} == set(range(cell["concurrency"]))
        assert {shard_of(r["request_id"]) for r in mine} == shards
        for shard in shards:
            theirs = [r for r in measured if shard_of(r["request_id"]) == shard]
            assert theirs and min(r["send_ns"] for r in theirs) < s  # streaming before it opened
            assert all(r["send_ns"] < e for r in theirs)  # none started past its end
            open_at_end = [r for r in theirs if r["cancelled"]]
            assert open_at_end and all(r["end_ns"] >= e for r in open_at_end)  # cut at its end


def figures(srv, run_dir: Path) -> dict[int, dict[str, tuple[float, float]]]:
    """Per cell (concurrency): each figure as (ours, the server's truth)."""
    records = srv.truth(min_records=1)
    out = {}
    for (_, c), page in page_metrics(run_dir).items():
        t = truth_metrics(records, page)
        m = page["m"]
        out[c] = {"total tok/s": (m.total_tok_s, t["total"]),
                  "per-request tok/s": (m.per_request_tok_s, t["per_request"]),
                  "time between tokens": (m.tbt_ms, t["tbt"]),
                  "output tokens": (m.output_tokens, t["tokens"]),
                  "completed": (m.completed, t["completed"])}
    return out


def test_two_workers_publish_what_one_does(refserver, tmp_path) -> None:
    """The same schedule measured by one process and by two: the same rows
    (each request once, from both shards), and every figure as close to the
    server's own log as one process's: counts and total tok/s within 0.1%."""
    got = {}
    for workers, shards in (("1", {"parent"}), ("2", {"w1", "w2"})):
        srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
        run_dir = tmp_path / f"w{workers}"
        collect(srv, run_dir, workers)
        check_rows(srv, run_dir, shards)
        assert {c["status"] for c in read_run(run_dir).cells.to_pylist()} == {"valid"}
        got[workers] = figures(srv, run_dir)
    for c in (2, 4):
        for name, (ours, truth) in got["2"][c].items():
            one, one_truth = got["1"][c][name]
            print(f"{c} streams {name}: workers 1 {one:.4f} (truth {one_truth:.4f}), "
                  f"workers 2 {ours:.4f} (truth {truth:.4f})")
            # Counts and total tok/s within 0.1% of the server's log; the medians
            # over a few requests within 1% (tests/collector/test_ground_truth.py):
            # on a busy host one request's span, cut by a window edge, moves them.
            rel = 1e-2 if name in MEDIANS else 1e-3
            assert ours == pytest.approx(truth, rel=rel), (c, name)
            assert one == pytest.approx(one_truth, rel=rel), (c, name)
            if truth and one_truth:  # the same error against the same schedule
                assert ours / truth == pytest.approx(one / one_truth, rel=2 * rel), (c, name)


# -- a shard that dies ------------------------------------------------------------


def shard_pids(pid: int) -> list[int]:
    """The shard processes of the collector `pid` (its spawned children)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmd:  # not the resource tracker
            out.append(int(entry.name))
    return sorted(out)


def test_a_dead_shard_fails_its_cell_and_keeps_the_earlier_ones(refserver, tmp_path) -> None:
    # decode 256×4 sends 4 warm-ups, then its streams: stream request 5 is held,
    # so the cell waits for readiness until a shard is killed
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300,
                    inject=[{"cell": ["decode", 256, 4], "at": 5, "do": "hold"}])
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bench.cli import main; sys.exit(main())",
         "run", "--base-url", srv.base_url, "--out", str(out), *FAST, "--concurrency", "2,4",
         "--workers", "2", "--warmup-timeout", "300"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        srv.wait_arrival(("decode", 256, 4), 5)
        before = pq.read_table(out / "requests.parquet").to_pylist()  # cell 256×2, stored
        pids = shard_pids(proc.pid)
        assert len(pids) == 2, pids
        os.kill(pids[0], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, stderr  # finished, with an Error cell
    run = read_run(out)
    cells = {c["concurrency"]: c for c in run.cells.to_pylist()}
    assert cells[2]["status"] == "valid"
    assert cells[4]["status"] == "error"
    assert re.search(rf"shard [12] \(pid {pids[0]}\) died \(killed by SIGKILL\)",
                     cells[4]["reason"]), cells[4]["reason"]
    rows = run.requests.to_pylist()
    # as the file held them then: read_run adds the optional columns a run without them lacks
    kept = [{k: r[k] for k in before[0]} for r in rows if r["concurrency"] == 2]
    assert sorted(kept, key=lambda r: r["request_id"]) == sorted(
        [r for r in before if r["concurrency"] == 2], key=lambda r: r["request_id"])
    failed = [r for r in rows if r["concurrency"] == 4]
    assert len([r for r in failed if r["purpose"] == PURPOSE_PREFIX_FILL]) == 4
    for pid in pids:  # no shard outlives the run
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


# -- a shard that does not start --------------------------------------------------


@pytest.mark.parametrize("target, how", [
    ("killed_at_start", r"killed by SIGKILL before it was ready"),
    ("stopped_at_start", r"stopped \(SIGSTOP\?\) and not ready in 45 s, so ended"),
    ("hung_at_start", r"not ready in 45 s, so ended"),
])
def test_a_shard_that_does_not_start_fails_its_cell_in_one_line(refserver, tmp_path, target,
                                                                 how) -> None:
    """Shard process 1 is killed, stopped (SIGSTOP) or hangs before it says
    ready (its spawn target does that to itself; the start timeout is 45 s
    here, far above a healthy start): the cell ends Error, its reason one line naming the shard, its pid
    and how it ended (before: the run stopped with "cannot start shard 1
    (pid N) died (did not start)" and no --resume hint); the next cell
    starts a fresh process there and is Valid."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    patch = (f"import bench.distributed.shards as s, tests.collector.shard_peers as f; s.main = f.{target}; "
             "s.START_TIMEOUT_S = 45.0; ")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", patch + "import sys; from bench.cli import main; sys.exit(main())",
         "run", "--base-url", srv.base_url, "--out", str(out), *FAST, "--concurrency", "2,4",
         "--workers", "2"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stderr  # finished, with an Error cell
    cells = {c["concurrency"]: c for c in read_run(out).cells.to_pylist()}
    reason = cells[2]["reason"]
    assert cells[2]["status"] == "error"
    assert re.fullmatch(rf"shard 1 \(pid \d+\) did not start: {how} \(a fresh one starts with "
                        r"the next cell\)", reason), reason
    assert cells[4]["status"] == "valid", cells[4]["reason"]
    # what measured each: nothing for the cell that sent no request, 2 processes after
    assert [(cells[c]["processes"], cells[c]["hosts"]) for c in (2, 4)] == [(None, None), (2, 1)]
    assert {shard_of(r["request_id"]) for r in read_run(out).requests.to_pylist()} == {
        "w1g2", "w2"}
    assert "Traceback" not in proc.stderr
