"""Pure pieces of the collector: plan, chunk parsing, loops, redaction."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from bench.core.plan import (
    PlanError,
    fit_context,
    make_plan,
    parse_contexts,
    parse_tokens,
)
from bench.measure.chunks import parse_events
from bench.measure.repetition import detect_repetition
from bench.server.answers import BadAnswer, integer, show, transport
from bench.server.prometheus_text import parse_metrics
from rundir.contract import COUNT_CHUNKS, COUNT_USAGE_CONTINUOUS, OVER_CAPACITY, PENDING
from rundir.redact import REDACTED, redact
from rundir.words import context_label


def test_largest_context_rule() -> None:
    assert context_label(fit_context(262144, 4096, 262144)) == "251K"
    assert fit_context(131072, 4096, 262144) == 131072
    assert fit_context(32768, 4096, 32768) is None  # room 28,608 < 90% of 32,768
    assert fit_context(30000, 1024, 32768) == 30000


def test_parse_tokens_and_errors() -> None:
    assert parse_tokens("8k", "--x") == 8192 and parse_tokens("1024", "--x") == 1024
    assert parse_contexts("1k,max") == [1024, "max"]
    with pytest.raises(PlanError, match="--contexts"):
        parse_contexts("8q")


def test_plan_skips_over_capacity_from_kv_budget() -> None:
    plan = make_plan(contexts=[8192, 16384], concurrency=[1, 2, 4], max_output=4096,
                     max_model_len=65536, kv_budget=49000)
    status = {(c.context, c.concurrency): c.status for c in plan.cells if c.phase == "decode"}
    assert status[(8192, 4)] == OVER_CAPACITY  # 4 × 12,288 = 49,152 > 49,000
    assert status[(8192, 2)] == PENDING
    assert status[(16384, 4)] == OVER_CAPACITY
    assert status[(16384, 2)] == PENDING  # 2 × 20,480 = 40,960


def test_default_plan_adds_largest_context() -> None:
    plan = make_plan(contexts=None, concurrency=None, max_output=4096,
                     max_model_len=262144, kv_budget=None)
    assert [context_label(c) for c in plan.contexts] == ["8K", "16K", "32K", "64K", "128K", "251K"]
    assert plan.concurrency == [1, 2, 4, 8, 16, 32, 64, 128]


def test_default_plan_on_a_32k_model() -> None:
    # 32K itself does not fit with 4,096 output (room 28,608 < 90%): dropped,
    # and the largest that fits is the room, labelled 27K.
    plan = make_plan(contexts=None, concurrency=None, max_output=4096,
                     max_model_len=32768, kv_budget=131072)
    assert [context_label(c) for c in plan.contexts] == ["8K", "16K", "27K"]
    assert any(d.startswith("32K") for d in plan.dropped)
    assert any(d.startswith("64K") for d in plan.dropped)


def _ev(ns: int, obj: dict) -> tuple[int, bytes]:
    return ns, json.dumps(obj).encode()


def test_usage_counts_multi_token_chunks() -> None:
    events = [
        _ev(1, {"choices": [{"delta": {"role": "assistant"}}], "usage": {"completion_tokens": 0}}),
        _ev(2, {"choices": [{"delta": {"content": "ab"}}], "usage": {"completion_tokens": 3}}),
        _ev(3, {"choices": [{"delta": {"content": "c"}, "finish_reason": "length"}],
                "usage": {"completion_tokens": 4, "prompt_tokens": 9}}),
        _ev(4, {"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 9,
                                          "prompt_tokens_details": {"cached_tokens": 8}}}),
    ]
    p = parse_events(events)
    assert p.counting == COUNT_USAGE_CONTINUOUS
    assert p.chunk_tokens.tolist() == [0, 3, 4, 4]
    assert (p.prompt_tokens, p.cached_tokens, p.finish_reason) == (9, 8, "length")


def test_fallback_counts_text_chunks_and_keeps_reasoning() -> None:
    events = [
        _ev(1, {"choices": [{"delta": {"role": "assistant", "content": None}}]}),
        _ev(2, {"choices": [{"delta": {"reasoning_content": "hm"}}]}),
        _ev(3, {"choices": [{"delta": {"content": "x"}}]}),
        _ev(4, {"choices": [], "usage": {"completion_tokens": 2}}),
    ]
    p = parse_events(events)
    assert p.counting == COUNT_CHUNKS
    assert p.chunk_tokens.tolist() == [0, 1, 2, 2]
    assert p.reasoning == "hm" and p.content == "x" and p.final_usage_tokens == 2


def test_malformed_event_is_an_error() -> None:
    p = parse_events([(1, b"{not json")])
    assert p.error and p.error.startswith("malformed SSE event")


def test_loop_detector() -> None:
    rng = random.Random(1)
    prose = " ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat", "today"]) for _ in range(800))
    assert detect_repetition(prose) is None
    assert detect_repetition(prose[:500] + "I will repeat this. " * 30) == len("I will repeat this. ")
    assert detect_repetition("a" * 300) == 1
    assert detect_repetition("short") is None


@pytest.mark.parametrize("text", [
    "serve m --api-key s3cr3t-value --port 1",
    "serve m --api-key=s3cr3t-value",
    "env OPENAI_API_KEY=s3cr3t-value vllm serve m",
    "env HF_TOKEN='s3cr3t-value' x",
    "curl -H 'Authorization: Bearer s3cr3t-value'",
    "http://user:s3cr3t-value@host/v1",
])
def test_redaction(text: str) -> None:
    out = redact(text)
    assert "s3cr3t-value" not in out and REDACTED in out


def test_redaction_of_literal_secret_and_token_shapes() -> None:
    assert "mykey-123456" not in redact("error mykey-123456 here", ["mykey-123456"])
    assert "sk-abcdefghijklmnopqrstu" not in redact("x sk-abcdefghijklmnopqrstu y")


def test_redaction_leaves_ordinary_words_alone() -> None:
    text = "a 299-token vocabulary, max-tokens 4096, the key-value cache"
    assert redact(text) == text


# ---- server answers (bench.server.answers, bench.server.prometheus_text) ----------------------------


@pytest.mark.parametrize("value", [True, False, "5", "", -1, 1.5, float("nan"), float("inf"),
                                   float("-inf"), 2**60, 1e300, None, [1], {"n": 1}],
                         ids=repr)
def test_answer_integer_rejects_with_endpoint_and_field(value) -> None:
    with pytest.raises(BadAnswer) as err:
        integer(value, "/x", "f")
    assert str(err.value).startswith("/x: field f: expected a non-negative integer, got ")
    assert "\n" not in str(err.value)


def test_answer_integer_accepts_whole_numbers() -> None:
    assert (integer(0, "/x", "f"), integer(5, "/x", "f"), integer(4096.0, "/x", "f")) == (0, 5, 4096)


def test_answer_messages_carry_no_credentials() -> None:
    line = transport(httpx.ConnectError("failed for http://al:pw-secret-99@h:1/x\nmore"))
    assert line.startswith("ConnectError: ") and "pw-secret-99" not in line and "\n" not in line
    assert "sk-abcdefghijklmnop0123" not in show("Bearer sk-abcdefghijklmnop0123")


@pytest.mark.parametrize("page", ["<html><body>502</body></html>", "\x00\x01", "a{b=\"c} 1",
                                  "# TYPE a\n", "{} 1", "a 0x10", "a{=\"x\"} 1"], ids=repr)
def test_parse_metrics_never_raises(page) -> None:
    good = 'vllm:num_requests_running{engine="0"} 2\n'
    assert [s.value for s in parse_metrics(page + "\n" + good)] == [2.0]


def test_an_import_error_inside_the_run_is_raised_once() -> None:
    """bench/eventloop.asyncio_run: an ImportError raised by the run itself
    (a lazily imported module missing) is the run's error. It was taken for
    uvloop missing, and the spent coroutine run again on asyncio's loop
    ("cannot reuse already awaited coroutine")."""
    from bench.core.eventloop import asyncio_run

    ran = []

    async def run() -> None:
        ran.append(1)
        raise ImportError("no module named 'missing'")

    with pytest.raises(ImportError, match="missing"):
        asyncio_run(run())
    assert ran == [1]
