"""The run-directory contract: validation errors name file and field;
writes are atomic; a round trip keeps every value."""

from __future__ import annotations

import copy
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from rundir.contract import (
    CELLS_FILE,
    CELLS_SCHEMA,
    REQUESTS_FILE,
    REQUESTS_SCHEMA,
    RUN_YAML,
    SCHEMA_VERSION,
    ContractError,
    RunInfo,
)
from rundir.io import atomic_write, read_run, read_table, write_run_info, write_table
from tests.support.synthetic_runs import make_measured_run


def _info(**kw) -> RunInfo:
    data = {"schema_version": SCHEMA_VERSION, "run_id": "r1"}
    data.update(kw)
    return RunInfo.from_dict(data)


def _request_row(**kw) -> dict:
    row = {name: None for name in REQUESTS_SCHEMA.names}
    row.update(phase="decode", context=1024, concurrency=1, request_id="a", purpose="measure",
               stream_index=0, send_ns=10, end_ns=50, cancelled=False,
               chunk_ns=[20, 30, 40], chunk_tokens=[1, 2, 3])
    row.update(kw)
    return row


def _cell_row(**kw) -> dict:
    row = {name: None for name in CELLS_SCHEMA.names}
    row.update(phase="decode", context=1024, concurrency=1, status="valid",
               window_start_ns=0, window_end_ns=100)
    row.update(kw)
    return row


def make_run(path: Path) -> Path:
    write_table(path, REQUESTS_FILE, pa.Table.from_pylist([_request_row()], schema=REQUESTS_SCHEMA))
    write_table(path, CELLS_FILE, pa.Table.from_pylist([_cell_row()], schema=CELLS_SCHEMA))
    write_run_info(path, _info(hardware={"gpu_name": "H200 SXM", "gpu_count": 8}))
    return path


def test_round_trip(tmp_path: Path) -> None:
    run = read_run(make_run(tmp_path / "run"))
    assert run.info.hardware.gpu_count == 8
    assert run.requests.column("chunk_ns").to_pylist() == [[20, 30, 40]]
    assert run.requests.schema.field("chunk_ns").type == pa.list_(pa.int64())
    assert run.cells.column("status").to_pylist() == ["valid"]


def test_unknown_schema_version(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"schema_version: unknown schema version 7"):
        RunInfo.from_dict({"schema_version": 7, "run_id": "x"}, where="run.yaml")


def test_wrong_type_names_the_field(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    data = yaml.safe_load((run_dir / RUN_YAML).read_text())
    data["hardware"]["gpu_count"] = "eight"
    (run_dir / RUN_YAML).write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError) as err:
        read_run(run_dir)
    msg = str(err.value)
    assert "run.yaml" in msg and "hardware.gpu_count" in msg and "integer" in msg
    assert "\n" not in msg


def test_missing_column_names_file_and_column(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    table = pq.read_table(run_dir / CELLS_FILE).drop_columns(["status"])
    pq.write_table(table, run_dir / CELLS_FILE)
    with pytest.raises(ContractError, match=r"cells\.parquet: column status: missing"):
        read_run(run_dir)


def test_wrong_column_type(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    table = pq.read_table(run_dir / REQUESTS_FILE)
    table = table.set_column(table.column_names.index("send_ns"), "send_ns", pa.array(["x"]))
    pq.write_table(table, run_dir / REQUESTS_FILE)
    with pytest.raises(ContractError, match=r"requests\.parquet: column send_ns: expected int64"):
        read_run(run_dir)


def test_chunk_lists_must_pair(tmp_path: Path) -> None:
    bad = pa.Table.from_pylist([_request_row(chunk_tokens=[1, 2])], schema=REQUESTS_SCHEMA)
    with pytest.raises(ContractError, match="chunk_tokens: length differs"):
        write_table(tmp_path, REQUESTS_FILE, bad)


def test_unknown_status_rejected(tmp_path: Path) -> None:
    bad = pa.Table.from_pylist([_cell_row(status="great")], schema=CELLS_SCHEMA)
    with pytest.raises(ContractError, match="column status: unknown value 'great'"):
        write_table(tmp_path, CELLS_FILE, bad)


def test_not_parquet(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run")
    (run_dir / CELLS_FILE).write_bytes(b"PAR1 truncated")
    with pytest.raises(ContractError, match=r"cells\.parquet: not a readable Parquet file"):
        read_run(run_dir)


def test_a_table_read_while_the_collector_replaces_it_is_one_version(tmp_path: Path) -> None:
    """A reader (the builder, a dashboard) may read a table while the collector
    replaces it with a longer one (atomic_write after each cell). Given the
    path, pyarrow opened it more than once and could read the footer of one
    version and the pages of the next: 30 of 2,000 reads here failed as 'not a
    readable Parquet file'. Read through one open file, every read is whole:
    the old rows or the new ones."""
    run_dir = make_measured_run(tmp_path / "run", run_id="race", contexts=[256, 512, 1024],
                                concurrency=[1, 2, 4])
    full = read_table(run_dir, CELLS_FILE)
    versions = [full, full.slice(0, 3)]
    stop = threading.Event()

    def collector() -> None:
        i = 0
        while not stop.is_set():
            write_table(run_dir, CELLS_FILE, versions[i % 2])
            i += 1

    writer = threading.Thread(target=collector)
    writer.start()
    rows: set[int] = set()
    try:
        for _ in range(1000):
            rows.add(read_table(run_dir, CELLS_FILE).num_rows)
    finally:
        stop.set()
        writer.join()
    assert rows <= {full.num_rows, 3}


def test_atomic_write_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "cells.parquet"
    target.write_text("old")

    def crash(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, crash)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["cells.parquet"]


def test_unknown_field_rejected() -> None:
    with pytest.raises(ContractError, match="field engine.flavour: unknown field"):
        _info(engine={"flavour": "x"})


# --------------------------------------------------------------------------
# Bad values (issue 9): every case names the file and the field, in one line
# --------------------------------------------------------------------------

BIG = 2**64


def _set(path: str, value: object):
    """A mutation of run.yaml's mapping: set a dotted field to value."""

    def apply(data: dict) -> None:
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return apply


BAD_RUN_YAML = [
    # (id, mutation, field named, what the message says)
    ("duration-nan", _set("parameters.duration_s", float("nan")),
     "parameters.duration_s", "expected a finite number, got nan"),
    ("duration-inf", _set("parameters.duration_s", float("inf")),
     "parameters.duration_s", "expected a finite number, got inf"),
    ("duration-minus-inf", _set("parameters.duration_s", float("-inf")),
     "parameters.duration_s", "expected a finite number, got -inf"),
    ("duration-huge-int", _set("parameters.duration_s", 10**400),
     "parameters.duration_s", "expected a finite number"),
    ("vram-nan", _set("hardware.vram_gb_per_gpu", float("nan")),
     "hardware.vram_gb_per_gpu", "finite number"),
    ("vram-inf", _set("hardware.vram_gb_per_gpu", float("inf")),
     "hardware.vram_gb_per_gpu", "finite number"),
    ("vram-negative", _set("hardware.vram_gb_per_gpu", -96.0),
     "hardware.vram_gb_per_gpu", "expected a number >= 0"),
    ("gpu-count-int64-overflow", _set("hardware.gpu_count", 2**63),
     "hardware.gpu_count", "fits in 64 bits"),
    ("clock-anchor-overflow", _set("clock.wall_anchor_ns", BIG),
     "clock.wall_anchor_ns", "fits in 64 bits"),
    ("context-item-overflow", _set("parameters.contexts", [1024, 2**70]),
     "parameters.contexts[1]", "fits in 64 bits"),
    ("kv-tokens-below-int64", _set("kv_budget.tokens", -(2**63) - 1),
     "kv_budget.tokens", "fits in 64 bits"),
    ("gpu-count-negative", _set("hardware.gpu_count", -1),
     "hardware.gpu_count", "expected a number >= 0, got -1"),
    ("gpu-count-bool", _set("hardware.gpu_count", True),
     "hardware.gpu_count", "expected an integer, got True"),
    ("duration-zero", _set("parameters.duration_s", 0),
     "parameters.duration_s", "expected a number > 0"),
    ("concurrency-zero", _set("parameters.concurrency", [1, 0]),
     "parameters.concurrency[1]", "expected a number >= 1"),
    ("context-negative", _set("parameters.contexts", [-1024]),
     "parameters.contexts[0]", ">= 1"),
    ("max-output-zero", _set("parameters.max_output_tokens", 0),
     "parameters.max_output_tokens", ">= 1"),
    ("prefill-repeats-negative", _set("parameters.prefill_repeats", -3),
     "parameters.prefill_repeats", ">= 0"),
    ("max-model-len-zero", _set("model.max_model_len", 0), "model.max_model_len", ">= 1"),
    ("kv-tokens-negative", _set("kv_budget.tokens", -5), "kv_budget.tokens", ">= 0"),
    ("measured-at-words", _set("measured_at", "yesterday"),
     "measured_at", "expected an ISO 8601 date-time with a time zone"),
    ("measured-at-date-only", _set("measured_at", "2025-11-29"), "measured_at", "ISO 8601"),
    ("measured-at-no-zone", _set("measured_at", "2025-11-29T07:06:40"),
     "measured_at", "time zone"),
    ("measured-at-day-first", _set("measured_at", "29/11/2025 07:06"),
     "measured_at", "ISO 8601"),
    ("measured-at-month-13", _set("measured_at", "2025-13-01T00:00:00Z"),
     "measured_at", "ISO 8601"),
    ("measured-at-number", _set("measured_at", 20251129),
     "measured_at", "expected a string"),
    ("hardware-not-a-map", _set("hardware", 5), "hardware", "expected a mapping, got 5"),
    ("contexts-not-a-list", _set("parameters.contexts", "1024"),
     "parameters.contexts", "expected a list"),
    ("top-level-typo", _set("hardwre", {}), "hardwre", "unknown field"),
    ("numeric-and-text-keys", lambda d: d["engine"].update({1: "x", "flavour": "y"}),
     "engine.1", "unknown field"),
    ("schema-version-string", _set("schema_version", "1"),
     "schema_version", "unknown schema version '1'"),
    ("run-id-empty", _set("run_id", ""), "run_id", "must not be empty"),
    ("source-unknown", _set("source", "scraped"), "source", "expected 'measured' or 'imported'"),
]


@pytest.mark.parametrize("mutate,field,says", [c[1:] for c in BAD_RUN_YAML],
                         ids=[c[0] for c in BAD_RUN_YAML])
def test_bad_run_yaml_values(tmp_path: Path, mutate, field: str, says: str) -> None:
    run_dir = make_run(tmp_path / "run")
    data = yaml.safe_load((run_dir / RUN_YAML).read_text())
    mutate(data)
    (run_dir / RUN_YAML).write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError) as err:
        read_run(run_dir)
    msg = str(err.value)
    assert msg.startswith(f"{run_dir / RUN_YAML}: field {field}: "), msg
    assert says in msg and "\n" not in msg


# Unknown keys cannot be set on the dataclasses; every other bad value can.
WRITER_CASES = [c for c in BAD_RUN_YAML
                if c[0] not in ("top-level-typo", "numeric-and-text-keys")]


@pytest.mark.parametrize("mutate,field,says", [c[1:] for c in WRITER_CASES],
                         ids=[c[0] for c in WRITER_CASES])
def test_writer_refuses_what_the_reader_would(tmp_path: Path, mutate, field: str,
                                              says: str) -> None:
    """write_run_info validates first: a bad value never lands in run.yaml."""
    good = _info().to_dict()
    data = copy.deepcopy(good)
    mutate(data)
    info = RunInfo.from_dict(good)
    for key, value in data.items():  # bypass the reader: set the raw values directly
        if isinstance(value, dict) and hasattr(getattr(info, key, None), "__dataclass_fields__"):
            for k, v in value.items():
                object.__setattr__(getattr(info, key), k, v)
        else:
            object.__setattr__(info, key, value)
    with pytest.raises(ContractError) as err:
        write_run_info(tmp_path, info)
    assert field.split(".")[0].split("[")[0] in str(err.value) and says in str(err.value)
    assert not (tmp_path / RUN_YAML).exists()
    assert os.listdir(tmp_path) == []  # no temporary file left either


def test_duration_nan_never_written(tmp_path: Path) -> None:
    """The issue's `--duration nan` wrote `duration_s: .nan`: now the writer refuses."""
    info = _info()
    info.parameters.duration_s = float("nan")
    with pytest.raises(ContractError, match=r"parameters\.duration_s: expected a finite number"):
        write_run_info(tmp_path, info)
    assert not (tmp_path / RUN_YAML).exists()


@pytest.mark.parametrize("when", [
    "2025-11-29T07:06:40Z", "2025-11-29T07:06:40+00:00", "2025-11-29 07:06:40+00:00",
    "2025-11-29T07:06:40.123456+02:00", "2026-03-03T14:05:00Z",
])
def test_iso_measured_at_accepted(when: str) -> None:
    assert _info(measured_at=when).measured_at == when


def test_shipped_and_imported_runs_still_read() -> None:
    root = Path(__file__).resolve().parents[2] / "data"
    runs = sorted(p.parent for p in root.glob("*/run.yaml"))
    assert runs
    for run_dir in runs:
        read_run(run_dir)


BAD_RUN_YAML_TEXT = [
    ("not-utf8", b"schema_version: 1\nrun_id: caf\xe9\n", "line 2: not UTF-8 text"),
    ("duplicate-key", b"schema_version: 1\nrun_id: a\nrun_id: b\n", "key 'run_id' appears twice"),
    ("nested-duplicate-key",
     b"schema_version: 1\nrun_id: a\nhardware:\n  gpu_count: 8\n  gpu_count: 1\n",
     "key 'gpu_count' appears twice"),
    ("5000-digit-integer", b"schema_version: 1\nrun_id: a\nclock:\n  wall_anchor_ns: "
     + b"9" * 5000 + b"\n", "not valid YAML"),
    ("python-tag", b"schema_version: 1\nrun_id: !!python/object/apply:os.system [id]\n",
     "not valid YAML"),
    ("unclosed-list", b"schema_version: 1\nrun_id: [a\n", "not valid YAML"),
    ("tab-indent", b"schema_version: 1\nhardware:\n\tgpu_count: 1\n", "not valid YAML"),
    ("empty-file", b"", "expected a mapping at the top level"),
    ("top-level-list", b"- schema_version: 1\n", "expected a mapping at the top level"),
]


@pytest.mark.parametrize("raw,says", [c[1:] for c in BAD_RUN_YAML_TEXT],
                         ids=[c[0] for c in BAD_RUN_YAML_TEXT])
def test_bad_run_yaml_text(tmp_path: Path, raw: bytes, says: str) -> None:
    run_dir = make_run(tmp_path / "run")
    (run_dir / RUN_YAML).write_bytes(raw)
    with pytest.raises(ContractError) as err:
        read_run(run_dir)
    msg = str(err.value)
    assert msg.startswith(str(run_dir / RUN_YAML)) and says in msg and "\n" not in msg
    assert "9999999999" not in msg  # a huge value is described, not echoed


def test_secret_in_a_wrong_typed_field_is_not_echoed() -> None:
    secret = "sk-live-0123456789abcdefABCDEF"
    with pytest.raises(ContractError) as err:
        _info(hardware={"gpu_count": secret})
    assert secret not in str(err.value) and "a string of 30 characters" in str(err.value)
    with pytest.raises(ContractError) as err:
        _info(engine={"build": {"token": secret}})
    assert secret not in str(err.value)


def _bad_table(name: str, rows: list[dict]) -> pa.Table:
    schema = REQUESTS_SCHEMA if name == REQUESTS_FILE else CELLS_SCHEMA
    return pa.Table.from_pylist(rows, schema=schema)


R, C = REQUESTS_FILE, CELLS_FILE
NAN, INF = float("nan"), float("inf")
BAD_TABLES = [
    # (id, file, rows, what the message says)
    ("tokens-decrease", R, [_request_row(chunk_tokens=[1, 3, 2])],
     "column chunk_tokens: decreases in request 'a'"),
    ("tokens-drop-by-490", R, [_request_row(chunk_ns=[20, 30, 40, 50],
                                            chunk_tokens=[500, 510, 20, 30])],
     "column chunk_tokens: decreases in request 'a'"),
    ("tokens-decrease-second-request", R,
     [_request_row(), _request_row(request_id="b", chunk_tokens=[1, 2, 1])],
     "column chunk_tokens: decreases in request 'b'"),
    ("tokens-negative", R, [_request_row(chunk_tokens=[-1, 0, 1])],
     "column chunk_tokens: negative count in request 'a'"),
    ("tokens-empty-value", R, [_request_row(chunk_tokens=[1, None, 3])],
     "column chunk_tokens: has empty values in request 'a'"),
    ("ns-back-in-time", R, [_request_row(chunk_ns=[20, 10, 30])],
     "column chunk_ns: goes back in time in request 'a'"),
    ("ns-empty-value", R, [_request_row(chunk_ns=[20, None, 30])],
     "column chunk_ns: has empty values in request 'a'"),
    ("duplicate-request-id", R, [_request_row(), _request_row()],
     "column request_id: 'a' appears more than once"),
    ("prompt-tokens-negative", R, [_request_row(prompt_tokens=-5)],
     "column prompt_tokens: expected >= 0, got -5 in request 'a'"),
    ("cached-tokens-negative", R, [_request_row(cached_tokens=-1)],
     "column cached_tokens: expected >= 0"),
    ("stream-index-negative", R, [_request_row(stream_index=-1)],
     "column stream_index: expected >= 0"),
    ("output-target-zero", R, [_request_row(output_target=0)],
     "column output_target: expected >= 1, got 0 in request 'a'"),
    ("request-context-zero", R, [_request_row(context=0)],
     "column context: expected >= 1, got 0 in request 'a'"),
    ("request-concurrency-negative", R, [_request_row(concurrency=-4)],
     "column concurrency: expected >= 1"),
    ("unknown-purpose", R, [_request_row(purpose="warmup")],
     "column purpose: unknown value 'warmup'"),
    ("unknown-phase", R, [_request_row(phase="encode")], "column phase: unknown value 'encode'"),
    ("lists-unequal", R, [_request_row(chunk_tokens=[1, 2])],
     "column chunk_tokens: length differs"),
    ("duplicate-cell", C, [_cell_row(), _cell_row()],
     "columns phase, context, concurrency: cell (decode, 1024, 1) appears more than once"),
    ("warmup-nan", C, [_cell_row(warmup_s=NAN)],
     "column warmup_s: expected a finite number, got nan in cell (decode, 1024, 1)"),
    ("warmup-negative", C, [_cell_row(warmup_s=-1.0)], "column warmup_s: expected >= 0"),
    ("pub-total-inf", C, [_cell_row(pub_total_tok_s=INF)],
     "column pub_total_tok_s: expected a finite number, got inf"),
    ("pub-ttft-minus-inf", C, [_cell_row(pub_ttft_ms=-INF)], "column pub_ttft_ms: expected a finite"),
    ("pub-avg-active-nan", C, [_cell_row(pub_avg_active=NAN)], "column pub_avg_active: expected"),
    ("pub-total-negative", C, [_cell_row(pub_total_tok_s=-18786.9)],
     "column pub_total_tok_s: expected >= 0, got -18786.9"),
    ("pub-completed-negative", C, [_cell_row(pub_completed=-1)], "column pub_completed: expected >= 0"),
    ("window-ends-before-start", C, [_cell_row(window_start_ns=100, window_end_ns=50)],
     "column window_end_ns: before window_start_ns in cell (decode, 1024, 1)"),
    ("cell-context-zero", C, [_cell_row(context=0)], "column context: expected >= 1"),
    ("unknown-status", C, [_cell_row(status="great")], "column status: unknown value 'great'"),
]


@pytest.mark.parametrize("name,rows,says", [c[1:] for c in BAD_TABLES],
                         ids=[c[0] for c in BAD_TABLES])
def test_bad_table_values(tmp_path: Path, name: str, rows: list[dict], says: str) -> None:
    """Refused by the writer, and by the reader when written by someone else."""
    table = _bad_table(name, rows)
    with pytest.raises(ContractError) as err:
        write_table(tmp_path / "w", name, table)
    assert str(err.value) == f"{name}: {says}" or str(err.value).startswith(f"{name}: {says}")
    run_dir = make_run(tmp_path / "run")
    pq.write_table(table, run_dir / name)
    with pytest.raises(ContractError) as err:
        read_run(run_dir)
    msg = str(err.value)
    assert msg.startswith(f"{run_dir / name}: {says}") and "\n" not in msg


def test_good_chunk_lists_pass(tmp_path: Path) -> None:
    """Equal neighbours, a role chunk of 0 tokens, empty and one-chunk lists, and a
    request starting below where the previous one ended are all fine."""
    rows = [
        _request_row(request_id="a", chunk_ns=[20, 20, 30], chunk_tokens=[0, 0, 5]),
        _request_row(request_id="b", chunk_ns=[], chunk_tokens=[]),
        _request_row(request_id="c", chunk_ns=[5], chunk_tokens=[1]),
        _request_row(request_id="d", chunk_ns=[1, 2], chunk_tokens=[0, 1]),
    ]
    write_table(tmp_path, REQUESTS_FILE, pa.Table.from_pylist(rows, schema=REQUESTS_SCHEMA))


def test_chunked_and_sliced_tables_name_the_right_request(tmp_path: Path) -> None:
    good = pa.Table.from_pylist([_request_row(request_id=f"g{i}") for i in range(5)],
                                schema=REQUESTS_SCHEMA)
    bad = pa.Table.from_pylist([_request_row(request_id="x0"),
                                _request_row(request_id="x1", chunk_ns=[30, 20, 40])],
                               schema=REQUESTS_SCHEMA)
    table = pa.concat_tables([good.slice(1, 3), bad.slice(0, 2)])  # two chunks, one sliced
    assert table.column("chunk_ns").num_chunks == 2
    with pytest.raises(ContractError, match=r"chunk_ns: goes back in time in request 'x1'$"):
        write_table(tmp_path, REQUESTS_FILE, table)


def test_vectorised_order_check_matches_a_plain_loop() -> None:
    """The numpy pass over flattened lists agrees with a row-by-row loop."""
    import numpy as np

    from rundir.checks import list_order

    rng = np.random.default_rng(3)
    for _ in range(300):
        lists = [sorted(rng.integers(0, 50, rng.integers(0, 6)).tolist())
                 for _ in range(rng.integers(1, 8))]
        if rng.random() < 0.6:  # break one list
            i = int(rng.integers(0, len(lists)))
            if len(lists[i]) >= 2:
                j = int(rng.integers(1, len(lists[i])))
                lists[i][j] = lists[i][j - 1] - 1 - int(rng.integers(0, 3))
        expect = None
        for row, vals in enumerate(lists):
            if any(v < 0 for v in vals):
                expect = (row, "negative count")
                break
            if any(b < a for a, b in zip(vals, vals[1:], strict=False)):
                expect = (row, "order")
                break
        col = pa.chunked_array([pa.array(lists, pa.list_(pa.int64()))])
        got = list_order(col, negative_ok=False)
        if expect is not None and got is not None and expect[1] != got[1]:
            continue  # both flagged the row; which problem is named first may differ
        assert (got[0] if got else None) == (expect[0] if expect else None), lists


def _cells_and_requests(path: Path, cells: list[dict], requests: list[dict]) -> Path:
    write_table(path, REQUESTS_FILE, pa.Table.from_pylist(requests, schema=REQUESTS_SCHEMA))
    write_table(path, CELLS_FILE, pa.Table.from_pylist(cells, schema=CELLS_SCHEMA))
    write_run_info(path, _info())
    return path


def test_request_rows_without_a_cell_row_are_refused(tmp_path: Path) -> None:
    """A hand-deleted cells.parquet row would drop a measured cell from the site
    silently: read_run names requests.parquet and the first such cell key."""
    requests = [_request_row(request_id="a"),
                _request_row(request_id="b", concurrency=4, stream_index=1),
                _request_row(request_id="c", concurrency=4),
                _request_row(request_id="d", phase="prefill", purpose="prefill_sample")]
    run = _cells_and_requests(tmp_path / "run", [_cell_row()], requests)
    with pytest.raises(ContractError) as exc:
        read_run(run)
    assert str(exc.value) == (
        f"{run / REQUESTS_FILE}: columns phase, context, concurrency: cell (decode, 1024, 4) "
        "has 2 request row(s) but no row in cells.parquet "
        "(each request belongs to a cell of the run)")


@pytest.mark.parametrize("cell", [
    _cell_row(status="pending", window_start_ns=None, window_end_ns=None),  # an attempt cut short
    _cell_row(status="error", reason="HTTP 500"),
])
def test_request_rows_of_any_listed_cell_are_fine(tmp_path: Path, cell: dict) -> None:
    """Only a missing row is refused: a pending cell holding raw rows is a state the
    collector leaves and resumes (tests/collector/test_resume.py), and cells without requests
    (skipped, over capacity) are ordinary."""
    others = [_cell_row(concurrency=c, status="over_capacity", window_start_ns=None,
                        window_end_ns=None) for c in (8, 16)]
    run = read_run(_cells_and_requests(tmp_path / "run", [cell, *others], [_request_row()]))
    assert len(run.requests) == 1 and len(run.cells) == 3
