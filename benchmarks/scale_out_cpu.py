"""CPU a million events, per collector process, and what it projects (issue 31, item 6).

benchmarks/scale_out.py measures events/s as workers grow; on a host with
fewer cores than stub + parent + workers that shows contention, not
scaling. What decides scaling is each process's CPU cost an event and
whether the parent's share stays small, and those can be measured on any
host: the CPU time a process spent is its own whoever else ran meanwhile.

For each (streams, workers) it starts the multi-process stub
(benchmarks/_stub_server.py) at a fixed total rate (`--rate` events/s
spread over the streams), runs the real `bench run --workers k` (the
command line of scale_out.py), and samples every 50 ms the CPU time of the
stub's processes, the collector's parent and each shard (the ns each
process's threads ran, /proc/PID/task/*/schedstat; where that is not
readable, user + system time in 10 ms ticks). From the run directory's window and records:

  cpu per million events   a process's CPU inside the window ÷ the events
                           (SSE chunks) it read inside the window, × 1e6;
                           the parent is charged with every event of the
                           cell (with workers 1 it reads them itself)
  parent share             parent CPU ÷ all collector CPU, in the window
  after the window         the parent's CPU from the window's end to its
                           exit (drain, merge, judge, store) a million
                           events recorded
  events per read          events ÷ distinct (stream, stamp) pairs: how much
                           the reads batch (kernel stamps: approximate)

Pinning (os.sched_setaffinity): the stub, and this script's sampler, on the
first `--stub-procs` cores; the parent on the next core and each shard on
one of its own when the host has that many cores, else the collector's
processes share the remaining cores. Projection (`project`): events/s on
C cores for the collector = min((C − 1) workers × 1e6 ÷ shard CPU a million
events, 1e6 ÷ parent CPU a million events), where a shard's cost is that of
an event read alone (`fit_cost`: CPU = a × reads + b × events over every
reader's window) and the parent's is a line in the shards (`fit_line`);
with the stub on the same
cores the shard term's denominator adds the stub's cost. Prints human
lines, then one JSON line, last.

    python benchmarks/scale_out_cpu.py --quick   # streams 64, 256 × workers 1, 2, ~1.5 min
    python benchmarks/scale_out_cpu.py           # streams 64, 256, 1024 × workers 1, 2, 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stub_server import StubServer  # noqa: E402
from benchmarks.scale_out import REPO, collector_cmd, collector_env  # noqa: E402
from rundir.io import read_run  # noqa: E402

SAMPLE_S = 0.05
_SHARD_ID = re.compile(r"-w(\d+)(?:g\d+)?-\d+$")  # request ids of shard k: <tag>-w<k>[g<n>]-<i>


# -- pure arithmetic -------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Which cores each part may run on; `own`: the parent and every shard
    have a core of their own (else they share `parent`'s set)."""

    stub: tuple[int, ...]
    parent: tuple[int, ...]
    shards: tuple[tuple[int, ...], ...]
    own: bool


def place(cores: Sequence[int], stub_cores: int, workers: int) -> Placement:
    """Stub on the first `stub_cores` cores (at least one core stays for the
    collector), then a core for the parent and one for each shard (workers 1:
    no shard, the parent reads) if there are enough, else all shared."""
    cores = sorted(cores)
    if len(cores) < 2:
        return Placement(tuple(cores), tuple(cores), tuple(tuple(cores) for _ in range(_shards(workers))),
                         False)
    s = max(1, min(stub_cores, len(cores) - 1))
    stub, rest = tuple(cores[:s]), cores[s:]
    n = _shards(workers)
    if len(rest) >= n + 1:
        return Placement(stub, (rest[0],), tuple((rest[1 + i],) for i in range(n)), True)
    return Placement(stub, tuple(rest), tuple(tuple(rest) for _ in range(n)), False)


def _shards(workers: int) -> int:
    return 0 if workers <= 1 else workers


def cpu_at(samples: Sequence[tuple[int, float]], t_ns: int) -> float:
    """A process's CPU seconds at `t_ns`, linear between the samples around it
    ((monotonic ns, cpu s), in time order); before the first: 0 if the process
    was not sampled yet (it did not exist), at or past the last: the last."""
    if not samples or t_ns < samples[0][0]:
        return 0.0
    for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        if t0 <= t_ns <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t_ns - t0) / (t1 - t0)
    return samples[-1][1]


def shard_index(request_id: str) -> int | None:
    """The shard k a request was sent from (`<tag>-w<k>[g<n>]-<i>`); None: the parent."""
    m = _SHARD_ID.search(request_id)
    return int(m.group(1)) if m else None


def per_million(cpu_s: float, events: int) -> float | None:
    """CPU seconds a million events (None: no events)."""
    return cpu_s * 1e6 / events if events else None


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys on xs, the slope clamped at ≥ 0 (a
    parent that gets cheaper with more shards is not extrapolated); one distinct
    x: its mean and slope 0."""
    if len(xs) != len(ys) or not xs:
        raise ValueError("fit_line: xs and ys must be non-empty and of one length")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx) if sxx else 0.0
    return my - slope * mx, slope


def fit_cost(reads: Sequence[int], events: Sequence[int],
             cpu_s: Sequence[float]) -> tuple[float, float]:
    """CPU = a × reads + b × events, least squares through the origin over the
    reader processes' windows: (a, b) in seconds. A reader's cost an event
    depends on how many events each read brings (a loaded host merges them);
    a and b do not, and a + b is the cost of an event read alone (the worst case)."""
    if not (len(reads) == len(events) == len(cpu_s)) or len(reads) < 2:
        raise ValueError("fit_cost: needs at least two (reads, events, cpu) of one length")
    srr = sum(r * r for r in reads)
    see = sum(e * e for e in events)
    sre = sum(r * e for r, e in zip(reads, events, strict=True))
    src = sum(r * c for r, c in zip(reads, cpu_s, strict=True))
    sec = sum(e * c for e, c in zip(events, cpu_s, strict=True))
    det = srr * see - sre * sre
    if det <= 0:
        raise ValueError("fit_cost: reads and events move together in every window; "
                         "need windows with different events a read")
    per_read, per_event = (src * see - sec * sre) / det, (sec * srr - src * sre) / det
    if per_read < 0 or per_event < 0:
        raise ValueError(f"fit_cost: the windows' events a read vary too little to split the cost "
                         f"({per_read * 1e6:.2f} µs a read, {per_event * 1e6:.2f} µs an event)")
    return per_read, per_event


@dataclass(frozen=True)
class Projection:
    """Events/s on `cores` cores: `worker_bound` with `workers` shards each on a
    core, `parent_bound` where the parent's one core is full; the lower wins."""

    cores: int
    workers: int
    worker_bound: float
    parent_bound: float
    events_per_s: float
    limit: str  # "workers" or "parent"


def project(cores: int, parent_per_m: tuple[float, float], shard_per_m: float,
            stub_per_m: float = 0.0) -> Projection:
    """Events/s on `cores` cores from CPU seconds a million events: the parent
    on one core, `cores` − 1 shards on the rest, each shard's cost independent
    of how many there are; the parent's is (intercept, slope) in the number of
    shards (`fit_line`). `stub_per_m` > 0 puts the stub on the shards' cores
    too (its processes spread over them like the shards)."""
    if cores < 2:
        raise ValueError(f"project: cores must be at least 2 (a parent and a shard), got {cores}")
    workers = cores - 1
    parent = parent_per_m[0] + parent_per_m[1] * workers
    if shard_per_m <= 0 or parent < 0 or stub_per_m < 0:
        raise ValueError("project: CPU a million events must be positive (shard) or ≥ 0 (parent, stub)")
    worker_bound = workers * 1e6 / (shard_per_m + stub_per_m)
    parent_bound = 1e6 / parent if parent else math.inf
    limit = "workers" if worker_bound <= parent_bound else "parent"
    return Projection(cores, workers, worker_bound, parent_bound, min(worker_bound, parent_bound), limit)


# -- measuring -------------------------------------------------------------------------


@dataclass
class Proc:
    pid: int
    role: str  # "parent", "shard", "stub", "other"
    born: float
    samples: list[tuple[int, float]] = field(default_factory=list)


class TreeSampler(threading.Thread):
    """Every SAMPLE_S: the CPU seconds of each process under the roots (the
    stub's and the collector's); pins each new shard to its core."""

    def __init__(self, stub_pid: int, placement: Placement) -> None:
        super().__init__(daemon=True)
        self.stub_pid, self.placement = stub_pid, placement
        self.collector_pid: int | None = None
        self.procs: dict[int, Proc] = {}
        self._handles: dict[int, psutil.Process] = {}
        self._pinned = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(SAMPLE_S)
        self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def sample(self) -> None:
        for root, role in ((self.stub_pid, "stub"), (self.collector_pid, "parent")):
            if root is None:
                continue
            try:
                top = self._handle(root)
                tree = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for p in tree:
                self._read(p, role if p.pid == root else ("stub" if role == "stub" else None))

    def _handle(self, pid: int) -> psutil.Process:
        if pid not in self._handles:
            self._handles[pid] = psutil.Process(pid)
        return self._handles[pid]

    def _read(self, p: psutil.Process, role: str | None) -> None:
        try:
            t = time.monotonic_ns()
            cpu = run_time_s(p.pid)
            if cpu is None:
                times = p.cpu_times()
                cpu = times.user + times.system
            if p.pid not in self.procs:
                self.procs[p.pid] = Proc(p.pid, role or _role(p), p.create_time())
                self._handles[p.pid] = p
                if self.procs[p.pid].role == "shard" and self.placement.own:
                    self._pin(p)
            self.procs[p.pid].samples.append((t, cpu))
        except psutil.Error:
            pass  # gone between the listing and the read

    def _pin(self, p: psutil.Process) -> None:
        cores = self.placement.shards[self._pinned % len(self.placement.shards)]
        os.sched_setaffinity(p.pid, cores)
        self._pinned += 1


def run_time_s(pid: int) -> float | None:
    """The seconds a process's threads have run, to the ns (/proc/PID/task/*/schedstat,
    first field), where user + system time (psutil) counts 10 ms ticks: a parent
    that runs 10 ms in a window would read as 0 or 1 tick. None: not readable
    here; a thread that already exited is not counted."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        total = 0
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _role(p: psutil.Process) -> str:
    line = " ".join(p.cmdline())
    return "shard" if "spawn_main" in line and "resource_tracker" not in line else "other"


@dataclass
class Trial:
    streams: int
    workers: int
    window_s: float
    events: int
    reads: int
    shard_events: list[int]
    shard_reads: list[int]
    parent_cpu_s: float
    shard_cpu_s: list[float]
    stub_cpu_s: float
    parent_after_s: float
    shards_after_s: float  # the shards' CPU from the window's end to their last sample
    recorded: int  # every event in the records (the parent's work after the window)
    status: str
    pinned: bool

    @property
    def collector_cpu_s(self) -> float:
        return self.parent_cpu_s + sum(self.shard_cpu_s)

    @property
    def parent_share(self) -> float:
        return self.parent_cpu_s / self.collector_cpu_s if self.collector_cpu_s else 0.0

    @property
    def parent_per_m(self) -> float | None:
        return per_million(self.parent_cpu_s, self.events)

    @property
    def shard_per_m(self) -> list[float | None]:
        return [per_million(c, e) for c, e in zip(self.shard_cpu_s, self.shard_events, strict=True)]

    @property
    def shards_per_m(self) -> float | None:
        return per_million(sum(self.shard_cpu_s), sum(self.shard_events))

    def readers(self) -> list[tuple[int, int, float]]:
        """(reads, events, cpu s) in the window of each process that read streams."""
        if not self.shard_cpu_s:
            return [(self.reads, self.events, self.parent_cpu_s)]
        return list(zip(self.shard_reads, self.shard_events, self.shard_cpu_s, strict=True))

    def line(self) -> str:
        each = ", ".join("-" if x is None else f"{x:.2f}" for x in self.shard_per_m)
        shards = f"shards {self.shards_per_m:.2f} s ({each}), " if self.shard_cpu_s else ""
        return (f"streams {self.streams:>5} workers {self.workers}: {self.events / self.window_s:>8,.0f} "
                f"events/s, {self.events / max(1, self.reads):.2f} a read; CPU a million events: "
                f"parent {_f(self.parent_per_m)} s, {shards}"
                f"stub {_f(per_million(self.stub_cpu_s, self.events))} s; "
                f"parent share {self.parent_share:.1%}; collector "
                f"{self.collector_cpu_s / self.window_s:.2f} cores busy; after the window "
                f"{_f(per_million(self.parent_after_s, self.recorded))} s (parent), "
                f"{_f(per_million(self.shards_after_s, self.recorded))} s (shards) a million recorded; "
                f"cell {self.status}{'' if self.pinned else ', shared cores'}")


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def trial(streams: int, workers: int, rate: float, duration: float, stub_procs: int,
          cores: Sequence[int], tmp: Path) -> Trial:
    """One `bench run --workers k` against a fresh stub, each process's CPU sampled."""
    here = tmp / f"s{streams}-w{workers}"
    run_dir = here / "run"
    placement = place(cores, stub_procs, workers)
    os.sched_setaffinity(0, placement.stub)  # the stub inherits it; the sampler stays off the collector
    try:
        with StubServer(here / "stub", procs=stub_procs, tok_per_s=rate / streams) as stub:
            assert stub.proc is not None
            sampler = TreeSampler(stub.proc.pid, placement)
            sampler.start()
            col = subprocess.Popen(collector_cmd(stub.base_url, run_dir, duration, streams, workers),
                                   env=collector_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: os.sched_setaffinity(0, placement.parent))
            sampler.collector_pid = col.pid
            _, err = col.communicate()
            sampler.stop()
    finally:
        os.sched_setaffinity(0, cores)
    if col.returncode not in (0, 3):
        tail = "\n".join(err.strip().splitlines()[-8:])
        raise SystemExit(f"bench run --workers {workers} failed (exit {col.returncode}):\n{tail}")
    return analyse(run_dir, sampler.procs, streams, workers, placement.own)


def analyse(run_dir: Path, procs: dict[int, Proc], streams: int, workers: int,
            pinned: bool) -> Trial:
    """The trial's figures from its run directory and the sampled CPU times."""
    run = read_run(run_dir)
    cell = run.cells.to_pylist()[0]
    start, end = cell["window_start_ns"], cell["window_end_ns"]
    by_shard: dict[int, int] = {}
    reads_of: dict[int, int] = {}
    events = reads = recorded = 0
    for r in run.requests.to_pylist():
        stamps = [s for s in r["chunk_ns"] if start <= s <= end]
        recorded += len(r["chunk_ns"])
        events += len(stamps)
        reads += len(set(stamps))
        k = shard_index(r["request_id"])
        if k is not None:
            by_shard[k] = by_shard.get(k, 0) + len(stamps)
            reads_of[k] = reads_of.get(k, 0) + len(set(stamps))
    parent = next(p for p in procs.values() if p.role == "parent")
    # shards were started in index order: the k-th born is shard k
    shards = sorted((p for p in procs.values() if p.role == "shard"), key=lambda p: (p.born, p.pid))
    if len(shards) != len(by_shard):
        raise SystemExit(f"{run_dir}: {len(shards)} shard processes seen, records of {len(by_shard)}")

    def window(p: Proc) -> float:
        return cpu_at(p.samples, end) - cpu_at(p.samples, start)

    return Trial(streams, workers, (end - start) / 1e9, events, reads,
                 [by_shard[k] for k in sorted(by_shard)], [reads_of[k] for k in sorted(by_shard)],
                 window(parent),
                 [window(p) for p in shards],
                 sum(window(p) for p in procs.values() if p.role == "stub"),
                 parent.samples[-1][1] - cpu_at(parent.samples, end),
                 sum(p.samples[-1][1] - cpu_at(p.samples, end) for p in shards),
                 recorded, cell["status"], pinned)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="streams 64, 256 × workers 1, 2")
    ap.add_argument("--streams", default=None, help="e.g. 64,256,1024")
    ap.add_argument("--workers", default=None, help="e.g. 1,2,4")
    ap.add_argument("--rate", type=float, default=20_000.0,
                    help="events/s the stub offers in all, spread over the streams")
    ap.add_argument("--duration", type=float, default=None, help="window (s)")
    ap.add_argument("--stub-procs", type=int, default=None,
                    help="stub processes, and cores kept for them (default: 1, cores/8 on larger hosts)")
    ap.add_argument("--project", default="16,64", help="core counts to project to")
    a = ap.parse_args()
    try:
        streams = [int(s) for s in (a.streams or ("64,256" if a.quick else "64,256,1024")).split(",")]
        workers = [int(w) for w in (a.workers or ("1,2" if a.quick else "1,2,4")).split(",")]
        targets = [int(c) for c in a.project.split(",")]
    except ValueError as exc:
        raise SystemExit(f"--streams, --workers and --project take comma-separated integers "
                         f"({exc})") from None
    cores = sorted(os.sched_getaffinity(0))
    stub_procs = a.stub_procs or max(1, len(cores) // 8)
    duration = a.duration or (3.0 if a.quick else 5.0)
    load = os.getloadavg()
    print(f"host: {len(cores)} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; stub: "
          f"{stub_procs} processes on cores {list(place(cores, stub_procs, 1).stub)}, {a.rate:,.0f} "
          f"events/s offered in all; window {duration:g} s", flush=True)
    trials: list[Trial] = []
    with tempfile.TemporaryDirectory(prefix="scale-out-cpu-") as tmp:
        for s in streams:
            for w in workers:
                t = trial(s, w, a.rate, duration, stub_procs, cores, Path(tmp))
                print(t.line(), flush=True)
                trials.append(t)
    sharded = [t for t in trials if t.shard_cpu_s and t.shards_per_m and t.parent_per_m is not None]
    # a shard's cost an event read alone (fit_cost over every reader's window); the
    # parent's costliest at each worker count, as a line in the shards (fit_line)
    points = [p for t in trials for p in t.readers()]
    try:
        per_read, per_event = fit_cost(*zip(*points, strict=True))
        shard_m = (per_read + per_event) * 1e6
    except ValueError as exc:  # then the costliest reader measured, as it was
        per_read = per_event = float("nan")
        shard_m = max((per_million(c, e) or 0.0 for _, e, c in points), default=0.0)
        print(f"{exc}: projecting from the costliest reader measured, {shard_m:.2f} s a million")
    ks = sorted({t.workers for t in sharded})
    parent_fit = fit_line(ks, [max(t.parent_per_m or 0.0 for t in sharded if t.workers == k)
                               for k in ks]) if ks else None
    stub_m = max((per_million(t.stub_cpu_s, t.events) or 0.0 for t in trials), default=0.0)
    projections = []
    if shard_m and parent_fit is not None:
        print(f"projection inputs: a reader's CPU = {per_read * 1e6:.2f} µs a read + "
              f"{per_event * 1e6:.2f} µs an event; {shard_m:.2f} s a million events a shard; "
              f"parent {parent_fit[0]:.3f} + {parent_fit[1]:.3f} × shards s a million, "
              f"stub {stub_m:.2f} s a million")
        for c in targets:
            alone = project(c, parent_fit, shard_m)
            shared = project(c, parent_fit, shard_m, stub_m)
            projections.append({"cores": c, "events_per_s": round(alone.events_per_s),
                                "limit": alone.limit, "parent_bound": round(alone.parent_bound),
                                "with_stub_events_per_s": round(shared.events_per_s),
                                "with_stub_limit": shared.limit})
            print(f"projection, {c} cores for the collector: {alone.events_per_s:,.0f} events/s "
                  f"({alone.workers} shards × {1e6 / shard_m:,.0f}; the parent's core full at "
                  f"{alone.parent_bound:,.0f}: {alone.limit}-bound); with the stub on the same cores: "
                  f"{shared.events_per_s:,.0f} ({shared.limit}-bound)")
    load = os.getloadavg()
    print(json.dumps({
        "streams": [t.streams for t in trials],
        "workers": [t.workers for t in trials],
        "events_per_s": [round(t.events / t.window_s) for t in trials],
        "events_per_read": [round(t.events / max(1, t.reads), 3) for t in trials],
        "readers": [[(r, e, round(c, 4)) for r, e, c in t.readers()] for t in trials],
        "parent_cpu_s_per_m": [None if t.parent_per_m is None else round(t.parent_per_m, 3) for t in trials],
        "shard_cpu_s_per_m": [[None if x is None else round(x, 3) for x in t.shard_per_m] for t in trials],
        "stub_cpu_s_per_m": [round(per_million(t.stub_cpu_s, t.events) or 0.0, 3) for t in trials],
        "parent_share": [round(t.parent_share, 4) for t in trials],
        "collector_cores_busy": [round(t.collector_cpu_s / t.window_s, 3) for t in trials],
        "parent_after_s_per_m": [round(per_million(t.parent_after_s, t.recorded) or 0.0, 3) for t in trials],
        "shards_after_s_per_m": [round(per_million(t.shards_after_s, t.recorded) or 0.0, 3) for t in trials],
        "parent_cores_busy": [round(t.parent_cpu_s / t.window_s, 4) for t in trials],
        "pinned_own_cores": [t.pinned for t in trials],
        "status": [t.status for t in trials],
        "projection_inputs": {"parent_cpu_s_per_m": parent_fit, "shard_cpu_s_per_m": shard_m,
                              "reader_us_per_read": None if math.isnan(per_read) else per_read * 1e6,
                              "reader_us_per_event": None if math.isnan(per_event) else per_event * 1e6,
                              "stub_cpu_s_per_m": stub_m,
                              "shard_median": statistics.median([t.shards_per_m or 0.0 for t in sharded])
                              if sharded else None},
        "projections": projections,
        "rate": a.rate, "cores": len(cores), "stub_procs": stub_procs,
        "load_average": round(load[0], 2),
    }))


if __name__ == "__main__":
    main()
