"""`build-site cache push URL` / `cache pull URL`: the build cache and the built site
kept in object storage, so a CI runner that starts empty builds incrementally.

Why: a rebuild is fast because of two folders the builder keeps: the build cache
(aggregates, the mirror of the bucket's runs, digests, the last build's manifest) and
--out (a page written from the same key is not rendered again). A runner without a
cache step of its own has neither, and its build is a cold one. `pull` before the
build restores both from URL; `push` after it stores what changed.

Layout under URL (any fsspec URL; beside the runs, e.g. s3://bucket/runs/.site-build-cache,
which the runs' listing skips, as it skips every folder whose name starts with a dot):

    URL/packs/<id>.tar.gz   files grouped by folder (one run's pages, or 1/256th of
                            the runs' when there are more than 256; the same for the
                            mirrored runs; 1/256th of the aggregates; ...), named by
                            the sha256 of their names and contents: a pack never
                            changes under its name
    URL/index.json.gz       every file: its pack, sha256, size and stat when pushed;
                            written last, so a reader only ever sees whole pushes

Packs keep the number of objects under about a thousand however many runs (an object
store charges and waits per request: at 1,000 runs, one pack a run made a pull of
2,265 objects take 28 s against moto), and a build that adds one run changes a few of
them: the one holding its pages, the one holding its mirrored files, the site-wide
pages', one of the aggregates'.

Push hashes only the files whose size, mtime, ctime or inode changed since the last
push or pull (a record kept in the cache, never pushed), uploads the packs the stored
index lacks, writes the index, then removes the packs it no longer names. Pull
downloads the packs holding files that are missing or different here, checks every
file against its sha256, and puts each in place through a temporary name.

Then pull renews the file stats in the builder's own records (site_builder/restamp.py):
a restored file has a new inode, and the builder trusts a digest or a cached entry
only while its files keep theirs. So the runner trusts exactly what the pushing
machine would have trusted, without hashing every run again.

Trust: the pulled cache is trusted as a local one is (aggregates are used by digest).
Push from the job that builds from the bucket and publishes, never from a pull
request's preview build.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import re
import tarfile
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir.manifest import file_hash
from rundir.redact import redact, redact_url
from rundir.storage import StorageError, is_local, open_url, secrets, write_whole
from site_builder.restamp import Stat, restamp
from site_builder.sitewriter import inside, plain_relative

INDEX = "index.json.gz"
PACKS = "packs"
FORMAT = 1
KIND = "speed-matrix build cache"
RECORD = ".cachesync.json"  # in the cache folder, never pushed: stat -> sha256 of files
ROOTS = ("cache", "site")  # the index's names start with one: the build cache, --out
FLAT_MAX = 256  # a folder with more entries than this is packed by 1/256th of its names
_BLOCK = 1 << 20
_SHA = re.compile(r"[0-9a-f]{64}")



class CacheSyncError(StorageError):
    """One line: what could not be pushed or pulled, the URL's secrets redacted."""


@dataclass
class SyncResult:
    url: str  # redacted
    files: int = 0  # files the index lists
    packs: int = 0  # packs the index names
    moved: int = 0  # packs uploaded (push) or downloaded (pull)
    moved_files: int = 0  # files written here (pull)
    removed: int = 0  # packs removed (push)
    restamped: int = 0  # builder records renewed (pull)
    found: bool = True  # pull: an index was there


@dataclass
class _File:
    rel: str  # "cache/..." or "site/..."
    path: Path
    sha: str
    size: int
    stat: Stat


@dataclass
class _Index:
    files: dict[str, list[Any]] = field(default_factory=dict)  # rel -> [pack, sha, size, *stat]

    def packs(self) -> set[str]:
        return {e[0] for e in self.files.values()}


def _stat(path: Path) -> Stat:
    st = os.stat(path, follow_symlinks=False)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _roots(cache_dir: Path, out: Path) -> dict[str, Path]:
    return {"cache": Path(cache_dir), "site": Path(out)}


class _Record:
    """sha256 of local files by path and stat: push and pull hash a file once."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = Path(cache_dir) / RECORD
        try:
            data = json.loads(self.path.read_text("utf-8"))
            self.entries: dict[str, list[Any]] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.entries = {}
        self.fresh: dict[str, list[Any]] = {}

    def sha(self, path: Path, stat: Stat) -> str:
        key = os.path.abspath(path)
        hit = self.entries.get(key)
        if isinstance(hit, list) and len(hit) == 5 and hit[:4] == stat and isinstance(hit[4], str):
            sha = hit[4]
        else:
            sha = file_hash(path)[0]
        self.fresh[key] = [*stat, sha]
        return sha

    def note(self, path: Path, stat: Stat, sha: str) -> None:
        self.fresh[os.path.abspath(path)] = [*stat, sha]

    def save(self) -> None:
        tmp = self.path.with_name(f"{RECORD}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.fresh, separators=(",", ":")), "utf-8")
        os.replace(tmp, self.path)


def _walk(roots: dict[str, Path], record: _Record) -> dict[str, _File]:
    """Every regular file under the two folders (symlinks and our own record left out)."""
    files: dict[str, _File] = {}
    for name, root in roots.items():
        if not root.is_dir():
            continue
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for leaf in sorted(names):
                path = Path(folder) / leaf
                rel = f"{name}/{path.relative_to(root).as_posix()}"
                if leaf.startswith(RECORD) or path.is_symlink() or not path.is_file():
                    continue
                stat = _stat(path)
                files[rel] = _File(rel, path, record.sha(path, stat), stat[0], stat)
    return files


def pack_groups(rels: list[str]) -> dict[str, list[str]]:
    """{group: its names}. A file three folders deep or more goes with its folder at that
    depth (site/runs/<run>, cache/runs-mirror/<run>); when that folder's parent holds more
    than FLAT_MAX such folders (a site of many runs), with 1/256th of them, by the sha256
    of the folder's name. A file nearer the top goes with its folder, split the same way
    by its own name when the folder holds more than FLAT_MAX files (the aggregates). So
    the number of packs stays near a thousand however many runs, an object store is
    asked for few objects, and one new run changes a few packs."""
    flat: dict[str, int] = defaultdict(int)
    wide: dict[str, set[str]] = defaultdict(set)
    for rel in rels:
        parts = rel.split("/")
        if len(parts) < 4:
            flat["/".join(parts[:-1])] += 1
        else:
            wide["/".join(parts[:2])].add(parts[2])
    groups: dict[str, list[str]] = defaultdict(list)
    for rel in sorted(rels):
        parts = rel.split("/")
        if len(parts) >= 4:
            parent = "/".join(parts[:2])
            group = "/".join(parts[:3]) if len(wide[parent]) <= FLAT_MAX else \
                f"{parent}#{_share(parts[2])}"
        else:
            group = "/".join(parts[:-1])
            if flat[group] > FLAT_MAX:
                group += f"#{_share(parts[-1])}"
        groups[group].append(rel)
    return dict(groups)


def _share(name: str) -> str:
    """Which 1/256th a name falls in: stable across builds and machines."""
    return hashlib.sha256(name.encode()).hexdigest()[:2]


def pack_id(files: list[_File]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.rel):
        h.update(f"{f.rel}\0{f.sha}\n".encode())
    return h.hexdigest()


def _open(url: str) -> tuple[Any, str, str]:
    shown = redact_url(url).rstrip("/")
    try:
        fs, root = open_url(url)
    except StorageError as exc:
        raise CacheSyncError(str(exc)) from None
    return fs, root, shown


def _fail(shown: str, url: str, what: str, exc: Exception) -> CacheSyncError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return CacheSyncError(redact(f"{shown}: {what} ({type(exc).__name__}: {text}); "
                                 "it is safe to run it again", secrets(url)))


def _read_index(fs: Any, root: str, shown: str) -> _Index | None:
    path = f"{root}/{INDEX}"
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError:
        return None
    where = f"{shown}/{INDEX}"
    try:
        data = json.loads(gzip.decompress(raw))
    except (OSError, EOFError, ValueError):
        raise CacheSyncError(f"{where}: not a gzip-compressed JSON index") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("kind") != KIND:
        raise CacheSyncError(f"{where}: field format: expected a build cache index of format {FORMAT}")
    files = data.get("files")
    if not isinstance(files, dict):
        raise CacheSyncError(f"{where}: field files: expected a map of names")
    for rel, e in files.items():
        if not (plain_relative(rel) and rel.split("/", 1)[0] in ROOTS and "/" in rel
                and isinstance(e, list) and len(e) == 6 and all(isinstance(x, str) for x in e[:2])
                and _SHA.fullmatch(e[0]) and _SHA.fullmatch(e[1])
                and all(isinstance(x, int) and not isinstance(x, bool) for x in e[2:])):
            raise CacheSyncError(f"{where}: field files: entry {rel[:80]!r} is not "
                                 "[pack, sha256, size, mtime, ctime, inode] under cache/ or site/")
    return _Index(files)


def _write_index(fs: Any, root: str, index: _Index) -> None:
    body = json.dumps({"format": FORMAT, "kind": KIND, "files": index.files},
                      separators=(",", ":"), sort_keys=True).encode()
    data = gzip.compress(body, compresslevel=6, mtime=0)
    write_whole(fs, f"{root}/{INDEX}", data)


def push(url: str, cache_dir: Path, out: Path) -> SyncResult:
    """Store the build cache and the built site under url (see the module doc)."""
    cache_dir, out = Path(cache_dir), Path(out)
    if not cache_dir.is_dir():
        raise CacheSyncError(f"--cache: {cache_dir}: no such folder; build the site first")
    record = _Record(cache_dir)
    files = _walk(_roots(cache_dir, out), record)
    fs, root, shown = _open(url)
    result = SyncResult(shown, files=len(files))
    try:
        stored = (_read_index(fs, root, shown) or _Index()).packs()
        index = _Index()
        todo: dict[str, list[_File]] = {}
        for rels in pack_groups(list(files)).values():
            members = [files[r] for r in rels]
            pid = pack_id(members)
            for f in members:
                index.files[f.rel] = [pid, f.sha, f.size, *f.stat[1:]]
            if pid not in stored:
                todo[pid] = members
        named = index.packs()
        result.packs = len(named)
        with tempfile.TemporaryDirectory(prefix="cachesync-") as tmp:
            locals_, remotes = [], []
            for pid, members in todo.items():
                local = Path(tmp) / f"{pid}.tar.gz"
                _make_pack(local, members)
                locals_.append(str(local))
                remotes.append(f"{root}/{PACKS}/{pid}.tar.gz")
            if remotes:
                if is_local(fs):
                    fs.makedirs(f"{root}/{PACKS}", exist_ok=True)
                fs.put(locals_, remotes)
        result.moved = len(todo)
        _write_index(fs, root, index)
        for pid in sorted(stored - named):
            try:
                fs.rm_file(f"{root}/{PACKS}/{pid}.tar.gz")
            except FileNotFoundError:
                pass
            result.removed += 1
    except CacheSyncError:
        raise
    except Exception as exc:  # a cut connection, a refused credential
        raise _fail(shown, url, "push stopped", exc) from None
    record.save()
    return result


def _make_pack(path: Path, members: list[_File]) -> None:
    """A tar.gz of the files under their index names (gzip level 1: raw Parquet does
    not compress, pages do, and the runner waits for it)."""
    with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for f in members:
            info = tarfile.TarInfo(f.rel)
            info.size, info.mtime, info.mode = f.size, f.stat[1] // 1_000_000_000, 0o644
            with open(f.path, "rb") as fh:
                tar.addfile(info, fh)


def pull(url: str, cache_dir: Path, out: Path) -> SyncResult:
    """Restore the build cache and the built site from url (see the module doc). A URL
    with nothing stored yet is not an error: the build that follows is a cold one."""
    cache_dir, out = Path(cache_dir), Path(out)
    fs, root, shown = _open(url)
    try:
        index = _read_index(fs, root, shown)
    except CacheSyncError:
        raise
    except Exception as exc:
        raise _fail(shown, url, "cannot read the index", exc) from None
    if index is None:
        return SyncResult(shown, found=False)
    roots = _roots(cache_dir, out)
    for folder in roots.values():
        folder.mkdir(parents=True, exist_ok=True)
    record = _Record(cache_dir)
    result = SyncResult(shown, files=len(index.files), packs=len(index.packs()))
    want: dict[str, dict[str, Path]] = defaultdict(dict)  # pack -> {rel: local path}
    same: dict[str, Path] = {}
    for rel, e in index.files.items():
        top, _, name = rel.partition("/")
        path = roots[top] / name
        try:
            st = _stat(path)
        except OSError:
            st = None
        if st is not None and st[0] == e[2] and record.sha(path, st) == e[1]:
            same[rel] = path
        else:
            want[e[0]][rel] = path
    try:
        with tempfile.TemporaryDirectory(prefix="cachesync-") as tmp:
            pids = sorted(want)
            if pids:
                fs.get([f"{root}/{PACKS}/{p}.tar.gz" for p in pids],
                       [str(Path(tmp) / f"{p}.tar.gz") for p in pids])
            real = {top: folder.resolve() for top, folder in roots.items()}
            checked: set[Path] = set()
            for pid in pids:
                result.moved_files += _unpack(Path(tmp) / f"{pid}.tar.gz", want[pid], index,
                                              record, f"{shown}/{PACKS}/{pid}.tar.gz", real, checked)
    except CacheSyncError:
        raise
    except Exception as exc:
        raise _fail(shown, url, "pull stopped", exc) from None
    result.moved = len(want)
    moved = {}
    for rel, e in index.files.items():
        top, _, name = rel.partition("/")
        path = roots[top] / name
        moved[os.path.abspath(path)] = (e[2:], _stat(path))
    result.restamped = restamp(cache_dir, out, moved)
    record.save()
    return result


def _make_inside(folder: Path, root: Path) -> None:
    """Create folder unless its nearest existing parent (a symlink followed) or the folder
    itself lies outside root (resolved): a restore never writes through a link leading out."""
    probe = folder
    while not (probe.exists() or probe.is_symlink()) and probe.parent != probe:
        probe = probe.parent
    if inside(probe, root):
        folder.mkdir(parents=True, exist_ok=True)
        if inside(folder, root):
            return
    raise CacheSyncError(f"{folder}: leads outside {root}; refusing to write there")


def _unpack(pack: Path, wanted: dict[str, Path], index: _Index, record: _Record,
            where: str, roots: dict[str, Path], checked: set[Path]) -> int:
    """Write the wanted files of one pack in place, each checked against its sha256.
    roots: resolved; checked: the folders already found inside them."""
    done: set[str] = set()
    try:
        with tarfile.open(pack, mode="r:gz") as tar:
            for member in tar:
                path = wanted.get(member.name)
                if path is None or not member.isfile():
                    continue
                sha = index.files[member.name][1]
                source = tar.extractfile(member)
                if source is None:
                    continue
                tmp = path.with_name(f".{path.name}.{os.getpid()}.pull-tmp")
                if path.parent not in checked:  # once a folder: a symlink must not lead out
                    _make_inside(path.parent, roots[member.name.split("/", 1)[0]])
                    checked.add(path.parent)
                h = hashlib.sha256()
                try:
                    with open(tmp, "wb") as fh:
                        for block in iter(functools.partial(source.read, _BLOCK), b""):
                            h.update(block)
                            fh.write(block)
                    if h.hexdigest() != sha:
                        raise CacheSyncError(f"{where}: {member.name}: sha256 differs from the "
                                             "index; push the cache again")
                    os.replace(tmp, path)
                finally:
                    tmp.unlink(missing_ok=True)
                record.note(path, _stat(path), sha)
                done.add(member.name)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile) as exc:
        raise CacheSyncError(f"{where}: not a readable pack ({exc}); push the cache again") from None
    missing = sorted(set(wanted) - done)
    if missing:
        raise CacheSyncError(f"{where}: lacks {missing[0]}; push the cache again")
    return len(done)


def describe(result: SyncResult, verb: str) -> str:
    """The one-line summary the CLI prints."""
    if not result.found:
        return f"Nothing stored at {result.url} yet: the next build is a cold one"
    if verb == "push":
        return (f"Pushed to {result.url}: {result.files} files in {result.packs} packs, "
                f"{result.moved} uploaded, {result.removed} removed")
    return (f"Pulled from {result.url}: {result.files} files in {result.packs} packs, "
            f"{result.moved} downloaded ({result.moved_files} files written), "
            f"{result.restamped} build records renewed")

