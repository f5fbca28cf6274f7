"""The run directory as the collector fills it, cell by cell.

After every finished cell the whole directory is rewritten atomically (each
file to a temporary name, then renamed), so a run stopped at any moment,
even by a killed process, leaves a valid directory holding every cell
measured so far, with the rest still marked pending for `--resume`.

requests.parquet holds the raw rows of the attempt each cell's row in
cells.parquet describes, and nothing else: the builder computes a cell's
figures from all of its rows there. When a cell is measured again (an Error
cell under `--retry-errors`, or a pending cell that has rows left from an
attempt cut short), the earlier attempt's rows move to
superseded_requests.parquet, which the builder never reads: kept, never
mixed into the new attempt's figures.

Files are written in the order superseded, requests, metrics, cells,
windows, run.yaml: a write that fails part-way (a full disk) leaves at worst rows of
an attempt that cells.parquet does not claim yet, never a cell claimed
without its rows. Around them, manifest.json (rundir/manifest.py) is removed
first and written last, with the sha256 of every file: a flush cut short
leaves no manifest (the run reads as one from before manifests), never one
that disagrees with the collector's own files; a run edited by hand and then
resumed stays marked as edited (the resumed store carries what it found).

This is also where the run's secrets are removed from what it writes, once
for every path a string takes (a served model name holding the key, a
server's error text, a run card): every string of run.yaml and every string
column of every table passes `rundir.redact.redact` with the run's literal
secrets; the kept answer tails (model output, 2 KiB each) pass the literal
secrets only, since the shapes would cost ~4 ms a tail. A cell's raw rows
are redacted as they enter the store (once; they are rewritten at every
flush), the other tables as they are written, each distinct string once (a
gauge table repeats a handful of names and labels).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bench.core.plan import Cell
from bench.measure.cells import CellOutcome
from rundir.contract import (
    CELLS_FILE,
    CELLS_SCHEMA,
    CLOCK_OFFSETS_FILE,
    CLOCK_OFFSETS_SCHEMA,
    GPU_METRICS_FILE,
    PENDING,
    REQUESTS_FILE,
    RUN_YAML,
    SERVER_METRICS_FILE,
    SUPERSEDED_REQUESTS_FILE,
    WINDOWS_FILE,
    WINDOWS_SCHEMA,
    RunInfo,
    cell_key,
    empty_table,
    key_fields,
    matrix_key,
)
from rundir.io import read_table, write_run_info, write_table
from rundir.manifest import MANIFEST_FILE, Edit, carry, check, seal, unseal
from rundir.redact import redact, redact_literals, redact_tree
from rundir.windows import by_cell

Key = tuple  # rundir.contract.cell_key: (phase, context, concurrency, *TRAFFIC_KEY's parts)
_OUR_FILES = (RUN_YAML, CELLS_FILE, REQUESTS_FILE, SERVER_METRICS_FILE, SUPERSEDED_REQUESTS_FILE,
              GPU_METRICS_FILE, WINDOWS_FILE, CLOCK_OFFSETS_FILE, MANIFEST_FILE)
_ANSWER_TEXT = frozenset({"content_tail", "reasoning_tail"})  # literal secrets only
# rundir.io.atomic_write's temporary names: ".<name>.<random>.tmp"
_STALE_TMP = re.compile(r"^\.(?:" + "|".join(re.escape(n) for n in _OUR_FILES) + r")\..+\.tmp$")


class RunStore:
    """Cells and raw rows of one run directory, in memory, flushed whole;
    `secrets`: the run's literal secrets, removed from everything written."""

    def __init__(self, run_dir: Path, info: RunInfo, cells: list[Cell],
                 secrets: Iterable[str] = ()) -> None:
        self.run_dir = Path(run_dir)
        self.info = info
        self.secrets = tuple(secrets)
        self._clean: dict[str, str] = {}  # string -> redacted, for the repeating tables
        self.rows: dict[Key, dict] = {}
        for cell in cells:
            self.rows[cell.key] = _cell_row(cell.key, cell.status, cell.reason)
        self.requests: pa.Table = empty_table(REQUESTS_FILE)
        self.superseded: pa.Table = empty_table(REQUESTS_FILE)
        self._superseded_dirty = False
        self.resumed_metrics: pa.Table = empty_table(SERVER_METRICS_FILE)
        self.server_metrics: pa.Table = self.resumed_metrics
        self.resumed_gpu: pa.Table = empty_table(GPU_METRICS_FILE)  # earlier sessions' telemetry
        self.windows: dict[Key, list[tuple[int, int]]] = {}  # cells measured with --repeats k > 1
        self.clocks: dict[Key, list[dict]] = {}  # cells measured on many hosts (--shard i/N)
        # Files found edited when the run was resumed: every manifest written keeps them
        self.edited: tuple[Edit, ...] = ()

    @classmethod
    def resume(cls, run_dir: Path, info: RunInfo, secrets: Iterable[str] = ()) -> RunStore:
        """Everything already in run_dir, every cell row and raw row kept as
        read (raw rows redacted with this session's secrets too); ContractError
        names a file that does not meet the contract."""
        store = cls(run_dir, info, [], secrets)
        store.edited = carry(check(store.run_dir))  # before anything is rewritten
        for row in read_table(store.run_dir, CELLS_FILE).to_pylist():
            store.rows[cell_key(row)] = row
        store.requests = store._redacted(read_table(store.run_dir, REQUESTS_FILE, required=False))
        superseded = read_superseded(store.run_dir)
        store.superseded = store._redacted(superseded)
        store._superseded_dirty = store.superseded is not superseded  # rewritten only if changed
        store.resumed_metrics = read_table(store.run_dir, SERVER_METRICS_FILE, required=False)
        store.server_metrics = store.resumed_metrics
        store.resumed_gpu = read_table(store.run_dir, GPU_METRICS_FILE, required=False)
        store.windows = {matrix_key(*k): v for k, v in
                         by_cell(read_table(store.run_dir, WINDOWS_FILE, required=False)).items()}
        for row in read_table(store.run_dir, CLOCK_OFFSETS_FILE, required=False).to_pylist():
            key = matrix_key(row.pop("phase"), row.pop("context"), row.pop("concurrency"))
            store.clocks.setdefault(key, []).append(row)
        return store

    def add_planned(self, cells: list[Cell]) -> None:
        """Cells of the plan the directory does not hold yet (an extended
        plan); a pending cell the plan now skips takes the plan's status."""
        for cell in cells:
            row = self.rows.get(cell.key)
            if row is None or (row["status"] == PENDING and cell.status != PENDING):
                self.rows[cell.key] = _cell_row(cell.key, cell.status, cell.reason)

    def request_ids(self) -> set[str]:
        """Every request id already used in this run directory."""
        ids = self.requests.column("request_id").to_pylist()
        return set(ids) | set(self.superseded.column("request_id").to_pylist())

    def record(self, cell: Cell, outcome: CellOutcome, processes: int | None = None,
               hosts: int | None = None) -> None:
        """A finished cell replaces the cell's row and its raw rows; rows of
        the attempt it replaces move to the superseded file. `processes`, `hosts`:
        what the cell's streams were spread over (None: not known)."""
        if outcome.status == PENDING:
            raise ValueError("an interrupted cell is not recorded: it stays as it was")
        row = _cell_row(cell.key, outcome.status, outcome.reason)
        if outcome.window:
            row["window_start_ns"], row["window_end_ns"] = outcome.window
        row["warmup_s"] = outcome.warmup_s
        row["token_counting"] = outcome.counting
        row["client_bound"] = outcome.client_bound
        row["processes"], row["hosts"] = processes, hosts
        for name, value in (outcome.server or {}).items():  # a traffic cell's engine-side reuse
            row[name] = value
        if self.info.parameters.prompt_source is not None:  # empty for filler: rows as they were
            row["prompt_source"] = self.info.parameters.prompt_source
            row["prompt_seed"] = self.info.parameters.prompt_seed
        self.windows.pop(cell.key, None)  # a re-measured cell's windows are its new attempt's
        if outcome.windows:
            self.windows[cell.key] = list(outcome.windows)
        self.clocks.pop(cell.key, None)
        if outcome.clocks:
            self.clocks[cell.key] = list(outcome.clocks)
        mine = _key_mask(self.requests, cell.key)
        if len(self.requests) and pc.any(mine).as_py():
            old = self.requests.filter(mine)
            self.requests = self.requests.filter(pc.invert(mine))
            self.superseded = _concat(self.superseded, old)
            self._superseded_dirty = True
        if outcome.table is not None and len(outcome.table):
            self.requests = _concat(self.requests, self._redacted(outcome.table))
        self.rows[cell.key] = row

    def flush(self, sampled: pa.Table | None = None, gpu: pa.Table | None = None) -> None:
        """Write everything; `sampled` is this session's whole gauge table, `gpu`
        its whole GPU telemetry (None: not sampled, gpu_metrics.parquet untouched).
        An OSError (full disk, permissions) leaves every file either as it
        was or whole."""
        if sampled is not None:
            self.server_metrics = pa.concat_tables([self.resumed_metrics, sampled])
        with _naming(self.run_dir):
            self.run_dir.mkdir(parents=True, exist_ok=True)
        with _naming(self.run_dir / MANIFEST_FILE):
            unseal(self.run_dir)  # first: a flush cut short leaves no stale manifest
        if self._superseded_dirty:
            with _naming(self.run_dir / SUPERSEDED_REQUESTS_FILE):
                write_table(self.run_dir, SUPERSEDED_REQUESTS_FILE, self.superseded)
            self._superseded_dirty = False
        with _naming(self.run_dir / REQUESTS_FILE):
            write_table(self.run_dir, REQUESTS_FILE, self.requests)
        with _naming(self.run_dir / SERVER_METRICS_FILE):
            write_table(self.run_dir, SERVER_METRICS_FILE, self._redacted(self.server_metrics, True))
        if gpu is not None:
            gpu = self._redacted(pa.concat_tables([self.resumed_gpu, gpu]), True)
            with _naming(self.run_dir / GPU_METRICS_FILE):
                write_table(self.run_dir, GPU_METRICS_FILE, gpu)
        cells = pa.Table.from_pylist(list(self.rows.values()), schema=CELLS_SCHEMA)
        with _naming(self.run_dir / CELLS_FILE):
            write_table(self.run_dir, CELLS_FILE, self._redacted(cells, True))
        self._flush_windows()
        self._flush_clocks()
        info = redact_tree(self.info, self.secrets)  # every string field, the served name too
        with _naming(self.run_dir / RUN_YAML):
            write_run_info(self.run_dir, info)  # run.yaml marks a run directory
        with _naming(self.run_dir / MANIFEST_FILE):
            seal(self.run_dir, self.edited)  # last: the sha256 of every file above

    def _flush_windows(self) -> None:
        """windows.parquet after cells.parquet (a cut write leaves a cell read as one
        window over its span, never windows without their cell); a run without
        repeated cells gets no file, so a k = 1 run directory is what it was."""
        path = self.run_dir / WINDOWS_FILE
        if not self.windows and not path.exists():
            return
        rows = [dict(phase=key[0], context=key[1], concurrency=key[2], window=i,  # matrix cells only
                     start_ns=start, end_ns=end)
                for key, bounds in self.windows.items() for i, (start, end) in enumerate(bounds)]
        with _naming(path):
            write_table(self.run_dir, WINDOWS_FILE, pa.Table.from_pylist(rows, WINDOWS_SCHEMA))

    def _flush_clocks(self) -> None:
        """clock_offsets.parquet after cells.parquet; only a many-host run has one."""
        path = self.run_dir / CLOCK_OFFSETS_FILE
        if not self.clocks and not path.exists():
            return
        rows = [dict(phase=key[0], context=key[1], concurrency=key[2], **row)
                for key, shards in self.clocks.items() for row in shards]
        table = self._redacted(pa.Table.from_pylist(rows, CLOCK_OFFSETS_SCHEMA), True)
        with _naming(path):
            write_table(self.run_dir, CLOCK_OFFSETS_FILE, table)

    def _redacted(self, table: pa.Table, remember: bool = False) -> pa.Table:
        """table with every string redacted; `remember`: keep each distinct
        string's result for the next flush (tables whose strings repeat)."""
        shared = self._clean if remember else {}
        for i, column in enumerate(table.schema):
            if not pa.types.is_string(column.type) or not len(table):
                continue
            values = pc.unique(table.column(i))
            texts = values.to_pylist()
            answer = column.name in _ANSWER_TEXT
            scrub, memo = (redact_literals, {}) if answer else (redact, shared)
            for text in texts:
                if text is not None and text not in memo:
                    memo[text] = scrub(text, self.secrets)
            clean = [None if text is None else memo[text] for text in texts]
            if clean != texts:
                where = pc.index_in(table.column(i), value_set=values)
                table = table.set_column(i, column, pc.take(pa.array(clean, column.type), where))
        return table


def read_superseded(run_dir: Path) -> pa.Table:
    """superseded_requests.parquet, validated like requests.parquet (empty if absent)."""
    return read_table(run_dir, SUPERSEDED_REQUESTS_FILE, required=False)


def clean_stale_temps(run_dir: Path) -> list[str]:
    """Remove temporary files a killed writer left (`.<name>.<random>.tmp` of
    our own files only); call with the run's lock held. Returns their names."""
    removed = []
    for path in sorted(Path(run_dir).iterdir()):
        if _STALE_TMP.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def session_tag(run_id: str, used_ids: set[str]) -> str:
    """The prefix of this session's request ids (`<tag>-<n>`). A new run uses
    its run id; the k-th resume uses `<run id>.r<k>`, k past every earlier
    session's, so ids stay unique in the run however often it is resumed."""
    if not used_ids:
        return run_id
    pattern = re.compile(re.escape(run_id) + r"\.r([0-9]+)-")
    k = max((int(m.group(1)) for i in used_ids if (m := pattern.match(i))), default=0) + 1
    while any(i.startswith(f"{run_id}.r{k}-") for i in used_ids):  # pragma: no cover
        k += 1
    return f"{run_id}.r{k}"


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError from writing `path` names it and says the system's reason
    plainly (pyarrow words ENOSPC as "Error writing bytes to file. Detail: ...")."""
    try:
        yield
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
        raise OSError(exc.errno, reason, str(path)) from None


def _key_mask(table: pa.Table, key: Key) -> pa.ChunkedArray:
    phase, context, concurrency = key[:3]
    mask = pc.and_(
        pc.and_(pc.equal(table["phase"], phase), pc.equal(table["context"], context)),
        pc.equal(table["concurrency"], concurrency),
    )
    for name, value in list(key_fields(key).items())[3:]:
        if name not in table.column_names:
            continue  # pragma: no cover - the store's tables hold the full schema
        column = table[name]
        same = pc.is_null(column) if value is None else pc.fill_null(pc.equal(column, value), False)
        mask = pc.and_(mask, same)
    return mask


def _concat(a: pa.Table, b: pa.Table) -> pa.Table:
    """Both already in the contract's schema (read validated, or a cell outcome's table)."""
    if not len(a):
        return b
    return pa.concat_tables([a, b]).combine_chunks()


def _cell_row(key: Key, status: str, reason: str | None) -> dict:
    row = {name: None for name in CELLS_SCHEMA.names}
    row.update(key_fields(key), status=status, reason=reason)
    return row
