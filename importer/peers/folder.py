"""Import one tool file, or every tool file in a folder, as run directories (issue 36).

Why a plan before any write: a folder a maintainer points at holds one tool
run's several exports (AIPerf's raw, records and summary; inference-perf's
per-request file and its summary), files with several runs (guidellm's one
benchmark per load point) and files no reader knows. Each run is written
once, from its richest export, and every file gets one line saying what
became of it. Each run is written whole or not at all (importer/write.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from importer.peers import Read, read_all_for, sniff_format
from importer.peers.load import LoadError, resolve_load
from importer.peers.model import TIERS, PeerFormatError, PeerRun
from importer.peers.setup import DeclaredSetup
from importer.peers.write import file_sha256, write_peer_run
from importer.write import ImportResult

# Tools whose exports in one folder are views of ONE run (the richest is imported).
ONE_RUN_PER_FOLDER = frozenset({"aiperf"})


@dataclass(frozen=True)
class Outcome:
    """One line of the folder import: a run written or already there, or a file skipped."""

    path: Path
    result: ImportResult | None = None
    skipped: str | None = None  # why the file was not imported on its own
    error: str | None = None  # a recognised file that did not read: its one line

    def line(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        if self.result is not None:
            there = self.result.message()
            return f"{self.result.path} (from {self.path})" + (f": {there}" if there else "")
        return f"skipped {self.path}: {self.skipped}"


def runs_of(path: Path, concurrency: int | None = None, rate: float | None = None,
            sniffed: tuple[str, Read] | None = None, input_tokens: int | None = None) -> list[PeerRun]:
    """Every run a tool file holds, its load resolved; [] when no reader knows the file
    (``sniffed``: the format already told, else the file is sniffed here)."""
    sniffed = sniffed or sniff_format(path)
    if sniffed is None:
        return []
    name, read = sniffed
    many = read_all_for(name)
    runs = many(path) if many is not None else [read(path)]
    return [resolve_load(r, concurrency, rate, input_tokens) for r in runs]


def write_runs(runs: list[PeerRun], out: Path, setup: DeclaredSetup | None) -> list[ImportResult]:
    """Write each run; several runs of one file get the file's sha256 with their index."""
    sha = file_sha256(runs[0].source_file)
    if len(runs) == 1:
        return [write_peer_run(runs[0], out, sha, setup)]
    results = []
    for i, run in enumerate(runs):
        own = hashlib.sha256(f"{sha}:{i}".encode()).hexdigest()
        extra = {**run.extra, "load_point": f"{i + 1} of {len(runs)} in the file (its source sha256 is "
                 "that of the file's sha256 and this index)"}
        results.append(write_peer_run(dataclasses.replace(run, extra=extra), out, own, setup))
    return results


def _files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not any(p.startswith(".") for p in path.relative_to(folder).parts):
            yield path


def plan(folder: Path, concurrency: int | None = None, rate: float | None = None,
         input_tokens: int | None = None) -> tuple[list[list[PeerRun]], list[Outcome]]:
    """(the runs to write, file by file, and the files skipped with why); a recognised file
    that does not read is an Outcome with its error line, and the others go on."""
    found: list[tuple[Path, list[PeerRun]]] = []
    skipped: list[Outcome] = []
    for path in _files(folder):
        try:
            runs = runs_of(path, concurrency, rate, None, input_tokens)
        except PeerFormatError as exc:
            skipped.append(Outcome(path, error=exc.located(path)))
            continue
        except LoadError as exc:
            skipped.append(Outcome(path, error=str(exc)))
            continue
        if runs:
            found.append((path, runs))
        else:
            skipped.append(Outcome(path, skipped="not recognised by any tool reader"))
    chosen: dict[tuple, tuple[Path, list[PeerRun]]] = {}
    poorer: dict[tuple, list[tuple[Path, str]]] = {}
    for path, runs in found:
        key = ((path.parent, runs[0].tool) if runs[0].tool in ONE_RUN_PER_FOLDER else (path,))
        best = chosen.get(key)
        if best is None or TIERS.index(runs[0].tier) < TIERS.index(best[1][0].tier):
            if best is not None:
                poorer.setdefault(key, []).append((best[0], best[1][0].format))
            chosen[key] = (path, runs)
        else:
            poorer.setdefault(key, []).append((path, runs[0].format))
    for key, files in poorer.items():
        for path, fmt in files:
            skipped.append(Outcome(path, skipped=f"part of the run imported from {chosen[key][0].name} "
                                   f"({fmt}: a poorer view of the same run)"))
    companions = {f"{p.parent}/{r.extra[k].split(' ')[0]}": p  # files a reader read beside its own
                  for p, runs in chosen.values() for r in runs[:1]
                  for k in ("summary_file", "config_file") if r.extra.get(k)}
    for i, out in enumerate(skipped):
        owner = companions.get(str(out.path))
        if owner is not None and out.skipped and out.skipped.startswith("not recognised"):
            skipped[i] = Outcome(out.path, skipped=f"part of the run imported from {owner.name} "
                                 "(read with it: its summary or configuration)")
    return [runs for _, runs in chosen.values()], skipped


__all__ = ["ONE_RUN_PER_FOLDER", "Outcome", "plan", "runs_of", "write_runs"]
