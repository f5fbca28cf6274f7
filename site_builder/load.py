"""Find run directories under a data folder and validate them against the contract.

Finding is cheap (walk + hash, and the hash is skipped for files whose size,
times and inode are those of the last build); validating reads every
Parquet file, so it happens only for runs whose aggregates are not cached yet. A broken run is
reported as one line naming the file and the field; it never stops the
good runs from being published.

Two checks guard the published figures against a run changed after it was
measured (issue 30). Finding compares the files with the sha256 the
collector sealed them with (rundir/manifest.py), in the same pass that
hashes them for the cache: a run that differs is refused in one line unless
the build allows edited runs (`build-site --allow-edited`), and then its page
says it was edited after measurement. Loading cross-checks each measured
decode cell's stored status against its own rows (rundir/crosscheck.py) and
publishes the status the rows support, saying so in the cell's reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from rundir import contract, crosscheck, identity, manifest
from rundir.contract import ContractError, RunInfo
from rundir.io import RunData, read_run, read_run_info, read_table
from site_builder.aggregate import (  # the builder's re-check: one wording
    has_peer_requests,
    recheck_reason,
)

RUN_FILES = (
    contract.RUN_YAML,
    contract.CELLS_FILE,
    contract.REQUESTS_FILE,
    contract.SERVER_METRICS_FILE,
    contract.GPU_METRICS_FILE,  # optional; part of the digest, so new telemetry re-aggregates
    contract.WINDOWS_FILE,  # optional (--repeats k > 1); absent: the digest is as before
)
# The files whose bytes key the cache and that are checked against the run's
# manifest: those published (RUN_FILES), the clock offsets read_run validates,
# and the manifest itself (a run's verdict changes with it).
CHECKED_FILES = (*RUN_FILES, contract.CLOCK_OFFSETS_FILE, manifest.MANIFEST_FILE)
ALLOW_EDITED_FLAG = "--allow-edited"


class LoadError(Exception):
    """A problem with the data folder itself (missing, empty): one line."""


@dataclass(frozen=True)
class RunSource:
    """A run directory found under the data folder, before validation."""

    path: Path  # as reachable from the current directory (kept relative for messages)
    digest: str  # sha256 over the run's contract files: the cache key
    problem: str | None = None  # set when the run must not even be read (one line)
    # Files that differ from the run's manifest, let through by --allow-edited
    edited: tuple[manifest.Edit, ...] = ()

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
    """sha256 over the names and sha256 of the run's checked files (plus a salt)."""
    return _digest(manifest.hash_files(run_dir, CHECKED_FILES), salt)


def _digest(hashes: dict[str, manifest.Hash], salt: str) -> str:
    """The cache key from each file's own sha256 (one read of each file serves both
    the key and the manifest check)."""
    h = hashlib.sha256(salt.encode())
    for name in CHECKED_FILES:
        if name in hashes:
            h.update(f"{name}\0{hashes[name][0]}\0".encode())
    return h.hexdigest()


def _survey(run_dir: Path, salt: str) -> tuple[str, list[manifest.Edit]]:
    """(cache key, files that differ from the run's manifest), from one read of each."""
    scope = [*CHECKED_FILES[:-1]]  # the manifest is not a file it lists
    edits, hashes = manifest.survey(run_dir, CHECKED_FILES, scope)
    return _digest(hashes, salt), edits


def edited_line(run_dir: Path, edits: tuple[manifest.Edit, ...] | list[manifest.Edit]) -> str:
    """The one line refusing a run edited after measurement."""
    more = f" (and {len(edits) - 1} more file{'s' if len(edits) > 2 else ''})" \
        if len(edits) > 1 else ""
    return (f"{edits[0].line(run_dir)}{more}; {ALLOW_EDITED_FLAG} publishes it marked "
            "as edited after measurement")


def file_signature(run_dir: Path, salt: str = "") -> list[Any]:
    """What identifies the run's files without reading them: name, size, mtime,
    ctime and inode of each (an atomic rewrite or an in-place edit changes one)."""
    sig: list[Any] = [salt]
    for name in CHECKED_FILES:
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
    for name in CHECKED_FILES:
        path = Path(run_dir) / name
        if path.is_symlink() and (problem := _outside(path, root, "a symlink")) is not None:
            return problem
    return None


def discover(data_dir: Path, *, salt: str = "", exclude: Path | None = None,
             known: dict[str, Any] | None = None, allow_edited: bool = False) -> list[RunSource]:
    """Find and fingerprint the runs under data_dir; LoadError if there are none.

    A symlink the search refuses comes back as a source with its problem
    set, so the build reports it in one line like any run it cannot read.

    `known` maps a run path to [file_signature, digest, edits] from an earlier
    build: a run whose signature is unchanged keeps its digest and its files'
    verdict against the manifest without re-reading its files (hashing
    gigabytes of raw data would dominate a rebuild). It is updated in place
    to the runs found now.

    A run whose files differ from its manifest comes back with its problem set
    (one line naming the file), or, with `allow_edited` (build-site
    --allow-edited), with `edited` set and published marked as edited.
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
        sig = file_signature(d, salt) if known is not None else None
        hit = _known(known.get(str(d)) if known is not None else None, sig)
        digest, edits = hit if hit is not None else _survey(d, salt)
        if known is not None:
            fresh[str(d)] = [sig, digest, [[e.name, e.what] for e in edits]]
        out.append(_source(d, digest, edits, allow_edited))
    if known is not None:
        known.clear()
        known.update(fresh)
    return sorted(out, key=lambda s: s.path.as_posix())


def _known(hit: Any, sig: list[Any] | None) -> tuple[str, list[manifest.Edit]] | None:
    """(digest, edits) an earlier build filed for files with this signature, or None
    (the entry is checked before it is trusted: its digest names cache files)."""
    if sig is None or not isinstance(hit, list) or len(hit) != 3 or hit[0] != sig:
        return None
    digest, edits = hit[1], hit[2]
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest) or not isinstance(edits, list):
        return None
    if not all(isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e)
               for e in edits):
        return None
    return digest, [manifest.Edit(name, what) for name, what in edits]


def _source(run_dir: Path, digest: str, edits: list[manifest.Edit],
            allow_edited: bool) -> RunSource:
    """The run as found: refused in one line when edited after measurement, unless
    this build allows it (build-site --allow-edited)."""
    if not edits:
        return RunSource(run_dir, digest)
    if not allow_edited:
        return RunSource(run_dir, "", edited_line(run_dir, edits))
    return RunSource(run_dir, digest, edited=tuple(edits))


def load_run(source: RunSource) -> RunData:
    """Read and validate the whole run; ContractError names the file and field.

    The run as the builder publishes it: marked as edited when its files differ
    from its manifest (checked here again: a worker process gets only the path,
    and discover() has already refused such a run unless the build allows it),
    and each measured decode cell with the status its own rows support
    (rundir/crosscheck.py)."""
    if source.problem:
        raise ContractError(source.problem)
    data = read_run(source.path)
    edits = source.edited or tuple(manifest.check(source.path, CHECKED_FILES[:-1]))
    if edits:
        data.info = marked_edited(data.info, edits)
    if not data.imported or has_peer_requests(data):
        data.cells = rechecked_cells(data)
    return data


def load_info(source: RunSource) -> RunInfo:
    """Read and validate only run.yaml (cheap), for runs whose aggregates are cached."""
    if source.problem:
        raise ContractError(source.problem)
    info = read_run_info(source.path)
    return marked_edited(info, source.edited) if source.edited else info


EDITED_NOTE = "**Edited after measurement.**"


def marked_edited(info: RunInfo, edits: tuple[manifest.Edit, ...] | list[manifest.Edit],
                  ) -> RunInfo:
    """run.yaml as published for a run edited after measurement: its notes (shown on
    the run page and in cells.json) open by saying so, file by file."""
    files = "; ".join(f"`{e.name}`: {e.what}" for e in edits)
    note = (f"{EDITED_NOTE} Files of this run differ from the sha256 checksums its writer "
            f"recorded in `{manifest.MANIFEST_FILE}` ({files}). The figures on this page "
            "come from the files as they are now, not as they were measured; the build "
            f"published them only because it was asked to ({ALLOW_EDITED_FLAG}).")
    notes = f"{note}\n\n{info.notes}" if info.notes else note
    return dataclasses.replace(info, notes=notes)


def rechecked_cells(data: RunData) -> pa.Table:
    """cells.parquet with each measured decode cell whose rows contradict its stored
    status given the status they support, the reason saying what the re-check
    found and what the collector had stored (the Error legend reads the cause)."""
    imp = data.info.imported
    peer = imp is not None and imp.tool is not None  # another tool's run: rundir/crosscheck.py
    found = crosscheck.run_findings(data.cells, data.requests, data.server_metrics, peer)
    if not found:
        return data.cells
    rows = data.cells.to_pylist()
    for row in rows:
        hit = found.get((row["phase"], row["context"], row["concurrency"]))
        if hit is not None:
            row["reason"] = recheck_reason(row["status"], [hit.problem], row.get("reason"))
            row["status"] = hit.status
    return pa.Table.from_pylist(rows, schema=data.cells.schema)


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
