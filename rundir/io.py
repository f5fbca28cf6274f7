"""Reading and writing run directories: validated reads, atomic writes.

Every write goes to a temporary file in the same directory and is renamed
into place, so a reader never sees a half-written file under a real name.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from rundir import windows as cell_windows
from rundir.checks import KEY, TRAFFIC_KEY, key_columns, key_names, key_text
from rundir.contract import (
    CELLS_FILE,
    CLOCK_OFFSETS_FILE,
    DECODE,
    GPU_METRICS_FILE,
    IMPORT_TIER_CHUNK,
    IMPORT_TIER_GAP,
    IMPORT_TIER_REQUEST,
    REQUESTS_FILE,
    RUN_YAML,
    SERVER_METRICS_FILE,
    SOURCE_IMPORTED,
    WINDOWS_FILE,
    ContractError,
    RunInfo,
    check_table,
    empty_table,
    written_form,
)

# Imported tiers that keep per-request rows (the others: summary figures only)
PEER_REQUEST_TIERS = (IMPORT_TIER_CHUNK, IMPORT_TIER_GAP, IMPORT_TIER_REQUEST)

_SEQUENCE = itertools.count()  # temporary names: `.<name>.<pid>.<n>.tmp`
# A new file, never an existing one nor a symlink planted at its name; mode 0666
# less the umask, as for any file a program creates (no chmod needed).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _exclusive_tmp(path: Path) -> Path:
    """A new, empty temporary sibling of path that nobody else could have made:
    an existing name (or a planted symlink) is skipped, never written through."""
    for _ in range(1000):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_SEQUENCE)}.tmp")
        try:
            os.close(os.open(tmp, _CREATE, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {path}")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) on a temporary sibling of path, then rename it to path.

    The one way this project writes a file (run directories, the build cache,
    the site), so every file has the same guarantees:
    - a reader sees the old file or the new one whole, never a part: the
      temporary sibling `.<name>.<pid>.<n>.tmp` is renamed over path only
      after write(tmp) returned; if write raises, the temporary file is
      removed and path is left as it was;
    - the data is fsynced before the rename, so a power cut after the
      rename cannot leave an empty or partial file under the real name
      (a run directory holds hours of measurements; ~0.3 ms a file);
    - the temporary file is created exclusively (O_EXCL, no symlink
      followed): a name someone planted is skipped, never written through;
    - its mode is 0666 less the umask, like any new file (no chmod: a file
      written by the collector or the builder is readable as usual).
    The folder is created if missing. OSError (full disk, no permission)
    propagates; callers turn it into their one-line error.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _exclusive_tmp(path)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        if tmp.exists() or tmp.is_symlink():
            tmp.unlink()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write data to path atomically (see atomic_write)."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: Path, text: str) -> None:
    """Write text (UTF-8) to path atomically (see atomic_write)."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_run_info(run_dir: Path, info: RunInfo) -> None:
    """Validate info by the contract's own reader, then write run.yaml atomically:
    a value the reader would refuse (NaN, a 70-bit integer, a bad date) never lands."""
    path = Path(run_dir) / RUN_YAML
    clean = RunInfo.from_dict(info.to_dict(), where=str(path))
    text = yaml.safe_dump(clean.to_dict(), sort_keys=False, allow_unicode=True, width=100)
    atomic_write_text(path, text)


def write_table(run_dir: Path, name: str, table: pa.Table) -> None:
    """Validate table against the contract and write it atomically."""
    table = written_form(name, check_table(name, table))
    atomic_write(Path(run_dir) / name, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (the
    plain loader silently keeps the last one: a typo'd copy would win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: Path, label: str | None = None) -> object:
    """Parse a YAML file for the contract; every failure is one ContractError line
    naming the file (`label` replaces the path in messages) and, for bad YAML, the line."""
    where = label or str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ContractError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ContractError(f"{where}: line {line}: not UTF-8 text (byte "
                            f"0x{raw[exc.start]:02x})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", "") or "").split())
        detail = f" ({problem})" if problem else ""
        raise ContractError(f"{where}:{line} not valid YAML{detail}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of 5,000 digits
        first = " ".join(str(exc).split())[:120]
        raise ContractError(f"{where}: not valid YAML ({first})") from None


def read_run_info(run_dir: Path) -> RunInfo:
    """Read and validate run.yaml; ContractError names the file and the field."""
    path = Path(run_dir) / RUN_YAML
    if not path.is_file():
        raise ContractError(f"{path}: missing (not a run directory)")
    return RunInfo.from_dict(load_yaml(path), where=str(path))


def read_table(run_dir: Path, name: str, required: bool = True) -> pa.Table:
    path = Path(run_dir) / name
    if not path.is_file():
        if required:
            raise ContractError(f"{path}: missing")
        return empty_table(name)
    try:
        # One open file for the whole read: given a path, pyarrow opens it more than
        # once, and a collector replacing the file in between (atomic_write) handed
        # it the footer of one version and the pages of the next.
        with pa.OSFile(str(path), "rb") as source:
            table = pq.read_table(source)
    except (pa.ArrowInvalid, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ContractError(f"{path}: not a readable Parquet file ({first})") from None
    return check_table(name, table, where=str(path))


@dataclass
class RunData:
    """A validated run directory, loaded whole."""

    path: Path
    info: RunInfo
    cells: pa.Table
    requests: pa.Table
    server_metrics: pa.Table
    # GPU telemetry; empty when the run has none (the file is optional: nothing invented)
    gpu_metrics: pa.Table = field(default_factory=lambda: empty_table(GPU_METRICS_FILE))
    # Windows of repeated decode cells (--repeats k); empty: one window per cell
    windows: pa.Table = field(default_factory=lambda: empty_table(WINDOWS_FILE))
    # A many-host run's clock offsets per (decode cell, remote shard); empty: one host
    clock_offsets: pa.Table = field(default_factory=lambda: empty_table(CLOCK_OFFSETS_FILE))

    @property
    def imported(self) -> bool:
        return self.info.source == SOURCE_IMPORTED

    @property
    def peer_requests(self) -> bool:
        """Another tool's output kept per request (issue 36): its rows are judged and
        its figures computed as a measured run's, at what its tier allows."""
        peer = self.info.imported
        return (self.imported and peer is not None and peer.tool is not None
                and peer.tier in PEER_REQUEST_TIERS)


def read_run(run_dir: Path) -> RunData:
    """Read and validate a whole run directory; ContractError names what is wrong."""
    run_dir = Path(run_dir)
    info = read_run_info(run_dir)
    imported = info.source == SOURCE_IMPORTED
    cells = read_table(run_dir, CELLS_FILE)
    requests = read_table(run_dir, REQUESTS_FILE, required=not imported)
    orphan = cell_without_row(cells, requests)
    if orphan is not None:
        key, rows = orphan
        raise ContractError(
            f"{run_dir / REQUESTS_FILE}: columns {key_names(key)}: cell "
            f"({key_text(list(key))}) has {rows} request row(s) but no row in {CELLS_FILE} "
            "(each request belongs to a cell of the run)")
    metrics = read_table(run_dir, SERVER_METRICS_FILE, required=False)
    gpu = read_table(run_dir, GPU_METRICS_FILE, required=False)
    return RunData(run_dir, info, cells, requests, metrics, gpu,
                   read_windows(run_dir, cells, info), read_clock_offsets(run_dir, cells))


def read_windows(run_dir: Path, cells: pa.Table, info: RunInfo | None = None) -> pa.Table:
    """windows.parquet (empty if absent), checked against cells.parquet: window ids,
    and with run.yaml's `info` each cell's windows as the collector cuts them."""
    table = read_table(run_dir, WINDOWS_FILE, required=False)
    p = info.parameters if info is not None else None
    repeats, duration = (p.repeats or 1, p.duration_s) if p is not None else (None, None)
    if len(table) and (problem := cell_windows.problem(table, cells, repeats, duration)):
        raise ContractError(f"{Path(run_dir) / WINDOWS_FILE}: {problem}")
    return table


def read_clock_offsets(run_dir: Path, cells: pa.Table) -> pa.Table:
    """clock_offsets.parquet (empty if absent); each row's cell a decode cell of cells.parquet."""
    table = read_table(run_dir, CLOCK_OFFSETS_FILE, required=False)
    decode = {key for key in zip(*(cells.column(n).to_pylist() for n in KEY), strict=True)
              if key[0] == DECODE}
    for row, key in enumerate(zip(*(table.column(n).to_pylist() for n in KEY), strict=True)):
        if key not in decode:
            raise ContractError(
                f"{Path(run_dir) / CLOCK_OFFSETS_FILE}: columns phase, context, concurrency: "
                f"row {row}: cell ({', '.join(map(str, key))}) is not a decode cell of {CELLS_FILE}")
    return table


def cell_without_row(cells: pa.Table, requests: pa.Table) -> tuple[tuple, int] | None:
    """(cell key, request rows) of the first cell, in key order, that holds request
    rows but no row in cells.parquet; None when every request row has its cell.

    Why: the builder publishes cells from cells.parquet, so a hand-deleted cell
    row would silently drop a measured cell whose raw rows are still there. A
    pending cell row is a row (the collector's resume moves such raw rows to
    the superseded file); only a missing one is refused. Vectorised: the
    request keys are grouped first (one row per cell), then anti-joined.
    """
    if not len(requests):
        return None
    keys = list(key_columns(requests))
    # Empty key parts (every matrix cell's traffic columns) as -1: a join never matches nulls.
    counts = _keys_filled(requests, keys).group_by(keys).aggregate([([], "count_all")])
    missing = counts.join(_keys_filled(cells, keys), keys=keys, join_type="left anti")
    if not len(missing):
        return None
    first = missing.sort_by([(k, "ascending") for k in keys]).slice(0, 1).to_pylist()[0]
    key = tuple(None if k in TRAFFIC_KEY and first[k] == -1 else first[k] for k in keys)
    return key, int(first["count_all"])


def _keys_filled(table: pa.Table, keys: list[str]) -> pa.Table:
    """`table`'s key columns, the traffic ones' empty values as -1 (no real value is negative)."""
    return pa.table({k: pc.fill_null(table.column(k), -1) if k in TRAFFIC_KEY else table.column(k)
                     for k in keys})


def is_run_dir(path: Path) -> bool:
    return (Path(path) / RUN_YAML).is_file()
