"""The builder's re-check of a measured decode cell's figures against its raw rows (pure).

Why here: the builder publishes an Error naming the checks when a cell stored
with numbers fails them (an older collector, a hand-made run: stalls, figures
that disagree, token counting it cannot trust), and `bench validate` must
report the same finding in the same words without aggregating the run; both
call `figure_problems` (site_builder/aggregate.py and rundir/validate.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir import contract
from rundir.decode_checks import decode_problems, stored_problems
from rundir.io import RunData
from rundir.metrics import Chunks, DecodeMetrics, decode_metrics, has_negative_tokens
from rundir.statuses import NUMBER_STATUSES

Key = tuple[str, int, int]
LIST_COLUMNS = ("chunk_ns", "chunk_tokens")  # read through Chunks, never sliced per cell


def group_requests(requests: pa.Table) -> dict[tuple[str, int, int, str], np.ndarray]:
    """Row indices of requests.parquet per (phase, context, concurrency, purpose).

    One stable sort of the four keys (dictionary codes for the strings), so
    each cell's rows come out ascending without a filter per cell.
    """
    if not len(requests):
        return {}
    keys: list[np.ndarray] = []
    labels: list[list[Any]] = []
    for name in ("phase", "context", "concurrency", "purpose"):
        col = requests.column(name)
        if name in ("phase", "purpose"):  # strings: sort their dictionary codes
            enc = col.combine_chunks().dictionary_encode()
            keys.append(np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64))
            labels.append(enc.dictionary.to_pylist())
        else:
            keys.append(np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64))
            labels.append([])
    order = np.lexsort(keys[::-1])
    ordered = [k[order] for k in keys]
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for k in ordered:
        change[1:] |= k[1:] != k[:-1]
    bounds = np.append(np.flatnonzero(change), len(order))
    phase, ctx, conc, purpose = ordered
    out: dict[tuple[str, int, int, str], np.ndarray] = {}
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        key = (str(labels[0][phase[lo]]), int(ctx[lo]), int(conc[lo]),
               str(labels[3][purpose[lo]]))
        out[key] = order[lo:hi]
    return out


def completed_mask(requests: pa.Table) -> np.ndarray:
    """Requests that finished normally: a finish reason, no error, not cancelled."""
    if not len(requests):
        return np.zeros(0, dtype=bool)
    finished = pc.is_valid(requests.column("finish_reason"))
    no_error = pc.is_null(requests.column("error"))
    not_cancelled = pc.invert(requests.column("cancelled"))
    both = pc.and_(pc.and_(finished, no_error), not_cancelled)
    return np.asarray(both.to_numpy(zero_copy_only=False), dtype=bool)


def figure_problems(row: dict[str, Any], requests: pa.Table, chunks: Chunks, done: np.ndarray,
                    max_tokens: int | None) -> tuple[DecodeMetrics, list[str]]:
    """(the window's decode figures, the checks they fail) for a decode cell stored
    with numbers and a window: `row` its cells.parquet row, `requests`, `chunks`
    and `done` (completed_mask) its measure requests."""
    start, end = row["window_start_ns"], row["window_end_ns"]
    m = decode_metrics(chunks, start, end, done)
    # The flag as stored: None (never recorded) is not False (decode_problems).
    problems = decode_problems(chunks, start, end, m, client_bound=row.get("client_bound"))
    problems = stored_problems(requests, chunks, done, row.get("token_counting"),
                               max_tokens) + problems
    return m, problems


def run_figure_problems(data: RunData, cells: pa.Table) -> dict[Key, list[str]]:
    """{cell key: the checks it fails} for each measured decode cell of `cells`
    (cells.parquet as the builder publishes it: rundir.validate.rechecked_cells)
    stored with numbers and a window, as the builder's aggregation finds them."""
    requests = data.requests
    groups = group_requests(requests)
    chunks = Chunks.from_table(requests)
    has_negative_tokens(chunks)  # one pass for the run, as the aggregation does
    done = completed_mask(requests)
    small = requests.drop_columns([n for n in LIST_COLUMNS if n in requests.column_names])
    empty = np.zeros(0, dtype=np.int64)
    max_tokens = data.info.parameters.max_output_tokens
    out: dict[Key, list[str]] = {}
    for row in cells.to_pylist():
        start, end = row.get("window_start_ns"), row.get("window_end_ns")
        if (row["phase"] != contract.DECODE or row["status"] not in NUMBER_STATUSES
                or start is None or end is None or end <= start
                or row.get("token_counting") == contract.COUNT_PEER_REQUEST):
            continue  # tier request: two stamps a request, no chunks to judge (as the builder)
        key = (row["phase"], int(row["context"]), int(row["concurrency"]))
        idx = groups.get((*key, contract.PURPOSE_MEASURE), empty)
        rows = small.take(pa.array(idx, type=pa.int64()))
        _, problems = figure_problems(row, rows, chunks.subset(idx), done[idx], max_tokens)
        if problems:
            out[key] = problems
    return out
