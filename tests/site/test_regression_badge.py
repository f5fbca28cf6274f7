"""Issue 32: a red "regression" badge only for a fall the data can tell from noise.

Two runs of one setup, one window per cell: the one-window noise bands
(rundir.intervals.one_window_bands) decide; a fall they cannot tell from noise
keeps its numbers but is badged "change not established" (site_builder/changes.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rundir import intervals
from rundir.io import read_run
from site_builder import changes
from site_builder.aggregate import aggregate_run
from site_builder.publish import build_site
from tests.site.test_repeats_site import run as repeated_run
from tests.support.synthetic_runs import make_measured_run


def test_median_band_is_the_rank_interval() -> None:
    assert intervals.median_band(np.arange(5.0)) is None  # under 6: no 95% pair of ranks
    assert intervals.median_band(np.array([3.0, 1, 6, 2, 5, 4, np.nan])) == (1.0, 6.0)
    # n = 20: 2 P(B <= 5) = 4.1% <= 5% < 2 P(B <= 6) = 11.5%: ranks 6 and 15
    assert intervals.median_band(np.arange(1.0, 21.0)) == (6.0, 15.0)
    lo, hi = intervals.median_band(np.arange(10_001.0))  # thousands: no underflow
    assert lo < 5000 < hi and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(10_001) / 2, abs=2)


def test_mean_band_is_students_t_over_the_slices() -> None:
    rates = np.array([100.0, 104, 96, 102, 98, 101, 99, 103, 97, 100])
    lo, hi = intervals.mean_band(rates)
    half = 2.2622 * rates.std(ddof=1) / math.sqrt(10)
    assert (lo, hi) == pytest.approx((100.0 - half, 100.0 + half))
    assert intervals.mean_band(rates[:9]) is None  # not a window's ten slices


def test_one_window_bands_are_widened_for_drift() -> None:
    rates = np.array([100.0, 104, 96, 102, 98, 101, 99, 103, 97, 100])
    samples = {"total_tok_s": rates, "per_request_tok_s": np.array([50.0, 52, 48]),
               "ttft_ms": np.arange(10.0, 30.0), "tbt_ms": np.array([])}
    bands = intervals.one_window_bands(samples)
    lo, hi = intervals.mean_band(rates)
    assert bands["total_tok_s"] == pytest.approx([100 - 3.2 * (100 - lo), 100 + 3.2 * (hi - 100)])
    assert set(bands) == {"total_tok_s", "ttft_ms"}  # 3 requests, no tbt: no band
    assert bands["ttft_ms"] == pytest.approx([19.5 - 3.2 * 4.5, 19.5 + 3.2 * 4.5])
    assert intervals.widened(10.0, (2.0, 12.0)) == [0.0, 16.4]  # never below 0


def _run(data: Path, name: str, rate: float, seed: int, day: int, wobble: float) -> Path:
    return make_measured_run(data / name, run_id=name, contexts=[1024], concurrency=[1, 4],
                             duration_s=5.0, tokens_per_s=rate, seed=seed, prefill_contexts=[],
                             rate_wobble=wobble,
                             info={"measured_at": f"2026-09-{day:02d}T10:00:00Z"})


def _cells(path: Path) -> dict[int, object]:
    return {c.concurrency: c for c in aggregate_run(read_run(path)).decode()}


def test_noise_only_difference_is_not_established(tmp_path: Path) -> None:
    """The same server on a busy host (its rate moving ±40% every 250 ms), 13% slower
    the second time: the windows' own slices are that noisy, so no regression."""
    a = _cells(_run(tmp_path, "a", 60.0, 1, 2, 0.4))[1]
    b = _cells(_run(tmp_path, "b", 52.0, 2, 9, 0.4))[1]
    assert a.windows == b.windows == 1 and a.intervals == {} and a.noise
    move = changes.figure_move("1K × 1", a, b, "total_tok_s", "Total tok/s", True, str)
    assert move is not None and move.change.startswith("−") and float(move.change[1:-1]) > 5
    assert not move.established and move.why == changes.BANDS_OVERLAP


def test_large_fall_with_tight_spread_is_a_regression(tmp_path: Path) -> None:
    a = _cells(_run(tmp_path, "a", 60.0, 3, 2, 0.0))
    b = _cells(_run(tmp_path, "b", 40.0, 4, 9, 0.0))
    for n in (1, 4):
        move = changes.figure_move("", a[n], b[n], "total_tok_s", "Total tok/s", True, str)
        assert move is not None and move.established and not move.better, n
        assert move.why == changes.BANDS_APART


def test_repeats_are_judged_by_their_k_windows(tmp_path: Path) -> None:
    """A cell of k windows has its 95% interval and no one-window band: the change
    rule reads the k windows."""
    a = _cells(repeated_run(tmp_path, "a", 60.0, 1))[1]
    b = _cells(repeated_run(tmp_path, "b", 30.0, 2))[1]
    assert a.windows == 3 and a.noise == {} and "total_tok_s" in a.intervals
    move = changes.figure_move("", a, b, "total_tok_s", "Total tok/s", True, str)
    assert move is not None and move.established and move.why == changes.APART


def _index(data: Path, out: Path) -> str:
    assert build_site(data, out, jobs=0).errors == []
    return (out / "index.html").read_text()


def test_index_badges_only_a_fall_told_from_noise(tmp_path: Path) -> None:
    noisy, real = tmp_path / "noisy", tmp_path / "real"
    _run(noisy, "a", 60.0, 1, 2, 0.4)
    _run(noisy, "b", 52.0, 2, 9, 0.4)
    index = _index(noisy, tmp_path / "site-noisy")
    assert 'class="badge regression"' not in index
    assert index.count(">change not established</a>") == 1  # the numbers, on hover
    assert 'title="Change not established: Total tok/s at 1K × 1 −' in index
    assert "within noise" in index

    _run(real, "a", 60.0, 3, 2, 0.0)
    _run(real, "b", 40.0, 4, 9, 0.0)
    index = _index(real, tmp_path / "site-real")
    assert index.count('class="badge regression"') == 1
    assert 'title="Regression: ' in index and ">change not established<" not in index
