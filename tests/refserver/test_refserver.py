"""Tests of the reference server itself (tests/refserver), through a real
subprocess and httpx: the ground truth it logs must be exact before other
tests may trust it."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import httpx
import pytest

from tests.refserver.harness import (
    completion_tokens,
    refserver_fixture,  # noqa: F401  (the `refserver` fixture)
    true_running,
    true_waiting,
)
from tests.refserver.scenario import Scenario

MS = 1_000_000
HTTP = httpx.Client(timeout=10)  # one client: creating one per request is slow


def chat_body(max_tokens: int, prompt: str = "hello world", **extra: Any) -> dict[str, Any]:
    return {"model": "ref", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}, **extra}


def stream(url: str, body: dict, headers: dict | None = None) -> list[tuple[int, str]]:
    """POST and return every non-empty SSE line with its client receive stamp."""
    out = []
    with HTTP.stream("POST", url + "/v1/chat/completions", json=body, headers=headers,
                      timeout=10) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line:
                out.append((time.monotonic_ns(), line))
    return out


def events(lines: list[tuple[int, str]]) -> list[tuple[int, dict]]:
    return [(t, json.loads(s[6:])) for t, s in lines
            if s.startswith("data: {") and s != "data: {not json"]


async def astream(client: httpx.AsyncClient, body: dict, rid: str) -> list[tuple[int, str]]:
    out = []
    async with client.stream("POST", "/v1/chat/completions", json=body,
                             headers={"X-Request-Id": rid}) as r:
        async for line in r.aiter_lines():
            if line:
                out.append((time.monotonic_ns(), line))
    return out


def metrics(url: str | None, text: str | None = None) -> dict[str, float]:
    """Prometheus text (GET url/metrics) -> {name: value summed over label sets}."""
    out: dict[str, float] = {}
    for line in (text if url is None else HTTP.get(url + "/metrics").text).splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{")[0].split(" ")[0], float(line.rsplit(" ", 1)[1])
            out[name] = out.get(name, 0.0) + value
    return out


def test_scenario_round_trip():
    sc = Scenario(tokens_per_chunk=[1, 3, 2], status_every={"n": 5, "code": 429}, slots=4)
    assert Scenario.from_dict(json.loads(json.dumps(sc.to_dict()))) == sc
    with pytest.raises(ValueError, match="unknown field"):
        Scenario.from_dict({"tokens_per_sec": 5})
    with pytest.raises(ValueError, match="engine"):
        Scenario(engine="tgi")


def test_timing_follows_schedule(refserver):
    srv = refserver(tokens_per_s=100, ttft_ms=20)
    lines = stream(srv.base_url, chat_body(20), {"X-Request-Id": "t1"})
    (rec,) = srv.truth(1)
    assert rec["request_id"] == "t1" and rec["status"] == 200 and rec["finish_reason"] == "length"
    chunks = rec["chunks"]
    assert [c[1] for c in chunks] == [1] * 20 and [c[2] for c in chunks] == list(range(1, 21))
    gaps = [(b[0] - a[0]) / MS for a, b in zip(chunks, chunks[1:], strict=False)]
    # 10 ms steps, told apart from half or one and a half (a busy host delays
    # steps, by how much is its business: the truth log is what tests compare)
    assert abs(statistics.median(gaps) - 10.0) < 2.5, gaps
    # an absolute schedule: never ahead of it. The grid starts at the first step's
    # start, the first stamp only once its frames are built and written, so the span
    # may be short by that much (0.22 ms seen in CI).
    assert (chunks[-1][0] - chunks[0][0]) / MS > 19 * 10.0 - 1.0
    assert (chunks[0][0] - rec["slot_ns"]) / MS >= 20.0  # the first token never early
    assert rec["recv_ns"] <= rec["role_chunk_ns"] < chunks[0][0] <= chunks[-1][0] < rec["finish_ns"]
    # the client's stamps are on the same clock: each arrives after it was sent
    evs = events(lines)
    assert "content" not in evs[0][1]["choices"][0]["delta"]  # role-only first chunk
    token_evs = [(t, e) for t, e in evs if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert len(token_evs) == 20
    for (t_client, e), (t_send, _, cum) in zip(token_evs, chunks, strict=True):
        assert e["usage"]["completion_tokens"] == cum
        assert 0 < t_client - t_send < 200 * MS
    assert lines[-1][1] == "data: [DONE]"


def test_tokens_per_chunk_pattern(refserver):
    srv = refserver(tokens_per_s=200, tokens_per_chunk=[1, 3, 2])
    evs = events(stream(srv.base_url, chat_body(20)))
    (rec,) = srv.truth(1)
    sizes = [c[1] for c in rec["chunks"]]
    assert sizes == [1, 3, 2, 1, 3, 2, 1, 3, 2, 1, 1]
    assert rec["chunks"][-1][2] == 20
    words = [len(e["choices"][0]["delta"]["content"].split()) for _, e in evs
             if e["choices"] and "content" in e["choices"][0]["delta"]]
    assert words == sizes
    gaps = [(b[0] - a[0]) / MS for a, b in zip(rec["chunks"], rec["chunks"][1:], strict=False)]
    assert abs(statistics.median(gaps) - 5.0) < 0.2  # chunk size does not change the step


@pytest.mark.parametrize("mode", ["continuous", "final", "none"])
def test_usage_modes(refserver, mode):
    srv = refserver(usage_mode=mode, tokens_per_s=1000, ttft_ms=0)
    evs = [e for _, e in events(stream(srv.base_url, chat_body(5)))]
    with_usage = [e for e in evs if "usage" in e]
    final = [e for e in evs if e["choices"] == []]
    if mode == "continuous":
        assert len(with_usage) == len(evs) == 7  # role + 5 tokens + final
        assert [e["usage"]["completion_tokens"] for e in evs] == [0, 1, 2, 3, 4, 5, 5]
    elif mode == "final":
        assert with_usage == final and len(final) == 1
        assert final[0]["usage"]["completion_tokens"] == 5
    else:
        assert with_usage == [] and final == []
    # without continuous_usage_stats in the request, only the final chunk has usage
    body = chat_body(5, stream_options={"include_usage": True})
    evs = [e for _, e in events(stream(srv.base_url, body))]
    assert [e for e in evs if "usage" in e] == ([] if mode == "none" else evs[-1:])


def test_batched_steps_queueing_and_metrics(refserver):
    srv = refserver(tokens_per_s=100, slots=2, dp_ranks=2, ttft_ms=5)
    samples = []

    async def main():
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as client:
            tasks = [asyncio.create_task(astream(client, chat_body(30), f"q{i}"))
                     for i in range(4)]
            while not all(t.done() for t in tasks):
                samples.append(metrics(None, (await client.get("/metrics")).text))
                await asyncio.sleep(0.01)
            await asyncio.gather(*tasks)

    asyncio.run(main())
    # the dp split sums back to the truth: never more than 2 running; 2 queued at first
    pairs = [(m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) for m in samples]
    assert (2, 2) in pairs and all(r <= 2 and r + w <= 4 for r, w in pairs), pairs
    assert pairs.index((2, 2)) < pairs.index((2, 0)), pairs
    text = HTTP.get(srv.base_url + "/metrics").text
    assert 'engine="1"' in text
    recs = srv.truth_by_id(4)
    first = sorted(recs.values(), key=lambda r: r["slot_ns"])
    a, b, c, d = first
    # the two running streams get their steps at the same instant (one step clock)
    a_sends = [t for t, _, _ in a["chunks"]]
    offsets = [min(abs(ta - tb) for ta in a_sends) / MS
               for tb in [t for t, _, _ in b["chunks"] if a_sends[0] <= t <= a_sends[-1]]]
    assert len(offsets) >= 25 and statistics.median(offsets) < 0.3, offsets
    assert sum(o < 1.0 for o in offsets) >= 0.8 * len(offsets), offsets
    # queued requests get a slot when one frees, in FIFO order
    assert c["slot_ns"] >= min(a["finish_ns"], b["finish_ns"])
    records = list(recs.values())
    t = a["chunks"][5][0]
    assert true_running(records, t) == 2 and true_waiting(records, t) == 2
    assert sum(completion_tokens(r) for r in records) == 120
    assert metrics(srv.base_url)["vllm:generation_tokens_total"] == 120


def test_slowdown_per_active(refserver):
    srv = refserver(tokens_per_s=200, slowdown_per_active=1.0, ttft_ms=0)

    async def main():
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as client:
            await asyncio.gather(*(astream(client, chat_body(15), f"s{i}") for i in range(2)))

    asyncio.run(main())
    recs = srv.truth(2)
    start, end = max(r["slot_ns"] for r in recs), min(r["finish_ns"] for r in recs)
    for rec in recs:  # while both run: 5 ms × (1 + 1 × (2 − 1)), told apart from 5 or 15
        sends = [t for t, _, _ in rec["chunks"] if start <= t <= end]
        gaps = [(b - a) / MS for a, b in zip(sends, sends[1:], strict=False)]
        assert len(gaps) >= 5 and abs(statistics.median(gaps) - 10.0) < 2.5, gaps
        assert (sends[-1] - sends[0]) / MS > len(gaps) * 10.0 - 1.0, gaps  # never ahead


def test_variation_fields_are_checked():
    sc = Scenario(slow_first_every=3, slow_first_extra_ms=[50, 100.5], half_speed_every=2,
                  half_speed_steps=[2, 3])
    assert Scenario.from_dict(json.loads(json.dumps(sc.to_dict()))) == sc
    for bad in ({"slow_first_every": 0}, {"half_speed_every": -1},
                {"slow_first_extra_ms": -5}, {"slow_first_extra_ms": []},
                {"half_speed_steps": 0}, {"half_speed_steps": [2, 1.5]}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Scenario(**bad)


def test_slow_first_token_and_half_speed_by_request_number(refserver):
    """Requests 2, 4, 6 start 40 then 80 ms late (the list cycles); 3 and 6 decode
    at every 2nd, then 3rd step, while request 10's stream beside 9 keeps every
    step. Told by the truth log's step numbers, not by time: a busy host runs
    the clock late but never skips or adds a step."""
    srv = refserver(tokens_per_s=200, ttft_ms=10, slow_first_every=2,
                    slow_first_extra_ms=[40, 80], half_speed_every=3, half_speed_steps=[2, 3])
    for n in (1, 12, 12, 12, 12, 12):  # requests 1 .. 6, one at a time
        assert stream(srv.base_url, chat_body(n))
    recs = sorted(srv.truth(6), key=lambda r: r["index"])
    assert [r["first_extra_ms"] for r in recs] == [0, 40, 0, 80, 0, 40]
    assert [r["every_steps"] for r in recs] == [1, 1, 2, 1, 1, 3]
    for rec in recs[1:]:
        due = 10 + rec["first_extra_ms"]
        assert (rec["chunks"][0][0] - rec["slot_ns"]) / MS >= due, rec["index"]  # never early
        steps, sends = rec["steps"], [t for t, _, _ in rec["chunks"]]
        assert len(steps) == 12 and {b - a for a, b in zip(steps, steps[1:], strict=False)} == {
            rec["every_steps"]}, (rec["index"], steps)
        # never ahead: every chunk leaves at or after the time it was due, and the
        # decode steps it was due at are its every_steps × 5 ms apart, or more where
        # a late host made the clock resync (never less)
        dues = rec["due_ns"]
        assert all(t >= due for t, due in zip(sends, dues, strict=True)), rec["index"]
        assert min(b - a for a, b in zip(dues[1:], dues[2:], strict=False)) / MS >= (
            5.0 * rec["every_steps"] - 0.001), (rec["index"], dues)

    # beside a normal stream, a half-speed one (request 9) skips steps; the other does not
    async def main():
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as client:
            await astream(client, chat_body(1), "r7")
            await astream(client, chat_body(1), "r8")
            await asyncio.gather(astream(client, chat_body(20), "r9"),
                                 astream(client, chat_body(40), "r10"))

    asyncio.run(main())
    by_id = srv.truth_by_id(10)
    slow, fast = by_id["r9"], by_id["r10"]
    assert (slow["every_steps"], fast["every_steps"]) == (2, 1)
    for rec, every in ((slow, 2), (fast, 1)):
        steps = rec["steps"]
        assert {b - a for a, b in zip(steps, steps[1:], strict=False)} == {every}, steps
    # one clock: while both decode, each half-speed chunk leaves at a step of the other's
    shared = [k for k in slow["steps"] if k >= fast["steps"][0]]
    assert len(shared) >= 10 and set(shared) <= set(fast["steps"]), (shared, fast["steps"])


def test_prefix_cache_and_prefill(refserver):
    srv = refserver(prefill_tok_per_s=1000, ttft_ms=5, tokens_per_s=1000)
    prompt = " ".join(f"p{i}" for i in range(100))
    for _ in range(2):
        evs = events(stream(srv.base_url, chat_body(2, prompt)))
    cold, warm = srv.truth(2)
    ttft = [(r["chunks"][0][0] - r["slot_ns"]) / MS for r in (cold, warm)]
    assert 105 <= ttft[0] < 155 and 5 <= ttft[1] < ttft[0] - 50, ttft  # never early
    assert (cold["cached"], warm["cached"]) == (False, True)
    assert evs[-1][1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 100
    m = metrics(srv.base_url)
    assert m["vllm:prefix_cache_queries_total"] == 200 and m["vllm:prefix_cache_hits_total"] == 100


def test_context_and_kv_refusals(refserver):
    srv = refserver(max_model_len=100, kv_budget_tokens=160, refuse_over_kv=True,
                    tokens_per_s=50)
    prompt = " ".join(["x"] * 50)
    r = HTTP.post(srv.base_url + "/v1/chat/completions", json=chat_body(60, prompt))
    assert r.status_code == 400 and "maximum context length is 100" in r.json()["error"]["message"]
    assert 'num_gpu_blocks="10"' in HTTP.get(srv.base_url + "/metrics").text

    async def main():
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as client:
            task = asyncio.create_task(astream(client, chat_body(40, prompt), "k1"))
            await asyncio.sleep(0.1)  # k1 reserves 90 of 160 tokens
            refused = await client.post("/v1/chat/completions", json=chat_body(40, prompt))
            await task
            return refused

    assert asyncio.run(main()).status_code == 400
    statuses = sorted(r["status"] for r in srv.truth(3))
    assert statuses == [200, 400, 400]


def test_status_every(refserver):
    srv = refserver(status_every={"n": 2, "code": 429}, ttft_ms=0, tokens_per_s=1000)
    codes = [HTTP.post(srv.base_url + "/v1/chat/completions",
                        json=chat_body(2, stream=False)).status_code for _ in range(4)]
    assert codes == [200, 429, 200, 429]
    recs = srv.truth(4)
    assert [r["fault"] for r in recs] == [None, "status", None, "status"]
    r = HTTP.post(srv.base_url + "/v1/chat/completions", json=chat_body(3, stream=False))
    body = r.json()
    assert body["choices"][0]["message"]["content"].count("w") == 3
    assert body["usage"]["completion_tokens"] == 3


def test_reset_mid_stream_every_second_request(refserver):
    srv = refserver(reset_after_tokens=3, fault_every=2, tokens_per_s=500, ttft_ms=0)
    assert events(stream(srv.base_url, chat_body(6)))[-1][1]["usage"]["completion_tokens"] == 6
    got = []
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        with HTTP.stream("POST", srv.base_url + "/v1/chat/completions",
                          json=chat_body(6)) as r:
            for line in r.iter_lines():
                got.append(line)
    ok, reset = srv.truth(2)
    assert ok["fault"] is None and reset["fault"] == "reset"
    assert reset["chunks"][-1][2] == 3 and reset["finish_reason"] is None
    assert sum('"content"' in g for g in got) == 3


def test_malformed_event_then_continue(refserver):
    srv = refserver(malformed_after_tokens=2, tokens_per_s=500, ttft_ms=0)
    lines = [s for _, s in stream(srv.base_url, chat_body(5))]
    i = lines.index("data: {not json")
    assert sum('"content"' in s for s in lines[:i]) == 2
    assert sum('"content"' in s for s in lines[i:]) == 3 and lines[-1] == "data: [DONE]"
    (rec,) = srv.truth(1)
    assert rec["fault"] == "malformed" and rec["chunks"][-1][2] == 5


def test_stall(refserver):
    srv = refserver(stall_after_tokens=2, stall_s=0.3, tokens_per_s=500, ttft_ms=0)
    token_ts = [t for t, e in events(stream(srv.base_url, chat_body(4)))
                if e["choices"] and "content" in e["choices"][0]["delta"]]
    (rec,) = srv.truth(1)
    sends = [c[0] for c in rec["chunks"]]
    assert 0.3 <= (sends[2] - sends[1]) / 1e9 < 0.45
    assert (token_ts[2] - token_ts[1]) / 1e9 > 0.28
    assert rec["fault"] == "stall" and rec["chunks"][-1][2] == 4


def test_fail_mid_stream(refserver):
    srv = refserver(fail_after_tokens=2, tokens_per_s=500, ttft_ms=0)
    lines = [s for _, s in stream(srv.base_url, chat_body(5))]
    err = json.loads(lines[-2][6:])
    assert err["error"]["code"] == 500 and lines[-1] == "data: [DONE]"
    (rec,) = srv.truth(1)
    assert (rec["fault"], rec["finish_reason"], rec["chunks"][-1][2]) == ("fail", "error", 2)


def test_api_key(refserver):
    srv = refserver(api_key="sekrit")
    for path in ("/v1/models", "/metrics", "/version"):
        r = HTTP.get(srv.base_url + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = HTTP.post(srv.base_url + "/v1/chat/completions", json=chat_body(2))
    assert r.status_code == 401
    assert HTTP.get(srv.base_url + "/health").status_code == 200
    good = {"Authorization": "Bearer sekrit"}
    assert HTTP.get(srv.base_url + "/v1/models", headers=good).status_code == 200
    last = events(stream(srv.base_url, chat_body(2), good))[-1][1]
    assert last["usage"]["completion_tokens"] == 2


def test_client_disconnect_cancels_and_frees_slot(refserver):
    srv = refserver(slots=1, tokens_per_s=200, ttft_ms=0)

    async def main():
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as client:
            async def quitter():
                async with client.stream("POST", "/v1/chat/completions", json=chat_body(1000),
                                         headers={"X-Request-Id": "quit"}) as r:
                    n = 0
                    async for line in r.aiter_lines():
                        n += '"content"' in line
                        if n == 3:
                            return
            task = asyncio.create_task(quitter())
            await asyncio.sleep(0.005)
            waiter = await astream(client, chat_body(3), "next")
            await task
            return waiter

    assert events(asyncio.run(main()))[-1][1]["usage"]["completion_tokens"] == 3
    recs = srv.truth_by_id(2)
    quit_, nxt = recs["quit"], recs["next"]
    assert quit_["cancelled"] and quit_["finish_reason"] is None
    assert 3 <= quit_["chunks"][-1][2] < 100
    assert nxt["slot_ns"] >= quit_["finish_ns"] and not nxt["cancelled"]


def test_reasoning_and_loop(refserver):
    srv = refserver(reasoning_tokens=3, loop_after_tokens=4, loop_period=2, tokens_per_s=1000,
                    ttft_ms=0)
    deltas = [e["choices"][0]["delta"] for _, e in events(stream(srv.base_url, chat_body(13)))
              if e["choices"]][1:]
    assert all("reasoning_content" in d for d in deltas[:3])
    content = [d["content"] for d in deltas[3:]]
    assert len(content) == 10 and len(set(content[:4])) == 4
    assert content[4:] == content[4:6] * 3  # period 2 after 4 content tokens
    srv2 = refserver(loop_after_tokens=2, loop_period=3, loop_in_reasoning=True,
                     tokens_per_s=1000, ttft_ms=0)
    deltas = [e["choices"][0]["delta"] for _, e in events(stream(srv2.base_url, chat_body(11)))
              if e["choices"]][1:]
    reasoning = [d["reasoning_content"] for d in deltas]
    assert len(reasoning) == 11 and reasoning[2:5] * 3 == reasoning[2:11]


def test_engine_endpoints(refserver):
    vllm = refserver()
    tok = HTTP.post(vllm.base_url + "/tokenize", json={"model": "ref", "prompt": "a b c"}).json()
    assert tok["count"] == 3 and len(tok["tokens"]) == 3 and tok["max_model_len"] == 32768
    msgs = {"model": "ref", "messages": [{"role": "user", "content": "a b"},
                                         {"role": "assistant", "content": "c"}]}
    assert HTTP.post(vllm.base_url + "/tokenize", json=msgs).json()["count"] == 3
    assert HTTP.get(vllm.base_url + "/version").json() == {"version": "ref-0.1"}
    generic = refserver(engine="generic")
    assert "max_model_len" not in HTTP.get(generic.base_url + "/v1/models").json()["data"][0]
    for path in ("/metrics", "/health", "/version"):
        assert HTTP.get(generic.base_url + path).status_code == 404
    llama = refserver(engine="llamacpp", slots=4, max_model_len=4096)
    props = HTTP.get(llama.base_url + "/props").json()
    assert props["default_generation_settings"]["n_ctx"] == 4096 and props["total_slots"] == 4
    assert len(HTTP.get(llama.base_url + "/slots").json()) == 4
    assert len(HTTP.post(llama.base_url + "/tokenize", json={"content": "a b c d"})
               .json()["tokens"]) == 4
    assert HTTP.get(llama.base_url + "/health").json() == {"status": "ok"}
    stream(llama.base_url, chat_body(3))
    m = metrics(llama.base_url)
    assert m["llamacpp:tokens_predicted_total"] == 3
    assert m["llamacpp:requests_processing"] == 0 and m["llamacpp:requests_deferred"] == 0


def test_sglang_endpoints(refserver):
    """The SGLang mode (dialects.py): server info under both names, `sglang:`
    gauges summed over data-parallel ranks, several tokens per chunk, and
    its flat error shape for a request longer than the context."""
    sg = refserver(engine="sglang", kv_budget_tokens=5000, dp_ranks=2, tokens_per_chunk=[2, 3],
                   max_model_len=4096)
    info = HTTP.get(sg.base_url + "/get_server_info").json()
    assert info == HTTP.get(sg.base_url + "/server_info").json()
    assert (info["max_total_num_tokens"], info["context_length"], info["version"]) == (
        5000, 4096, "ref-0.1")
    assert HTTP.get(sg.base_url + "/get_model_info").json()["is_generation"] is True
    entry = HTTP.get(sg.base_url + "/v1/models").json()["data"][0]
    assert entry["owned_by"] == "sglang" and entry["max_model_len"] == 4096
    deltas = [e["choices"][0]["delta"].get("content", "") for _, e in
              events(stream(sg.base_url, chat_body(10))) if e["choices"]]
    assert [len(d.split()) for d in deltas if d] == [2, 3, 2, 3]
    m = metrics(sg.base_url)
    assert m["sglang:generation_tokens_total"] == 10 and m["sglang:num_running_reqs"] == 0
    assert m["sglang:max_total_num_tokens"] == 5000
    page = HTTP.get(sg.base_url + "/metrics").text
    assert page.count("sglang:num_queue_reqs{") == 2  # one label set per dp_rank
    refused = HTTP.post(sg.base_url + "/v1/chat/completions", json=chat_body(5000))
    body = refused.json()
    assert refused.status_code == 400 and body["object"] == "error" and "error" not in body
    assert "maximum context length of 4096 tokens" in body["message"]
    assert HTTP.get(refserver(engine="sglang", metrics_enabled=False).base_url
                    + "/metrics").status_code == 404


def test_completions_endpoint_keep_alive_and_role_timing(refserver):
    srv = refserver(role_chunk="first_token", tokens_per_s=500, ttft_ms=5)
    with httpx.Client(base_url=srv.base_url, timeout=10) as client:  # one connection
        body = {"model": "ref", "prompt": "one two three", "max_tokens": 4, "stream": True,
                "stream_options": {"include_usage": True}}
        with client.stream("POST", "/v1/completions", json=body) as r:
            evs = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
        assert [len(e["choices"][0]["text"].split()) for e in evs[:-1]] == [1, 1, 1, 1]
        assert evs[-1]["usage"]["prompt_tokens"] == 3 and evs[-1]["choices"] == []
        plain = client.post("/v1/completions", json={**body, "stream": False}).json()
        assert len(plain["choices"][0]["text"].split()) == 4
        with client.stream("POST", "/v1/chat/completions", json=chat_body(2)) as r:
            assert sum(1 for x in r.iter_lines() if x.startswith("data: ")) == 5
    recs = srv.truth(3)
    assert [r["endpoint"] for r in recs] == ["completions", "completions", "chat"]
    assert recs[0]["role_chunk_ns"] is None  # completions have no role chunk
    chat = recs[2]
    assert chat["chunks"][0][0] - chat["role_chunk_ns"] < MS  # sent with the first token
    assert chat["role_chunk_ns"] - chat["slot_ns"] >= 5 * MS


def test_kill_and_restart_same_port(refserver):
    srv = refserver(tokens_per_s=1000, ttft_ms=0)
    stream(srv.base_url, chat_body(2))
    port = srv.port
    srv.kill()
    with pytest.raises(httpx.ConnectError):
        HTTP.get(srv.base_url + "/v1/models")
    srv.restart()
    assert srv.port == port and srv.alive
    stream(srv.base_url, chat_body(2))
    assert len(srv.truth(2)) == 2
    assert srv.stop() == 0
