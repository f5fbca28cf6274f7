"""Bad data folders: one clear line per bad run, good runs published anyway."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from rundir import contract
from rundir.io import read_run, read_run_info
from rundir.slugs import slugify, unique_slugs
from site_builder import load
from site_builder.aggregate import aggregate_run
from site_builder.cli import main
from site_builder.load import find_run_dirs, same_source
from tests.support.synthetic_runs import make_measured_run


def _run(tmp: Path, run_id: str, **kw) -> Path:
    return make_measured_run(tmp / "data" / run_id, run_id=run_id, contexts=[1024],
                             concurrency=[1, 2], duration_s=0.5, **kw)


def _drop_column(run_dir: Path, name: str, column: str) -> None:
    table = pq.read_table(run_dir / name)
    pq.write_table(table.drop_columns([column]), run_dir / name)


def _build(tmp: Path, *extra: str):
    runner = CliRunner()
    return runner.invoke(main, ["--data", str(tmp / "data"), "--out", str(tmp / "site"),
                                "--quiet", *extra])


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


def test_deleted_column_is_one_line_naming_file_and_column(tmp_path: Path) -> None:
    bad = _run(tmp_path, "bad-run")
    _drop_column(bad, contract.CELLS_FILE, "status")
    res = _build(tmp_path)
    assert res.exit_code == 1
    lines = _error_lines(res.stderr)
    assert lines == [f"error: {bad / contract.CELLS_FILE}: column status: missing"]
    assert "Traceback" not in res.output


def test_wrong_type_in_run_yaml(tmp_path: Path) -> None:
    bad = _run(tmp_path, "typo")
    data = yaml.safe_load((bad / contract.RUN_YAML).read_text())
    data["hardware"]["gpu_count"] = "eight"
    (bad / contract.RUN_YAML).write_text(yaml.safe_dump(data))
    res = _build(tmp_path)
    assert res.exit_code == 1
    assert _error_lines(res.stderr) == [
        f"error: {bad / contract.RUN_YAML}: field hardware.gpu_count: expected an integer, got 'eight'"]


def test_unreadable_parquet_and_bad_yaml(tmp_path: Path) -> None:
    a = _run(tmp_path, "a")
    (a / contract.REQUESTS_FILE).write_bytes(b"not parquet")
    b = _run(tmp_path, "b")
    (b / contract.RUN_YAML).write_text("schema_version: 1\nrun_id: [unclosed\n")
    res = _build(tmp_path)
    lines = _error_lines(res.stderr)
    assert res.exit_code == 1 and len(lines) == 2
    assert lines[0].startswith(f"error: {a / contract.REQUESTS_FILE}: not a readable Parquet file")
    assert lines[1].startswith(f"error: {b / contract.RUN_YAML}: line")
    res = _build(tmp_path, "--skip-invalid")
    assert res.exit_code == 1
    assert _error_lines(res.stderr)[-1] == "error: no valid runs to publish"


def test_empty_folder_is_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    res = _build(tmp_path)
    assert res.exit_code != 0
    assert _error_lines(res.stderr) == [
        f"error: {tmp_path / 'data'}: no run directories found (a run directory holds a run.yaml)"]
    assert not (tmp_path / "site" / "index.html").exists()


def test_missing_folder(tmp_path: Path) -> None:
    res = _build(tmp_path)
    assert res.exit_code != 0
    assert _error_lines(res.stderr) == [f"error: {tmp_path / 'data'}: no such folder"]


@pytest.mark.parametrize("skip", [False, True])
def test_one_corrupt_two_good(tmp_path: Path, skip: bool) -> None:
    _run(tmp_path, "good-1")
    _run(tmp_path, "good-2", seed=1)
    bad = _run(tmp_path, "corrupt", seed=2)
    _drop_column(bad, contract.REQUESTS_FILE, "chunk_ns")
    res = _build(tmp_path, *(["--skip-invalid"] if skip else []))
    lines = _error_lines(res.stderr)
    assert len(lines) == 1 and "corrupt" in lines[0] and "column chunk_ns: missing" in lines[0]
    if skip:
        assert res.exit_code == 0 and lines[0].startswith("warning: skipped ")
    else:
        assert res.exit_code == 1 and lines[0].startswith("error: ")
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "runs/good-1/index.html" in index and "runs/good-2/index.html" in index
    assert "corrupt" not in index
    assert not (tmp_path / "site" / "runs" / "corrupt").exists()


def test_duplicate_run_ids_keep_the_first(tmp_path: Path) -> None:
    _run(tmp_path, "dup")
    make_measured_run(tmp_path / "data" / "zz-copy", run_id="dup", contexts=[1024],
                      concurrency=[1], duration_s=0.5)
    res = _build(tmp_path)
    lines = _error_lines(res.stderr)
    assert res.exit_code == 1 and len(lines) == 1
    assert "zz-copy/run.yaml: field run_id: 'dup' is also used by" in lines[0]


def test_subprocess_cli_reports_one_line(cli, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    res = cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert _error_lines(res.stderr) == [
        "error: data: no run directories found (a run directory holds a run.yaml)"]


def test_finding_runs(tmp_path: Path) -> None:
    for rel in ("a", "nested/b", "nested/b/inner", ".hidden/c", "site/runs/x/raw"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / contract.RUN_YAML).write_text("x")
    found = [p.relative_to(tmp_path).as_posix()
             for p in find_run_dirs(tmp_path, exclude=tmp_path / "site")]
    assert found == ["a", "nested/b"]


def test_slugs() -> None:
    assert slugify("Qwen/Qwen3.5-4B <script>") == "qwen-qwen3.5-4b-script"
    assert slugify("../../etc") == "etc"
    assert slugify("<>") == "run"
    assert unique_slugs(["A", "a", "a!"]) == ["a", "a-2", "a-3"]


# -- one source imported twice (issue 21) -------------------------------------------

BUNDLED = Path(__file__).resolve().parents[2] / "data"


def _imported_copy(src: Path, dest: Path, run_id: str, **changes) -> Path:
    """A copy of an imported run under another id (as an earlier importer left it)."""
    shutil.copytree(src, dest)
    data = yaml.safe_load((dest / contract.RUN_YAML).read_text(encoding="utf-8"))
    data.update(run_id=run_id, **changes)
    (dest / contract.RUN_YAML).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return dest


def _bundled_imported() -> Path:
    runs = sorted(p for p in BUNDLED.glob("qwen3.5-4b-*") if (p / contract.RUN_YAML).is_file())
    if not runs:
        pytest.skip("no bundled imported run")
    return runs[0]


def test_one_source_twice_is_published_once_with_a_warning(tmp_path: Path) -> None:
    src = _bundled_imported()
    data = tmp_path / "data"
    kept = _imported_copy(src, data / src.name, src.name)
    twice = _imported_copy(src, data / "zz-imported-again", "zz-imported-again")
    other = _run(tmp_path, "measured")  # a measured run is never compared
    res = _build(tmp_path)
    assert res.exit_code == 0, res.output
    assert _error_lines(res.stderr) == [
        f"warning: skipped {twice}: the same source as {kept} (the same published numbers), "
        "which is published"]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "zz-imported-again" not in index and f"runs/{other.name}/index.html" in index
    assert not (tmp_path / "site" / "runs" / "zz-imported-again").exists()
    assert len([p for p in (tmp_path / "site" / "runs").iterdir() if p.is_dir()]) == 2


def test_same_numbers_measured_at_another_time_are_two_runs(tmp_path: Path) -> None:
    src = _bundled_imported()
    data = tmp_path / "data"
    _imported_copy(src, data / src.name, src.name)
    _imported_copy(src, data / "zz-dated", "zz-dated", measured_at="2026-03-03T14:05:00Z")
    res = _build(tmp_path)
    assert res.exit_code == 0 and _error_lines(res.stderr) == []
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "runs/zz-dated/index.html" in index


def test_same_source_groups_only_imported_runs(tmp_path: Path) -> None:
    src = _bundled_imported()
    a = _imported_copy(src, tmp_path / "a", "a")
    b = _imported_copy(src, tmp_path / "b", "b")
    c = _imported_copy(src, tmp_path / "c", "c")
    rows = pq.read_table(c / contract.CELLS_FILE).to_pylist()
    rows[0]["pub_total_tok_s"] = (rows[0]["pub_total_tok_s"] or 0.0) + 1.0
    pq.write_table(pa.Table.from_pylist(rows, schema=contract.CELLS_SCHEMA),
                   c / contract.CELLS_FILE)
    m = _run(tmp_path, "m")
    runs = [(p, read_run_info(p), None) for p in (b, a, c, m)]
    assert same_source(runs) == {a: b}  # the first in the order given is the one kept
    agg = aggregate_run(read_run(a))  # what the build has in memory groups them first
    runs = [(p, read_run_info(p), agg) for p in (b, a)]
    assert same_source(runs) == {a: b}


def test_same_source_reads_cells_only_when_figures_agree(tmp_path: Path, monkeypatch) -> None:
    """Distinct imported runs are told apart by their aggregates, without a read."""
    src = _bundled_imported()
    a = _imported_copy(src, tmp_path / "a", "a")
    b = _imported_copy(src, tmp_path / "b", "b")
    agg_a = aggregate_run(read_run(a))
    agg_b = aggregate_run(read_run(a))
    agg_b.cells[0].total_tok_s = (agg_b.cells[0].total_tok_s or 0.0) + 1.0
    reads: list[Path] = []
    monkeypatch.setattr(load, "read_table", lambda path, name: reads.append(path))
    assert same_source([(a, read_run_info(a), agg_a), (b, read_run_info(b), agg_b)]) == {}
    assert reads == []
