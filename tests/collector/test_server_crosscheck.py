"""Issue 30: a decode cell's records set against what the server itself
counted (bench/server/server_check.py), and a usage that cannot be (item 11).

Records lost, counted twice or made up change every figure with nothing in
any stream to show it: a shard that lies, loses or duplicates records must
not produce a Valid figure. Through the real `bench run` against the
reference server, the cell's records are tampered with at the seam where
the cell is judged (`CellRunner.judge`: what a shard's records become once
merged), in the collector's own process; the server's generation counter
and running gauge refute them. Plus the rules, pure, on constructed records
and samples, and a server reporting more cached tokens than the prompt."""

from __future__ import annotations

import copy
import os
import re
import sys

import numpy as np
import pyarrow as pa
import pytest

from bench.measure.records import RequestRecord, records_table, usage_problem
from bench.server.server_check import (
    IN_FLIGHT_NS,
    ServerView,
    arrival_floor,
    counter_problem,
    gauge_problem,
    server_problems,
)
from rundir.contract import (
    METRIC_GENERATION_TOKENS,
    METRIC_RUNNING,
    METRIC_WAITING,
    PURPOSE_MEASURE,
    SERVER_METRICS_SCHEMA,
)
from rundir.io import read_run
from rundir.metrics import Chunks
from tests.conftest import REPO
from tests.refserver.harness import refserver_fixture  # noqa: F401

TAMPER = "BENCH_TEST_TAMPER"


def tamper(records: list[RequestRecord], how: str) -> list[RequestRecord]:
    """The cell's records as a lying, lossy or repeating shard would hand them over."""
    measured = [r for r in records if r.purpose == PURPOSE_MEASURE]
    rest = [r for r in records if r.purpose != PURPOSE_MEASURE]
    if how == "remove":  # two of the four streams' records never arrive
        return rest + [r for r in measured if r.stream_index not in (1, 3)]
    if how == "duplicate":  # two streams' records arrive twice (under new ids)
        twice = []
        for r in measured:
            if r.stream_index in (0, 1):
                dup = copy.copy(r)
                dup.request_id = r.request_id + "x"
                twice.append(dup)
        return records + twice
    if how == "inflate":  # every stream claims twice the tokens it received
        for r in measured:
            r.chunk_tokens = np.asarray(r.chunk_tokens, dtype=np.int64) * 2
        return records
    raise ValueError(how)


def tampered_main() -> None:
    """`bench run` whose decode cells are judged on tampered records
    (the environment's BENCH_TEST_TAMPER says how)."""
    from bench.cli import main
    from bench.measure import cells

    judge = cells.CellRunner.judge

    async def judged(self, run, bound_reason):
        run.records[:] = tamper(list(run.records), os.environ[TAMPER])
        return await judge(self, run, bound_reason)

    cells.CellRunner.judge = judged
    sys.exit(main())


CELL = ["--warmup-stable", "0.5", "--no-prefill", "--server-wait", "3", "--contexts", "256",
        "--concurrency", "4", "--duration", "6"]


def bench(srv, out, how: str | None):
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    entry = ("from tests.collector.test_server_crosscheck import tampered_main; tampered_main()"
             if how else "import sys; from bench.cli import main; sys.exit(main())")
    if how:
        env[TAMPER] = how
    return subprocess.run([sys.executable, "-c", entry, "run", "--base-url", srv.base_url,
                           "--out", str(out), *CELL], env=env, capture_output=True, text=True,
                          timeout=600)


def the_cell(out) -> dict:
    (cell,) = read_run(out).cells.to_pylist()
    return cell


def test_honest_records_agree_with_the_server(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=100, ttft_ms=20)
    res = bench(srv, tmp_path / "r", None)
    assert res.returncode == 0, res.stderr
    cell = the_cell(tmp_path / "r")
    assert cell["status"] == "valid", cell["reason"]


@pytest.mark.parametrize("how, expect", [
    # before: Requests queued ("average active 2.00 < 0.95 × 4"), a queue the server never had
    ("remove", "records hold at most"),
    # before: Valid, total tok/s 50% high (the running gauge refutes it too)
    ("duplicate", "tokens the server never generated"),
    # before: Valid, every figure of tokens doubled
    ("inflate", "tokens the server never generated"),
])
def test_records_the_server_refutes_fail_the_cell(refserver, tmp_path, how, expect) -> None:
    srv = refserver(tokens_per_s=100, ttft_ms=20)
    res = bench(srv, tmp_path / "r", how)
    assert res.returncode == 3, res.stderr  # finished, with an Error cell
    cell = the_cell(tmp_path / "r")
    reason = cell["reason"] or ""
    print(how, cell["status"], reason)
    assert cell["status"] == "error", reason
    assert "the server contradicts the records: its generation counter " \
           "(vllm:generation_tokens_total) rose by" in reason
    assert expect in reason


def test_streams_the_server_never_ran_fail_the_cell(refserver, tmp_path) -> None:
    """llama.cpp counts a request's tokens when it finishes, so its counter
    says nothing about the window: its running gauge still does. Two
    streams' records repeated claim 6 streams where the server ran 4."""
    srv = refserver(engine="llamacpp", slots=4, tokens_per_s=100, ttft_ms=20)
    res = bench(srv, tmp_path / "r", "duplicate")
    assert res.returncode == 3, res.stderr
    reason = the_cell(tmp_path / "r")["reason"] or ""
    print(reason)
    assert "running gauge (llamacpp:requests_processing)" in reason
    assert "(e.g. 6 against 4 running + 0 waiting" in reason
    assert "generation counter" not in reason


def test_more_cached_than_the_prompt_fails_the_cell(refserver, tmp_path) -> None:
    """Item 11: a server reporting 10 more cached prompt tokens than the
    prompt has was stored, and the cell Valid. One reason names the request
    and both numbers."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, cached_tokens_extra=10)
    res = bench(srv, tmp_path / "r", None)
    assert res.returncode == 3, res.stderr
    cell = the_cell(tmp_path / "r")
    reason = cell["reason"] or ""
    assert cell["status"] == "error", reason
    rows = {r["request_id"]: r for r in read_run(tmp_path / "r").requests.to_pylist()}
    named = reason.split("request ", 1)[1].split(":", 1)[0]
    row = rows[named]
    assert row["cached_tokens"] == row["prompt_tokens"] + 10
    assert (f"the server reported inconsistent token counts: request {named}: cached_tokens "
            f"{row['cached_tokens']} exceeds prompt_tokens {row['prompt_tokens']}") in reason


# ---- the rules, pure ----------------------------------------------------------

MS = 1_000_000
S, E = 10**12, 10**12 + 6000 * MS  # a 6 s window


def streams(n: int, first: int = S - 2000 * MS, gap: int = 10 * MS,
            until: int = E + 50 * MS) -> pa.Table:
    """n streams, one token every `gap` from `first` to `until`, as requests.parquet rows."""
    stamps = np.arange(first, until, gap, dtype=np.int64)
    recs = [RequestRecord(
        phase="decode", context=256, concurrency=n, request_id=f"r-{i}", purpose="measure",
        stream_index=i, send_ns=first - 30 * MS, end_ns=until, prompt_tokens=256,
        cached_tokens=256, finish_reason=None, error=None, cancelled=True,
        chunk_ns=stamps + i * MS, chunk_tokens=np.arange(1, len(stamps) + 1),
        counting="usage_continuous") for i in range(n)]
    return records_table(recs)


def samples(rows: list[tuple[int, str, float]]) -> pa.Table:
    return pa.table({"t_ns": [t for t, _, _ in rows], "name": [n for _, n, _ in rows],
                     "source": [f"src:{n}" for _, n, _ in rows], "labels": [""] * len(rows),
                     "value": [v for _, _, v in rows]}, schema=SERVER_METRICS_SCHEMA)


def server_of(n_true: int, every_ms: int = 1000, first: int = S - 2000 * MS) -> pa.Table:
    """What a server running n_true such streams (from `first`) reports,
    sampled every `every_ms`."""
    rows = []
    for t in range(S - 1000 * MS, E + 1000 * MS, every_ms * MS):
        made = n_true * max(0, (t - first) // (10 * MS))
        rows += [(t, METRIC_GENERATION_TOKENS, float(made)), (t, METRIC_RUNNING, float(n_true)),
                 (t, METRIC_WAITING, 0.0)]
    return samples(rows)


def test_arrival_floor_is_the_previous_read() -> None:
    chunks = Chunks.from_table(streams(1, gap=10 * MS))
    floor = arrival_floor(chunks)
    assert floor[0] == chunks.send_ns[0] and (floor[1:] == chunks.chunk_ns[:-1]).all()


@pytest.mark.parametrize("claimed, true, which", [
    (4, 4, None), (6, 4, "counter"), (3, 4, "lost"), (4, 3, "counter")])
def test_the_counter_rule(claimed: int, true: int, which: str | None) -> None:
    chunks = Chunks.from_table(streams(claimed))
    why = counter_problem(chunks, server_of(true), S, E, {})
    if which is None:
        assert why is None
    elif which == "lost":
        assert why is not None and "records lost, or another client used the server" in why
    else:
        assert why is not None and "tokens the server never generated" in why


def test_the_counter_allows_tokens_in_flight() -> None:
    """Streams that start inside the window: the server counted each token
    up to IN_FLIGHT_NS before it arrived (or after), and such records agree;
    records a whole second later than the server's count do not."""
    first = S + 1500 * MS
    for shift in (-IN_FLIGHT_NS + MS, IN_FLIGHT_NS - MS):
        table = streams(4, first=first + shift)
        assert counter_problem(Chunks.from_table(table), server_of(4, first=first), S, E,
                               {}) is None, shift
    late = Chunks.from_table(streams(4, first=first + 1000 * MS))
    why = counter_problem(late, server_of(4, first=first), S, E, {})
    assert why is not None and "records lost" in why


def test_a_slow_scrape_widens_the_span() -> None:
    """A sample whose scrape took 1.6 s was read anywhere in it: six streams
    against a counter of four are no contradiction once that is allowed (the
    span the records are counted over shrinks by the scrape on each side)."""
    server = server_of(4)
    chunks = Chunks.from_table(streams(6))
    assert counter_problem(chunks, server, S, E, {}) is not None
    slow = {int(t): 800 * MS for t in set(server.column("t_ns").to_pylist())}
    assert counter_problem(chunks, server, S, E, slow) is None


def test_the_counter_needs_two_samples_and_skips_a_reset() -> None:
    chunks = Chunks.from_table(streams(6))
    assert counter_problem(chunks, server_of(4, every_ms=4000), S, E, {}) is None
    reset = samples([(S + 1000 * MS, METRIC_GENERATION_TOKENS, 9e9),
                     (S + 3000 * MS, METRIC_GENERATION_TOKENS, 10.0)])
    assert counter_problem(chunks, reset, S, E, {}) is None


def test_the_gauge_rule() -> None:
    honest = Chunks.from_table(streams(4))
    assert gauge_problem(honest, server_of(4), S, E, {}) is None
    why = gauge_problem(Chunks.from_table(streams(5)), server_of(4), S, E, {})
    assert why is not None and "(e.g. 5 against 4 running + 0 waiting" in why
    # a preempted stream waits: running 3 + waiting 1 holds 4 streams
    rows = [(t, n, v) for t, n, v in samples_rows(server_of(4))
            if n != METRIC_RUNNING and n != METRIC_WAITING]
    for t in sorted({t for t, _, _ in samples_rows(server_of(4))}):
        rows += [(t, METRIC_RUNNING, 3.0), (t, METRIC_WAITING, 1.0)]
    assert gauge_problem(honest, samples(rows), S, E, {}) is None


def test_a_gauge_reading_an_idle_server_is_stale_not_a_count() -> None:
    """vLLM's CPU build was seen reading 0 running while four streams received
    tokens: such samples say nothing, whatever the records claim."""
    rows = [(t, n, 0.0 if n in (METRIC_RUNNING, METRIC_WAITING) else v)
            for t, n, v in samples_rows(server_of(4))]
    assert gauge_problem(Chunks.from_table(streams(6)), samples(rows), S, E, {}) is None


def test_one_lagging_gauge_sample_is_no_contradiction() -> None:
    """A gauge set once a step can lag: one low sample of six is not enough."""
    rows = samples_rows(server_of(4))
    t_low = sorted({t for t, _, _ in rows if S <= t <= E})[2]
    rows = [(t, n, 1.0 if (n == METRIC_RUNNING and t == t_low) else v) for t, n, v in rows]
    assert gauge_problem(Chunks.from_table(streams(4)), samples(rows), S, E, {}) is None


def samples_rows(table: pa.Table) -> list[tuple[int, str, float]]:
    return list(zip(table.column("t_ns").to_pylist(), table.column("name").to_pylist(),
                    table.column("value").to_pylist(), strict=True))


def test_server_problems_skips_what_it_cannot_judge() -> None:
    table, server = streams(6), server_of(4)
    live = ServerView(live_counter=True)
    assert len(server_problems(table, S, E, server, live, counted=True)) == 2
    # a chunk count nothing confirmed yet is left to the count check; the gauge still speaks
    (only,) = server_problems(table, S, E, server, live, counted=False)
    assert "running gauge" in only
    (only,) = server_problems(table, S, E, server, ServerView(live_counter=False), counted=True)
    assert "running gauge" in only
    assert server_problems(table, S, E, None, live, counted=True) == []


def test_usage_problem_names_the_request_and_both_numbers() -> None:
    assert usage_problem("r-7", 256, 256) is None
    assert usage_problem("r-7", None, 300) is None
    why = usage_problem("r-7", 256, 300)
    assert why == ("the server reported inconsistent token counts: request r-7: cached_tokens 300 "
                   "exceeds prompt_tokens 256 (more of the prompt cached than it has)")


def test_the_judge_refuses_a_record_with_more_cached_than_prompt() -> None:
    """A record that never passed the stream parser (built by hand, or
    handed over by a shard) is judged the same way."""
    from bench.measure.records import judge_decode

    table = streams(2)
    recs = [RequestRecord(**{k: v for k, v in row.items()}) for row in table.to_pylist()]
    for r in recs:
        r.chunk_ns, r.chunk_tokens = np.asarray(r.chunk_ns), np.asarray(r.chunk_tokens)
    assert judge_decode(recs, 2, S, E, None).status == "valid"
    recs[1].cached_tokens = 300
    verdict = judge_decode(recs, 2, S, E, None)
    assert verdict.status == "error"
    assert verdict.reason == ("the server reported inconsistent token counts: request r-1: "
                              "cached_tokens 300 exceeds prompt_tokens 256 (more of the prompt "
                              "cached than it has)")


def test_a_prefill_sample_with_more_cached_than_prompt_names_it(refserver, tmp_path) -> None:
    """A cold sample whose usage says more of its prompt was cached than it
    has: its cell is an Error naming that, not a prefix-cache hit to retry
    (before: rejected as a hit 9 times, "only 0 cold samples in 9 tries")."""
    import subprocess

    srv = refserver(tokens_per_s=100, cache_hit_every=1, cached_tokens_extra=10)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-c", "import sys; from bench.cli import main; sys.exit(main())", "run",
         "--base-url", srv.base_url, "--out", str(tmp_path / "r"), "--contexts", "128",
         "--concurrency", "1", "--duration", "1", "--server-wait", "3"],
        env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 3, res.stderr
    cells = {c["phase"]: c for c in read_run(tmp_path / "r").cells.to_pylist()}
    reason = cells["prefill"]["reason"] or ""
    assert cells["prefill"]["status"] == "error", reason
    assert re.search(r"^the server reported inconsistent token counts: request \S+: "
                     r"cached_tokens (\d+) exceeds prompt_tokens (\d+)", reason), reason
