"""What kind of server is at the URL, and what it can tell us.

Each engine names the same facts differently (max model length, KV budget,
running/waiting gauges, version, tokenizer). `probe_server` asks, in a few
GET requests, and returns one `ServerInfo` the rest of the collector uses
without caring which engine it was. Every answer is checked (bench.answers):
a required fact (the model id) that is missing or malformed is a one-line
`ServerError`; an optional one (max model length, KV budget, version) is
left unknown with a note in `ServerInfo.notes`, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.answers import (
    ABSENT,
    BadAnswer,
    digits,
    integer,
    json_body,
    show,
    status_detail,
    text,
    transport,
)
from bench.prometheus_text import parse_metrics
from bench.redact import redact
from rundir.contract import (
    METRIC_GENERATION_TOKENS,
    METRIC_KV_USAGE,
    METRIC_PREFIX_CACHE_HITS,
    METRIC_PROMPT_TOKENS,
    METRIC_RUNNING,
    METRIC_WAITING,
)

# Canonical gauge -> the engine's Prometheus name.
GAUGES: dict[str, dict[str, str]] = {
    "vllm": {
        METRIC_RUNNING: "vllm:num_requests_running",
        METRIC_WAITING: "vllm:num_requests_waiting",
        METRIC_KV_USAGE: "vllm:kv_cache_usage_perc",
        METRIC_GENERATION_TOKENS: "vllm:generation_tokens_total",
        METRIC_PROMPT_TOKENS: "vllm:prompt_tokens_total",
        METRIC_PREFIX_CACHE_HITS: "vllm:prefix_cache_hits_total",
    },
    "sglang": {
        METRIC_RUNNING: "sglang:num_running_reqs",
        METRIC_WAITING: "sglang:num_queue_reqs",
        METRIC_KV_USAGE: "sglang:token_usage",
        METRIC_GENERATION_TOKENS: "sglang:generation_tokens_total",
        METRIC_PROMPT_TOKENS: "sglang:prompt_tokens_total",
        METRIC_PREFIX_CACHE_HITS: "sglang:cached_tokens_total",
    },
    "llama.cpp": {
        METRIC_RUNNING: "llamacpp:requests_processing",
        METRIC_WAITING: "llamacpp:requests_deferred",
        METRIC_GENERATION_TOKENS: "llamacpp:tokens_predicted_total",
        METRIC_PROMPT_TOKENS: "llamacpp:prompt_tokens_total",
    },
}


class ServerError(RuntimeError):
    """The server cannot be benchmarked; the message is one line for the user."""


class ServerNotReady(ServerError):
    """Nothing answers yet, or the server says it is not ready (HTTP 502/503/504:
    llama-server answers 503 "Loading model" until its model is loaded; a proxy
    in front of a starting server answers 502 or 504). Worth waiting for;
    `waiting_for` says what, in a few words."""

    def __init__(self, message: str, waiting_for: str) -> None:
        super().__init__(message)
        self.waiting_for = waiting_for


NOT_READY_STATUSES = (502, 503, 504)


@dataclass
class ServerInfo:
    base_url: str
    engine: str  # "vllm", "sglang", "llama.cpp" or "openai"
    model: str
    version: str | None = None
    commit: str | None = None
    max_model_len: int | None = None
    kv_budget: int | None = None
    kv_budget_source: str | None = None
    slots: int | None = None
    has_metrics: bool = False
    gauges: dict[str, str] = field(default_factory=dict)
    tokenize: str | None = None  # "vllm" or "llama.cpp" style endpoint, if any
    backend: str | None = None
    # Optional facts the server answered malformed, each "endpoint: problem; X unknown".
    notes: list[str] = field(default_factory=list)


def public_url(url: str) -> str:
    """The URL without user:password, for messages."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "the --base-url"
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url


def _key_refused(path: str, status: int) -> ServerError:
    return ServerError(
        f"{path} answered HTTP {status}: the API key is wrong or missing "
        "(pass --api-key or set OPENAI_API_KEY)"
    )


class _Probe:
    """The probe's HTTP client plus the notes it gathers on optional facts."""

    def __init__(self, client: httpx.Client, info: ServerInfo, api_key: str | None) -> None:
        self.client, self.info = client, info
        self.secrets = [api_key] if api_key else []

    def note(self, text: str) -> None:
        self.info.notes.append(redact(text, self.secrets))  # it may quote the server

    def get(self, path: str, unknown: str) -> httpx.Response | None:
        """An optional endpoint's 200 answer, or None: absent (404) silently,
        anything else with a note saying what is therefore unknown."""
        try:
            resp = self.client.get(path)
        except httpx.HTTPError as exc:
            self.note(f"{path}: no answer ({transport(exc)}); {unknown} unknown")
            return None
        if resp.status_code == 401:  # a 403 may be a gateway hiding /metrics: noted below
            raise _key_refused(path, resp.status_code)
        if resp.status_code == 200:
            return resp
        if resp.status_code not in ABSENT:
            self.note(f"{path}: answered HTTP {resp.status_code}; {unknown} unknown")
        return None

    def json(self, path: str, unknown: str, kind: type = dict) -> Any:
        resp = self.get(path, unknown)
        if resp is None:
            return None
        try:
            return json_body(resp, path, kind)
        except BadAnswer as exc:
            self.note(f"{exc}; {unknown} unknown")
            return None

    def optional(self, check: Callable[[], Any], unknown: str) -> Any:
        """The checked value of an optional fact, or None with a note."""
        try:
            return check()
        except BadAnswer as exc:
            self.note(f"{exc}; {unknown} unknown")
            return None


def _models(client: httpx.Client, root: str) -> list[dict]:
    """/v1/models: the required list of served models, each with an id."""
    path = "/v1/models"
    try:
        resp = client.get(path)
    except httpx.HTTPError as exc:
        raise ServerNotReady(
            f"no server answers at {public_url(root)}{path} ({transport(exc)}); "
            "is it running, and is --base-url right?", transport(exc),
        ) from None
    if resp.status_code in (401, 403):
        raise _key_refused(path, resp.status_code)
    if resp.status_code in NOT_READY_STATUSES:
        said = f"HTTP {resp.status_code}{status_detail(resp)}"
        raise ServerNotReady(f"{path}: answered {said}: the server is not ready", said)
    if resp.status_code != 200:
        raise ServerError(
            f"{path}: answered HTTP {resp.status_code}{status_detail(resp)}, expected 200 with "
            "a model list: not an OpenAI-compatible server, or not ready yet?"
        )
    try:
        body = json_body(resp, path)
        entries = body.get("data")
        if not isinstance(entries, list) or not entries:
            raise BadAnswer(f"{path}: field data: expected a non-empty list of models, "
                            f"got {show(entries)}")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise BadAnswer(f"{path}: field data[{i}]: expected a model object with an id, "
                                f"got {show(entry)}")
            text(entry.get("id"), path, f"data[{i}].id", limit=1000)
    except BadAnswer as exc:
        raise ServerError(str(exc)) from None
    return entries


def probe_server(base_url: str, api_key: str | None, model: str | None = None,
                 timeout_s: float = 10.0) -> ServerInfo:
    """Detect the engine and read what it reports about itself. Raises only
    ServerError (one line) for a server that cannot be benchmarked; optional
    facts it answers malformed are left unknown with a note in `notes`."""
    base_url = base_url.rstrip("/")
    root = base_url[:-3] if base_url.endswith("/v1") else base_url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=root, headers=headers, timeout=timeout_s) as client:
        entries = _models(client, root)
        entry = entries[0]
        if model:
            matches = [e for e in entries if e["id"] == model]
            if not matches:
                ids = ", ".join(show(e["id"], 80) for e in entries[:20])
                raise ServerError(f"--model: {model!r} is not served here (served: {ids})")
            entry = matches[0]
        owner = entry.get("owned_by")
        owner = owner.lower() if isinstance(owner, str) else ""
        info = ServerInfo(base_url=root, engine="openai", model=entry["id"])
        probe = _Probe(client, info, api_key)
        if entry.get("max_model_len") is not None:
            info.max_model_len = probe.optional(lambda: integer(
                entry["max_model_len"], "/v1/models", "max_model_len", 1), "max model length")
        metrics_text = None
        metrics_resp = probe.get("/metrics", "server gauges")
        if metrics_resp is not None:
            metrics_text = metrics_resp.text
        props = probe.json("/props", "llama.cpp settings") if owner != "vllm" else None
        if owner == "vllm" or (metrics_text and "vllm:" in metrics_text):
            _vllm(probe, metrics_text)
        elif owner == "llamacpp" or (props and "default_generation_settings" in props):
            _llamacpp(probe, props or {})
        elif owner == "sglang" or (metrics_text and "sglang:" in metrics_text):
            _sglang(probe)
        if metrics_text:
            present = {s.name for s in parse_metrics(metrics_text)}
            known = GAUGES.get(info.engine, {})
            info.gauges = {k: v for k, v in known.items() if v in present}
            info.has_metrics = bool(info.gauges)
            if known and not info.gauges:
                probe.note(f"/metrics: answered without any {info.engine} gauge "
                           f"(expected e.g. {known[METRIC_RUNNING]}); server gauges unknown")
    return info


def _vllm(probe: _Probe, metrics_text: str | None) -> None:
    info = probe.info
    info.engine = "vllm"
    version = probe.json("/version", "engine version")
    if version is not None:
        info.version = probe.optional(
            lambda: text(version.get("version"), "/version", "version"), "engine version")
    info.tokenize = "vllm"
    if not metrics_text:
        return
    for sample in parse_metrics(metrics_text):
        if sample.name == "vllm:cache_config_info":
            _vllm_kv(probe, sample.labels)


def _vllm_kv(probe: _Probe, labels: dict[str, str]) -> None:
    """The KV budget from vllm:cache_config_info: in tokens on newer vLLM,
    else blocks × block size; a malformed label leaves it unknown (noted)."""
    where, name = "/metrics", "vllm:cache_config_info"
    tokens = f"{name} kv_cache_size_tokens"
    blocks = f"{name} num_gpu_blocks × block_size"
    budget = source = None
    if "kv_cache_size_tokens" in labels:
        source = tokens
        budget = probe.optional(
            lambda: digits(labels["kv_cache_size_tokens"], where, tokens), "KV budget in tokens")
    if budget is None and ("num_gpu_blocks" in labels or "block_size" in labels):
        source = blocks
        budget = probe.optional(lambda: integer(
            digits(labels.get("num_gpu_blocks"), where, f"{name} num_gpu_blocks")
            * digits(labels.get("block_size"), where, f"{name} block_size"),
            where, blocks, 1), "KV budget")
    if budget:
        probe.info.kv_budget, probe.info.kv_budget_source = budget, source


def _llamacpp(probe: _Probe, props: dict) -> None:
    info = probe.info
    info.engine = "llama.cpp"
    info.tokenize = "llama.cpp"
    settings = props.get("default_generation_settings")
    if settings is not None and not isinstance(settings, dict):
        probe.note(f"/props: field default_generation_settings: expected an object, got "
                   f"{show(settings)}; max model length unknown")
        settings = None
    settings = settings or {}
    if props.get("total_slots") is not None:
        info.slots = probe.optional(
            lambda: integer(props["total_slots"], "/props", "total_slots", 1), "slot count")
    if props.get("build_info") not in (None, ""):
        build = probe.optional(
            lambda: text(props["build_info"], "/props", "build_info"), "engine version")
        if build:
            info.version = build
            if "-" in build:
                info.commit = build.rsplit("-", 1)[-1]
    if settings.get("n_ctx") is not None:
        info.max_model_len = probe.optional(lambda: integer(
            settings["n_ctx"], "/props", "default_generation_settings.n_ctx", 1),
            "max model length")
    slot_list = probe.json("/slots", "KV budget", kind=list)
    per_slot = probe.optional(lambda: _slot_contexts(slot_list), "KV budget") if slot_list else None
    if per_slot:
        info.slots = len(per_slot)
        info.max_model_len = max(per_slot)
        # llama.cpp does not report a unified KV cache's size (-kvu); the sum
        # of the slots' contexts is an upper bound, so say so.
        info.kv_budget = sum(per_slot)
        info.kv_budget_source = "llama.cpp /slots: sum of slot contexts (upper bound; use --kv-budget)"


def _slot_contexts(slot_list: list) -> list[int]:
    """Every slot's context size; any malformed slot makes the list unusable."""
    out = []
    for i, slot in enumerate(slot_list):
        if not isinstance(slot, dict):
            raise BadAnswer(f"/slots: field [{i}]: expected a slot object, got {show(slot)}")
        out.append(integer(slot.get("n_ctx"), "/slots", f"[{i}].n_ctx", 1))
    return out


def _sglang(probe: _Probe) -> None:
    info = probe.info
    info.engine = "sglang"
    path = "/get_server_info"
    data = probe.json(path, "sglang server facts")
    if data is None:
        path = "/server_info"
        data = probe.json(path, "sglang server facts")
    data = data or {}
    if data.get("version") is not None:
        info.version = probe.optional(lambda: text(data["version"], path, "version"),
                                      "engine version")
    if data.get("max_total_num_tokens") is not None:
        budget = probe.optional(lambda: integer(
            data["max_total_num_tokens"], path, "max_total_num_tokens", 1), "KV budget")
        if budget:
            info.kv_budget = budget
            info.kv_budget_source = "sglang server_info max_total_num_tokens"
    if data.get("context_length") is not None and not info.max_model_len:
        info.max_model_len = probe.optional(lambda: integer(
            data["context_length"], path, "context_length", 1), "max model length")
