"""Value checks of the contract's Parquet tables, beyond their schema.

A table can have every column of the right type and still hold numbers no
metric should trust: a cumulative token count that goes down, chunk times
out of order, a cell listed twice, a NaN where a published figure goes. Each
function returns the first problem as text naming the column and the row
(`column chunk_tokens: decreases in request 'r7'`), or None; the contract
module adds the file name and raises. Big list columns are checked
vectorised over their flattened values and offsets (tens of millions of
chunks per second), so validation does not slow reading down.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEY = ("phase", "context", "concurrency")
# A traffic cell's key columns beyond the matrix's (empty on prefill and decode cells).
TRAFFIC_KEY = ("prefix_reuse_target", "turn", "rate_target")
CELL_KEY = KEY + TRAFFIC_KEY


def key_columns(table: pa.Table) -> tuple[str, ...]:
    """The cell-key columns `table` has: CELL_KEY once checked, KEY in a table that predates it."""
    return tuple(k for k in CELL_KEY if k in table.column_names)


def key_names(values: list | tuple) -> str:
    """The key columns a message names for a key: the traffic ones only where set."""
    return ", ".join([*KEY, *(n for n, v in zip(TRAFFIC_KEY, values[3:], strict=False)
                              if v is not None)])


def key_text(values: list | tuple) -> str:
    """A cell key as messages show it: the matrix's three parts, then the traffic parts set."""
    shown = [str(v) for v in values[:3]]
    shown += [f"{name} {v}" for name, v in zip(TRAFFIC_KEY, values[3:], strict=False)
              if v is not None]
    return ", ".join(shown)


def _first(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """Index of the first true value of a boolean array (nulls count as false)."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    hits = pc.indices_nonzero(pc.fill_null(mask, False))
    return int(hits[0].as_py()) if len(hits) else None


def row_name(table: pa.Table, row: int) -> str:
    """How a message names a row: its request id, else its cell key."""
    if "request_id" in table.column_names:
        return f"request {table.column('request_id')[row].as_py()!r}"
    return f"cell ({key_text([table.column(k)[row].as_py() for k in key_columns(table)])})"


def known(table: pa.Table, column: str, allowed: tuple[str, ...]) -> str | None:
    """A value of an enumerated column that the contract does not list."""
    bad = set(table.column(column).unique().to_pylist()) - set(allowed)
    return f"column {column}: unknown value {sorted(bad)[0]!r}" if bad else None


def at_least(table: pa.Table, column: str, low: int) -> str | None:
    """A value below low in a numeric column (empty values are not judged here)."""
    col = table.column(column)
    if not len(col) or col.null_count == len(col) or pc.min(col).as_py() >= low:
        return None
    row = _first(pc.less(col, low))
    assert row is not None
    return (f"column {column}: expected >= {low}, got {col[row].as_py()} "
            f"in {row_name(table, row)}")


def cell_keys(table: pa.Table, uncapped: str | None = None) -> str | None:
    """Contexts and concurrency levels are positive (a cell key of 0 or -4 is no cell);
    cells of phase `uncapped` (rate cells, whose concurrency is a cap) may have 0: no cap."""
    problem = at_least(table, "context", 1)
    if problem or uncapped is None or not len(table):
        return problem or at_least(table, "concurrency", 1)
    capped = table.filter(pc.not_equal(table.column("phase"), uncapped))
    return at_least(capped, "concurrency", 1) or at_least(table, "concurrency", 0)


def traffic_keys(table: pa.Table, traffic: tuple[str, ...], prefix: str, conversation: str,
                 rate: str) -> str | None:
    """A prefix cell has a target reuse (0 to 100 percent) and no turn or rate; a
    conversation cell a turn (from 1) and neither of the others; a rate cell an
    offered rate (> 0 requests/s), maybe a reuse level, no turn; a matrix cell none."""
    if not set(TRAFFIC_KEY) <= set(table.column_names):
        return None
    phases = table.column("phase").to_pylist()
    columns = [table.column(k).to_pylist() for k in TRAFFIC_KEY]
    for row, (phase, target, turn, offered) in enumerate(zip(phases, *columns, strict=True)):
        got = {"prefix_reuse_target": target, "turn": turn, "rate_target": offered}
        if phase in (prefix, rate) and target is not None and not 0 <= target <= 100:
            column, why = "prefix_reuse_target", "expected a target reuse from 0 to 100 (percent)"
        elif phase == prefix and target is None:
            column, why = "prefix_reuse_target", "expected a target reuse from 0 to 100 (percent)"
        elif phase == conversation and (turn is None or turn < 1):
            column, why = "turn", "expected a turn from 1"
        elif phase == rate and (offered is None or not offered > 0 or not math.isfinite(offered)):
            column, why = "rate_target", "expected an offered rate above 0 (requests/s)"
        else:
            allowed = {prefix: {"prefix_reuse_target"}, conversation: {"turn"},
                       rate: {"rate_target", "prefix_reuse_target"}}.get(phase, set())
            extra = [k for k in TRAFFIC_KEY if got[k] is not None and k not in allowed]
            if not extra:
                continue
            column, why = extra[0], f"expected none on a {phase} cell"
        return f"column {column}: {why}, got {got[column]} in {row_name(table, row)}"
    return None


def only_on(table: pa.Table, column: str, values: tuple[str, ...], phases: tuple[str, ...]
            ) -> str | None:
    """A value of `column` that only cells of `phases` may take, on another cell."""
    for row, (value, phase) in enumerate(zip(table.column(column).to_pylist(),
                                             table.column("phase").to_pylist(), strict=True)):
        if value in values and phase not in phases:
            named = ", ".join(phases[:-1]) + " and " * (len(phases) > 1) + phases[-1]
            return (f"column {column}: {value!r} is for {named} cells only, "
                    f"got it in {row_name(table, row)}")
    return None


def cells(table: pa.Table, figures: list[str]) -> str | None:
    """Each cell once; finite, non-negative figures; a window that does not end
    before it starts."""
    keys = list(zip(*(table.column(k).to_pylist() for k in key_columns(table)), strict=True))
    if len(set(keys)) != len(keys):
        seen: set[tuple] = set()
        for row, key in enumerate(keys):
            if key in seen:
                return (f"columns {key_names(key)}: {row_name(table, row)} "
                        "appears more than once")
            seen.add(key)
    for name in figures:
        col = table.column(name)
        if pa.types.is_floating(col.type):
            row = _first(pc.invert(pc.is_finite(col)))
            if row is not None:
                return (f"column {name}: expected a finite number, got {col[row].as_py()} "
                        f"in {row_name(table, row)}")
        problem = at_least(table, name, 0)
        if problem:
            return problem
    row = _first(pc.less(table.column("window_end_ns"), table.column("window_start_ns")))
    if row is not None:
        return f"column window_end_ns: before window_start_ns in {row_name(table, row)}"
    return None


def spread(table: pa.Table) -> str | None:
    """A cell measured by at least one process on at least one host, and never by
    more hosts than processes (each host runs one or more of them)."""
    problem = at_least(table, "processes", 1) or at_least(table, "hosts", 1)
    if problem:
        return problem
    row = _first(pc.greater(table.column("hosts"), table.column("processes")))
    if row is not None:
        return (f"column hosts: more hosts than processes ({table.column('hosts')[row].as_py()} > "
                f"{table.column('processes')[row].as_py()}) in {row_name(table, row)}")
    return None


def requests(table: pa.Table) -> str | None:
    """Unique request ids, no negative counts, paired chunk lists, cumulative
    token counts that never go down and chunk times that never go back."""
    ids = table.column("request_id")
    if pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        dup = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))[0]
        return (f"column request_id: {dup.as_py()!r} appears more than once "
                "(request ids are unique in a run)")
    for column, least in (("stream_index", 0), ("prompt_tokens", 0), ("cached_tokens", 0),
                          ("output_target", 1), ("input_target", 1)):
        problem = at_least(table, column, least) if column in table.column_names else None
        if problem:
            return problem
    ns_len = pc.list_value_length(table.column("chunk_ns"))
    tok_len = pc.list_value_length(table.column("chunk_tokens"))
    if len(table) and not pc.all(pc.equal(ns_len, tok_len)).as_py():
        return "column chunk_tokens: length differs from chunk_ns in some row"
    for column, negative_ok, going_down in (("chunk_tokens", False, "decreases"),
                                            ("chunk_ns", True, "goes back in time")):
        found = list_order(table.column(column), negative_ok)
        if found is not None:
            row, what = found
            what = going_down if what == "order" else what
            return f"column {column}: {what} in {row_name(table, row)}"
    return None


def list_order(col: pa.ChunkedArray, negative_ok: bool) -> tuple[int, str] | None:
    """(row, problem) of the first list holding an empty value, a negative value
    (unless negative_ok) or a value below the one before it ("order"); None
    when every list is non-decreasing. One numpy pass over the flattened
    values: the comparison across two lists' boundary is masked out."""
    row0 = 0
    for chunk in col.chunks:
        offsets = chunk.offsets.to_numpy()
        values = chunk.values.slice(offsets[0], offsets[-1] - offsets[0])
        off = offsets - offsets[0]

        def row_of(i: int) -> int:
            return row0 + int(np.searchsorted(off, i, side="right")) - 1  # noqa: B023

        if values.null_count:
            return row_of(_first(values.is_null()) or 0), "has empty values"
        v = values.to_numpy()
        if not negative_ok and v.size and v.min() < 0:
            return row_of(int(np.argmax(v < 0))), "negative count"
        if v.size > 1:
            down = v[1:] < v[:-1]
            starts = off[1:-1]
            starts = starts[(starts > 0) & (starts < v.size)]
            down[starts - 1] = False  # a list's first value against the previous list's last
            if down.any():
                return row_of(int(np.argmax(down)) + 1), "order"
        row0 += len(chunk)
    return None


GPU_FIGURES = ("power_w", "energy_mj", "util_gpu_pct", "util_mem_pct", "mem_used_mb",
               "host_cpu_pct", "sm_clock_mhz", "mem_clock_mhz")


def gpu_metrics(table: pa.Table) -> str | None:
    """GPU telemetry a figure can trust: GPU indexes from 0, one row per GPU
    per sample, finite non-negative readings (empty ones are fine: not offered)."""
    pairs = pc.count_distinct(pc.binary_join_element_wise(
        pc.cast(table.column("t_ns"), pa.string()), pc.cast(table.column("gpu"), pa.string()), ":"))
    if pairs.as_py() != len(table):
        return "columns t_ns, gpu: a GPU appears twice in one sample"
    for name in (*GPU_FIGURES, "temp_c"):
        col = table.column(name)
        if pa.types.is_floating(col.type):
            row = _first(pc.invert(pc.is_finite(col)))
            if row is not None:
                return f"column {name}: expected a finite number, got {col[row].as_py()} in row {row}"
    for name in ("gpu", *GPU_FIGURES):
        col = table.column(name)
        row = _first(pc.less(col, 0))
        if row is not None:
            return f"column {name}: expected >= 0, got {col[row].as_py()} in row {row}"
    return None


def clock_offsets(table: pa.Table) -> str | None:
    """A many-host run's clock rows: shards from 1, bounds and round trips not
    negative, one row per shard per cell (the cell is checked by rundir.io)."""
    problem = (cell_keys(table) or at_least(table, "shard", 1)
               or at_least(table, "uncertainty_ns", 0) or at_least(table, "rtt_ns", 0))
    if problem:
        return problem
    seen = set()
    for row, key in enumerate(zip(*(table.column(k).to_pylist() for k in (*KEY, "shard")),
                                  strict=True)):
        if key in seen:
            return f"columns {', '.join(KEY)}, shard: {row_name(table, row)} lists shard {key[3]} twice"
        seen.add(key)
    return None
