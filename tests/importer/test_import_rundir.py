"""``bench import RUN_DIR``: a run directory copied in once, recognised after.

Why: the same run must not land twice under --data, and a folder holding
another version of a run must never be overwritten. The reference runs are
the bundled ones (a measured llama.cpp CPU run, imported pages).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from importer.cli import import_cmd
from rundir.contract import CELLS_FILE, RUN_YAML

BUNDLED = Path(__file__).resolve().parents[2] / "data"
MEASURED = BUNDLED / "llama-cpp-tiny-cpu"
SEED = Path(__file__).resolve().parents[1] / "data" / "import" / "seeds" / \
    "qwen3.5-4b-bf16-rtxpro6000.txt"


def run_cli(path: Path, out: Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(import_cmd, [str(path), "--out", str(out)])
    return res.exit_code, res.stdout, res.stderr


def tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def content(folder: Path) -> dict[str, bytes]:
    return {k: v[0] for k, v in tree(folder).items()}


@pytest.fixture
def measured(tmp_path: Path) -> Path:
    if not (MEASURED / RUN_YAML).is_file():
        pytest.skip("no bundled measured run")
    src = tmp_path / "elsewhere" / "some-name"
    shutil.copytree(MEASURED, src)
    return src


def test_a_run_directory_is_copied_whole_then_recognised(tmp_path: Path, measured: Path) -> None:
    out = tmp_path / "data"
    code, stdout, stderr = run_cli(measured, out)
    target = out / "llama-cpp-tiny-cpu"  # its run id, not the folder's name
    assert code == 0 and stdout == f"{target}\n" and stderr == ""
    assert content(target) == content(measured)
    before = tree(out)
    for again in (measured, target):  # the same copy again; the folder onto itself
        code, stdout, stderr = run_cli(again, out)
        assert code == 0 and stdout == f"{target}\n"
        assert stderr == (f"already imported as {target}: the same run (llama-cpp-tiny-cpu, "
                          "the same files); nothing written\n")
    assert tree(out) == before and sorted(os.listdir(out)) == ["llama-cpp-tiny-cpu"]


def test_the_same_run_under_another_folder_name_is_recognised(tmp_path: Path,
                                                              measured: Path) -> None:
    out = tmp_path / "data"
    shutil.copytree(measured, out / "kept-by-hand")
    code, stdout, stderr = run_cli(measured, out)
    assert code == 0 and stdout == f"{out / 'kept-by-hand'}\n"
    assert stderr.startswith(f"already imported as {out / 'kept-by-hand'}: the same run")
    assert sorted(os.listdir(out)) == ["kept-by-hand"]


def test_another_version_of_the_run_is_never_overwritten(tmp_path: Path, measured: Path) -> None:
    out = tmp_path / "data"
    first = Path(run_cli(measured, out)[1].strip())
    info = yaml.safe_load((measured / RUN_YAML).read_text(encoding="utf-8"))
    info["notes"] = (info.get("notes") or "") + " Re-checked."
    (measured / RUN_YAML).write_text(yaml.safe_dump(info, sort_keys=False), encoding="utf-8")
    before = tree(out)
    code, stdout, stderr = run_cli(measured, out)
    assert code == 1 and stdout == ""
    assert stderr == (f"error: {first}: already holds run llama-cpp-tiny-cpu with other files; "
                      "not overwritten (remove it to import this version)\n")
    assert tree(out) == before


def test_an_imported_run_directory_is_recognised_by_its_source(tmp_path: Path) -> None:
    """A copy of a page's import (fresh id) into data/ holding the first importer's
    folder of the same page: already there, under the bundled id."""
    bundled = sorted(BUNDLED.glob("qwen3.5-4b-*"))
    if not bundled:
        pytest.skip("no bundled imported run")
    data = tmp_path / "data"
    shutil.copytree(bundled[0], data / bundled[0].name)
    fresh = Path(run_cli(SEED, tmp_path / "fresh")[1].strip())
    assert fresh.name != bundled[0].name
    before = tree(data)
    code, stdout, stderr = run_cli(fresh, data)
    assert code == 0 and stdout == f"{data / bundled[0].name}\n"
    assert stderr == (f"already imported as {data / bundled[0].name}: the same source (the "
                      "same published numbers); nothing written\n")
    assert tree(data) == before


def test_a_broken_run_directory_is_one_line_and_writes_nothing(tmp_path: Path,
                                                               measured: Path) -> None:
    (measured / CELLS_FILE).write_bytes(b"not parquet")
    code, stdout, stderr = run_cli(measured, tmp_path / "data")
    assert code == 1 and stdout == "" and len(stderr.splitlines()) == 1
    assert stderr.startswith(f"error: {measured / CELLS_FILE}: not a readable Parquet file")
    assert not (tmp_path / "data").exists()


def test_links_and_unusable_ids_are_refused(tmp_path: Path, measured: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not part of the run")
    (measured / "raw").mkdir(exist_ok=True)
    (measured / "raw" / "notes.txt").symlink_to(secret)
    code, _, stderr = run_cli(measured, tmp_path / "data")
    assert code == 1
    assert stderr == (f"error: {measured / 'raw' / 'notes.txt'}: a symlink; import the run "
                      "directory without links\n")
    (measured / "raw" / "notes.txt").unlink()
    info = yaml.safe_load((measured / RUN_YAML).read_text(encoding="utf-8"))
    info["run_id"] = "../escape"
    (measured / RUN_YAML).write_text(yaml.safe_dump(info, sort_keys=False), encoding="utf-8")
    code, _, stderr = run_cli(measured, tmp_path / "data")
    assert code == 1
    assert stderr == (f"error: {measured / RUN_YAML}: field run_id: '../escape' is not usable "
                      "as a folder name (letters, digits, '.', '_', '+', '-')\n")
    assert not (tmp_path / "data").exists() and not (tmp_path / "escape").exists()


def test_a_folder_without_run_yaml_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, _, stderr = run_cli(tmp_path / "empty", tmp_path / "data")
    assert code == 1
    assert stderr == f"error: {tmp_path / 'empty'}: not a run directory (it holds no run.yaml)\n"
