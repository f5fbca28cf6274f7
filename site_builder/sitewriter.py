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
"""

from __future__ import annotations

import filecmp
import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path, PurePosixPath

MANIFEST = "manifest.json"
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


_SEQUENCE = itertools.count()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _exclusive_tmp(path: Path) -> tuple[int, Path]:
    """A new, empty temporary sibling of path that nobody else could have made:
    an existing name (or a planted symlink) is skipped, never written through."""
    for _ in range(1000):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_SEQUENCE)}.tmp")
        try:
            return os.open(tmp, _CREATE, 0o666), tmp  # the umask applies, as for any file
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def _sha(data: bytes) -> str:
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

    def _replace(self, path: Path, fill) -> None:  # noqa: ANN001 - fill(tmp_path) writes it
        """Write path through a fresh temporary sibling and a rename. The temporary
        name is created exclusively (O_EXCL, no symlink followed), like mkstemp
        but without its cost per file (a build writes thousands)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = _exclusive_tmp(path)
        except OSError as exc:
            raise SiteError(f"{path}: cannot write ({exc.strerror or exc})") from None
        os.close(fd)
        try:
            fill(tmp)
            os.replace(tmp, path)
        except OSError as exc:
            raise SiteError(f"{path}: cannot write ({exc.strerror or exc})") from None
        finally:
            if tmp.exists():
                tmp.unlink()

    def _atomic(self, path: Path, data: bytes) -> None:
        self._replace(path, lambda tmp: tmp.write_bytes(data))

    def is_current(self, rel: str, key: str) -> bool:
        """True (and recorded) when rel was written from the same key and is still there."""
        if self.old.get(rel) == key and (self.out / rel).is_file() and inside(
                self.out / rel, self.root):
            self.new[rel] = key
            self.unchanged += 1
            return True
        return False

    def write(self, rel: str, data: str | bytes, key: str | None = None) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        path = self._target(rel)
        self.new[rel] = key or _sha(raw)
        try:
            same = path.stat().st_size == len(raw) and path.read_bytes() == raw
        except OSError:
            same = False
        if same:
            self.unchanged += 1
            return
        self._atomic(path, raw)
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
        self._atomic(self.manifest_path, json.dumps(self.new, indent=0, sort_keys=True).encode())
        self._drop_legacy_cache()

    def _drop_legacy_cache(self) -> None:
        """Remove an older build's `<out>/.cache` (it published local data paths)."""
        legacy = self.out / LEGACY_CACHE
        if not legacy.is_dir() or legacy.is_symlink() or not inside(legacy, self.root):
            return
        for name in (MANIFEST, "digests.json"):
            item = legacy / name
            if item.is_file() and not item.is_symlink():
                item.unlink()
        aggregates = legacy / "aggregates"
        if aggregates.is_dir() and not aggregates.is_symlink():
            shutil.rmtree(aggregates, ignore_errors=True)
        try:
            legacy.rmdir()
        except OSError:
            pass  # something of the user's is in there: leave it
