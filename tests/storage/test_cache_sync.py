"""`build-site cache push/pull`: a runner that starts empty builds only what changed."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rundir import storage, upload
from site_builder import cachesync, load, publish, remote
from tests.conftest import run_cli
from tests.storage.test_build_from_storage import aws_env, make_run, tree
from tests.support.s3server import SECRET_KEY


def build(bucket: str, work: Path) -> publish.BuildReport:
    """What `build-site --data URL --out site --cache cache` does, in this process and
    with the relative paths a CI job uses (its workspace is the same path each time)."""
    with _inside(work):
        got = remote.mirror(bucket, Path("cache"))
        return publish.build_site(got.folder, Path("site"), cache_dir=Path("cache"), jobs=1)


def sync(verb: str, url: str, work: Path) -> cachesync.SyncResult:
    """`build-site cache push|pull URL --out site --cache cache`, run in work."""
    run = cachesync.push if verb == "push" else cachesync.pull
    work.mkdir(exist_ok=True)
    with _inside(work):
        return run(url, Path("cache"), Path("site"))


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run folders the builder hashed (load._survey: a digest not reused), and
    ("yaml", run) for each run.yaml it read (load.load_info: a cached entry not reused)."""
    seen: list[str] = []
    survey, info = load._survey, load.load_info

    def counting(run_dir: Path, salt: str):  # noqa: ANN202
        seen.append(Path(run_dir).name)
        return survey(run_dir, salt)

    def reading(source: load.RunSource):  # noqa: ANN202
        seen.append(("yaml", source.path.name))
        return info(source)

    monkeypatch.setattr(load, "_survey", counting)
    monkeypatch.setattr(load, "load_info", reading)
    return seen


def test_a_runner_that_starts_empty_builds_only_the_new_run(tmp_path: Path, bucket: str,
                                                            hashed: list[str]) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    for i, run_id in enumerate(["run-a", "run-b"]):
        upload.upload(make_run(data, run_id, seed=i), bucket)
    cache_url = f"{bucket}/.site-build-cache"
    first = build(bucket, work)
    assert sorted(first.aggregated) == ["run-a", "run-b"]
    pushed = sync("push", cache_url, work)
    assert pushed.moved == pushed.packs > 0 and pushed.removed == 0
    assert sync("push", cache_url, work).moved == 0  # nothing changed: nothing sent

    shutil.move(work, tmp_path / "first-runner")  # the next runner starts with nothing
    work.mkdir()
    hashed.clear()
    pulled = sync("pull", cache_url, work)
    assert pulled.found and pulled.moved_files == pulled.files and pulled.restamped >= 3
    noop = build(bucket, work)  # nothing changed: nothing hashed, aggregated or written
    assert (hashed, noop.aggregated, noop.written) == ([], [], 0)
    assert sorted(noop.reused) == ["run-a", "run-b"]

    upload.upload(make_run(data, "run-c", seed=7), bucket)
    added = build(bucket, work)
    assert hashed == ["run-c"] and added.aggregated == ["run-c"]
    assert sorted(added.reused) == ["run-a", "run-b"]
    assert not any(rel.startswith("runs/run-a/") for rel in _written(work / "site", pulled_at=work))
    local = run_cli("build-site", "--data", str(data), "--out", str(tmp_path / "local"), "-q")
    assert local.returncode == 0, local.stderr
    assert tree(work / "site") == tree(tmp_path / "local")  # the same site as a full build

    before = _packs(cache_url)
    again = sync("push", cache_url, work)  # the new run's packs and the site-wide ones
    after = _packs(cache_url)
    assert after["site/runs/run-a"] == before["site/runs/run-a"]
    assert after["cache/runs-mirror/run-b"] == before["cache/runs-mirror/run-b"]
    assert "site/runs/run-c" not in before and again.moved == len(set(after.values()) - set(before.values()))
    assert again.removed == len(set(before.values()) - set(after.values())) > 0


def _packs(url: str) -> dict[str, str]:
    """{group (the folder a pack holds): pack id} of the stored index."""
    fs, root = storage.open_url(url)
    files = json.loads(gzip.decompress(fs.cat_file(f"{root}/{cachesync.INDEX}")))["files"]
    groups = cachesync.pack_groups(list(files))
    return {g: files[rels[0]][0] for g, rels in groups.items()}


def _written(site: Path, pulled_at: Path) -> list[str]:
    """Files under site changed after the pull's record was written (the build's writes)."""
    since = (pulled_at / "cache" / cachesync.RECORD).stat().st_mtime_ns
    return [p.relative_to(site).as_posix() for p in site.rglob("*")
            if p.is_file() and p.stat().st_mtime_ns > since]


def test_the_cli_pulls_nothing_stored_then_pushes_and_restores(tmp_path: Path, bucket: str) -> None:
    data = tmp_path / "data"
    upload.upload(make_run(data, "run-a", seed=1), bucket)
    url = f"{bucket}/.site-build-cache"
    empty = run_cli("build-site", "cache", "pull", url, "--out", "site", cwd=tmp_path, env=aws_env())
    assert empty.returncode == 0, empty.stderr
    assert f"Nothing stored at {url} yet" in empty.stderr
    built = run_cli("build-site", "--data", bucket, "--out", "site", "-q", cwd=tmp_path, env=aws_env())
    assert built.returncode == 0, built.stderr
    pushed = run_cli("build-site", "--out", "site", "cache", "push", url, cwd=tmp_path, env=aws_env())
    assert pushed.returncode == 0, pushed.stderr
    assert f"Pushed to {url}:" in pushed.stderr and ", 0 removed" in pushed.stderr
    before = tree(tmp_path / "site")
    shutil.rmtree(tmp_path / "site")
    shutil.rmtree(tmp_path / ".site-build-cache")
    pulled = run_cli("build-site", "cache", "pull", url, cwd=tmp_path, env=aws_env())
    assert pulled.returncode == 0, pulled.stderr
    assert tree(tmp_path / "site") == before
    rebuilt = run_cli("build-site", "--data", bucket, "--out", "site", cwd=tmp_path, env=aws_env())
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "0 aggregated, 1 from cache; 0 files written" in rebuilt.stderr
    assert SECRET_KEY not in empty.stderr + pushed.stderr + pulled.stderr + rebuilt.stderr


def _one_run_pushed(tmp_path: Path, bucket: str) -> tuple[str, Any, str, dict]:
    """(cache URL, its filesystem, root, the stored index) after one run's build and push."""
    data, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    upload.upload(make_run(data, "run-a", seed=1), bucket)
    url = f"{bucket}/.site-build-cache"
    build(bucket, work)
    sync("push", url, work)
    fs, root = storage.open_url(url)
    return url, fs, root, json.loads(gzip.decompress(fs.cat_file(f"{root}/{cachesync.INDEX}")))


def test_a_damaged_pack_is_refused_in_one_line_and_nothing_half_written(
        tmp_path: Path, bucket: str) -> None:
    url, fs, root, index = _one_run_pushed(tmp_path, bucket)
    pack = index["files"]["site/runs/run-a/index.html"][0]
    fs.pipe_file(f"{root}/{cachesync.PACKS}/{pack}.tar.gz", gzip.compress(b"not a tar"))
    fresh = tmp_path / "fresh"
    with pytest.raises(cachesync.CacheSyncError, match=f"{pack}.tar.gz: not a readable pack"):
        sync("pull", url, fresh)
    assert not [p for p in fresh.rglob("*") if "pull-tmp" in p.name]
    assert not (fresh / "site" / "runs" / "run-a" / "index.html").exists()


def test_a_file_that_differs_from_the_index_is_refused(tmp_path: Path, bucket: str) -> None:
    url, fs, root, index = _one_run_pushed(tmp_path, bucket)
    index["files"]["site/index.html"][1] = "0" * 64  # the index vouches for other bytes
    fs.pipe_file(f"{root}/{cachesync.INDEX}", gzip.compress(json.dumps(index).encode()))
    with pytest.raises(cachesync.CacheSyncError, match="site/index.html: sha256 differs from the index"):
        sync("pull", url, tmp_path / "fresh")
    assert not (tmp_path / "fresh" / "site" / "index.html").exists()


def test_an_index_naming_a_path_outside_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    entry = ["0" * 64, "1" * 64, 1, 0, 0, 0]
    body = {"format": 1, "kind": cachesync.KIND, "files": {"site/../../escape": entry}}
    (store / cachesync.INDEX).write_bytes(gzip.compress(json.dumps(body).encode()))
    with pytest.raises(cachesync.CacheSyncError, match=r"field files: entry 'site/\.\./\.\./escape'"):
        sync("pull", f"file://{store}", tmp_path / "fresh")


def test_many_runs_share_packs_by_a_stable_256th() -> None:
    rels = [f"site/runs/r{i}/{page}" for i in range(cachesync.FLAT_MAX + 1)
            for page in ("index.html", "cells/a.html")]
    groups = cachesync.pack_groups(rels)
    assert 100 < len(groups) <= 256 and all(g.startswith("site/runs#") for g in groups)
    (home,) = [g for g, names in groups.items() if "site/runs/r7/index.html" in names]
    assert "site/runs/r7/cells/a.html" in groups[home]  # a run's files stay in one pack
    more = cachesync.pack_groups([*rels, "site/runs/new/index.html"])
    changed = [g for g in more if more[g] != groups.get(g)]
    assert len(changed) == 1  # one more run changes one pack


def test_packs_follow_runs_and_split_a_large_flat_folder() -> None:
    rels = [f"site/runs/r{i}/index.html" for i in range(3)] + ["site/runs/r1/cells/a.html"]
    rels += [f"cache/aggregates/{i:064x}.json" for i in range(cachesync.FLAT_MAX + 1)]
    rels += ["site/index.html", "cache/manifest.json"]
    groups = cachesync.pack_groups(rels)
    assert groups["site/runs/r1"] == ["site/runs/r1/cells/a.html", "site/runs/r1/index.html"]
    assert groups["site"] == ["site/index.html"] and groups["cache"] == ["cache/manifest.json"]
    aggregates = [g for g in groups if g.startswith("cache/aggregates#")]
    assert 100 < len(aggregates) <= 256
    assert sum(len(groups[g]) for g in aggregates) == cachesync.FLAT_MAX + 1


def test_a_symlinked_folder_leading_outside_is_never_written_through(tmp_path: Path) -> None:
    store, work, elsewhere = tmp_path / "store", tmp_path / "work", tmp_path / "elsewhere"
    (work / "site" / "runs" / "r").mkdir(parents=True)
    (work / "site" / "runs" / "r" / "index.html").write_text("<p>r</p>")
    (work / "cache").mkdir()
    sync("push", store.as_uri(), work)
    fresh = tmp_path / "fresh"
    (fresh / "site").mkdir(parents=True)
    elsewhere.mkdir()
    (fresh / "site" / "runs").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(cachesync.CacheSyncError, match="leads outside"):
        sync("pull", store.as_uri(), fresh)
    assert list(elsewhere.iterdir()) == []
