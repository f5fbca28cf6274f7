"""`bench run --repeats k` through the real CLI against the reference server.

The run directory holds k back-to-back windows per decode cell
(windows.parquet), the page's figures are the median over them, recomputed
here from the raw rows by a plain implementation independent of
rundir.metrics, and each figure's 95% interval contains it. A k = 1 run
writes what it always wrote.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench.core.plan import Cell
from bench.measure.cells import Settings
from bench.run.progress import estimate_s
from rundir.contract import CELLS_FILE, CELLS_SCHEMA, OPTIONAL_COLUMNS, PURPOSE_MEASURE, WINDOWS_FILE
from rundir.io import read_run
from site_builder.aggregate import aggregate_run
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "2", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "3",
        "--contexts", "256", "--max-output", "60"]


def collect(srv, out: Path, *extra: str, code: int = 0):
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST, *extra)
    assert res.returncode == code, res.stderr
    return res


def window_figures(rows: list[dict], bounds: list[tuple[int, int]]) -> list[dict]:
    """Per window, the four headline figures straight from the chunk lists:
    tokens arriving in the window / its length; per request (tokens after its
    first in-window token) / (its last − first in-window chunk), median; the
    inverse's median; TTFT of requests whose first token falls in the window
    (before window 0: window 0)."""
    out = []
    for i, (s, e) in enumerate(bounds):
        tokens, rates, gaps, ttfts = 0, [], [], []
        for r in rows:
            counts = r["chunk_tokens"] or []  # a stream cut before its first chunk has none
            steps = [(t, n - p) for t, n, p in
                     zip(r["chunk_ns"] or [], counts, [0, *counts][:len(counts)], strict=True)
                     if n - p > 0]
            inside = [(t, n) for t, n in steps if s <= t <= e]
            tokens += sum(n for _, n in inside)
            after = sum(n for _, n in inside[1:])
            if after and inside[-1][0] > inside[0][0]:
                span = inside[-1][0] - inside[0][0]
                rates.append(after / (span / 1e9))
                gaps.append(span / 1e6 / after)
            if steps:
                first = steps[0][0]
                owner = sum(1 for b, _ in bounds[1:] if first >= b)
                if owner == i:
                    ttfts.append((first - r["send_ns"]) / 1e6)
        out.append(dict(total_tok_s=tokens / ((e - s) / 1e9),
                        per_request_tok_s=statistics.median(rates),
                        tbt_ms=statistics.median(gaps),
                        ttft_ms=statistics.median(ttfts) if ttfts else None))
    return out


def test_three_windows_per_decode_cell(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, ttft_ms=20, half_speed_every=3)
    out = tmp_path / "k3"
    collect(srv, out, "--concurrency", "1,3", "--repeats", "3")
    info = yaml.safe_load((out / "run.yaml").read_text())
    assert info["parameters"]["repeats"] == 3
    run = read_run(out)
    agg = aggregate_run(run)
    windows = pq.read_table(out / WINDOWS_FILE).to_pylist()
    for cell in agg.decode():
        key = (cell.phase, cell.context, cell.concurrency)
        mine = sorted((w for w in windows if (w["phase"], w["context"], w["concurrency"]) == key),
                      key=lambda w: w["window"])
        assert [w["window"] for w in mine] == [0, 1, 2]
        row = next(r for r in run.cells.to_pylist()
                   if (r["phase"], r["context"], r["concurrency"]) == key)
        bounds = [(w["start_ns"], w["end_ns"]) for w in mine]
        # back to back, 2 s each, spanning the cell's window
        assert bounds[0][0] == row["window_start_ns"] and bounds[-1][1] == row["window_end_ns"]
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
        assert all(e - s == 2_000_000_000 for s, e in bounds)
        assert cell.status == "valid" and cell.windows == 3
        rows = [r for r in run.requests.to_pylist() if r["purpose"] == PURPOSE_MEASURE
                and (r["phase"], r["context"], r["concurrency"]) == key]
        per_window = window_figures(rows, bounds)
        # Each figure of each window to float precision (pytest 9's approx refuses
        # a list of dicts; pytest 8 compared them exactly, never approximately).
        stored = agg.details[cell.key]["windows"]
        assert [w.keys() for w in stored] == [w.keys() for w in per_window]
        for k, (got, want) in enumerate(zip(stored, per_window, strict=True)):
            for name, value in want.items():
                expected = value if value is None else pytest.approx(value, rel=1e-9)
                assert got[name] == expected, (k, name, got[name], value)
        for name in ("total_tok_s", "per_request_tok_s", "tbt_ms", "ttft_ms"):
            values = [w[name] for w in per_window if w[name] is not None]
            assert getattr(cell, name) == pytest.approx(statistics.median(values)), name
            lo, hi = cell.intervals[name]
            assert lo <= getattr(cell, name) <= hi, name
    # the same run aggregated twice: the same intervals, to the bit
    assert [c.intervals for c in aggregate_run(read_run(out)).cells] == [c.intervals
                                                                         for c in agg.cells]


def test_one_window_writes_what_it_always_did(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, ttft_ms=20)
    out = tmp_path / "k1"
    collect(srv, out, "--concurrency", "2")
    assert not (out / WINDOWS_FILE).exists()
    info = yaml.safe_load((out / "run.yaml").read_text())
    assert "repeats" not in info["parameters"]
    # no column of its own: the contract's (processes, hosts: what measured the cell),
    # less the traffic cells' optional ones, left out while empty (issue 33)
    traffic = set(OPTIONAL_COLUMNS[CELLS_FILE]) - {"processes", "hosts"}
    assert pq.read_schema(out / CELLS_FILE).names == [n for n in CELLS_SCHEMA.names
                                                      if n not in traffic]
    (cell,) = aggregate_run(read_run(out)).decode()
    assert cell.windows == 1 and cell.intervals == {}


def test_resume_keeps_the_repeats(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, ttft_ms=20)
    out = tmp_path / "r"
    collect(srv, out, "--concurrency", "1", "--repeats", "3")
    first = pq.read_table(out / WINDOWS_FILE).to_pylist()
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--repeats", "2")
    assert res.returncode == 2
    assert "--repeats" in res.stderr and "3 windows per decode cell" in res.stderr
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--concurrency", "1,2", "--warmup-stable", "0.5", "--server-wait", "3")
    assert res.returncode == 0, res.stderr
    windows = pq.read_table(out / WINDOWS_FILE).to_pylist()
    assert [w for w in windows if w["concurrency"] == 1] == first  # the finished cell is kept
    assert [w["window"] for w in windows if w["concurrency"] == 2] == [0, 1, 2]
    assert {c.windows for c in aggregate_run(read_run(out)).decode()} == {3}


def test_dry_run_shows_the_repeats(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", "--contexts", "256",
                  "--concurrency", "1", "--repeats", "4", "--duration", "5", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Repeats: 4 back-to-back windows of 5 s per decode cell" in res.stdout + res.stderr


@pytest.mark.parametrize("value", ["0", "-1", "two", "101"])
def test_bad_repeats_is_one_line(value, tmp_path) -> None:
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", "--repeats", value,
                  cwd=tmp_path)
    assert res.returncode == 2
    assert "--repeats" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_estimate_counts_every_window() -> None:
    cells = [Cell("decode", 256, 1)]
    one = estimate_s(cells, Settings(duration_s=30.0, repeats=1))
    three = estimate_s(cells, Settings(duration_s=30.0, repeats=3))
    assert three - one == pytest.approx(60.0)  # two more windows, no second warm-up
