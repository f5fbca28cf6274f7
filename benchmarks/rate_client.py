"""What a rate cell costs the client, and up to what rate one process keeps its schedule (issue 34, item 5).

    python benchmarks/rate_client.py            # ~80 s: CPU side by side, then 100, 300, 1,000 req/s
    python benchmarks/rate_client.py --rates 100,300,1000,2000 --window 2

Both parts run the real collector (`bench run`, the command line in a
subprocess, one process: no --workers) against the reference server
(tests/refserver, its own process), as benchmarks/scale_out_cpu.py does
against its stub, and sample the collector's CPU time every 50 ms
(/proc/PID/task/*/schedstat, scale_out_cpu.run_time_s); a cell's CPU is the
CPU between its window's start and end (interpolated between samples).

1. CPU per event, side by side in one run: one `bench run` measures a decode
   cell (C streams at the server's T tokens/s each: C × T events/s) and a rate
   cell offering C × T ÷ N requests/s of N output tokens each (the same event
   rate, about C in flight), one after the other in the same process against
   the same server. Per cell: collector CPU in the window ÷ the SSE events
   (chunks) it stamped in the window; and CPU from the window's start to the
   cell's end ÷ all its events (a decode cell parses its streams into records
   after the window, a rate cell as each request ends: in its window). Both
   ratios rate ÷ decode are printed.
2. Rate sweep: one `bench run --rate R1,R2,...` with 2-token outputs (so the
   schedule, not the stream, is what costs), each cell's achieved rate and
   send lag as the run page publishes them (site_builder.rate.rate_cells),
   and where p99 send lag first passes 1 ms.

Each part runs once per wait (--waits): `timerfd`, how the collector waits for a
request's due time on Linux (bench/core/duetimer.py), and `poll`, its fallback
where there is no timerfd (sleep to 2 ms short, then yield to the loop until due:
what every platform used before), so the two are compared in one run.

CPU time is the process's own whoever else ran, but on a loaded host the
timer loop's lag is not: say what else ran when quoting these figures. Prints
human lines, then one JSON line, last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.measure.rate_cells import LEAD_NS  # noqa: E402
from benchmarks.scale_out import REPO, collector_env  # noqa: E402
from benchmarks.scale_out_cpu import SAMPLE_S, cpu_at, run_time_s  # noqa: E402
from rundir.contract import DECODE, RATE, cell_key  # noqa: E402
from rundir.io import read_run  # noqa: E402
from site_builder.rate import rate_cells  # noqa: E402
from tests.refserver.harness import start_refserver  # noqa: E402
from tests.refserver.scenario import Scenario  # noqa: E402

LAG_GOAL_MS = 1.0


@dataclass
class CellCpu:
    """One cell's client cost: CPU seconds in its window over the events it stamped there."""

    phase: str
    rate_target: float | None
    window_s: float
    events: int
    requests: int
    cpu_s: float
    status: str
    reason: str | None = None
    all_events: int = 0  # every event of the cell's requests from the window's start on
    all_cpu_s: float = 0.0  # from the window's start to the cell's end (records made, drained)

    @property
    def us_per_event(self) -> float | None:
        return self.cpu_s / self.events * 1e6 if self.events else None

    @property
    def us_per_event_all(self) -> float | None:
        return self.all_cpu_s / self.all_events * 1e6 if self.all_events else None


@dataclass
class RatePoint:
    rate_target: float
    scheduled: int
    sent: int
    rate_achieved: float | None
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    status: str
    us_per_event: float | None
    cpu_ms_per_request: float | None


class Sampler(threading.Thread):
    """Every SAMPLE_S: (monotonic ns, CPU s) of one process."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples = pid, []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            cpu = run_time_s(self.pid)
            if cpu is not None:
                self.samples.append((time.monotonic_ns(), cpu))
            self._halt.wait(SAMPLE_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()


# How a request waits for its due time (bench/core/duetimer.py): the timerfd the
# collector uses on Linux, or the sleep-then-yield wait it falls back to elsewhere.
WAITS = {"timerfd": ["-m", "bench.cli"],
         "poll": ["-c", "import bench.core.duetimer as d; d._TIMERFD = None; "
                        "from bench.cli import main; main()"]}


def collect(base_url: str, out: Path, args: list[str], wait: str = "timerfd") -> list[tuple[int, float]]:
    """One `bench run` (one process) with the collector's CPU sampled; returns the samples."""
    cmd = [sys.executable, *WAITS[wait], "run", "--base-url", base_url, "--out", str(out),
           "--contexts", "128", "--no-prefill", "--warmup-stable", "0.2", "--server-wait", "5",
           "--gpu-telemetry", "off", "--arrivals", "poisson", "--arrival-seed", "7", *args]
    proc = subprocess.Popen(cmd, env=collector_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    sampler.stop()
    if proc.returncode not in (0, 3):
        tail = "\n".join(err.strip().splitlines()[-8:])
        raise SystemExit(f"bench run failed (exit {proc.returncode}):\n{tail}")
    return sampler.samples


def cell_cpu(run_dir: Path, samples: list[tuple[int, float]]) -> list[CellCpu]:
    """Each decode and rate cell's CPU in its window and the events stamped there; and
    from its window's start to its end (the next cell's window start less the rate
    loop's lead, else its last request's end) over all its events: a decode cell's
    streams are parsed into records after the window, a rate cell's as each ends."""
    run = read_run(run_dir)
    names = ["phase", "context", "concurrency", "prefix_reuse_target", "turn", "rate_target",
             "chunk_ns", "end_ns"]
    names = [n for n in names if n in run.requests.column_names]
    by_key: dict[tuple, list[dict]] = {}
    for r in run.requests.select(names).to_pylist():
        by_key.setdefault(cell_key(r), []).append(r)
    out = []
    cells = sorted((c for c in run.cells.to_pylist() if c["window_start_ns"] is not None),
                   key=lambda c: c["window_start_ns"])
    for n, c in enumerate(cells):
        if c["phase"] not in (DECODE, RATE):
            continue
        start, end = c["window_start_ns"], c["window_end_ns"]
        rows = by_key.get(cell_key(c), [])
        events = sum(start <= s <= end for r in rows for s in r["chunk_ns"] or [])
        done = (cells[n + 1]["window_start_ns"] - LEAD_NS - 1_000_000 if n + 1 < len(cells)
                else max(r["end_ns"] or end for r in rows))
        out.append(CellCpu(c["phase"], c.get("rate_target"), (end - start) / 1e9, events,
                           sum(any(start <= s <= end for s in r["chunk_ns"] or []) for r in rows),
                           cpu_at(samples, end) - cpu_at(samples, start), c["status"], c.get("reason"),
                           sum(s >= start for r in rows for s in r["chunk_ns"] or []),
                           cpu_at(samples, done) - cpu_at(samples, start)))
    return out


def side_by_side(tmp: Path, streams: int, tok_s: float, output: int, window: float,
                 wait: str = "timerfd") -> dict:
    """Part 1: a decode cell and a rate cell at the same event rate, in one `bench run`."""
    rate = streams * tok_s / output
    srv = start_refserver(Scenario(tokens_per_s=tok_s, ttft_ms=1), tmp / f"srv1-{wait}")
    try:
        samples = collect(srv.base_url, tmp / f"run1-{wait}", [
            "--concurrency", str(streams), "--max-output", "16000", "--duration", f"{window:g}",
            "--rate", f"{rate:g}", "--rate-output", str(output)], wait)
    finally:
        srv.stop()
    cells = cell_cpu(tmp / f"run1-{wait}", samples)
    decode = next(c for c in cells if c.phase == DECODE)
    rated = next(c for c in cells if c.phase == RATE)
    for c in (decode, rated):
        what = (f"decode, {streams} streams" if c.phase == DECODE
                else f"rate {c.rate_target:g} req/s x {output} tokens")
        print(f"  {what:34s} {c.events / c.window_s:8,.0f} events/s  {c.requests:5d} requests  "
              f"CPU {c.cpu_s:6.3f} s  {_f(c.us_per_event)} us/event  ({c.status})")
    for c in (decode, rated):
        print(f"  {c.phase:6s} to the cell's end: {c.all_events:6d} events  CPU {c.all_cpu_s:6.3f} s  "
              f"{_f(c.us_per_event_all)} us/event")
    ratio = (rated.us_per_event / decode.us_per_event
             if rated.us_per_event and decode.us_per_event else None)
    ratio_all = (rated.us_per_event_all / decode.us_per_event_all
                 if rated.us_per_event_all and decode.us_per_event_all else None)
    print(f"  rate / decode CPU per event: {_f(ratio, 2)} in the window, "
          f"{_f(ratio_all, 2)} to the cell's end")
    extra = None
    if decode.us_per_event is not None and rated.requests:
        extra = (rated.cpu_s - rated.events * decode.us_per_event / 1e6) / rated.requests * 1e3
        print(f"  the rate cell's CPU beyond its events at the decode cell's cost: {extra:.2f} ms a request")
    if rated.reason:
        print(f"  rate cell: {rated.reason}")
    return {"decode": asdict(decode) | {"us_per_event": decode.us_per_event,
                                        "us_per_event_all": decode.us_per_event_all},
            "rate": asdict(rated) | {"us_per_event": rated.us_per_event,
                                     "us_per_event_all": rated.us_per_event_all},
            "ratio": ratio, "ratio_to_end": ratio_all,
            "extra_ms_per_request": extra, "streams": streams, "tokens_per_s": tok_s, "output": output}


def sweep(tmp: Path, rates: list[float], window: float, wait: str = "timerfd") -> dict:
    """Part 2: achieved rate and send lag per offered rate, one process, 2-token outputs."""
    srv = start_refserver(Scenario(tokens_per_s=2000, ttft_ms=1), tmp / f"srv2-{wait}")
    try:
        samples = collect(srv.base_url, tmp / f"run2-{wait}", [
            "--concurrency", "1", "--max-output", "2", "--duration", f"{window:g}",
            "--rate", ",".join(f"{r:g}" for r in rates), "--rate-output", "2"], wait)
    finally:
        srv.stop()
    run = read_run(tmp / f"run2-{wait}")
    cpu = {c.rate_target: c for c in cell_cpu(tmp / f"run2-{wait}", samples) if c.phase == RATE}
    points = [RatePoint(c.rate_target, c.scheduled, c.sent, c.rate_achieved, c.send_lag_ms_p50,
                        c.send_lag_ms_p99, c.status, cpu[c.rate_target].us_per_event,
                        cpu[c.rate_target].cpu_s / max(1, cpu[c.rate_target].requests) * 1e3)
              for c in rate_cells(run.cells, run.requests)]
    holds = None
    for p in points:
        print(f"  offered {p.rate_target:6g} req/s: sent {p.sent:5d} of {p.scheduled:5d}, achieved "
              f"{_f(p.rate_achieved, 1)} req/s, send lag p50 {_f(p.lag_p50_ms, 3)} ms, p99 "
              f"{_f(p.lag_p99_ms, 3)} ms; CPU {_f(p.us_per_event)} us/event, "
              f"{_f(p.cpu_ms_per_request, 2)} ms/request ({p.status})")
        ok = p.lag_p99_ms is not None and p.lag_p99_ms <= LAG_GOAL_MS and p.sent >= 0.99 * p.scheduled
        if ok and holds is None or ok and holds is not None and p.rate_target > holds:
            holds = p.rate_target
    fails = [p.rate_target for p in points if p.lag_p99_ms is None or p.lag_p99_ms > LAG_GOAL_MS]
    print(f"  p99 send lag <= {LAG_GOAL_MS:g} ms up to {_f(holds, 0)} req/s"
          + (f"; first above at {min(fails):g} req/s" if fails else "; held at every rate tried"))
    return {"points": [asdict(p) for p in points], "holds_to": holds,
            "first_fail": min(fails) if fails else None, "window_s": window}


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=4, help="decode cell's streams (part 1)")
    ap.add_argument("--tok-s", type=float, default=500, help="server tokens/s per stream (part 1)")
    ap.add_argument("--output", type=int, default=64, help="rate cell's output tokens (part 1)")
    ap.add_argument("--rates", default="100,300,1000", help="offered rates of the sweep (part 2)")
    ap.add_argument("--window", type=float, default=2.0, help="each cell's window, seconds")
    ap.add_argument("--waits", default="timerfd,poll",
                    help="how requests wait for their due time, each measured in turn: timerfd "
                         "(the collector's on Linux), poll (its fallback elsewhere)")
    args = ap.parse_args()
    waits = args.waits.split(",")
    if not set(waits) <= set(WAITS):
        ap.error(f"--waits: expected some of {', '.join(WAITS)}, got {args.waits}")
    rates = [float(x) for x in args.rates.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} at the start; {os.cpu_count()} cores; "
          f"Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="rate-client-") as d:
        tmp = Path(d)
        one, two = {}, {}
        for wait in waits:
            print(f"[{wait}] CPU per event, decode cell and rate cell in one bench run:")
            one[wait] = side_by_side(tmp, args.streams, args.tok_s, args.output, args.window, wait)
        for wait in waits:
            print(f"[{wait}] rate sweep, one process, {args.window:g} s windows, 2-token outputs:")
            two[wait] = sweep(tmp, rates, args.window, wait)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} at the end")
    print(json.dumps({"side_by_side": one, "sweep": two, "load_end": load}))


if __name__ == "__main__":
    main()
