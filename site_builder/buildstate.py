"""What a rebuild remembers from the last build, so that its cost follows what changed.

Two files in the build cache (never published; `sitewriter`):

- `runs.json` (`RunIndex`): every cached run's run.yaml (as validated) and its
  aggregate's cells, by the run's digest, in one file. A rebuild of a thousand
  runs then reads one file instead of a thousand YAML files (parsing YAML was
  ~20 ms a run) and a thousand aggregate files. An entry is only as good as
  the digest it is filed under, which covers the bytes of every contract
  file of the run and the builder's code (`aggregate.code_salt`): a changed
  run has another digest, hence no entry, and is read and aggregated again.
- `state.json` (`BuildState`): the key of the last build's inputs and the
  size and mtime of every file it wrote. When a build finds the same key (the
  builder's code, templates and static files, the methodology, the prices, the
  SLO limits, the folders, and every run's path and digest) and every
  file it wrote unchanged on disk, there is nothing to do: it returns the last
  report without reading a run or rendering a page. A build that reported an
  error is never skipped this way (its cause may have been passing).

Runs are known by their digests, which `load.discover` reuses while a run's
files keep their size, mtime, ctime and inode (docs/site.md). Deleting the
build cache forces a full build.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

from rundir.contract import ContractError, RunInfo
from site_builder.aggregate import AggregateCache, RunAggregate
from site_builder.sitewriter import digest, save

RUNS = "runs.json"
STATE = "state.json"
FORMAT = 1


class RunIndex:
    """run.yaml and aggregate cells of every cached run, by digest, in one file. The
    aggregate cache's own files stay authoritative: an entry is used only while the
    run's cells file has the size, mtime and inode it had when the entry was made,
    and its details file is there."""

    def __init__(self, cache_dir: Path, cache: AggregateCache) -> None:
        self.path = Path(cache_dir) / RUNS
        self.cache = cache
        try:
            data = json.loads(self.path.read_text("utf-8"))
            runs = data["runs"] if data.get("format") == FORMAT else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            runs = {}
        self.entries: dict[str, Any] = runs if isinstance(runs, dict) else {}
        self.changed = False

    def get(self, run_digest: str) -> tuple[RunInfo, RunAggregate] | None:
        """(info, aggregate without details) of a run filed under this digest, or None."""
        entry = self.entries.get(run_digest)
        if (not isinstance(entry, dict) or entry.get("head") != _stat(self.cache.head_path(run_digest))
                or not self.cache.has_details(run_digest)):
            return None
        try:
            info = _filed_info(entry["info"])
            agg = RunAggregate.from_json(entry["agg"])
        except (ContractError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if agg.digest != run_digest:
            return None
        return info, agg

    def put(self, info: RunInfo, agg: RunAggregate) -> None:
        """File a run read and validated this build (its details are not kept here)."""
        as_dict = info.to_dict()
        try:
            if RunInfo.from_dict(as_dict) != info:  # never file what would read back otherwise
                return
        except ContractError:
            return
        head = agg.head()
        on_file = _stat(self.cache.head_path(agg.digest))
        if on_file is None:
            return
        self.entries[agg.digest] = {"info": as_dict, "agg": head.to_json(), "head": on_file}
        self.changed = True

    def save(self, keep: set[str]) -> None:
        """Write the file, less the runs no longer found (only when something changed)."""
        gone = set(self.entries) - keep
        if not (self.changed or gone):
            return
        runs = {d: e for d, e in self.entries.items() if d in keep}
        save(self.path, json.dumps({"format": FORMAT, "runs": runs}, separators=(",", ":"),
                                   allow_nan=False).encode())


def _filed_info(data: Any) -> RunInfo:
    """The RunInfo of a run.yaml this index filed. `put` files only what RunInfo.from_dict
    read from the run's directory (the contract's checks passed there) and reads back as
    the same RunInfo, so the dataclasses are rebuilt here without the checks again
    (~1 ms a run, a second at 1,000 runs), the way from_dict converts (a float field's
    number as float). Anything else (an entry of another shape) goes through from_dict."""
    try:
        return _rebuild(RunInfo, data)
    except (TypeError, ValueError, KeyError, AttributeError):
        return RunInfo.from_dict(data)


@functools.cache
def _plan(cls: Any) -> tuple[tuple[str, Any], ...]:
    """(field, how to convert it) of a dataclass: a dataclass, ("list", item),
    ("optional", inner), float (an int or float, as float), or str, int or bool
    (that type exactly)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _how(hints[f.name])) for f in dataclasses.fields(cls))


def _how(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return ("optional", _how(args[0]))
    if origin is list:
        return ("list", _how(typing.get_args(tp)[0]))
    if dataclasses.is_dataclass(tp):
        return tp
    if tp in (str, int, bool, float):
        return tp
    raise TypeError(f"no trusted conversion for {tp!r}")


def _convert(how: Any, value: Any) -> Any:
    if how in (str, int, bool):
        if type(value) is not how:  # JSON gives these types exactly
            raise TypeError("another type")
        return value
    if how is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("not a number")
        return float(value)
    if isinstance(how, tuple):
        kind, inner = how
        if kind == "optional":
            return None if value is None else _convert(inner, value)
        if not isinstance(value, list):
            raise TypeError("not a list")
        return [_convert(inner, v) for v in value]
    return _rebuild(how, value)


def _rebuild(cls: Any, data: Any) -> Any:
    if not isinstance(data, dict):
        raise TypeError("not a mapping")
    plan = _plan(cls)
    if not set(data) <= {name for name, _ in plan}:
        raise TypeError("unknown field")
    return cls(**{name: _convert(how, data[name]) for name, how in plan if name in data})


def build_key(*parts: Any) -> str:
    """sha256 over the parts (JSON, so no two different inputs read the same)."""
    return digest(json.dumps(parts, sort_keys=True, default=repr).encode())


def _stat(path: Path) -> list[int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class BuildState:
    """The last build's key, report and written files (size, mtime, inode)."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = Path(cache_dir) / STATE
        try:
            data = json.loads(self.path.read_text("utf-8"))
            self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.data = {}

    def unchanged(self, key: str, out: Path, manifest: dict[str, str],
                  manifest_path: Path) -> dict[str, Any] | None:
        """The last report when the last build had this key, reported no error, and
        every file it wrote (the manifest's, no more and no fewer) is on disk as it
        left it, the manifest too; else None."""
        d = self.data
        files = d.get("files")
        if (d.get("format") != FORMAT or d.get("key") != key or not isinstance(files, dict)
                or not isinstance(d.get("report"), dict) or d["report"].get("errors")
                or set(files) != set(manifest) or d.get("manifest") != _stat(manifest_path)):
            return None
        for rel, seen in files.items():
            if _stat(out / rel) != seen:
                return None
        return d["report"]

    def save(self, key: str, out: Path, manifest: dict[str, str], manifest_path: Path,
             report: dict[str, Any], seen: dict[str, list[int]] | None = None) -> None:
        """Remember this build (its files and manifest as they are now); `seen`: the
        files the writer found current this build and did not write, as it saw them."""
        seen = seen or {}
        files = {rel: seen.get(rel) or _stat(out / rel) for rel in manifest}
        save(self.path, json.dumps({"format": FORMAT, "key": key, "report": report,
                                    "manifest": _stat(manifest_path), "files": files},
                                   separators=(",", ":")).encode())
