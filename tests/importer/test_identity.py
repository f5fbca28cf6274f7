"""Importing the same source again: the same id, said so, nothing overwritten.

Why these checks: ids were once a digest of the parser's whole data
structure, so the bundled runs (imported by the first importer) and a fresh
import of the same seed pages got different ids and a re-import silently
added a duplicate. The reference here is the bundled data/ itself (written
by that first importer), and runs renamed to the ids later importers gave.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from importer import parse_page
from importer.cli import import_cmd
from importer.write import import_file, run_id_for
from rundir.contract import CELLS_FILE, CELLS_SCHEMA, RUN_YAML
from rundir.identity import source_key, source_key_of
from rundir.io import read_run, write_run_info, write_table

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data" / "import"
SEEDS = DATA / "seeds"
BUNDLED = TESTS.parent / "data"
JSON_REPORT = DATA / "llm-inference-bench" / "ref-3tok-c1-8.json"
QWEN = "qwen3.5-4b-bf16-rtxpro6000.txt"
# a row of the seed's All measurements table, and the same row with one number changed
ROW = "| Sustained decode | 8K | 1 | Valid | 203.9 | 208.2 | 56 ms | 4.8 ms | 1.0 | 1 | 6,116 | 30.0 s |"
CHANGED = ROW.replace("6,116", "6,117")


def run_cli(path: Path, out: Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(import_cmd, [str(path), "--out", str(out)])
    return res.exit_code, res.stdout, res.stderr


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below folder (hidden ones too) with its bytes and mtime."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def bundled_imported() -> list[Path]:
    runs = sorted(p for p in BUNDLED.iterdir() if (p / RUN_YAML).is_file()) \
        if BUNDLED.is_dir() else []
    return [p for p in runs if read_run(p).imported]


def seed_of(run: Path) -> Path:
    info = read_run(run).info
    assert info.imported is not None and info.imported.source_file
    return SEEDS / info.imported.source_file


def rename_run(run: Path, new_id: str) -> Path:
    """The run as an earlier importer would have left it, under another id."""
    info = read_run(run).info
    info.run_id = new_id
    write_run_info(run, info)
    return run.rename(run.parent / new_id)


# -- the bundled runs, imported by the first importer -------------------------------


def test_reimporting_the_bundled_seeds_names_the_bundled_runs(tmp_path: Path) -> None:
    """The review's case: the seeds imported again into data/ add nothing."""
    runs = bundled_imported()
    if not runs:
        pytest.skip("no imported runs in data/")
    data = tmp_path / "data"
    shutil.copytree(BUNDLED, data)
    before = snapshot(data)
    for run in runs:
        code, stdout, stderr = run_cli(seed_of(run), data)
        here = data / run.name
        assert code == 0, stderr
        assert stdout == f"{here}\n"
        assert stderr == (f"already imported as {here}: the same source (the same published "
                          "numbers); nothing written\n")
    assert snapshot(data) == before  # no new folder, no leftover temporary one, no rewrite


def test_bundled_runs_have_the_source_key_of_their_seed() -> None:
    """The key is computed from what a run directory stores: the same for the first
    importer's folder as for the page parsed today (the ids differ, the key does not)."""
    runs = bundled_imported()
    if not runs:
        pytest.skip("no imported runs in data/")
    for run in runs:
        stored = read_run(run)
        page = parse_page(seed_of(run).read_text(encoding="utf-8"))
        assert run_id_for(page).rsplit("-", 1)[1] == source_key(stored.info, stored.cells)[:8]


# -- the same id wherever the file lies and however it was saved -------------------


def test_same_id_from_another_folder_and_file_name(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "page.txt", tmp_path / "b" / "saved again.txt"
    for path in (a, b):
        path.parent.mkdir()
        shutil.copyfile(SEEDS / QWEN, path)
    first = import_file(a, tmp_path / "out1")
    second = import_file(b, tmp_path / "out2")
    assert first.run_id == second.run_id and first.created and second.created


@pytest.mark.parametrize("resave", [
    lambda t: t.replace("\n", "\r\n"),
    lambda t: "\n".join(line.rstrip() + "   " for line in t.split("\n")),
    lambda t: "\ufeff" + t.replace(" | ", "  |  "),
    lambda t: "Saved from https://example.org/runs/qwen3.5-4b\n" + t,
], ids=["crlf", "trailing-spaces", "bom-and-padding", "url-line"])
def test_the_page_saved_again_is_the_same_source(tmp_path: Path, resave) -> None:
    first = import_file(SEEDS / QWEN, tmp_path / "data")
    again = tmp_path / "again.txt"
    again.write_bytes(resave(SEEDS.joinpath(QWEN).read_text(encoding="utf-8")).encode())
    before = snapshot(tmp_path / "data")
    code, stdout, stderr = run_cli(again, tmp_path / "data")
    assert code == 0, stderr
    assert stdout == f"{first.path}\n" and stderr.startswith(f"already imported as {first.path}")
    assert snapshot(tmp_path / "data") == before


def test_what_is_not_measured_does_not_move_the_id() -> None:
    """Title, byline, launch command, notes' extra lines and a parameter the
    contract gains at its default are not the source: the id stays."""
    page = parse_page((SEEDS / QWEN).read_text(encoding="utf-8"))
    other = dataclasses.replace(
        page, title="Another title", byline_label="dev import", submitter="someone",
        launch_command="vllm serve other", extra=[("Header", "line", "https://example.org")],
        parameters=dataclasses.replace(page.parameters, repeats=1), format="x")
    assert run_id_for(other) == run_id_for(page)


# -- a changed source is another run; nothing on disk is lost -----------------------


def test_a_changed_number_is_a_new_run_beside_the_first(tmp_path: Path) -> None:
    text = (SEEDS / QWEN).read_text(encoding="utf-8")
    assert ROW in text
    changed = tmp_path / "changed.txt"
    changed.write_text(text.replace(ROW, CHANGED), encoding="utf-8")
    first = import_file(SEEDS / QWEN, tmp_path / "data")
    kept = snapshot(first.path)
    code, stdout, stderr = run_cli(changed, tmp_path / "data")
    assert code == 0 and stderr == ""
    second = Path(stdout.strip())
    assert second != first.path and second.parent == first.path.parent
    assert second.name.rsplit("-", 1)[0] == first.run_id.rsplit("-", 1)[0]  # same setup
    assert snapshot(first.path) == kept
    assert len(read_run(second).cells) == len(read_run(first.path).cells)


def test_a_measured_date_is_part_of_the_source(tmp_path: Path) -> None:
    """The same numbers published with a measurement date are not provably the same
    measurement as a page without one: another id (the tab-separated variant)."""
    seed = parse_page((SEEDS / "kimi-k2.6-int4-h200x8.txt").read_text(encoding="utf-8"))
    dated = parse_page((DATA / "kimi-k2.6-int4-h200x8.kv-tsv.txt").read_text(encoding="utf-8"))
    assert dated.cells == seed.cells and dated.measured_at != seed.measured_at
    assert run_id_for(dated) != run_id_for(seed)


# -- folders an earlier importer wrote under other ids ------------------------------


def test_a_run_under_an_earlier_id_is_recognised(tmp_path: Path) -> None:
    """6afcc47's importer gave this seed the id ending 9bd043e7: still recognised."""
    first = import_file(SEEDS / "kimi-k2.6-int4-h200x8.txt", tmp_path / "data")
    old = rename_run(first.path, "kimi-k2.6-h200-sxm-x8-vllm-0.29.0-9bd043e7")
    before = snapshot(tmp_path / "data")
    again = import_file(SEEDS / "kimi-k2.6-int4-h200x8.txt", tmp_path / "data")
    assert (again.created, again.path, again.run_id) == (False, old, old.name)
    assert snapshot(tmp_path / "data") == before


@pytest.mark.parametrize("dated", [False, True])
def test_a_resaved_page_finds_the_run_under_an_earlier_id(tmp_path: Path, dated: bool) -> None:
    """Other bytes (so not by the file's sha256), another id: found by its key alone,
    dated or not (an undated folder is keyed from its raw cells before a full read)."""
    name = "kimi-k2.6-int4-h200x8.kv-tsv.txt" if dated else QWEN
    page = (DATA if dated else SEEDS) / name
    first = import_file(page, tmp_path / "data")
    old = rename_run(first.path, first.run_id[:-8] + "0badc0de")
    import_file(SEEDS / "kimi-k2.6-nvfp4-rtxpro6000x8.txt", tmp_path / "data")  # another run
    resaved = tmp_path / "resaved.txt"
    resaved.write_bytes(page.read_bytes().replace(b"\n", b"\r\n"))
    before = snapshot(tmp_path / "data")
    again = import_file(resaved, tmp_path / "data")
    assert (again.created, again.path) == (False, old)
    assert again.message() == (f"already imported as {old}: the same source (the same "
                               "published numbers); nothing written")
    assert snapshot(tmp_path / "data") == before


def test_the_same_file_read_differently_is_not_imported_twice(tmp_path: Path) -> None:
    """An earlier importer read other numbers from the same bytes: the folder is
    recognised by the file's sha256, kept, and the line says what differs."""
    first = import_file(SEEDS / QWEN, tmp_path / "data")
    run = read_run(first.path)
    rows = run.cells.to_pylist()
    rows[0]["pub_ttft_ms"] = None  # as if an older parser had missed it
    write_table(first.path, CELLS_FILE, pa.Table.from_pylist(rows, schema=CELLS_SCHEMA))
    old = rename_run(first.path, first.run_id[:-8] + "00000000")
    before = snapshot(tmp_path / "data")
    code, stdout, stderr = run_cli(SEEDS / QWEN, tmp_path / "data")
    assert code == 0 and stdout == f"{old}\n"
    assert stderr == (f"already imported as {old}: from the same file, which this importer "
                      "reads differently (published numbers); nothing written (remove that "
                      "folder to import it again)\n")
    assert snapshot(tmp_path / "data") == before
    exact = import_file(SEEDS / QWEN, tmp_path / "other")  # the same numbers, named later
    shutil.copytree(exact.path, tmp_path / "data" / "zz-same-numbers")
    again = import_file(SEEDS / QWEN, tmp_path / "data")
    assert again.path == tmp_path / "data" / "zz-same-numbers" and not again.created


def test_other_runs_in_the_folder_are_left_alone(tmp_path: Path) -> None:
    """Measured runs, unreadable folders and other imports do not match or break
    the search; the new run is written beside them."""
    data = tmp_path / "data"
    shutil.copytree(BUNDLED / "llama-cpp-tiny-cpu", data / "llama-cpp-tiny-cpu")
    (data / "broken").mkdir()
    (data / "broken" / RUN_YAML).write_text("source: imported\nrun_id: [\n")
    import_file(SEEDS / "kimi-k2.6-int4-h200x8.txt", data)
    before = snapshot(data)
    got = import_file(SEEDS / QWEN, data)
    assert got.created
    assert {k: v for k, v in snapshot(data).items() if not k.startswith(got.path.name)} == before


# -- llm-inference-bench JSON reports -----------------------------------------------


def test_a_json_report_again_is_the_same_run(tmp_path: Path) -> None:
    data = json.loads(JSON_REPORT.read_text(encoding="utf-8"))
    compact = tmp_path / "elsewhere" / "benchmark_results.json"
    compact.parent.mkdir()
    compact.write_text(json.dumps(data, separators=(",", ":")))
    code, stdout, _ = run_cli(JSON_REPORT, tmp_path / "data")
    assert code == 0
    first = Path(stdout.strip())
    before = snapshot(tmp_path / "data")
    code, stdout, stderr = run_cli(compact, tmp_path / "data")
    assert code == 0 and stdout == f"{first}\n"
    assert stderr == (f"already imported as {first}: the same source (the same published "
                      "numbers); nothing written\n")
    assert snapshot(tmp_path / "data") == before
    code, stdout, _ = run_cli(compact, tmp_path / "other")
    assert code == 0 and Path(stdout.strip()).name == first.name
    reordered = tmp_path / "sorted.json"  # keys sorted: the tool's arguments listed otherwise
    reordered.write_text(json.dumps(data, sort_keys=True))
    code, stdout, stderr = run_cli(reordered, tmp_path / "data")
    assert code == 0 and stdout == f"{first}\n" and "also differs in notes" in stderr
    assert snapshot(tmp_path / "data") == before


def test_a_changed_json_report_is_a_new_run(tmp_path: Path) -> None:
    data = json.loads(JSON_REPORT.read_text(encoding="utf-8"))
    first = Path(run_cli(JSON_REPORT, tmp_path / "data")[1].strip())
    data["results"][0]["ttft_p50"] = data["results"][0]["ttft_p50"] * 2
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data))
    kept = snapshot(first)
    code, stdout, stderr = run_cli(changed, tmp_path / "data")
    assert code == 0 and stderr == "" and Path(stdout.strip()) != first
    assert snapshot(first) == kept


def test_a_json_run_under_an_earlier_id_is_recognised(tmp_path: Path) -> None:
    first = Path(run_cli(JSON_REPORT, tmp_path / "data")[1].strip())
    old = rename_run(first, first.name[:-8] + "abcdef01")
    code, stdout, stderr = run_cli(JSON_REPORT, tmp_path / "data")
    assert code == 0 and stdout == f"{old}\n" and stderr.startswith(f"already imported as {old}")
    assert sorted(os.listdir(tmp_path / "data")) == [old.name]


# -- the key itself -----------------------------------------------------------------


def test_source_key_is_the_numbers_by_cell_and_the_date() -> None:
    rows = [{"phase": "decode", "context": 8192, "concurrency": 1, "pub_total_tok_s": 203.9,
             "pub_completed": 1, "pub_ttft_ms": None},
            {"phase": "prefill", "context": 8192, "concurrency": 1, "pub_total_tok_s": 32700.0}]
    key = source_key_of(None, rows)
    assert source_key_of(None, rows[::-1]) == key  # row order
    assert source_key_of(None, [{**rows[0], "pub_new_figure": None}, rows[1]]) == key
    assert source_key_of(None, [{**rows[0], "pub_completed": 1.0}, rows[1]]) == key
    assert source_key_of(None, [{**rows[0], "status": "looped", "reason": "x"}, rows[1]]) == key
    assert source_key_of("2026-03-03T14:05:00Z", rows) != key
    assert source_key_of(None, [{**rows[0], "pub_total_tok_s": 204.0}, rows[1]]) != key
    assert source_key_of(None, [{**rows[0], "context": 16384}, rows[1]]) != key
    assert source_key_of(None, rows[:1]) != key


def test_measured_runs_have_no_source_key() -> None:
    run = read_run(BUNDLED / "llama-cpp-tiny-cpu") if (BUNDLED / "llama-cpp-tiny-cpu").is_dir() \
        else None
    if run is None:
        pytest.skip("no measured sample run")
    assert source_key(run.info, run.cells) is None


def test_only_folders_that_could_match_are_read() -> None:
    """The cheap look at run.yaml's text never rules out a folder that matches."""
    from importer.existing import could_match

    dated = "source: imported\nmeasured_at: '2026-03-03T14:05:00Z'\n"
    assert could_match(dated, "2026-03-03", None)
    assert not could_match(dated, "", None) and not could_match(dated, "2026-03-04", "ab12")
    assert could_match(dated + "  source_sha256: ab12\n", "2026-03-04", "ab12")
    assert could_match("source: imported\nmeasured_at: null\n", "", None)
    assert could_match("source: imported\nmeasured_at: 2026/03/03\n", "2026-03-03", None)
    assert not could_match("source: measured\nmeasured_at: null\nimported: null\n", "", None)
    assert could_match("run_id: x\nsource: 'imported'\n", "", None)
