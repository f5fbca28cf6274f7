"""`build-site --data URL`: keep a local mirror of the runs stored under a URL.

Why a mirror and not reading the bucket directly: the builder's incremental
machinery (digests reused while a run's files keep their size, mtime and
inode; aggregates cached by digest) works on files on disk; a mirror inside
the build cache keeps it all, so a rebuild from a bucket costs one listing
plus the runs that changed. Layout and manifest rules: rundir/storage.py.

Incremental, in three steps:
1. one recursive listing of URL (an object store pages it 1,000 keys a
   request) keeps the runs that have an upload manifest (a run without one is
   an upload in progress, or cut: not published yet);
2. a run whose manifest has the size and ETag/mtime recorded last time is
   not read at all; otherwise its manifest is fetched, and if its sha256 is
   the one recorded, nothing else is;
3. a new or changed run's files are fetched when the mirror's copy differs
   from the manifest's sha256, all runs' in one batch (s3fs sends them
   concurrently), each checked against it (a file that does not
   match is refused in one line naming it), and the mirror's manifest copy is
   written last. Runs no longer listed are removed from the mirror.
The state (mirror.json: each run's manifest stamp and sha256) lives in the
build cache beside the mirror (`runs-mirror/`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir.io import atomic_write_bytes
from rundir.manifest import file_hash
from rundir.redact import redact, redact_url
from rundir.storage import UPLOAD_MANIFEST, StorageError, open_url, parse_manifest, secrets

MIRROR = "runs-mirror"
STATE = "mirror.json"
FORMAT = 1


@dataclass
class Mirrored:
    """What a mirror pass did: the folder to build from and the runs (keys) by fate."""

    folder: Path
    fetched: list[str] = field(default_factory=list)  # new or changed runs
    files: int = 0  # files downloaded
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _stamp(info: dict[str, Any]) -> list[Any]:
    """What tells a stored manifest changed without reading it: size and ETag (S3, GCS)
    or modification time (a local disk)."""
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("mtime") \
        or info.get("LastModified") or info.get("updated")
    return [int(info.get("size") or 0), str(tag) if tag is not None else None]


def _load_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
        runs = data["runs"] if data.get("format") == FORMAT else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        runs = {}
    return runs if isinstance(runs, dict) else {}


def listing(fs: Any, root: str) -> dict[str, dict[str, Any]]:
    """{key: the stored manifest's info} for every run under root that has one."""
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    prefix = fs._strip_protocol(root).rstrip("/") + "/"
    out = {}
    for path, info in found.items():
        rel = str(path)[len(prefix):] if str(path).startswith(prefix) else ""
        key, _, name = rel.partition("/")
        if name == UPLOAD_MANIFEST and key and not key.startswith("."):
            out[key] = info
    return out


def mirror(url: str, cache_dir: Path, fs: Any = None, root: str | None = None) -> Mirrored:
    """Bring cache_dir/runs-mirror up to date with the runs stored under url."""
    cache_dir = Path(cache_dir)
    folder = cache_dir / MIRROR
    shown = redact_url(url).rstrip("/")
    if fs is None:
        fs, root = open_url(url)
    root = str(root).rstrip("/")
    state_path = cache_dir / STATE
    state = _load_state(state_path)
    try:
        stored = listing(fs, root)
    except Exception as exc:  # a refused credential, an unreachable endpoint
        raise StorageError(redact(f"{shown}: cannot list ({type(exc).__name__}: "
                                  f"{' '.join(str(exc).split())})", secrets(url))) from None
    if not stored:
        raise StorageError(f"{shown}: no uploaded runs found (each run is a folder with an "
                           f"{UPLOAD_MANIFEST}, written by bench upload)")
    out = Mirrored(folder)
    fresh: dict[str, Any] = {}
    changed = []
    for key in sorted(stored):
        old = state.get(key) or {}
        if old.get("stamp") == _stamp(stored[key]) and (folder / key / UPLOAD_MANIFEST).is_file():
            fresh[key] = old
            out.unchanged.append(key)
        else:
            changed.append(key)
    try:
        _update(fs, root, folder, changed, stored, state, fresh, out, shown)
    except StorageError:
        raise
    except Exception as exc:  # a cut connection: the next build fetches what is still missing
        raise StorageError(redact(
            f"{shown}: download stopped ({type(exc).__name__}: {' '.join(str(exc).split())}); "
            "run the build again", secrets(url))) from None
    for gone in sorted(set(state) | _mirrored(folder)):
        if gone not in stored:
            shutil.rmtree(folder / gone, ignore_errors=True)
            out.removed.append(gone)
    atomic_write_bytes(state_path, (json.dumps({"format": FORMAT, "runs": fresh}, indent=0,
                                               sort_keys=True) + "\n").encode())
    return out


def _update(fs: Any, root: str, folder: Path, changed: list[str], stored: dict[str, Any],
            state: dict[str, Any], fresh: dict[str, Any], out: Mirrored, shown: str) -> None:
    """Read the changed runs' manifests, then fetch every file that differs in one batch
    (an object store's client runs the requests concurrently: a runner that starts empty
    fetches thousands of files), check each against its sha256, and write each run's
    manifest copy last."""
    paths = [f"{root}/{key}/{UPLOAD_MANIFEST}" for key in changed]
    raws = fs.cat(paths) if paths else {}
    raws = {fs._strip_protocol(p): v for p, v in raws.items()}
    todo: list[tuple[str, bytes, dict[str, Any]]] = []
    remote_paths, tmp_paths, checks = [], [], []
    for key, path in zip(changed, paths, strict=True):
        raw = raws[fs._strip_protocol(path)]
        sha = hashlib.sha256(raw).hexdigest()
        fresh[key] = {"stamp": _stamp(stored[key]), "sha256": sha}
        local = folder / key
        if (state.get(key) or {}).get("sha256") == sha and (local / UPLOAD_MANIFEST).is_file() \
                and (local / UPLOAD_MANIFEST).read_bytes() == raw:
            out.unchanged.append(key)
            continue
        manifest = parse_manifest(raw, f"{shown}/{key}/{UPLOAD_MANIFEST}")
        (local / UPLOAD_MANIFEST).unlink(missing_ok=True)  # while it changes, it is not whole
        for name, entry in manifest["files"].items():
            want = (entry["sha256"], entry["bytes"])
            if (local / name).is_file() and file_hash(local / name) == want:
                continue
            tmp = local / f"{name}.{os.getpid()}.mirror-tmp"
            tmp.parent.mkdir(parents=True, exist_ok=True)
            remote_paths.append(f"{root}/{key}/{name}")
            tmp_paths.append(str(tmp))
            checks.append((tmp, local / name, want, f"{shown}/{key}/{name}"))
        todo.append((key, raw, manifest))
    try:
        if remote_paths:
            fs.get(remote_paths, tmp_paths)
        for tmp, final, want, where in checks:
            if file_hash(tmp) != want:
                raise StorageError(f"{where}: sha256 differs from its {UPLOAD_MANIFEST}; "
                                   "upload the run again")
            os.replace(tmp, final)
    finally:
        for tmp, *_ in checks:
            Path(tmp).unlink(missing_ok=True)
    out.files += len(checks)
    for key, raw, manifest in todo:
        _prune(folder / key, set(manifest["files"]) | {UPLOAD_MANIFEST})
        atomic_write_bytes(folder / key / UPLOAD_MANIFEST, raw)
        out.fetched.append(key)


def _mirrored(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()


def _prune(local: Path, listed: set[str]) -> None:
    """Remove the files (and emptied folders) a run's mirror holds that it no longer lists."""
    for path in sorted(local.rglob("*"), reverse=True):
        rel = path.relative_to(local).as_posix()
        if path.is_file() and rel not in listed:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            os.rmdir(path)
