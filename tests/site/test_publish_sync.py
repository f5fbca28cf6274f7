"""`build-site publish URL`: changed files only, content types, cache headers, removals,
and a publish cut off part way (site_builder/sync.py), against file:// URLs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from site_builder import sync
from site_builder.publish import build_site
from tests.conftest import run_cli
from tests.support.synthetic_runs import make_sample_data


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("publish")
    report = build_site(make_sample_data(root / "data"), root / "site")
    assert report.errors == []
    return root / "site"


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


def _copy(site: Path, dest: Path) -> Path:
    for rel, data in _tree(site).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    return dest


def test_every_static_file_is_named_by_its_content_or_versions(built: Path) -> None:
    """What makes `immutable` true: a file under static/ never changes under its name."""
    names = [p.name for p in (built / sync.HASHED_DIR).iterdir()]
    assert names
    for name in names:
        assert re.fullmatch(r"[a-z_]+\.[0-9a-f]{10}\.[a-z]+"
                            r"|vega-[\d.]+_vega-lite-[\d.]+_vega-embed-[\d.]+\.js", name), name


def test_first_publish_uploads_everything_with_headers(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "bucket" / "site"
    res = run_cli("build-site", "publish", dest.as_uri(), "--out", str(built))
    assert res.returncode == 0, res.stderr
    local = _tree(built)
    remote = _tree(dest)
    manifest = json.loads(remote.pop(sync.MANIFEST))
    assert remote == local
    files = manifest["files"]
    assert set(files) == set(local)
    assert files["index.html"]["content_type"] == "text/html; charset=utf-8"
    assert files["index.html"]["cache_control"] == "no-cache"
    css = next(rel for rel in files if rel.startswith("static/style."))
    assert files[css] == {**files[css], "content_type": "text/css; charset=utf-8",
                          "cache_control": "public, max-age=31536000, immutable"}
    assert {e["cache_control"] for rel, e in files.items() if not rel.startswith("static/")} == {"no-cache"}
    assert f"{len(local)} uploaded, 0 unchanged, 0 removed" in res.stderr


def test_a_second_publish_sends_only_what_changed_and_removes_what_went(built: Path,
                                                                        tmp_path: Path) -> None:
    site = _copy(built, tmp_path / "site")
    dest = tmp_path / "dest"
    first = sync.publish_site(site, dest.as_uri())
    assert len(first.uploaded) == len(_tree(site))
    again = sync.publish_site(site, dest.as_uri())
    assert again.uploaded == [] and again.removed == [] and again.unchanged == len(_tree(site))
    # a page and a data file change, a page goes, a page comes
    page = next(rel for rel in _tree(site) if rel.startswith("runs/") and rel.endswith(".html"))
    (site / "index.html").write_text((site / "index.html").read_text() + "<!-- v2 -->")
    (site / "data" / "index.js").write_text("window.SPEED_MATRIX_INDEX = [];\n")
    (site / page).unlink()
    (site / "new.html").write_text("<p>new</p>")
    (dest / "unrelated.txt").write_text("not ours")  # never listed: never removed
    rep = sync.publish_site(site, dest.as_uri())
    assert rep.uploaded == ["data/index.js", "index.html", "new.html"]  # pages last
    assert rep.removed == [page]
    assert not (dest / page).exists() and (dest / "unrelated.txt").exists()
    assert (dest / "index.html").read_bytes() == (site / "index.html").read_bytes()
    assert page not in json.loads((dest / sync.MANIFEST).read_text())["files"]


def test_a_publish_cut_off_part_way_is_finished_by_the_next(built: Path, tmp_path: Path,
                                                            monkeypatch) -> None:
    site = _copy(built, tmp_path / "site")
    dest = tmp_path / "dest"
    sync.publish_site(site, dest.as_uri())
    (site / "index.html").write_text("<p>v2</p>")
    (site / "downloads.html").write_text("<p>v2</p>")
    import fsspec.implementations.local as local

    real = local.LocalFileSystem.pipe_file
    calls = {"n": 0}

    def cut(self, path, value, **kw):  # the second upload fails: the connection is cut
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionResetError("connection reset by peer")
        return real(self, path, value, **kw)

    monkeypatch.setattr(local.LocalFileSystem, "pipe_file", cut)
    with pytest.raises(sync.SyncError, match="safe to retry"):
        sync.publish_site(site, dest.as_uri())
    old = json.loads((dest / sync.MANIFEST).read_text())["files"]
    assert old["index.html"]["sha256"] != sync.local_files(site)["index.html"].sha256  # not written
    monkeypatch.setattr(local.LocalFileSystem, "pipe_file", real)
    rep = sync.publish_site(site, dest.as_uri())
    assert rep.uploaded == ["downloads.html", "index.html"]
    assert _tree(dest) | {sync.MANIFEST: b""} == _tree(site) | {sync.MANIFEST: b""}


def test_dry_run_changes_nothing(built: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    res = run_cli("build-site", "--out", str(built), "publish", dest.as_uri(), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "upload index.html (text/html; charset=utf-8; no-cache)" in res.stdout
    assert not dest.exists()


@pytest.mark.parametrize(("args", "says"), [
    (["nosuch://x"], "error: nosuch://x: Protocol not known"),
    (["--out", "/nonexistent/site", "file:///tmp/x"], "error: --out: /nonexistent/site: no such folder"),
])
def test_bad_input_is_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<p>x</p>")
    res = run_cli("build-site", "publish", *args, cwd=tmp_path)  # --out defaults to ./site
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), res.stderr


def test_a_password_in_the_url_never_reaches_the_error(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<p>x</p>")
    res = run_cli("build-site", "publish", "https://user:s3cr3tpassw0rd@127.0.0.1:9/x", cwd=tmp_path)
    assert res.returncode != 0
    (line,) = res.stderr.strip().splitlines()
    assert "s3cr3tpassw0rd" not in res.stdout + res.stderr and "<redacted>" in line, line


def test_a_folder_that_is_not_a_site_and_a_broken_manifest_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(sync.SyncError, match="no index.html"):
        sync.publish_site(tmp_path / "empty", (tmp_path / "d").as_uri())
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>x</p>")
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / sync.MANIFEST).write_text("{not json")
    with pytest.raises(sync.SyncError, match=r"\.speed-matrix-publish\.json: not a publish manifest"):
        sync.publish_site(site, dest.as_uri())


def test_headers_for_object_stores() -> None:
    entry = sync.Entry("x", 1, "text/html; charset=utf-8", "no-cache")
    assert sync.headers("s3", entry) == {"ContentType": "text/html; charset=utf-8",
                                         "CacheControl": "no-cache"}
    assert sync.headers("file", entry) == {}
    assert sync.content_type("runs/a/requests.parquet") == "application/vnd.apache.parquet"
    assert sync.content_type("README") == sync.OCTET
    assert sync.cache_control("static/site.0123456789.js") == sync.IMMUTABLE
    assert sync.cache_control("static.html") == sync.REVALIDATE
