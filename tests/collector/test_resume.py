"""`--resume R`: R's plan and parameters are kept, flags extend it or are
refused, finished cells and their raw rows are never dropped, nothing is
written before a new cell finishes, Error cells are re-measured only on
request (the failed attempt kept apart), and request ids stay unique."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bench.run.store import read_superseded
from rundir.contract import CELLS_SCHEMA, SUPERSEDED_REQUESTS_FILE
from rundir.io import read_run
from tests.collector.test_faults import D2, FAST, STEADY, cells, start_bench
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture, start_refserver  # noqa: F401
from tests.refserver.scenario import Scenario

# Not run parameters: a resumed run may set them as it likes.
TIMING = ["--warmup-stable", "0.5", "--server-wait", "2"]


def snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime: what "nothing was written" means."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(run_dir.iterdir()) if p.is_file() and p.name != ".bench.lock"}


def rows_of(run_dir: Path, concurrency: int) -> list[dict]:
    return [r for r in read_run(run_dir).requests.to_pylist() if r["concurrency"] == concurrency]


def all_ids(run_dir: Path) -> list[str]:
    ids = read_run(run_dir).requests.column("request_id").to_pylist()
    return ids + read_superseded(run_dir).column("request_id").to_pylist()


def one_line(res) -> str:
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_resume_with_no_flags_keeps_the_plan_and_the_finished_cells(refserver, tmp_path) -> None:
    """The README's line, `bench run --base-url URL --resume R`, once re-planned
    the default matrix and erased the finished cells and their raw rows."""
    # the second cell's first measured stream is held unanswered: the collector is
    # inside that cell when interrupted, however slow the host
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "1,2", "--duration", "3")
    srv.wait_arrival(D2, 3)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    first = read_run(out)
    assert cells(out)[D2]["status"] == "pending"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out))  # as written
    assert res.returncode == 0, res.stderr
    again = read_run(out)
    assert again.info.parameters == first.info.parameters  # 3 s windows, 400 tokens, 128 × 1,2
    got = cells(out)
    assert set(got) == {("decode", 128, 1), ("decode", 128, 2)}  # not the default matrix
    assert got[("decode", 128, 1)] == cells_before(first)[("decode", 128, 1)]
    assert rows_of(out, 1) == [r for r in first.requests.to_pylist() if r["concurrency"] == 1]
    c2 = got[("decode", 128, 2)]
    assert c2["status"] == "valid"
    assert c2["window_end_ns"] - c2["window_start_ns"] == 3_000_000_000  # R's window
    ids = all_ids(out)
    assert len(ids) == len(set(ids))
    assert res.stderr.strip().splitlines()[-1] == "2 cells: 2 valid, 0 error, 0 skipped (over capacity)"


def cells_before(run) -> dict:
    return {(c["phase"], c["context"], c["concurrency"]): c for c in run.cells.to_pylist()}


def test_resume_extends_the_plan_with_new_levels(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    first = read_run(out)
    # a dry run shows the extended plan and touches nothing (and takes no lock)
    before = snapshot(out)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out), "--dry-run",
                  "--concurrency", "4", "--contexts", "256")
    assert res.returncode == 0, res.stderr
    assert "Contexts: 128, 256; concurrency: 1, 4" in res.stderr and "Will run 3 cells" in res.stderr
    assert snapshot(out) == before
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out), *TIMING,
                  "--concurrency", "2")
    assert res.returncode == 0, res.stderr
    again = read_run(out)
    assert again.info.parameters.concurrency == [1, 2]
    assert again.info.parameters.duration_s == 2.0 and again.info.parameters.max_output_tokens == 400
    got = cells(out)
    assert got[("decode", 128, 1)] == cells_before(first)[("decode", 128, 1)]
    assert got[("decode", 128, 2)]["status"] == "valid"
    assert rows_of(out, 1) == [r for r in first.requests.to_pylist() if r["concurrency"] == 1]
    ids = all_ids(out)
    assert len(ids) == len(set(ids))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A small finished run (one prefill cell, one decode cell) and its server."""
    base = tmp_path_factory.mktemp("finished")
    srv = start_refserver(Scenario(tokens_per_s=STEADY), base / "srv")
    out = base / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), "--duration", "1",
                  "--warmup-stable", "0.5", "--max-output", "400", "--contexts", "128",
                  "--concurrency", "1", "--prefill-contexts", "128", "--prefill-repeats", "1",
                  "--kv-budget", "1000000")
    assert res.returncode == 0, res.stderr
    yield srv, out
    srv.kill()


@pytest.mark.parametrize("args, flag", [
    (["--duration", "3"], "--duration"),
    (["--max-output", "500"], "--max-output"),
    (["--prefill-repeats", "5"], "--prefill-repeats"),
    (["--kv-budget", "100000"], "--kv-budget"),
    (["--model", "other"], "--model"),
    (["--no-prefill"], "--no-prefill"),
    (["--launch-command", "vllm serve m"], "--launch-command"),
    (["--run-card", "CARD"], "--run-card"),
    (["--out", "OTHER"], "--out and --resume"),
])
def test_resume_refuses_flags_that_change_the_run(finished_run, tmp_path, args, flag) -> None:
    srv, out = finished_run
    card = tmp_path / "card.yaml"
    card.write_text("notes: hi\n")
    args = [str(card) if a == "CARD" else str(tmp_path / "o") if a == "OTHER" else a for a in args]
    before = snapshot(out)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out), *args)
    assert res.returncode == 2, res.stderr
    assert one_line(res).startswith(f"error: {flag}")
    assert snapshot(out) == before


def test_resume_accepts_its_own_values_and_says_nothing_is_left(finished_run) -> None:
    srv, out = finished_run
    before = snapshot(out)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--duration", "1", "--max-output", "400", "--prefill-repeats", "1",
                  "--contexts", "128", "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    assert f"nothing left to measure in {out}" in res.stderr
    assert snapshot(out) == before


@pytest.mark.parametrize("damage, field", [
    ("missing", "run.yaml: missing"),
    ("nan", "duration_s"),
    ("imported", "imported run"),
])
def test_resume_of_a_directory_it_cannot_continue(finished_run, tmp_path, damage, field) -> None:
    srv, out = finished_run
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    meta = yaml.safe_load((bad / "run.yaml").read_text())
    if damage == "missing":
        (bad / "run.yaml").unlink()
    elif damage == "nan":
        meta["parameters"]["duration_s"] = float("nan")
    else:
        meta["source"] = "imported"
    if damage != "missing":
        (bad / "run.yaml").write_text(yaml.safe_dump(meta))
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(bad))
    assert res.returncode in (1, 2), res.stderr
    line = one_line(res)
    assert line.startswith("error: --resume: ") and field in line, line


def test_retry_errors_measures_error_cells_again_and_keeps_the_failed_attempt(
        refserver, tmp_path) -> None:
    good = refserver(tokens_per_s=STEADY)
    failing = refserver(tokens_per_s=200, status_every={"n": 1, "code": 500})
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", good.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    c1_rows = rows_of(out, 1)
    # a level added while the server fails every completion: an Error cell, exit status 3
    res = run_cli("bench", "run", "--base-url", failing.base_url, "--resume", str(out), *TIMING,
                  "--concurrency", "2")
    assert res.returncode == 3, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "2 cells: 1 valid, 1 error, 0 skipped (over capacity)"
    assert cells(out)[("decode", 128, 2)]["status"] == "error"
    failed_ids = {r["request_id"] for r in rows_of(out, 2)}
    assert failed_ids
    # without --retry-errors nothing is re-measured, and nothing is written
    before = snapshot(out)
    res = run_cli("bench", "run", "--base-url", good.base_url, "--resume", str(out), *TIMING)
    assert res.returncode == 3 and "--retry-errors" in res.stderr, res.stderr
    assert snapshot(out) == before
    # with it, the Error cell is measured again; its failed attempt is kept apart
    res = run_cli("bench", "run", "--base-url", good.base_url, "--resume", str(out), *TIMING,
                  "--retry-errors")
    assert res.returncode == 0, res.stderr
    assert cells(out)[("decode", 128, 2)]["status"] == "valid"
    new_rows = rows_of(out, 2)
    assert new_rows and all(r["error"] is None for r in new_rows)
    assert not failed_ids & {r["request_id"] for r in new_rows}  # not mixed into the new figures
    superseded = read_superseded(out).to_pylist()
    assert {r["request_id"] for r in superseded} == failed_ids  # kept, not lost
    assert all(r["error"] for r in superseded)
    assert rows_of(out, 1) == c1_rows
    ids = all_ids(out)
    assert len(ids) == len(set(ids))
    assert pq.read_table(out / SUPERSEDED_REQUESTS_FILE).num_rows == len(failed_ids)


def test_nothing_is_written_before_the_first_new_cell_finishes(refserver, tmp_path) -> None:
    # the new cell's two prefix warm-ups are answered, its first measured stream held:
    # the collector is inside that cell, with requests served, when interrupted
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1")
    assert res.returncode == 0, res.stderr
    run_id = read_run(out).info.run_id
    before = snapshot(out)
    proc = start_resume(srv, out, "--concurrency", "2", "--warmup-timeout", "600")
    assert srv.wait_arrival(D2, 3)["request_id"].startswith(f"{run_id}.r1-")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted")
    assert snapshot(out) == before  # not even run.yaml's extended plan


def start_resume(srv, out: Path, *extra: str) -> subprocess.Popen:
    """`bench run --resume` in the background."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.cli", "run", "--base-url", srv.base_url, "--resume", str(out),
         *TIMING, *extra],
        env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.parametrize("server, said", [
    ({"model": "other"}, "measured model 'ref'"),
    ({"max_model_len": 16384}, "max model length 32,768"),
])
def test_resume_against_another_model_or_length_is_refused(finished_run, refserver, server,
                                                           said) -> None:
    _, out = finished_run
    srv = refserver(tokens_per_s=200, **server)
    before = snapshot(out)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out))
    assert res.returncode == 1, res.stderr
    line = one_line(res)
    assert line.startswith("error: --resume: ") and said in line, line
    assert snapshot(out) == before


def test_rows_left_by_an_unfinished_attempt_move_aside_when_the_cell_is_measured(
        finished_run, tmp_path) -> None:
    """A pending cell holding raw rows (a writer killed between requests.parquet
    and cells.parquet, or an older collector that kept interrupted attempts):
    re-measuring it keeps those rows, apart from the new attempt's."""
    srv, out = finished_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    table = pq.read_table(run / "cells.parquet").to_pylist()
    for row in table:
        if row["phase"] == "decode":
            row["status"], row["reason"] = "pending", None
    pq.write_table(pa.Table.from_pylist(table, schema=CELLS_SCHEMA), run / "cells.parquet")
    left = {r["request_id"] for r in rows_of(run, 1) if r["phase"] == "decode"}
    assert left
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run), *TIMING)
    assert res.returncode == 0, res.stderr
    assert cells(run)[("decode", 128, 1)]["status"] == "valid"
    assert {r["request_id"] for r in read_superseded(run).to_pylist()} == left
    assert not left & {r["request_id"] for r in rows_of(run, 1)}
    ids = all_ids(run)
    assert len(ids) == len(set(ids))
