"""What makes two imported runs the same source, computable from any run directory.

Why it lives in the contract package: the importer derives a run's id from it
(``bench import``) and the site builder recognises two folders holding the
same source with it, and neither may depend on the other. Why it is computed
from what a run directory stores rather than from an importer's parsed page:
an id once derived from the parser's whole data structure moved whenever the
parser gained a field (``byline_label``, ``repeats``), so re-importing a page
landed beside the run imported before. A key over the stored measurements is
the same whichever importer version wrote the folder.

The same source means: the same published numbers for the same cells (phase,
context, concurrency and every ``pub_*`` value present), measured at the same
time. Everything else a source says (title, byline, hardware and engine
descriptions, launch command, notes, statuses' wording, table style,
whitespace, file name, where the file lies, its bytes) is not part of it.
Measured runs (with raw data) have no source key: their id is the collector's.
Another benchmark tool's output (``imported.tool`` set, issue 36) is keyed by
its file's sha256: its published figures may be few or none.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from rundir.contract import SOURCE_IMPORTED, RunInfo

KEY_COLUMNS = ("phase", "context", "concurrency")
PUBLISHED_PREFIX = "pub_"
_VERSION = 1  # of the canonical form below; bump only with a way to read the old one


def _number(value: Any) -> float | str:
    """One spelling per value: 1648 and 1648.0 are the same published number."""
    number = float(value)
    return repr(number) if math.isnan(number) or math.isinf(number) else number


def canonical_cells(rows: Iterable[Mapping[str, Any]]) -> list[list[Any]]:
    """[[phase, context, concurrency, {pub_name: value}]] sorted by cell: only the
    published values present, so a ``pub_*`` column added later (null) changes nothing."""
    out = []
    for row in rows:
        values = {name: _number(value) for name, value in row.items()
                  if name.startswith(PUBLISHED_PREFIX) and value is not None}
        out.append([str(row["phase"]), int(row["context"]), int(row["concurrency"]), values])
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def source_key_of(measured_at: str | None, rows: Iterable[Mapping[str, Any]]) -> str:
    """sha256 (hex) of the measurements: when, and every published number by cell."""
    blob = json.dumps({"v": _VERSION, "measured_at": measured_at,
                       "cells": canonical_cells(rows)},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def source_key(info: RunInfo, cells: pa.Table) -> str | None:
    """The source key of an imported run (None for a measured one)."""
    if info.source != SOURCE_IMPORTED:
        return None
    peer = info.imported
    if peer is not None and peer.tool is not None and peer.source_sha256:
        # Another tool's per-request output: its file's bytes are the source (two runs
        # of one tool at one load often publish nothing that tells them apart).
        return hashlib.sha256(f"peer:{_VERSION}:{peer.source_sha256}".encode()).hexdigest()
    names = [n for n in cells.column_names
             if n in KEY_COLUMNS or n.startswith(PUBLISHED_PREFIX)]
    return source_key_of(info.measured_at, cells.select(names).to_pylist())


__all__ = ["canonical_cells", "source_key", "source_key_of"]
