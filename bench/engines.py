"""What kind of server is at the URL, and what it can tell us.

Each engine names the same facts differently (max model length, KV budget,
running/waiting gauges, version, tokenizer). `probe_server` asks, in a few
GET requests, and returns one `ServerInfo` the rest of the collector uses
without caring which engine it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from bench.promtext import parse_metrics
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


def _get(client: httpx.Client, path: str) -> httpx.Response | None:
    try:
        resp = client.get(path)
    except httpx.HTTPError:
        return None
    if resp.status_code == 401:
        raise ServerError(
            f"{client.base_url}{path} answered 401 Unauthorized: the API key is wrong or "
            "missing (pass --api-key or set OPENAI_API_KEY)"
        )
    return resp


def _json(resp: httpx.Response | None) -> dict | None:
    if resp is None or resp.status_code != 200:
        return None
    try:
        data = resp.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def probe_server(base_url: str, api_key: str | None, model: str | None = None) -> ServerInfo:
    """Detect the engine and read what it reports about itself."""
    base_url = base_url.rstrip("/")
    root = base_url[:-3] if base_url.endswith("/v1") else base_url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=root, headers=headers, timeout=10.0) as client:
        try:
            resp = client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise ServerError(
                f"no server answers at {root} ({type(exc).__name__}: {exc}); "
                "is it running, and is --base-url right?"
            ) from None
        if resp.status_code == 401:
            raise ServerError(
                f"{root}/v1/models answered 401 Unauthorized: the API key is wrong or "
                "missing (pass --api-key or set OPENAI_API_KEY)"
            )
        models = _json(resp)
        if not models or not models.get("data"):
            raise ServerError(
                f"{root}/v1/models answered HTTP {resp.status_code} without a model list: "
                "not an OpenAI-compatible server?"
            )
        entries = models["data"]
        entry = entries[0]
        if model:
            matches = [e for e in entries if e.get("id") == model]
            if not matches:
                ids = ", ".join(str(e.get("id")) for e in entries)
                raise ServerError(f"--model: {model!r} is not served here (served: {ids})")
            entry = matches[0]
        owner = str(entry.get("owned_by") or "").lower()
        info = ServerInfo(base_url=root, engine="openai", model=str(entry["id"]))
        if entry.get("max_model_len"):
            info.max_model_len = int(entry["max_model_len"])
        metrics_text = None
        metrics_resp = _get(client, "/metrics")
        if metrics_resp is not None and metrics_resp.status_code == 200:
            metrics_text = metrics_resp.text
        props = _json(_get(client, "/props")) if owner != "vllm" else None
        if owner == "vllm" or (metrics_text and "vllm:" in metrics_text):
            _vllm(client, info, metrics_text)
        elif owner == "llamacpp" or (props and "default_generation_settings" in props):
            _llamacpp(client, info, props or {}, metrics_text)
        elif owner == "sglang" or (metrics_text and "sglang:" in metrics_text):
            _sglang(client, info, metrics_text)
        if metrics_text:
            present = {s.name for s in parse_metrics(metrics_text)}
            known = GAUGES.get(info.engine, {})
            info.gauges = {k: v for k, v in known.items() if v in present}
            info.has_metrics = bool(info.gauges)
    return info


def _vllm(client: httpx.Client, info: ServerInfo, metrics_text: str | None) -> None:
    info.engine = "vllm"
    version = _json(_get(client, "/version"))
    if version:
        info.version = version.get("version")
    info.tokenize = "vllm"
    if metrics_text:
        for sample in parse_metrics(metrics_text):
            if sample.name != "vllm:cache_config_info":
                continue
            labels = sample.labels
            # Newer vLLM states the budget in tokens; older ones only in blocks.
            token_label = "kv_cache_size_tokens" if labels.get(
                "kv_cache_size_tokens", "").isdigit() else None
            if token_label:
                info.kv_budget = int(labels[token_label])
                info.kv_budget_source = f"vllm:cache_config_info {token_label}"
            elif labels.get("num_gpu_blocks", "").isdigit() and labels.get("block_size", "").isdigit():
                info.kv_budget = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
                info.kv_budget_source = "vllm:cache_config_info num_gpu_blocks × block_size"


def _llamacpp(client: httpx.Client, info: ServerInfo, props: dict, metrics_text: str | None) -> None:
    info.engine = "llama.cpp"
    info.tokenize = "llama.cpp"
    settings = props.get("default_generation_settings") or {}
    slots = props.get("total_slots")
    info.slots = int(slots) if slots else None
    build = props.get("build_info") or ""
    if build:
        info.version = str(build)
        if "-" in str(build):
            info.commit = str(build).rsplit("-", 1)[-1]
    n_ctx = settings.get("n_ctx")
    if n_ctx:
        info.max_model_len = int(n_ctx)
    slot_list = _get(client, "/slots")
    per_slot: list[int] = []
    if slot_list is not None and slot_list.status_code == 200:
        try:
            per_slot = [int(s.get("n_ctx", 0)) for s in slot_list.json()]
        except (ValueError, TypeError, AttributeError):
            per_slot = []
    if per_slot:
        info.slots = len(per_slot)
        info.max_model_len = max(per_slot)
        # llama.cpp does not report a unified KV cache's size (-kvu); the sum
        # of the slots' contexts is an upper bound, so say so.
        info.kv_budget = sum(per_slot)
        info.kv_budget_source = "llama.cpp /slots: sum of slot contexts (upper bound; use --kv-budget)"


def _sglang(client: httpx.Client, info: ServerInfo, metrics_text: str | None) -> None:
    info.engine = "sglang"
    data = _json(_get(client, "/get_server_info")) or _json(_get(client, "/server_info")) or {}
    info.version = data.get("version")
    if data.get("max_total_num_tokens"):
        info.kv_budget = int(data["max_total_num_tokens"])
        info.kv_budget_source = "sglang server_info max_total_num_tokens"
    if data.get("context_length") and not info.max_model_len:
        info.max_model_len = int(data["context_length"])
