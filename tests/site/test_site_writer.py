"""The builder's writer: one atomic write for the whole project, and the
merge/reset API a worker's pages come back through (issue 11)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rundir import io as rundir_io
from rundir.io import atomic_write
from site_builder.sitewriter import SiteError, SiteWriter, Tally


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "index.html"
    target.write_text("old page")

    def half(tmp: Path) -> None:
        tmp.write_text("half a pa")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(target, half)
    assert target.read_text() == "old page"
    assert sorted(os.listdir(tmp_path)) == ["index.html"]  # no temporary file left


def test_a_failed_first_write_leaves_no_file_under_the_final_name(tmp_path: Path) -> None:
    target = tmp_path / "cells.json"

    def half(tmp: Path) -> None:
        tmp.write_text("{")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, half)
    assert os.listdir(tmp_path) == []


def test_the_new_file_is_synced_before_it_takes_the_real_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync comes before the rename: a power cut cannot leave an empty file named
    like a whole one."""
    order: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(rundir_io.os, "fsync",
                        lambda fd: (order.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(rundir_io.os, "replace",
                        lambda a, b: (order.append("replace"), real_replace(a, b))[1])
    atomic_write(tmp_path / "run.yaml", lambda tmp: tmp.write_text("x: 1\n"))
    assert order == ["fsync", "replace"]


def test_written_files_have_the_usual_mode(tmp_path: Path) -> None:
    """0666 less the umask, like any new file (mkstemp's 0600 would hide a shared site)."""
    target = tmp_path / "cells.csv"
    atomic_write(target, lambda tmp: tmp.write_text("a\n"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()


def test_the_site_writer_uses_the_shared_atomic_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing site write: SiteError in one line naming the file, the old page kept."""
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("old page")
    writer = SiteWriter(out, tmp_path / "cache")

    def no_space(path: Path, write) -> None:  # noqa: ANN001
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("site_builder.sitewriter.atomic_write", no_space)
    with pytest.raises(SiteError) as err:
        writer.write("index.html", "new page")
    assert str(err.value) == f"{out / 'index.html'}: cannot write (No space left on device)"
    assert (out / "index.html").read_text() == "old page"


def test_reset_tally_and_merge(tmp_path: Path) -> None:
    """A worker's writer resets before each run and hands back its tally; the
    parent merges it, so its manifest names the worker's files and the next
    build neither rewrites nor deletes them."""
    out, cache = tmp_path / "site", tmp_path / "cache"
    out.mkdir()
    worker = SiteWriter(out, cache)
    worker.write("runs/a/index.html", "a", "key-a")
    worker.reset()
    assert worker.tally() == Tally({}, 0, 0)
    worker.write("runs/b/index.html", "b", "key-b")
    worker.write("runs/b/index.html", "b", "key-b")  # same bytes: unchanged
    got = worker.tally()
    assert got == Tally({"runs/b/index.html": "key-b"}, 1, 1)

    parent = SiteWriter(out, cache)
    parent.write("index.html", "home")
    parent.merge(got)
    assert parent.written == 2 and parent.unchanged == 1
    assert set(parent.new) == {"index.html", "runs/b/index.html"}  # reset away: not this run's
    parent.finish()

    again = SiteWriter(out, cache)
    assert again.is_current("runs/b/index.html", "key-b")
    again.write("index.html", "home")
    again.finish()
    assert (out / "runs/b/index.html").read_text() == "b"  # merged: kept


def test_page_cache_follows_the_code_pages_are_made_with() -> None:
    """Labels and number formats live in rundir/ (rundir.words): a change there
    must re-render cached pages like a change in the builder does."""
    import sys

    from site_builder.fingerprint import code_files

    hashed = {p.resolve() for p in code_files()}
    used = {Path(m.__file__).resolve() for name, m in sys.modules.items()
            if name.split(".")[0] in ("rundir", "site_builder") and getattr(m, "__file__", None)}
    assert used <= hashed, sorted(str(p) for p in used - hashed)
