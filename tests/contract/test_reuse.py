"""The reuse verdict (rundir/reuse.py): two measures, one target, one tolerance."""

from __future__ import annotations

import pytest

from rundir.reuse import Turn, judge_reuse, requests_ratio, tolerance, turn_problems


def test_the_requests_ratio_sums_tokens_not_ratios() -> None:
    # 9,000 of 10,000 and 0 of 1,000: 81.8%, not the 45% a mean of ratios gives
    assert requests_ratio([10_000, 1_000], [9_000, 0]) == pytest.approx(100 * 9_000 / 11_000)
    assert requests_ratio([10_000, 500], [9_000, None]) == pytest.approx(90.0)
    assert requests_ratio([10_000], [None]) is None
    assert requests_ratio([], []) is None


def test_the_tolerance_is_two_points_or_one_block() -> None:
    assert tolerance(16, 8192) == 2.0
    assert tolerance(256, 4096) == pytest.approx(6.25)
    assert tolerance(None, 4096) == tolerance(16, None) == 2.0


def test_a_cell_on_target_and_agreeing_says_nothing() -> None:
    v = judge_reuse(90, 89.2, 89.9, 2.0)
    assert not v.off and not v.unverifiable and v.reason is None


@pytest.mark.parametrize("achieved, server, why", [
    (12.4, 12.4, "reuse off target"),  # the cache silently did nothing much
    (89.0, 60.0, "reuse off target"),  # the counters say otherwise and miss the target
    (91.5, 88.4, "reuse measures disagree"),  # both within 2 of 90, 3.1 apart
    (None, 80.0, "reuse off target"),  # checked once, and off
])
def test_off_target_or_disagreeing_measures_flag_the_cell(achieved, server, why) -> None:
    v = judge_reuse(90, achieved, server, 2.0)
    assert v.off and not v.unverifiable
    assert v.reason.startswith(why + ": asked 90.0%")


def test_the_reason_names_the_three_numbers() -> None:
    v = judge_reuse(90, 12.4, 12.5, 2.0)
    assert v.reason == ("reuse off target: asked 90.0%, requests report 12.4% cached, "
                        "server counters 12.5% (tolerance 2.0 points)")


def test_nothing_reported_is_not_verifiable_never_a_pass() -> None:
    v = judge_reuse(90, None, None, 2.0)
    assert v.unverifiable and not v.off and "not verifiable" in v.reason


def test_one_measure_only_is_said() -> None:
    assert judge_reuse(90, 90.1, None, 2.0).reason.startswith("reuse checked once: no engine counters")
    assert judge_reuse(90, None, 90.1, 2.0, "llama.cpp timings").reason == (
        "reuse checked once: the requests report no cached tokens, llama.cpp timings 90.1%")


def test_a_conversation_has_no_target_but_its_measures_must_agree() -> None:
    assert judge_reuse(None, 95.0, 95.5, 2.0).reason is None
    assert judge_reuse(None, 95.0, 40.0, 2.0).off


def test_each_turn_must_reuse_the_turn_before() -> None:
    turns = [Turn(0, 1, 1_000, 0), Turn(0, 2, 2_000, 990), Turn(0, 3, 3_000, 1_200),
             Turn(1, 1, 1_000, 0), Turn(1, 3, 3_000, 0)]  # conversation 1 lacks turn 2: not judged
    assert turn_problems(turns, 16) == [
        "conversation 0 turn 3: 1,200 cached tokens, expected at least 1,984 "
        "(turn 2's 2,000 less one block of 16)"]
    assert turn_problems([Turn(0, 1, 1_000, 0), Turn(0, 2, 2_000, None)], 16) == []


def test_the_contract_keys_traffic_cells_and_keeps_their_statuses_to_them() -> None:
    import pyarrow as pa

    from rundir.contract import CELLS_FILE, CELLS_SCHEMA, ContractError, check_table

    def cells(*rows: dict) -> pa.Table:
        base = {n: None for n in CELLS_SCHEMA.names}
        return pa.Table.from_pylist([{**base, **r} for r in rows], schema=CELLS_SCHEMA)

    ok = cells({"phase": "decode", "context": 1024, "concurrency": 1, "status": "valid"},
               {"phase": "prefix", "context": 1024, "concurrency": 1, "status": "valid",
                "prefix_reuse_target": 0},
               {"phase": "prefix", "context": 1024, "concurrency": 1, "status": "reuse_off_target",
                "prefix_reuse_target": 90},
               {"phase": "conversation", "context": 1024, "concurrency": 1, "status": "valid",
                "turn": 8})
    assert len(check_table(CELLS_FILE, ok)) == 4
    for rows, says in [
        ([{"phase": "prefix", "context": 1024, "concurrency": 1, "status": "valid",
           "prefix_reuse_target": 101}],
         "column prefix_reuse_target: expected a target reuse from 0 to 100 (percent), got 101"),
        ([{"phase": "conversation", "context": 1024, "concurrency": 1, "status": "valid"}],
         "column turn: expected a turn from 1, got None"),
        ([{"phase": "decode", "context": 1024, "concurrency": 1, "status": "valid", "turn": 2}],
         "column turn: expected none on a decode cell, got 2"),
        ([{"phase": "decode", "context": 1024, "concurrency": 1, "status": "reuse_off_target"}],
         "column status: 'reuse_off_target' is for prefix, conversation and rate cells only"),
        ([{"phase": "prefix", "context": 1024, "concurrency": 1, "status": "valid",
           "prefix_reuse_target": 90}] * 2,
         "columns phase, context, concurrency, prefix_reuse_target: cell (prefix, 1024, 1, "
         "prefix_reuse_target 90) appears more than once"),
    ]:
        with pytest.raises(ContractError) as err:
            check_table(CELLS_FILE, cells(*rows))
        assert str(err.value).startswith(f"{CELLS_FILE}: {says}"), str(err.value)
