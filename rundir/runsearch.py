"""Finding run directories under a data folder, and symlinks that lead out of it.

Why here: `build-site --data` and `bench validate` search a data folder the
same way and refuse the same symlinks with the same words; the collector
never imports the builder, so the search lives with the contract.
"""

from __future__ import annotations

import os
from pathlib import Path

from rundir import contract, manifest

RUN_FILES = (
    contract.RUN_YAML,
    contract.CELLS_FILE,
    contract.REQUESTS_FILE,
    contract.SERVER_METRICS_FILE,
    contract.GPU_METRICS_FILE,  # optional; part of the digest, so new telemetry re-aggregates
    contract.WINDOWS_FILE,  # optional (--repeats k > 1); absent: the digest is as before
)
# The files whose bytes key the builder's cache and that are checked against the
# run's manifest: those published (RUN_FILES), the clock offsets read_run
# validates, and the manifest itself (a run's verdict changes with it).
CHECKED_FILES = (*RUN_FILES, contract.CLOCK_OFFSETS_FILE, manifest.MANIFEST_FILE)
DATA_FOLDER = "the data folder"
RUN_FOLDER = "the run's folder"


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
            problem = outside(link, root, "a symlinked folder")
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


def outside(path: Path, root: Path, what: str, folder: str = DATA_FOLDER) -> str | None:
    """One line when the symlink `path` leads nowhere or outside root (named
    `folder` in the line), else None."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return f"{path}: a symlink that leads nowhere"
    if real != root and root not in real.parents:
        return f"{path}: {what} leading outside {folder} (to {real}); refused"
    return None


def escaping_file(run_dir: Path, root: Path, folder: str = DATA_FOLDER) -> str | None:
    """A one-line problem when one of the run's contract files is a symlink whose
    target lies outside `root` (a shared data folder must not make the builder
    read, and publish as raw download, a file from elsewhere)."""
    for name in CHECKED_FILES:
        path = Path(run_dir) / name
        if path.is_symlink() and (problem := outside(path, root, "a symlink", folder)) is not None:
            return problem
    return None


def folder_problem(data_dir: Path) -> str | None:
    """One line when the data folder is missing or not a folder, else None."""
    if not data_dir.exists():
        return f"{data_dir}: no such folder"
    if not data_dir.is_dir():
        return f"{data_dir}: not a folder"
    return None


def no_runs(data_dir: Path) -> str:
    """The line for a data folder without any run directory below it."""
    return f"{data_dir}: no run directories found (a run directory holds a {contract.RUN_YAML})"
