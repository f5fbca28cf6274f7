"""One record per inference engine: everything the collector does differently for it.

An `EngineProfile` says how the engine is recognised, what its Prometheus
gauges are called, what a streaming request asks of it beyond the OpenAI
fields, how its tokenize endpoint is asked and answered, and which of its
endpoints tell the version, the max model length and the KV budget. The
probe (bench.server.engines), the prompt factory (bench.workload.prompts), the cell runner
(bench.measure.cells) and the metrics sampler (bench.server.sampler) look things up here
and never branch on an engine's name. Adding an engine is one profile (and
its section in docs/engines.md, which says where each fact was checked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from bench.server.answers import BadAnswer, digits, integer, show, text
from bench.server.prometheus_text import parse_metrics
from bench.server.server_info import Probe
from rundir.contract import (
    METRIC_GENERATION_TOKENS,
    METRIC_KV_USAGE,
    METRIC_PREFIX_CACHE_HITS,
    METRIC_PROMPT_TOKENS,
    METRIC_RUNNING,
    METRIC_WAITING,
)

TOKENIZE_PATH = "/tokenize"
# Canonical names of the speculative-decoding counters (EngineProfile.spec_counters)
SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED = "spec_drafts", "spec_draft_tokens", "spec_accepted"


@dataclass(frozen=True)
class TokenizeDialect:
    """How one engine's POST /tokenize is asked and answered.

    `bare` counts a text alone (no chat template, no special tokens: what
    streamed output is counted with). `chat` counts it as a chat prompt with
    the template; None where the engine cannot, and the prompt factory then
    measures the template's tokens once from a real request's usage."""

    name: str
    bare: Callable[[str, str], dict]  # (model, text) -> request body
    chat: Callable[[str, str], dict] | None
    answer: str  # "count": an integer field `count`; "tokens": a list whose length counts

    def read(self, data: dict) -> int:
        """The token count in a /tokenize answer; BadAnswer names the field."""
        if self.answer == "tokens":
            tokens = data.get("tokens")
            if not isinstance(tokens, list):
                raise BadAnswer(f"{TOKENIZE_PATH}: field tokens: expected a list of tokens, "
                                f"got {show(tokens)}")
            return len(tokens)
        return integer(data.get("count"), TOKENIZE_PATH, "count")


def _chat_messages(text_: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text_}]


VLLM_TOKENIZE = TokenizeDialect(
    name="vllm",
    bare=lambda model, t: {"model": model, "prompt": t, "add_special_tokens": False},
    chat=lambda model, t: {"model": model, "messages": _chat_messages(t)},
    answer="count",
)
# SGLang's /tokenize takes a prompt string only (no messages): the chat
# template's tokens are measured from usage, as for llama.cpp.
SGLANG_TOKENIZE = TokenizeDialect(
    name="sglang",
    bare=lambda model, t: {"model": model, "prompt": t, "add_special_tokens": False},
    chat=None,
    answer="count",
)
# llama-server adds no special tokens unless asked (`add_special`).
LLAMACPP_TOKENIZE = TokenizeDialect(
    name="llama.cpp", bare=lambda model, t: {"content": t}, chat=None, answer="tokens")

DIALECTS: dict[str, TokenizeDialect] = {
    d.name: d for d in (VLLM_TOKENIZE, SGLANG_TOKENIZE, LLAMACPP_TOKENIZE)}

FactReader = Callable[[Probe, str | None, dict], None]


@dataclass(frozen=True)
class EngineProfile:
    """Everything engine-specific about one engine (docs/engines.md)."""

    name: str  # as written in the run card and the run id
    owned_by: str | None = None  # the /v1/models `owned_by` that names it
    metrics_prefix: str | None = None  # a /metrics name prefix that names it
    props_key: str | None = None  # a key of GET /props that names it
    gauges: Mapping[str, str] = field(default_factory=dict)  # canonical -> engine's name
    # Extras of a streaming completion request: top-level fields and stream_options.
    body_extras: Mapping[str, Any] = field(default_factory=dict)
    stream_extras: Mapping[str, Any] = field(default_factory=dict)
    tokenize: TokenizeDialect | None = None
    # Reads the version, the max model length and the KV budget (and says
    # where the budget came from, in ServerInfo.kv_budget_source).
    facts: FactReader | None = None
    # Whether its generation-token counter rises as tokens are generated (vLLM:
    # per engine step), so a window's rise can be set against the records
    # (bench/server/server_check.py). llama.cpp and SGLang add a request's tokens when
    # it finishes, which says nothing about a window its streams run across.
    live_generation_counter: bool = False
    # Its speculative-decoding counters (rundir/speculative.py): canonical SPEC_* -> its
    # name, read around a decode cell (not sampled as gauges).
    spec_counters: Mapping[str, str] = field(default_factory=dict)

    @property
    def ignore_eos(self) -> bool:
        """Asked to run every stream to max_tokens (a 'stop' then means it did not)."""
        return self.body_extras.get("ignore_eos") is True

    def names_it(self, owner: str, metrics_text: str | None, props: dict | None) -> bool:
        """Whether these probe answers come from this engine."""
        return bool(
            (self.owned_by and owner == self.owned_by)
            or (self.metrics_prefix and metrics_text and self.metrics_prefix in metrics_text)
            or (self.props_key and props and self.props_key in props))


# ---- what each engine's own endpoints tell -------------------------------


def _vllm_facts(probe: Probe, metrics_text: str | None, _props: dict) -> None:
    version = probe.json("/version", "engine version")
    if version is not None:
        probe.info.version = probe.optional(
            lambda: text(version.get("version"), "/version", "version"), "engine version")
    if not metrics_text:
        return
    for sample in parse_metrics(metrics_text):
        if sample.name == "vllm:cache_config_info":
            _vllm_kv(probe, sample.labels)
            block = sample.labels.get("block_size", "")  # a malformed one: _vllm_kv notes it
            if block.isascii() and block.isdigit() and int(block) > 0:
                probe.info.cache_block_size = int(block)


def _vllm_kv(probe: Probe, labels: dict[str, str]) -> None:
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


def _llamacpp_facts(probe: Probe, _metrics_text: str | None, props: dict) -> None:
    info = probe.info
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
        info.kv_budget_source = _llamacpp_kv_unknown(per_slot)  # the budget stays unknown


def _llamacpp_kv_unknown(per_slot: list[int]) -> str:
    """Why llama.cpp's KV budget is unknown, and how to give it. A slot reports
    the context one request may fill: the whole cache when unified (-kvu), its
    1/slots share when split, and either capped at the model's training
    context; /props and /slots say neither which nor the cache's size, so
    `-c 32768 -np 2 -kvu` (32,768) and `-c 65536 -np 2` (65,536) answer the
    same (docs/engines.md). Neither one slot's context nor the sum is the
    budget: the -c the server was started with is, whatever the layout."""
    n = len(per_slot)
    slots = f"{per_slot[0]:,}" if n == 1 else (
        f"{n} slots × {per_slot[0]:,}" if len(set(per_slot)) == 1 else f"{n} slots")
    return (f"llama.cpp /slots tells each slot's context ({slots}), not the KV cache's size: "
            f"pass --kv-budget with the -c the server was started with")


def _slot_contexts(slot_list: list) -> list[int]:
    """Every slot's context size; any malformed slot makes the list unusable."""
    out = []
    for i, slot in enumerate(slot_list):
        if not isinstance(slot, dict):
            raise BadAnswer(f"/slots: field [{i}]: expected a slot object, got {show(slot)}")
        out.append(integer(slot.get("n_ctx"), "/slots", f"[{i}].n_ctx", 1))
    return out


def _sglang_facts(probe: Probe, _metrics_text: str | None, _props: dict) -> None:
    """/get_server_info (renamed /server_info in newer SGLang): the server
    arguments merged with the scheduler's facts and the version."""
    info = probe.info
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
    if data.get("page_size") is not None:
        info.cache_block_size = probe.optional(lambda: integer(
            data["page_size"], path, "page_size", 1), "prefix cache page size")
    if data.get("context_length") is not None and not info.max_model_len:
        info.max_model_len = probe.optional(lambda: integer(
            data["context_length"], path, "context_length", 1), "max model length")


# ---- the profiles ----------------------------------------------------------

# Engines that honour ignore_eos are asked for it, and for usage on every
# chunk: a stream then runs to max_tokens and its token count is the server's.
_RUN_TO_MAX = MappingProxyType({"ignore_eos": True})
_USAGE_EVERY_CHUNK = MappingProxyType({"continuous_usage_stats": True})

VLLM = EngineProfile(
    name="vllm", owned_by="vllm", metrics_prefix="vllm:",
    gauges=MappingProxyType({
        METRIC_RUNNING: "vllm:num_requests_running",
        METRIC_WAITING: "vllm:num_requests_waiting",
        METRIC_KV_USAGE: "vllm:kv_cache_usage_perc",
        METRIC_GENERATION_TOKENS: "vllm:generation_tokens_total",
        METRIC_PROMPT_TOKENS: "vllm:prompt_tokens_total",
        METRIC_PREFIX_CACHE_HITS: "vllm:prefix_cache_hits_total",
    }),
    body_extras=_RUN_TO_MAX, stream_extras=_USAGE_EVERY_CHUNK,
    tokenize=VLLM_TOKENIZE, facts=_vllm_facts, live_generation_counter=True,
    spec_counters=MappingProxyType({  # vLLM v1's Prometheus counters (docs/engines.md)
        SPEC_DRAFTS: "vllm:spec_decode_num_drafts_total",
        SPEC_DRAFT_TOKENS: "vllm:spec_decode_num_draft_tokens_total",
        SPEC_ACCEPTED: "vllm:spec_decode_num_accepted_tokens_total",
    }),
)
LLAMACPP = EngineProfile(
    name="llama.cpp", owned_by="llamacpp", props_key="default_generation_settings",
    gauges=MappingProxyType({
        METRIC_RUNNING: "llamacpp:requests_processing",
        METRIC_WAITING: "llamacpp:requests_deferred",
        METRIC_GENERATION_TOKENS: "llamacpp:tokens_predicted_total",
        METRIC_PROMPT_TOKENS: "llamacpp:prompt_tokens_total",
    }),
    body_extras=_RUN_TO_MAX, stream_extras=_USAGE_EVERY_CHUNK,
    tokenize=LLAMACPP_TOKENIZE, facts=_llamacpp_facts,
)
SGLANG = EngineProfile(
    name="sglang", owned_by="sglang", metrics_prefix="sglang:",
    gauges=MappingProxyType({
        METRIC_RUNNING: "sglang:num_running_reqs",
        METRIC_WAITING: "sglang:num_queue_reqs",
        METRIC_KV_USAGE: "sglang:token_usage",
        METRIC_GENERATION_TOKENS: "sglang:generation_tokens_total",
        METRIC_PROMPT_TOKENS: "sglang:prompt_tokens_total",
        METRIC_PREFIX_CACHE_HITS: "sglang:cached_tokens_total",
    }),
    body_extras=_RUN_TO_MAX, stream_extras=_USAGE_EVERY_CHUNK,
    tokenize=SGLANG_TOKENIZE, facts=_sglang_facts,
)
# Any other OpenAI-compatible server: the standard fields only.
GENERIC = EngineProfile(name="openai")

# Detection order: the first profile the probe answers name wins.
PROFILES: tuple[EngineProfile, ...] = (VLLM, LLAMACPP, SGLANG)
BY_NAME: dict[str, EngineProfile] = {p.name: p for p in (*PROFILES, GENERIC)}


def cache_block(info) -> int:
    """The prefix cache's block in tokens, which a shared prefix is cut on and
    the reuse tolerance allows: what vLLM (block_size) or SGLang (page_size)
    told, else 1 (llama.cpp reuses its slot's cache token by token; an engine
    that tells nothing is judged at token granularity)."""
    return info.cache_block_size or 1


def flush_path(info) -> str | None:
    """The endpoint that empties the engine's prefix cache, where it has one."""
    return {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache"}.get(info.engine)


def profile_named(name: str) -> EngineProfile:
    """The profile recorded as `name` (ServerInfo.engine); GENERIC for any other."""
    return BY_NAME.get(name, GENERIC)


def owned_profile(owner: str) -> EngineProfile | None:
    """The profile a /v1/models `owned_by` names, if any."""
    return next((p for p in PROFILES if p.owned_by and p.owned_by == owner), None)


def detect(owner: str, metrics_text: str | None, props: dict | None) -> EngineProfile:
    """The engine the probe answers name, GENERIC if none does."""
    return next((p for p in PROFILES if p.names_it(owner, metrics_text, props)), GENERIC)
