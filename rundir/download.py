"""`bench download`: fetch one stored run into a local folder, every byte checked.

Why: a contributor uploads a run to a staging prefix (`bench upload`) and opens a
pull request that adds only its upload manifest (docs/publishing-ci.md). CI then
fetches the run the manifest names. The manifest in the pull request is the one
the maintainer reviewed, so it is the authority (`--manifest FILE`): the stored
manifest must be the same bytes, and every fetched file must have the sha256 and
size it lists. Whatever the staging prefix holds beyond that is not trusted.

The run is fetched into a hidden folder beside its final place and renamed when
whole, so a reader (the next CI step, a build of the folder; hidden folders are not
searched) never sees half a run, and a refused fetch leaves nothing behind. A
folder already there is never overwritten: the same files (by sha256) is "already
there", anything else is refused. It validates nothing: `bench validate` does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rundir.manifest import file_hash
from rundir.redact import redact, redact_url
from rundir.storage import (
    UPLOAD_MANIFEST,
    StorageError,
    open_url,
    parse_manifest,
    run_key,
    secrets,
)

ALREADY = "already there"
DOWNLOADED = "downloaded"


class DownloadRefused(StorageError):
    """The stored run is not the one the manifest names, or DEST holds another run."""


@dataclass
class Fetched:
    run_id: str
    where: str  # URL, redacted
    path: Path  # DEST/<key>
    state: str  # DOWNLOADED or ALREADY
    files: int = 0
    size: int = 0


def _expected(manifest: dict[str, Any], raw: bytes) -> dict[str, tuple[str, int]]:
    """{name: (sha256, bytes)} of everything the run folder holds when whole: the
    manifest's files, and the upload manifest itself (the folder carries its proof)."""
    want = {n: (e["sha256"], e["bytes"]) for n, e in manifest["files"].items()}
    want[UPLOAD_MANIFEST] = (hashlib.sha256(raw).hexdigest(), len(raw))
    return want


def _held(folder: Path) -> dict[str, tuple[str, int]]:
    """{name: (sha256, bytes)} of every file below folder; a symlink never counts as
    the file it points to (it is marked as no file's hash)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[name] = ("symlink", -1)
        elif path.is_file():
            out[name] = file_hash(path)
    return out


def _key_of(url: str, manifest: dict[str, Any], where: str) -> str:
    """The run's folder name: the URL's last part, which must be the key of the run
    the manifest names (bench upload stores a run under it)."""
    key = url.rstrip("/").rsplit("/", 1)[-1]
    want = run_key(manifest["run_id"])
    if key != want:
        raise DownloadRefused(f"{where}: holds run {manifest['run_id']!r}, whose folder would be "
                              f"{want!r}, not {key!r}; expected URL/<key> as bench upload prints it")
    return key


def _read_stored(fs: Any, path: str, where: str) -> bytes:
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        raise StorageError(f"{where}/{UPLOAD_MANIFEST}: not found (no run uploaded there, or its "
                           "upload is not complete: bench upload writes it last)") from None


def download(url: str, dest: Path, manifest_file: Path | None = None, fs: Any = None,
             root: str | None = None) -> Fetched:
    """Fetch the run stored at url (STAGING/<key>) into dest/<key> (see the module doc).
    `fs`, `root`: an fsspec filesystem and path to use instead of opening url (tests)."""
    where = redact_url(url).rstrip("/")
    try:
        return _download(url, Path(dest), manifest_file, fs, root, where)
    except StorageError:
        raise
    except Exception as exc:  # a cut connection, a refused credential, a full disk
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise StorageError(redact(f"{where}: download stopped ({type(exc).__name__}: {text})",
                                  secrets(url))) from None


def _download(url: str, dest: Path, manifest_file: Path | None, fs: Any, root: str | None,
              where: str) -> Fetched:
    pinned = None
    if manifest_file is not None:
        try:
            pinned = Path(manifest_file).read_bytes()
        except OSError as exc:
            raise StorageError(f"{manifest_file}: {exc.strerror or exc}") from None
        parse_manifest(pinned, str(manifest_file))  # its own faults named as its own
    if fs is None:
        fs, root = open_url(url)
    base = str(root).rstrip("/")
    raw = _read_stored(fs, f"{base}/{UPLOAD_MANIFEST}", where)
    if pinned is not None and raw != pinned:
        raise DownloadRefused(f"{where}/{UPLOAD_MANIFEST}: differs from {manifest_file}; "
                              "the stored run is not the one the manifest names")
    manifest = parse_manifest(raw, f"{where}/{UPLOAD_MANIFEST}")
    key = _key_of(url, manifest, where)
    want = _expected(manifest, raw)
    final = dest / key
    out = Fetched(manifest["run_id"], where, final, DOWNLOADED, files=len(manifest["files"]),
                  size=sum(e["bytes"] for e in manifest["files"].values()))
    if os.path.lexists(final):
        return _already(final, want, out)
    partial = dest / f".{key}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)  # a leftover of this pid's own earlier try
    try:
        _fetch_into(fs, base, manifest, raw, partial, where)
        try:
            os.rename(partial, final)  # atomic; refuses a non-empty folder that appeared meanwhile
        except OSError:
            if os.path.lexists(final):
                return _already(final, want, out)
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def _fetch_into(fs: Any, base: str, manifest: dict[str, Any], raw: bytes, partial: Path,
                where: str) -> None:
    """Every listed file fetched into partial (one batch: an object store's client runs
    the requests concurrently), each checked against the manifest, the manifest last."""
    names = sorted(manifest["files"])
    partial.mkdir(parents=True)
    for name in names:
        (partial / name).parent.mkdir(parents=True, exist_ok=True)
    if names:
        fs.get([f"{base}/{n}" for n in names], [str(partial / n) for n in names])
    for name in names:
        entry = manifest["files"][name]
        got = file_hash(partial / name) if (partial / name).is_file() else None
        if got != (entry["sha256"], entry["bytes"]):
            what = "missing" if got is None else "sha256 or size differs from its upload manifest"
            raise DownloadRefused(f"{where}/{name}: {what}; nothing fetched "
                                  "(the stored run is not the one the manifest names)")
    (partial / UPLOAD_MANIFEST).write_bytes(raw)


def _already(final: Path, want: dict[str, tuple[str, int]], out: Fetched) -> Fetched:
    held = _held(final) if final.is_dir() and not final.is_symlink() else None
    if held != want:
        raise DownloadRefused(f"{final}: holds other files than run {out.run_id!r} at {out.where}; "
                              "not overwritten (remove it, or download into another folder)")
    out.state = ALREADY
    return out


def summary(out: Fetched) -> str:
    """The line for stderr."""
    if out.state == ALREADY:
        return f"{out.run_id}: already at {out.path} (the same files); nothing fetched"
    return f"{out.run_id}: downloaded from {out.where} to {out.path} ({out.files} file(s), " \
           f"{out.size} bytes, each sha256 checked)"


__all__ = ["ALREADY", "DOWNLOADED", "DownloadRefused", "Fetched", "download", "summary"]
