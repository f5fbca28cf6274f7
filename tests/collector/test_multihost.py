"""`bench run --shard i/N --coordinator HOST:PORT`: two "hosts" driving one run.

Two processes on this machine stand in for two hosts: shard 0 (the
coordinator) and shard 1, which joins it over loopback TCP. Shard 1 reads a
clock 1,234.567890123 s ahead of the host's CLOCK_MONOTONIC (its time module
is patched before the collector is imported), as another host's clock
would be, so the offset measurement, the window's conversion and the
records' conversion are all exercised. Against the reference server's truth
log: a start barrier, one run directory with every request once, both
shards' streams cut at the same window edges, figures as close to the truth
as one process's, an offset within its stated bound, and a shard that dies
failing its cell with a reason. Faults land by request count, never by sleeping.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.distributed.clocksync import Exchange, estimate, over_cell
from rundir.contract import CLOCK_OFFSETS_FILE, PURPOSE_PREFIX_FILL, ContractError
from rundir.io import read_run
from tests.collector.test_workers import FAST, MEDIANS, check_rows, figures
from tests.conftest import REPO
from tests.refserver.harness import refserver_fixture  # noqa: F401

SKEW_NS = 1_234_567_890_123  # shard 1's clock − the host's
SECRET = "test-shard-secret-0123456789abcdef"  # $BENCH_SHARD_SECRET of every host here
# BENCH_TEST_PATCH: Python run before the collector starts (a fault injected by message)
_SKEWED = ("import os, sys, time; o = int(os.environ['BENCH_TEST_SKEW_NS']); "
           "m, f = time.monotonic_ns, time.monotonic; "
           "time.monotonic_ns = lambda: m() + o; time.monotonic = lambda: f() + o / 1e9; "
           "exec(os.environ.get('BENCH_TEST_PATCH', '')); "
           "from bench.cli import main; sys.exit(main())")


class Bench:
    """A `bench run` process whose stderr is read as it comes."""

    def __init__(self, args: list[str], skew_ns: int = 0, secret: str | None = SECRET,
                 patch: str = "") -> None:
        env = dict(os.environ, BENCH_TEST_SKEW_NS=str(skew_ns), BENCH_TEST_PATCH=patch,
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("BENCH_SHARD_SECRET", None)
        if secret is not None:
            env["BENCH_SHARD_SECRET"] = secret
        self.proc = subprocess.Popen([sys.executable, "-c", _SKEWED, "run", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._new: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    def wait_line(self, text: str, timeout: float = 120.0) -> str:
        while True:
            line = self._new.get(timeout=timeout)
            assert line is not None, "".join(self.lines)
            if text in line:
                return line

    def wait(self, timeout: float = 300.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    @property
    def stderr(self) -> str:
        return "".join(self.lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_running(*benches: Bench | None) -> None:
    """End what a test started and is still running (a failed assertion's leftovers)."""
    for b in benches:
        if b is not None and b.proc.poll() is None:
            b.proc.kill()


def hosts(srv, out: Path, port: int, *extra: str) -> tuple[Bench, list[str]]:
    common = ["--base-url", srv.base_url, *FAST, "--concurrency", "2,4",
              "--coordinator", f"127.0.0.1:{port}", "--join-timeout", "300", *extra]
    return Bench(["--out", str(out), "--shard", "0/2", *common]), ["--shard", "1/2", *common]


# -- the clock arithmetic ------------------------------------------------------


def test_the_offset_is_the_shortest_round_trips_within_half_of_it() -> None:
    true = 5_000_000_000  # shard − coordinator
    # out 30 µs, back 10 µs, 2 µs turnaround: the estimate is off by 10 µs, within 21 µs
    fast = Exchange(0, 30_000 + true, 32_000 + true, 42_000)
    slow = Exchange(100_000, 100_000 + 900_000 + true, 100_000 + 901_000 + true, 1_101_000)
    got = estimate([slow, fast, slow])
    assert (got.rtt_ns, got.exchanges) == (40_000, 3)
    assert abs(got.offset_ns - true) <= got.uncertainty_ns == 20_001
    assert abs(estimate([slow]).offset_ns - true) <= estimate([slow]).uncertainty_ns
    # a cell: the bound also covers the move measured after it
    after = Exchange(0, 30_000 + true + 50_000, 32_000 + true + 50_000, 42_000)
    cell = over_cell(got, estimate([after]))
    assert cell.offset_ns == got.offset_ns and cell.drift_ns == 50_000
    assert cell.uncertainty_ns == 50_000 + 20_001
    assert over_cell(got, None).drift_ns is None


# -- two hosts, one run ----------------------------------------------------------


def test_two_hosts_make_one_run(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    coord, shard_args = hosts(srv, out, free_port())
    shard = None
    try:
        coord.wait_line("waiting for shards 1..1 of 2")
        assert not srv.arrivals() and not srv.truth()  # the barrier: nothing sent yet
        shard = Bench(shard_args, SKEW_NS)
        assert coord.wait() == 0, coord.stderr
        assert shard.wait() == 0, shard.stderr
    finally:
        kill_running(coord, shard)
    joined = re.search(r"shard 1 joined \(.*\): clock offset ([+-][0-9.]+) s", coord.stderr)
    assert joined and abs(float(joined[1]) - SKEW_NS / 1e9) < 0.01, coord.stderr
    # every request once, from both hosts; each host's streams cut at the window's edges
    check_rows(srv, out, {"w0", "w1"})
    run = read_run(out)
    cells = run.cells.to_pylist()
    assert {c["status"] for c in cells} == {"valid"}, cells
    assert {(c["processes"], c["hosts"]) for c in cells} == {(2, 2)}  # one process on each host
    clocks = run.clock_offsets.to_pylist()
    assert sorted((c["concurrency"], c["shard"]) for c in clocks) == [(2, 1), (4, 1)]
    for c in clocks:
        print(f"cell {c['concurrency']}: offset {c['offset_ns']} ns (true {SKEW_NS}), "
              f"± {c['uncertainty_ns']} ns, rtt {c['rtt_ns']} ns, drift {c['drift_ns']} ns")
        assert abs(c["offset_ns"] - SKEW_NS) <= c["uncertainty_ns"] < 50_000_000
    for cell in cells:
        assert re.search(r"2 hosts: .* within ±\d+ µs \(clock_offsets.parquet\)", cell["reason"])
    for c, got in figures(srv, out).items():
        for name, (ours, truth) in got.items():
            print(f"{c} streams {name}: {ours:.4f} (truth {truth:.4f})")
            assert ours == pytest.approx(truth, rel=1e-2 if name in MEDIANS else 1e-3), (c, name)


def test_a_dead_host_fails_its_cell_naming_it(refserver, tmp_path) -> None:
    # decode 256×4 sends 4 warm-ups, then its streams: stream request 5 is held,
    # so the cell waits for readiness until shard 1 is killed
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300,
                    inject=[{"cell": ["decode", 256, 4], "at": 5, "do": "hold"}])
    out = tmp_path / "run"
    coord, shard_args = hosts(srv, out, free_port(), "--warmup-timeout", "300")
    shard = Bench(shard_args, SKEW_NS)
    try:
        srv.wait_arrival(("decode", 256, 4), 5)
        os.kill(shard.proc.pid, signal.SIGKILL)
        assert coord.wait() == 3, coord.stderr  # finished, with an Error cell
    finally:
        kill_running(coord, shard)
    run = read_run(out)
    cells = {c["concurrency"]: c for c in run.cells.to_pylist()}
    assert cells[2]["status"] == "valid"
    assert cells[4]["status"] == "error"
    assert re.search(r"shard 1 \(.+ at 127\.0\.0\.1:\d+\) died \(its connection closed\)",
                     cells[4]["reason"]), cells[4]["reason"]
    fills = [r for r in run.requests.to_pylist()
             if r["concurrency"] == 4 and r["purpose"] == PURPOSE_PREFIX_FILL]
    assert len(fills) == 4  # both hosts' warm-ups are kept with the failed cell
    clocks = {c["concurrency"]: c for c in run.clock_offsets.to_pylist()}
    assert clocks[2]["drift_ns"] is not None and clocks[4]["drift_ns"] is None


def test_a_host_that_joins_again_takes_the_next_cells(refserver, tmp_path) -> None:
    """Shard 1 is killed in the first cell (as a pod is); the coordinator says
    it waits for it, a new shard 1 joins (as a restarted pod would) and runs
    its part of the next cell under a new request-id prefix."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300,
                    inject=[{"cell": ["decode", 256, 2], "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    coord, shard_args = hosts(srv, out, free_port(), "--warmup-timeout", "300")
    first = Bench(shard_args, SKEW_NS)
    again = None
    try:
        srv.wait_arrival(("decode", 256, 2), 3)
        os.kill(first.proc.pid, signal.SIGKILL)
        coord.wait_line("coordinator: waiting for shard(s) 1 of 2 to join again")
        again = Bench(shard_args, SKEW_NS)
        assert coord.wait() == 3, coord.stderr  # finished, with an Error cell
        assert again.wait() == 0, again.stderr
    finally:
        kill_running(coord, first, again)
    cells = {c["concurrency"]: c for c in read_run(out).cells.to_pylist()}
    assert cells[2]["status"] == "error" and "shard 1" in cells[2]["reason"]
    assert cells[4]["status"] == "valid", cells[4]["reason"]
    ids = {r["request_id"].split("-")[-2] for r in read_run(out).requests.to_pylist()
           if r["concurrency"] == 4}
    assert ids == {"w0", "w1g2"}, ids


def test_a_shard_without_its_coordinator_fails_in_one_line(tmp_path) -> None:
    shard = Bench(["--base-url", "http://127.0.0.1:9", "--shard", "1/2", "--coordinator",
                   f"127.0.0.1:{free_port()}", "--join-timeout", "1"])
    assert shard.wait(60) == 1
    lines = shard.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0], shard.stderr
    shard = Bench(["--base-url", "http://127.0.0.1:9", "--shard", "1/2", "--out",
                   str(tmp_path / "x"), "--coordinator", "127.0.0.1:9"])
    assert shard.wait(60) == 2 and "--out: shard 0" in shard.stderr, shard.stderr
    shard = Bench(["--base-url", "http://127.0.0.1:9", "--shard", "2/2", "--coordinator", "h:1"])
    assert shard.wait(60) == 2 and "--shard" in shard.stderr, shard.stderr
    for index in ("0/2", "1/2"):  # refused on every host, not ignored on shard 0
        shard = Bench(["--base-url", "http://127.0.0.1:9", "--shard", index, "--coordinator",
                       "127.0.0.1:9", "--workers", "2"])
        assert shard.wait(60) == 2, shard.stderr
        lines = shard.stderr.strip().splitlines()
        assert len(lines) == 1 and "--workers with --shard" in lines[0], shard.stderr


def test_clock_rows_are_checked(tmp_path) -> None:
    import pyarrow as pa

    from rundir.checks import clock_offsets
    from rundir.contract import CLOCK_OFFSETS_SCHEMA, check_table

    row = dict(phase="decode", context=256, concurrency=2, shard=1, host="h", offset_ns=5,
               uncertainty_ns=10, rtt_ns=20, drift_ns=None)
    ok = pa.Table.from_pylist([row], CLOCK_OFFSETS_SCHEMA)
    assert clock_offsets(ok) is None
    with pytest.raises(ContractError, match="uncertainty_ns: expected >= 0"):
        check_table(CLOCK_OFFSETS_FILE, pa.Table.from_pylist([{**row, "uncertainty_ns": -1}],
                                                             CLOCK_OFFSETS_SCHEMA))
    with pytest.raises(ContractError, match="lists shard 1 twice"):
        check_table(CLOCK_OFFSETS_FILE, pa.Table.from_pylist([row, row], CLOCK_OFFSETS_SCHEMA))


def test_each_host_connects_from_its_own_source_address(tmp_path) -> None:
    """`--source-address` is a host's own: the coordinator's streams come
    from its address, shard 1's from the one on shard 1's command line (the
    multi-process stub logs each stream's peer)."""
    from benchmarks._stub_server import StubServer

    out = tmp_path / "run"
    port = free_port()
    with StubServer(tmp_path / "stub", procs=1, tok_per_s=200) as stub:
        common = ["--base-url", stub.base_url, "--duration", "1", "--warmup-stable", "0.5",
                  "--no-prefill", "--server-wait", "5", "--contexts", "256", "--max-output",
                  "100", "--gpu-telemetry", "off", "--concurrency", "4",
                  "--coordinator", f"127.0.0.1:{port}", "--join-timeout", "300"]
        coord = Bench(["--out", str(out), "--shard", "0/2", "--source-address", "127.0.0.2",
                       *common])
        shard = Bench(["--shard", "1/2", "--source-address", "127.0.0.3", *common])
        try:
            assert coord.wait() == 0, coord.stderr
            assert shard.wait() == 0, shard.stderr
        finally:
            kill_running(coord, shard)
        sent = stub.stop()
    assert "source addresses 127.0.0.3 (--source-address)" in shard.stderr
    peers = {(rid.split("-")[-2], s.peer) for rid, s in sent.items()
             if rid.startswith(read_run(out).info.run_id)}
    assert peers == {("w0", "127.0.0.2"), ("w1", "127.0.0.3")}, peers


# -- what a shard sends, checked; the waits, interruptible (faults by message) ----------

_ON_SEND = ("import bench.distributed.shard_worker as w\n"
            "_send = w.ShardWorker.send\n"
            "def send(self, m):\n"
            "    {body}\n"
            "    _send(self, m)\n"
            "w.ShardWorker.send = send\n")
# the shard's records of the window replaced by ints
BAD_DONE = _ON_SEND.format(body="m = ('done', [1, 2, 3], *m[2:]) if m[0] == 'done' else m")
# the shard announces a 3 GiB message where its records go, and sends 1 MiB of it
HUGE_DONE = _ON_SEND.format(body=(
    "if m[0] == 'done':\n"
    "        import contextlib; self.conn.sock.setblocking(True)\n"
    "        with contextlib.suppress(OSError):\n"
    "            self.conn.sock.sendall((3 << 30).to_bytes(8, 'big') + bytes(1 << 20))\n"
    "        return"))
# the window's records handed in under another request-id prefix than the shard's own
FOREIGN_DONE = _ON_SEND.format(body=(
    "m = ('done', [__import__('dataclasses').replace(r, request_id='stolen-' + r.request_id) "
    "for r in m[1]], *m[2:]) if m[0] == 'done' else m"))
# a message out of turn: "ready" where the warm-ups' records belong
OUT_OF_TURN = _ON_SEND.format(body="m = ('ready', 1) if m[0] == 'warmed' else m")
# every clock answer says the question arrived 1 s later than it did: the round trip
# looks 1 s longer, so the offset is known within ±0.5 s (and is 0.5 s off)
SLOW_CLOCK = _ON_SEND.format(
    body="m = ('clock', m[1], m[2] + 1_000_000_000, m[3]) if m[0] == 'clock' else m")


def one_cell(srv, out: Path, patch: str) -> tuple[Bench, Bench]:
    """Shard 0 and a shard 1 whose messages `patch` changes, over one decode cell."""
    coord, shard_args = hosts(srv, out, free_port(), "--concurrency", "2")
    coord.wait_line("waiting for shards 1..1 of 2")
    return coord, Bench(shard_args, SKEW_NS, patch=patch)


@pytest.mark.parametrize("patch, sent", [
    (BAD_DONE, "a 'done' message whose records[0] is an int, not a RequestRecord"),
    (HUGE_DONE, "a message of 3,221,225,472 bytes (at most 1,073,741,824 here)"),
    (FOREIGN_DONE, "a record 'stolen-"),
    (OUT_OF_TURN, "a 'ready' message where 'warmed' belongs"),
], ids=["bad-done", "huge-frame", "foreign-records", "out-of-turn"])
def test_a_shard_that_sends_what_a_shard_does_not_fails_its_cell(refserver, tmp_path, patch,
                                                                 sent) -> None:
    """Shard 1 proves the secret, then its `done` holds ints where records
    belong, or announces a 3 GiB message, or holds records under another
    prefix than its own, or it answers out of turn (before: a 62-line
    AttributeError traceback ended the run; the coordinator buffered what
    came; the records were stored; a RuntimeError traceback). The cell ends
    Error naming the shard and what it sent, in one line; the run finishes
    with its cell stored (exit 3)."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    coord, shard = one_cell(srv, out, patch)
    try:
        assert coord.wait() == 3, coord.stderr
        assert shard.wait() == 1, shard.stderr
    finally:
        kill_running(coord, shard)
    (cell,) = read_run(out).cells.to_pylist()
    assert cell["status"] == "error"
    assert re.match(r"shard 1 \(.+ at 127\.0\.0\.1:\d+\) was dropped: it sent ", cell["reason"])
    assert sent in cell["reason"], cell["reason"]
    assert "\n" not in cell["reason"] and "Traceback" not in coord.stderr + shard.stderr
    assert "lost the coordinator at" in shard.stderr, shard.stderr


def test_a_clock_bound_that_can_move_a_figure_flags_the_cell(refserver, tmp_path) -> None:
    """Shard 1's clock answers make its offset known only within ±0.5 s on a
    3 s window (before: the cell was Valid, the bound only in its reason):
    the cell is client-bound, its reason naming the figure and the shard."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    coord, shard = one_cell(srv, out, SLOW_CLOCK)
    try:
        assert coord.wait() == 0, coord.stderr
        assert shard.wait() == 0, shard.stderr
    finally:
        kill_running(coord, shard)
    (cell,) = read_run(out).cells.to_pylist()
    (clock,) = read_run(out).clock_offsets.to_pylist()
    assert 0.49e9 < clock["uncertainty_ns"] < 0.6e9, clock
    assert cell["client_bound"] is True, cell
    assert re.search(r"clock offsets: shard 1's is known within ±5\d\d ms, .*total tok/s could "
                     r"be off by up to [0-9.,]+, over half the 0\.1 it is shown to",
                     cell["reason"]), cell["reason"]


def test_ctrl_c_at_the_start_barrier_stops_at_once(refserver, tmp_path) -> None:
    """Waiting for shards (--join-timeout 600): the first Ctrl-C stops the
    run at once with the resume hint (before: ignored until the timeout)."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    coord, _ = hosts(srv, out, free_port(), "--join-timeout", "600")
    try:
        coord.wait_line("waiting for shards 1..1 of 2")
        coord.proc.send_signal(signal.SIGINT)
        assert coord.wait(120) == 1, coord.stderr
    finally:
        kill_running(coord)
    last = " ".join(coord.stderr.strip().splitlines()[-2:])
    assert re.search(rf"error: interrupted: .* continue with --resume {re.escape(str(out))}$",
                     last), coord.stderr
    assert "Traceback" not in coord.stderr
    assert {c["status"] for c in read_run(out).cells.to_pylist()} == {"pending"}


def test_ctrl_c_while_waiting_for_a_lost_shard_stops_at_once(refserver, tmp_path) -> None:
    """Shard 1 is killed in the first cell; while shard 0 waits for it to join
    again (--join-timeout 600), the first Ctrl-C stops the run at once with
    the resume hint, the first cell stored."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300,
                    inject=[{"cell": ["decode", 256, 2], "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    coord, shard_args = hosts(srv, out, free_port(), "--warmup-timeout", "300",
                              "--join-timeout", "600")
    shard = Bench(shard_args, SKEW_NS)
    try:
        srv.wait_arrival(("decode", 256, 2), 3)
        os.kill(shard.proc.pid, signal.SIGKILL)
        coord.wait_line("coordinator: waiting for shard(s) 1 of 2 to join again")
        coord.proc.send_signal(signal.SIGINT)
        assert coord.wait(120) == 1, coord.stderr
    finally:
        kill_running(coord, shard)
    last = " ".join(coord.stderr.strip().splitlines()[-2:])
    assert re.search(rf"error: interrupted: .* continue with --resume {re.escape(str(out))}$",
                     last), coord.stderr
    cells = {c["concurrency"]: c["status"] for c in read_run(out).cells.to_pylist()}
    assert cells == {2: "error", 4: "pending"}, cells


def test_a_shard_that_loses_its_coordinator_says_where_the_cells_are(refserver,
                                                                      tmp_path) -> None:
    """Shard 0 is killed mid-cell: shard 1 says, in one line, that it has no
    run directory and shard 0's keeps the cells it stored (before: "its run
    directory keeps what it measured", and a shard has none)."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300,
                    inject=[{"cell": ["decode", 256, 2], "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    coord, shard_args = hosts(srv, out, free_port(), "--warmup-timeout", "300")
    shard = Bench(shard_args, SKEW_NS)
    try:
        srv.wait_arrival(("decode", 256, 2), 3)
        os.kill(coord.proc.pid, signal.SIGKILL)
        assert shard.wait() == 1, shard.stderr
    finally:
        kill_running(coord, shard)
    lines = [line for line in shard.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, shard.stderr
    text = " ".join(shard.stderr.split())
    assert "its run directory keeps" not in text
    assert re.search(r"error: shard 1/2: lost the coordinator at 127\.0\.0\.1:\d+; this shard "
                     r"has no run directory: shard 0's keeps every cell it stored", text), text
