"""Rate cells (requests sent on a schedule at an offered rate) -> their figures and
the knee of each context's curve (pure).

Kept apart from the matrix and from the other traffic cells: only the run
page's Request rate section, the downloads and the compare data read these.
The delivered load is recomputed from the raw request rows with
rundir/arrivals.py (the collector's own check), never taken from the knob.

Definitions (docs/methodology.md, "Rate cells on the pages"):

* A cell's requests are those its schedule put inside the window (scheduled
  time in [window start, window end)); the drain after the window finishes
  them, so their latencies are whole.
* **Completed/s** = those requests that finished normally ÷ the span they took
  (window start → the last of them ending, never shorter than the window):
  when the server keeps up it is the offered rate less one request's latency
  over the window; when it falls behind, the backlog stretches the span and it
  settles at what the server can do. **Output tok/s**: their output tokens
  over the same span.
* TTFT (send → first token), TTFT from schedule (scheduled → first token:
  the client's own queueing counts) and time between tokens are per request,
  exactly as rundir/tails.py ranks them (time between tokens over the
  request's whole stream: the drain is part of it).
* The SLO is site_builder/slo.py's, applied as there: the cell meets it by
  its percentiles (`slo.judge`), a request by its own figures
  (`slo.request_meets`); goodput here is requests meeting it per second.
* **The knee** of a context: the highest offered rate whose cell has numbers,
  delivered its load, completed ≥ 95% of offered per second and meets the SLO.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from rundir import arrivals, contract, reuse, statuses, tails
from rundir.checks import CELL_KEY
from rundir.metrics import Chunks
from site_builder import slo as slo_mod

# The share of the offered rate a cell must complete to count under the knee.
KNEE_SHARE = 0.95
# The tails a rate cell keeps (every level, like a decode cell's: the SLO may limit any).
METRICS = (tails.TTFT, tails.TBT)
SCHEDULE_TTFT = tails.TailMetric("ttft_sched_ms", False)
_SMALL = (*CELL_KEY, "purpose", "send_ns", "end_ns", "scheduled_ns", "finish_reason",
          "error", "cancelled", "chunk_ns", "chunk_tokens", "prompt_tokens", "cached_tokens")


@dataclass
class RateCell:
    """One rate cell and the numbers its row shows (None: not measurable)."""

    context: int
    concurrency: int  # the cap on requests in flight; 0: none
    rate_target: float  # offered requests/s
    status: str
    reason: str | None = None
    arrivals: str | None = None  # the process: poisson, constant, gamma:4
    reuse_target: int | None = None  # --rate-reuse (percent); None: unique prompts
    # A reuse cell's reuse, as a prefix cell's (rundir/reuse.py): percent of its requests'
    # prompt tokens cached, from the requests, and from the engine (cells.parquet)
    reuse_achieved: float | None = None
    reuse_server: float | None = None
    window_s: float | None = None
    scheduled: int = 0  # requests the schedule put in the window (as stored)
    sent: int = 0
    schedule_rate: float | None = None  # scheduled ÷ window
    rate_achieved: float | None = None  # sent ÷ window
    rate_uncertainty: float | None = None  # the schedule's chance spread (req/s)
    send_lag_ms_p50: float | None = None
    send_lag_ms_p99: float | None = None
    load_problems: list[str] = field(default_factory=list)
    completed: int = 0
    span_s: float | None = None  # window start -> the last of its requests ending
    completed_rps: float | None = None
    output_tok_s: float | None = None
    # Every level of TTFT, time between tokens (tails.tail_columns' keys) and TTFT from
    # the schedule (ttft_sched_ms_p50 ...): what the SLO judges, like a decode cell's.
    tails: dict[str, float | None] = field(default_factory=dict)
    # Per request (aligned; None: no figure): what goodput judges one by one.
    per_request: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def phase(self) -> str:
        return contract.RATE

    @property
    def has_numbers(self) -> bool:
        return statuses.carries_numbers(self.status)

    @property
    def has_detail(self) -> bool:
        """No drill-down page (the status notes ask)."""
        return False

    @property
    def key(self) -> tuple:
        return (contract.RATE, self.context, self.concurrency, self.reuse_target, None,
                self.rate_target)

    def tail(self, key: str, level: str) -> float | None:
        """The metric's value at a level (slo.judge reads cells through this)."""
        metric = SCHEDULE_TTFT if key == SCHEDULE_TTFT.key else tails.BY_KEY[key]
        return self.tails.get(metric.column(level))


def _ns(values: list[Any]) -> np.ndarray:
    return np.asarray([-1 if v is None else v for v in values], dtype=np.int64)


def cell_figures(row: dict[str, Any], requests: list[dict[str, Any]]) -> RateCell:
    """A rate cell's figures from its cells.parquet row and its requests (purpose arrival)."""
    cell = RateCell(int(row["context"]), int(row["concurrency"]), float(row["rate_target"]),
                    row["status"], row.get("reason"), row.get("arrivals"),
                    None if row.get("prefix_reuse_target") is None else int(row["prefix_reuse_target"]))
    if cell.reuse_target is not None:
        cell.reuse_achieved = reuse.requests_ratio([r.get("prompt_tokens") for r in requests],
                                                   [r.get("cached_tokens") for r in requests])
        sp, sc = row.get("server_prompt_tokens"), row.get("server_cached_tokens")
        cell.reuse_server = reuse.percent(sc, sp) if sp is not None and sc is not None else None
    start, end = row.get("window_start_ns"), row.get("window_end_ns")
    if start is None or end is None or end <= start:
        return cell
    cell.window_s = (end - start) / 1e9
    sched = _ns([r.get("scheduled_ns") for r in requests])
    inside = [r for r, s in zip(requests, sched, strict=True) if start <= s < end]
    if cell.arrivals and row.get("arrival_seed") is not None:
        # the schedule made again from the run's seed: a request never sent has no row
        check = arrivals.stored_load(arrivals.parse_process(cell.arrivals), cell.rate_target,
                                     contract.cell_key(row), int(start), int(end),
                                     int(row["arrival_seed"]), sched.tolist(),
                                     [r["send_ns"] for r in requests])
        cell.scheduled, cell.sent = check.scheduled, check.sent
        cell.schedule_rate, cell.rate_achieved = check.schedule_rate, check.achieved_rate
        cell.rate_uncertainty = check.rate_uncertainty
        cell.send_lag_ms_p50, cell.send_lag_ms_p99 = check.lag_p50_ms, check.lag_p99_ms
        cell.load_problems = list(check.problems)
    if not inside:
        return cell
    table = pa.Table.from_pylist([{"send_ns": r["send_ns"], "end_ns": r.get("end_ns"),
                                   "chunk_ns": r["chunk_ns"] or [],
                                   "chunk_tokens": r["chunk_tokens"] or []} for r in inside],
                                 schema=pa.schema([("send_ns", pa.int64()), ("end_ns", pa.int64()),
                                                   ("chunk_ns", pa.list_(pa.int64())),
                                                   ("chunk_tokens", pa.list_(pa.int64()))]))
    chunks = Chunks.from_table(table)
    done = np.asarray([r.get("finish_reason") is not None and r.get("error") is None
                       and not r.get("cancelled") for r in inside], dtype=bool)
    ends = _ns([r.get("end_ns") for r in inside])
    last = max(int(ends.max()), max(max(r["chunk_ns"] or [start]) for r in inside), int(end))
    # every chunk of the cell's requests counts: the drain after the window is theirs
    figures = tails.request_figures(chunks, int(start), last, done)
    cell.completed = int(done.sum())
    cell.span_s = max(cell.window_s, (int(ends[done].max()) - start) / 1e9 if done.any() else 0.0)
    cell.completed_rps = cell.completed / cell.span_s
    cell.output_tok_s = float(figures.window_tokens[done].sum()) / cell.span_s
    from_sched = np.where(np.isfinite(figures.ttft_ms),
                          figures.ttft_ms + (_ns([r["send_ns"] for r in inside])
                                             - _ns([r["scheduled_ns"] for r in inside])) / 1e6, np.nan)
    for metric in METRICS:
        cell.tails.update(tails.tail_columns(figures.samples(metric), metric))
    cell.tails.update(tails.tail_columns(from_sched, SCHEDULE_TTFT))
    cell.per_request = {"ttft_ms": [None if not np.isfinite(v) else float(v) for v in figures.ttft_ms],
                        "tbt_ms": [None if not np.isfinite(v) else float(v) for v in figures.tbt_ms]}
    return cell


def rate_cells(cells: pa.Table, requests: pa.Table) -> list[RateCell]:
    """Every rate cell of a run with its figures (empty for a run without any)."""
    rows = [r for r in cells.to_pylist() if r["phase"] == contract.RATE]
    if not rows:
        return []
    phase = requests.column("phase").to_pylist() if len(requests) else []
    keep = [i for i, p in enumerate(phase) if p == contract.RATE]
    picked = requests.take(pa.array(keep, type=pa.int64())) if keep else requests.slice(0, 0)
    names = [n for n in _SMALL if n in picked.column_names]
    by_key: dict[tuple, list[dict[str, Any]]] = {}
    for r in picked.select(names).to_pylist():
        if r["purpose"] == contract.PURPOSE_ARRIVAL:
            by_key.setdefault(contract.cell_key(r), []).append(r)
    out = [cell_figures(row, by_key.get(contract.cell_key(row), [])) for row in rows]
    return sorted(out, key=lambda c: (c.context, c.concurrency, c.reuse_target or -1, c.rate_target))


# ---- under the SLO (a build input: judged at page time, never cached) ------------
@dataclass(frozen=True)
class Judged:
    """A rate cell under the SLO: its verdict, goodput and whether it counts for the knee."""

    cell: RateCell
    verdict: slo_mod.Verdict
    goodput: slo_mod.Goodput  # share of its requests meeting the SLO; tok_s: requests/s
    keeps_up: bool  # completed/s ≥ 95% of offered
    sustained: bool  # keeps up, delivered, meets the SLO: a knee candidate


def judge(cell: RateCell, slo: slo_mod.Slo) -> Judged:
    """A rate cell against the SLO (slo.judge's rule) and the knee's other conditions."""
    verdict = slo_mod.judge(cell, slo)
    n = len(cell.per_request.get("ttft_ms", []))
    missing = max(cell.scheduled - n, 0)  # scheduled in the window, never sent: they miss
    per_request = {"ttft_ms": [*cell.per_request.get("ttft_ms", []), *[None] * missing],
                   "tbt_ms": [*cell.per_request.get("tbt_ms", []), *[None] * missing]}
    per_request["window_tokens"] = [1] * len(per_request["ttft_ms"])  # one per request: requests/s
    good = slo_mod.goodput(per_request, cell.span_s, slo)
    keeps_up = cell.completed_rps is not None and cell.completed_rps >= KNEE_SHARE * cell.rate_target
    sustained = (keeps_up and verdict.meets and cell.has_numbers
                 and cell.status != contract.LOAD_NOT_DELIVERED)
    return Judged(cell, verdict, good, keeps_up, sustained)


def knee(judged: list[Judged]) -> Judged | None:
    """The highest offered rate among one curve's cells that sustains it (None: none)."""
    ok = [j for j in judged if j.sustained]
    return max(ok, key=lambda j: j.cell.rate_target) if ok else None


def curves(cells: list[RateCell]) -> dict[tuple[int, int, int | None], list[RateCell]]:
    """The cells of each curve: per context, cap and reuse level, by offered rate."""
    out: dict[tuple[int, int, int | None], list[RateCell]] = {}
    for c in cells:
        out.setdefault((c.context, c.concurrency, c.reuse_target), []).append(c)
    return {k: sorted(v, key=lambda c: c.rate_target) for k, v in out.items()}
