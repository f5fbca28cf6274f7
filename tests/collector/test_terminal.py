"""What `bench run` prints, through the real command line against the
reference server (issue 32 items 4, 6, 7, 8): on a log (stderr not a
terminal) every line whole and once, the matrix once, then the commands
that build and preview the site; no `.bench.lock` left behind; after
`--resume`, every cell's figures, the earlier session's read back from the
run directory; `*` beside a cell means client-bound and nothing else, and a
Valid client-bound cell's reason is printed under its line."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.core.lock import LOCK_FILE, LockHeld, RunLock
from rundir.contract import CELLS_SCHEMA
from tests.collector.test_faults import D2, FAST, STEADY, cells, start_bench
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

D1 = ("decode", 128, 1)


def cell_rows(err: str, label: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith(label + " ")]


def matrix(err: str) -> list[str]:
    """The lines of the printed matrix (Rich draws it with box characters)."""
    return [ln for ln in err.splitlines() if "│" in ln or "┃" in ln]


def test_a_run_on_a_log_prints_whole_lines_once_then_the_matrix_and_the_next_step(
        refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "runs-kept-under-a-folder-whose-name-is-long-enough-to-pass-80-columns" / "r1"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1,2")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    # not wrapped at 80 columns: the plan's line ends with the whole path
    (plan,) = [ln for ln in lines if ln.startswith("Will run 2 cells")]
    assert plan.endswith(f"writing {out}") and len(plan) > 80, plan
    # each cell's line once (not again at the end), the matrix once, without an ETA
    for label in ("decode 128×1", "decode 128×2"):
        assert len(cell_rows(res.stderr, label)) == 1, res.stderr
    titles = [ln for ln in lines if "decode total tok/s" in ln]
    assert len(titles) == 1 and "ETA" not in titles[0], res.stderr
    assert any(ln.lstrip("│ ").startswith("128") for ln in matrix(res.stderr)), res.stderr
    # the next step, then the counts as the last line
    assert lines[-1] == "2 cells: 2 valid, 0 error, 0 skipped (over capacity)"
    build = next(ln.strip() for ln in lines if ln.strip().startswith("build-site --data"))
    assert build == f"build-site --data {shlex.quote(str(out.parent))} --out site"
    assert any(ln.strip().startswith("build-site --out site serve") for ln in lines)
    assert res.stdout.strip() == str(out)
    assert not (out / LOCK_FILE).exists()
    # the printed command builds the site
    site = run_cli(*shlex.split(build), cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def mark_client_bound(run_dir: Path, key: tuple[str, int, int], reason: str) -> None:
    """Store one cell as a Valid client-bound cell, as the collector does when its
    late reads could move a figure (edited by hand: the run stays marked edited)."""
    path = run_dir / "cells.parquet"
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        if (r["phase"], r["context"], r["concurrency"]) == key:
            r["client_bound"], r["reason"] = True, reason
    pq.write_table(pa.Table.from_pylist(rows, schema=CELLS_SCHEMA), path)


def test_after_resume_every_cell_shows_its_numbers_and_the_mark_means_client_bound(
        refserver, tmp_path) -> None:
    # the second cell's first measured stream is held: the run is inside it when stopped
    srv = refserver(tokens_per_s=STEADY, inject=[{"cell": list(D2), "at": 3, "do": "hold"}])
    out = tmp_path / "run"
    proc = start_bench(srv, out, "--concurrency", "1,2", "--duration", "3")
    srv.wait_arrival(D2, 3)
    proc.send_signal(signal.SIGINT)
    _, first_err = proc.communicate(timeout=120)
    assert cells(out)[D1]["status"] == "valid" and cells(out)[D2]["status"] == "pending"
    (first_line,) = cell_rows(first_err, "decode 128×1")
    assert first_line.endswith("Valid")
    reason = ("client-bound: the collector could not keep up (late reads: TTFT median could be "
              "off by up to 0.53 ms, over half the 1 ms it is shown to)")
    mark_client_bound(out, D1, reason)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out))
    assert res.returncode == 0, res.stderr
    # the earlier cell's line as its own session printed it, now marked client-bound
    rows = cell_rows(res.stderr, "decode 128×1")
    assert rows and set(rows) == {first_line + "*"}, res.stderr
    assert f"  decode 128×1: {reason}" in res.stderr.splitlines()
    assert "* client-bound" in res.stderr
    # the final matrix: both cells' numbers, no status word for a Valid cell
    figures = first_line.split()[2]  # "decode", "128×1", total tok/s, ...
    (row128,) = [ln for ln in matrix(res.stderr) if ln.lstrip("│ ").startswith("128")]
    assert f"{figures}*" in row128 and "Valid" not in row128, res.stderr
    assert "…" not in row128 and "running" not in row128
    (d2,) = cell_rows(res.stderr, "decode 128×2")
    assert d2.split()[2] in row128 and not d2.endswith("*")


def test_a_released_lock_leaves_no_file_and_a_held_one_refuses(tmp_path) -> None:
    first = RunLock(tmp_path)
    first.acquire()
    assert (tmp_path / LOCK_FILE).read_text().strip().isdigit()
    try:
        RunLock(tmp_path).acquire()
        raise AssertionError("a second writer took a held lock")
    except LockHeld:
        pass
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_FILE).exists()
    assert not (tmp_path / LOCK_FILE).exists()
