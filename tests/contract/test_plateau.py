"""rundir/plateau.py on hand-made schedules (stamps in ms for reading; any unit works)."""

from __future__ import annotations

import pytest

from rundir.plateau import closed_loop, in_flight_steps, open_loop, plateau


def test_in_flight_counts_an_end_before_a_send_at_the_same_stamp() -> None:
    # request 0 ends at 10 exactly when request 1 is sent: the count stays 1, never 2
    assert in_flight_steps([0, 10], [10, 20]) == [(0, 1), (10, 1), (20, 0)]


def test_closed_loop_ramp_up_and_ramp_down() -> None:
    # C = 2; the tool starts its streams at 0 and 5; each slot restarts at once on an end;
    # the last sends are at 40 and 45; those end at 50 and 55 (the ramp-down)
    sends = [0, 5, 20, 25, 40, 45]
    ends = [20, 25, 40, 45, 50, 55]
    p = closed_loop(sends, ends, 2)
    assert (p.start_ns, p.end_ns) == (5, 50)  # the 2nd send; the first end after the last send
    assert p.held_share == 1.0 and p.peak == 2 and p.reason is None


def test_closed_loop_dip_mid_run_stays_inside_and_is_measured() -> None:
    # slot 0 refills 10 late (ends at 20, next send at 30): the count is 1 over [20, 30)
    sends = [0, 0, 30, 40]
    ends = [20, 40, 60, 60]
    p = closed_loop(sends, ends, 2)
    assert (p.start_ns, p.end_ns) == (0, 60)
    assert p.held_share == pytest.approx(50 / 60)  # [0,20) and [30,60) at 2


def test_closed_loop_never_reaching_its_concurrency_has_no_window() -> None:
    p = closed_loop([0, 10, 20], [15, 25, 35], 4)
    assert not p.found and p.start_ns is None and p.end_ns is None
    assert p.peak == 2 and "peaked at 2" in p.reason and "concurrency 4" in p.reason


def test_closed_loop_request_without_end_ends_at_its_send() -> None:
    p = closed_loop([0, 0, 5], [30, None, 30], 2)
    assert (p.start_ns, p.end_ns) == (5, 30)


def test_open_loop_first_end_to_last_send() -> None:
    sends = [0, 10, 20, 30, 40]
    ends = [25, 35, 45, 55, 65]
    p = open_loop(sends, ends)
    assert (p.start_ns, p.end_ns, p.target) == (25, 40, None)
    assert p.peak == 3  # [20, 25): 0, 1, 2 in flight, before the first end


def test_open_loop_all_ramp_and_drain_has_no_window() -> None:
    p = open_loop([0, 10], [50, 60])
    assert not p.found and "no steady span" in p.reason


def test_plateau_picks_by_load() -> None:
    sends, ends = [0, 0, 10, 10], [10, 10, 20, 20]
    assert plateau(sends, ends, concurrency=2).target == 2
    assert plateau(sends, ends, concurrency=2, rate=1.0).target is None  # a rate with a cap
    with pytest.raises(ValueError):
        closed_loop(sends, ends, 0)
