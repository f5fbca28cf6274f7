"""The Parquet tables: their schemas, the columns added within v1, and the checks
a table must pass to be read.

Separate from run.yaml's reader because it is the only part that needs pyarrow and
rundir.checks, and because its rules are per column, not per field.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rundir import checks
from rundir.contract.names import (
    CELLS_FILE,
    CLOCK_OFFSETS_FILE,
    CONVERSATION,
    GPU_METRICS_FILE,
    LOAD_NOT_DELIVERED,
    PHASES,
    PREFIX,
    PURPOSES,
    RATE,
    REQUESTS_FILE,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    SERVER_METRICS_FILE,
    STATUSES,
    SUPERSEDED_REQUESTS_FILE,
    TRAFFIC_PHASES,
    WINDOWS_FILE,
    ContractError,
)

_NS = pa.int64()

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("phase", pa.string(), nullable=False),
        pa.field("context", pa.int64(), nullable=False),
        pa.field("concurrency", pa.int64(), nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("purpose", pa.string(), nullable=False),
        pa.field("stream_index", pa.int64(), nullable=False),  # which of the C slots
        pa.field("send_ns", _NS, nullable=False),
        pa.field("end_ns", _NS),  # stream closed (finished, failed or cancelled)
        pa.field("prompt_tokens", pa.int64()),
        pa.field("cached_tokens", pa.int64()),
        pa.field("finish_reason", pa.string()),
        pa.field("error", pa.string()),
        pa.field("cancelled", pa.bool_(), nullable=False),  # closed by the window's end
        pa.field("chunk_ns", pa.list_(_NS), nullable=False),
        pa.field("chunk_tokens", pa.list_(pa.int64()), nullable=False),  # cumulative
        pa.field("content_tail", pa.string()),  # last characters, evidence for Looped
        pa.field("reasoning_tail", pa.string()),
        # Optional (traffic cells, see OPTIONAL_COLUMNS): the cell's key columns beyond
        # the matrix's, the request's prefix group, its conversation and that
        # conversation's turn it sent, and the engine's own count of its cached prompt
        # tokens where it gives one apart from usage (llama.cpp's timings.cache_n).
        pa.field("prefix_reuse_target", pa.int64()),
        pa.field("turn", pa.int64()),
        pa.field("prefix_group", pa.int64()),
        pa.field("conversation_id", pa.int64()),
        pa.field("conversation_turn", pa.int64()),
        pa.field("engine_cached_tokens", pa.int64()),
        # Optional, rate cells: the key's offered rate, and when the schedule put the
        # request (the run's monotonic clock; send_ns - scheduled_ns is its send lag).
        pa.field("rate_target", pa.float64()),
        pa.field("scheduled_ns", _NS),
        # --- speculative decoding (issue 35; rundir/speculative.py) ---
        # Optional: the engine's own per-request draft figures where it gives them
        # (llama.cpp's timings.draft_n, draft_n_accepted).
        pa.field("engine_draft_tokens", pa.int64()),
        pa.field("engine_draft_accepted", pa.int64()),
        # --- end speculative decoding ---
        # Optional, prompt sources (issue 35): which prompt of a non-filler source the
        # request's text starts at (its index in the file, or in the built-in source).
        pa.field("prompt_index", pa.int64()),
        # --- length mixes (issue 35; rundir/lengths.py) ---
        # Optional: the max_tokens the request asked when the run draws output lengths
        # (--output-lengths other than fixed); absent: every request asked the cell's.
        pa.field("output_target", pa.int64()),
        # Optional: the prompt length (tokens) a rate request was built to when the run has
        # an input mix (--input-lengths); absent: every prompt at the cell's context.
        pa.field("input_target", pa.int64()),
        # --- end length mixes ---
    ]
)

CELLS_SCHEMA = pa.schema(
    [
        pa.field("phase", pa.string(), nullable=False),
        pa.field("context", pa.int64(), nullable=False),
        pa.field("concurrency", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("window_start_ns", _NS),
        pa.field("window_end_ns", _NS),
        pa.field("warmup_s", pa.float64()),
        pa.field("token_counting", pa.string()),
        pa.field("client_bound", pa.bool_()),
        # Published aggregates: only imported runs (no raw data) fill these.
        pa.field("pub_total_tok_s", pa.float64()),
        pa.field("pub_per_request_tok_s", pa.float64()),
        pa.field("pub_ttft_ms", pa.float64()),
        pa.field("pub_tbt_ms", pa.float64()),
        pa.field("pub_avg_active", pa.float64()),
        pa.field("pub_completed", pa.int64()),
        pa.field("pub_output_tokens", pa.int64()),
        pa.field("pub_measured_s", pa.float64()),
        # Optional (added within v1, see OPTIONAL_COLUMNS): the processes the cell's streams
        # were spread over and the hosts they ran on (`bench run --workers N`, `--shard i/N`);
        # per cell, since a resumed run may measure its new cells otherwise. Empty: unknown.
        pa.field("processes", pa.int64()),
        pa.field("hosts", pa.int64()),
        # Optional, traffic cells only: the key columns beyond the matrix's (percent of
        # each prompt shared; the conversation turn), the engine's own prompt and cached
        # tokens over the cell's measured requests (from `server_source`: its counters or
        # its per-request timings), and the cache block the reuse tolerance used.
        pa.field("prefix_reuse_target", pa.int64()),
        pa.field("turn", pa.int64()),
        pa.field("server_prompt_tokens", pa.int64()),
        pa.field("server_cached_tokens", pa.int64()),
        pa.field("server_source", pa.string()),
        pa.field("reuse_block", pa.int64()),
        # Optional, rate cells: the offered rate (requests/s, a key part), the arrival
        # process ("poisson", "constant", "gamma:K"), the seed its schedule was drawn
        # with, and the fixed output tokens of every request.
        pa.field("rate_target", pa.float64()),
        pa.field("arrivals", pa.string()),
        pa.field("arrival_seed", pa.int64()),
        pa.field("rate_output_tokens", pa.int64()),
        # --- speculative decoding (issue 35; rundir/speculative.py) ---
        # Optional, decode cells of an engine that counts its drafts: its own tokens per
        # verification step over the cell's measured requests, which counters or timings
        # (`spec_source`), and the draft length k its counters gave (draft tokens ÷ drafts:
        # a chunk with more than k + 1 tokens holds several steps).
        pa.field("spec_tokens_per_step_server", pa.float64()),
        pa.field("spec_source", pa.string()),
        pa.field("spec_draft_length", pa.float64()),
        # --- end speculative decoding ---
        # Optional, prompt sources (issue 35): the cell's prompt source ("natural",
        # "adversarial", "file:NAME") and seed; empty: filler.
        pa.field("prompt_source", pa.string()),
        pa.field("prompt_seed", pa.int64()),
    ]
)

SERVER_METRICS_SCHEMA = pa.schema(
    [
        pa.field("t_ns", _NS, nullable=False),
        pa.field("name", pa.string(), nullable=False),  # canonical, e.g. "running"
        pa.field("source", pa.string(), nullable=False),  # the server's metric name
        pa.field("labels", pa.string(), nullable=False),  # Prometheus label set, as text
        pa.field("value", pa.float64(), nullable=False),
    ]
)

# One row per GPU per sample of the collector's telemetry; every column but
# t_ns and gpu may be empty (a counter the driver does not offer is empty, never guessed).
GPU_METRICS_SCHEMA = pa.schema(
    [pa.field("t_ns", _NS, nullable=False),  # the run's monotonic clock, as chunk_ns
     pa.field("gpu", pa.int32(), nullable=False),  # index
     pa.field("gpu_name", pa.string()), pa.field("power_w", pa.float64()),
     pa.field("energy_mj", pa.int64()),  # driver's total energy counter, millijoules
     pa.field("sm_clock_mhz", pa.int32()), pa.field("mem_clock_mhz", pa.int32()),
     pa.field("temp_c", pa.float64()), pa.field("util_gpu_pct", pa.float64()),
     pa.field("util_mem_pct", pa.float64()), pa.field("mem_used_mb", pa.float64()),
     pa.field("throttle_reasons", pa.int64()),  # NVML clocks-event reasons bitmask
     pa.field("host_cpu_pct", pa.float64())]  # client host CPU, same on a sample's rows
)

# One row per window of a decode cell measured with --repeats k > 1: back-to-back
# windows [start_ns, end_ns] inside the cell's window_start_ns..window_end_ns span.
WINDOWS_SCHEMA = pa.schema(
    [pa.field("phase", pa.string(), nullable=False),
     pa.field("context", pa.int64(), nullable=False),
     pa.field("concurrency", pa.int64(), nullable=False),
     pa.field("window", pa.int64(), nullable=False),  # the window id, 0..k-1 in time order
     pa.field("start_ns", _NS, nullable=False), pa.field("end_ns", _NS, nullable=False)]
)

# One row per (decode cell, remote shard) of a many-host run: the offset (shard clock −
# shard 0's) its times were converted to shard 0's clock with, true within ± uncertainty_ns
# anywhere in the cell; rtt_ns: the round trip it was measured over; drift_ns: the move
# measured after the cell (empty: the shard died).
CLOCK_OFFSETS_SCHEMA = pa.schema(
    [pa.field("phase", pa.string(), nullable=False),
     pa.field("context", pa.int64(), nullable=False),
     pa.field("concurrency", pa.int64(), nullable=False),
     pa.field("shard", pa.int64(), nullable=False),
     pa.field("host", pa.string()),
     pa.field("offset_ns", _NS, nullable=False),
     pa.field("uncertainty_ns", _NS, nullable=False),
     pa.field("rtt_ns", _NS, nullable=False),
     pa.field("drift_ns", _NS)]
)

TABLE_SCHEMAS = {
    REQUESTS_FILE: REQUESTS_SCHEMA,
    CELLS_FILE: CELLS_SCHEMA,
    SERVER_METRICS_FILE: SERVER_METRICS_SCHEMA,
    GPU_METRICS_FILE: GPU_METRICS_SCHEMA,
    SUPERSEDED_REQUESTS_FILE: REQUESTS_SCHEMA,  # earlier attempts of re-measured cells
    WINDOWS_FILE: WINDOWS_SCHEMA,
    CLOCK_OFFSETS_FILE: CLOCK_OFFSETS_SCHEMA,
}
_REQUEST_TABLES = (REQUESTS_FILE, SUPERSEDED_REQUESTS_FILE)

# Columns added within schema v1: a table without one reads as if it were there and
# empty (a run directory written before it did not record it), and a writer leaves one
# out while every value is empty, so such a run directory stays byte for byte as it was.
_TRAFFIC_REQUEST_COLUMNS = ("prefix_reuse_target", "turn", "prefix_group", "conversation_id",
                            "conversation_turn", "engine_cached_tokens", "rate_target",
                            "scheduled_ns",
                            # speculative decoding (issue 35)
                            "engine_draft_tokens", "engine_draft_accepted",
                            # prompt sources (issue 35)
                            "prompt_index",
                            # length mixes (issue 35)
                            "output_target", "input_target")
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    CELLS_FILE: ("processes", "hosts", "prefix_reuse_target", "turn", "server_prompt_tokens",
                 "server_cached_tokens", "server_source", "reuse_block", "rate_target", "arrivals",
                 "arrival_seed", "rate_output_tokens",
                 # speculative decoding (issue 35)
                 "spec_tokens_per_step_server", "spec_source", "spec_draft_length",
                 # prompt sources (issue 35)
                 "prompt_source", "prompt_seed"),
    REQUESTS_FILE: _TRAFFIC_REQUEST_COLUMNS,
    SUPERSEDED_REQUESTS_FILE: _TRAFFIC_REQUEST_COLUMNS,
}


def check_table(name: str, table: pa.Table, where: str | None = None) -> pa.Table:
    """Validate a table against its contract schema; return it cast to it.

    Extra columns are allowed (a newer writer may add some); missing columns
    (but OPTIONAL_COLUMNS, read as empty) and columns of the wrong type are not.
    """
    where = where or name
    schema = TABLE_SCHEMAS[name]
    optional = OPTIONAL_COLUMNS.get(name, ())
    for fld in schema:
        if fld.name not in table.column_names:
            if fld.name in optional:
                table = table.append_column(fld, pa.nulls(len(table), fld.type))
                continue
            raise ContractError(f"{where}: column {fld.name}: missing")
        actual = table.schema.field(fld.name).type
        if not _compatible(actual, fld.type):
            raise ContractError(
                f"{where}: column {fld.name}: expected {fld.type}, got {actual}"
            )
        if not fld.nullable and table.column(fld.name).null_count:
            raise ContractError(f"{where}: column {fld.name}: has empty values")
    table = table.select(schema.names).cast(schema)
    if name in (*_REQUEST_TABLES, CELLS_FILE, WINDOWS_FILE):
        _check_values(name, table, where)
    elif name == GPU_METRICS_FILE and (problem := checks.gpu_metrics(table)):
        raise ContractError(f"{where}: {problem}")
    elif name == CLOCK_OFFSETS_FILE and (problem := checks.clock_offsets(table)):
        raise ContractError(f"{where}: {problem}")
    return table


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    if actual == expected or pa.types.is_null(actual):
        return True
    if pa.types.is_large_string(actual) and pa.types.is_string(expected):
        return True
    if pa.types.is_integer(actual) and pa.types.is_integer(expected):
        return True
    if pa.types.is_integer(actual) and pa.types.is_floating(expected):
        return True
    if pa.types.is_floating(actual) and pa.types.is_floating(expected):
        return True
    if (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and pa.types.is_list(expected):
        return _compatible(actual.value_type, expected.value_type)
    return False


def _check_values(name: str, table: pa.Table, where: str) -> None:
    """Value rules beyond the schema: known enums, sane keys, and for raw
    requests chunk lists that a metric can trust (see docs/data-format.md)."""
    problem = (checks.known(table, "phase", PHASES) or checks.cell_keys(table, RATE)
               or checks.traffic_keys(table, TRAFFIC_PHASES, PREFIX, CONVERSATION, RATE))
    if name == CELLS_FILE:
        figures = [f.name for f in CELLS_SCHEMA
                   if f.name in ("warmup_s", "server_prompt_tokens", "server_cached_tokens",
                                 "reuse_block", "rate_output_tokens", "spec_tokens_per_step_server",
                                 "spec_draft_length") or f.name.startswith("pub_")]
        problem = (problem or checks.known(table, "status", STATUSES)
                   or checks.cells(table, figures) or checks.spread(table)
                   or checks.only_on(table, "status", (REUSE_OFF_TARGET, REUSE_UNVERIFIED),
                                     TRAFFIC_PHASES)
                   or checks.only_on(table, "status", (LOAD_NOT_DELIVERED,), (RATE,)))
    if name in _REQUEST_TABLES:
        problem = (problem or checks.known(table, "purpose", PURPOSES)
                   or checks.requests(table))
    if problem:
        raise ContractError(f"{where}: {problem}")


def cell_key(row: dict) -> tuple:
    """A cell's key from a row of cells.parquet or requests.parquet (as a dict):
    (phase, context, concurrency, *TRAFFIC_KEY's parts), those parts empty on
    prefill and decode cells."""
    return tuple(row.get(k) for k in checks.CELL_KEY)


def matrix_key(phase: str, context: int, concurrency: int) -> tuple:
    """A prefill or decode cell's key (its traffic parts empty)."""
    return (phase, context, concurrency, *(None,) * len(checks.TRAFFIC_KEY))


def key_fields(key: tuple) -> dict[str, Any]:
    """A cell key as the columns it fills."""
    return dict(zip(checks.CELL_KEY, key, strict=True))


def empty_table(name: str) -> pa.Table:
    return TABLE_SCHEMAS[name].empty_table()


def written_form(name: str, table: pa.Table) -> pa.Table:
    """A checked table as it is written: its OPTIONAL_COLUMNS left out while empty."""
    empty = [n for n in OPTIONAL_COLUMNS.get(name, ())
             if table.column(n).null_count == len(table)]
    return table.drop_columns(empty) if empty else table
