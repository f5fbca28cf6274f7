"""How the collector's event rate scales with `bench run --workers N` (issue 22).

For each worker count the real collector (`bench run --workers k`, the
command line in a subprocess) measures one decode cell against the
multi-process stub (benchmarks/_stub_server.py), which streams pre-built
frames at a fixed pace and logs when it handed each frame to the kernel.
From the run directory and the stub's send log:

  events_per_s   token events the collector recorded inside the window ÷ the window
  offered        events the stub sent inside the window ÷ the window
  p99_error_ms   99th percentile of (the collector's stamp − the stub's send ns)
                 over the window's events (both CLOCK_MONOTONIC on this host)
  lost_events    events missing from the records: a request the stub streamed
                 with no record, or a gap in a record's token numbers (the
                 frames carry the cumulative count); 0 means the merged
                 records hold every event each stream received
  on time        of those, the events stamped within 1 ms of their send: a
                 process that falls behind still records every event, late
                 (its reads merge many), so this is where it shows
  unread_at_cut  frames the stub sent before the client closed the stream
                 (the window's end) that it never read (informative)

Scaling efficiency: events/s at the most workers ÷ (workers × events/s at 1),
of events recorded and of events on time. Recorded events/s can never pass
what the stub offers, so it measures the client only where the pace is
above what one process records; on time it shows as soon as one process
lags. Prints human lines, then one JSON line, last.

    python benchmarks/scale_out.py --quick   # workers 1, 2: 256 streams × 2,000 tok/s, ~1 min
    python benchmarks/scale_out.py           # workers 1, 2, 4, 8, 16 (≤ cores), 16,384 streams
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.core.workers import host_cores  # noqa: E402
from benchmarks._stub_server import Sent, StubServer  # noqa: E402
from rundir.contract import PURPOSE_MEASURE  # noqa: E402
from rundir.io import read_run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ON_TIME_NS = 1_000_000  # an event stamped within 1 ms of its send is on time


@dataclass
class Trial:
    workers: int
    streams: int
    window_s: float
    events: int
    on_time: int  # of `events`, those stamped within ON_TIME_NS of their send
    offered: int
    p99_error_ms: float | None
    p50_error_ms: float | None
    lost: int
    unread_at_cut: int
    status: str
    client_bound: bool | None
    reason: str | None = None

    @property
    def events_per_s(self) -> float:
        return self.events / self.window_s

    @property
    def on_time_per_s(self) -> float:
        return self.on_time / self.window_s

    def line(self) -> str:
        p99 = "-" if self.p99_error_ms is None else f"{self.p99_error_ms:.3f}"
        p50 = "-" if self.p50_error_ms is None else f"{self.p50_error_ms:.3f}"
        return (f"workers {self.workers:>2}: {self.events_per_s:>10,.0f} events/s recorded, "
                f"{self.on_time_per_s:,.0f} within {ON_TIME_NS / 1e6:g} ms "
                f"(stub sent {self.offered / self.window_s:,.0f}/s), stamp error p50 {p50} ms "
                f"p99 {p99} ms, lost {self.lost}, unread at the cut {self.unread_at_cut:,}, "
                f"cell {self.status}{' client-bound' if self.client_bound else ''}"
                + (f" ({self.reason})" if self.reason else ""))


def analyse(run_dir: Path, sent: dict[str, Sent], workers: int) -> Trial:
    """The trial's figures from its run directory and the stub's send log."""
    run = read_run(run_dir)
    cell = run.cells.to_pylist()[0]
    start, end = cell["window_start_ns"], cell["window_end_ns"]
    rows = run.requests.to_pylist()
    tag = run.info.run_id
    mine = {rid: s for rid, s in sent.items() if rid.startswith(tag)}
    by_id = {r["request_id"]: r for r in rows}
    lost = sum(len(s.times) for rid, s in mine.items() if rid not in by_id and len(s.times))
    errors: list[np.ndarray] = []
    events = offered = unread = 0
    for rid, s in mine.items():
        times = np.frombuffer(s.times, dtype=np.int64)
        offered += int(((times >= start) & (times < end)).sum())
        r = by_id.get(rid)
        if r is None:
            continue
        tokens = np.asarray(r["chunk_tokens"], dtype=np.int64)
        stamps = np.asarray(r["chunk_ns"], dtype=np.int64)
        got = len(tokens)
        if got and not np.array_equal(tokens, np.arange(1, got + 1)):
            lost += int(tokens[-1]) - got  # a gap: events between received ones are missing
        before_close = int((times < (r["end_ns"] or 0)).sum())  # sent before the client closed
        unread += max(0, before_close - (int(tokens[-1]) if got else 0))
        if r["purpose"] != PURPOSE_MEASURE or not got:
            continue
        inside = (stamps >= start) & (stamps <= end)
        events += int(inside.sum())
        k = tokens[inside] - 1
        ok = k < len(times)
        errors.append(stamps[inside][ok] - times[k[ok]])
    err = np.concatenate(errors) if errors else np.zeros(0, dtype=np.int64)
    p99 = float(np.percentile(err, 99)) / 1e6 if len(err) else None
    p50 = float(np.percentile(err, 50)) / 1e6 if len(err) else None
    on_time = int((err <= ON_TIME_NS).sum())
    return Trial(workers, cell["concurrency"], (end - start) / 1e9, events, on_time, offered,
                 p99, p50,
                 lost, unread, cell["status"], cell["client_bound"], cell["reason"])


def collector_cmd(base_url: str, run_dir: Path, duration: float, streams: int,
                  workers: int) -> list[str]:
    """`bench run --workers k` for one decode cell of `streams` streams (shared
    with benchmarks/scale_out_cpu.py, so both measure the same command)."""
    return [sys.executable, "-m", "bench.cli", "run", "--base-url", base_url,
            "--out", str(run_dir), "--duration", str(duration), "--warmup-stable", "1",
            "--no-prefill", "--server-wait", "5", "--contexts", "256",
            "--max-output", "100000", "--concurrency", str(streams), "--workers", str(workers),
            "--gpu-telemetry", "off", "--warmup-timeout", "300"]


def collector_env() -> dict[str, str]:
    """The environment with this checkout first on the import path."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def trial(workers: int, streams: int, tok_per_s: float, duration: float, stub_procs: int,
          tmp: Path) -> Trial:
    """One `bench run --workers k` against a fresh stub."""
    here = tmp / f"w{workers}"
    run_dir = here / "run"
    with StubServer(here / "stub", procs=stub_procs, tok_per_s=tok_per_s) as stub:
        cmd = collector_cmd(stub.base_url, run_dir, duration, streams, workers)
        res = subprocess.run(cmd, env=collector_env(), capture_output=True, text=True, cwd=REPO)
        sent = stub.stop()
    if res.returncode not in (0, 3):
        tail = "\n".join(res.stderr.strip().splitlines()[-8:])
        raise SystemExit(f"bench run --workers {workers} failed (exit {res.returncode}):\n{tail}")
    return analyse(run_dir, sent, workers)


def _drain_reader(url: str, streams: int, seconds: float) -> None:
    """Open `streams` streams and read them, discarding, for `seconds`
    (the stub's capacity: a reader that costs next to nothing an event)."""
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"messages": [{"role": "user", "content": "x"}],
                       "max_tokens": 1_000_000, "stream": True}).encode()
    socks = []
    for i in range(streams):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: cap-{i}"
                     f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        sock.setblocking(False)
        socks.append(sock)
    sel = selectors.DefaultSelector()
    for sock in socks:
        sel.register(sock, selectors.EVENT_READ)
    buf = bytearray(1 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key, _ in sel.select(0.1):
            try:
                key.fileobj.recv_into(buf)  # type: ignore[union-attr]
            except BlockingIOError:
                pass
    for sock in socks:
        sock.close()


def stub_capacity(procs: int, streams: int, pace: float, tmp: Path, seconds: float = 4.0) -> float:
    """Events a second the stub's `procs` processes send to a reader that keeps
    up, at `pace` a stream (1e6: as fast as it can, MAX_BATCH frames a write)."""
    with StubServer(tmp / f"cap{procs}", procs=procs, tok_per_s=pace) as stub:
        _drain_reader(stub.base_url, streams, seconds)
        sent = stub.stop()
    times = np.concatenate([np.frombuffer(s.times, dtype=np.int64) for s in sent.values()])
    lo = times.min() + 1_000_000_000  # the first second: connecting, warming
    hi = times.max()
    return float(((times >= lo) & (times < hi)).sum()) / ((hi - lo) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="workers 1 and 2, 256 streams")
    ap.add_argument("--workers", default=None, help="e.g. 1,2,4 (default: by --quick)")
    ap.add_argument("--streams", type=int, default=None)
    ap.add_argument("--tok-per-s", type=float, default=None, help="the stub's pace, per stream")
    ap.add_argument("--duration", type=float, default=None, help="window (s)")
    ap.add_argument("--stub-procs", type=int, default=None)
    ap.add_argument("--stub-capacity", default=None, metavar="K,K",
                    help="only measure what the stub sends with K processes (e.g. 1,2)")
    a = ap.parse_args()
    cores = host_cores()
    if a.stub_capacity:
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="stub-capacity-") as tmp:
            rates = {int(k): stub_capacity(int(k), a.streams or 256, a.tok_per_s or 1e6, Path(tmp))
                     for k in a.stub_capacity.split(",")}
        for k, rate in rates.items():
            print(f"stub, {k} processes, {a.streams or 256:,} streams at {a.tok_per_s or 1e6:g} "
                  f"tok/s: {rate:,.0f} events/s sent to a discarding reader "
                  f"({cores} cores, load average {load:.2f})")
        print(json.dumps({"stub_procs": list(rates), "events_per_s": [round(r) for r in
                                                                     rates.values()]}))
        return
    if a.quick:
        workers, streams, pace, duration = [1, 2], 256, 2000.0, 4.0
    else:
        workers = [w for w in (1, 2, 4, 8, 16) if w <= max(2, cores)]
        streams, pace, duration = 16_384, 64.0, 10.0
    workers = [int(w) for w in a.workers.split(",")] if a.workers else workers
    streams = a.streams or streams
    pace = a.tok_per_s or pace
    duration = a.duration or duration
    stub_procs = a.stub_procs or max(1, min(16, cores // 2))
    load = os.getloadavg()
    print(f"host: {cores} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"stub: {stub_procs} processes, {streams:,} streams × {pace:g} tok/s = "
          f"{streams * pace:,.0f} events/s offered; window {duration:g} s")
    trials = []
    with tempfile.TemporaryDirectory(prefix="scale-out-") as tmp:
        for w in workers:
            t = trial(w, streams, pace, duration, stub_procs, Path(tmp))
            print(t.line(), flush=True)
            trials.append(t)
    one, most = trials[0], trials[-1]
    # against one worker only: a list without 1 has no baseline to scale from
    base = one.workers == 1 and most.workers > 1
    eff = (most.events_per_s / (most.workers * one.events_per_s)
           if base and one.events_per_s else None)
    on_time_eff = (most.on_time_per_s / (most.workers * one.on_time_per_s)
                   if base and one.on_time_per_s else None)
    load = os.getloadavg()
    print(f"scaling efficiency at {most.workers} workers: "
          f"{'-' if eff is None else f'{eff:.2f}'} (events recorded), "
          f"{'-' if on_time_eff is None else f'{on_time_eff:.2f}'} (events on time); "
          f"load average after {load[0]:.2f}")
    print(json.dumps({
        "workers": [t.workers for t in trials],
        "events_per_s": [round(t.events_per_s) for t in trials],
        "scaling_efficiency": None if eff is None else round(eff, 3),
        "streams": streams,
        "p99_error_ms": None if most.p99_error_ms is None else round(most.p99_error_ms, 4),
        "p99_error_ms_by_workers": [None if t.p99_error_ms is None else round(t.p99_error_ms, 4)
                                    for t in trials],
        "lost_events": sum(t.lost for t in trials),
        "on_time_events_per_s": [round(t.on_time_per_s) for t in trials],
        "on_time_scaling_efficiency": None if on_time_eff is None else round(on_time_eff, 3),
        "offered_events_per_s": round(streams * pace),
        "stub_sent_per_s": [round(t.offered / t.window_s) for t in trials],
        "stub_procs": stub_procs,
        "cores": cores,
        "load_average": round(load[0], 2),
    }))


if __name__ == "__main__":
    main()
