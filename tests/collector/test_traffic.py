"""Prefix-reuse and conversation cells (issue 33, items 1-3), collector side:
the plan (pure), the flags' errors, the workloads (pure), the verdict on a
cell, and whole runs through the real `bench run` against the reference
server, whose prefix cache hits when a prompt's first words were prefilled
before and then reports every prompt token cached (so a 90% target reads
100%: off target; 99% is within its tolerance)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.core.plan import Cell, PlanError, make_plan, parse_percents, parse_turns, prefix_groups
from bench.measure.chunks import StreamParser
from bench.measure.records import RequestRecord
from bench.measure.traffic_cells import (
    ServerCount,
    counters_count,
    judge_traffic,
    measured_requests,
    timings_count,
)
from bench.run.summary import cell_line
from bench.workload.conversation import conversation, turn_sizes
from bench.workload.shared_prefix import group_of, shared_tokens, two_messages
from rundir.contract import (
    CONVERSATION,
    DECODE,
    ERROR,
    OVER_CAPACITY,
    PREFILL,
    PREFIX,
    PURPOSE_PRIME,
    PURPOSE_REUSE,
    PURPOSE_TURN,
    PURPOSE_TURN_FILL,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    VALID,
)
from rundir.io import read_run
from rundir.metrics import first_content
from site_builder.traffic import traffic_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "1", "--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "2k",
        "--concurrency", "1", "--max-output", "64"]


# -- the plan (pure) ---------------------------------------------------------------


def _plan(**kw):
    base = dict(contexts=[2048, 4096], concurrency=[1, 2], max_output=64, max_model_len=None,
                kv_budget=None)
    return make_plan(**{**base, **kw})


def test_no_traffic_flags_plan_the_matrix_alone() -> None:
    plain = _plan()
    assert [c.phase for c in plain.cells] == [PREFILL] * 2 + [DECODE] * 4
    assert all(c.reuse is None and c.turn is None for c in plain.cells)
    assert plain.traffic_lines(plain.cells) == []
    assert _plan(prefix_reuse=[], turns=[]).cells == plain.cells


def test_traffic_cells_come_after_the_matrix_each_with_its_own_key() -> None:
    plan = _plan(prefix_reuse=[0, 90], turns=[1, 4], traffic_concurrency=[1, 4])
    phases = [c.phase for c in plan.cells]
    assert phases == [PREFILL] * 2 + [DECODE] * 4 + [PREFIX] * 8 + [CONVERSATION] * 8
    keys = [c.key for c in plan.cells]
    assert len(set(keys)) == len(keys)  # two targets (or turns) of one cell never collide
    assert (PREFIX, 2048, 4, 90, None, None) in keys and (CONVERSATION, 4096, 1, None, 4, None) in keys
    assert (DECODE, 2048, 2, None, None, None) in keys  # matrix keys: traffic parts empty
    lines = plan.traffic_lines(plan.to_run)
    assert lines[0].startswith("Prefix reuse: 8 cells at 0, 90% shared, contexts 2K, 4K, streams 1, 4")
    assert lines[1].startswith("Conversations: 8 cells at turns 1, 4, contexts 2K, 4K, streams 1, 4")


def test_the_plan_lines_of_every_traffic_kind_word_for_word() -> None:
    """One line per kind, in phase order, each naming its cells, their key, contexts and
    what a request does (pinned whole: progress prints them as they are)."""
    plan = _plan(prefix_reuse=[0, 90], turns=[1, 4], traffic_concurrency=[1, 4], rates=[4.0, 0.5],
                 rate_cap=8)
    assert plan.traffic_lines(plan.to_run) == [
        "Prefix reuse: 8 cells at 0, 90% shared, contexts 2K, 4K, streams 1, 4; 1 output token "
        "each, after the shared prefixes are primed",
        "Conversations: 8 cells at turns 1, 4, contexts 2K, 4K, streams 1, 4; each stream "
        "resends its whole history every turn (fixed replies)",
        "Rates: 4 cells at 0.5, 4 requests/s (poisson arrivals), contexts 2K, 4K; at most 8 "
        "requests in flight (a request due while the cap is full waits in the client: send lag, "
        "counted in its TTFT); 64 output tokens each; requests counted by scheduled time in the "
        "window, then drained"]
    uncapped = _plan(contexts=[2048], rates=[1.0])
    assert uncapped.traffic_lines(uncapped.to_run) == [
        "Rates: 1 cells at 1 requests/s (poisson arrivals), contexts 2K; no cap on requests in "
        "flight (the KV cache they need is unknown: a request the server cannot hold fails the "
        "cell); 64 output tokens each; requests counted by scheduled time in the window, then "
        "drained"]
    # only the kinds `todo` holds: the conversation cells alone give their line alone
    turns = [c for c in plan.to_run if c.phase == CONVERSATION]
    assert plan.traffic_lines(turns) == [plan.traffic_lines(plan.to_run)[1]]


def test_traffic_cells_over_the_kv_budget_are_planned_over_capacity() -> None:
    plan = _plan(contexts=[4096], prefill_contexts=[4096], concurrency=[1], kv_budget=10_000,
                 prefix_reuse=[90], turns=[2], traffic_concurrency=[2, 4])
    by_key = {c.key: c for c in plan.cells}
    assert by_key[(PREFIX, 4096, 2, 90, None, None)].status != OVER_CAPACITY  # 2 × 4,097 fits
    over = by_key[(PREFIX, 4096, 4, 90, None, None)]
    assert over.status == OVER_CAPACITY and "4 × (4,096 + 1)" in over.reason
    turn = by_key[(CONVERSATION, 4096, 4, None, 2, None)]
    assert turn.status == OVER_CAPACITY and "4 × (4,096 + 64)" in turn.reason


def test_prefix_groups_at_least_two_at_most_eight_and_within_slots_and_budget() -> None:
    assert prefix_groups(1) == 2 and prefix_groups(4) == 4 and prefix_groups(64) == 8
    assert prefix_groups(4, slots=3) == 3
    assert prefix_groups(8, shared=1000, room=2500) == 2
    assert measured_requests(1, 2) == 8 and measured_requests(4, 4) == 2  # ≥ 8 in all
    assert measured_requests(3, 8) * 3 >= 16  # ≥ 2 a group


@pytest.mark.parametrize(("parse", "text", "expected"), [
    (parse_percents, "90,0, 50,90", [0, 50, 90]),
    (parse_turns, "32,1,4", [1, 4, 32]),
])
def test_lists_parse_sorted_and_unique(parse, text, expected) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(("parse", "text", "said"), [
    (parse_percents, "101", "--prefix-reuse: expected whole numbers from 0 to 100 like 0,50,90,99, "
                            "got '101'"),
    (parse_percents, "12.5", "got '12.5'"),
    (parse_turns, "0", "--turns: expected whole numbers from 1 to 1,024 like 1,4,16,32, got '0'"),
    (parse_turns, ",", "--turns: expected at least one turn"),
])
def test_bad_lists_say_the_flag_and_what_was_expected(parse, text, said) -> None:
    with pytest.raises(PlanError, match=None) as err:
        parse(text)
    assert said in str(err.value)


def test_bad_flag_values_fail_at_parse_time_naming_the_flag(tmp_path: Path) -> None:
    for flag, value in (("--prefix-reuse", "95,120"), ("--turns", "x"),
                        ("--traffic-concurrency", "0")):
        res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", flag, value,
                      "--out", str(tmp_path / "run"))
        assert res.returncode == 2, res.stderr
        assert f"{flag}: expected" in res.stderr, res.stderr
        assert not (tmp_path / "run").exists()


# -- the workloads (pure) ----------------------------------------------------------


def test_shared_part_is_cut_on_whole_blocks_and_groups_rotate() -> None:
    assert shared_tokens(90, 8192, 16) == 7360  # 7,372.8 down to 460 blocks of 16
    assert shared_tokens(90, 8192, 1) == 7372
    assert shared_tokens(0, 8192, 16) == 0 and shared_tokens(100, 8192, 16) == 8192
    assert [group_of(s, i, 3) for s in (0, 1) for i in range(3)] == [0, 1, 2, 1, 2, 0]
    assert two_messages("sys", "u") == [{"role": "system", "content": "sys"},
                                        {"role": "user", "content": "u"}]
    assert two_messages(None, "u") == [{"role": "user", "content": "u"}]


def test_conversations_resend_fixed_history_and_share_nothing() -> None:
    user, reply = turn_sizes(8192, 8)
    assert (user, reply) == (1024 - 128, 128) and turn_sizes(1024, 16)[1] == 16
    a = conversation("run", 8192, 2, 0, 4, 20, 5)
    b = conversation("run", 8192, 2, 1, 4, 20, 5)
    three = a.messages(3)
    assert [m["role"] for m in three] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert three[:5] == a.messages(4)[:5]  # each turn's prompt starts with the one before
    assert three[2]["content"] == b.messages(3)[2]["content"]  # replies: fixed text
    assert a.system != b.system and a.users[0] != b.users[0]  # nothing shared across streams
    assert a == conversation("run", 8192, 2, 0, 4, 20, 5)  # deterministic


# -- the verdict (pure) ------------------------------------------------------------


def _rec(prompt: int | None, cached: int | None, error: str | None = None, status: int = 200,
         cache_n: int | None = None, prompt_n: int | None = None) -> RequestRecord:
    return RequestRecord(PREFIX, 2048, 1, "r", PURPOSE_REUSE, 0, 0, 1, prompt, cached, "length",
                         error, False, status=status, engine_cached_tokens=cache_n,
                         engine_computed_tokens=prompt_n)


def test_no_cached_tokens_and_no_counters_is_not_verifiable() -> None:
    recs = [_rec(1000, None)] * 8
    status, reason, columns = judge_traffic(recs, recs, 90, None, 16)
    assert status == REUSE_UNVERIFIED
    assert reason == ("reuse not verifiable: the server reports no cached tokens and no "
                      "prefix-cache counters")
    assert columns == {"server_prompt_tokens": None, "server_cached_tokens": None,
                       "server_source": None, "reuse_block": 16}


def test_off_target_names_the_three_numbers_and_on_target_is_valid() -> None:
    recs = [_rec(1000, 120)] * 8
    server = ServerCount(8000, 960, "counters")
    status, reason, _ = judge_traffic(recs, recs, 90, server, 16)
    assert status == REUSE_OFF_TARGET
    assert reason == ("reuse off target: asked 90.0%, requests report 12.0% cached, server "
                      "counters 12.0% (tolerance 2.0 points)")
    good = [_rec(1000, 895)] * 8
    assert judge_traffic(good, good, 90, ServerCount(8000, 7180, "counters"), 16)[:2] == (VALID, None)
    # the two measures disagree by more than the tolerance: flagged even on target
    high = [_rec(1000, 915)] * 8  # 91.5% and 88.5%: each within 2 points of 90, 3 apart
    status, reason, _ = judge_traffic(high, high, 90, ServerCount(8000, 7080, "counters"), 16)
    assert status == REUSE_OFF_TARGET and reason.startswith("reuse measures disagree")


def test_failed_or_refused_requests_end_the_cell_error_or_over_capacity() -> None:
    refused = [_rec(None, None, "HTTP 400: maximum context length exceeded", 400)]
    assert judge_traffic(refused, [], 90, None, 1)[0] == OVER_CAPACITY
    failed = [_rec(None, None, "connection lost", 0)]
    assert judge_traffic(failed, [], 90, None, 1)[:2] == (ERROR, "connection lost")


def test_llama_cpp_timings_are_the_server_measure() -> None:
    recs = [_rec(1000, None, cache_n=900, prompt_n=100)] * 8
    count = timings_count(recs)
    assert count == ServerCount(8000, 7200, "timings")
    status, reason, columns = judge_traffic(recs, recs, 90, count, 1)
    assert status == VALID and reason.startswith("reuse checked once: the requests report no cached")
    assert columns["server_source"] == "timings"
    assert timings_count([*recs, _rec(1000, 0)]) is None  # one request without: not counted
    assert counters_count((100.0, 10.0), (900.0, 730.0)) == ServerCount(800, 720, "counters")
    assert counters_count(None, (1.0, 1.0)) is None


def test_the_stream_parser_reads_llama_cpp_timings_from_the_final_event() -> None:
    parser = StreamParser(1)
    parser.feed([(1, b'{"choices":[{"delta":{"content":"a"}}]}'),
                 (2, b'{"choices":[{"delta":{},"finish_reason":"length"}],"timings":'
                     b'{"cache_n":900,"prompt_n":100,"prompt_ms":3.1},"usage":{"prompt_tokens":1000,'
                     b'"completion_tokens":1}}')])
    parsed = parser.result()
    assert (parsed.engine_cached_tokens, parsed.engine_computed_tokens) == (900, 100)
    bad = StreamParser(1)
    assert not bad.feed([(1, b'{"choices":[],"timings":{"cache_n":-1,"prompt_n":3}}')])
    assert "timings.cache_n -1" in bad.error


# -- whole runs against the reference server ------------------------------------------


def _tables(run: Path):
    data = read_run(run)
    return data.cells.to_pylist(), data.requests.to_pylist()


def test_a_run_without_the_flags_writes_no_traffic_columns(refserver, tmp_path: Path) -> None:
    srv = refserver()
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--out", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    for name in ("cells.parquet", "requests.parquet"):
        names = pq.read_schema(tmp_path / "run" / name).names
        assert not {"prefix_reuse_target", "turn", "server_source", "prefix_group",
                    "conversation_turn", "engine_cached_tokens"} & set(names), names
    assert "Prefix reuse" not in res.stderr and "Conversations" not in res.stderr
    params = (tmp_path / "run" / "run.yaml").read_text(encoding="utf-8")
    assert not {"prefix_reuse", "turns", "traffic_concurrency"} & set(re.findall(r"\w+", params))


def test_prefix_cells_against_a_cache_that_reuses_everything(refserver, tmp_path: Path) -> None:
    """The reference server's cache hands back every prompt token once the
    first words repeat: 0% reads 0 (Valid), 99% reads 100 (within 2 points,
    Valid), 90% reads 100 (Reuse off target, with the numbers); the block is
    vLLM's block_size, 16."""
    srv = refserver(kv_budget_tokens=200_000)
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--prefill-contexts", "2k",
                  "--prefix-reuse", "0,90,99", "--traffic-concurrency", "1,3", "--out", str(run))
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stderr.split())
    assert "Prefix reuse: 6 cells at 0, 90, 99% shared, contexts 2K, streams 1, 3" in out
    p = read_run(run).info.parameters  # the flags are part of the run's record
    assert (p.prefix_reuse, p.turns, p.traffic_concurrency) == ([0, 90, 99], None, [1, 3])
    cells, requests = _tables(run)
    prefix = {(c["concurrency"], c["prefix_reuse_target"]): c for c in cells if c["phase"] == PREFIX}
    assert len(prefix) == 6
    for (c, target), cell in prefix.items():
        assert cell["reuse_block"] == 16 and cell["server_source"] == "counters", cell
        assert cell["turn"] is None
        mine = [r for r in requests if r["phase"] == PREFIX and r["concurrency"] == c
                and r["prefix_reuse_target"] == target]
        measured = [r for r in mine if r["purpose"] == PURPOSE_REUSE]
        primes = [r for r in mine if r["purpose"] == PURPOSE_PRIME]
        groups = min(max(2, c), 8)
        assert len(measured) >= max(8, 2 * groups) and len(primes) == (groups if target else 0)
        assert {r["prefix_group"] for r in measured} == set(range(groups))
        # the server's counters over the span hold the measured requests and nothing else
        assert cell["server_prompt_tokens"] == sum(r["prompt_tokens"] for r in measured)
        assert cell["server_cached_tokens"] == sum(r["cached_tokens"] for r in measured)
        if target == 90:
            assert cell["status"] == REUSE_OFF_TARGET, cell
            assert cell["reason"] == ("reuse off target: asked 90.0%, requests report 100.0% "
                                      "cached, server counters 100.0% (tolerance 2.0 points)")
        else:
            assert cell["status"] == VALID and cell["reason"] is None, cell
    assert "Reuse off target, 100.0% cached" in out  # the terminal says what the server reused
    assert "Valid, 0.0% cached" in out
    assert "8 cells: 6 valid, 2 reuse off target, 0 error" in out  # the last line counts them
    # resumed with nothing to do, the traffic cells are kept as they were
    again = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run))
    assert again.returncode == 0, again.stderr
    assert "nothing left to measure" in again.stderr
    assert _tables(run)[0] == cells


def test_requests_that_report_no_hits_while_the_counters_do(refserver, tmp_path: Path) -> None:
    """A server whose answers say 0 cached while its counters count hits: the
    two measures disagree, and the cell is never Valid."""
    srv = refserver(report_cached_tokens=False)
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--prefill-contexts", "2k",
                  "--prefix-reuse", "99", "--out", str(run))
    assert res.returncode == 0, res.stderr
    cell = next(c for c in _tables(run)[0] if c["phase"] == PREFIX)
    assert cell["status"] == REUSE_OFF_TARGET
    assert "requests report 0.0% cached, server counters 100.0%" in cell["reason"]


def test_prefix_reuse_needs_prefill_contexts(refserver, tmp_path: Path) -> None:
    srv = refserver()
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--no-prefill",
                  "--prefix-reuse", "90", "--out", str(tmp_path / "run"))
    assert res.returncode != 0
    assert "--prefix-reuse: prefix cells run at the prefill contexts" in res.stderr


def test_conversation_cells_keep_every_turn(refserver, tmp_path: Path) -> None:
    srv = refserver()
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--no-prefill",
                  "--turns", "2,4", "--traffic-concurrency", "2", "--out", str(run))
    assert res.returncode == 0, res.stderr
    cells, requests = _tables(run)
    turns = {c["turn"]: c for c in cells if c["phase"] == CONVERSATION}
    assert set(turns) == {2, 4} and all(c["status"] == VALID for c in turns.values()), turns
    talk = [r for r in requests if r["phase"] == CONVERSATION]
    assert len(talk) == 2 * 4  # 2 conversations × turns 1..4
    for r in talk:
        listed = r["conversation_turn"] in (2, 4)
        assert r["purpose"] == (PURPOSE_TURN if listed else PURPOSE_TURN_FILL)
        assert r["turn"] == (2 if r["conversation_turn"] <= 2 else 4)  # the first listed turn after
        assert r["conversation_id"] == r["stream_index"] in (0, 1)
    for conv in (0, 1):
        sizes = [r["prompt_tokens"] for r in sorted(talk, key=lambda r: r["conversation_turn"])
                 if r["conversation_id"] == conv]
        assert sizes == sorted(sizes) and sizes[-1] <= 2048 + 64, sizes  # grows to about L
    # turn 1 is new to the cache; every later turn reuses the history
    assert all(r["cached_tokens"] == 0 for r in talk if r["conversation_turn"] == 1)
    assert all(r["cached_tokens"] == r["prompt_tokens"] for r in talk if r["conversation_turn"] > 1)


def test_the_terminal_and_the_page_time_ttft_to_the_first_chunk_with_content() -> None:
    """Servers often send a role chunk (no tokens) first: TTFT runs to the first chunk
    carrying a token, on the terminal's cell line as on the run page, never to the role
    chunk (the terminal once took the request's first chunk: 2 ms here, not 40)."""
    ms = 1_000_000
    requests = pa.Table.from_pylist([
        {"phase": PREFIX, "context": 2048, "concurrency": 1, "prefix_reuse_target": 50,
         "purpose": PURPOSE_REUSE, "request_id": f"r{i}", "send_ns": i * 100 * ms,
         "chunk_ns": [i * 100 * ms + 2 * ms, i * 100 * ms + (40 + i) * ms],
         "chunk_tokens": [0, 1], "prompt_tokens": 2048, "cached_tokens": 1024,
         "finish_reason": "length", "error": None, "cancelled": False} for i in range(3)])
    cell = Cell(PREFIX, 2048, 1, reuse=50)
    terminal = cell_line(cell, SimpleNamespace(status=VALID, table=requests))
    cells = pa.Table.from_pylist([{"phase": PREFIX, "context": 2048, "concurrency": 1,
                                   "prefix_reuse_target": 50, "status": VALID}])
    (page,) = traffic_cells(cells, requests)
    assert terminal.ttft_ms == pytest.approx(41.0)
    assert page.ttft_ms == pytest.approx(terminal.ttft_ms)
    assert first_content([0, 0, 3, 5]) == 2 and first_content([0, 0]) is None
    assert first_content([]) is None and first_content(None) is None
