"""``bench import RUN_DIR``: a run directory from elsewhere -> ``--out/<run_id>/``.

Why a copy goes through here rather than ``cp -r``: the same run must not land
twice under --data (the builder would publish one measurement twice, or
refuse two folders with one run id), a folder holding another run must never
be overwritten, and a half-copied folder must never carry a run's name. So
the run is validated first, recognised if already there (its own id, or for an
imported run its source key under any id, see :mod:`.existing`), and copied
into a temporary sibling that is renamed into place only when whole.

A measured run's identity is its collector-given ``run_id`` with its files:
the same id with the same bytes is already there; the same id with other
bytes is another version of it, refused with one line naming the folder.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import tempfile
from pathlib import Path

from importer.existing import Existing, find_same_source, match
from importer.write import ImportResult, TargetError
from rundir.contract import RUN_YAML, SOURCE_IMPORTED, ContractError
from rundir.identity import source_key
from rundir.io import is_run_dir, read_run, read_run_info

_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def _files(run_dir: Path) -> list[str]:
    """Relative paths of every file in the run directory; TargetError on a symlink
    (a link could make the copy carry a file from outside the run)."""
    found = []
    for top, dirs, files in os.walk(run_dir):
        for name in sorted(dirs + files):
            path = Path(top) / name
            if path.is_symlink():
                raise TargetError(f"{path}: a symlink; import the run directory without links")
        found += [str((Path(top) / f).relative_to(run_dir)) for f in files]
    return sorted(found)


def same_files(a: Path, b: Path) -> bool:
    """Whether two run directories hold the same files with the same bytes."""
    names = _files(a)
    if names != _files(b):
        return False
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def _measured_match(path: Path, src: Path, run_id: str) -> Existing | None:
    """Existing when the folder at path holds this measured run, byte for byte."""
    try:
        if run_id not in (path / RUN_YAML).read_text(encoding="utf-8", errors="replace"):
            return None  # cheap: most folders name another run
        other = read_run_info(path)
    except (ContractError, OSError):  # an unreadable folder is simply not this run
        return None
    if other.run_id != run_id or other.source == SOURCE_IMPORTED:
        return None
    if not same_files(src, path):
        raise TargetError(f"{path}: already holds run {run_id} with other files; not "
                          "overwritten (remove it to import this version)")
    return Existing(path, run_id, False, (), measured=True)


def import_run_dir(src: Path, out: Path) -> ImportResult:
    """Copy the run directory at src to ``out/<run_id>/``, or name where it already is."""
    src, out = Path(src), Path(out)
    if not is_run_dir(src):
        raise TargetError(f"{src}: not a run directory (it holds no {RUN_YAML})")
    if is_run_dir(out):
        raise TargetError(f"{out}: is a run directory; --out takes the folder that receives "
                          "<run_id>/")
    if out.exists() and not out.is_dir():
        raise TargetError(f"{out}: is not a folder")
    run = read_run(src)  # ContractError: the caller prints its one line
    run_id = run.info.run_id
    if not _FOLDER_NAME.fullmatch(run_id) or ".." in run_id:
        raise TargetError(f"{src / RUN_YAML}: field run_id: {run_id!r} is not usable as a "
                          "folder name (letters, digits, '.', '_', '+', '-')")
    _files(src)  # refuse links before anything is compared or copied
    target = out / run_id
    found = _already(src, out, target, run)
    if found is not None:
        return ImportResult(found.path, found.run_id, created=False, existing=found)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_id}.", suffix=".tmp", dir=out))
    try:
        tmp.rmdir()
        shutil.copytree(src, tmp, symlinks=True)
        tmp.chmod(0o755)
        read_run(tmp)  # what was copied reads back under the contract
        try:
            tmp.rename(target)
        except OSError:
            raise TargetError(f"{target}: appeared while importing; not overwritten") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return ImportResult(target, run_id, created=True)


def _already(src: Path, out: Path, target: Path, run) -> Existing | None:
    """Where the run already is under out (None: not there); TargetError when its
    folder holds another run."""
    imported = run.info.source == SOURCE_IMPORTED
    if src.resolve() == target.resolve():  # importing a folder onto itself
        return Existing(target, run.info.run_id, False, (), measured=not imported)
    if target.exists() or target.is_symlink():
        if not is_run_dir(target):
            raise TargetError(f"{target}: exists and is not a run directory; not overwritten")
        if imported:
            key = source_key(run.info, run.cells) or ""
            found = match(target, key, None, run.info, run.cells)
            if found is None:
                raise TargetError(f"{target}: already holds a different run; not overwritten")
            return found
        found = _measured_match(target, src, run.info.run_id)
        if found is None:
            raise TargetError(f"{target}: already holds a different run; not overwritten")
        return found
    if imported:
        sha = run.info.imported.source_sha256 if run.info.imported else None
        return find_same_source(out, source_key(run.info, run.cells) or "", sha,
                                run.info, run.cells)
    for child in sorted(out.iterdir()) if out.is_dir() else []:
        if not child.name.startswith(".") and (child / RUN_YAML).is_file():
            found = _measured_match(child, src, run.info.run_id)
            if found is not None:
                return found
    return None


__all__ = ["import_run_dir", "same_files"]
