"""Prefix reuse against the reference server's block cache: every published
reuse figure equals the server's own log, and every way reuse can silently
fail ends in its status, never Valid (issue 33, item 6).

The reference server (tests/refserver/prefix_cache.py) keeps whole blocks of
token prefixes, evicts the least recently used past its capacity, and logs
per request the tokens it really reused; its broken modes claim a cache that
does nothing, counters that disagree with the answers, or nothing at all.
Runs go through `bench run`; the published figures are the builder's
(site_builder/traffic.py, what the run page and cells.json show).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure.traffic_cells import MIN_REQUESTS
from rundir import contract
from rundir.io import read_run
from site_builder.traffic import traffic_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "1", "--warmup-stable", "0.2", "--server-wait", "3", "--concurrency", "1",
        "--max-output", "16"]
BLOCK = 16
CACHE = dict(tokens_per_s=400, ttft_ms=2, prefill_tok_per_s=200_000, prefix_cache_block=BLOCK)


def collect(srv, out: Path, *extra: str, code: int = 0):
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST, *extra)
    assert res.returncode == code, res.stderr[-3000:]
    return read_run(out)


def published(run) -> dict[tuple, object]:
    """The builder's figures per traffic cell, keyed (phase, context, concurrency, target, turn)."""
    return {(c.phase, c.context, c.concurrency, c.target, c.turn): c
            for c in traffic_cells(run.cells, run.requests)}


def truth_ratio(srv, rows: list[dict]) -> float:
    """Σ tokens the server really reused ÷ Σ prompt tokens, from its own log."""
    truth = srv.truth_by_id()
    logged = [truth[r["request_id"]] for r in rows]
    return 100 * sum(t["cached_tokens"] for t in logged) / sum(t["prompt_tokens"] for t in logged)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_every_published_reuse_is_the_servers(refserver, tmp_path, engine) -> None:
    srv = refserver(engine=engine, **CACHE)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--prefix-reuse", "0,50,90")
    figures = published(run)
    for target in (0, 50, 90):
        cell = figures[(contract.PREFIX, 2048, 1, target, None)]
        rows = [r for r in run.requests.to_pylist() if r["phase"] == contract.PREFIX
                and r["prefix_reuse_target"] == target and r["purpose"] == contract.PURPOSE_REUSE]
        assert len(rows) >= MIN_REQUESTS
        assert cell.achieved == pytest.approx(truth_ratio(srv, rows), abs=1e-9)
        assert cell.achieved == pytest.approx(target, abs=2), (target, cell.achieved)
        assert cell.server == pytest.approx(cell.achieved, abs=1e-9)  # the same tokens, counted twice
        assert cell.status == contract.VALID, cell.reason


def test_a_cache_that_silently_does_nothing_is_off_target(refserver, tmp_path) -> None:
    srv = refserver(**CACHE, prefix_cache_silent_off=True)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--prefix-reuse", "0,90")
    figures = published(run)
    # nothing asked, nothing owed
    assert figures[(contract.PREFIX, 2048, 1, 0, None)].status == contract.VALID
    cell = figures[(contract.PREFIX, 2048, 1, 90, None)]
    assert cell.status == contract.REUSE_OFF_TARGET and cell.achieved == 0 and cell.server == 0
    assert cell.reason.startswith("reuse off target: asked 90.0%, requests report 0.0% cached, "
                                  "server counters 0.0%")


def test_counters_that_disagree_with_the_answers_are_flagged(refserver, tmp_path) -> None:
    srv = refserver(**CACHE, prefix_counters_lie=0.5)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--prefix-reuse", "90")
    cell = published(run)[(contract.PREFIX, 2048, 1, 90, None)]
    assert cell.status == contract.REUSE_OFF_TARGET
    assert cell.achieved == pytest.approx(90, abs=2) and cell.server == pytest.approx(45, abs=2)


def test_eviction_under_pressure_falls_below_the_target(refserver, tmp_path) -> None:
    # The server announces room for 64K tokens, but its prefix cache holds 3K (other
    # tenants' traffic, say): the two groups' 1.8K prefixes evict each other.
    srv = refserver(**CACHE, kv_budget_tokens=65536, prefix_cache_capacity_tokens=3072)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--prefix-reuse", "90")
    cell = published(run)[(contract.PREFIX, 2048, 1, 90, None)]
    rows = [r for r in run.requests.to_pylist() if r["purpose"] == contract.PURPOSE_REUSE]
    assert cell.achieved == pytest.approx(truth_ratio(srv, rows), abs=1e-9)
    assert cell.achieved < 88 and cell.status == contract.REUSE_OFF_TARGET, (cell.achieved, cell.reason)


def test_a_server_that_reports_nothing_is_not_verifiable(refserver, tmp_path) -> None:
    srv = refserver(**CACHE, prompt_tokens_details=False, prefix_counters=False)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--prefix-reuse", "90")
    cell = published(run)[(contract.PREFIX, 2048, 1, 90, None)]
    assert cell.status == contract.REUSE_UNVERIFIED and cell.achieved is None and cell.server is None
    assert "not verifiable" in cell.reason


def test_conversation_turns_reuse_their_history(refserver, tmp_path) -> None:
    srv = refserver(**CACHE)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--turns", "1,4,6")
    figures = published(run)
    truth = srv.truth_by_id()
    rows = sorted((r for r in run.requests.to_pylist() if r["phase"] == contract.CONVERSATION),
                  key=lambda r: r["conversation_turn"])
    assert [r["conversation_turn"] for r in rows] == [1, 2, 3, 4, 5, 6]
    listed, fill = contract.PURPOSE_TURN, contract.PURPOSE_TURN_FILL
    assert [r["purpose"] for r in rows] == [listed, fill, fill, listed, fill, listed]
    for before, now in zip(rows, rows[1:], strict=False):
        assert now["cached_tokens"] == truth[now["request_id"]]["cached_tokens"]
        assert now["cached_tokens"] >= before["prompt_tokens"] - BLOCK
    for turn in (1, 4, 6):
        cell = figures[(contract.CONVERSATION, 2048, 1, None, turn)]
        assert cell.status == contract.VALID, cell.reason
        mine = [r for r in rows if r["conversation_turn"] == turn]
        assert cell.achieved == pytest.approx(truth_ratio(srv, mine), abs=1e-9)


def test_a_conversation_whose_cache_does_nothing_is_flagged_turn_by_turn(refserver, tmp_path) -> None:
    srv = refserver(**CACHE, prefix_cache_silent_off=True)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--turns", "1,4")
    figures = published(run)
    # turn 1 has no history
    assert figures[(contract.CONVERSATION, 2048, 1, None, 1)].status == contract.VALID
    cell = figures[(contract.CONVERSATION, 2048, 1, None, 4)]
    assert cell.status == contract.REUSE_OFF_TARGET
    assert "conversation 0 turn 4: 0 cached tokens, expected at least" in cell.reason


def test_more_streams_than_slots_are_requests_queued(refserver, tmp_path) -> None:
    """Two slots, four prefix streams: two wait in the server's queue, so the
    cell's TTFTs hold that wait and it is never published as four served at once."""
    srv = refserver(engine="llamacpp", slots=2, **CACHE)
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--prefix-reuse", "90",
                  "--traffic-concurrency", "4")
    cell = published(run)[(contract.PREFIX, 2048, 4, 90, None)]
    assert cell.status == contract.REQUESTS_QUEUED, cell.reason
    assert cell.reason == ("4 streams, 2 server slots: at most 2 ran at once, the other 2 waited "
                           "in the server's queue")
    assert cell.achieved == pytest.approx(90, abs=2)  # the reuse is still what the server did


def test_a_turn_between_the_listed_ones_that_reused_nothing_flags_the_next_listed_turn(
        refserver, tmp_path) -> None:
    """Turn 2 (not listed: a turn_fill row) reuses nothing while turns 3 and 4
    hit: the cell of turn 4, which its rows belong to, says so."""
    srv = refserver(**CACHE, prefix_cache_miss_marker=" turn 2: ")
    run = collect(srv, tmp_path / "run", "--contexts", "2k", "--turns", "1,4")
    rows = sorted((r for r in run.requests.to_pylist() if r["phase"] == contract.CONVERSATION),
                  key=lambda r: r["conversation_turn"])
    assert [r["cached_tokens"] > 0 for r in rows] == [False, False, True, True]
    cell = published(run)[(contract.CONVERSATION, 2048, 1, None, 4)]
    assert cell.status == contract.REUSE_OFF_TARGET
    assert cell.reason.startswith("reuse off target: conversation 0 turn 2: 0 cached tokens, "
                                  "expected at least")
