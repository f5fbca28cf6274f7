"""Rate cells' arrival schedules and the check that the client delivered them (rundir/arrivals.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rundir import arrivals
from rundir.arrivals import Process, cell_seed, check_load, gamma_p, parse_process, schedule

POISSON = Process("poisson")
CONSTANT = Process("constant")
KEY = ("rate", 1024, 0, None, None, 2.0)


# ---- processes and seeds -------------------------------------------------------------------------

@pytest.mark.parametrize("text, name, shape, back", [
    ("poisson", "poisson", None, "poisson"), ("constant", "constant", None, "constant"),
    ("gamma:4", "gamma", 4.0, "gamma:4"), ("gamma:0.5", "gamma", 0.5, "gamma:0.5"),
    (" Gamma:2.5 ", "gamma", 2.5, "gamma:2.5"), ("gamma:1.2345678", "gamma", 1.2345678, "gamma:1.2345678"),
    ("gamma:4.0", "gamma", 4.0, "gamma:4"), ("gamma:1e-3", "gamma", 0.001, "gamma:0.001")])
def test_parse_process_round_trips(text: str, name: str, shape: float | None, back: str) -> None:
    p = parse_process(text)
    assert (p.name, p.shape, str(p)) == (name, shape, back)
    assert parse_process(str(p)) == p


@pytest.mark.parametrize("text", ["", "x", "gamma", "gamma:", "gamma:0", "gamma:-1", "gamma:nan",
                                  "gamma:inf", "poisson:2", "constant:1", "gamma:abc"])
def test_parse_process_rejects_with_one_line(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_process(text)
    msg = str(err.value)
    assert msg == f"--arrivals: expected poisson, constant or gamma:K with K > 0, got {text!r}"


def test_cell_seed_is_stable_63_bit_and_differs_per_cell() -> None:
    s = cell_seed(7, KEY)
    assert s == cell_seed(7, KEY) and 0 <= s < 2 ** 63
    # numbers by value: the builder may read 2 where the collector had 2.0, or numpy scalars
    assert s == cell_seed(7, ("rate", np.int64(1024), 0, None, None, np.float64(2)))
    others = {cell_seed(7, ("rate", 1024, 0, None, None, r)) for r in (0.5, 1.0, 2.0, 4.0, 8.0)}
    others |= {cell_seed(8, KEY), cell_seed(7, ("rate", 2048, 0, None, None, 2.0)),
               cell_seed(7, ("rate", 1024, 4, None, None, 2.0)),
               cell_seed(7, ("rate", 1024, 0, 50, None, 2.0))}
    assert len(others) == 9
    # a fixed value: a change of the hashing would silently change every recorded schedule
    assert cell_seed(0, ("rate", 1, 0, None, None, 1.0)) == 1847299748982761452
    assert cell_seed(0, ("rate", 1, 0, None, None, 1)) == 1847299748982761452
    with pytest.raises(ValueError, match="cell_seed"):
        cell_seed(1, ("rate", object()))


def test_seed_from_text_is_stable() -> None:
    one = arrivals.seed_from_text("run-1")
    assert one == arrivals.seed_from_text("run-1") != arrivals.seed_from_text("run-2")
    assert 0 <= arrivals.seed_from_text("run-1") < 2 ** 63


# ---- schedules -----------------------------------------------------------------------------------

@pytest.mark.parametrize("process", [POISSON, Process("gamma", 4.0), Process("gamma", 0.5)])
def test_schedule_reproducible_and_per_seed(process: Process) -> None:
    a = schedule(process, 5.0, 30.0, 11)
    assert a.dtype == np.int64 and np.array_equal(a, schedule(process, 5.0, 30.0, 11))
    assert np.all(np.diff(a) >= 0) and a[0] >= 0 and a[-1] < 30e9
    b = schedule(process, 5.0, 30.0, 12)
    assert not np.array_equal(a[:20], b[:20])


def test_schedule_covers_the_window_even_past_the_first_draw() -> None:
    # a tiny expected count: the generator must keep drawing until the window is full
    s = schedule(POISSON, 0.2, 1000.0, 3)
    assert s[-1] > 900e9 and s[-1] < 1000e9


def test_constant_schedule_is_half_a_gap_in() -> None:
    s = schedule(CONSTANT, 4.0, 2.0, 99)
    assert s.tolist() == [125_000_000 + 250_000_000 * i for i in range(8)]
    assert schedule(CONSTANT, 4.0, 2.1, 0).size == 8  # 2.125 s is past the window
    assert schedule(CONSTANT, 4.0, 2.13, 0).size == 9


@pytest.mark.parametrize("rate, duration", [(0, 1), (-1, 1), (math.nan, 1), (1, 0), (1, math.inf)])
def test_schedule_rejects_bad_rate_or_window(rate: float, duration: float) -> None:
    with pytest.raises(ValueError):
        schedule(POISSON, rate, duration, 1)


@pytest.mark.parametrize("process, cv", [(POISSON, 1.0), (Process("gamma", 4.0), 0.5),
                                         (Process("gamma", 0.25), 2.0)])
def test_schedule_statistics(process: Process, cv: float) -> None:
    rate, duration = 100.0, 2000.0  # ~200,000 arrivals
    s = schedule(process, rate, duration, 5)
    n = s.size
    band = 4 * math.sqrt(rate * duration) * cv  # count's sd ~ sqrt(N) × CV for a renewal process
    assert abs(n - rate * duration) < band
    gaps = np.diff(s) / 1e9
    assert abs(gaps.mean() - 1 / rate) < 4 * cv / rate / math.sqrt(n)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)


# ---- the incomplete gamma and KS -----------------------------------------------------------------

def _p_integer(k: int, x: float) -> float:
    """P(k, x) for integer k: 1 - e^-x Σ_{j<k} x^j/j! (the Erlang CDF)."""
    return 1 - math.exp(-x) * sum(x ** j / math.factorial(j) for j in range(k))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10, 30])
def test_gamma_p_integer_shape_closed_form(k: int) -> None:
    xs = np.array([1e-3, 0.1, 0.5, 1, 2, 5, k - 0.5, k, k + 0.5, k + 1, 2 * k, 3 * k + 10, 80])
    got = gamma_p(float(k), xs)
    want = np.array([_p_integer(k, float(x)) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_gamma_p_half_integer_and_edges() -> None:
    xs = np.array([0.01, 0.3, 1.0, 1.5, 4.0, 20.0])
    np.testing.assert_allclose(gamma_p(0.5, xs), [math.erf(math.sqrt(x)) for x in xs], rtol=1e-12)
    # P(1.5, x) = erf(sqrt x) - 2 sqrt(x/π) e^-x
    want = [math.erf(math.sqrt(x)) - 2 * math.sqrt(x / math.pi) * math.exp(-x) for x in xs]
    np.testing.assert_allclose(gamma_p(1.5, xs), want, rtol=1e-10)
    assert gamma_p(3.0, np.array([0.0, -1.0])).tolist() == [0.0, 0.0]
    assert float(gamma_p(2.0, 1e4)) == 1.0
    assert float(gamma_p(100.0, 100.0)) == pytest.approx(0.5132987982791486, rel=1e-10)
    with pytest.raises(ValueError):
        gamma_p(0.0, 1.0)


def test_kolmogorov_q_known_values_and_continuity() -> None:
    # Kolmogorov's critical values: P(K > 1.3581) = 0.05, P(K > 1.6276) = 0.01, P(K > 1.9495) = 0.001
    assert arrivals.kolmogorov_q(1.3581) == pytest.approx(0.05, abs=2e-5)
    assert arrivals.kolmogorov_q(1.6276) == pytest.approx(0.01, abs=2e-5)
    assert arrivals.kolmogorov_q(1.9495) == pytest.approx(0.001, abs=2e-6)
    # the theta-function form (below 1.18) and the alternating series (above) agree where they meet
    alternating = 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * 1.18 ** 2) for j in range(1, 100))
    assert arrivals.kolmogorov_q(1.18) == pytest.approx(alternating, abs=1e-12)
    assert arrivals.kolmogorov_q(1.1799999) == pytest.approx(alternating, abs=1e-6)
    assert arrivals.kolmogorov_q(0.0) == 1.0 and arrivals.kolmogorov_q(0.2) == pytest.approx(1.0)


# ---- check_load ----------------------------------------------------------------------------------

START = 10_000_000_000


def _cell(process: Process, rate: float, window: float, seed: int) -> np.ndarray:
    return START + schedule(process, rate, window, seed)


def test_a_correct_schedule_passes_and_figures() -> None:
    sched = _cell(POISSON, 50.0, 20.0, 1)
    send = sched + 300_000  # 0.3 ms late, every one
    c = check_load(POISSON, 50.0, 20.0, sched, send, START)
    assert c.delivered and c.reason is None and c.problems == []
    assert c.scheduled == c.sent == sched.size and c.gaps == sched.size - 1
    assert c.schedule_rate == c.achieved_rate == sched.size / 20.0
    assert c.rate_uncertainty == pytest.approx(math.sqrt(sched.size) / 20.0)
    assert c.lag_p50_ms == pytest.approx(0.3) and c.lag_p99_ms == pytest.approx(0.3)
    assert c.gap_p_value is not None and c.gap_p_value > 0.001 and c.gap_statistic is not None


def test_rate_uncertainty_per_process() -> None:
    assert arrivals.rate_uncertainty(Process("gamma", 4.0), 400, 10.0) == pytest.approx(1.0)
    assert arrivals.rate_uncertainty(POISSON, 400, 10.0) == pytest.approx(2.0)
    assert arrivals.rate_uncertainty(CONSTANT, 400, 10.0) == 0.0


@pytest.mark.parametrize("process", [POISSON, Process("gamma", 4.0)])
def test_false_alarm_rate_over_many_seeds(process: Process) -> None:
    """A correct schedule, sent on time, is rejected about 0.001 of the time: at most 5 in 1000."""
    rejected = 0
    for seed in range(1000):
        sched = _cell(process, 20.0, 10.0, seed)  # ~200 gaps
        if not check_load(process, 20.0, 10.0, sched, sched, START).delivered:
            rejected += 1
    assert rejected <= 5


def test_constant_sent_as_poisson_fails() -> None:
    sched = _cell(CONSTANT, 10.0, 3.0, 0)  # 30 requests, 29 gaps
    c = check_load(POISSON, 10.0, 3.0, sched, sched, START)
    assert not c.delivered and c.gaps == 29
    assert c.gap_statistic == pytest.approx(1 - math.exp(-1), abs=1e-6)  # every gap at F(1/rate)
    assert len(c.problems) == 1 and c.problems[0].startswith(
        "The gaps between sends are unlike a poisson process at 10 req/s: "
        "Kolmogorov-Smirnov D = 0.632 over 29 gaps")


def test_a_20_percent_slow_schedule_fails_with_enough_gaps() -> None:
    """Poisson sent at 0.8 × the target: found with ~1,600 gaps (methodology's power table)."""
    sched = _cell(POISSON, 800.0, 2.0, 4)  # ~1,600 gaps at 800/s, judged against 1000/s
    c = check_load(POISSON, 1000.0, 2.0, sched, sched, START)
    assert c.gap_p_value is not None and c.gap_p_value < 1e-3
    assert any("Kolmogorov-Smirnov" in p for p in c.problems)


def test_send_jitter_within_the_lag_limit_is_not_a_wrong_process() -> None:
    """At 1,000 req/s, sends up to 0.2 ms late at random: the plain KS over ~10,000 gaps
    rejects them; the test, blind to shifts within the lags' spread, does not."""
    sched = _cell(POISSON, 1000.0, 10.0, 6)
    send = sched + np.random.default_rng(6).integers(0, 200_000, sched.size)
    gaps = np.diff(send) / 1e9
    plain = arrivals.ks_statistic(POISSON, 1000.0, gaps)
    assert arrivals.ks_p_value(plain, gaps.size) < 1e-3
    c = check_load(POISSON, 1000.0, 10.0, sched, send, START)
    assert c.delivered, c.reason
    assert 0.19 < c.gap_slack_ms < 0.2 and c.gap_statistic is not None and c.gap_statistic < plain
    # a constant process sent as Poisson with the same jitter is still caught
    const = _cell(CONSTANT, 1000.0, 10.0, 0)
    c = check_load(POISSON, 1000.0, 10.0, const, const + (send - sched)[:const.size], START)
    assert not c.delivered and "to within 0.2 ms" in c.problems[0]


@pytest.mark.parametrize("seed", range(5))
def test_bursty_gamma_sent_exactly_passes_despite_whole_ns(seed: int) -> None:
    """gamma:0.1 at 1,000 req/s: many gaps are under 1 ns and the clock makes them 0;
    the test's least slack, the clock's 1 ns, keeps that from failing a perfect sender."""
    process = Process("gamma", 0.1)
    sched = _cell(process, 1000.0, 5.0, seed)
    c = check_load(process, 1000.0, 5.0, sched, sched, START)
    assert c.delivered, c.reason
    assert c.gap_slack_ms == 1e-6


def test_ks_slack_is_capped_at_the_lag_limit_and_validated() -> None:
    sched = _cell(POISSON, 10.0, 100.0, 8)
    send = sched.copy()
    send[::50] += 3_000_000  # 2% of sends 3 ms late: over the 1 ms limit, the slack stops there
    c = check_load(POISSON, 10.0, 100.0, sched, send, START)
    assert c.gap_slack_ms == 1.0 and c.lag_p99_ms == pytest.approx(3.0)
    with pytest.raises(ValueError, match="slack"):
        arrivals.ks_statistic(POISSON, 1.0, np.ones(3), -1.0)
    with pytest.raises(ValueError, match="no observations"):
        arrivals.ks_statistic(POISSON, 1.0, np.zeros(0))


def test_poisson_sent_as_constant_fails() -> None:
    sched = _cell(POISSON, 10.0, 3.0, 2)
    c = check_load(CONSTANT, 10.0, 3.0, sched, sched, START)
    assert not c.delivered and c.gap_p_value is None
    assert "gaps between sends were more than 1 ms from the constant 100 ms" in c.problems[0]


def test_constant_gap_tolerance_exact() -> None:
    sched = _cell(CONSTANT, 1.0, 30.0, 0)  # mean gap 1 s: gaps may be 10 ms off, p99 lag 10 ms
    send = sched.copy()
    send[5] += 10_000_000  # gaps 4→5 and 5→6 are 1010 and 990 ms: at the tolerance, not over
    c = check_load(CONSTANT, 1.0, 30.0, sched, send, START)
    assert c.delivered and c.gap_statistic == 10.0 and c.lag_p99_ms == pytest.approx(7.1)
    send[5] += 1_000_000
    c = check_load(CONSTANT, 1.0, 30.0, sched, send, START)
    assert c.problems == ["2 of 29 gaps between sends were more than 10 ms from the constant 1,000 ms "
                          "(the worst by 11 ms)."]


def test_late_sends_are_a_problem_with_figures() -> None:
    sched = _cell(POISSON, 50.0, 20.0, 1)
    send = sched.copy()
    n = sched.size
    late = np.arange(n) % 10 == 0  # every tenth request 5 ms late
    send[late] += 5_000_000
    c = check_load(POISSON, 50.0, 20.0, sched, send, START)
    assert c.lag_p50_ms == 0.0 and c.lag_p99_ms == pytest.approx(5.0)
    assert c.problems[0] == ("Send lag p99 was 5 ms, over the 1 ms allowed "
                             "(max of 1 ms and 1% of the mean gap 20 ms).")
    # at 0.5 req/s the mean gap is 2 s: 20 ms of lag is allowed
    assert arrivals.lag_limit_ms(0.5) == pytest.approx(20.0)


def test_undelivered_requests_are_a_problem_with_figures() -> None:
    sched = START + np.arange(200, dtype=np.int64) * 50_000_000  # 200 in a 10 s window
    send = sched.copy()
    send[:3] = -1  # three never sent
    c = check_load(CONSTANT, 20.0, 10.0, sched, send, START)
    assert (c.scheduled, c.sent) == (200, 197)
    assert c.problems == ["Sent 197 of the 200 requests scheduled in the 10 s window (98.5%, needs 99%)."]
    send[:3] = sched[:3]
    send[0] = -1
    assert check_load(CONSTANT, 20.0, 10.0, sched, send, START).problems == []  # 199 of 200 = 99.5%


def test_only_requests_scheduled_in_the_window_count_and_drain_sends_count() -> None:
    sched = START + np.arange(100, dtype=np.int64) * 100_000_000  # 10 s at 10/s
    extra = np.array([START - 1, START + 10_000_000_000], dtype=np.int64)  # before and at the window's end
    send = np.concatenate([sched, extra])
    c = check_load(CONSTANT, 10.0, 10.0, np.concatenate([sched, extra]), send, START)
    assert (c.scheduled, c.sent) == (100, 100)
    # float send times with NaN for the unsent work too
    fsend = send.astype(np.float64)
    fsend[0] = np.nan
    c = check_load(CONSTANT, 10.0, 10.0, np.concatenate([sched, extra]), fsend, START)
    assert c.sent == 99


def test_too_few_gaps_is_not_tested_and_said() -> None:
    sched = _cell(POISSON, 2.0, 5.0, 3)
    assert sched.size < 21
    c = check_load(POISSON, 2.0, 5.0, sched, sched, START)
    assert c.delivered and c.gap_p_value is None and c.gap_statistic is None
    assert c.reason == f"Gap test not run: {sched.size - 1} gaps between sends, needs 20."


def test_nothing_scheduled_and_bad_arrays() -> None:
    empty = np.array([], dtype=np.int64)
    c = check_load(POISSON, 0.01, 1.0, empty, empty, START)
    assert c.scheduled == 0 and c.lag_p99_ms is None and c.delivered
    assert c.reason is not None and c.reason.startswith("The schedule put no request in the 1 s window.")
    with pytest.raises(ValueError, match="one length"):
        check_load(POISSON, 1.0, 1.0, np.zeros(3, dtype=np.int64), np.zeros(2, dtype=np.int64), 0)


def test_a_stored_cell_counts_the_requests_it_never_sent() -> None:
    """A request due while the cap was full when the window ended has no row: the
    schedule made again from the recorded seed still counts it as offered."""
    from rundir.arrivals import Process, cell_seed, schedule, stored_load

    process, key, seed, start = Process("poisson"), ("rate", 1024, 2, None, None, 20.0), 7, 1_000
    scheduled = start + schedule(process, 20.0, 3.0, cell_seed(seed, key))
    stored = scheduled[: len(scheduled) // 2].tolist()  # the rows: the first half, sent on time
    check = stored_load(process, 20.0, key, start, start + 3_000_000_000, seed, stored, stored)
    assert (check.scheduled, check.sent) == (len(scheduled), len(stored))
    assert not check.delivered and check.problems[0].startswith(f"Sent {len(stored)} of the ")
    # the same key with its numbers as another type makes the same schedule (a row's float)
    again = stored_load(process, 20, ("rate", 1024, 2, None, None, 20), start,
                        start + 3_000_000_000, seed, stored, stored)
    assert again.scheduled == check.scheduled
