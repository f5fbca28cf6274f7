"""Rate cells over several processes (issue 34, item 2: "rates beyond one process
use --workers / --shard as decode cells do").

The plan (pure): how a rate cell's schedule and cap are dealt, how many
processes `auto` takes for it, and that a record coming back from another
host's clock keeps its scheduled time. Through the real `bench run` against
the reference server and its arrivals log: `--rate 50 --workers 2` sends the
schedule a one-process run with the same seed sends, every request reaching
the server at or after its scheduled time, from both processes; a shard that
dies mid-cell (by request count) fails the cell naming it; and `--shard 0/2`
on one host with shard 1's clock skewed sends the same schedule on shard 0's
clock.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.core.plan import Cell
from bench.core.workers import AUTO, RateLoad, host_cores, plan_workers, rate_shards
from bench.distributed.clocksync import shift_record
from bench.distributed.rate_shards import deal
from bench.measure.rate_cells import cell_schedule
from bench.measure.records import RequestRecord
from rundir.arrivals import parse_process
from rundir.contract import LOAD_NOT_DELIVERED, PURPOSE_ARRIVAL, RATE, VALID
from rundir.io import read_run
from site_builder.rate import rate_cells
from tests.collector.test_multihost import SKEW_NS, Bench, free_port, kill_running
from tests.collector.test_workers import shard_of, shard_pids
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

SEED = "11"
BASE = ["--contexts", "128", "--concurrency", "1", "--no-prefill", "--warmup-stable", "0.2",
        "--server-wait", "3", "--max-output", "16", "--rate-output", "4", "--duration", "2",
        "--arrivals", "poisson", "--arrival-seed", SEED]


# -- the plan (pure) ---------------------------------------------------------------


def test_requests_are_dealt_round_robin_and_the_cap_as_slots_are() -> None:
    offsets = list(range(0, 700, 100))
    assert deal(offsets, 2, 0) == [([0, 200, 400, 600], 0), ([100, 300, 500], 0)]
    assert deal(offsets, 3, 5) == [([0, 300, 600], 2), ([100, 400], 2), ([200, 500], 1)]
    # a cap below the processes: only as many take part as it has places
    assert deal(offsets, 3, 2) == [([0, 200, 400, 600], 1), ([100, 300, 500], 1), ([], 0)]
    for n, cap in ((4, 0), (4, 7), (5, 3)):
        shares = deal(offsets, n, cap)
        assert sorted(o for theirs, _ in shares for o in theirs) == offsets
        assert sum(c for _, c in shares) == cap


def test_auto_workers_plan_a_rate_cell_by_rate_times_output_tokens() -> None:
    busy = RateLoad(500, 256)  # 128,000 events/s: 4 processes of 35,000
    plan = plan_workers(AUTO, [1, 2], cores=16, rates=[RateLoad(1, 256), busy])
    assert plan.count == 4 and plan.auto
    assert "rate 500 requests/s × 256 output tokens = 128,000 events/s" in plan.why, plan.why
    capped = RateLoad(500, 256, cap=8)  # at most 8 streams × 250 tok/s = 2,000 events/s
    assert capped.events == 2000 and "capped at 8 in flight" in capped.words()
    assert plan_workers(AUTO, [1], cores=16, rates=[capped]).count == 1
    assert rate_shards(plan, RateLoad(1, 256)) == 1  # a slow cell stays in the parent
    assert rate_shards(plan, busy) == 4
    explicit = plan_workers(3, [1], cores=16)
    assert rate_shards(explicit, RateLoad(1, 4)) == 3
    assert rate_shards(explicit, RateLoad(50, 4, cap=2)) == 2  # never more than the cap
    assert rate_shards(None, busy) == 1


def test_the_plan_says_how_many_workers_a_rate_needs(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=100)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", *BASE, "--rate", "1,500",
                  "--rate-output", "256", "--max-output", "256", "--workers", "auto")
    assert res.returncode == 0, res.stderr
    want = min(4, max(1, host_cores() - 1))
    line = next(t for t in res.stderr.splitlines() if t.startswith("Workers:"))
    assert line.startswith(f"Workers: {want} (auto: rate 500 requests/s × 256 output tokens = "
                           "128,000 events/s, one process per 35,000"), line


def test_a_record_from_another_clock_keeps_its_scheduled_time() -> None:
    r = RequestRecord(RATE, 128, 0, "x-w1-0", PURPOSE_ARRIVAL, 0, send_ns=1_000, end_ns=5_000,
                      prompt_tokens=128, cached_tokens=0, finish_reason="length", error=None,
                      cancelled=False, chunk_ns=np.array([2_000], dtype=np.int64),
                      chunk_tokens=np.array([1], dtype=np.int64), scheduled_ns=900)
    moved = shift_record(r, -700)
    assert (moved.send_ns, moved.end_ns, moved.scheduled_ns) == (300, 4_300, 200)
    assert moved.send_ns - moved.scheduled_ns == r.send_ns - r.scheduled_ns


# -- through `bench run` against the reference server ----------------------------------


def collect(srv, out: Path, *extra: str):
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *BASE, *extra,
                  timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return read_run(out)


def rate_rows(run) -> tuple[dict, list[dict]]:
    """The rate cell's row and its arrival requests."""
    (cell,) = [c for c in run.cells.to_pylist() if c["phase"] == RATE]
    rows = [r for r in run.requests.to_pylist() if r["phase"] == RATE
            and r["purpose"] == PURPOSE_ARRIVAL]
    return cell, rows


def offsets_of(cell: dict, rows: list[dict]) -> list[int]:
    return sorted(r["scheduled_ns"] - cell["window_start_ns"] for r in rows)


def check_against_log(srv, run, cell: dict, rows: list[dict]) -> None:
    """Every request reached the server once, at or after its scheduled time;
    the cell is Valid unless the builder's figures say the load was not delivered."""
    truth = srv.truth_by_id(min_records=len(rows))
    assert len({r["request_id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["request_id"] in truth, r["request_id"]
        assert truth[r["request_id"]]["recv_ns"] >= r["scheduled_ns"] and r["send_ns"] >= r["scheduled_ns"]
    (built,) = rate_cells(run.cells, run.requests)
    assert built.status == (LOAD_NOT_DELIVERED if built.load_problems else VALID), built.reason
    assert cell["status"] == built.status


def test_two_workers_send_the_schedule_one_process_sends(refserver, tmp_path) -> None:
    got = {}
    for workers in ("1", "2"):
        srv = refserver(tokens_per_s=2000, ttft_ms=1)
        run = collect(srv, tmp_path / f"w{workers}", "--rate", "50", "--workers", workers)
        cell, rows = rate_rows(run)
        check_against_log(srv, run, cell, rows)
        got[workers] = (cell, rows)
    one, two = got["1"], got["2"]
    # the same schedule, from the same seed: the one the builder computes again
    window_ns = two[0]["window_end_ns"] - two[0]["window_start_ns"]
    want = cell_schedule(parse_process("poisson"), Cell(RATE, 128, 0, rate=50.0), window_ns, int(SEED))
    assert offsets_of(*one) == offsets_of(*two) == want.tolist()
    assert len(want) > 60  # 50/s over 2 s
    assert {shard_of(r["request_id"]) for r in one[1]} == {"parent"}
    assert {shard_of(r["request_id"]) for r in two[1]} == {"w1", "w2"}
    # request i from process i mod 2
    assert all(shard_of(r["request_id"]) == f"w{1 + r['stream_index'] % 2}" for r in two[1])
    assert (one[0]["processes"], one[0]["hosts"]) == (1, 1)
    assert (two[0]["processes"], two[0]["hosts"]) == (2, 1)


def test_a_rate_shard_that_dies_fails_the_cell_naming_it(refserver, tmp_path) -> None:
    # the rate cell's 20th arrival is marked: by then both shards are sending
    srv = refserver(tokens_per_s=2000, ttft_ms=1, inject=[{"cell": [RATE, 128, 0], "at": 20,
                                                            "do": "mark"}])
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bench.cli import main; sys.exit(main())",
         "run", "--base-url", srv.base_url, "--out", str(out), *BASE, "--duration", "10",
         "--rate", "50", "--workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        srv.wait_arrival((RATE, 128, 0), 20)
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
    cells = {c["phase"]: c for c in run.cells.to_pylist()}
    assert cells["decode"]["status"] not in ("error", "pending")  # measured before, kept
    cell = cells[RATE]
    assert cell["status"] == "error"
    dead = re.search(rf"shard ([12]) \(pid {pids[0]}\) died \(killed by SIGKILL\)", cell["reason"])
    assert dead, cell["reason"]
    # the other shard was cancelled at once (not at the window's end) and its records kept
    _, rows = rate_rows(run)
    assert f"w{3 - int(dead[1])}" in {shard_of(r["request_id"]) for r in rows}
    assert max(r["send_ns"] for r in rows) < cell["window_end_ns"]
    assert "Traceback" not in stderr


def test_two_hosts_send_one_schedule_on_shard_0s_clock(refserver, tmp_path) -> None:
    """--shard 0/2 on this host, shard 1's clock 1,234 s ahead: each request's
    scheduled time comes back on shard 0's clock, so the server saw every
    request at or after it and the schedule is the one the seed gives."""
    srv = refserver(tokens_per_s=2000, ttft_ms=1)
    out, port = tmp_path / "run", free_port()
    common = ["--base-url", srv.base_url, *BASE, "--rate", "50", "--coordinator",
              f"127.0.0.1:{port}", "--join-timeout", "300"]
    coord = Bench(["--out", str(out), "--shard", "0/2", *common])
    shard = None
    try:
        coord.wait_line("waiting for shards 1..1 of 2")
        # The skew is a patched time module: the kernel's timerfd (bench/core/duetimer.py) would
        # wait on the real clock, so that shard waits for due times by the module's clock instead.
        shard = Bench(["--shard", "1/2", *common], SKEW_NS,
                      patch="import bench.core.duetimer as d; d._TIMERFD = None")
        assert coord.wait() == 0, coord.stderr
        assert shard.wait() == 0, shard.stderr
    finally:
        kill_running(coord, shard)
    run = read_run(out)
    cell, rows = rate_rows(run)
    check_against_log(srv, run, cell, rows)
    window_ns = cell["window_end_ns"] - cell["window_start_ns"]
    want = cell_schedule(parse_process("poisson"), Cell(RATE, 128, 0, rate=50.0), window_ns, int(SEED))
    assert offsets_of(cell, rows) == want.tolist()
    assert {shard_of(r["request_id"]) for r in rows} == {"w0", "w1"}
    assert (cell["processes"], cell["hosts"]) == (2, 2)
    assert re.search(r"2 hosts: .* within ±\d+ µs", cell["reason"]), cell["reason"]
    # clock_offsets.parquet holds decode cells' rows only: the rate cell's bound is in its reason
    assert {c["phase"] for c in run.clock_offsets.to_pylist()} == {"decode"}
