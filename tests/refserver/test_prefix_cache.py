"""The reference server's block-granular prefix cache: the pure cache (prefix_cache.py)
and, over HTTP, what each engine dialect publishes of it against the truth log."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.refserver.harness import refserver_fixture  # noqa: F401  (the `refserver` fixture)
from tests.refserver.prefix_cache import PrefixCache
from tests.refserver.scenario import Scenario

MS = 1_000_000
HTTP = httpx.Client(timeout=10)


def words(tag: str, n: int) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def text(tag: str, n: int) -> str:
    return " ".join(words(tag, n))


def ask(url: str, messages: list[dict], stream: bool = True, usage: bool = True) -> dict[str, Any]:
    """One chat request (max_tokens 1); streaming: the last event holding `usage` or
    `timings` merged with the finish chunk; else the whole answer."""
    body: dict[str, Any] = {"model": "ref", "messages": messages, "max_tokens": 1, "stream": stream}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    if not stream:
        r = HTTP.post(url + "/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()
    out: dict[str, Any] = {}
    with HTTP.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                ev = json.loads(line[6:])
                out.update({k: v for k, v in ev.items() if k in ("usage", "timings")})
    return out


def group(tag: str, shared: int, tail: int, req: str = "u") -> list[dict]:
    """A system prompt of `shared` words (the group's prefix) and a user tail of `tail` words."""
    return [{"role": "system", "content": text(tag, shared)},
            {"role": "user", "content": text(f"{tag}{req}x", tail)}]


def cached_field(ans: dict) -> int | None:
    return (ans.get("usage") or {}).get("prompt_tokens_details", {}).get("cached_tokens")


def metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in HTTP.get(url + "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{")[0].split(" ")[0], float(line.rsplit(" ", 1)[1])
            out[name] = out.get(name, 0.0) + value
    return out


# ---- the pure cache ----------------------------------------------------


def test_block_granularity_and_last_token_computed():
    c = PrefixCache(4)
    a = words("a", 10)
    assert c.lookup(a, 9) == 0 and c.store(a) == 8 and c.tokens == 8  # whole blocks only
    assert c.lookup(a, 9) == 8
    assert c.lookup(a[:8], 7) == 4  # a prompt of exactly two stored blocks: the last is computed
    assert c.lookup(a[:5] + ["z"] * 5, 9) == 4  # differs inside block 2
    assert c.lookup(["z"] + a[1:], 9) == 0  # differs in block 1: nothing after it counts
    b = ["q"] * 4 + a[4:]  # block 2's words after another first block: a different block
    assert c.lookup(b, 9) == 0


def test_lru_evicts_least_recent_and_tails_first():
    c = PrefixCache(4, capacity_tokens=24)  # 6 blocks
    groups = {g: words(g, 8) for g in "ABCD"}
    for g in "ABC":
        c.store(groups[g])
    assert c.lookup(groups["A"] + ["t"], 8) == 8  # A is now the most recent
    c.store(groups["D"])  # evicts B's two blocks, the least recently used
    assert c.evicted == 2
    assert [c.lookup(groups[g] + ["t"], 8) for g in "CAB"] == [8, 8, 0]
    small = PrefixCache(4, capacity_tokens=12)  # 3 blocks
    small.store(groups["A"])
    small.store(groups["B"])  # one block must go: A's tail, never A's head before it
    assert small.lookup(groups["A"] + ["t"], 8) == 4 and small.lookup(groups["B"] + ["t"], 8) == 8


def test_prompt_longer_than_the_cache_keeps_its_head():
    c = PrefixCache(4, capacity_tokens=8)
    long = words("l", 20)
    assert c.store(long) == 8 and c.lookup(long, 19) == 8
    c.clear()
    assert c.tokens == 0 and c.lookup(long, 19) == 0


def test_scenario_checks_prefix_fields():
    with pytest.raises(ValueError, match="cache_hit_every forces"):
        Scenario(prefix_cache_block=16, cache_hit_every=2)
    with pytest.raises(ValueError, match="prefix_cache_capacity_tokens .* needs prefix_cache_block"):
        Scenario(prefix_cache_capacity_tokens=100)
    with pytest.raises(ValueError, match="prefix_cache_block must be >= 1"):
        Scenario(prefix_cache_block=0)
    sc = Scenario(prefix_cache_block=8, prefix_counters_lie=0.5, prefix_cache_flush=False)
    assert Scenario.from_dict(json.loads(json.dumps(sc.to_dict()))) == sc


# ---- over HTTP ---------------------------------------------------------


def test_vllm_shared_system_prompt_reuses_whole_blocks(refserver):
    srv = refserver(prefix_cache_block=16, prefill_tok_per_s=500, ttft_ms=5, tokens_per_s=1000)
    first = ask(srv.base_url, group("g", 40, 10, "1"))
    second = ask(srv.base_url, group("g", 40, 10, "2"))  # 40 shared words: blocks 1-2 (32)
    assert cached_field(first) == 0 and cached_field(second) == 32
    cold, warm = srv.truth(2)
    assert (cold["cached_tokens"], warm["cached_tokens"]) == (0, 32)
    assert (cold["cached"], warm["cached"]) == (False, True)
    # prefill: (50 - cached) tokens at 500 tok/s after 5 ms: 105 ms cold, 41 ms warm (never early)
    ttft = [(r["chunks"][0][0] - r["slot_ns"]) / MS for r in (cold, warm)]
    assert 105 <= ttft[0] and 41 <= ttft[1] < 90, ttft
    m = metrics(srv.base_url)
    assert m["vllm:prefix_cache_hits_total"] == 32 and m["vllm:prefix_cache_queries_total"] == 100
    info = next(ln for ln in HTTP.get(srv.base_url + "/metrics").text.splitlines()
                if ln.startswith("vllm:cache_config_info{"))
    assert 'block_size="16"' in info and 'enable_prefix_caching="True"' in info
    assert f'num_gpu_blocks="{16 * 32768 // 16}"' in info  # no budget, no capacity: 16 contexts


def test_conversation_history_is_a_prefix_of_the_next_turn(refserver):
    srv = refserver(engine="sglang", prefix_cache_block=4)
    msgs = [{"role": "system", "content": text("sys", 6)}]
    got, prompts = [], []
    for turn in range(1, 4):
        msgs.append({"role": "user", "content": text(f"u{turn}_", 5)})
        got.append(cached_field(ask(srv.base_url, msgs)))
        prompts.append(sum(len(m["content"].split()) for m in msgs))
        msgs.append({"role": "assistant", "content": text(f"a{turn}_", 3)})
    # turn k reuses the whole blocks of turn k-1's prompt: 11 -> 8, 19 -> 16
    assert prompts == [11, 19, 27] and got == [0, 8, 16]
    assert [r["cached_tokens"] for r in srv.truth(3)] == got
    m = metrics(srv.base_url)
    assert m["sglang:cached_tokens_total"] == 24 and m["sglang:prompt_tokens_total"] == 57
    info = HTTP.get(srv.base_url + "/get_server_info").json()
    assert info["page_size"] == 4


def test_eviction_under_pressure_is_least_recently_used(refserver):
    srv = refserver(prefix_cache_block=4, prefix_cache_capacity_tokens=24)
    order = ["A", "B", "C", "A", "D", "C", "A", "B"]
    got = [cached_field(ask(srv.base_url, group(g, 8, 2, str(i)))) for i, g in enumerate(order)]
    # A, B, C fill the 6 blocks; A again is a hit and the most recent; D evicts B (the
    # least recent, not A, the oldest stored); C and A still hit; B is gone
    assert got == [0, 0, 0, 8, 0, 8, 8, 0]
    assert [r["cached_tokens"] for r in srv.truth(len(order))] == got
    assert metrics(srv.base_url)["vllm:prefix_cache_hits_total"] == 24


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_counters_that_lie_and_a_silent_cache(refserver, engine):
    hits = "vllm:prefix_cache_hits_total" if engine == "vllm" else "sglang:cached_tokens_total"
    liar = refserver(engine=engine, prefix_cache_block=16, prefix_counters_lie=0.25)
    got = [cached_field(ask(liar.base_url, group("g", 40, 10, str(i)))) for i in range(2)]
    assert got == [0, 32] and [r["cached_tokens"] for r in liar.truth(2)] == [0, 32]
    assert metrics(liar.base_url)[hits] == 8  # the counters say a quarter of the truth
    silent = refserver(engine=engine, prefix_cache_block=16, prefix_cache_silent_off=True)
    got = [cached_field(ask(silent.base_url, group("g", 40, 10, str(i)))) for i in range(2)]
    assert got == [0, 0] and [r["cached_tokens"] for r in silent.truth(2)] == [0, 0]
    assert metrics(silent.base_url)[hits] == 0
    if engine == "vllm":  # it claims to cache all the same
        assert 'enable_prefix_caching="True"' in HTTP.get(silent.base_url + "/metrics").text


def test_counters_only_and_reuse_not_verifiable(refserver):
    quiet = refserver(prefix_cache_block=16, report_cached_tokens=False)
    got = [cached_field(ask(quiet.base_url, group("g", 40, 10, str(i)))) for i in range(2)]
    assert got == [0, 0] and quiet.truth(2)[1]["cached_tokens"] == 32
    assert metrics(quiet.base_url)["vllm:prefix_cache_hits_total"] == 32  # only the counters tell
    blind = refserver(prefix_cache_block=16, prompt_tokens_details=False, prefix_counters=False)
    answers = [ask(blind.base_url, group("g", 40, 10, str(i))) for i in range(2)]
    assert all("prompt_tokens_details" not in a["usage"] for a in answers)
    m = metrics(blind.base_url)
    assert not any(name.startswith("vllm:prefix_cache") for name in m) and m["vllm:prompt_tokens_total"]
    assert blind.truth(2)[1]["cached_tokens"] == 32  # the cache worked; nothing said so
    dark = refserver(prefix_cache_block=16, metrics_enabled=False)
    assert HTTP.get(dark.base_url + "/metrics").status_code == 404


@pytest.mark.parametrize("engine,path", [("vllm", "/reset_prefix_cache"), ("sglang", "/flush_cache")])
def test_flush_empties_the_cache_unless_absent(refserver, engine, path):
    srv = refserver(engine=engine, prefix_cache_block=16)
    assert cached_field(ask(srv.base_url, group("g", 40, 10, "1"))) == 0
    assert cached_field(ask(srv.base_url, group("g", 40, 10, "2"))) == 32
    assert HTTP.post(srv.base_url + path).status_code == 200
    assert cached_field(ask(srv.base_url, group("g", 40, 10, "3"))) == 0
    assert cached_field(ask(srv.base_url, group("g", 40, 10, "4"))) == 32
    kept = refserver(engine=engine, prefix_cache_block=16, prefix_cache_flush=False)
    assert HTTP.post(kept.base_url + path).status_code == 404
    other = "/flush_cache" if engine == "vllm" else "/reset_prefix_cache"
    assert HTTP.post(srv.base_url + other).status_code == 404  # each engine its own path


def test_llamacpp_timings(refserver):
    srv = refserver(engine="llamacpp", prefix_cache_block=1, prefix_counters_lie=1.0)
    msgs = group("g", 40, 10)
    cold = ask(srv.base_url, msgs)
    assert cold["timings"]["cache_n"] == 0 and cold["timings"]["prompt_n"] == 50
    warm = ask(srv.base_url, msgs)  # the same prompt: all but its last token reused
    assert (warm["timings"]["cache_n"], warm["timings"]["prompt_n"], cached_field(warm)) == (49, 1, 49)
    no_usage = ask(srv.base_url, msgs, usage=False)  # timings ride on the finish chunk
    assert "usage" not in no_usage and no_usage["timings"]["cache_n"] == 49
    whole = ask(srv.base_url, group("g", 40, 10, "v"), stream=False)  # shares the system prompt
    assert whole["timings"]["cache_n"] == 40 and whole["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 40}
    assert [r["cached_tokens"] for r in srv.truth(4)] == [0, 49, 49, 40]
    liar = refserver(engine="llamacpp", prefix_cache_block=1, prefix_counters_lie=2.0)
    ask(liar.base_url, msgs)
    t = ask(liar.base_url, msgs)["timings"]
    assert (t["cache_n"], t["prompt_n"]) == (98, 1)  # cache_n + prompt_n no longer the prompt
    old = refserver(engine="llamacpp", prefix_cache_block=1, prefix_counters=False)
    ask(old.base_url, msgs)
    t = ask(old.base_url, msgs)["timings"]
    assert "cache_n" not in t and t["prompt_n"] == 1  # an older llama-server: no cache_n


def test_all_or_nothing_cache_logs_cached_tokens(refserver):
    """Without prefix_cache_block the old cache stands: a hit is the whole prompt."""
    srv = refserver(prefix_cache_words=8)
    for i in range(2):
        ask(srv.base_url, group("g", 40, 10, str(i)))
    assert [r["cached_tokens"] for r in srv.truth(2)] == [0, 50]
    assert 'block_size' not in HTTP.get(srv.base_url + "/metrics").text  # no budget: no row, as before
