"""Every server answer parsed defensively (issue 9, item 4).

The reference server's `endpoint_answers` makes one endpoint answer a
scripted status and raw body (or reset, close, answer late). Required facts
(the model id, prompt sizing) that come back malformed end in one
`ServerError` line naming the endpoint and the field; optional ones (max
model length, KV budget, version, gauges) become unknown with a note, never
a wrong number. The metrics sampler's side: tests/collector/test_sampler_answers.py.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from bench.server.engines import ServerError, ServerInfo, probe_server
from bench.workload.prompts import PromptFactory
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

HTML = "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
DEEP = "[" * 100_000 + "]" * 100_000


def body(obj) -> str:
    return json.dumps(obj)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


# ---- /v1/models: the model id is required ---------------------------------

MODELS_BAD = [
    # (id, answer, expected in the one line)
    ("data-of-strings", {"body": body({"data": ["x"]})}, "field data[0]: expected a model object"),
    ("entry-without-id", {"body": body({"data": [{"object": "model"}]})}, "field data[0].id"),
    ("id-number", {"body": body({"data": [{"id": 5}]})}, "field data[0].id"),
    ("id-empty", {"body": body({"data": [{"id": ""}]})}, "field data[0].id"),
    ("id-blank", {"body": body({"data": [{"id": "   "}]})}, "field data[0].id"),
    ("id-null", {"body": body({"data": [{"id": None}]})}, "field data[0].id"),
    ("id-list", {"body": body({"data": [{"id": ["ref"]}]})}, "field data[0].id"),
    ("id-object", {"body": body({"data": [{"id": {"name": "ref"}}]})}, "field data[0].id"),
    ("id-with-newline", {"body": body({"data": [{"id": "ref\nx"}]})}, "field data[0].id"),
    ("id-too-long", {"body": body({"data": [{"id": "m" * 5000}]})}, "field data[0].id"),
    ("second-entry-broken", {"body": body({"data": [{"id": "ref"}, 7]})}, "field data[1]"),
    ("data-empty", {"body": body({"data": []})}, "field data: expected a non-empty list"),
    ("data-object", {"body": body({"data": {"id": "ref"}})}, "field data: expected a non-empty list"),
    ("data-string", {"body": body({"data": "ref"})}, "field data: expected a non-empty list"),
    ("data-missing", {"body": body({"object": "list"})}, "field data: expected a non-empty list"),
    ("body-list", {"body": body([{"id": "ref"}])}, "expected a JSON object"),
    ("body-null", {"body": "null"}, "expected a JSON object"),
    ("body-number", {"body": "42"}, "expected a JSON object"),
    ("body-empty", {"body": ""}, "got an empty body"),
    ("body-html", {"body": HTML, "content_type": "text/html"}, "got an HTML page"),
    ("body-html-unknown-charset", {"body": HTML, "content_type": "text/html; charset=klingon"},
     "got an HTML page"),
    ("body-not-json", {"body": "{not json"}, "got non-JSON text"),
    ("body-truncated", {"body": '{"data": [{"id": "re'}, "got non-JSON text"),
    ("body-nested-too-deeply", {"body": DEEP}, "nested too deeply"),
    ("http-500", {"status": 500, "body": body({"error": {"message": "boom"}})}, "HTTP 500"),
    ("http-503-html", {"status": 503, "body": HTML, "content_type": "text/html"}, "HTTP 503"),
    ("http-404", {"status": 404, "body": ""}, "HTTP 404"),
    ("http-403", {"status": 403, "body": ""}, "the API key is wrong or missing"),
    ("reset", {"reset": True}, "no server answers"),
    ("closed-without-answer", {"close": True}, "no server answers"),
    ("too-slow", {"delay_s": 5, "body": body({"data": [{"id": "ref"}]})}, "ReadTimeout"),
]


@pytest.mark.parametrize("answer, expect", [c[1:] for c in MODELS_BAD],
                         ids=[c[0] for c in MODELS_BAD])
def test_malformed_models_answer_is_one_line(refserver, answer, expect) -> None:
    srv = refserver(endpoint_answers={"/v1/models": answer})
    with pytest.raises(ServerError) as err:
        probe_server(srv.base_url, None, timeout_s=1.0)
    text = one_line(err.value)
    assert "/v1/models" in text, text
    assert expect in text


def test_unknown_model_among_served_ones_is_named(refserver) -> None:
    srv = refserver()
    with pytest.raises(ServerError) as err:
        probe_server(srv.base_url, None, model="other")
    assert "--model" in one_line(err.value) and "'ref'" in str(err.value)


def test_no_server_is_one_line_without_the_url_password() -> None:
    url = f"http://alice:s3cret-pw-0987@127.0.0.1:{closed_port()}"
    with pytest.raises(ServerError) as err:
        probe_server(url, None, timeout_s=1.0)
    text = one_line(err.value)
    assert "no server answers" in text and "s3cret-pw-0987" not in text and "alice" not in text


# ---- optional facts: unknown with a note, never a wrong number -------------


def vllm_page(**labels: str) -> str:
    """A vLLM /metrics page whose cache_config_info carries `labels`."""
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return ('vllm:num_requests_running{engine="0"} 0.0\n'
            'vllm:num_requests_waiting{engine="0"} 0.0\n'
            f"vllm:cache_config_info{{{lab}}} 1.0\n")


def models_entry(**extra) -> dict:
    """A /v1/models answer with one entry `ref` plus `extra` fields."""
    return {"body": body({"object": "list", "data": [{"id": "ref", **extra}]})}


SGLANG = {"/v1/models": models_entry(owned_by="sglang")}


def sglang(info: dict | str) -> dict:
    answer = {"body": info if isinstance(info, str) else body(info)}
    return {**SGLANG, "/get_server_info": answer}


OPTIONAL_BAD = [
    # (id, engine, endpoint_answers, ServerInfo attribute left unknown, text in a note)
    ("max-len-negative", "generic", {"/v1/models": models_entry(max_model_len=-5)},
     "max_model_len", "/v1/models: field max_model_len: expected a positive integer, got -5"),
    ("max-len-zero", "generic", {"/v1/models": models_entry(max_model_len=0)},
     "max_model_len", "field max_model_len"),
    ("max-len-string", "generic", {"/v1/models": models_entry(max_model_len="32768")},
     "max_model_len", "field max_model_len"),
    ("max-len-bool", "generic", {"/v1/models": models_entry(max_model_len=True)},
     "max_model_len", "field max_model_len"),
    ("max-len-fraction", "generic", {"/v1/models": models_entry(max_model_len=1.5)},
     "max_model_len", "field max_model_len"),
    ("max-len-huge", "generic", {"/v1/models": models_entry(max_model_len=1e300)},
     "max_model_len", "field max_model_len"),
    ("max-len-nan", "generic",
     {"/v1/models": {"body": '{"data": [{"id": "ref", "max_model_len": NaN}]}'}},
     "max_model_len", "field max_model_len"),
    ("max-len-infinity", "generic",
     {"/v1/models": {"body": '{"data": [{"id": "ref", "max_model_len": Infinity}]}'}},
     "max_model_len", "field max_model_len"),
    ("version-number", "vllm", {"/version": {"body": body({"version": 5})}},
     "version", "/version: field version"),
    ("version-missing", "vllm", {"/version": {"body": "{}"}}, "version", "/version: field version"),
    ("version-multiline", "vllm", {"/version": {"body": body({"version": "1\n2"})}},
     "version", "/version: field version"),
    ("version-list", "vllm", {"/version": {"body": "[]"}}, "version", "/version: expected a JSON object"),
    ("version-html", "vllm", {"/version": {"body": HTML}}, "version", "/version: expected a JSON object"),
    ("version-500", "vllm", {"/version": {"status": 500}}, "version", "/version: answered HTTP 500"),
    ("version-reset", "vllm", {"/version": {"reset": True}}, "version", "/version: no answer"),
    ("kv-tokens-negative", "vllm", {"/metrics": {"body": vllm_page(kv_cache_size_tokens="-5")}},
     "kv_budget", "kv_cache_size_tokens: expected a positive integer, got '-5'"),
    ("kv-tokens-zero", "vllm", {"/metrics": {"body": vllm_page(kv_cache_size_tokens="0")}},
     "kv_budget", "kv_cache_size_tokens"),
    ("kv-tokens-word", "vllm", {"/metrics": {"body": vllm_page(kv_cache_size_tokens="many")}},
     "kv_budget", "kv_cache_size_tokens"),
    ("kv-tokens-unicode-digit", "vllm", {"/metrics": {"body": vllm_page(kv_cache_size_tokens="²")}},
     "kv_budget", "kv_cache_size_tokens"),
    ("kv-tokens-huge", "vllm", {"/metrics": {"body": vllm_page(kv_cache_size_tokens="9" * 40)}},
     "kv_budget", "kv_cache_size_tokens"),
    ("kv-blocks-negative", "vllm",
     {"/metrics": {"body": vllm_page(num_gpu_blocks="-3", block_size="16")}},
     "kv_budget", "num_gpu_blocks"),
    ("kv-block-size-zero", "vllm",
     {"/metrics": {"body": vllm_page(num_gpu_blocks="100", block_size="0")}},
     "kv_budget", "block_size"),
    ("kv-block-size-missing", "vllm", {"/metrics": {"body": vllm_page(num_gpu_blocks="100")}},
     "kv_budget", "block_size"),
    ("metrics-html", "vllm", {"/metrics": {"body": HTML, "content_type": "text/html"}},
     "has_metrics", "/metrics: answered without any vllm gauge"),
    ("metrics-500", "vllm", {"/metrics": {"status": 500}}, "has_metrics", "/metrics: answered HTTP 500"),
    ("metrics-reset", "vllm", {"/metrics": {"reset": True}}, "has_metrics", "/metrics: no answer"),
    ("metrics-too-slow", "vllm", {"/metrics": {"delay_s": 5}}, "has_metrics",
     "/metrics: no answer (ReadTimeout"),
    ("props-slots-string", "llamacpp",
     {"/props": {"body": body({"default_generation_settings": {"n_ctx": 4096}, "total_slots": "4",
                               "build_info": "b1-abc"})}, "/slots": {"status": 501}},
     "slots", "/props: field total_slots"),
    ("props-slots-negative", "llamacpp",
     {"/props": {"body": body({"default_generation_settings": {}, "total_slots": -1})},
      "/slots": {"status": 501}}, "slots", "/props: field total_slots"),
    ("props-n-ctx-word", "llamacpp",
     {"/props": {"body": body({"default_generation_settings": {"n_ctx": "big"}})},
      "/slots": {"status": 501}}, "max_model_len", "default_generation_settings.n_ctx"),
    ("props-settings-string", "llamacpp",
     {"/props": {"body": body({"default_generation_settings": "x", "total_slots": 1})},
      "/slots": {"status": 501}}, "max_model_len", "field default_generation_settings"),
    ("props-build-number", "llamacpp",
     {"/props": {"body": body({"default_generation_settings": {}, "build_info": 7})}},
     "version", "/props: field build_info"),
    ("props-html", "llamacpp", {"/props": {"body": HTML}, "/slots": {"status": 501}},
     "max_model_len", "/props: expected a JSON object"),
    ("slots-n-ctx-word", "llamacpp", {"/slots": {"body": body([{"id": 0, "n_ctx": "x"}])}},
     "kv_budget", "/slots: field [0].n_ctx"),
    ("slots-n-ctx-missing", "llamacpp", {"/slots": {"body": body([{"id": 0}])}},
     "kv_budget", "/slots: field [0].n_ctx"),
    ("slots-n-ctx-negative", "llamacpp", {"/slots": {"body": body([{"id": 0, "n_ctx": -8}])}},
     "kv_budget", "/slots: field [0].n_ctx"),
    ("slots-of-strings", "llamacpp", {"/slots": {"body": body(["x"])}},
     "kv_budget", "/slots: field [0]: expected a slot object"),
    ("slots-object", "llamacpp", {"/slots": {"body": body({"n_ctx": 8})}},
     "kv_budget", "/slots: expected a JSON list"),
    ("slots-500", "llamacpp", {"/slots": {"status": 500}}, "kv_budget", "/slots: answered HTTP 500"),
    ("sglang-budget-negative", "generic", sglang({"max_total_num_tokens": -5}),
     "kv_budget", "/get_server_info: field max_total_num_tokens"),
    ("sglang-budget-string", "generic", sglang({"max_total_num_tokens": "5000"}),
     "kv_budget", "/get_server_info: field max_total_num_tokens"),
    ("sglang-context-bool", "generic", sglang({"context_length": True}),
     "max_model_len", "/get_server_info: field context_length"),
    ("sglang-version-object", "generic", sglang({"version": {"v": 1}}),
     "version", "/get_server_info: field version"),
    ("sglang-not-json", "generic", sglang("{oops"), "kv_budget", "/get_server_info: expected a JSON"),
]


@pytest.mark.parametrize("engine, answers, attr, note", [c[1:] for c in OPTIONAL_BAD],
                         ids=[c[0] for c in OPTIONAL_BAD])
def test_malformed_optional_fact_is_unknown_with_a_note(refserver, engine, answers, attr,
                                                         note) -> None:
    srv = refserver(engine=engine, endpoint_answers=answers)
    info = probe_server(srv.base_url, None, timeout_s=1.0)
    assert info.model == "ref"
    assert not getattr(info, attr), (attr, getattr(info, attr))
    if attr == "kv_budget":
        assert info.kv_budget_source is None
    assert any(note in n for n in info.notes), info.notes
    for n in info.notes:
        assert "\n" not in n


def test_health_is_not_read(refserver) -> None:
    """/health is never asked: a broken one changes nothing."""
    srv = refserver(endpoint_answers={"/health": {"status": 500, "body": HTML}})
    info = probe_server(srv.base_url, None)
    assert info.engine == "vllm" and info.max_model_len == 32768 and not info.notes


def test_well_behaved_servers_give_no_notes(refserver) -> None:
    for engine in ("vllm", "llamacpp", "generic"):
        info = probe_server(refserver(engine=engine, kv_budget_tokens=4096).base_url, None)
        assert info.notes == [], (engine, info.notes)
    info = probe_server(refserver(engine="generic", endpoint_answers=sglang(
        {"version": "0.4", "max_total_num_tokens": 5000, "context_length": 4096})).base_url, None)
    assert (info.engine, info.kv_budget, info.max_model_len, info.notes) == (
        "sglang", 5000, 4096, [])


# ---- prompt sizing: /tokenize and the usage calibration --------------------

TOKENIZE_BAD = [
    # (id, engine, answers, expected in the one line)
    ("vllm-count-missing", "vllm", {"/tokenize": {"body": body({"tokens": [1, 2]})}},
     "/tokenize: field count: expected a non-negative integer, got None"),
    ("vllm-count-string", "vllm", {"/tokenize": {"body": body({"count": "x"})}},
     "/tokenize: field count: expected a non-negative integer, got 'x'"),
    ("vllm-count-digits-string", "vllm", {"/tokenize": {"body": body({"count": "2000"})}},
     "/tokenize: field count"),
    ("vllm-count-negative", "vllm", {"/tokenize": {"body": body({"count": -1})}},
     "/tokenize: field count"),
    ("vllm-count-bool", "vllm", {"/tokenize": {"body": body({"count": True})}},
     "/tokenize: field count"),
    ("vllm-count-fraction", "vllm", {"/tokenize": {"body": body({"count": 2000.5})}},
     "/tokenize: field count"),
    ("vllm-count-nan", "vllm", {"/tokenize": {"body": '{"count": NaN}'}}, "/tokenize: field count"),
    ("vllm-count-infinity", "vllm", {"/tokenize": {"body": '{"count": -Infinity}'}},
     "/tokenize: field count"),
    ("vllm-count-overflow", "vllm", {"/tokenize": {"body": '{"count": 1e999}'}},
     "/tokenize: field count"),
    ("vllm-count-implausibly-small", "vllm", {"/tokenize": {"body": body({"count": 1})}},
     "not plausible"),
    ("vllm-count-implausibly-large", "vllm", {"/tokenize": {"body": body({"count": 10**9})}},
     "not plausible"),
    ("vllm-count-zero", "vllm", {"/tokenize": {"body": body({"count": 0})}}, "not plausible"),
    ("vllm-body-list", "vllm", {"/tokenize": {"body": "[3]"}}, "/tokenize: expected a JSON object"),
    ("vllm-body-empty", "vllm", {"/tokenize": {"body": ""}}, "/tokenize: expected a JSON object"),
    ("vllm-body-html", "vllm", {"/tokenize": {"body": HTML}}, "got an HTML page"),
    ("vllm-body-not-json", "vllm", {"/tokenize": {"body": "count=3"}}, "got non-JSON text"),
    ("vllm-http-500", "vllm", {"/tokenize": {"status": 500, "body": body(
        {"error": {"message": "tokenizer crashed"}})}}, "/tokenize: answered HTTP 500"),
    ("vllm-http-400", "vllm", {"/tokenize": {"status": 400, "body": body(
        {"error": {"message": "model not found"}})}}, "model not found"),
    ("vllm-http-401", "vllm", {"/tokenize": {"status": 401}}, "the API key is wrong or missing"),
    ("vllm-reset", "vllm", {"/tokenize": {"reset": True}}, "/tokenize: no answer"),
    ("vllm-closed", "vllm", {"/tokenize": {"close": True}}, "/tokenize: no answer"),
    ("vllm-too-slow", "vllm", {"/tokenize": {"delay_s": 5}}, "ReadTimeout"),
    ("llama-tokens-missing", "llamacpp", {"/tokenize": {"body": body({"count": 5})}},
     "/tokenize: field tokens: expected a list of tokens, got None"),
    ("llama-tokens-string", "llamacpp", {"/tokenize": {"body": body({"tokens": "1 2 3"})}},
     "/tokenize: field tokens"),
    ("llama-tokens-number", "llamacpp", {"/tokenize": {"body": body({"tokens": 5})}},
     "/tokenize: field tokens"),
    ("llama-http-503", "llamacpp", {"/tokenize": {"status": 503, "body": HTML}},
     "/tokenize: answered HTTP 503"),
    ("llama-overhead-usage-bad", "llamacpp",
     {"/v1/chat/completions": {"body": body({"usage": {"prompt_tokens": "many"}})}},
     "/v1/chat/completions: field usage.prompt_tokens"),
    ("usage-prompt-tokens-string", "generic",
     {"/v1/chat/completions": {"body": body({"usage": {"prompt_tokens": "x"}})}},
     "/v1/chat/completions: field usage.prompt_tokens"),
    ("usage-prompt-tokens-negative", "generic",
     {"/v1/chat/completions": {"body": body({"usage": {"prompt_tokens": -7}})}},
     "field usage.prompt_tokens"),
    ("usage-not-object", "generic", {"/v1/chat/completions": {"body": body({"usage": [1]})}},
     "/v1/chat/completions: field usage: expected an object"),
    ("usage-absent", "generic", {"/v1/chat/completions": {"body": body({"choices": []})}},
     "no token counts"),
    ("usage-body-html", "generic", {"/v1/chat/completions": {"body": HTML}}, "got an HTML page"),
    ("usage-http-500", "generic", {"/v1/chat/completions": {"status": 500}},
     "/v1/chat/completions: answered HTTP 500"),
    ("usage-reset", "generic", {"/v1/chat/completions": {"reset": True}},
     "/v1/chat/completions: no answer"),
]


@pytest.mark.parametrize("engine, answers, expect", [c[1:] for c in TOKENIZE_BAD],
                         ids=[c[0] for c in TOKENIZE_BAD])
def test_malformed_sizing_answer_is_one_server_error(refserver, engine, answers, expect) -> None:
    srv = refserver(engine=engine, endpoint_answers=answers)
    info = probe_server(srv.base_url, None)
    factory = PromptFactory(info, None, "run1")
    factory.http.timeout = httpx.Timeout(1.0)
    try:
        with pytest.raises(ServerError) as err:
            factory.build(512, "d512-c1-s0")
    finally:
        factory.close()
    assert expect in one_line(err.value)


def test_server_dying_between_cells_is_one_server_error(refserver) -> None:
    """The issue's case: prompts were sized for one cell, then the server
    died; the next cell's sizing says so in one line (was a ConnectError
    traceback from /tokenize)."""
    srv = refserver()
    info = probe_server(srv.base_url, None)
    factory = PromptFactory(info, None, "run1")
    try:
        assert factory.build(256, "a").tokens is not None
        srv.kill()
        with pytest.raises(ServerError) as err:
            factory.build(512, "b")
    finally:
        factory.close()
    text = one_line(err.value)
    assert "/tokenize: no answer" in text and "ConnectError" in text


def test_no_tokenize_endpoint_falls_back_to_usage(refserver) -> None:
    """A 404 from /tokenize at once (a gateway in front of vLLM) is not an
    error: prompts are sized from the usage counts instead."""
    srv = refserver(endpoint_answers={"/tokenize": {"status": 404}})
    factory = PromptFactory(probe_server(srv.base_url, None), None, "run1")
    try:
        prompt = factory.build(300, "a")
    finally:
        factory.close()
    assert prompt.tokens is None and abs(len(prompt.text.split()) - 300) <= 16


def test_sizing_without_url_password_in_errors() -> None:
    info = ServerInfo(base_url=f"http://bob:pw-7777-secret@127.0.0.1:{closed_port()}",
                      engine="vllm", model="m", tokenize="vllm")
    factory = PromptFactory(info, "sk-key-should-not-show-123", "run1")
    try:
        with pytest.raises(ServerError) as err:
            factory.build(128, "a")
    finally:
        factory.close()
    text = one_line(err.value)
    assert "pw-7777-secret" not in text and "sk-key-should-not-show-123" not in text


# ---- through the real CLI ---------------------------------------------------


@pytest.mark.parametrize("answer, field", [
    ({"body": body({"data": ["x"]})}, "data[0]"),
    ({"body": body({"data": [{"object": "model"}]})}, "data[0].id"),
    ({"body": HTML, "content_type": "text/html"}, "HTML page"),
], ids=["data-of-strings", "entry-without-id", "html"])
def test_cli_malformed_models_is_one_line(refserver, tmp_path, answer, field) -> None:
    srv = refserver(endpoint_answers={"/v1/models": answer})
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), timeout=120)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "/v1/models" in lines[0] and field in lines[0], res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert not out.exists()


def test_cli_negative_kv_budget_plans_nothing_from_it(refserver, tmp_path) -> None:
    """A negative KV budget in /metrics is unknown, not a reason to skip cells."""
    srv = refserver(endpoint_answers={"/metrics": {"body": vllm_page(
        num_gpu_blocks="-100", block_size="16")}})
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(tmp_path / "r"),
                  "--dry-run", "--contexts", "1k", "--concurrency", "1,4", timeout=120)
    assert res.returncode == 0, res.stderr
    assert "KV budget: unknown" in res.stderr + res.stdout
    assert "-1600" not in res.stderr + res.stdout and "Traceback" not in res.stderr


def test_cli_malformed_tokenize_is_one_line(refserver, tmp_path) -> None:
    """/tokenize without `count` (was a KeyError traceback): the run ends with
    one line naming the endpoint and the field."""
    srv = refserver(endpoint_answers={"/tokenize": {"body": body({"tokens": [1]})}})
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out),
                  "--duration", "2", "--no-prefill", "--contexts", "128", "--concurrency", "1",
                  timeout=120)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr + res.stdout
    assert "/tokenize: field count" in res.stderr.strip().splitlines()[-1], res.stderr


@pytest.mark.parametrize("answers", [
    {"/version": {"body": body({"version": "[/]"})}},
    {"/v1/models": {"body": body({"data": [{"id": "[/bold]", "owned_by": "vllm"}]})}},
], ids=["version-markup", "model-id-markup"])
def test_cli_server_strings_are_not_markup(refserver, tmp_path, answers) -> None:
    """A version or model id that looks like console markup is printed as
    text (was a rich MarkupError traceback)."""
    srv = refserver(endpoint_answers=answers)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(tmp_path / "r"),
                  "--dry-run", "--contexts", "1k", "--concurrency", "1", timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "[/" in res.stderr


def test_cli_prints_notes_on_malformed_optional_facts(refserver, tmp_path) -> None:
    srv = refserver(endpoint_answers={"/version": {"body": body({"version": 5})}})
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(tmp_path / "r"),
                  "--dry-run", "--contexts", "1k", "--concurrency", "1", timeout=120)
    assert res.returncode == 0, res.stderr
    assert "note: /version: field version" in res.stderr


def test_cli_error_reason_with_markup_is_printed_as_text(refserver, tmp_path) -> None:
    """A completion error whose message looks like console markup ends the
    cell Error with that reason, printed as text, not a traceback."""
    srv = refserver(tokens_per_s=200, endpoint_answers={"/v1/chat/completions": {
        "status": 500, "body": body({"error": {"message": "[/] boom [bold]"}})}})
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(tmp_path / "r"),
                  "--duration", "2", "--no-prefill", "--contexts", "128", "--concurrency", "1",
                  "--server-wait", "2", timeout=120)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert "[/] boom" in res.stderr
