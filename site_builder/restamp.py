"""Renewing the builder's file stats in its records after `build-site cache pull`.

Why: the builder trusts a run's digest (digests.json), a cached aggregate's entry
(runs.json) and its no-op check (state.json) only while each file keeps the size,
mtime (and ctime) and inode it recorded. A file restored by pull has a new inode, so
without this every restored run would be hashed again and every aggregate entry read
again. A record is renewed only for files pull checked equal (sha256) to the pushed
file whose stat at push time is the one the record holds; anything else is left to
fail its check, as it would have on the pushing machine.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from site_builder.buildstate import RUNS, STATE
from site_builder.sitewriter import AGGREGATES, DIGESTS, MANIFEST

Stat = list[int]  # size, mtime_ns, ctime_ns, inode

Moved = dict[str, tuple[list[int], Stat]]  # abspath -> (stat when pushed, stat now)


def _renew(moved: Moved, path: str, old: list[int], full: bool) -> list[int] | None:
    """The stat a record should now hold for path, given the one it holds (full: size,
    mtime, ctime, inode; else size, mtime, inode); None when the file is not one pull
    checked equal to a pushed file with that stat."""
    hit = moved.get(os.path.abspath(path))
    if hit is None:
        return None
    then, now = hit
    if full:
        return now if old == then else None
    return [now[0], now[1], now[3]] if old == [then[0], then[1], then[3]] else None


def restamp(cache_dir: Path, out: Path, moved: Moved) -> int:
    """Renew the stats in digests.json, runs.json and state.json for the files pull
    restored; how many entries were renewed."""
    cache_dir = Path(cache_dir)
    count = 0
    count += _edit(cache_dir / DIGESTS, lambda d: _restamp_digests(d, moved))
    count += _edit(cache_dir / RUNS, lambda d: _restamp_runs(d, moved, cache_dir))
    count += _edit(cache_dir / STATE, lambda d: _restamp_state(d, moved, cache_dir, Path(out)))
    return count


def _edit(path: Path, change: Callable[[Any], int]) -> int:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return 0
    try:
        count = change(data)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError):
        return 0  # not the shape this version writes: the builder ignores it too
    if count:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True), "utf-8")
        os.replace(tmp, path)
    return count


def _restamp_digests(known: dict[str, Any], moved: Moved) -> int:
    """digests.json: {run path: [[salt, [name, size, mtime, ctime, inode], ...], digest, edits]}
    (site_builder/load.py file_signature). A run's entry is renewed only whole."""
    count = 0
    for run, entry in known.items():
        sig = entry[0]
        new = [sig[0]]
        for item in sig[1:]:
            now = _renew(moved, posixpath.join(run, item[0]), item[1:], full=True)
            if now is None:
                break
            new.append([item[0], *now])
        else:
            if new != sig:
                entry[0] = new
                count += 1
    return count


def _restamp_runs(data: dict[str, Any], moved: Moved, cache_dir: Path) -> int:
    """runs.json: each run's entry holds its aggregate file's [size, mtime, inode]."""
    count = 0
    for run_digest, entry in data["runs"].items():
        head = cache_dir / AGGREGATES / f"{run_digest}.json"
        now = _renew(moved, str(head), entry["head"], full=False)
        if now is not None and now != entry["head"]:
            entry["head"] = now
            count += 1
    return count


def _restamp_state(data: dict[str, Any], moved: Moved, cache_dir: Path, out: Path) -> int:
    """state.json: the cache manifest's and every written file's [size, mtime, inode];
    renewed only whole (the no-op check needs every file as the last build left it)."""
    files = data["files"]
    new = {}
    for rel, seen in files.items():
        now = _renew(moved, str(out / rel), seen, full=False)
        if now is None:
            return 0
        new[rel] = now
    manifest = _renew(moved, str(cache_dir / MANIFEST), data["manifest"], full=False)
    if manifest is None:
        return 0
    data["files"], data["manifest"] = new, manifest
    return 1
