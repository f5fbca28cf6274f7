"""manifest.json: the sha256 of every file a writer left in a run directory.

Why: the builder recomputes every figure from the raw files, so a file edited
after the collector closed the run (a request row deleted, a window shrunk)
publishes other figures without a word (issue 30). The collector (`bench
run`, after every stored cell, `--resume` and `--retry-errors` included) and
the importer (`bench import`) write this manifest last, atomically, after
every other file; the builder compares the files with it and refuses a run
that differs (or, with `build-site --allow-edited`, publishes it marked as
edited after measurement).

What it is not: a signature. Anyone who can edit a file can recompute its
sha256 and rewrite manifest.json, or delete it (a run without a manifest is
read as runs written before manifests existed). It makes an accidental or
careless edit visible; it does not prove who measured what.

Rules (docs/data-format.md, "manifest.json"):
- `files` maps each sealed file (SEALED_FILES present, and every file under
  raw/) by its path relative to the run directory to its sha256 and size.
- A writer about to rewrite the directory removes the manifest first
  (`unseal`) and writes it again when every file is in place (`seal`): a
  writer stopped between the two leaves no manifest (a run read as before),
  never one that disagrees with files the writer itself wrote; and a reader
  that finds the manifest gone or changed while it checked is looking at a
  directory being written, not an edited one (`check` looks again).
- `edited` carries edits found when the collector continued the run
  (`--resume`): resealing must not launder them, so each new manifest keeps
  them and the run stays marked.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rundir.contract import (
    CELLS_FILE,
    CLOCK_OFFSETS_FILE,
    GPU_METRICS_FILE,
    REQUESTS_FILE,
    RUN_YAML,
    SERVER_METRICS_FILE,
    SUPERSEDED_REQUESTS_FILE,
    WINDOWS_FILE,
    ContractError,
)
from rundir.io import atomic_write_text

MANIFEST_FILE = "manifest.json"
FORMAT = 1
ALGORITHM = "sha256"
RAW_DIR = "raw"  # imported runs: the source as read (docs/data-format.md)
# The contract files a writer seals when present, in the order findings name them.
SEALED_FILES = (RUN_YAML, CELLS_FILE, REQUESTS_FILE, SERVER_METRICS_FILE, GPU_METRICS_FILE,
                WINDOWS_FILE, CLOCK_OFFSETS_FILE, SUPERSEDED_REQUESTS_FILE)
_BLOCK = 1 << 20

# (sha256 hex, size in bytes) of a file
Hash = tuple[str, int]


@dataclass(frozen=True)
class Edit:
    """One file that differs from what its writer sealed: `what` says how, in the
    words of the builder's line `RUN/<name>: edited after measurement (<what>)`."""

    name: str
    what: str

    def line(self, run_dir: Path) -> str:
        return f"{Path(run_dir) / self.name}: edited after measurement ({self.what})"


DIFFERS = f"sha256 differs from {MANIFEST_FILE}"
DELETED = f"deleted: listed in {MANIFEST_FILE}"
ADDED = f"added: not listed in {MANIFEST_FILE}"
RESUMED = "found when bench run --resume continued the run"


def file_hash(path: Path) -> Hash:
    """sha256 and size of one file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def hash_files(run_dir: Path, names: Iterable[str]) -> dict[str, Hash]:
    """{name: (sha256, size)} of those of `names` that are files in run_dir."""
    out = {}
    for name in names:
        path = Path(run_dir) / name
        if path.is_file():
            out[name] = file_hash(path)
    return out


def sealed_names(run_dir: Path) -> list[str]:
    """The files a writer seals: SEALED_FILES present, then raw/ (sorted, posix paths)."""
    run_dir = Path(run_dir)
    names = [n for n in SEALED_FILES if (run_dir / n).is_file()]
    raw = run_dir / RAW_DIR
    if raw.is_dir():
        names += sorted(p.relative_to(run_dir).as_posix() for p in raw.rglob("*") if p.is_file())
    return names


def unseal(run_dir: Path) -> None:
    """Remove the manifest before a writer rewrites the directory (see the module doc)."""
    (Path(run_dir) / MANIFEST_FILE).unlink(missing_ok=True)


def seal(run_dir: Path, carried: Sequence[Edit] = ()) -> None:
    """Write manifest.json over the sealed files as they are now, atomically; the
    last write of a writer. `carried`: edits found earlier (kept in `edited`)."""
    run_dir = Path(run_dir)
    files = {name: {"sha256": sha, "bytes": size}
             for name, (sha, size) in hash_files(run_dir, sealed_names(run_dir)).items()}
    data: dict = {"format": FORMAT, "algorithm": ALGORITHM, "files": files}
    if carried:
        data["edited"] = [{"file": e.name, "found": e.what} for e in carried]
    atomic_write_text(run_dir / MANIFEST_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Manifest:
    """A manifest as read: each file's (sha256, size), and the edits carried in it."""

    files: dict[str, Hash]
    edited: tuple[Edit, ...] = ()


def read_manifest(run_dir: Path) -> Manifest | None:
    """The run's manifest, or None when it has none; ContractError (one line naming
    the file) when it is not one (then no file of the run can be vouched for)."""
    path = Path(run_dir) / MANIFEST_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ContractError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    return parse(raw, str(path))


def parse(raw: bytes, where: str = MANIFEST_FILE) -> Manifest:
    """A manifest from its bytes; ContractError names what is wrong in one line."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ContractError(f"{where}: not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ContractError(f"{where}: field format: expected {FORMAT}")
    if data.get("algorithm") != ALGORITHM:
        raise ContractError(f"{where}: field algorithm: expected '{ALGORITHM}'")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ContractError(f"{where}: field files: expected a mapping of file names")
    out: dict[str, Hash] = {}
    for name, entry in files.items():
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        size = entry.get("bytes") if isinstance(entry, dict) else None
        if (not _safe_name(name) or not isinstance(sha, str) or len(sha) != 64
                or not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise ContractError(f"{where}: field files: entry {len(out)}: expected a relative "
                                "file name with sha256 (64 hex digits) and bytes (>= 0)")
        out[name] = (sha.lower(), size)
    edited = []
    for i, entry in enumerate(data.get("edited") or []):
        if not (isinstance(entry, dict) and _safe_name(entry.get("file"))
                and _one_line(entry.get("found"))):
            raise ContractError(f"{where}: field edited[{i}]: expected a file and what was found")
        edited.append(Edit(entry["file"], entry["found"]))
    return Manifest(out, tuple(edited))


def _safe_name(name: object) -> bool:
    """A relative path inside the run directory (no absolute path, no `..`), printable
    on one line (it is named in the builder's one-line error and on the run page)."""
    if not _one_line(name) or name.startswith("/") or "\\" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def _one_line(text: object, limit: int = 300) -> bool:
    return isinstance(text, str) and 0 < len(text) <= limit and text.isprintable()


def compare(manifest: Manifest | None, hashes: dict[str, Hash],
            scope: Iterable[str] | None = None) -> list[Edit]:
    """Every file that differs from the manifest, in scope order: `hashes` holds the
    files present now (hash_files); `scope` limits the check to some names (default:
    every name the manifest lists or hashes holds). No manifest: nothing to compare.
    The manifest itself is never a sealed file (only an edit carried about it counts)."""
    if manifest is None:
        return []
    names = list(scope) if scope is not None else _in_order(list(hashes), manifest.files)
    carried = {e.name: e for e in manifest.edited}
    found = []
    for name in names:
        listed, now = manifest.files.get(name), hashes.get(name)
        if name in carried:
            found.append(Edit(name, carried[name].what))
        elif name == MANIFEST_FILE:
            continue
        elif listed is not None and now is None:
            found.append(Edit(name, DELETED))
        elif listed is None and now is not None:
            found.append(Edit(name, ADDED))
        elif listed is not None and now is not None and listed != now:
            found.append(Edit(name, DIFFERS))
    return found


def _in_order(first: Sequence[str], more: Iterable[str]) -> list[str]:
    """`first` as it is, then the names of `more` it lacks, sorted."""
    return [*first, *sorted(set(more) - set(first))]


def survey(run_dir: Path, names: Sequence[str] | None = None,
           scope: Sequence[str] | None = None,
           tries: int = 3) -> tuple[list[Edit], dict[str, Hash]]:
    """(the files that differ from the run's manifest, {name: hash} of `names`).

    `names`: the files to hash (default: the sealed files and every name the
    manifest lists); `scope`: those of them to compare (default: all). The
    builder hashes its files once here for both its cache key and this check.
    A manifest that changes or vanishes while the files are hashed belongs to
    a writer at work (it unseals before it rewrites): the survey starts again,
    and a directory still being written after `tries` is judged as one without
    a manifest. A malformed manifest is one Edit of manifest.json itself:
    nothing in the run can be vouched for. No manifest: no edits.
    """
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST_FILE
    hashes: dict[str, Hash] = {}
    for _ in range(tries):
        try:
            before: bytes | None = path.read_bytes()
        except FileNotFoundError:
            before = None
        except OSError as exc:
            return [Edit(MANIFEST_FILE, f"cannot read it: {exc.strerror or type(exc).__name__}")], {}
        try:
            manifest = parse(before, str(path)) if before is not None else None
        except ContractError as exc:
            manifest, bad = None, Edit(MANIFEST_FILE, str(exc).removeprefix(f"{path}: "))
        else:
            bad = None
        wanted = list(names) if names is not None else _in_order(
            sealed_names(run_dir), manifest.files if manifest else ())
        hashes = hash_files(run_dir, wanted)
        if bad is not None:
            return [bad], hashes
        found = compare(manifest, hashes, scope if scope is not None else wanted)
        if not found or _same_bytes(path, before):
            return found, hashes
    return [], hashes


def check(run_dir: Path, scope: Sequence[str] | None = None) -> list[Edit]:
    """The run's files that differ from its manifest ([] when it has none); `scope`
    limits it to some names (default: the sealed files and every name listed)."""
    return survey(run_dir, scope, scope)[0]


def carry(edits: Iterable[Edit]) -> tuple[Edit, ...]:
    """Edits found when the collector continues a run, worded to be kept in every
    manifest it writes from then on (an edit carried before keeps its words)."""
    return tuple(e if e.what.endswith(RESUMED) else Edit(e.name, f"{e.what}; {RESUMED}")
                 for e in edits)


def _same_bytes(path: Path, before: bytes | None) -> bool:
    """Whether the manifest still holds `before` (None: still absent)."""
    try:
        return before is not None and os.path.getsize(path) == len(before) \
            and path.read_bytes() == before
    except FileNotFoundError:
        return before is None
    except OSError:
        return False
