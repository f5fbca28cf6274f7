"""`bench validate` (issue 37, item 1): the builder's checks, standalone.

A run that validates builds; one that does not is refused by `build-site`
with the very line `bench validate` printed (both call rundir/validate.py).
Each broken kind below is built too, and the two lines compared.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from click.testing import CliRunner

from bench.cli import main as bench
from rundir import contract, manifest
from rundir.decode_checks import counting_problem
from rundir.io import read_table, write_table
from site_builder.cli import main as build_site
from tests.support.synthetic_runs import (
    QWEN_SEED_TEXT,
    make_measured_run,
    make_sample_data,
    make_seed_run,
)

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-proj-Zq8XvT3kLm9Rw2Yp7Hn4Jd6Fb1Gc5Ns0"  # shaped like an OpenAI key, not a real one


def _validate(*args: str) -> Any:
    return CliRunner().invoke(bench, ["validate", *args])


def _build(data: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(build_site, ["--data", str(data), "--out", str(out), "--quiet",
                                           *extra])


def _lines(text: str, level: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(f"{level}: ")]


def _run(data: Path, name: str = "r", **kw: Any) -> Path:
    return make_measured_run(data / name, run_id=name, contexts=[1024], concurrency=[1, 2],
                             duration_s=1.0, **kw)


def _rewrite_raw(path: Path, name: str, edit) -> None:
    """Rewrite a Parquet file without the contract's checks (as a hand edit would)."""
    pq.write_table(edit(pq.read_table(path / name)), path / name)


def _same_words(data: Path, tmp_path: Path) -> str:
    """The error line both commands print for the data folder (one broken run)."""
    res = _validate(str(data))
    assert res.exit_code == 1, res.output
    errors = _lines(res.stdout, "error")
    assert len(errors) == 1, res.output
    built = _build(data, tmp_path / "site")
    assert built.exit_code == 1, built.output
    assert _lines(built.stderr, "error") == errors  # the very same line
    return errors[0]


def test_a_good_run_and_the_bundled_sample_validate(tmp_path: Path) -> None:
    path = _run(tmp_path / "data")
    res = _validate(str(path))
    assert (res.exit_code, res.stdout) == (0, "")
    res = _validate(str(REPO / "data"))  # measured and imported runs
    assert (res.exit_code, res.stdout) == (0, ""), res.stdout


def test_sample_data_folder_is_searched_like_build_site(tmp_path: Path) -> None:
    data = make_sample_data(tmp_path / "data")
    res = _validate("--json", str(data))
    assert res.exit_code == 0, res.output
    runs = json.loads(res.stdout)["runs"]
    assert sorted(Path(r["path"]).name for r in runs) == ["qwen-seed", "synth-a", "synth-b", "xss"]
    assert all(r["ok"] and r["problems"] == [] for r in runs)


def test_schema_error_is_one_line_and_build_site_says_the_same(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _run(data, "good")
    bad = _run(data, "bad")
    _rewrite_raw(bad, contract.CELLS_FILE, lambda t: t.drop_columns(["status"]))
    line = _same_words(data, tmp_path)
    assert line == f"error: {bad / contract.CELLS_FILE}: column status: missing"


def test_a_status_outside_the_contract_is_refused_with_the_same_words(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bad = _run(data)
    _rewrite_raw(bad, contract.CELLS_FILE, lambda t: t.set_column(
        t.schema.get_field_index("status"), "status",
        pa.array(["splendid"] * len(t), type=pa.string())))
    line = _same_words(data, tmp_path)
    assert line.startswith(f"error: {bad / contract.CELLS_FILE}: column status: ")


def test_an_edited_file_is_refused_and_allowed_as_a_warning(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = _run(data)
    manifest.seal(path)
    with open(path / contract.RUN_YAML, "a", encoding="utf-8") as fh:
        fh.write("# touched\n")
    line = _same_words(data, tmp_path)
    assert line == (f"error: {path / contract.RUN_YAML}: edited after measurement (sha256 "
                    "differs from manifest.json); --allow-edited publishes it marked as edited "
                    "after measurement")
    res = _validate("--allow-edited", str(data))
    assert res.exit_code == 0, res.output
    assert _lines(res.stdout, "warning") == [
        f"warning: {path / contract.RUN_YAML}: edited after measurement (sha256 differs from "
        "manifest.json); published marked as edited after measurement (--allow-edited)"]
    assert _validate("--allow-edited", "--strict", str(data)).exit_code == 1


def test_a_symlink_leading_outside_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = _run(data)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(path / contract.REQUESTS_FILE, elsewhere / contract.REQUESTS_FILE)
    (path / contract.REQUESTS_FILE).symlink_to(elsewhere / contract.REQUESTS_FILE)
    line = _same_words(data, tmp_path)
    assert line == (f"error: {path / contract.REQUESTS_FILE}: a symlink leading outside the data "
                    f"folder (to {(elsewhere / contract.REQUESTS_FILE).resolve()}); refused")
    # Validated alone, the run's own folder is the bound, and the line says so.
    res = _validate(str(path))
    assert res.exit_code == 1
    assert "leading outside the run's folder" in res.stdout


def test_rows_contradicting_a_status_are_a_warning_build_site_publishes_so(
        tmp_path: Path) -> None:
    """Build-site publishes such a run with the status the rows support: a warning,
    whose problem is the reason the published cell gives."""
    data = tmp_path / "data"
    path = _run(data)
    table = read_table(path, contract.REQUESTS_FILE)
    stream1 = pc.and_(pc.and_(pc.equal(table["concurrency"], 2), pc.equal(table["stream_index"], 1)),
                      pc.equal(table["purpose"], contract.PURPOSE_MEASURE))
    write_table(path, contract.REQUESTS_FILE, table.filter(pc.invert(stream1)))
    res = _validate(str(data))
    assert res.exit_code == 0, res.output
    problem = ("requests missing for stream 1 of 2: none of its requests in requests.parquet "
               "spans the window")
    assert res.stdout.splitlines() == [
        f"warning: {path / contract.CELLS_FILE}: field status: decode cell context 1024 "
        f"concurrency 2: stored as Valid, published as Error: {problem} (found by the site "
        "builder's re-check of the raw data)"]
    assert _validate("--strict", str(data)).exit_code == 1
    assert _build(data, tmp_path / "site").exit_code == 0
    cells = json.loads((tmp_path / "site" / "runs" / "r" / "cells.json").read_text("utf-8"))
    cell = next(c for c in cells["cells"] if c["phase"] == "decode" and c["concurrency"] == 2)
    assert cell["status"] == "error" and cell["reason"].startswith(problem)


def test_figures_failing_the_collectors_checks_are_a_warning_build_site_publishes_so(
        tmp_path: Path) -> None:
    """A decode cell stored Valid whose token count nothing verified: the builder
    publishes an Error naming the check, and validate says so beforehand."""
    data = tmp_path / "data"
    path = _run(data)
    _rewrite_raw(path, contract.CELLS_FILE, lambda t: t.set_column(
        t.schema.get_field_index("token_counting"), "token_counting",
        pa.array([contract.COUNT_CHUNKS_UNVERIFIED if p == contract.DECODE and c == 1 else v
                  for p, c, v in zip(t["phase"].to_pylist(), t["concurrency"].to_pylist(),
                                     t["token_counting"].to_pylist(), strict=True)],
                 type=pa.string())))
    res = _validate(str(data))
    assert res.exit_code == 0, res.output
    problem = counting_problem(contract.COUNT_CHUNKS_UNVERIFIED)
    assert res.stdout.splitlines() == [
        f"warning: {path / contract.CELLS_FILE}: field status: decode cell context 1024 "
        f"concurrency 1: stored as Valid, published as Error: {problem} (found by the site "
        "builder's re-check of the raw data)"]
    assert _build(data, tmp_path / "site").exit_code == 0
    cells = json.loads((tmp_path / "site" / "runs" / "r" / "cells.json").read_text("utf-8"))
    cell = next(c for c in cells["cells"] if c["phase"] == "decode" and c["concurrency"] == 1)
    assert cell["status"] == "error" and cell["reason"].startswith(problem)


def test_a_key_in_run_yaml_is_refused_without_printing_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = _run(data, info={"notes": f"Started with OPENAI_API_KEY={KEY} on the box."})
    line = _same_words(data, tmp_path)
    assert line.startswith(f"error: {path / contract.RUN_YAML}: field notes: holds secret-shaped")
    res = _validate("--json", str(data))
    assert KEY not in res.stdout and KEY[3:15] not in res.stdout
    problems = json.loads(res.stdout)["runs"][0]["problems"]
    assert problems == [{"level": "error", "file": str(path / contract.RUN_YAML),
                         "field": "field notes", "message": problems[0]["message"]}]
    assert not (tmp_path / "site" / "runs" / "r").exists()  # refused: nothing published


def test_a_token_in_a_parquet_string_column_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = _run(data)
    _rewrite_raw(path, contract.CELLS_FILE, lambda t: t.set_column(
        t.schema.get_field_index("reason"), "reason",
        pa.array([None, f"server said: Authorization: Bearer {KEY[3:]}"]
                 + [None] * (len(t) - 2), type=pa.string())))
    line = _same_words(data, tmp_path)
    assert line.startswith(f"error: {path / contract.CELLS_FILE}: column reason: row 1: holds ")
    assert KEY[3:] not in line


def test_model_text_is_not_judged_by_shape(tmp_path: Path) -> None:
    """A model may write `api_key = "..."`: only the collector's own key is removed
    from its answer, so the answer's shapes do not refuse the run."""
    data = tmp_path / "data"
    path = _run(data)
    table = read_table(path, contract.REQUESTS_FILE)
    tails = pa.array([f'api_key = "{KEY}"'] * len(table), type=pa.string())
    write_table(path, contract.REQUESTS_FILE,
                table.set_column(table.schema.get_field_index("content_tail"), "content_tail", tails))
    assert _validate(str(data)).exit_code == 0


def test_a_run_id_used_twice_is_refused_the_second_time(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _run(data, "a")
    second = make_measured_run(data / "b", run_id="a", contexts=[1024], concurrency=[1],
                               duration_s=1.0)
    built = _build(data, tmp_path / "site")
    line = f"error: {second / contract.RUN_YAML}: field run_id: 'a' is also used by {data / 'a'}"
    assert _lines(built.stderr, "error") == [line]
    res = _validate(str(data))
    assert (res.exit_code, res.stdout) == (1, line + "\n")
    assert _validate(str(second)).exit_code == 0  # alone, nothing to collide with


def test_one_source_imported_twice_is_a_warning_in_build_sites_words(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_seed_run(data / "one", QWEN_SEED_TEXT, run_id="seed-one")
    make_seed_run(data / "two", QWEN_SEED_TEXT, run_id="seed-two")
    built = _build(data, tmp_path / "site")
    assert built.exit_code == 0, built.output
    res = _validate("--json", str(data))
    assert res.exit_code == 0
    runs = json.loads(res.stdout)["runs"]
    assert runs[0]["problems"] == []
    assert runs[1]["problems"] == [{
        "level": "warning", "file": str(data / "two"), "field": None,
        "message": (f"skipped {data / 'two'}: the same source as {data / 'one'} (the same "
                    "published numbers), which is published")}]
    assert _lines(_validate(str(data)).stdout, "warning") == _lines(built.stderr, "warning")


def test_json_document_and_exit_codes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _run(data, "good")
    bad = _run(data, "bad")
    (bad / contract.CELLS_FILE).unlink()
    res = _validate("--json", str(data), str(tmp_path / "nowhere"))
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert [(r["path"], r["run_id"], r["ok"]) for r in doc["runs"]] == [
        (str(bad), "bad", False), (str(data / "good"), "good", True),
        (str(tmp_path / "nowhere"), None, False)]
    assert doc["runs"][0]["problems"] == [{"level": "error", "file": str(bad / contract.CELLS_FILE),
                                           "field": None, "message": "missing"}]
    assert _validate().exit_code == 2  # no RUN_DIR: a usage error
    assert _validate("--nope", str(data)).exit_code == 2


def test_exit_status_in_a_fresh_process(cli, tmp_path: Path) -> None:
    _run(tmp_path / "data")
    res = cli("bench", "validate", "data", cwd=tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "1 run checked: all would build\n")
    res = cli("bench", "validate", "data/r/run.yaml", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == "error: data/r/run.yaml: not a folder\n"
