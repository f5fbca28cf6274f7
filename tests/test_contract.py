"""The run-directory contract: validation errors name file and field;
writes are atomic; a round trip keeps every value."""

from __future__ import annotations

import os
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
from rundir.io import atomic_write, read_run, write_run_info, write_table


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
