"""`bench upload` against a real S3-compatible server (moto's, over HTTP) and file://."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rundir import contract, storage, upload
from rundir.io import read_run_info
from rundir.manifest import seal
from tests.conftest import run_cli
from tests.support.s3server import SECRET_KEY
from tests.support.synthetic_runs import make_measured_run

REPO = Path(__file__).resolve().parents[2]


def sealed_run(path: Path, run_id: str = "run-a", seed: int = 0) -> Path:
    make_measured_run(path, run_id=run_id, contexts=[1024], concurrency=[1, 2],
                      duration_s=0.6, seed=seed)
    seal(path)
    return path


def stored(url: str) -> dict[str, bytes]:
    fs, root = storage.open_url(url)
    prefix = root.rstrip("/") + "/"
    return {p[len(prefix):]: fs.cat_file(p) for p in fs.find(root)}


def aws_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


class CutFS:
    """A filesystem whose connection is cut after `puts` file uploads (a fault by count)."""

    def __init__(self, fs: Any, puts: int) -> None:
        self.fs, self.left = fs, puts

    def put_file(self, *args: Any, **kw: Any) -> None:
        if self.left <= 0:
            raise ConnectionResetError("connection reset by peer")
        self.left -= 1
        self.fs.put_file(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


def test_upload_stores_every_file_and_a_manifest_that_vouches_for_them(
        tmp_path: Path, bucket: str) -> None:
    run = sealed_run(tmp_path / "run-a")
    result = run_cli("bench", "upload", str(run), f"{bucket}/runs", env=aws_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == \
        f"run-a: uploaded to {bucket}/runs/run-a (5 file(s) sent, 0 already there)"
    files = stored(f"{bucket}/runs")
    names = sorted(p.name for p in run.iterdir())
    assert sorted(files) == sorted([f"run-a/{n}" for n in names] + ["run-a/upload-manifest.json"])
    for name in names:
        assert files[f"run-a/{name}"] == (run / name).read_bytes()
    manifest = json.loads(files["run-a/upload-manifest.json"])
    info = read_run_info(run)
    assert manifest["run_id"] == "run-a" and manifest["source"] == "measured"
    assert manifest["collector"] == {"name": info.parameters.tool_name,
                                     "version": info.parameters.tool_version, "revision": None}
    assert manifest["files"] == {
        n: {"sha256": hashlib.sha256((run / n).read_bytes()).hexdigest(),
            "bytes": (run / n).stat().st_size} for n in names}
    assert manifest["hardware"]["declared"] == {
        k: v for k, v in info.to_dict()["hardware"].items() if v not in (None, "")}
    assert manifest["hardware"]["measured"] == {}  # no GPU telemetry in this run


def test_reupload_is_a_no_op_and_a_different_run_with_the_id_is_refused(
        tmp_path: Path, bucket: str) -> None:
    run = sealed_run(tmp_path / "run-a")
    assert run_cli("bench", "upload", str(run), bucket, env=aws_env()).returncode == 0
    before = stored(bucket)
    again = run_cli("bench", "upload", str(run), bucket, env=aws_env())
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"run-a: already at {bucket}/run-a (the same run); nothing written"
    other = sealed_run(tmp_path / "other", run_id="run-a", seed=7)  # same id, other measurements
    refused = run_cli("bench", "upload", str(other), bucket, env=aws_env())
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith(f"error: {bucket}/run-a: holds a different run (id 'run-a', ")
    assert "not overwritten" in lines[0] and "into another --out folder" in lines[0]
    assert stored(bucket) == before


def test_a_cut_upload_leaves_no_manifest_and_a_retry_completes_it(tmp_path: Path, bucket: str) -> None:
    run = sealed_run(tmp_path / "run-a")
    fs, root = storage.open_url(bucket)
    with pytest.raises(storage.StorageError, match="upload stopped .*ConnectionResetError.* run the same"):
        upload.upload(run, bucket, fs=CutFS(fs, puts=2), root=root)
    partial = stored(bucket)
    assert len(partial) == 2 and "run-a/upload-manifest.json" not in partial
    out = upload.upload(run, bucket)
    assert out.state == upload.UPLOADED
    assert sorted(out.skipped) == sorted(n.removeprefix("run-a/") for n in partial)
    assert len(out.sent) == 3
    assert "run-a/upload-manifest.json" in stored(bucket)
    assert upload.upload(run, bucket).state == upload.ALREADY


def test_a_partly_written_file_is_sent_again(tmp_path: Path) -> None:
    """file://: a cut can leave part of a file (here: as long as the whole, other bytes);
    its sha256 differs, so the retry sends it."""
    run = sealed_run(tmp_path / "run-a")
    dest = tmp_path / "bucket" / "run-a"
    dest.mkdir(parents=True)
    whole = (run / "run.yaml").read_bytes()
    (dest / "run.yaml").write_bytes(whole[:100] + bytes(len(whole) - 100))
    (dest / "cells.parquet").write_bytes((run / "cells.parquet").read_bytes())
    out = upload.upload(run, f"file://{tmp_path / 'bucket'}")
    assert out.skipped == ["cells.parquet"] and "run.yaml" in out.sent
    assert (dest / "run.yaml").read_bytes() == (run / "run.yaml").read_bytes()
    assert json.loads((dest / "upload-manifest.json").read_text())["run_id"] == "run-a"
    assert not [p for p in dest.iterdir() if p.name.endswith(".tmp")]


def test_an_invalid_run_is_refused_before_anything_is_written(tmp_path: Path, bucket: str) -> None:
    run = sealed_run(tmp_path / "run-a")
    (run / "run.yaml").write_text((run / "run.yaml").read_text() + "\n# edited\n")
    result = run_cli("bench", "upload", str(run), bucket, env=aws_env())
    assert result.returncode == 1
    # build-site's and `bench validate`'s own line (rundir/validate.py)
    line = result.stderr.strip()
    assert line.startswith(f"error: {run / 'run.yaml'}: edited after measurement "
                           "(sha256 differs from manifest.json)")
    # no flag of build-site's that upload does not have
    assert line.endswith("; bench upload stores runs only as measured: measure it again"), line
    assert "--allow-edited" not in line
    assert stored(bucket) == {}


def test_a_folder_without_run_yaml_is_refused_with_validates_line(tmp_path: Path, bucket: str) -> None:
    run = sealed_run(tmp_path / "run-a")
    (run / "run.yaml").unlink()
    result = run_cli("bench", "upload", str(run), bucket, env=aws_env())
    checked = run_cli("bench", "validate", str(run))
    assert result.returncode == checked.returncode == 1
    line = f"error: {run}: no run directories found (a run directory holds a run.yaml)"
    assert result.stderr.strip() == line and checked.stdout.strip() == line
    assert stored(bucket) == {}


def test_secrets_never_reach_output_or_manifest(tmp_path: Path, bucket: str) -> None:
    run = sealed_run(tmp_path / "run-a")
    missing = f"s3://ghost:{SECRET_KEY}@no-such-bucket/runs"  # a password in the URL, too
    result = run_cli("bench", "upload", str(run), missing, env=aws_env())
    assert result.returncode == 1
    assert SECRET_KEY not in result.stdout + result.stderr
    assert result.stderr.startswith("error: s3://ghost:<redacted>@no-such-bucket/runs/run-a: ")
    ok = run_cli("bench", "upload", str(run), bucket, env=aws_env())
    assert ok.returncode == 0 and SECRET_KEY not in ok.stdout + ok.stderr
    assert all(SECRET_KEY.encode() not in data for data in stored(bucket).values())


def test_a_secret_in_a_storage_error_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the backend says (here: it echoes the secret key) is redacted."""
    run = sealed_run(tmp_path / "run-a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    fs, root = storage.open_url(f"file://{tmp_path / 'b'}")

    class Leaky(CutFS):
        def put_file(self, *args: Any, **kw: Any) -> None:
            raise OSError(f"signature mismatch for key {SECRET_KEY}")

    with pytest.raises(storage.StorageError) as err:
        upload.upload(run, f"file://{tmp_path / 'b'}", fs=Leaky(fs, 0), root=root)
    assert SECRET_KEY not in str(err.value) and "<redacted>" in str(err.value)


def test_file_url_and_measured_hardware(tmp_path: Path) -> None:
    run = sealed_run(tmp_path / "run-a")
    rows = [{"t_ns": t, "gpu": g, "gpu_name": "NVIDIA H200"} for t in (1, 2) for g in (0, 1)]
    schema = contract.empty_table(contract.GPU_METRICS_FILE).schema
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), run / contract.GPU_METRICS_FILE)
    seal(run)
    result = run_cli("bench", "upload", str(run), f"file://{tmp_path / 'bucket'}")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "bucket" / "run-a" / "upload-manifest.json").read_text())
    assert manifest["hardware"]["measured"] == {"gpu_count": 2, "gpu_name": "NVIDIA H200"}
    assert contract.GPU_METRICS_FILE in manifest["files"]


def test_a_missing_backend_or_fsspec_is_one_line_naming_the_package(tmp_path: Path) -> None:
    run = sealed_run(tmp_path / "run-a")
    code = ("import sys; sys.modules['fsspec'] = None; from bench.cli import main; "
            f"sys.argv = ['bench', 'upload', {str(run)!r}, 's3://b/r']; main()")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert result.stderr == "error: s3://b/r: object storage needs the package fsspec (pip install fsspec)\n"
    code = ("import sys; sys.modules['gcsfs'] = None; from bench.cli import main; "
            f"sys.argv = ['bench', 'upload', {str(run)!r}, 'gs://b/r']; main()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert result.stderr == "error: gs://b/r: gs:// needs the package gcsfs (pip install gcsfs)\n"


def test_the_collector_imports_no_storage_library() -> None:
    code = "import sys, bench.cli; print(sorted(m for m in ('fsspec', 's3fs') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.stdout.strip() == "[]", result.stderr


def test_an_imported_run_carries_its_source_key(tmp_path: Path) -> None:
    from rundir.identity import source_key
    from rundir.io import read_run
    from tests.support.synthetic_runs import make_imported_run

    run = make_imported_run(tmp_path / "imp", run_id="imp", cells=[
        {"phase": "decode", "context": 1024, "concurrency": 1, "status": "valid",
         "total_tok_s": 50.0}])
    out = upload.upload(run, f"file://{tmp_path / 'bucket'}")
    assert out.state == upload.UPLOADED
    manifest = json.loads((tmp_path / "bucket" / "imp" / "upload-manifest.json").read_text())
    data = read_run(run)
    assert manifest["source"] == "imported"
    assert manifest["source_key"] == source_key(data.info, data.cells) is not None


def test_the_manifest_carries_the_collectors_source_revision(tmp_path: Path) -> None:
    revision = "0123456789abcdef" * 2 + "01234567-dirty"
    run = tmp_path / "run-r"
    make_measured_run(run, run_id="run-r", contexts=[1024], concurrency=[1], duration_s=0.6,
                      info={"parameters": {"collector_revision": revision}})
    seal(run)
    out = upload.upload(run, f"file://{tmp_path / 'bucket'}")
    assert out.state == upload.UPLOADED
    manifest = json.loads((tmp_path / "bucket" / "run-r" / "upload-manifest.json").read_text())
    assert manifest["collector"]["revision"] == revision
