"""manifest.json (rundir/manifest.py): every writer seals what it wrote, last; a
run edited afterwards is told apart from one that was not (issue 30, item 7b).

The writers: the collector's store after every flush (`bench run`, `--resume`,
`--retry-errors`), the importer (`bench import`). The reader: `build-site`
(tests/site/test_edited_runs.py has the builder's side).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from bench.core.plan import Cell
from bench.measure.cells import CellOutcome
from bench.run.store import RunStore
from importer.cli import import_cmd
from rundir import contract, manifest
from rundir.io import read_run_info, read_table, write_table
from site_builder.cli import main as build_main
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401
from tests.support.synthetic_runs import make_measured_run

SEED = Path(__file__).resolve().parents[1] / "data" / "import" / "seeds" / \
    "qwen3.5-4b-bf16-rtxpro6000.txt"
RESUMED = "sha256 differs from manifest.json; found when bench run --resume continued the run"


def _errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def _build(data: Path, out: Path, *extra: str):
    return CliRunner().invoke(build_main, ["--data", str(data), "--out", str(out), "-q", *extra])


# --------------------------------------------------------------------------
# the module
# --------------------------------------------------------------------------


def test_seal_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    run = make_measured_run(tmp_path / "r", run_id="r", contexts=[1024], concurrency=[1],
                            duration_s=0.5)
    (run / "raw").mkdir()
    (run / "raw" / "source.json").write_text("{}")
    manifest.seal(run)
    data = json.loads((run / manifest.MANIFEST_FILE).read_text())
    assert data["format"] == 1 and data["algorithm"] == "sha256" and "edited" not in data
    assert list(data["files"]) == sorted(["run.yaml", "cells.parquet", "requests.parquet",
                                          "server_metrics.parquet", "raw/source.json"])
    got = data["files"]["requests.parquet"]
    assert got == {"sha256": manifest.file_hash(run / "requests.parquet")[0],
                   "bytes": (run / "requests.parquet").stat().st_size}
    assert manifest.check(run) == []


def test_a_manifest_naming_a_path_outside_the_run_is_not_one() -> None:
    entry = {"sha256": "0" * 64, "bytes": 1}
    for name in ("/etc/passwd", "../x", "a/../../b", ""):
        raw = json.dumps({"format": 1, "algorithm": "sha256", "files": {name: entry}}).encode()
        with pytest.raises(contract.ContractError, match="field files: entry 0"):
            manifest.parse(raw)


def test_what_a_manifest_says_is_printable_on_one_line() -> None:
    """Its names and carried edits reach the builder's one-line error and the run
    page: a newline or a control character makes it no manifest."""
    entry = {"sha256": "0" * 64, "bytes": 1}
    bad = [{"files": {"cells.parquet\nerror: fake": entry}},
           {"files": {}, "edited": [{"file": "cells.parquet", "found": "x\n\nerror: fake"}]},
           {"files": {}, "edited": [{"file": "cells.parquet", "found": "x" * 301}]}]
    for extra in bad:
        raw = json.dumps({"format": 1, "algorithm": "sha256", **extra}).encode()
        with pytest.raises(contract.ContractError):
            manifest.parse(raw)


def test_a_writer_at_work_is_not_an_edit(tmp_path: Path, monkeypatch) -> None:
    """The collector unseals, rewrites, seals: a reader hashing in between sees a
    new file and then another manifest (or none), so it looks again."""
    run = make_measured_run(tmp_path / "r", run_id="r", contexts=[1024], concurrency=[1],
                            duration_s=0.5)
    real = manifest.hash_files
    pending = []

    def writer_meanwhile(run_dir, names):
        if pending:  # the collector's flush runs while the files are hashed
            pending.clear()
            manifest.unseal(run)
            table = read_table(run, contract.CELLS_FILE)
            write_table(run, contract.CELLS_FILE, table.slice(0, len(table) - 1))
            got = real(run_dir, names)
            manifest.seal(run)
            return got
        return real(run_dir, names)
    monkeypatch.setattr(manifest, "hash_files", writer_meanwhile)
    manifest.seal(run)
    pending.append(1)
    assert manifest.check(run) == [] and not pending


# --------------------------------------------------------------------------
# the collector's store
# --------------------------------------------------------------------------


def _store(tmp_path: Path) -> tuple[RunStore, list[dict], pa.Table]:
    src = make_measured_run(tmp_path / "src", run_id="r", contexts=[1024], concurrency=[1, 2],
                            duration_s=0.5, prefill_contexts=[])
    cells = read_table(src, contract.CELLS_FILE).to_pylist()
    plan = [Cell(c["phase"], c["context"], c["concurrency"]) for c in cells]
    store = RunStore(tmp_path / "data" / "r", read_run_info(src), plan)
    return store, cells, read_table(src, contract.REQUESTS_FILE)


def _record(store: RunStore, cells: list[dict], requests: pa.Table, concurrency: int) -> None:
    c = next(c for c in cells if c["concurrency"] == concurrency)
    rows = requests.filter(pc.equal(requests["concurrency"], concurrency))
    store.record(Cell(c["phase"], c["context"], c["concurrency"]),
                 CellOutcome([], c["status"], c["reason"],
                             (c["window_start_ns"], c["window_end_ns"]), c["warmup_s"],
                             c["token_counting"], False, table=rows))


def test_every_flush_seals_the_directory_last(tmp_path: Path) -> None:
    store, cells, requests = _store(tmp_path)
    store.flush()  # the plan, every cell pending
    assert manifest.check(store.run_dir) == []
    _record(store, cells, requests, 1)
    store.flush()
    listed = json.loads((store.run_dir / manifest.MANIFEST_FILE).read_text())["files"]
    assert set(listed) == {"run.yaml", "cells.parquet", "requests.parquet",
                           "server_metrics.parquet"}
    assert manifest.check(store.run_dir) == []
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output


def test_a_flush_cut_short_leaves_no_manifest(tmp_path: Path, monkeypatch) -> None:
    """A full disk between requests.parquet and cells.parquet: the requests changed
    under a manifest that would name them otherwise. None is left: the run reads
    as one from before manifests (and --resume seals it again)."""
    store, cells, requests = _store(tmp_path)
    store.flush()
    _record(store, cells, requests, 1)
    import bench.run.store as store_mod

    real = store_mod.write_table

    def full_disk(run_dir, name, table):
        if name == contract.CELLS_FILE:
            raise OSError(28, "No space left on device")
        return real(run_dir, name, table)
    monkeypatch.setattr(store_mod, "write_table", full_disk)
    with pytest.raises(OSError):
        store.flush()
    assert not (store.run_dir / manifest.MANIFEST_FILE).exists()
    assert manifest.check(store.run_dir) == []
    monkeypatch.undo()
    resumed = RunStore.resume(store.run_dir, store.info)
    assert resumed.edited == ()
    resumed.flush()
    assert manifest.check(store.run_dir) == []


def test_a_run_edited_then_resumed_stays_marked(tmp_path: Path) -> None:
    """--resume rewrites every file: without carrying the edit it found, the new
    manifest would vouch for the edited file as measured."""
    store, cells, requests = _store(tmp_path)
    _record(store, cells, requests, 1)
    store.flush()
    table = read_table(store.run_dir, contract.REQUESTS_FILE)
    write_table(store.run_dir, contract.REQUESTS_FILE, table.slice(1))  # a row deleted by hand
    resumed = RunStore.resume(store.run_dir, store.info)
    _record(resumed, cells, requests, 2)  # the resumed session measures the next cell
    resumed.flush()
    assert [(e.name, e.what) for e in manifest.check(store.run_dir)] == [
        ("requests.parquet", RESUMED)]
    res = _build(tmp_path / "data", tmp_path / "site")
    assert _errors(res.output) == [
        f"error: {store.run_dir / 'requests.parquet'}: edited after measurement ({RESUMED}); "
        "--allow-edited publishes it marked as edited after measurement"]
    again = RunStore.resume(store.run_dir, store.info)  # and the next resume keeps it
    again.flush()
    assert [e.what for e in manifest.check(store.run_dir)] == [RESUMED]


# --------------------------------------------------------------------------
# the importer, and the collector through its real command line
# --------------------------------------------------------------------------


def test_bench_import_seals_what_it_writes(tmp_path: Path) -> None:
    res = CliRunner().invoke(import_cmd, [str(SEED), "--out", str(tmp_path / "data")])
    assert res.exit_code == 0, res.output
    (run,) = [p for p in (tmp_path / "data").iterdir() if p.is_dir()]
    assert manifest.check(run) == []
    assert _build(tmp_path / "data", tmp_path / "site").exit_code == 0
    rows = read_table(run, contract.CELLS_FILE).to_pylist()
    rows[0]["pub_total_tok_s"] = (rows[0]["pub_total_tok_s"] or 0.0) * 2  # a figure doubled
    write_table(run, contract.CELLS_FILE, pa.Table.from_pylist(rows, schema=contract.CELLS_SCHEMA))
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 1
    assert _errors(res.output) == [
        f"error: {run / 'cells.parquet'}: edited after measurement (sha256 differs from "
        "manifest.json); --allow-edited publishes it marked as edited after measurement"]


FAST = ["--duration", "1", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "2",
        "--max-output", "400", "--contexts", "128"]


def test_bench_run_seals_and_resume_keeps_an_edit_subprocess(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=50)
    out = tmp_path / "data" / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    assert (out / manifest.MANIFEST_FILE).is_file() and manifest.check(out) == []
    res = run_cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    cells = read_table(out, contract.CELLS_FILE)
    write_table(out, contract.CELLS_FILE, cells.set_column(  # a reason rewritten by hand
        cells.schema.get_field_index("reason"), "reason", pa.array(["fine"], pa.string())))
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--concurrency", "1,2", "--warmup-stable", "0.5", "--server-wait", "2")
    assert res.returncode == 0, res.stderr
    assert [(e.name, e.what) for e in manifest.check(out)] == [
        ("cells.parquet", RESUMED)]
    res = run_cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 1
    assert _errors(res.stderr) == [
        f"error: data/run/cells.parquet: edited after measurement ({RESUMED}); "
        "--allow-edited publishes it marked as edited after measurement"]
