"""`bench upload`: put a validated run directory into object storage, whole or not at all.

Why the order: files first, the upload manifest last (rundir/storage.py), so a
reader that sees a manifest sees a whole run, and a connection cut anywhere
leaves either nothing a reader trusts or a complete run. A retry completes a
cut upload: a file already stored with the same sha256 is not sent again. A
different run already stored under the same key (its manifest differs) is
never overwritten: the importer's rule that one id is one run holds in the
bucket too.

What it does not do: lock. Two uploaders of different runs with one id at the
same moment can race (object stores offer no portable compare-and-swap); the
one whose manifest lands last wins, and the other's next upload is refused.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir import io, validate
from rundir.contract import RUN_YAML, RunInfo
from rundir.redact import redact, redact_url
from rundir.runsearch import no_runs
from rundir.storage import (
    UPLOAD_MANIFEST,
    StorageError,
    build_manifest,
    is_local,
    manifest_bytes,
    open_url,
    parse_manifest,
    remote_sha256,
    run_key,
    secrets,
    upload_names,
    write_whole,
)

ALREADY = "already there"
UPLOADED = "uploaded"


class UploadRefused(StorageError):
    """The run is invalid, or the bucket holds a different run under its key."""


@dataclass
class Outcome:
    run_id: str
    where: str  # URL/<key>, redacted
    state: str  # UPLOADED or ALREADY
    sent: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already stored with the same sha256


def _validate(run_dir: Path) -> RunInfo:
    """The run checked as `bench validate` and build-site check it (rundir/validate.py):
    an error there (the contract, files edited after measurement, a secret, a symlink
    leading out) refuses the upload with build-site's own words; warnings (a status
    the builder would publish differently) do not, as they do not stop a build."""
    if not (run_dir / RUN_YAML).is_file():  # bench validate's and build-site's line
        raise UploadRefused(no_runs(run_dir))
    report = validate.validate_run(run_dir)
    errors = [p for p in report.problems if p.level == validate.ERROR]
    if errors:
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        first = errors[0].text
        if first.endswith(validate.EDITED_HINT):  # a flag upload does not have
            first = first[:-len(validate.EDITED_HINT)] + \
                "; bench upload stores runs only as measured: measure it again"
        raise UploadRefused(f"{first}{more}")
    return io.read_run_info(run_dir)


def _stored_sizes(fs: Any, dest: str) -> dict[str, int]:
    """{path relative to dest: size} of what is stored under dest (empty when nothing)."""
    try:
        found = fs.find(dest, detail=True)
    except FileNotFoundError:
        return {}
    prefix = fs._strip_protocol(dest).rstrip("/") + "/"
    return {str(p)[len(prefix):]: int(d.get("size") or 0) for p, d in found.items()
            if str(p).startswith(prefix)}


def upload(run_dir: Path, url: str, fs: Any = None, root: str | None = None) -> Outcome:
    """Validate run_dir and store it under url/<key>/ (see the module doc). `fs`, `root`:
    an fsspec filesystem and path to use instead of opening url (tests inject faults)."""
    run_dir = Path(run_dir)
    info = _validate(run_dir)
    names = upload_names(run_dir)
    data = build_manifest(run_dir, info, names)
    mine = manifest_bytes(data)
    key = run_key(info.run_id)
    where = f"{redact_url(url).rstrip('/')}/{key}"
    if fs is None:
        fs, root = open_url(url)
    dest = f"{root.rstrip('/')}/{key}"
    mpath = f"{dest}/{UPLOAD_MANIFEST}"
    try:
        return _transfer(fs, run_dir, names, data, mine, dest, mpath, where, info.run_id)
    except StorageError:
        raise
    except Exception as exc:  # a cut connection, a refused credential, a full bucket
        text = " ".join(str(exc).split()) or type(exc).__name__
        # A missing bucket or a refused credential will not pass by trying again.
        hint = "" if isinstance(exc, FileNotFoundError | PermissionError) else \
            "; run the same command again to complete it"
        raise StorageError(redact(f"{where}: upload stopped ({type(exc).__name__}: {text}){hint}",
                                  secrets(url))) from None


def _transfer(fs: Any, run_dir: Path, names: list[str], data: dict, mine: bytes, dest: str,
              mpath: str, where: str, run_id: str) -> Outcome:
    stored = _stored_sizes(fs, dest)
    equal = False
    if UPLOAD_MANIFEST in stored:
        theirs = fs.cat_file(mpath)
        if theirs != mine:
            other = parse_manifest(theirs, f"{where}/{UPLOAD_MANIFEST}")
            raise UploadRefused(
                f"{where}: holds a different run (id {other['run_id']!r}, {_differs(other, data)}); "
                "not overwritten: a run's id is its --out folder's name (else its start time, "
                "model and engine), so measure it again into another --out folder")
        equal = True
    out = Outcome(run_id, where, UPLOADED)
    for name in names:
        size = data["files"][name]["bytes"]
        remote = f"{dest}/{name}"
        if stored.get(name) == size and (
                equal or remote_sha256(fs, remote) == data["files"][name]["sha256"]):
            out.skipped.append(name)  # the manifest vouches for it, or its sha256 matches
            continue
        if is_local(fs):
            fs.makedirs(posixpath.dirname(remote), exist_ok=True)
        fs.put_file(str(run_dir / name), remote)
        out.sent.append(name)
    if equal and not out.sent:
        out.state = ALREADY
        return out
    write_whole(fs, mpath, mine)
    return out


def _differs(theirs: dict, mine: dict) -> str:
    """Which files differ, in a few words (the first one named)."""
    a, b = theirs.get("files", {}), mine["files"]
    changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    if not changed:
        return "its manifest differs"
    more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
    return f"{changed[0]}{more} differ"
