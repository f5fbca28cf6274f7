"""`build-site publish URL`: copy a built site to any fsspec URL, changed files only.

Why: a site of thousands of runs is mostly the same files from one build to the next,
and an object store charges per request and serves what it was told about each file.
So each file goes up only when its sha256 differs from the manifest of the last
publish, which is kept at the destination (MANIFEST) and written last; each goes with a
content type by extension and a cache header: the files under static/ are named by
their content (`style.<hash>.css`) or by the versions they hold (the Vega bundle), so
they never change under their name and may be cached for a year; every other file
(HTML, data, downloads) keeps its name across builds and is revalidated (`no-cache`).

Order, so a reader never meets a page whose assets are missing and a cut connection is
safe to retry: new and changed non-HTML files first, then pages, then the files the last
publish had and this build has not are removed, and the manifest goes last. Interrupted,
the old manifest stays: the next publish uploads again whatever differs from it and
removes again what it listed (a file already gone is not an error). Only files the
manifest lists are ever removed, so a prefix shared with other content loses nothing.
A file changed at the destination by hand is not noticed (the manifest is trusted).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rundir import storage
from rundir.redact import redact, redact_url

MANIFEST = ".speed-matrix-publish.json"
FORMAT = 1
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
HASHED_DIR = "static"  # publish.write_assets names every file here by content or version
CONTENT_TYPES = {
    "html": "text/html; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "svg": "image/svg+xml",
    "yaml": "application/yaml",
    "parquet": "application/vnd.apache.parquet",
    "txt": "text/plain; charset=utf-8",
    "png": "image/png",
}
OCTET = "application/octet-stream"


class SyncError(Exception):
    """One line: what could not be published and why."""


@dataclass(frozen=True)
class Entry:
    sha256: str
    size: int
    content_type: str
    cache_control: str


@dataclass
class SyncReport:
    url: str
    uploaded: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0


def content_type(rel: str) -> str:
    """The Content-Type a file is served with, by its extension."""
    return CONTENT_TYPES.get(rel.rsplit(".", 1)[-1].lower() if "." in rel else "", OCTET)


def cache_control(rel: str) -> str:
    """A year and immutable for the content-named assets; revalidate everything else."""
    return IMMUTABLE if rel.split("/", 1)[0] == HASHED_DIR and "/" in rel else REVALIDATE


def local_files(site: Path) -> dict[str, Entry]:
    """Every file of the built site by its path relative to it (hidden ones left out,
    as `build-site serve` leaves them out)."""
    if not (site / "index.html").is_file():
        raise SyncError(f"--out: {site}: no index.html; build the site first (build-site --out {site})")
    files: dict[str, Entry] = {}
    for path in sorted(site.rglob("*")):
        rel = path.relative_to(site).as_posix()
        if any(part.startswith(".") for part in rel.split("/")) or not path.is_file():
            continue
        if path.is_symlink():
            raise SyncError(f"--out: {rel}: a symlink; a built site has none")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files[rel] = Entry(digest, path.stat().st_size, content_type(rel), cache_control(rel))
    return files


def parse_manifest(raw: bytes, where: str) -> dict[str, Entry]:
    """The last publish's files; SyncError naming the manifest when it is not one."""
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
        return {str(rel): Entry(**e) for rel, e in data["files"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SyncError(f"{where}: not a publish manifest ({exc}); remove it to publish "
                        f"every file again") from None


def render_manifest(files: dict[str, Entry]) -> bytes:
    body = {"format": FORMAT, "files": {rel: asdict(e) for rel, e in sorted(files.items())}}
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


def changes(old: dict[str, Entry], new: dict[str, Entry]) -> tuple[list[str], list[str], int]:
    """(to upload: non-HTML first, then pages; to remove; unchanged count). A file whose
    headers would differ is uploaded again, so the store serves the new ones."""
    upload = [rel for rel, e in new.items() if old.get(rel) != e]
    upload.sort(key=lambda rel: (rel.endswith(".html"), rel))
    return upload, sorted(set(old) - set(new)), len(new) - len(upload)


def headers(protocol: str, entry: Entry) -> dict[str, Any]:
    """The store's own keywords for Content-Type and Cache-Control, where it has them
    (s3fs passes them to PutObject, gcsfs to the object's metadata); a filesystem
    without headers (file://, memory://) gets none: the manifest still says them."""
    if protocol in ("s3", "s3a"):
        return {"ContentType": entry.content_type, "CacheControl": entry.cache_control}
    if protocol in ("gs", "gcs"):
        return {"content_type": entry.content_type,
                "fixed_key_metadata": {"cache_control": entry.cache_control}}
    return {}


def open_url(url: str) -> tuple[Any, str, str]:
    """(filesystem, root path, protocol) for URL; SyncError in one line otherwise (the
    URL's password and tokens redacted, as everywhere: rundir/storage.py)."""
    try:
        fs, root = storage.open_url(url)
    except storage.StorageError as exc:
        raise SyncError(str(exc)) from None
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return fs, root.rstrip("/"), protocol


def _one_line(url: str, text: str) -> SyncError:
    return SyncError(redact(" ".join(text.split()), storage.secrets(url)))


def publish_site(site: Path, url: str, dry_run: bool = False,
                 say: Callable[[str], None] | None = None) -> SyncReport:
    """Upload what changed since the last publish to URL, remove what the site no longer
    has, then write the manifest (see the module's docstring for the order)."""
    new = local_files(site)
    fs, root, protocol = open_url(url)
    shown = redact_url(url).rstrip("/")
    where = f"{shown}/{MANIFEST}"
    manifest_path = posixpath.join(root, MANIFEST)
    try:
        old = parse_manifest(fs.cat_file(manifest_path), where) if fs.exists(manifest_path) else {}
    except OSError as exc:
        raise _one_line(url, f"{where}: cannot read it: {exc}") from None
    upload, remove, unchanged = changes(old, new)
    report = SyncReport(url=shown, uploaded=upload, removed=remove, unchanged=unchanged)
    if dry_run:
        for rel in upload:
            (say or print)(f"upload {rel} ({new[rel].content_type}; {new[rel].cache_control})")
        for rel in remove:
            (say or print)(f"remove {rel}")
        return report
    try:
        for rel in upload:
            target = posixpath.join(root, rel)
            fs.makedirs(posixpath.dirname(target), exist_ok=True)
            fs.pipe_file(target, (site / rel).read_bytes(), **headers(protocol, new[rel]))
        for rel in remove:
            try:
                fs.rm_file(posixpath.join(root, rel))
            except FileNotFoundError:
                pass  # removed by a publish that was cut off before its manifest
        if upload or remove or not old:
            fs.makedirs(root, exist_ok=True)
            fs.pipe_file(manifest_path, render_manifest(new),
                         **headers(protocol, Entry("", 0, "application/json", REVALIDATE)))
    except OSError as exc:
        raise _one_line(url, f"URL {shown}: {exc}; publish again to finish (it is safe to retry)") from None
    return report
