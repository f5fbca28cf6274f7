"""cells.parquet's optional `processes` and `hosts` columns (added within v1).

A run directory written before them still reads (empty: not recorded) and its
cell pages show no "Measured by" line rather than a guessed 1; a writer leaves
the columns out while every value is empty, so such a directory's bytes stay
as they were; a value no collector writes is refused in one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rundir import contract
from rundir.contract import CELLS_FILE, ContractError
from rundir.io import read_run, read_table, write_table
from site_builder.pages import measured_by
from site_builder.publish import build_site
from tests.conftest import REPO

SAMPLE = REPO / "data" / "llama-cpp-tiny-cpu"  # written before the columns existed


def test_a_cells_file_without_the_columns_reads_them_as_empty(tmp_path: Path) -> None:
    assert "processes" not in pq.read_schema(SAMPLE / CELLS_FILE).names
    cells = read_run(SAMPLE).cells
    assert cells.column("processes").null_count == len(cells) > 0
    assert cells.column("hosts").null_count == len(cells)


def test_empty_optional_columns_are_not_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    before = (run / CELLS_FILE).read_bytes()
    write_table(run, CELLS_FILE, read_table(run, CELLS_FILE))  # read with them, all empty
    assert (run / CELLS_FILE).read_bytes() == before


def _with_spread(processes: list, hosts: list) -> pa.Table:
    cells = read_table(SAMPLE, CELLS_FILE).slice(0, len(processes))
    cells = cells.set_column(cells.schema.get_field_index("processes"), "processes",
                             pa.array(processes, pa.int64()))
    return cells.set_column(cells.schema.get_field_index("hosts"), "hosts", pa.array(hosts, pa.int64()))


def test_recorded_values_are_written_and_read_back(tmp_path: Path) -> None:
    write_table(tmp_path, CELLS_FILE, _with_spread([2, None], [1, None]))
    assert pq.read_schema(tmp_path / CELLS_FILE).names[-2:] == ["processes", "hosts"]
    back = read_table(tmp_path, CELLS_FILE)
    assert back.column("processes").to_pylist() == [2, None]
    assert back.column("hosts").to_pylist() == [1, None]


@pytest.mark.parametrize("processes, hosts, message", [
    ([0], [1], "column processes: expected >= 1, got 0 in cell"),
    ([2], [0], "column hosts: expected >= 1, got 0 in cell"),
    ([2], [3], "column hosts: more hosts than processes (3 > 2) in cell"),
])
def test_a_spread_no_collector_writes_is_refused(tmp_path: Path, processes, hosts,
                                                 message) -> None:
    with pytest.raises(ContractError, match=r"^cells\.parquet: " + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        write_table(tmp_path, CELLS_FILE, _with_spread(processes, hosts))
    assert not (tmp_path / CELLS_FILE).exists()


def test_the_cell_page_line() -> None:
    assert measured_by(None, None) is None  # not recorded: nothing shown, never a guess
    assert measured_by(1, 1) == "1 process on 1 host"
    assert measured_by(2, 1) == "2 processes on 1 host"
    assert measured_by(4, 4) == "4 processes on 4 hosts"


def test_an_old_run_publishes_without_the_line(tmp_path: Path) -> None:
    shutil.copytree(SAMPLE, tmp_path / "data" / SAMPLE.name)
    report = build_site(tmp_path / "data", tmp_path / "site")
    assert report.errors == [] and report.published
    pages = list((tmp_path / "site").rglob("cells/*.html"))
    assert pages and not any("Measured by" in p.read_text(encoding="utf-8") for p in pages)


def test_the_columns_are_declared_optional() -> None:
    assert contract.OPTIONAL_COLUMNS[CELLS_FILE][:2] == ("processes", "hosts")
    assert {"processes", "hosts"} <= set(contract.CELLS_SCHEMA.names)
