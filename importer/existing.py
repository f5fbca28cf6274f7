"""Is the source being imported already in the folder? Found by content, not by name.

Why search rather than only look at ``out/<run_id>``: a folder written by an
earlier importer may carry another id for the same source (ids were once
derived from the parser's whole data structure and moved when it gained a
field), and runs are never renamed, since their ids are in links. So every
imported run directly under ``--out`` is compared on its source key
(:mod:`rundir.identity`: the same published numbers measured at the same
time), or on the sha256 of the file it was imported from. Only runs whose
run.yaml could match are read further, so a folder of many runs stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rundir.contract import CELLS_FILE, RUN_YAML, SOURCE_IMPORTED, ContractError, RunInfo
from rundir.identity import KEY_COLUMNS, source_key, source_key_of
from rundir.io import read_run_info, read_table

# run.yaml fields compared to say what else differs (the rest is the key itself)
_FIELDS = ("model", "hardware", "engine", "parameters", "submitter", "launch_command", "notes")


@dataclass(frozen=True)
class Existing:
    """A run directory already holding the source; how it was recognised."""

    path: Path
    run_id: str
    by_file_only: bool  # the same file's bytes, but its numbers read differently now
    differs: tuple[str, ...]  # what else the folder says differently (nothing overwritten)
    measured: bool = False  # a measured run directory, recognised by its id and bytes


def read_existing(path: Path) -> tuple[RunInfo, pa.Table] | None:
    """(run.yaml, cells) of a run directory; None when it does not read under the contract."""
    try:
        return read_run_info(path), read_table(path, CELLS_FILE)
    except ContractError:
        return None


def differences(info: RunInfo, cells: pa.Table, other: RunInfo, other_cells: pa.Table,
                ) -> tuple[str, ...]:
    """Names of what two runs of the same source say differently, in run.yaml order."""
    mine, theirs = info.to_dict(), other.to_dict()
    out = [name.replace("_", " ") for name in _FIELDS if mine.get(name) != theirs.get(name)]
    if mine.get("measured_at") != theirs.get("measured_at"):  # same file, read otherwise
        out.append("measured at")
    if _statuses(cells) != _statuses(other_cells):
        out.append("cell statuses")
    if _numbers(cells) != _numbers(other_cells):  # only when matched by the file's bytes
        out.append("published numbers")
    return tuple(out)


def _statuses(cells: pa.Table) -> list[tuple]:
    cols = ["phase", "context", "concurrency", "status", "reason"]
    return sorted(tuple(r.values()) for r in cells.select(cols).to_pylist())


def _numbers(cells: pa.Table) -> list[tuple]:
    cols = [n for n in cells.column_names if n.startswith("pub_")]
    rows = cells.select(["phase", "context", "concurrency", *cols]).to_pylist()
    return sorted(tuple((k, v) for k, v in r.items() if v is not None) for r in rows)


def match(path: Path, key: str, sha256: str | None, info: RunInfo, cells: pa.Table,
          ) -> Existing | None:
    """Existing when the run directory at path holds the same source, else None."""
    got = read_existing(path)
    if got is None or got[0].source != SOURCE_IMPORTED:
        return None
    other, other_cells = got
    if source_key(other, other_cells) == key:
        return Existing(path, other.run_id, False, differences(info, cells, other, other_cells))
    same_file = other.imported is not None and other.imported.source_sha256
    if sha256 and same_file == sha256:
        return Existing(path, other.run_id, True, differences(info, cells, other, other_cells))
    return None


_IMPORTED = re.compile(r"^source:[ \t]*['\"]?" + SOURCE_IMPORTED + r"\b", re.MULTILINE)
_MEASURED_AT = re.compile(r"^measured_at:[ \t]*['\"]?(\d{4}-\d\d-\d\d)", re.MULTILINE)


def could_match(text: str, date: str, sha256: str | None) -> bool:
    """From run.yaml's text alone: can this folder hold the source? (False only when
    it surely cannot: not imported, or dated otherwise and not from the same file.)"""
    if not _IMPORTED.search(text):
        return False
    if sha256 and sha256 in text:
        return True
    dated = _MEASURED_AT.search(text)
    return dated is None or dated.group(1) == date  # no readable date: read it whole


def find_same_source(out: Path, key: str, sha256: str | None, info: RunInfo,
                     cells: pa.Table) -> Existing | None:
    """The first run directory directly under out (by name) holding this source;
    one holding the same numbers wins over one only imported from the same file.

    run.yaml's text decides cheaply which folders can match (imported, and the
    same measured date or the same file's sha256) before any is read whole.
    """
    date = (info.measured_at or "")[:10]
    same_file: Existing | None = None
    for child in sorted(Path(out).iterdir()) if Path(out).is_dir() else []:
        if child.name.startswith(".") or not (child / RUN_YAML).is_file():
            continue
        try:
            text = (child / RUN_YAML).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not could_match(text, date, sha256):
            continue
        quick = quick_key(child, text)
        if quick is not None and quick != key and not (sha256 and sha256 in text):
            continue  # surely another source: not validated whole (a few ms a folder)
        found = match(child, key, sha256, info, cells)
        if found is not None and not found.by_file_only:
            return found
        same_file = same_file or found
    return same_file


_MEASURED_AT_LINE = re.compile(r"^measured_at:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_QUOTED = re.compile(r"'([^'\\]*)'" + r'|"([^"\\]*)"')


def quick_key(run_dir: Path, text: str) -> str | None:
    """The source key from run.yaml's measured_at line and the raw cells, without
    validating either (None when that cannot be told for sure: the full read decides)."""
    lines = _MEASURED_AT_LINE.findall(text)
    if len(lines) != 1:
        return None
    value = lines[0]
    if value in ("null", "~", ""):
        measured_at = None
    elif quoted := _QUOTED.fullmatch(value):
        measured_at = quoted.group(1) if quoted.group(1) is not None else quoted.group(2)
    else:
        return None  # a plain scalar YAML may read as something else
    try:
        table = pq.read_table(run_dir / CELLS_FILE)
        names = [n for n in table.column_names if n in KEY_COLUMNS or n.startswith("pub_")]
        return source_key_of(measured_at, table.select(names).to_pylist())
    except (pa.ArrowException, OSError, KeyError, TypeError, ValueError):
        return None


def already_line(found: Existing) -> str:
    """The one line ``bench import`` prints when nothing was written."""
    if found.measured:
        return (f"already imported as {found.path}: the same run ({found.run_id}, the same "
                "files); nothing written")
    if found.by_file_only:
        what = ", ".join(found.differs) or "nothing"
        return (f"already imported as {found.path}: from the same file, which this importer "
                f"reads differently ({what}); nothing written (remove that folder to import "
                "it again)")
    line = f"already imported as {found.path}: the same source (the same published numbers)"
    if found.differs:
        return (f"{line}; this file also differs in {', '.join(found.differs)}, nothing "
                "written (remove that folder to import this version instead)")
    return f"{line}; nothing written"


__all__ = ["Existing", "already_line", "differences", "find_same_source", "match"]
