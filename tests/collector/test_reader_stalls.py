"""Item 8: a `--workers` process frozen inside the window (SIGSTOP for 1.5 s)
left its cell Valid and not client-bound. Its streams held a 1.5 s silence
and then every token that had waited, read at once under one stamp: a
stall the server never had, in the time-between-tokens distribution. The
cell's stall check looks for a silence of every stream (the other process
kept reading), the stamp bounds only for merges that move a published
figure (interior ones move none), and with a kernel stamp on every read the
delay rule is not asked; without one, the loop-lag histogram counted the
1.5 s stall as 0.5 s. Now each process's own silence ending in a backlog
makes the cell client-bound, naming the process (bench/measure/reader_stalls.py),
and the histogram keeps stalls up to 69 s.

Pure cases at the judging functions, and one real `bench run --workers 2`
whose worker is SIGSTOPped while a stream is known to be inside the window
(the reference server's mark after N tokens, never a sleep into a phase)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.measure.monitor import LoopLagMonitor, WindowDelays, delay_reason, shards_bound_reason
from bench.measure.reader_stalls import process_of, reader_stalls
from bench.measure.records import RequestRecord, records_table
from bench.measure.stamp_bounds import stamp_reason, table_bounds
from rundir import decode_checks, metrics
from rundir.io import read_run
from tests.collector.test_workers import shard_pids
from tests.conftest import REPO
from tests.refserver.harness import refserver_fixture  # noqa: F401

MS = 1_000_000
T0 = 10**12
S_NS, E_NS = T0 + 1000 * MS, T0 + 5000 * MS  # a 4 s window
GAP = 10 * MS  # 100 tok/s a stream


def stream(freeze: tuple[int, int] | None = None, backlog: bool = True) -> list[int]:
    """One stream's token stamps from T0 to past the window, 100 tok/s; with
    `freeze` (from, to) its reader stopped then: with `backlog` the tokens
    that came meanwhile are stamped when it resumed (one read); without, the
    server sent nothing then (a frozen server) and resumes at its own pace."""
    times = [T0 + k * GAP for k in range(600)]
    if freeze is None:
        return times
    a, b = freeze
    if backlog:
        return [b if a < t < b else t for t in times]
    return [t if t <= a else t + (b - a) for t in times if t + (b - a) < T0 + 600 * GAP]


def record(rid: str, stamps: list[int], index: int) -> RequestRecord:
    return RequestRecord(
        phase="decode", context=256, concurrency=4, request_id=rid, purpose="measure",
        stream_index=index, send_ns=T0 - 20 * MS, end_ns=E_NS, prompt_tokens=256,
        cached_tokens=256, finish_reason=None, error=None, cancelled=True,
        chunk_ns=np.array(stamps, dtype=np.int64),
        chunk_tokens=np.arange(1, len(stamps) + 1, dtype=np.int64),
        counting="usage_continuous")


FREEZE = (T0 + 2500 * MS, T0 + 4000 * MS)  # 1.5 s inside the window


def two_workers(frozen: str | None = "w1", backlog: bool = True) -> list[RequestRecord]:
    """Four streams, two per shard; shard `frozen`'s reader stops for 1.5 s."""
    out = []
    for i, shard in enumerate(["w1", "w2", "w1", "w2"]):
        freeze = FREEZE if shard == frozen else None
        out.append(record(f"run-{shard}-{i}", stream(freeze, backlog), i))
    return out


def kernel_delays() -> WindowDelays:
    """A shard whose every read carried a kernel stamp (the stamps judge alone)."""
    return WindowDelays(S_NS, E_NS, events=1000, kernel_events=1000)


def test_process_names() -> None:
    assert process_of("abc-w2-17") == "shard 2"
    assert process_of("abc-w2g3-17") == "shard 2 (start 3)"
    assert process_of("abc-17") == ""


def test_a_frozen_worker_makes_the_cell_client_bound_naming_it() -> None:
    table = records_table(two_workers())
    chunks = metrics.Chunks.from_table(table)
    # the cell's own stall check sees nothing: shard 2 kept reading throughout
    assert decode_checks.stall_problem(chunks, S_NS, E_NS) is None
    stamps = table_bounds(table, S_NS, E_NS)
    why = shards_bound_reason([(1, kernel_delays()), (2, kernel_delays())], 10.0, stamps)
    assert why is not None, stamps
    assert "stopped reading shard 1's 2 streams for 1.50 s from 1.5 s into the window" in why
    assert "shard 2" not in why
    assert "then read 320 tokens within 100 ms" in why  # 150 a stream at once, and 10 more each


def test_the_same_silence_without_a_backlog_is_not_the_collector() -> None:
    """A reader that merely got nothing (the server paused those streams)
    resumes at the server's pace: no backlog, not the collector's stall."""
    table = records_table(two_workers(backlog=False))
    assert stamp_reason(table_bounds(table, S_NS, E_NS)) is None
    steady = records_table(two_workers(frozen=None))
    assert stamp_reason(table_bounds(steady, S_NS, E_NS)) is None


def test_one_process_frozen_is_reported_where_the_stall_check_excuses_it() -> None:
    """One process reading every stream: the stall check leaves a silence
    ending in a backlog to the client-bound flag, which now says it."""
    records = [record(f"run-{i}", stream(FREEZE), i) for i in range(4)]
    table = records_table(records)
    assert decode_checks.stall_problem(metrics.Chunks.from_table(table), S_NS, E_NS) is None
    why = stamp_reason(table_bounds(table, S_NS, E_NS))
    assert why is not None and "stopped reading its 4 streams for 1.50 s" in why


def test_a_short_pause_is_not_a_stall() -> None:
    """Below the stall check's limit (1 s here) a reader's pause is left to
    the stamp bounds, which already judge what it moved."""
    short = (T0 + 2500 * MS, T0 + 2900 * MS)
    records = [record(f"run-w1-{i}", stream(short), i) for i in range(2)]
    chunks = metrics.Chunks.from_table(records_table(records))
    assert reader_stalls(chunks, [r.request_id for r in records], S_NS, E_NS) == []


def test_a_frozen_loop_counts_at_its_length_without_kernel_stamps() -> None:
    """The loop-lag timer fires 1.5 s late when the process resumes; the
    histogram counted that as 0.5 s (its last bucket), so in a 60 s window
    (`--repeats 2`) the delay rule let it pass. It now counts 1.34-1.61 s."""
    mon = LoopLagMonitor()
    start = 10**12
    for k in range(1, 30_000):  # a 2 ms timer for 60 s, on time
        mon.tick(start + k * 2 * MS, 0)
    mon.tick(start + 30 * 1000 * MS, 1500 * MS)
    d = mon.delays(start, start + 60_000 * MS)
    d.events, d.kernel_events = 6000, 0  # read-time stamps only
    assert d.stall_wait_quantile() > 700 * MS
    why = delay_reason(d, 10.0)
    assert why is not None and "event-loop stalls" in why


# -- a real worker, SIGSTOPped inside the window -------------------------------

CELL = ["--warmup-stable", "0.5", "--no-prefill", "--server-wait", "3", "--contexts", "256",
        "--concurrency", "4", "--workers", "2", "--duration", "8"]
FROZEN_S = 1.5


def run_with_a_frozen_worker(srv, out: Path) -> tuple[int, str, tuple[int, int], int]:
    """`bench run` whose shard processes are both up; once the cell's first
    measured stream (request 5) has sent 300 tokens (3 s at 100 tok/s: the
    window opened 0.5 s after every stream produced), one shard is SIGSTOPped
    for 1.5 s. Returns (exit status, stderr, (stopped, resumed) ns, its pid)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bench.cli import main; sys.exit(main())",
         "run", "--base-url", srv.base_url, "--out", str(out), *CELL],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        srv.wait_mark(("decode", 256, 4), 5)
        pid = shard_pids(proc.pid)[0]
        stopped = time.monotonic_ns()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(FROZEN_S)  # the freeze itself: its length, not a wait for a phase
        os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic_ns()
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, (stopped, resumed), pid


@pytest.mark.skipif(sys.platform != "linux", reason="SIGSTOP of a spawned worker")
def test_a_worker_frozen_inside_the_window_makes_its_cell_client_bound(refserver, tmp_path):
    for attempt in (1, 2):  # again only if the freeze missed the window (a starved host)
        srv = refserver(tokens_per_s=100, ttft_ms=20, inject=[
            {"cell": ["decode", 256, 4], "at": 5, "do": "mark", "after_tokens": 300}])
        out = tmp_path / f"run{attempt}"
        rc, err, (stopped, resumed), pid = run_with_a_frozen_worker(srv, out)
        assert rc == 0, err
        (cell,) = read_run(out).cells.to_pylist()
        inside = cell["window_start_ns"] < stopped and resumed < cell["window_end_ns"]
        if inside:
            break
    assert inside, "the freeze never fell inside the window"
    rows = [r for r in read_run(out).requests.to_pylist() if r["purpose"] == "measure"]
    frozen = {process_of(r["request_id"]) for r in rows
              if max(np.diff(r["chunk_ns"])) > 1000 * MS}
    assert len(frozen) == 1, frozen  # one shard's streams hold the silence, the other's do not
    (shard,) = frozen
    reason = cell["reason"] or ""
    print(cell["status"], cell["client_bound"], reason)
    assert cell["client_bound"], reason
    assert re.search(rf"stopped reading {shard}'s 2 streams for 1\.[4-9]\d s", reason), reason
    assert cell["status"] == "valid", reason  # its figures stand: the server ran the whole window


def test_a_long_window_does_not_hide_a_frozen_worker() -> None:
    """The stall check allows a server 5% of the window (1.5 s of 30 s); a
    worker frozen for 1.2 s of a 30 s window is still the collector's."""
    start, end = T0 + 1000 * MS, T0 + 31_000 * MS
    times = [T0 + k * GAP for k in range(3300)]
    freeze = (T0 + 10_000 * MS, T0 + 11_200 * MS)
    frozen = [freeze[1] if freeze[0] < t < freeze[1] else t for t in times]
    records = [record(f"run-w{1 + i % 2}-{i}", frozen if i % 2 == 0 else times, i)
               for i in range(4)]
    chunks = metrics.Chunks.from_table(records_table(records))
    (stall,) = reader_stalls(chunks, [r.request_id for r in records], start, end)
    assert "stopped reading shard 1's 2 streams for 1.20 s from 9.0 s" in stall.describe()
