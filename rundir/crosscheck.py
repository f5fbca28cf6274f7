"""Cross-checks of a measured decode cell's stored status against its own rows (pure).

Why: the builder recomputes every figure from requests.parquet, so rows taken
out of it (or added) move a published figure; one stream's rows deleted from
a concurrency-2 cell published it Valid at half its rate, with average active
1.0 (issue 30). The checks in rundir/decode_checks.py ask whether a window's
figures can be published; these ask whether the rows are the whole cell the
collector stored, using only what a run's own files hold: cells.parquet
(status, concurrency, window), requests.parquet (each request's stream slot,
send, end and chunks) and the server's waiting gauge.

For a decode cell stored with numbers (Valid or Requests queued):

- **a failed request**: any failed stream makes the collector's cell an Error
  (docs/methodology.md, "Statuses"), so one stored with numbers contradicts it;
- **every stream slot**: stream_index 0..C − 1 each have a measure request
  whose span (send to end) meets the window, and none names a slot ≥ C: the
  collector keeps every slot busy from warm-up to the window's end;
- **at most C at once**: average active, computed as the collector computes
  it (rundir.activity), is not above C: more requests than the cell sent ran
  at once only if rows were added;
- **Valid is not queued**: a cell stored Valid is, by the collector's own rule
  (rundir.activity.is_queued), not one whose average active is below 0.95 × C
  or whose server reported waiting requests in the window; if the rows say it
  is, it is Requests queued (its numbers stand, as the collector's would).

Each finding is the status the rows support (Error, or Requests queued) and
one clause saying why; the builder replaces the stored status with it and
says so in the cell's reason. The collector's own cells pass every check: it
judges the same rows with the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir.activity import Gauge, is_queued, summed_gauge, window_activity_from_gauge
from rundir.contract import (
    DECODE,
    ERROR,
    METRIC_WAITING,
    PURPOSE_MEASURE,
    REQUESTS_FILE,
    REQUESTS_QUEUED,
    VALID,
)
from rundir.metrics import Chunks, last_chunk_ns

Key = tuple[str, int, int]
# Statuses whose cells carry numbers, hence are cross-checked.
CHECKED = (VALID, REQUESTS_QUEUED)
# Average active may exceed C by this much (float sums) before rows were added.
OVER_TOLERANCE = 1e-6
# The words the Error legend reads a cause from (rundir/words.py ERROR_CAUSES).
MISSING_STREAM = "requests missing for stream"
TOO_MANY = "more requests ran at once than the cell sent"


@dataclass(frozen=True)
class Finding:
    """The status a cell's rows support instead of the stored one, and why."""

    status: str  # ERROR or REQUESTS_QUEUED
    problem: str


def failed_problem(requests: pa.Table) -> str | None:
    """The first failed measure request's error, in the collector's words."""
    if not len(requests):
        return None
    errors = [e for e in requests.column("error").to_pylist() if e]
    if not errors:
        return None
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{errors[0]}{more}"


def slot_problem(slots: np.ndarray, send_ns: np.ndarray, stop_ns: np.ndarray,
                 concurrency: int, start_ns: int, end_ns: int) -> str | None:
    """A stream slot with no measure request meeting the window, or one beyond C."""
    slots = np.asarray(slots, dtype=np.int64)
    beyond = slots[(slots < 0) | (slots >= concurrency)]
    if len(beyond):
        return (f"column stream_index: stream {int(beyond[0])} in a cell of {concurrency} "
                f"streams (0 to {concurrency - 1})")
    meets = (np.asarray(send_ns) <= end_ns) & (np.asarray(stop_ns) >= start_ns)
    seen = np.bincount(slots[meets], minlength=concurrency)[:concurrency]
    missing = np.flatnonzero(seen == 0)
    if not len(missing):
        return None
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return (f"{MISSING_STREAM} {int(missing[0])}{more} of {concurrency}: none of its requests "
            f"in {REQUESTS_FILE} spans the window")


def _stops(chunks: Chunks) -> np.ndarray:
    """Per request, when its stream ended (its last chunk, or its send, if unknown)."""
    return np.where(chunks.end_ns >= 0, chunks.end_ns,
                    np.maximum(last_chunk_ns(chunks), chunks.send_ns))


def tool_in_flight(chunks: Chunks, start_ns: int, end_ns: int) -> float:
    """Time-weighted mean over the window of requests sent and not yet ended (send to end)."""
    if end_ns <= start_ns or not len(chunks.send_ns):
        return 0.0
    lo = np.maximum(chunks.send_ns, start_ns)
    hi = np.minimum(_stops(chunks), end_ns)
    return float(np.clip(hi - lo, 0, None).sum()) / float(end_ns - start_ns)


PEER_QUEUE_UNSEEN = "the server's queue was not observed (no server waiting gauge)"


def cell_finding(status: str, concurrency: int, requests: pa.Table, chunks: Chunks,
                 start_ns: int, end_ns: int, waiting: Gauge, peer: bool = False) -> Finding | None:
    """What the cell's measure requests say against its stored status, or None
    when they agree (see the module doc): `requests` holds their `error` and
    `stream_index` columns, `chunks` their chunks, `waiting` the server's
    waiting gauge (rundir.activity.summed_gauge; None without one).

    `peer`: a run imported from another tool. Without a waiting gauge its
    queue cannot be seen, and counting a stream only from its first token
    would call a short-request run queued that the server served at once; so
    the queue check asks only whether the tool held its concurrency in flight
    (send to end, time-weighted over the window, against 0.95 × C)."""
    if status not in CHECKED:
        return None
    if why := failed_problem(requests):
        return Finding(ERROR, why)
    slots = (requests.column("stream_index").to_numpy(zero_copy_only=False)
             if len(requests) else np.zeros(0, dtype=np.int64))
    if why := slot_problem(slots, chunks.send_ns, _stops(chunks), concurrency, start_ns, end_ns):
        return Finding(ERROR, why)
    act = window_activity_from_gauge(chunks, waiting, start_ns, end_ns)
    if act.avg_active > concurrency + OVER_TOLERANCE:
        return Finding(ERROR, f"average active {act.avg_active:.2f} > {concurrency}: {TOO_MANY}")
    if peer and act.max_waiting is None:
        held = tool_in_flight(chunks, start_ns, end_ns)
        if status == VALID and is_queued(concurrency, held, None):
            return Finding(REQUESTS_QUEUED, f"the tool held {held:.2f} requests in flight on average "
                           f"< 0.95 × {concurrency}; {PEER_QUEUE_UNSEEN}")
        return None
    if status == VALID and is_queued(concurrency, act.avg_active, act.max_waiting):
        why = (f"server's waiting gauge reached {act.max_waiting:g}" if act.max_waiting
               else f"average active {act.avg_active:.2f} < 0.95 × {concurrency}")
        return Finding(REQUESTS_QUEUED, why)
    return None


def run_findings(cells: pa.Table, requests: pa.Table,
                 server_metrics: pa.Table | None, peer: bool = False) -> dict[Key, Finding]:
    """Every measured decode cell whose rows contradict its stored status, by key.

    Cheap next to aggregating: the request keys are grouped once, the chunks
    flattened once (views of the table), and only cells stored with numbers
    and a window are looked at.
    """
    todo = [r for r in cells.to_pylist()
            if r["phase"] == DECODE and r["status"] in CHECKED
            and r.get("window_start_ns") is not None and r.get("window_end_ns") is not None]
    if not todo:
        return {}
    groups = _measure_rows(requests)
    chunks = Chunks.from_table(requests) if len(requests) else None
    waiting = summed_gauge(server_metrics, METRIC_WAITING)
    small = requests.select(["error", "stream_index"])  # no chunk lists copied
    empty = np.zeros(0, dtype=np.int64)
    out: dict[Key, Finding] = {}
    for row in todo:
        key = (row["phase"], int(row["context"]), int(row["concurrency"]))
        idx = groups.get(key[1:], empty)
        rows = small.take(pa.array(idx, type=pa.int64()))
        sub = chunks.subset(idx) if chunks is not None else Chunks.from_table(requests)
        found = cell_finding(row["status"], key[2], rows, sub, int(row["window_start_ns"]),
                             int(row["window_end_ns"]), waiting, peer)
        if found is not None:
            out[key] = found
    return out


def _measure_rows(requests: pa.Table) -> dict[tuple[int, int], np.ndarray]:
    """Row indices (ascending) of the decode measure requests per (context, concurrency)."""
    if not len(requests):
        return {}
    mask = pc.and_(pc.equal(requests.column("phase"), DECODE),
                   pc.equal(requests.column("purpose"), PURPOSE_MEASURE))
    sel = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
    if not len(sel):
        return {}
    ctx = np.asarray(requests.column("context").to_numpy(zero_copy_only=False))[sel]
    conc = np.asarray(requests.column("concurrency").to_numpy(zero_copy_only=False))[sel]
    order = np.lexsort((sel, conc, ctx))
    ctx, conc, sel = ctx[order], conc[order], sel[order]
    change = np.flatnonzero((np.diff(ctx) != 0) | (np.diff(conc) != 0)) + 1
    bounds = np.concatenate(([0], change, [len(sel)]))
    return {(int(ctx[lo]), int(conc[lo])): sel[lo:hi]
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)}
