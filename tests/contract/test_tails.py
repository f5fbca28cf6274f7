"""The tail ranks (rundir/tails.py) on samples whose answers are known: the
sample rule at its boundaries, the column names, the mirrored rank of a
rate, numpy's interpolation, NaN samples ignored, and p50 equal to the
medians the pages have always published."""

from __future__ import annotations

import numpy as np
import pytest

from rundir import metrics, tails
from tests.contract.test_metrics import MS, table

LATENCIES = (tails.TTFT, tails.TBT, tails.E2E)


@pytest.mark.parametrize(("level", "enough"), [
    ("p50", 1), ("p90", 10), ("p95", 20), ("p99", 100), ("p99.9", 1000)])
def test_a_level_needs_one_over_its_tail_share_of_samples(level: str, enough: int) -> None:
    for metric in (tails.TTFT, tails.PER_REQUEST):
        short, full = np.arange(1.0, enough), np.arange(1.0, enough + 1)
        assert tails.percentile(short, metric, level) is None
        assert tails.tail_columns(short, metric)[metric.column(level)] is None
        assert tails.percentile(full, metric, level) is not None
        assert tails.tail_columns(full, metric)[metric.column(level)] is not None
        assert tails.tail_columns(full, metric)[metric.count_column()] == enough


def test_boundaries_99_against_100_and_9_against_10() -> None:
    cols = tails.tail_columns(np.arange(99.0), tails.TBT)
    assert cols["tbt_ms_p99"] is None and cols["tbt_ms_p95"] is not None
    assert tails.tail_columns(np.arange(100.0), tails.TBT)["tbt_ms_p99"] == pytest.approx(98.01)
    nine = tails.tail_columns(np.arange(9.0), tails.TTFT)
    assert nine["ttft_ms_p90"] is None and nine["ttft_ms_p50"] == 4.0
    assert tails.tail_columns(np.arange(10.0), tails.TTFT)["ttft_ms_p90"] == pytest.approx(8.1)
    assert tails.tail_columns(np.zeros(0), tails.TTFT) == {
        **dict.fromkeys(tails.TTFT.column(lv) for lv in tails.LEVELS), "ttft_ms_n": 0}


def test_column_names() -> None:
    assert [tails.TTFT.column(lv) for lv in tails.LEVELS] == [
        "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p95", "ttft_ms_p99", "ttft_ms_p99_9"]
    assert [tails.PER_REQUEST.column(lv) for lv in tails.LEVELS] == [
        "per_request_tok_s_p50", "per_request_tok_s_p10", "per_request_tok_s_p5",
        "per_request_tok_s_p1", "per_request_tok_s_p0_1"]
    assert tails.TBT.column("p99.9") == "tbt_ms_p99_9" and tails.E2E.column("p90") == "e2e_ms_p90"
    assert tails.E2E.count_column() == "e2e_ms_n"
    cols = tails.all_columns()
    assert len(cols) == len(set(cols)) == 4 * (len(tails.LEVELS) + 1)
    assert cols[:6] == ["ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p95", "ttft_ms_p99",
                        "ttft_ms_p99_9", "ttft_ms_n"]
    assert tails.all_columns((tails.TTFT,)) == cols[:6]


def test_a_rate_is_ranked_on_its_slow_side() -> None:
    """1 … 100: a latency's p99 is 99.01, a rate's p99 its 1st percentile, 1.99."""
    x = np.arange(1.0, 101.0)
    assert tails.percentile(x, tails.TTFT, "p99") == pytest.approx(99.01)
    assert tails.percentile(x, tails.PER_REQUEST, "p99") == pytest.approx(1.99)
    assert tails.percentile(x, tails.PER_REQUEST, "p90") == pytest.approx(10.9)
    assert tails.percentile(x, tails.PER_REQUEST, "p50") == pytest.approx(50.5)
    cols = tails.tail_columns(x, tails.PER_REQUEST)
    assert cols["per_request_tok_s_p1"] == pytest.approx(1.99)
    assert cols["per_request_tok_s_p5"] == pytest.approx(5.95)


def test_every_level_is_numpys_linear_rank() -> None:
    rng = np.random.default_rng(20)
    x = rng.lognormal(3.0, 1.0, 1500)
    written_out = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}
    for metric in (*LATENCIES, tails.PER_REQUEST):
        cols = tails.tail_columns(x, metric)
        for level, q in written_out.items():
            rank = 100.0 - q if metric.higher_is_better else q
            want = float(np.percentile(x, rank))  # linear interpolation, numpy's default
            assert cols[metric.column(level)] == pytest.approx(want, rel=1e-12)
            assert tails.percentile(x, metric, level) == pytest.approx(want, rel=1e-12)
    assert tails.percentile(x, tails.TTFT, "p50") == pytest.approx(float(np.median(x)))


def test_nan_samples_are_ignored() -> None:
    """A request without the figure (NaN in RequestFigures) is no sample: it
    neither counts towards the sample rule nor moves a rank."""
    x = np.array([np.nan, 3.0, 1.0, np.nan, 2.0, np.inf])
    cols = tails.tail_columns(x, tails.TTFT)
    assert cols["ttft_ms_n"] == 3 and cols["ttft_ms_p50"] == 2.0
    assert tails.percentile(x, tails.TTFT, "p50") == 2.0
    nine = np.concatenate((np.arange(9.0), np.full(5, np.nan)))
    assert tails.tail_columns(nine, tails.TTFT)["ttft_ms_p90"] is None
    assert tails.percentile(nine, tails.TTFT, "p90") is None
    ten = np.concatenate((np.arange(10.0), [np.nan]))
    assert tails.percentile(ten, tails.TTFT, "p90") == pytest.approx(8.1)


def synthetic_cell() -> tuple[metrics.Chunks, np.ndarray]:
    """25 streams of 1-, 2- and 3-token chunks, paced 4 … 28 ms, each sent 1 ms
    apart and first answered after 5 … 77 ms; every 4th is cancelled, and some
    end after the window (100 … 900 ms), so the sample sets differ per figure."""
    rows, done = [], []
    for i in range(25):
        send = i * MS
        first = send + (5 + 3 * i) * MS
        gap = (4 + i % 7 * 4) * MS
        sizes = [1 + (i + k) % 3 for k in range(12)]
        stamps = [first - MS] + [first + k * gap for k in range(len(sizes))]
        cum = [0] + np.cumsum(sizes).tolist()
        cancelled = i % 4 == 3
        rows.append(dict(send_ns=send, end_ns=stamps[-1] + MS, chunk_ns=stamps,
                         chunk_tokens=cum, cancelled=cancelled,
                         finish_reason=None if cancelled else "length"))
        done.append(not cancelled)
    return metrics.Chunks.from_table(table(rows)), np.array(done)


def test_p50_is_the_published_median() -> None:
    chunks, done = synthetic_cell()
    start, end = 100 * MS, 300 * MS
    m = metrics.decode_metrics(chunks, start, end, done)
    figures = tails.request_figures(chunks, start, end, done)
    cols = tails.decode_tails(figures)
    assert cols["ttft_ms_p50"] == pytest.approx(m.ttft_ms, rel=1e-12)
    assert cols["tbt_ms_p50"] == pytest.approx(m.tbt_ms, rel=1e-12)
    assert cols["per_request_tok_s_p50"] == pytest.approx(m.per_request_tok_s, rel=1e-12)
    assert cols["ttft_ms_n"] == 25  # every request produced a token
    rated = metrics.stream_rates(chunks, start, end)
    assert 0 < cols["tbt_ms_n"] == len(rated.rows) < 25  # only those timed in the window
    assert cols["e2e_ms_n"] == m.completed > 0
    ended = (chunks.end_ns >= start) & (chunks.end_ns <= end) & done
    assert cols["e2e_ms_p50"] == pytest.approx(
        float(np.median((chunks.end_ns - chunks.send_ns)[ended] / 1e6)))
    # the tails are ranks of the same per-request samples, on the slow side
    assert cols["tbt_ms_p90"] >= cols["tbt_ms_p50"]
    assert cols["per_request_tok_s_p10"] <= cols["per_request_tok_s_p50"]
