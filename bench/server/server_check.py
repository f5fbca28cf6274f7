"""A decode cell's records set against what the server itself counted (pure).

Why: every figure comes from the records, and a record lost, counted twice
or made up (a shard that lies, a merge that drops or repeats) changes them
with nothing in any stream to show it. The server counts the same tokens and
requests on its own, in /metrics, which the collector samples about once a
second on the same monotonic clock (bench/server/sampler.py). So a decode cell the
server contradicts is an Error (docs/methodology.md, "The server's own
counts"):

* **Tokens.** Where the engine's generation-token counter rises as tokens
  are generated (`EngineProfile.live_generation_counter`: vLLM; llama.cpp
  and SGLang add a request's tokens when it finishes), take the first sample
  a and the last sample b inside the window, with D the counter's rise from
  a to b. Each token of the records truly arrived in (lo, stamp]: the stamp
  is its arrival or a later read, and lo, its stream's previous distinct
  stamp (or the request's send), is earlier than its arrival, since a read
  takes everything waiting. The server counted it within IN_FLIGHT_NS of its
  arrival, and read a sample's value within half that scrape's round trip h
  of its stamp. So the tokens surely counted between a and b (lo > a + h +
  IN_FLIGHT and stamp <= b - h - IN_FLIGHT) are at most D: more, and the
  records claim tokens the server never generated (records made up or
  counted twice). And D is at most the tokens possibly counted then (stamp >=
  a - h - IN_FLIGHT and lo <= b + h + IN_FLIGHT): more, and the server
  generated tokens no record holds (records lost, or another client used the
  server). b is taken at least IN_FLIGHT + h before the window's end, so
  that no token it counted was cut off undelivered by the window's close.
* **Streams.** At a sample of the running gauge, a request with a token
  stamped before the sample's read and one that surely arrived after it
  (lo - IN_FLIGHT > stamp + h) was on the server then, running or waiting
  (a preempted request waits). More such requests than running + waiting,
  at over half of the window's samples and at least 2 (a gauge set once a
  step can lag), and the records claim streams the server did not run. A
  sample reading an idle server (0 running, 0 waiting) is left out: that is
  a stale gauge, not a count (vLLM's CPU build was seen reading 0 running
  while four streams received tokens), and records cannot make a server idle.

A chunk count nothing confirmed yet (no usage; bench.measure.cells checks it after
the window) is not set against the counter: that check names a count the
server refutes in its own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir.contract import METRIC_GENERATION_TOKENS, METRIC_RUNNING, METRIC_WAITING
from rundir.metrics import Chunks

# How far apart the server's count of a token and its arrival here may be, either
# way: vLLM counts a step's tokens as it hands them to the HTTP responses, which
# send them on the same event loop (milliseconds; more on a loaded host). Assumed,
# and the reasons say so. In steady decoding a lag, however long, moves no rise
# between two samples; this margin covers a rate that changes within it. It costs
# 2 × 0.5 s of tokens of sensitivity: in a 30 s window, one stream in 28 lost or
# repeated.
IN_FLIGHT_NS = 500_000_000


@dataclass(frozen=True)
class ServerView:
    """What the judge needs to know about the server's counts: whether its
    generation counter is live (see the module docstring), and each
    sample's half round trip (stamp -> ns; a sample not in it counts 0)."""

    live_counter: bool = False
    half_rtt: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Series:
    """One server metric summed over label sets, per sample stamp (ascending)."""

    t_ns: np.ndarray
    value: np.ndarray
    source: str


def _series(metrics: pa.Table, name: str) -> _Series | None:
    rows = metrics.filter(pc.equal(metrics.column("name"), name))
    if not len(rows):
        return None
    t = np.asarray(rows.column("t_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
    v = np.asarray(rows.column("value").to_numpy(zero_copy_only=False), dtype=np.float64)
    stamps, where = np.unique(t, return_inverse=True)
    sums = np.zeros(len(stamps))
    np.add.at(sums, where, v)
    return _Series(stamps, sums, str(rows.column("source")[0].as_py()))


def arrival_floor(chunks: Chunks) -> np.ndarray:
    """Per chunk, a time its data surely arrived after: the stream's previous
    distinct stamp, or the request's send for the first read (ns)."""
    stamps, off = chunks.chunk_ns, chunks.starts()
    n = len(stamps)
    if not n:
        return stamps.copy()
    opens = np.zeros(n, dtype=bool)
    opens[off[:-1][off[1:] > off[:-1]]] = True
    same = np.zeros(n, dtype=bool)
    np.equal(stamps[1:], stamps[:-1], out=same[1:])
    same &= ~opens
    heads = np.flatnonzero(~same)
    head = heads[np.searchsorted(heads, np.arange(n), side="right") - 1]
    req = np.searchsorted(off, np.arange(n), side="right") - 1
    return np.where(opens[head], chunks.send_ns[req], stamps[np.maximum(head - 1, 0)])


def _s(ns: float, start_ns: int) -> str:
    return f"{(ns - start_ns) / 1e9:.2f} s"


def counter_problem(chunks: Chunks, metrics: pa.Table, start_ns: int, end_ns: int,
                    half_rtt: Mapping[int, int]) -> str | None:
    """The token rule of the module docstring, or None (too few samples: no claim)."""
    series = _series(metrics, METRIC_GENERATION_TOKENS)
    if series is None:
        return None
    half = np.array([half_rtt.get(int(t), 0) for t in series.t_ns], dtype=np.int64)
    inside = (series.t_ns - half >= start_ns) & (series.t_ns + half + IN_FLIGHT_NS <= end_ns)
    idx = np.flatnonzero(inside)
    if len(idx) < 2:
        return None
    a, b = int(idx[0]), int(idx[-1])
    rise = series.value[b] - series.value[a]
    if rise < 0:  # the counter was reset (a restarted server): nothing to compare
        return None
    ta, tb, ha, hb = int(series.t_ns[a]), int(series.t_ns[b]), int(half[a]), int(half[b])
    lo, stamp, tokens = arrival_floor(chunks), chunks.chunk_ns, chunks.tokens
    sure = (lo > ta + ha + IN_FLIGHT_NS) & (stamp <= tb - hb - IN_FLIGHT_NS)
    maybe = (stamp >= ta - ha - IN_FLIGHT_NS) & (lo <= tb + hb + IN_FLIGHT_NS)
    claimed, possible = int(tokens.sum(where=sure)), int(tokens.sum(where=maybe))
    span = f"from {_s(ta, start_ns)} to {_s(tb, start_ns)} of the window"
    slack = f"each token placed within {IN_FLIGHT_NS / 1e6:.0f} ms of the server's count"
    if claimed > rise:
        return (f"the server contradicts the records: its generation counter ({series.source}) "
                f"rose by {rise:,.0f} tokens {span}, but the records hold {claimed:,} tokens "
                f"that arrived inside that span ({slack}): tokens the server never generated "
                "(records made up or counted twice)")
    if rise > possible:
        return (f"the server contradicts the records: its generation counter ({series.source}) "
                f"rose by {rise:,.0f} tokens {span}, but the records hold at most {possible:,} "
                f"tokens that could have been generated then ({slack}): records lost, or "
                "another client used the server")
    return None


def gauge_problem(chunks: Chunks, metrics: pa.Table, start_ns: int, end_ns: int,
                  half_rtt: Mapping[int, int]) -> str | None:
    """The stream rule of the module docstring, or None."""
    running = _series(metrics, METRIC_RUNNING)
    if running is None or not len(chunks.chunk_ns):
        return None
    waiting = _series(metrics, METRIC_WAITING)
    keep = (running.t_ns >= start_ns) & (running.t_ns <= end_ns)
    times, ran = running.t_ns[keep], running.value[keep]
    queued = np.zeros(len(times))
    if waiting is not None and len(times):
        at = np.searchsorted(waiting.t_ns, times)
        found = (at < len(waiting.t_ns)) & (waiting.t_ns[np.minimum(at, len(waiting.t_ns) - 1)]
                                            == times)
        queued[found] = waiting.value[at[found]]
    counts = (ran + queued) > 0  # an idle reading is a stale gauge, not a count
    times, ran, queued = times[counts], ran[counts], queued[counts]
    if len(times) < 2:
        return None
    tok = chunks.tokens > 0
    stamp, lo = chunks.chunk_ns, arrival_floor(chunks)
    off = chunks.starts()
    req = np.searchsorted(off, np.arange(len(stamp)), side="right") - 1
    # per request: its first token's stamp and its last token's floor
    first = np.full(chunks.n_requests, np.iinfo(np.int64).max)
    last = np.full(chunks.n_requests, np.iinfo(np.int64).min)
    np.minimum.at(first, req[tok], stamp[tok])
    np.maximum.at(last, req[tok], lo[tok])
    worst = None
    bad = 0
    for t, r, w in zip(times, ran, queued, strict=True):
        h = half_rtt.get(int(t), 0)
        alive = int(((first < t - h) & (last - IN_FLIGHT_NS > t + h)).sum())
        if alive > r + w:
            bad += 1
            if worst is None or alive - (r + w) > worst[0] - (worst[1] + worst[2]):
                worst = (alive, r, w, int(t))
    if bad < 2 or 2 * bad <= len(times) or worst is None:
        return None
    alive, r, w, t = worst
    return (f"the server contradicts the records: at {bad} of {len(times)} samples of its "
            f"running gauge ({running.source}) inside the window the records have more "
            f"requests receiving tokens on both sides of the sample than the server ran or "
            f"queued (e.g. {alive} against {r:g} running + {w:g} waiting at "
            f"{_s(t, start_ns)}): streams the server never ran (records made up or counted twice)")


def server_problems(table: pa.Table, start_ns: int, end_ns: int, metrics: pa.Table | None,
                    view: ServerView, counted: bool) -> list[str]:
    """Every contradiction between the cell's records (requests.parquet rows,
    every purpose) and the server's own counts over the window [start_ns,
    end_ns]; `counted`: the records' token counts are the server's usage (else
    the counter is not compared)."""
    if metrics is None or not len(metrics) or not len(table):
        return []
    chunks = Chunks.from_table(table)
    found = [counter_problem(chunks, metrics, start_ns, end_ns, view.half_rtt)
             if view.live_counter and counted else None,
             gauge_problem(chunks, metrics, start_ns, end_ns, view.half_rtt)]
    return [p for p in found if p]
