"""Every published percentile against the reference server's schedule
(issue 20, item 6), through the real CLI.

The server varies requests by number (tests/refserver/variation.py): every
3rd request's first token comes 40 … 400 ms late (a ramp, cycled), every
8th decodes at every 2nd, 3rd or 4th step. So TTFT, time between tokens,
per-request tok/s and end-to-end latency each have a tail whose p50, p90,
p95 and p99 are tens of milliseconds (or a whole step) apart, and `bench
run` at 1 and 3 tokens per chunk must publish each level as the same rank
of the server's own figures over the same requests.

"Exact" is bounded, not approximate: the collector's stamps lag the
server's sends by transport, which the two logs measure per request (the
way up, each chunk's way down, the read of the end), so each request's
figure lies between its true value and that value moved by its own
transport (harness.true_request_figures), and a rank of the collector's
figures lies between the same rank of those two ends (a rank is monotone in
every sample). However long the host delays a packet, the bound covers it;
the test then checks that the bound is far narrower than the distance
between neighbouring levels, so a wrong rank, a rate ranked on the wrong
side, or a wrong sample set cannot pass.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from rundir import tails
from rundir.contract import PURPOSE_MEASURE
from rundir.io import read_run
from site_builder.aggregate import CellResult, aggregate_run
from tests.conftest import run_cli
from tests.refserver.harness import TrueFigure, refserver_fixture, true_request_figures  # noqa: F401

VARIATION = dict(tokens_per_s=200, ttft_ms=10, slow_first_every=3,
                 slow_first_extra_ms=[40.0 * i for i in range(1, 11)],
                 half_speed_every=8, half_speed_steps=[2, 2, 3, 3, 4])
# One cell with too few requests for p99 (1 stream) and one with enough (10).
# Short answers give many requests; 1/8 of them slow keeps the cell's total
# within the collector's consistency check of per-request × streams (a
# request's time spent slow weighs in the total, not in the median).
BENCH = ["--duration", "4", "--warmup-stable", "1", "--no-prefill", "--server-wait", "3",
         "--contexts", "128", "--concurrency", "1,10", "--max-output", "24"]
BIG = 10
# The percentile each level means, written out here (not taken from rundir.tails):
# the slow side, so a rate's p99 is its 1st percentile.
RANK = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}
ENOUGH = {"p50": 1, "p90": 10, "p95": 20, "p99": 100, "p99.9": 1000}
# Neighbouring levels the variation sets apart, per figure (the rest are
# checked for value, not for distance).
APART = {"ttft_ms": ("p50", "p90", "p95", "p99"), "tbt_ms": ("p50", "p90", "p95", "p99"),
         "per_request_tok_s": ("p50", "p90", "p95", "p99"), "e2e_ms": ("p50", "p90", "p99")}
MARGIN = 5  # neighbouring levels at least this many bound widths apart


def rank_of(key: str, level: str) -> float:
    return 100.0 - RANK[level] if key == "per_request_tok_s" else RANK[level]


def collect(srv, out: Path) -> Path:
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *BENCH)
    assert res.returncode == 0, res.stderr
    return out


def measured_rows(run_dir: Path, cell: CellResult) -> list[dict]:
    """The cell's measured streams, in the order the builder reads them."""
    return [r for r in read_run(run_dir).requests.to_pylist()
            if r["purpose"] == PURPOSE_MEASURE and r["phase"] == "decode"
            and (r["context"], r["concurrency"]) == (cell.context, cell.concurrency)]


def window(run_dir: Path, cell: CellResult) -> tuple[int, int]:
    (row,) = [c for c in read_run(run_dir).cells.to_pylist() if c["phase"] == "decode"
              and (c["context"], c["concurrency"]) == (cell.context, cell.concurrency)]
    return row["window_start_ns"], row["window_end_ns"]


def level_bounds(fig: TrueFigure, key: str, level: str) -> tuple[float, float, float]:
    """A level's true value and the bounds the published one must lie in."""
    ok = np.isfinite(fig.truth)
    q = rank_of(key, level)
    return tuple(float(np.percentile(a[ok], q)) for a in (fig.truth, fig.lo, fig.hi))


def check_cell(cell: CellResult, figures: dict[str, TrueFigure]) -> dict[str, dict]:
    """Every level of every figure of one cell against the truth; returns them."""
    seen: dict[str, dict] = {}
    for key, fig in figures.items():
        metric = tails.BY_KEY[key]
        n = int(np.isfinite(fig.truth).sum())
        assert cell.tails[metric.count_column()] == n, (cell.key, key)
        seen[key] = {}
        for level in RANK:
            published = cell.tails[metric.column(level)]
            if n < ENOUGH[level]:
                assert published is None, (cell.key, key, level, n)
                continue
            truth, lo, hi = level_bounds(fig, key, level)
            eps = 1e-9 * max(1.0, abs(truth))  # float rounding of the same sums
            assert lo - eps <= published <= hi + eps, (
                f"{cell.key} {key} {level}: published {published:.4f}, truth {truth:.4f}"
                f" (bounds {lo:.4f} … {hi:.4f}, {n} samples)")
            seen[key][level] = (truth, hi - lo)
        # p50 is the median the page has always published
        assert cell.tail(key, "p50") == pytest.approx(cell.tails[metric.column("p50")])
    return seen


def assert_levels_apart(seen: dict[str, dict], where: str) -> None:
    """The variation's design: neighbouring published levels far apart."""
    for key, levels in APART.items():
        shown = [lv for lv in levels if lv in seen[key]]
        for a, b in zip(shown, shown[1:], strict=False):
            (ta, wa), (tb, wb) = seen[key][a], seen[key][b]
            assert abs(tb - ta) > MARGIN * max(wa, wb, 1e-9), (
                f"{where} {key}: {a} {ta:.3f} and {b} {tb:.3f} are not {MARGIN}× their"
                f" bound ({max(wa, wb):.3f}) apart")


@pytest.mark.parametrize("per_chunk", [1, 3], ids=["1-token-chunks", "3-token-chunks"])
def test_every_percentile_matches_the_servers_schedule(refserver, tmp_path, per_chunk) -> None:
    srv = refserver(tokens_per_chunk=per_chunk, **VARIATION)
    run_dir = collect(srv, tmp_path / "run")
    cells = {c.concurrency: c for c in aggregate_run(read_run(run_dir)).cells
             if c.phase == "decode"}
    records = srv.truth(min_records=1)
    for cell in cells.values():  # numbers published (a busy host may call a cell queued)
        assert cell.has_numbers and cell.status != "error", (cell.status, cell.reason)
    for conc, cell in cells.items():
        rows = measured_rows(run_dir, cell)
        figures = true_request_figures(records, rows, *window(run_dir, cell))
        seen = check_cell(cell, figures)
        if conc == BIG:  # enough samples for p99 of every figure
            assert all("p99" in seen[key] for key in seen), {k: len(v) for k, v in seen.items()}
            assert_levels_apart(seen, cell.key)
        else:  # too few: p99 and p99.9 are None ("—"), p90 is shown
            assert cell.tails[tails.TTFT.column("p99")] is None
            assert cell.tails[tails.TTFT.column("p90")] is not None
    # the variation reached the cells: slow first tokens and half-speed streams were measured
    ours = {r["request_id"] for c in cells.values() for r in measured_rows(run_dir, c)}
    mine = [r for r in records if r["request_id"] in ours]
    assert {r["every_steps"] for r in mine} == {1, 2, 3, 4}
    assert {r["first_extra_ms"] for r in mine} == {0.0, *VARIATION["slow_first_extra_ms"]}


def test_too_few_samples_download_as_empty(refserver, tmp_path) -> None:
    """A cell with fewer than 100 requests has no p99: cells.json says null,
    cells.csv leaves it empty (the page prints "—"), from a real build."""
    srv = refserver(**VARIATION)
    runs = tmp_path / "runs"
    run_dir = collect(srv, runs / "tails")
    site = tmp_path / "site"
    res = run_cli("build-site", "--data", str(runs), "--out", str(site), "-q")
    assert res.returncode == 0, res.stderr
    (cells_json,) = site.rglob("cells.json")
    (cells_csv,) = site.rglob("cells.csv")
    small = {c.key: c for c in aggregate_run(read_run(run_dir)).cells
             if c.phase == "decode" and c.concurrency == 1}
    (cell,) = small.values()
    n = cell.tails[tails.TTFT.count_column()]
    assert 10 <= n < 100, n  # enough for p90, too few for p99
    records = json.loads(cells_json.read_text())
    records = records["cells"] if isinstance(records, dict) else records
    (row,) = [r for r in records if r.get("phase") == "decode" and r.get("concurrency") == 1]
    assert row[tails.TTFT.count_column()] == n
    assert row[tails.TTFT.column("p99")] is None and row[tails.TTFT.column("p99.9")] is None
    assert row[tails.TTFT.column("p90")] == pytest.approx(cell.tails[tails.TTFT.column("p90")])
    with cells_csv.open(newline="") as f:
        (line,) = [r for r in csv.DictReader(f)
                   if r.get("phase") == "decode" and r.get("concurrency") == "1"]
    assert line[tails.TTFT.column("p99")] == "" and line[tails.PER_REQUEST.column("p99")] == ""
    assert float(line[tails.TTFT.column("p90")]) == pytest.approx(
        cell.tails[tails.TTFT.column("p90")], rel=1e-3)
