"""`bench download`: a stored run fetched whole, every byte checked against the manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rundir import download, storage, upload
from tests.conftest import run_cli
from tests.storage.test_build_from_storage import make_run, tree
from tests.support.s3server import SECRET_KEY


def aws_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def staged(tmp_path: Path, url: str, run_id: str = "run-a", seed: int = 0) -> Path:
    """A run uploaded to url; returns its local folder."""
    run = make_run(tmp_path / "src", run_id, seed=seed)
    assert upload.upload(run, url).state == upload.UPLOADED
    return run


def pinned(tmp_path: Path, url: str, key: str = "run-a") -> Path:
    """The stored manifest, copied as a pull request would add it."""
    fs, root = storage.open_url(url)
    path = tmp_path / "pr" / key / storage.UPLOAD_MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fs.cat_file(f"{root}/{key}/{storage.UPLOAD_MANIFEST}"))
    return path


def test_upload_then_download_gives_the_same_files(tmp_path: Path, bucket: str) -> None:
    run = staged(tmp_path, f"{bucket}/staging")
    manifest = pinned(tmp_path, f"{bucket}/staging")
    dest = tmp_path / "fetched"
    res = run_cli("bench", "download", f"{bucket}/staging/run-a", str(dest), "--manifest",
                  str(manifest), env=aws_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"{dest / 'run-a'}\n"
    assert res.stderr.strip() == (f"run-a: downloaded from {bucket}/staging/run-a to {dest / 'run-a'} "
                                  f"(5 file(s), {sum(len(b) for b in tree(run).values())} bytes, "
                                  "each sha256 checked)")
    assert tree(dest / "run-a") == {**tree(run), storage.UPLOAD_MANIFEST: manifest.read_bytes()}
    assert sorted(p.name for p in dest.iterdir()) == ["run-a"]  # no partial folder left
    # the fetched folder uploads as the very same run (its manifest is deterministic)
    assert upload.upload(dest / "run-a", f"{bucket}/staging").state == upload.ALREADY
    assert SECRET_KEY not in res.stdout + res.stderr


def test_the_same_run_again_is_already_there(tmp_path: Path, bucket: str) -> None:
    staged(tmp_path, bucket)
    dest = tmp_path / "fetched"
    first = download.download(f"{bucket}/run-a", dest)
    assert first.state == download.DOWNLOADED
    before = tree(dest)
    res = run_cli("bench", "download", f"{bucket}/run-a", str(dest), env=aws_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"{dest / 'run-a'}\n"
    assert res.stderr.strip() == f"run-a: already at {dest / 'run-a'} (the same files); nothing fetched"
    assert tree(dest) == before


def test_a_manifest_that_differs_from_the_stored_one_is_refused(tmp_path: Path, bucket: str) -> None:
    staged(tmp_path, bucket)
    manifest = pinned(tmp_path, bucket)
    data = json.loads(manifest.read_text())
    data["measured_at"] = "2020-01-01T00:00:00Z"  # one field: not the same bytes
    manifest.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    dest = tmp_path / "fetched"
    res = run_cli("bench", "download", f"{bucket}/run-a", str(dest), "--manifest", str(manifest),
                  env=aws_env())
    assert res.returncode == 1
    assert res.stderr == (f"error: {bucket}/run-a/upload-manifest.json: differs from {manifest}; "
                          "the stored run is not the one the manifest names\n")
    assert res.stdout == "" and not dest.exists()


def test_a_stored_file_whose_bytes_differ_is_refused_and_nothing_left(
        tmp_path: Path, bucket: str) -> None:
    staged(tmp_path, bucket)
    manifest = pinned(tmp_path, bucket)  # the PR names the bytes uploaded first
    fs, root = storage.open_url(bucket)
    good = fs.cat_file(f"{root}/run-a/cells.parquet")
    fs.pipe_file(f"{root}/run-a/cells.parquet", bytes(len(good)))  # same size, other bytes
    dest = tmp_path / "fetched"
    res = run_cli("bench", "download", f"{bucket}/run-a", str(dest), "--manifest", str(manifest),
                  env=aws_env())
    assert res.returncode == 1
    assert res.stderr == (f"error: {bucket}/run-a/cells.parquet: sha256 or size differs from its "
                          "upload manifest; nothing fetched (the stored run is not the one the "
                          "manifest names)\n")
    assert res.stdout == ""
    assert list(dest.iterdir()) == []  # no partial folder, no run folder


def test_a_missing_stored_file_is_refused(tmp_path: Path) -> None:
    url = (tmp_path / "staging").as_uri()
    staged(tmp_path, url)
    (tmp_path / "staging" / "run-a" / "requests.parquet").unlink()
    with pytest.raises(storage.StorageError) as err:
        download.download(f"{url}/run-a", tmp_path / "fetched")
    assert "run-a" in str(err.value) and not (tmp_path / "fetched" / "run-a").exists()
    assert [p.name for p in (tmp_path / "fetched").iterdir()] == []


def test_another_run_in_the_folder_is_refused_never_overwritten(tmp_path: Path, bucket: str) -> None:
    staged(tmp_path, bucket)
    dest = tmp_path / "fetched"
    other = make_run(tmp_path / "other", "run-a", seed=9)  # same id, other measurements
    (dest / "run-a").mkdir(parents=True)
    for path in other.iterdir():
        (dest / "run-a" / path.name).write_bytes(path.read_bytes())
    before = tree(dest)
    res = run_cli("bench", "download", f"{bucket}/run-a", str(dest), env=aws_env())
    assert res.returncode == 1
    assert res.stderr == (f"error: {dest / 'run-a'}: holds other files than run 'run-a' at "
                          f"{bucket}/run-a; not overwritten (remove it, or download into another "
                          "folder)\n")
    assert tree(dest) == before
    # one extra file is not the same run either
    fresh = tmp_path / "fresh"
    download.download(f"{bucket}/run-a", fresh)
    (fresh / "run-a" / "notes.txt").write_text("mine")
    with pytest.raises(download.DownloadRefused, match="holds other files"):
        download.download(f"{bucket}/run-a", fresh)


def test_a_manifest_naming_a_file_outside_the_folder_is_refused(tmp_path: Path) -> None:
    url = (tmp_path / "staging").as_uri()
    staged(tmp_path, url)
    stored = tmp_path / "staging" / "run-a" / storage.UPLOAD_MANIFEST
    data = json.loads(stored.read_text())
    data["files"]["../../escaped.txt"] = {"sha256": "0" * 64, "bytes": 1}
    stored.write_text(json.dumps(data))
    (tmp_path / "escaped.txt").write_text("x")
    res = run_cli("bench", "download", f"{url}/run-a", str(tmp_path / "fetched"),
                  "--manifest", str(stored))
    assert res.returncode == 1
    assert res.stderr == (f"error: {stored}: field files: expected run_id and each file's "
                          "sha256 and bytes\n")
    res = run_cli("bench", "download", f"{url}/run-a", str(tmp_path / "fetched"))
    assert res.returncode == 1
    assert res.stderr == (f"error: {url}/run-a/upload-manifest.json: field files: expected run_id "
                          "and each file's sha256 and bytes\n")
    assert not (tmp_path / "fetched").exists()


def test_a_url_that_is_not_the_runs_folder_is_one_line(tmp_path: Path) -> None:
    url = (tmp_path / "staging").as_uri()
    staged(tmp_path, url)
    nothing = run_cli("bench", "download", url, str(tmp_path / "fetched"))  # the prefix, not a run
    assert nothing.returncode == 1
    assert nothing.stderr == (f"error: {url}/upload-manifest.json: not found (no run uploaded "
                              "there, or its upload is not complete: bench upload writes it last)\n")
    (tmp_path / "staging" / "run-a").rename(tmp_path / "staging" / "run-b")
    moved = run_cli("bench", "download", f"{url}/run-b", str(tmp_path / "fetched"))
    assert moved.returncode == 1
    assert moved.stderr == (f"error: {url}/run-b: holds run 'run-a', whose folder would be 'run-a', "
                            "not 'run-b'; expected URL/<key> as bench upload prints it\n")


def test_secrets_never_reach_stdout_or_stderr(tmp_path: Path, bucket: str) -> None:
    staged(tmp_path, bucket)
    missing = f"s3://ghost:{SECRET_KEY}@no-such-bucket/staging/run-a"
    res = run_cli("bench", "download", missing, str(tmp_path / "a"), env=aws_env())
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert SECRET_KEY not in res.stdout + res.stderr
    assert res.stderr.startswith("error: s3://ghost:<redacted>@no-such-bucket/staging/run-a")
    ok = run_cli("bench", "download", f"{bucket}/run-a", str(tmp_path / "b"), env=aws_env())
    assert ok.returncode == 0 and SECRET_KEY not in ok.stdout + ok.stderr
    assert all(SECRET_KEY.encode() not in b for b in tree(tmp_path / "b").values())


def test_a_publicly_readable_staging_over_plain_http(tmp_path: Path) -> None:
    """docs/publishing-ci.md: a fork's pull request has no key, so staging may be read
    over HTTP; download reads only the objects the manifest names and lists nothing."""
    import functools
    import http.server
    import threading

    staged(tmp_path, (tmp_path / "staging").as_uri())
    manifest = tmp_path / "staging" / "run-a" / storage.UPLOAD_MANIFEST
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path / "staging"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/run-a"
        res = run_cli("bench", "download", url, str(tmp_path / "fetched"), "--manifest", str(manifest))
    finally:
        server.shutdown()
        server.server_close()
    assert res.returncode == 0, res.stderr
    assert tree(tmp_path / "fetched" / "run-a") == tree(tmp_path / "staging" / "run-a")
