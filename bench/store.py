"""The run directory as the collector fills it, cell by cell.

After every cell the whole directory is rewritten atomically (each file
to a temporary name, then renamed), so a run stopped at any moment, even
by a killed process, leaves a valid directory holding every cell measured
so far, with the rest still marked pending for `--resume`.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bench.cells import CellOutcome
from bench.plan import Cell
from bench.records import records_table
from rundir.contract import (
    CELLS_FILE,
    CELLS_SCHEMA,
    PENDING,
    REQUESTS_FILE,
    SERVER_METRICS_FILE,
    RunInfo,
    empty_table,
)
from rundir.io import read_table, write_run_info, write_table


class RunStore:
    def __init__(self, run_dir: Path, info: RunInfo, cells: list[Cell]) -> None:
        self.run_dir = Path(run_dir)
        self.info = info
        self.rows: dict[tuple[str, int, int], dict] = {}
        for cell in cells:
            self.rows[cell.key] = _cell_row(cell.key, cell.status, cell.reason)
        self.requests: list[pa.Table] = []
        self.resumed_metrics: pa.Table = empty_table(SERVER_METRICS_FILE)
        self.server_metrics: pa.Table = self.resumed_metrics

    def adopt_finished(self) -> set[tuple[str, int, int]]:
        """For --resume: keep the cells already measured in run_dir and their
        raw requests; return their keys so they are not run again."""
        old_cells = read_table(self.run_dir, CELLS_FILE)
        old_requests = read_table(self.run_dir, REQUESTS_FILE, required=False)
        self.resumed_metrics = read_table(self.run_dir, SERVER_METRICS_FILE, required=False)
        self.server_metrics = self.resumed_metrics
        done: set[tuple[str, int, int]] = set()
        for row in old_cells.to_pylist():
            key = (row["phase"], row["context"], row["concurrency"])
            if row["status"] != PENDING and key in self.rows:
                self.rows[key] = row
                done.add(key)
        if len(old_requests) and done:
            keys = pa.array([f"{p}|{c}|{n}" for p, c, n in done])
            rk = pc.binary_join_element_wise(
                old_requests["phase"], pc.cast(old_requests["context"], pa.string()),
                pc.cast(old_requests["concurrency"], pa.string()), "|",
            )
            self.requests.append(old_requests.filter(pc.is_in(rk, value_set=keys)))
        return done

    def record(self, cell: Cell, outcome: CellOutcome) -> None:
        row = _cell_row(cell.key, outcome.status, outcome.reason)
        if outcome.window:
            row["window_start_ns"], row["window_end_ns"] = outcome.window
        row["warmup_s"] = outcome.warmup_s
        row["token_counting"] = outcome.counting
        row["client_bound"] = outcome.client_bound
        self.rows[cell.key] = row
        if outcome.records:
            self.requests.append(records_table(outcome.records))

    def set_status(self, cell: Cell) -> None:
        self.rows[cell.key] = _cell_row(cell.key, cell.status, cell.reason)

    def flush(self, sampled: pa.Table | None = None) -> None:
        """Write everything; `sampled` is this session's whole gauge table."""
        if sampled is not None:
            self.server_metrics = pa.concat_tables([self.resumed_metrics, sampled])
        if self.requests:
            combined = pa.concat_tables(self.requests).combine_chunks()
            self.requests = [combined]
        else:
            combined = empty_table(REQUESTS_FILE)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_table(self.run_dir, REQUESTS_FILE, combined)
        write_table(self.run_dir, SERVER_METRICS_FILE, self.server_metrics)
        cells = pa.Table.from_pylist(list(self.rows.values()), schema=CELLS_SCHEMA)
        write_table(self.run_dir, CELLS_FILE, cells)
        write_run_info(self.run_dir, self.info)  # last: run.yaml marks a run directory


def _cell_row(key: tuple[str, int, int], status: str, reason: str | None) -> dict:
    row = {name: None for name in CELLS_SCHEMA.names}
    row.update(phase=key[0], context=key[1], concurrency=key[2], status=status, reason=reason)
    return row
