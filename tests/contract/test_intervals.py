"""The two-stage bootstrap of repeated windows (rundir/intervals.py) and the
window contract (rundir/windows.py, windows.parquet): exact small cases,
seeding, and one-line errors for bad window ids."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rundir import intervals, windows
from rundir.contract import CELLS_FILE, WINDOWS_FILE, WINDOWS_SCHEMA, ContractError, RunInfo
from rundir.io import read_run, read_table, write_run_info, write_table
from rundir.metrics import Chunks


def test_constant_windows_give_a_point_interval() -> None:
    # every request of every window says 5: no resample can say otherwise
    found = intervals.two_stage_interval([np.full(7, 5.0), np.full(3, 5.0), np.full(9, 5.0)],
                                         "median", seed=1)
    assert found == (5.0, 5.0)


def test_two_constant_windows_span_both_values() -> None:
    # stage 2 is exact (constant windows); stage 1 draws two of {a, b}: the median is
    # a, (a+b)/2 or b with chances 1/4, 1/2, 1/4, so the 2.5% and 97.5% points are a and b
    found = intervals.two_stage_interval([np.full(4, 10.0), np.full(6, 30.0)], "median", seed=7)
    assert found == (10.0, 30.0)


def test_three_single_request_windows_are_min_and_max() -> None:
    # k = 3 windows of one value: the median of 3 draws is the smallest with chance 7/27
    found = intervals.two_stage_interval([np.array([1.0]), np.array([2.0]), np.array([4.0])],
                                         "median", seed=3)
    assert found == (1.0, 4.0)


def test_mean_statistic_of_constant_slices_is_exact() -> None:
    # total tok/s: a window's figure is the mean of its slices' rates; with every
    # slice alike it is exact, whatever the draw
    found = intervals.two_stage_interval([np.full(10, 2.0), np.full(10, 3.0)], "mean", seed=2)
    assert found == (2.0, 3.0)


def test_slice_rates_sum_the_window_tokens() -> None:
    # one request, chunks of 1, 2, 3, 4 tokens at 0, 0.5, 1.5 and 2.0 s; window [0, 2 s]
    chunks = Chunks.from_table(pa.Table.from_pylist([dict(
        send_ns=0, end_ns=2_000_000_000, chunk_ns=[0, 500_000_000, 1_500_000_000, 2_000_000_000],
        chunk_tokens=[1, 3, 6, 10])]))
    rates = intervals.slice_rates(chunks, 0, 2_000_000_000, slices=2)
    assert rates.tolist() == [3.0, 7.0]  # 3 tokens in the first second, 7 in the second
    assert rates.mean() == 10 / 2.0


def test_seeded_and_deterministic() -> None:
    rng = np.random.default_rng(0)
    samples = [rng.normal(100, 5, 50) for _ in range(3)]
    a = intervals.two_stage_interval(samples, "median", seed=intervals.seed_for("c:tbt_ms"))
    b = intervals.two_stage_interval(samples, "median", seed=intervals.seed_for("c:tbt_ms"))
    c = intervals.two_stage_interval(samples, "median", seed=intervals.seed_for("c:ttft_ms"))
    assert a == b and a != c
    lo, hi = a
    assert lo < intervals.median_over_windows([float(np.median(s)) for s in samples]) < hi


def test_wider_than_windows_alone_when_requests_vary() -> None:
    # noisy windows whose medians happen to agree: stage 2 still sees the noise
    rng = np.random.default_rng(5)
    base = rng.normal(0, 10, 41)
    samples = [base - np.median(base) + 50 for _ in range(3)]
    lo, hi = intervals.two_stage_interval(samples, "median", seed=11)
    assert hi - lo > 1.0  # windows alone would say [50, 50]


def test_one_window_or_none_has_no_interval() -> None:
    assert intervals.two_stage_interval([np.arange(5.0)], "median", seed=0) is None
    assert intervals.two_stage_interval([np.arange(5.0), np.array([np.nan])], "median",
                                        seed=0) is None
    assert intervals.median_over_windows([None, None]) is None
    assert intervals.median_over_windows([3.0, None, 1.0]) == 2.0
    with pytest.raises(ValueError, match="statistic"):
        intervals.two_stage_interval([np.ones(2), np.ones(2)], "sum", seed=0)


def test_first_token_window_rule() -> None:
    bounds = [(100, 200), (200, 300), (300, 400)]
    first = np.array([-1, 50, 100, 199, 200, 299, 300, 450])
    assert windows.first_token_window(first, bounds).tolist() == [-1, 0, 0, 0, 1, 1, 2, 2]


def test_split_span() -> None:
    assert windows.split_span(0, 30, 3, 10) == [(0, 10), (10, 20), (20, 30)]
    assert windows.split_span(0, 15, 3, 10) == [(0, 10), (10, 15)]  # cut short by a failure


# -- windows.parquet in a run directory --------------------------------------------------


def _run(tmp_path, rows: list[dict]):
    info = RunInfo.from_dict({"schema_version": 1, "run_id": "r", "parameters": {"repeats": 3}})
    write_run_info(tmp_path, info)
    cells = pa.Table.from_pylist([{"phase": "decode", "context": 256, "concurrency": 2,
                                   "status": "valid", "window_start_ns": 100,
                                   "window_end_ns": 400}],
                                 schema=read_table(tmp_path, CELLS_FILE, required=False).schema)
    write_table(tmp_path, CELLS_FILE, cells)
    write_table(tmp_path, "requests.parquet",
                read_table(tmp_path, "requests.parquet", required=False))
    pq.write_table(pa.Table.from_pylist(rows, WINDOWS_SCHEMA), tmp_path / WINDOWS_FILE)
    return tmp_path


def _w(i: int, s: int, e: int, concurrency: int = 2, phase: str = "decode") -> dict:
    return dict(phase=phase, context=256, concurrency=concurrency, window=i, start_ns=s, end_ns=e)


def test_good_windows_read(tmp_path) -> None:
    run = read_run(_run(tmp_path, [_w(1, 200, 300), _w(0, 100, 200), _w(2, 300, 400)]))
    assert windows.by_cell(run.windows) == {("decode", 256, 2): [(100, 200), (200, 300),
                                                                 (300, 400)]}
    assert run.info.parameters.repeats == 3


@pytest.mark.parametrize(("rows", "words"), [
    ([_w(0, 100, 200), _w(2, 200, 300)], "column window: expected ids 0..1 once each"),
    ([_w(0, 100, 200), _w(0, 200, 300)], "column window: expected ids 0..1 once each"),
    ([_w(0, 100, 200), _w(1, 300, 300)], "window 1 ends at or before its start"),
    ([_w(0, 100, 250), _w(1, 200, 300)], "window 1 starts before window 0 ends"),
    ([_w(0, 100, 200), _w(1, 200, 500)], "a window outside the cell's"),
    ([_w(0, 100, 200, concurrency=4)], "cell (decode, 256, 4) has windows but no row"),
    ([_w(0, 100, 200, phase="prefill")], "column phase"),
    ([_w(-1, 100, 200)], "column window"),
])
def test_bad_windows_are_one_line(tmp_path, rows, words) -> None:
    with pytest.raises(ContractError) as err:
        read_run(_run(tmp_path, rows))
    message = str(err.value)
    assert words in message and WINDOWS_FILE in message and "\n" not in message


def test_repeats_one_is_not_written() -> None:
    info = RunInfo.from_dict({"schema_version": 1, "run_id": "r", "parameters": {"repeats": 1}})
    assert "repeats" not in info.to_dict()["parameters"]
    with pytest.raises(ContractError, match="parameters.repeats: expected a number >= 1"):
        RunInfo.from_dict({"schema_version": 1, "run_id": "r", "parameters": {"repeats": 0}})
