"""Where runs live in object storage, and the upload manifest that vouches for one.

Why in the contract package: `bench upload` writes this layout and `build-site
--data URL` reads it, and neither may depend on the other. Layout under any
fsspec URL (``s3://bucket/prefix``, ``gs://...``, ``file:///path``):

    URL/<key>/<every uploaded file, at its path in the run directory>
    URL/<key>/upload-manifest.json      written last: its presence means a whole run

where <key> is the run id's slug (rundir/slugs.py, the site's own rule). The
upload manifest is deterministic (no upload time), so uploading the same run
twice writes the same bytes, and "the same run" is simply "the same manifest".

fsspec is imported lazily: the collector's own install needs no storage
library until `bench upload` or `build-site --data URL` is used, and a
missing backend is one line naming the package to install.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rundir.contract import CELLS_FILE, GPU_METRICS_FILE, SOURCE_IMPORTED, RunInfo
from rundir.identity import source_key
from rundir.manifest import MANIFEST_FILE, file_hash, sealed_names
from rundir.redact import redact_tree, redact_url, url_secrets
from rundir.slugs import slugify

UPLOAD_MANIFEST = "upload-manifest.json"
FORMAT = 1
KIND = "speed-matrix run upload"
# The backend package fsspec needs for a protocol (the ones a maintainer is likely to use).
BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
            "abfs": "adlfs", "abfss": "adlfs", "http": "aiohttp", "https": "aiohttp"}
# Credentials the storage libraries read from the environment: never in a message.
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
                    "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_KEY",
                    "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BLOCK = 1 << 20


class StorageError(Exception):
    """One line for the user: what failed, the URL with its secrets redacted."""


def is_url(text: str) -> bool:
    """Whether --data/URL names object storage (has a scheme) rather than a local folder."""
    return bool(_SCHEME.match(str(text)))


def secrets(url: str) -> list[str]:
    """What a message about storage must never show: the URL's own and the environment's."""
    found = url_secrets(url)
    found += [v for name in SECRET_VARIABLES if (v := os.environ.get(name))]
    return found


def run_key(run_id: str) -> str:
    """The folder name of a run under the storage URL."""
    return slugify(run_id)


def open_url(url: str, **options: Any) -> tuple[Any, str]:
    """(fsspec filesystem, root path inside it) for a URL; StorageError when fsspec
    or the URL's backend is not installed, naming the package to install."""
    shown = redact_url(url)
    try:
        import fsspec  # lazily: the collector itself never needs it
    except ImportError:
        raise StorageError(f"{shown}: object storage needs the package fsspec "
                           "(pip install fsspec)") from None
    protocol = url.split("://", 1)[0].lower() if is_url(url) else "file"
    # A fresh instance that lists afresh: fsspec caches instances and s3fs caches listings,
    # and an upload or a mirror must see what is stored now, not what was seen before.
    options.setdefault("skip_instance_cache", True)
    if protocol in ("s3", "s3a"):
        options.setdefault("use_listings_cache", False)
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except ImportError:
        package = BACKENDS.get(protocol, f"the fsspec backend for {protocol}://")
        raise StorageError(f"{shown}: {protocol}:// needs the package {package} "
                           f"(pip install {package})") from None
    except ValueError as exc:  # an unknown protocol
        raise StorageError(f"{shown}: {redact_url(str(exc).splitlines()[0])}") from None
    return fs, root.rstrip("/")


def is_local(fs: Any) -> bool:
    """Whether an fsspec filesystem is the local disk (file://, a plain path)."""
    protocol = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def write_whole(fs: Any, path: str, data: bytes) -> None:
    """One file written so a reader never sees part of it: an object store's put is
    atomic; on a local disk it is written beside and renamed."""
    if is_local(fs):
        tmp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.{os.getpid()}.tmp")
        fs.pipe_file(tmp, data)
        fs.mv(tmp, path)
    else:
        fs.pipe_file(path, data)


def upload_names(run_dir: Path) -> list[str]:
    """The files an upload carries: the sealed files (and raw/) and the run's manifest.json,
    what the builder reads and what the collector vouched for; nothing else in the folder."""
    names = sealed_names(run_dir)
    if (Path(run_dir) / MANIFEST_FILE).is_file():
        names.append(MANIFEST_FILE)
    return names


def _measured_hardware(run_dir: Path) -> dict[str, Any]:
    """The hardware facts the run's own telemetry shows (gpu_metrics.parquet): the GPU
    names and how many GPUs were sampled. Empty when the run sampled none."""
    path = Path(run_dir) / GPU_METRICS_FILE
    if not path.is_file():
        return {}
    table = pq.read_table(path, columns=["gpu", "gpu_name"])
    gpus = {g for g in table.column("gpu").to_pylist() if g is not None}
    names = sorted({n for n in table.column("gpu_name").to_pylist() if n})
    out: dict[str, Any] = {"gpu_count": len(gpus)} if gpus else {}
    if names:
        out["gpu_name"] = names[0] if len(names) == 1 else names
    return out


def build_manifest(run_dir: Path, info: RunInfo, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The upload manifest of a run directory (deterministic: same files, same bytes).

    hardware.declared: run.yaml's hardware, as the collector wrote it (detected or from
    a run card: run.yaml does not say which); hardware.measured: what the run's GPU
    telemetry recorded itself, the facts a reader can trust beyond the card's word."""
    run_dir = Path(run_dir)
    names = list(names) if names is not None else upload_names(run_dir)
    files = {}
    for name in names:
        sha, size = file_hash(run_dir / name)
        files[name] = {"sha256": sha, "bytes": size}
    declared = {k: v for k, v in asdict(info.hardware).items() if v not in (None, "")}
    p = info.parameters
    # run.yaml's words were redacted by their writer; again here, as for anything that leaves
    # the machine. Not the whole manifest: `source_key` is named like a secret, and is not one.
    described = redact_tree({
        "collector": {"name": p.tool_name, "version": p.tool_version,
                      # a git commit id (`-dirty`: uncommitted changes) when the collector
                      # knew it (bench/server/provenance.py); imported runs never have one
                      "revision": p.collector_revision},
        "hardware": {"declared": declared, "measured": _measured_hardware(run_dir)},
    })
    data = {
        "format": FORMAT, "kind": KIND, "run_id": info.run_id, "key": run_key(info.run_id),
        "source": info.source, "measured_at": info.measured_at,
        **described, "files": files,
    }
    if info.source == SOURCE_IMPORTED and (run_dir / CELLS_FILE).is_file():
        data["source_key"] = source_key(info, pq.read_table(run_dir / CELLS_FILE))
    return data


def manifest_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def parse_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """An upload manifest from its bytes; StorageError names what is wrong in one line."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise StorageError(f"{where}: not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("kind") != KIND:
        raise StorageError(f"{where}: field format: expected an upload manifest of format {FORMAT}")
    files = data.get("files")
    if not isinstance(data.get("run_id"), str) or not isinstance(files, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("sha256"), str) and len(e["sha256"]) == 64
            and isinstance(e.get("bytes"), int) and _safe(n) for n, e in files.items()):
        raise StorageError(f"{where}: field files: expected run_id and each file's sha256 and bytes")
    return data


def _safe(name: object) -> bool:
    """A relative path inside the run (no absolute path, no `..`, no backslash)."""
    return (isinstance(name, str) and bool(name) and not name.startswith("/") and "\\" not in name
            and all(part not in ("", ".", "..") for part in name.split("/")))


def remote_sha256(fs: Any, path: str) -> str | None:
    """sha256 of a stored file, read in 1 MiB blocks; None when it is not there."""
    h = hashlib.sha256()
    try:
        with fs.open(path, "rb") as fh:
            for block in iter(lambda: fh.read(_BLOCK), b""):
                h.update(block)
    except FileNotFoundError:
        return None
    return h.hexdigest()
