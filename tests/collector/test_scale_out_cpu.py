"""The arithmetic of benchmarks/scale_out_cpu.py: where its processes are
pinned, a process's CPU at a window edge, and the projection to more cores.
Pure functions only; the measurement itself is a benchmark, not a test."""

from __future__ import annotations

import math

import pytest

from benchmarks.scale_out_cpu import (
    cpu_at,
    fit_cost,
    fit_line,
    per_million,
    place,
    project,
    shard_index,
)


def test_the_projection_is_the_lower_of_the_shards_and_the_parent_s_bound() -> None:
    p = project(16, (0.2, 0.0), 16.0)
    assert p.workers == 15
    assert p.worker_bound == pytest.approx(15 * 1e6 / 16.0)  # 937,500
    assert p.parent_bound == pytest.approx(5_000_000)
    assert p.events_per_s == pytest.approx(937_500) and p.limit == "workers"
    with_stub = project(16, (0.2, 0.0), 16.0, stub_per_m=10.0)  # the stub shares the shards' cores
    assert with_stub.events_per_s == pytest.approx(15e6 / 26.0)
    # a parent whose cost grows with the shards: 1 + 0.1 × 63 s a million at 64 cores
    grown = project(64, (1.0, 0.1), 16.0)
    assert grown.parent_bound == pytest.approx(1e6 / 7.3)
    assert grown.limit == "parent" and grown.events_per_s == pytest.approx(1e6 / 7.3)
    assert project(8, (0.0, 0.0), 10.0).parent_bound == math.inf


def test_the_projection_refuses_what_it_cannot_mean() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        project(1, (0.1, 0.0), 16.0)
    with pytest.raises(ValueError, match="positive"):
        project(16, (0.1, 0.0), 0.0)


def test_fit_line_is_least_squares_with_the_slope_never_below_zero() -> None:
    assert fit_line([1, 2, 4], [2, 3, 5]) == pytest.approx((1.0, 1.0))
    a, b = fit_line([2, 4], [0.3, 0.1])  # cheaper with more shards: not extrapolated
    assert b == 0.0 and a == pytest.approx(0.2)
    assert fit_line([2, 2], [0.1, 0.3]) == pytest.approx((0.2, 0.0))
    with pytest.raises(ValueError):
        fit_line([], [])


def test_fit_cost_splits_a_reader_s_cpu_into_reads_and_events() -> None:
    # 20 µs a read + 1 µs an event, windows whose reads bring 1, 3 and 10 events each
    reads = [100_000, 40_000, 8_000]
    events = [100_000, 120_000, 80_000]
    cpu = [r * 20e-6 + e * 1e-6 for r, e in zip(reads, events, strict=True)]
    a, b = fit_cost(reads, events, cpu)
    assert a == pytest.approx(20e-6) and b == pytest.approx(1e-6)
    with pytest.raises(ValueError, match="different events a read"):
        fit_cost([10, 20], [20, 40], [1.0, 2.0])  # 2 events a read in both: a and b unknowable
    with pytest.raises(ValueError):
        fit_cost([10], [20], [1.0])
    with pytest.raises(ValueError, match="vary too little"):  # noise would make a read cost < 0
        fit_cost([100, 90], [200, 190], [1.0, 1.1])


def test_cpu_at_interpolates_between_samples() -> None:
    s = [(1_000, 1.0), (2_000, 3.0), (4_000, 4.0)]
    assert cpu_at(s, 1_500) == pytest.approx(2.0)
    assert cpu_at(s, 3_000) == pytest.approx(3.5)
    assert cpu_at(s, 500) == 0.0  # not born yet
    assert cpu_at(s, 9_000) == 4.0  # gone: its last reading
    assert cpu_at([], 1) == 0.0
    assert per_million(0.5, 250_000) == pytest.approx(2.0) and per_million(1.0, 0) is None


def test_placement_gives_own_cores_only_where_there_are_enough() -> None:
    two = place([0, 1], 1, 2)  # this host: the stub on 0, the collector's three processes share 1
    assert two.stub == (0,) and two.parent == (1,) and two.shards == ((1,), (1,)) and not two.own
    one = place([0, 1], 1, 1)  # workers 1: the parent reads, on a core of its own
    assert one.parent == (1,) and one.shards == () and one.own
    big = place(range(16), 2, 4)
    assert big.stub == (0, 1) and big.parent == (2,) and big.own
    assert big.shards == ((3,), (4,), (5,), (6,))
    assert place([0, 1, 2], 5, 1).stub == (0, 1)  # a core always stays for the collector
    assert not place([0], 1, 2).own


def test_request_ids_name_their_shard() -> None:
    assert shard_index("r7-abc-w3-12") == 3
    assert shard_index("r7-abc-w12g2-0") == 12  # a replaced shard's second process
    assert shard_index("r7-abc-12") is None
