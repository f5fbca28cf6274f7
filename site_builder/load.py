"""Find run directories under a data folder and validate them against the contract.

Finding is cheap (walk + hash, and the hash is skipped for files whose size,
times and inode are those of the last build); validating reads every
Parquet file, so it happens only for runs whose aggregates are not cached yet. A broken run is
reported as one line naming the file and the field; it never stops the
good runs from being published.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rundir import contract, identity
from rundir.contract import ContractError, RunInfo
from rundir.io import RunData, read_run, read_run_info, read_table

RUN_FILES = (
    contract.RUN_YAML,
    contract.CELLS_FILE,
    contract.REQUESTS_FILE,
    contract.SERVER_METRICS_FILE,
    contract.GPU_METRICS_FILE,  # optional; part of the digest, so new telemetry re-aggregates
    contract.WINDOWS_FILE,  # optional (--repeats k > 1); absent: the digest is as before
)


class LoadError(Exception):
    """A problem with the data folder itself (missing, empty): one line."""


@dataclass(frozen=True)
class RunSource:
    """A run directory found under the data folder, before validation."""

    path: Path  # as reachable from the current directory (kept relative for messages)
    digest: str  # sha256 over the run's contract files: the cache key
    problem: str | None = None  # set when the run must not even be read (one line)

    def files(self) -> list[Path]:
        """The contract files present in the run directory."""
        return [self.path / n for n in RUN_FILES if (self.path / n).is_file()]


def find_run_dirs(data_dir: Path, exclude: Path | None = None) -> list[Path]:
    """Every directory under data_dir holding a run.yaml, in a stable order (see search)."""
    return search(data_dir, exclude)[0]


def search(data_dir: Path, exclude: Path | None = None,
           ) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(run directories under data_dir, [(symlink, one-line problem)]), each sorted.

    A run directory's own subfolders are not searched, hidden folders are
    skipped, and so is `exclude` (the output folder, which holds raw copies).
    A symlinked folder is treated as a symlinked contract file is: followed
    when its target lies inside the data folder (a folder the search reaches
    anyway is not searched twice, so an alias publishes its run once, where
    it lies), refused when it leads outside (a shared data folder must not
    make the builder publish a folder from elsewhere) or nowhere. Refused
    links are returned, never dropped without a word.
    """
    data_dir = Path(data_dir)
    root = data_dir.resolve()
    skip = exclude.resolve() if exclude is not None else None
    found: list[Path] = []
    refused: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    starts = [data_dir]
    while starts:
        links: list[Path] = []
        for start in starts:
            for top, dirs, files in os.walk(start):
                here = Path(top)
                real = here.resolve()
                if real in seen or _excluded(real, skip, root):
                    dirs[:] = []
                    continue
                seen.add(real)
                if contract.RUN_YAML in files:
                    found.append(here)
                    dirs[:] = []
                    continue
                names = sorted(d for d in dirs if not d.startswith("."))
                links += [here / d for d in names if (here / d).is_symlink()]
                dirs[:] = [d for d in names if not (here / d).is_symlink()]
                refused += [(here / f, f"{here / f}: a symlink that leads nowhere")
                            for f in sorted(files) if not f.startswith(".") and _dangling(here / f)]
        starts = []
        for link in links:
            problem = _outside(link, root, "a symlinked folder")
            if problem is None:
                starts.append(link)
            else:
                refused.append((link, problem))
    return sorted(found, key=lambda p: p.as_posix()), sorted(refused, key=lambda r: r[0].as_posix())


def _excluded(real: Path, skip: Path | None, root: Path) -> bool:
    """True for the excluded folder, and for a folder below it when it lies inside
    the data folder (a link into it); --data may itself lie inside --out."""
    if skip is None:
        return False
    return real == skip or (skip in real.parents and root in skip.parents)


def _dangling(path: Path) -> bool:
    return os.path.islink(path) and not os.path.exists(path)


def _outside(path: Path, root: Path, what: str) -> str | None:
    """One line when the symlink `path` leads nowhere or outside root, else None."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return f"{path}: a symlink that leads nowhere"
    if real != root and root not in real.parents:
        return f"{path}: {what} leading outside the data folder (to {real}); refused"
    return None


def content_digest(run_dir: Path, salt: str = "") -> str:
    """sha256 over the names and bytes of the run's contract files (plus a salt)."""
    h = hashlib.sha256(salt.encode())
    for name in RUN_FILES:
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        h.update(name.encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def file_signature(run_dir: Path, salt: str = "") -> list[Any]:
    """What identifies the run's files without reading them: name, size, mtime,
    ctime and inode of each (an atomic rewrite or an in-place edit changes one)."""
    sig: list[Any] = [salt]
    for name in RUN_FILES:
        try:
            st = os.stat(Path(run_dir) / name)
        except FileNotFoundError:
            continue
        sig.append([name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return sig


_DIGEST = re.compile(r"[0-9a-f]{64}")


def escaping_file(run_dir: Path, root: Path) -> str | None:
    """A one-line problem when one of the run's contract files is a symlink whose
    target lies outside the data folder (a shared data folder must not make the
    builder read, and publish as raw download, a file from elsewhere)."""
    for name in RUN_FILES:
        path = Path(run_dir) / name
        if path.is_symlink() and (problem := _outside(path, root, "a symlink")) is not None:
            return problem
    return None


def discover(data_dir: Path, *, salt: str = "", exclude: Path | None = None,
             known: dict[str, Any] | None = None) -> list[RunSource]:
    """Find and fingerprint the runs under data_dir; LoadError if there are none.

    A symlink the search refuses comes back as a source with its problem
    set, so the build reports it in one line like any run it cannot read.

    `known` maps a run path to [file_signature, digest] from an earlier build:
    a run whose signature is unchanged keeps its digest without re-reading
    its files (hashing gigabytes of raw data would dominate a rebuild). It
    is updated in place to the runs found now.
    """
    data_dir = Path(data_dir)
    if not data_dir.exists():
        raise LoadError(f"{data_dir}: no such folder")
    if not data_dir.is_dir():
        raise LoadError(f"{data_dir}: not a folder")
    dirs, refused = search(data_dir, exclude=exclude)
    if not dirs and not refused:
        raise LoadError(
            f"{data_dir}: no run directories found (a run directory holds a {contract.RUN_YAML})"
        )
    root = data_dir.resolve()
    fresh: dict[str, Any] = {}
    out = [RunSource(link, "", problem) for link, problem in refused]
    for d in dirs:
        problem = escaping_file(d, root)
        if problem is not None:
            out.append(RunSource(d, "", problem))
            continue
        if known is None:
            out.append(RunSource(d, content_digest(d, salt)))
            continue
        sig = file_signature(d, salt)
        hit = known.get(str(d))
        digest = hit[1] if isinstance(hit, list) and len(hit) == 2 and hit[0] == sig else None
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):  # names cache files
            digest = content_digest(d, salt)
        fresh[str(d)] = [sig, digest]
        out.append(RunSource(d, digest))
    if known is not None:
        known.clear()
        known.update(fresh)
    return sorted(out, key=lambda s: s.path.as_posix())


def load_run(source: RunSource) -> RunData:
    """Read and validate the whole run; ContractError names the file and field."""
    if source.problem:
        raise ContractError(source.problem)
    return read_run(source.path)


def load_info(source: RunSource) -> RunInfo:
    """Read and validate only run.yaml (cheap), for runs whose aggregates are cached."""
    if source.problem:
        raise ContractError(source.problem)
    return read_run_info(source.path)


def one_line(exc: BaseException, where: Path) -> str:
    """A single error line for a failed run: the contract's message, or where + what."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ContractError) and text:
        return text
    return f"{where}: {type(exc).__name__}: {text}" if text else f"{where}: {type(exc).__name__}"


def same_source(runs: list[tuple[Path, RunInfo, Any]]) -> dict[Path, Path]:
    """{run folder: the earlier folder (in the given order) holding the same source}.

    Why: an imported source may lie twice under --data under two ids (imported
    by an importer whose ids moved, or copied by hand), and publishing both
    would count one measurement twice in every ranking and history. Only
    imported runs have a source key (rundir.identity). Each entry is (folder,
    run.yaml, aggregate or None); runs are grouped first by what is already in
    memory (measured_at and the aggregate's published figures), and only a
    group of two or more reads its small cells.parquet files to compare keys,
    so a site without duplicates reads nothing more. A folder whose cells
    cannot be read is left to the normal loading, which reports it.
    """
    groups: dict[tuple, list[tuple[Path, RunInfo]]] = {}
    for path, info, agg in runs:
        if info.source == contract.SOURCE_IMPORTED:
            groups.setdefault((info.measured_at, _figures(agg)), []).append((path, info))
    dups: dict[Path, Path] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        first: dict[str, Path] = {}
        for path, info in members:
            try:
                key = identity.source_key(info, read_table(path, contract.CELLS_FILE))
            except ContractError:
                continue
            if key is None:
                continue
            if key in first:
                dups[path] = first[key]
            else:
                first[key] = path
    return dups


def _figures(agg: Any) -> tuple:
    """The aggregate's published figures by cell, hashable (() without one): equal
    for two runs with the same source key, since both come from the same cells."""
    cells = getattr(agg, "cells", None) or []
    return tuple((c.phase, c.context, c.concurrency, repr(c.total_tok_s), repr(c.ttft_ms),
                  repr(c.tbt_ms), repr(c.per_request_tok_s)) for c in cells)
