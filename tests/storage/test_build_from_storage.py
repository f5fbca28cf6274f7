"""`build-site --data URL`: the same site as from the folder, fetching only what changed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rundir import storage, upload
from rundir.manifest import seal
from site_builder import remote
from tests.conftest import run_cli
from tests.support.s3server import SECRET_KEY
from tests.support.synthetic_runs import make_measured_run


def make_run(data: Path, run_id: str, seed: int) -> Path:
    path = make_measured_run(data / run_id, run_id=run_id, contexts=[1024], concurrency=[1, 2],
                             duration_s=0.6, seed=seed)
    seal(path)
    return path


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def aws_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


class Counting:
    """An fsspec filesystem that counts the reads and downloads made through it."""

    def __init__(self, fs: Any) -> None:
        self.fs, self.cats, self.gets = fs, 0, []

    def cat(self, paths: list[str], *args: Any, **kw: Any) -> dict[str, bytes]:
        self.cats += len(paths)
        return self.fs.cat(paths, *args, **kw)

    def get(self, remote_paths: list[str], *args: Any, **kw: Any) -> None:
        self.gets += remote_paths
        self.fs.get(remote_paths, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


def test_a_site_built_from_s3_is_the_site_built_from_the_folder(tmp_path: Path, bucket: str) -> None:
    data = tmp_path / "data"
    for i, run_id in enumerate(["run-a", "run-b"]):
        upload.upload(make_run(data, run_id, seed=i), bucket)
    local = run_cli("build-site", "--data", str(data), "--out", str(tmp_path / "local"), "-q")
    assert local.returncode == 0, local.stderr
    built = run_cli("build-site", "--data", bucket, "--out", str(tmp_path / "s3"), env=aws_env())
    assert built.returncode == 0, built.stderr
    assert f"Mirrored {bucket}: 2 run(s) fetched (10 files), 0 unchanged, 0 removed" in built.stderr
    site, want = tree(tmp_path / "s3"), tree(tmp_path / "local")
    assert site["index.html"] == want["index.html"]
    assert site["runs/run-a/index.html"] == want["runs/run-a/index.html"]
    assert site == want
    mirror = tmp_path / ".s3-build-cache" / remote.MIRROR
    assert sorted(p.name for p in mirror.iterdir()) == ["run-a", "run-b"]
    everything = b"".join([*site.values(), *tree(tmp_path / ".s3-build-cache").values()])
    assert SECRET_KEY.encode() not in everything and SECRET_KEY not in built.stdout + built.stderr


def test_only_new_runs_are_fetched_and_a_no_op_reads_no_manifest(tmp_path: Path, bucket: str) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    for i, run_id in enumerate(["run-a", "run-b"]):
        upload.upload(make_run(data, run_id, seed=i), bucket)
    fs, root = storage.open_url(bucket)
    first = remote.mirror(bucket, cache, fs=Counting(fs), root=root)
    assert first.fetched == ["run-a", "run-b"] and first.files == 10
    upload.upload(make_run(data, "run-c", seed=5), bucket)
    counting = Counting(fs)
    second = remote.mirror(bucket, cache, fs=counting, root=root)
    assert second.fetched == ["run-c"] and second.unchanged == ["run-a", "run-b"]
    assert sorted(p.rpartition("/")[2] for p in counting.gets) == sorted(
        p.name for p in (data / "run-c").iterdir())
    assert all("/run-c/" in p for p in counting.gets)
    assert counting.cats == 1  # run-c's manifest only
    idle = Counting(fs)
    third = remote.mirror(bucket, cache, fs=idle, root=root)
    assert third.fetched == [] and idle.cats == 0 and idle.gets == []
    assert tree(cache / remote.MIRROR / "run-c") == {
        **tree(data / "run-c"), "upload-manifest.json": fs.cat_file(f"{root}/run-c/upload-manifest.json")}


def test_a_removed_run_leaves_the_mirror_and_a_partial_upload_is_not_mirrored(
        tmp_path: Path, bucket: str) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    for i, run_id in enumerate(["run-a", "run-b"]):
        upload.upload(make_run(data, run_id, seed=i), bucket)
    remote.mirror(bucket, cache)
    fs, root = storage.open_url(bucket)
    fs.rm(f"{root}/run-b", recursive=True)
    fs.put_file(str(data / "run-a" / "run.yaml"), f"{root}/run-half/run.yaml")  # no manifest yet
    got = remote.mirror(bucket, cache)
    assert got.removed == ["run-b"] and got.unchanged == ["run-a"] and got.fetched == []
    assert sorted(p.name for p in (cache / remote.MIRROR).iterdir()) == ["run-a"]


def test_a_stored_file_that_differs_from_its_manifest_is_refused(tmp_path: Path, bucket: str) -> None:
    data = tmp_path / "data"
    upload.upload(make_run(data, "run-a", seed=0), bucket)
    fs, root = storage.open_url(bucket)
    fs.pipe_file(f"{root}/run-a/cells.parquet", b"not the measured bytes")
    built = run_cli("build-site", "--data", bucket, "--out", str(tmp_path / "s3"), env=aws_env())
    assert built.returncode == 1
    assert built.stderr.strip() == f"error: {bucket}/run-a/cells.parquet: sha256 differs from " \
                                   "its upload-manifest.json; upload the run again"
    assert not (tmp_path / "s3" / "index.html").exists()


def test_an_empty_bucket_and_a_missing_one_are_one_line(tmp_path: Path, bucket: str) -> None:
    empty = run_cli("build-site", "--data", bucket, "--out", str(tmp_path / "a"), env=aws_env())
    assert empty.returncode == 1
    assert empty.stderr.strip() == f"error: {bucket}: no uploaded runs found (each run is a folder " \
                                   "with an upload-manifest.json, written by bench upload)"
    missing = run_cli("build-site", "--data", f"s3://u:{SECRET_KEY}@no-such-bucket/x",
                      "--out", str(tmp_path / "b"), env=aws_env())
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert SECRET_KEY not in missing.stderr and "s3://u:<redacted>@no-such-bucket/x" in missing.stderr


def test_file_urls_mirror_too(tmp_path: Path) -> None:
    data, url = tmp_path / "data", f"file://{tmp_path / 'bucket'}"
    upload.upload(make_run(data, "run-a", seed=0), url)
    got = remote.mirror(url, tmp_path / "cache")
    assert got.fetched == ["run-a"]
    assert tree(tmp_path / "cache" / remote.MIRROR / "run-a") == tree(tmp_path / "bucket" / "run-a")
    assert remote.mirror(url, tmp_path / "cache").unchanged == ["run-a"]
