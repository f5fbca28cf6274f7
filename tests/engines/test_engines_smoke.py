"""Smoke tests of the real engines: the facts the collector relies on.

They pin what the collector assumes about llama-server and vLLM (usage in a
final chunk, exact max_tokens with the tiny models, metric names, tokenize
endpoints), so an engine upgrade that breaks an assumption fails here first.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bench.server.engines import probe_server
from rundir.contract import METRIC_RUNNING, METRIC_WAITING
from tests.support.engine_expectations import REAL, EngineRow
from tests.support.real_engines import EngineProcess

PROMPT = "Write a long story about the weather in the mountains."


def stream_chat(engine: EngineProcess, max_tokens: int, **extra: Any) -> list[dict[str, Any]]:
    """POST a streaming chat completion and return its decoded SSE events."""
    body = {
        "model": engine.model_name,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "stream": True,
        **extra,
    }
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "POST", f"{engine.base_url}/v1/chat/completions", json=body, timeout=120.0
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                break
            events.append(json.loads(data))
    return events


def content_of(events: list[dict[str, Any]]) -> list[str]:
    """The non-empty content deltas, one per chunk that carried text."""
    pieces = []
    for event in events:
        for choice in event.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                pieces.append(text)
    return pieces


def finish_reasons(events: list[dict[str, Any]]) -> list[str]:
    return [
        c["finish_reason"] for e in events for c in e.get("choices") or [] if c.get("finish_reason")
    ]


def is_printable_ascii(text: str) -> bool:
    return all(0x20 <= ord(ch) <= 0x7E for ch in text)


@pytest.mark.engine_llama
def test_llama_stream_reaches_max_tokens(llama_server: EngineProcess) -> None:
    events = stream_chat(llama_server, 48, stream_options={"include_usage": True})
    pieces = content_of(events)
    assert finish_reasons(events) == ["length"]
    # The usage-only chunk comes last, with no choices.
    assert events[-1]["choices"] == []
    assert events[-1]["usage"]["completion_tokens"] == 48
    # On llama.cpp with the tiny model one chunk carries exactly one token.
    assert len(pieces) == 48
    assert is_printable_ascii("".join(pieces))


@pytest.mark.engine_llama
def test_llama_metrics_and_tokenize(llama_server: EngineProcess) -> None:
    metrics = httpx.get(f"{llama_server.base_url}/metrics", timeout=10.0)
    assert metrics.status_code == 200
    assert "llamacpp:requests_processing" in metrics.text

    tokens = httpx.post(
        f"{llama_server.base_url}/tokenize",
        json={"content": "the weather and the mountains"},
        timeout=10.0,
    )
    ids = tokens.json()["tokens"]
    assert ids and all(isinstance(i, int) for i in ids)
    back = httpx.post(f"{llama_server.base_url}/detokenize", json={"tokens": ids}, timeout=10.0)
    assert back.json()["content"] == "the weather and the mountains"


@pytest.mark.engine_vllm
def test_vllm_metrics(vllm_server: EngineProcess) -> None:
    text = httpx.get(f"{vllm_server.base_url}/metrics", timeout=10.0).text
    assert "vllm:cache_config_info" in text
    assert "vllm:num_requests_running" in text


@pytest.mark.engine_vllm
def test_vllm_tokenize_counts(vllm_server: EngineProcess) -> None:
    response = httpx.post(
        f"{vllm_server.base_url}/tokenize",
        json={"model": "tiny", "prompt": "the weather and the mountains"},
        timeout=10.0,
    )
    body = response.json()
    assert response.status_code == 200, body
    assert body["count"] == len(body["tokens"]) > 0
    assert body["max_model_len"] == 32768


@pytest.mark.engine_vllm
def test_vllm_stream_usage_reaches_max_tokens(vllm_server: EngineProcess) -> None:
    events = stream_chat(
        vllm_server,
        40,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    counts = [e["usage"]["completion_tokens"] for e in events if e.get("usage")]
    assert counts == sorted(counts)
    assert counts[-1] == 40
    assert finish_reasons(events) == ["length"]
    assert is_printable_ascii("".join(content_of(events)))


@pytest.mark.engine_llama
@pytest.mark.engine_vllm
def test_engines_tokenize_alike(llama_server: EngineProcess, vllm_server: EngineProcess) -> None:
    """Both tiny models share one tokenizer, so prompt sizes mean the same."""
    text = "The rain in the mountains, and 42 clouds!\nNew line."
    llama_ids = httpx.post(
        f"{llama_server.base_url}/tokenize", json={"content": text}, timeout=10.0
    ).json()["tokens"]
    vllm_ids = httpx.post(
        f"{vllm_server.base_url}/tokenize",
        json={"model": "tiny", "prompt": text, "add_special_tokens": False},
        timeout=10.0,
    ).json()["tokens"]
    assert llama_ids == vllm_ids


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=getattr(pytest.mark, r.real_marker), id=r.dialect) for r in REAL])
def test_real_engine_is_its_profile(request: pytest.FixtureRequest, row: EngineRow) -> None:
    """The probe picks the engine's profile from its real answers, with no
    note, and finds the running and waiting gauges under the profile's names
    (each real engine's row in tests/support/engine_expectations.py)."""
    engine: EngineProcess = request.getfixturevalue(row.real_fixture)
    info = probe_server(engine.base_url, None)
    assert (info.engine, info.tokenize, info.notes) == (row.profile.name, row.tokenize, [])
    for gauge in (METRIC_RUNNING, METRIC_WAITING):
        assert info.gauges[gauge] == row.profile.gauges[gauge]
    # its own budget where the engine tells one; else unknown, and the source says why
    assert (info.kv_budget is not None) == (row.kv_budget is not None) and info.kv_budget_source
