"""Writing the site folder: atomic, change-only, and confined to --out.

The builder deletes files the previous build wrote and this one did not,
from a manifest kept in the build cache. A site folder is often committed
and shared, and so may be a cache; a manifest naming `../victim`, an
absolute path or a path through a symlink that leads elsewhere must never
make a build touch anything outside --out. Every path is therefore checked
before it is written or deleted: names that climb (`..`) or are absolute
are ignored, and the real location (symlinks followed) must lie inside
--out. Ignored manifest entries are reported; a write that would land
outside --out stops the build with one line (SiteError).

The cache (manifest, digests, aggregates) lives outside the published
tree: by default next to --out as `.<name>-build-cache/` (docs/site.md).

Every file goes through rundir.io.atomic_write (one fsync/permission policy
for the whole project). A worker process writes a run's pages with its own
SiteWriter and hands back a `Tally` the parent `merge`s, so the manifest
the parent saves names every file of the build.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rundir.io import atomic_write

MANIFEST = "manifest.json"  # in the build cache: what the last build wrote
DIGESTS = "digests.json"  # in the build cache: file signatures -> content digests
AGGREGATES = "aggregates"  # in the build cache: per-run aggregates (AggregateCache)
LEGACY_CACHE = ".cache"  # where builds before issue 9 kept the cache: inside --out


class SiteError(Exception):
    """The output folder cannot be written safely (a symlink leading outside
    --out, a full disk, a folder where a page goes): one line."""


def default_cache_dir(out: Path) -> Path:
    """`.<out name>-build-cache` beside --out: never inside the published tree."""
    absolute = Path(os.path.abspath(out))
    return absolute.parent / f".{absolute.name or 'site'}-build-cache"


def inside(path: Path, root: Path) -> bool:
    """True when path's real location (symlinks followed) is root or below it."""
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return False
    return real == root or root in real.parents


def plain_relative(rel: object) -> bool:
    """A manifest name the builder could have written: relative, no `..`, no NUL."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        return False
    p = PurePosixPath(rel)
    return not p.is_absolute() and ".." not in p.parts and p.parts[0] not in ("", ".")


def digest(data: bytes) -> str:
    """sha256 hex of data: the key of a file written from its content."""
    return hashlib.sha256(data).hexdigest()


def _read_manifest(path: Path) -> tuple[dict[str, str], list[str]]:
    """(entries, rejected names) of a manifest; a file that is not a JSON map of
    names to keys is ignored whole (its paths are never trusted)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}, []
    if not isinstance(data, dict):
        return {}, [f"{path.name} is not a map of paths"]
    good: dict[str, str] = {}
    bad: list[str] = []
    for rel, key in data.items():
        if plain_relative(rel) and isinstance(key, str):
            good[rel] = key
        else:
            bad.append(rel if isinstance(rel, str) else repr(rel))
    return good, bad


@dataclass
class Tally:
    """What a writer did since its last reset: the manifest entries of the files
    it wrote or found current, and how many of each. Picklable: a worker
    returns it and the parent merges it."""

    entries: dict[str, str] = field(default_factory=dict)
    written: int = 0
    unchanged: int = 0


def _cannot_write(path: Path, exc: OSError) -> SiteError:
    return SiteError(f"{path}: cannot write ({exc.strerror or exc})")


def save(path: Path, data: bytes) -> None:
    """Write a build-cache file (manifest, digests) atomically; SiteError, one line."""
    try:
        atomic_write(path, lambda tmp: tmp.write_bytes(data))
    except OSError as exc:
        raise _cannot_write(path, exc) from None


class SiteWriter:
    """Atomic, change-only writes into the output folder, with stale-file cleanup."""

    def __init__(self, out: Path, cache_dir: Path, protect: tuple[Path, ...] = ()) -> None:
        self.out = Path(out)
        self.root = self.out.resolve()
        self.protect = tuple(Path(p).resolve() for p in protect)  # never deleted (--data)
        self.manifest_path = Path(cache_dir) / MANIFEST
        self.old, self.ignored = _read_manifest(self.manifest_path)
        legacy = self.out / LEGACY_CACHE / MANIFEST
        if not self.manifest_path.exists() and legacy.is_file() and not legacy.is_symlink():
            self.old, self.ignored = _read_manifest(legacy)  # an older build's cache: adopt it
        self.new: dict[str, str] = {}
        self.written = self.unchanged = self.removed = 0
        self._safe_dirs: set[Path] = set()
        self._inside_dirs: dict[str, bool] = {}
        self._out_text = os.fspath(self.out)
        self.seen: dict[str, list[int]] = {}  # size, mtime, inode of files found current

    def _target(self, rel: str) -> Path:
        """out/rel, after making sure its folder is (or will be created) inside --out."""
        path = self.out / rel
        folder = path.parent
        if folder not in self._safe_dirs:
            probe = folder
            while not (probe.exists() or probe.is_symlink()) and probe != self.out:
                probe = probe.parent
            if not inside(probe, self.root):
                real = probe.resolve()
                raise SiteError(f"{probe}: leads outside --out {self.out} (to {real}); "
                                "refusing to write there")
            self._safe_dirs.add(folder)
        return path

    def _replace(self, path: Path, fill: Callable[[Path], None]) -> None:
        """Write path through rundir.io.atomic_write; OSError becomes SiteError."""
        self.seen.pop(os.path.relpath(path, self.out), None)
        try:
            atomic_write(path, fill)
        except OSError as exc:
            raise _cannot_write(path, exc) from None

    def reset(self) -> None:
        """Start a new tally (a worker does, before each run it writes)."""
        self.new, self.written, self.unchanged = {}, 0, 0

    def tally(self) -> Tally:
        """The files written or found current since the last reset."""
        return Tally(dict(self.new), self.written, self.unchanged)

    def merge(self, tally: Tally) -> None:
        """Count another writer's files as this build's (a worker's run pages):
        they go into the manifest, so the next build neither rewrites nor deletes them."""
        self.new.update(tally.entries)
        self.written += tally.written
        self.unchanged += tally.unchanged

    def _current_file(self, rel: str) -> bool:
        """out/rel is a file whose real location is inside --out: one lstat for a plain
        file, whose folder's real location is looked up once a build (a symlink is
        followed and checked in full)."""
        path = os.path.join(self._out_text, rel)
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            return os.path.isfile(path) and inside(Path(path), self.root)
        if not stat.S_ISREG(st.st_mode):
            return False
        if not self._inside_dir(os.path.dirname(path)):
            return False
        self.seen[rel] = [st.st_size, st.st_mtime_ns, st.st_ino]  # BuildState needs no stat
        return True

    def _inside_dir(self, folder: str) -> bool:
        """The folder's real location is inside --out: a plain folder (not a symlink)
        below --out whose parent's is; --out itself or a symlinked folder resolved in
        full. Remembered for the build."""
        hit = self._inside_dirs.get(folder)
        if hit is None:
            parent = os.path.dirname(folder)
            try:
                plain = stat.S_ISDIR(os.lstat(folder).st_mode)
            except OSError:
                plain = False
            if plain and parent != folder and folder.startswith(self._out_text + os.sep):
                hit = self._inside_dir(parent)
            else:
                hit = inside(Path(folder), self.root)
            self._inside_dirs[folder] = hit
        return hit

    def is_current(self, rel: str, key: str) -> bool:
        """True (and recorded) when rel was written from the same key and is still there."""
        if self.old.get(rel) == key and self._current_file(rel):
            self.new[rel] = key
            self.unchanged += 1
            return True
        return False

    def write(self, rel: str, data: str | bytes, key: str | None = None) -> None:
        """Write data to out/rel unless the same bytes are there (a host syncing
        the folder then uploads only what moved); key defaults to the content's digest."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        path = self._target(rel)
        self.new[rel] = key or digest(raw)
        try:
            same = path.stat().st_size == len(raw) and path.read_bytes() == raw
        except OSError:
            same = False
        if same:
            self.unchanged += 1
            return
        self._replace(path, lambda tmp: tmp.write_bytes(raw))
        self.written += 1

    def copy(self, rel: str, src: Path, key: str) -> None:
        """Copy src to rel (in the kernel, not through Python) unless it is current."""
        if self.is_current(rel, key):
            return
        path = self._target(rel)
        self.new[rel] = key
        try:
            same = (path.stat().st_size == Path(src).stat().st_size
                    and filecmp.cmp(src, path, shallow=False))
        except OSError:
            same = False
        if same:
            self.unchanged += 1
            return
        self._replace(path, lambda tmp: shutil.copyfile(src, tmp))
        self.written += 1

    def keep(self, rel: str) -> None:
        """Keep a file written outside the manifest's keys (e.g. the Vega bundle)."""
        self.new[rel] = self.old.get(rel, "kept")

    def forget(self, prefix: str) -> None:
        """Drop everything under prefix (a run that failed to render): its files
        from this build and the last are deleted, so no half run is published."""
        for rel in [r for r in self.new if r.startswith(prefix)]:
            del self.new[rel]
        folder = self.out / prefix.rstrip("/")
        if folder.is_dir() and not folder.is_symlink() and inside(folder, self.root):
            shutil.rmtree(folder, ignore_errors=True)

    def _deletable(self, rel: str) -> Path | None:
        path = self.out / rel
        if not inside(path, self.root) or path.resolve() == self.root:
            return None
        if any(inside(path, p) for p in self.protect):
            return None
        return path

    def finish(self) -> None:
        """Delete files the previous build wrote and this one did not; save the manifest.

        Only paths whose real location is inside --out (and not inside --data) are
        deleted; the others are left alone and listed in `ignored`."""
        for rel in sorted(set(self.old) - set(self.new)):
            path = self._deletable(rel)
            if path is None:
                self.ignored.append(rel)
                continue
            if not path.is_file():
                continue
            path.unlink()
            self.removed += 1
            parent = path.parent
            while parent != self.out and inside(parent, self.root):
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
                parent = parent.parent
        save(self.manifest_path, json.dumps(self.new, indent=0, sort_keys=True).encode())
        self._drop_legacy_cache()

    def _drop_legacy_cache(self) -> None:
        """Remove an older build's `<out>/.cache` (it published local data paths)."""
        legacy = self.out / LEGACY_CACHE
        if not legacy.is_dir() or legacy.is_symlink() or not inside(legacy, self.root):
            return
        for name in (MANIFEST, DIGESTS):
            item = legacy / name
            if item.is_file() and not item.is_symlink():
                item.unlink()
        aggregates = legacy / AGGREGATES
        if aggregates.is_dir() and not aggregates.is_symlink():
            shutil.rmtree(aggregates, ignore_errors=True)
        try:
            legacy.rmdir()
        except OSError:
            pass  # something of the user's is in there: leave it
