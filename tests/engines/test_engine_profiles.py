"""Every engine profile against the reference server speaking as that engine
(issue 19, item 3): how the probe tells the engine, which gauges it reads
and how they add up over label sets, what a streaming request asks for
beyond the OpenAI fields, and which tokenize dialect sizes prompts and
counts output. The last test runs `bench run` once per engine. What each
engine is expected to do is its row in tests/support/engine_expectations.py:
these tests iterate the rows and never branch on an engine's name.

The toy server counts a chat prompt's template as `chat_template_tokens`
beyond its words, and SGLang's /tokenize adds a BOS unless told not to,
so a dialect asked the wrong way is off by a visible number of tokens.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from bench.core.auth import bearer_header, bearer_header_line
from bench.measure.cells import CellRunner, Settings
from bench.measure.records import context_refused
from bench.measure.stream import StreamClient
from bench.server import engine_profiles
from bench.server.engine_profiles import GENERIC, EngineProfile, profile_named
from bench.server.engines import probe_server
from bench.server.sampler import MetricsSampler
from bench.workload.prompts import Prompt, PromptFactory, tolerance
from rundir.contract import (
    COUNT_USAGE_CONTINUOUS,
    METRIC_RUNNING,
    METRIC_WAITING,
    PURPOSE_MEASURE,
)
from rundir.io import read_run
from tests.conftest import run_cli
from tests.refserver.dialects import DIALECTS
from tests.refserver.harness import refserver_fixture  # noqa: F401
from tests.support.engine_expectations import REF_MAX_MODEL_LEN, ROWS, WITH_GAUGES, EngineRow, ids

TEMPLATE = 40  # chat template tokens: far beyond a prompt's sizing tolerance


def test_every_engine_has_one_row() -> None:
    """Each profile and each of the reference server's dialects is exactly one row:
    a new engine without its row fails here, not by running no test."""
    from bench.server.engine_profiles import BY_NAME, PROFILES

    assert sorted(r.dialect for r in ROWS) == sorted(DIALECTS)
    assert sorted(r.profile.name for r in ROWS) == sorted(BY_NAME)
    assert {r.profile.name for r in ROWS if r.gauges} <= {p.name for p in PROFILES}


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_probe_picks_the_profile_and_reads_its_facts(refserver, row: EngineRow) -> None:
    info = probe_server(refserver(engine=row.dialect, kv_budget_tokens=40_000).base_url, None)
    assert info.engine == row.profile.name and info.notes == []
    assert info.tokenize == row.tokenize
    assert info.gauges == dict(row.profile.gauges) and info.has_metrics == row.gauges
    assert info.kv_budget == row.expected_kv_budget(40_000), info.kv_budget_source
    assert info.max_model_len == (REF_MAX_MODEL_LEN if row.server_facts else None)
    assert info.version == ("ref-0.1" if row.server_facts else None)


@pytest.mark.parametrize("row", WITH_GAUGES, ids=ids(WITH_GAUGES))
def test_engine_is_told_without_owned_by(refserver, row: EngineRow) -> None:
    """A gateway that rewrites /v1/models: the /metrics names (vLLM, SGLang)
    or /props (llama-server) still tell the engine."""
    srv = refserver(engine=row.dialect, kv_budget_tokens=40_000, endpoint_answers={
        "/v1/models": {"body": '{"object": "list", "data": [{"id": "ref"}]}'}})
    info = probe_server(srv.base_url, None)
    assert (info.engine, info.notes) == (row.profile.name, [])
    assert info.kv_budget == row.expected_kv_budget(40_000), info.kv_budget_source


def test_sglang_without_metrics_still_reads_its_server_info(refserver) -> None:
    """SGLang serves /metrics only with --enable-metrics: no gauges, no note,
    the KV budget and the version from /get_server_info all the same."""
    srv = refserver(engine="sglang", metrics_enabled=False, kv_budget_tokens=12_345)
    info = probe_server(srv.base_url, None)
    assert (info.engine, info.has_metrics, info.gauges, info.notes) == ("sglang", False, {}, [])
    assert info.kv_budget == 12_345 and "max_total_num_tokens" in info.kv_budget_source
    assert info.version == "ref-0.1" and info.tokenize == "sglang"


def open_streams(base_url: str, n: int, api_key: str | None = None) -> list[socket.socket]:
    """`n` streaming chat requests, each held open once its response head is in:
    by then the server has admitted it (a slot, or the queue)."""
    host, port = base_url.removeprefix("http://").split(":")
    body = (b'{"model": "ref", "messages": [{"role": "user", "content": "one two"}], '
            b'"max_tokens": 30000, "stream": true}')
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  + bearer_header_line(api_key).encode()
                  + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            assert chunk, "the server closed the stream"
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        socks.append(s)
    return socks


@pytest.mark.parametrize("row", WITH_GAUGES, ids=ids(WITH_GAUGES))
def test_running_and_waiting_are_summed_over_label_sets(refserver, row: EngineRow) -> None:
    """2 slots, 5 requests: 2 running and 3 waiting, however many
    data-parallel ranks (label sets) the engine splits them over."""
    profile = row.profile
    srv = refserver(engine=row.dialect, slots=2, dp_ranks=3, tokens_per_s=2, ttft_ms=0)
    info = probe_server(srv.base_url, None)
    socks = open_streams(srv.base_url, 5)
    sampler = MetricsSampler(info, None)
    try:
        sums = sampler.scrape()
        rows = sampler.table().to_pylist()
    finally:
        sampler.stop()
        for s in socks:
            s.close()
    assert sums is not None and (sums[METRIC_RUNNING], sums[METRIC_WAITING]) == (2, 3), sums
    running = [r for r in rows if r["name"] == METRIC_RUNNING]
    assert {r["source"] for r in running} == {profile.gauges[METRIC_RUNNING]}
    assert len(running) == (3 if row.label_set_per_rank else 1)  # one row per label set
    assert {r["source"] for r in rows} <= set(profile.gauges.values())


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_payload_extras_come_from_the_profile(refserver, row: EngineRow) -> None:
    info = probe_server(refserver(engine=row.dialect).base_url, None)
    runner = CellRunner(info, None, None, None, Settings(), lambda text: text)
    body = runner.payload(Prompt("a b c", None), 64)
    assert body["messages"] == [{"role": "user", "content": "a b c"}] and body["stream"] is True
    if not row.run_to_max:  # nothing beyond the OpenAI fields
        assert "ignore_eos" not in body and body["stream_options"] == {"include_usage": True}
        assert not runner.ignore_eos
    else:
        assert body["ignore_eos"] is True and runner.ignore_eos
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_tokenize_dialect_sizes_prompts_and_counts_output(refserver, row: EngineRow) -> None:
    """A sized prompt is what the server itself counts in a chat request
    (template included), and streamed text is counted bare (no BOS)."""
    srv = refserver(engine=row.dialect, chat_template_tokens=TEMPLATE)
    factory = PromptFactory(probe_server(srv.base_url, None), None, "run1")
    try:
        prompt = factory.build(500, "a")
        served = factory.usage_prompt_tokens(prompt.text)
        output = factory.count_output("w1 w2 w3")
    finally:
        factory.close()
    if row.tokenize is None:  # sized from a words-per-token ratio, exact length unknown
        assert prompt.tokens is None and output is None and served > 0
        return
    assert prompt.tokens == served, (prompt.tokens, served)
    assert abs(prompt.tokens - 500) <= tolerance(500) // 2
    assert output == 3


def test_sglang_tokenize_takes_no_messages(refserver) -> None:
    """Why SGLang's dialect counts bare text: its /tokenize refuses `messages`."""
    srv = refserver(engine="sglang")
    msgs = httpx.post(srv.base_url + "/tokenize", json={
        "model": "ref", "messages": [{"role": "user", "content": "a b"}]}, timeout=10)
    assert msgs.status_code == 400 and msgs.json()["object"] == "error"
    bare = httpx.post(srv.base_url + "/v1/tokenize", json={"model": "ref", "prompt": "a b"},
                      timeout=10).json()
    assert bare["count"] == 3 and bare["tokens"][0] == 1  # a BOS unless add_special_tokens false


def test_sglang_refusal_of_a_long_request_reads_as_over_capacity(refserver) -> None:
    """SGLang answers a request longer than the context in its flat error
    shape; the stream client still reads the message, and it is a context
    refusal (the cell is Over capacity, not Error)."""
    srv = refserver(engine="sglang", max_model_len=4096)
    info = probe_server(srv.base_url, None)
    runner = CellRunner(info, None, None, None, Settings(), lambda text: text)
    client = StreamClient(srv.base_url)
    result = asyncio.run(client.post_stream(
        "/v1/chat/completions", runner.payload(Prompt("a b c", None), 5000), "r1"))
    assert result.status == 400 and "maximum context length of 4096" in result.error
    assert context_refused(result.error, result.status)


def test_profiles_by_name() -> None:
    for row in ROWS:
        assert profile_named(row.profile.name) is row.profile
    assert profile_named("tgi") is GENERIC  # an engine without a profile: the standard fields


def test_a_new_engine_is_one_profile(refserver, monkeypatch) -> None:
    """Adding an engine is one record: detection, gauges and payload extras
    follow it with no other change (here a made-up engine the generic
    reference server stands in for)."""
    tgi = EngineProfile(name="tgi", owned_by="generic", body_extras={"min_tokens": 8},
                        stream_extras={"continuous_usage_stats": True})
    monkeypatch.setattr(engine_profiles, "PROFILES", (*engine_profiles.PROFILES, tgi))
    monkeypatch.setitem(engine_profiles.BY_NAME, "tgi", tgi)
    info = probe_server(refserver(engine="generic").base_url, None)
    assert (info.engine, info.tokenize, info.gauges) == ("tgi", None, {})
    body = CellRunner(info, None, None, None, Settings(), lambda t: t).payload(
        Prompt("a", None), 4)
    assert body["min_tokens"] == 8 and "ignore_eos" not in body
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_one_bearer_header_in_both_forms() -> None:
    assert bearer_header(None) == {} and bearer_header_line(None) == ""
    assert bearer_header("sk-1") == {"Authorization": "Bearer sk-1"}
    assert bearer_header_line("sk-1") == "Authorization: Bearer sk-1\r\n"


FAST = ["--duration", "2", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "2",
        "--contexts", "512", "--concurrency", "2"]


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_bench_run_on_each_engine(refserver, tmp_path: Path, row: EngineRow) -> None:
    """One whole run per engine behind an API key: the run card names the
    engine and its KV budget, the gauges are the engine's, tokens are
    counted from per-chunk usage where the profile asks for it (several
    tokens in a chunk, as SGLang's --stream-interval sends), and every
    measured prompt sized by the engine's tokenizer is the size asked for,
    template included."""
    profile, several = row.profile, row.token_counting == COUNT_USAGE_CONTINUOUS
    srv = refserver(engine=row.dialect, api_key="sk-ref-123", tokens_per_s=200, slots=2,
                    tokens_per_chunk=[1, 3] if several else 1, chat_template_tokens=TEMPLATE,
                    kv_budget_tokens=200_000)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--api-key", "sk-ref-123",
                  "--out", str(out), *FAST, timeout=300)
    assert res.returncode == 0, res.stderr
    run = read_run(out)
    assert run.info.engine.name == profile.name
    assert run.info.kv_budget.tokens == row.expected_kv_budget(200_000)
    (cell,) = [c for c in run.cells.to_pylist() if c["phase"] == "decode"]
    assert cell["status"] == "valid", cell
    assert cell["token_counting"] == row.token_counting
    sources = set(run.server_metrics.column("source").to_pylist())
    assert (profile.gauges[METRIC_RUNNING] in sources) if row.gauges else (not sources)
    assert sources <= set(profile.gauges.values())
    measured = [r["prompt_tokens"] for r in run.requests.to_pylist()
                if r["purpose"] == PURPOSE_MEASURE]
    assert measured, run.requests.to_pylist()
    if row.tokenize:  # sized by the engine's tokenizer (without one: a ratio, no promise)
        assert all(abs(n - 512) <= tolerance(512) for n in measured), measured
