"""How the reference server speaks as each engine (`Scenario.engine`).

The server (server.py) owns the toy model, the step clock and the faults;
a `Dialect` owns what differs by engine: its endpoints besides the
completions, its /v1/models entry, its /tokenize request and answer, its
/metrics names and labels, its info endpoints, its refusal of a request
longer than the context, and its role chunk. What each engine's real
answers look like, and where that was checked, is in docs/engines.md; the
emulation keeps the shapes the collector reads (field names, label sets,
error bodies), not every field a real engine sends.
"""

from __future__ import annotations

import time
from typing import Any

from tests.refserver.scenario import message_words, prompt_words, token_ids
from tests.refserver.speculative import accept_length, claimed

JSON, PROM = "application/json", "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
BOS = 1  # the toy tokenizer's one special token, added where an engine's tokenize asks for it


def error_body(message: str, typ: str, code) -> dict:
    """vLLM's and llama-server's error answer: the OpenAI `{"error": {...}}` shape."""
    return {"error": {"message": message, "type": typ, "param": None, "code": code}}


def prom(metrics) -> tuple[bytes, str]:
    """[(name, type, [(labels, value), ...]), ...] -> Prometheus text format."""
    out = []
    for name, typ, samples in metrics:
        out += [f"# HELP {name} refserver", f"# TYPE {name} {typ}"]
        for labels, value in samples:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out.append(f"{name}{{{lab}}} {float(value)}" if lab else f"{name} {float(value)}")
    return ("\n".join(out) + "\n").encode(), PROM


class Dialect:
    """A generic OpenAI-compatible server: /v1/models (no max_model_len) and
    the completion endpoints only. `engine` is the server's Engine (slots,
    queue, counters), read for the gauges."""

    owned_by = "generic"
    default_slots: int | None = None  # slots when the scenario sets none (None: unlimited)

    def __init__(self, sc, engine) -> None:
        self.sc, self.engine = sc, engine

    def routes(self) -> dict:
        """(method, path) -> handler(request JSON) -> (body, content type[, status])."""
        return {("GET", "/v1/models"): self.models}

    def model_entry(self) -> dict:
        return {"id": self.sc.model, "object": "model", "created": 0, "owned_by": self.owned_by}

    def models(self, _d) -> tuple[dict, str]:
        return {"object": "list", "data": [self.model_entry()]}, JSON

    def role_delta(self) -> dict:
        return {"role": "assistant", "content": ""}

    def final_fields(self, r) -> dict:
        """Fields of a request's last chunk (or whole answer) besides the OpenAI ones."""
        return {}

    def with_metrics(self, routes: dict) -> dict:
        """`routes` plus GET /metrics unless the scenario turns metrics off."""
        return {**routes, ("GET", "/metrics"): self.metrics} if self.sc.metrics_enabled else routes

    def prefix_rows(self, hits: str, queries: str, labels: dict) -> list:
        """The engine's prefix-cache counters (hits as the scenario makes it claim them),
        none without `prefix_counters`; `queries` None: only the hits."""
        if not self.sc.prefix_counters:
            return []
        e = self.engine
        rows = [(hits, "counter", [(labels, e.cache.claimed(e.cache.hits))])]
        return rows + ([(queries, "counter", [(labels, e.prompt_total)])] if queries else [])

    def flush(self, answer) -> dict:
        """The engine's prefix-cache flush route (`answer`: its 200 body), if the scenario has it."""
        def handler(_d):
            self.engine.cache.flush()
            return answer
        return {("POST", self.flush_path): handler} if self.sc.prefix_cache_flush else {}

    def too_long(self, prompt_tokens: int, max_tokens: int) -> tuple[int, dict]:
        """The refusal of a request whose prompt + max_tokens exceed the context."""
        sc, need = self.sc, prompt_tokens + max_tokens
        return 400, error_body(
            f"This model's maximum context length is {sc.max_model_len} tokens. However, "
            f"you requested {need} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages "
            "or completion.", "BadRequestError", 400)

    def kv_fraction(self) -> float:
        budget = self.sc.kv_budget_tokens
        return min(1.0, self.engine.kv_used() / budget) if budget else 0.0

    def dp_split(self, value: int, labels: dict[str, str], rank_label: str) -> list:
        """`value` over the data-parallel ranks; the sum is the true value."""
        n = self.sc.dp_ranks
        return [({rank_label: str(i), **labels}, value // n + (i < value % n)) for i in range(n)]


class Vllm(Dialect):
    """vLLM's OpenAI server: /health, /version, /tokenize, /metrics."""

    owned_by = "vllm"
    flush_path = "/reset_prefix_cache"

    def routes(self) -> dict:
        return self.with_metrics({
            **super().routes(), **self.flush((b"", JSON)),
            ("GET", "/health"): lambda d: (b"", JSON),
            ("GET", "/version"): lambda d: ({"version": "ref-0.1"}, JSON),
            ("POST", "/tokenize"): self.tokenize})

    def model_entry(self) -> dict:
        return {**super().model_entry(), "root": self.sc.model, "parent": None,
                "max_model_len": self.sc.max_model_len}

    def role_delta(self) -> dict:
        return {"role": "assistant"}

    def tokenize(self, d) -> tuple[dict, str]:
        """`messages` (counted with the chat template) or a bare `prompt`."""
        if "messages" in d:
            ids = token_ids(message_words(d["messages"])) + [BOS] * self.sc.chat_template_tokens
        else:
            ids = token_ids(prompt_words(d.get("prompt")))
        return {"count": len(ids), "tokens": ids, "max_model_len": self.sc.max_model_len}, JSON

    def metrics(self, _d) -> tuple[bytes, str]:
        sc, e, budget = self.sc, self.engine, self.sc.kv_budget_tokens
        one = {"engine": "0", "model_name": sc.model}
        ranks = {"model_name": sc.model}
        rows = [("vllm:num_requests_running", "gauge", self.dp_split(len(e.running), ranks, "engine")),
                ("vllm:num_requests_waiting", "gauge", self.dp_split(len(e.waiting), ranks, "engine")),
                ("vllm:kv_cache_usage_perc", "gauge", [(one, self.kv_fraction())]),
                ("vllm:prompt_tokens_total", "counter", [(one, e.prompt_total)]),
                ("vllm:generation_tokens_total", "counter", [(one, e.gen_total)]),
                *self.prefix_rows("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                                  one)]
        if sc.spec_draft_tokens and sc.spec_counters:  # speculative.py; vLLM v1's counter names
            rows += [("vllm:spec_decode_num_drafts_total", "counter", [(one, e.spec_drafts)]),
                     ("vllm:spec_decode_num_draft_tokens_total", "counter",
                      [(one, e.spec_draft_tokens)]),
                     ("vllm:spec_decode_num_accepted_tokens_total", "counter",
                      [(one, claimed(sc, e.spec_accepted))])]
        if budget or sc.prefix_cache_block:  # blocks: the KV budget's, else the cache's
            block = e.cache.block
            tokens = budget or sc.prefix_cache_capacity_tokens or 16 * sc.max_model_len
            rows.append(("vllm:cache_config_info", "gauge", [(
                {"block_size": str(block), "cache_dtype": "auto", "enable_prefix_caching": "True",
                 "engine": "0", "num_gpu_blocks": str(tokens // block)}, 1)]))
        return prom(rows)


class LlamaCpp(Dialect):
    """llama-server: /health, /props, /slots, /tokenize ({"content"} -> tokens), /metrics."""

    owned_by = "llamacpp"
    default_slots = 1  # llama-server always has slots; -np 1 is the classic default

    def routes(self) -> dict:
        return self.with_metrics({
            **super().routes(),
            ("GET", "/health"): lambda d: ({"status": "ok"}, JSON),
            ("GET", "/props"): self.props, ("GET", "/slots"): self.slots,
            ("POST", "/tokenize"): self.tokenize})

    def model_entry(self) -> dict:
        return {**super().model_entry(), "meta": {"n_ctx_train": self.sc.max_model_len}}

    def too_long(self, prompt_tokens: int, max_tokens: int) -> tuple[int, dict]:
        return 400, error_body("the request exceeds the available context size",
                               "exceed_context_size_error", 400)

    def final_fields(self, r) -> dict:
        """llama-server's `timings`: cache_n (reused; as the counters claim it, and absent
        without `prefix_counters`, as on older builds), prompt_n (computed), decode figures."""
        now, rec = time.monotonic_ns(), r.rec
        first = rec["chunks"][0][0] if rec["chunks"] else now
        prompt_ms = max(0, r.ready_ns - (rec["slot_ns"] or r.ready_ns)) / 1e6
        prompt_n, predicted_ms = r.prompt_tokens - r.cached_tokens, (now - first) / 1e6
        t = {"prompt_n": prompt_n, "prompt_ms": prompt_ms,
             "prompt_per_second": prompt_n / (prompt_ms / 1e3) if prompt_ms else 0.0,
             "predicted_n": r.generated, "predicted_ms": predicted_ms,
             "predicted_per_second": r.generated / (predicted_ms / 1e3) if predicted_ms else 0.0}
        if self.sc.prefix_counters:
            t = {"cache_n": self.engine.cache.claimed(r.cached_tokens), **t}
        if r.drafts is not None and self.sc.spec_counters:  # speculative.py
            t.update(draft_n=r.drafts.drafted, draft_n_accepted=claimed(self.sc, r.drafts.accepted))
        return {"timings": t}

    def tokenize(self, d) -> tuple[dict, str]:
        special = [BOS] if d.get("add_special") else []  # llama-server adds none unless asked
        return {"tokens": special + token_ids(prompt_words(d.get("content", "")))}, JSON

    def props(self, _d) -> tuple[dict, str]:
        return {"default_generation_settings": {"n_ctx": self.sc.max_model_len, "params": {}},
                "total_slots": self.sc.effective_slots, "model_path": self.sc.model,
                "build_info": "ref-0.1"}, JSON

    def slots(self, _d) -> tuple[list, str]:
        busy = len(self.engine.running)
        return [{"id": i, "n_ctx": self.sc.max_model_len, "is_processing": i < busy}
                for i in range(self.sc.effective_slots)], JSON

    def metrics(self, _d) -> tuple[bytes, str]:
        e = self.engine
        return prom([("llamacpp:prompt_tokens_total", "counter", [({}, e.prompt_total)]),
                     ("llamacpp:tokens_predicted_total", "counter", [({}, e.gen_total)]),
                     ("llamacpp:requests_processing", "gauge", [({}, len(e.running))]),
                     ("llamacpp:requests_deferred", "gauge", [({}, len(e.waiting))])])


def sglang_error(message: str, code: int, typ: str = "BadRequestError") -> dict:
    """SGLang's error answer: a flat ErrorResponse, not `{"error": {...}}`."""
    return {"object": "error", "message": message, "type": typ, "param": None, "code": code}


class SGLang(Dialect):
    """SGLang's server: /get_server_info (and its newer name /server_info),
    /get_model_info, /tokenize and /v1/tokenize (a `prompt` string or list,
    BOS unless add_special_tokens is false), /metrics with `sglang:` names
    (only with `metrics_enabled`, as with --enable-metrics). Several tokens
    per chunk (its --stream-interval) is the scenario's `tokens_per_chunk`."""

    owned_by = "sglang"
    flush_path = "/flush_cache"

    def routes(self) -> dict:
        r = {**super().routes(),
             ("GET", "/health"): lambda d: (b"", JSON),
             ("GET", "/get_server_info"): self.server_info,
             ("GET", "/server_info"): self.server_info,
             ("GET", "/get_model_info"): self.model_info,
             ("POST", "/tokenize"): self.tokenize, ("POST", "/v1/tokenize"): self.tokenize,
             **self.flush((b"Cache flushed.\n", TEXT))}
        return self.with_metrics(r)

    def model_entry(self) -> dict:
        return {**super().model_entry(), "root": self.sc.model, "parent": None,
                "max_model_len": self.sc.max_model_len}

    def too_long(self, prompt_tokens: int, max_tokens: int) -> tuple[int, dict]:
        need = prompt_tokens + max_tokens
        return 400, sglang_error(
            f"Requested token count exceeds the model's maximum context length of "
            f"{self.sc.max_model_len} tokens. You requested a total of {need} tokens: "
            f"{prompt_tokens} tokens from the input messages and {max_tokens} tokens for the "
            "completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit.", 400)

    def server_info(self, _d) -> tuple[dict, str]:
        """Server arguments, the scheduler's facts and the version, merged."""
        sc, e = self.sc, self.engine
        info: dict[str, Any] = {
            "model_path": sc.model, "served_model_name": sc.model,
            "context_length": sc.max_model_len, "max_running_requests": sc.effective_slots,
            "stream_interval": max(sc.chunk_pattern), "enable_metrics": sc.metrics_enabled,
            "dp_size": sc.dp_ranks, "max_req_input_len": sc.max_model_len - 1,
            "internal_states": [{"num_running_reqs": len(e.running),
                                 "num_queue_reqs": len(e.waiting)}],
            "version": "ref-0.1",
        }
        total = e.spec_logs.total
        if sc.spec_draft_tokens and sc.spec_counters and total[0]:  # every logged window's
            info["internal_states"][0]["avg_spec_accept_length"] = accept_length(sc, *total)
        if sc.prefix_cache_block:
            info["page_size"] = sc.prefix_cache_block
        if sc.kv_budget_tokens:
            info["max_total_num_tokens"] = sc.kv_budget_tokens
        return info, JSON

    def model_info(self, _d) -> tuple[dict, str]:
        return {"model_path": self.sc.model, "tokenizer_path": self.sc.model,
                "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default"}, JSON

    def tokenize(self, d) -> tuple[dict, str]:
        prompt = d.get("prompt")
        special = [BOS] if d.get("add_special_tokens", True) else []
        if isinstance(prompt, str):
            ids: list = special + token_ids(prompt_words(prompt))
            count: Any = len(ids)
        elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            ids = [special + token_ids(prompt_words(p)) for p in prompt]
            count = [len(x) for x in ids]
        else:  # `messages` is not a field of SGLang's TokenizeRequest: prompt is required
            return sglang_error("1 validation error: field 'prompt' is required (a string "
                                "or a list of strings)", 400), JSON, 400
        return {"tokens": ids, "count": count, "max_model_len": self.sc.max_model_len}, JSON

    def metrics(self, _d) -> tuple[bytes, str]:
        sc, e = self.sc, self.engine
        sched = {"model_name": sc.model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        tok = {"model_name": sc.model}
        rows = [("sglang:num_running_reqs", "gauge", self.dp_split(len(e.running), sched, "dp_rank")),
                ("sglang:num_queue_reqs", "gauge", self.dp_split(len(e.waiting), sched, "dp_rank")),
                ("sglang:num_used_tokens", "gauge", [(sched, e.kv_used())]),
                ("sglang:token_usage", "gauge", [(sched, self.kv_fraction())]),
                ("sglang:gen_throughput", "gauge", [(sched, 0.0)]),
                ("sglang:prompt_tokens_total", "counter", [(tok, e.prompt_total)]),
                ("sglang:generation_tokens_total", "counter", [(tok, e.gen_total)]),
                *self.prefix_rows("sglang:cached_tokens_total", None, tok)]
        if sc.prefix_counters:
            hits = e.cache.claimed(e.cache.hits)
            rows.append(("sglang:cache_hit_rate", "gauge", [(sched, hits / max(1, e.prompt_total))]))
        if sc.kv_budget_tokens:
            rows.append(("sglang:max_total_num_tokens", "gauge", [(sched, sc.kv_budget_tokens)]))
        if sc.spec_draft_tokens and sc.spec_counters:  # speculative.py: the last window's, not counts
            window = e.spec_logs.window
            length = accept_length(sc, *window) if window else 0.0
            rate = claimed(sc, window[1]) / (window[0] * (sc.spec_draft_tokens + 1)) if window else 0.0
            rows += [("sglang:spec_accept_length", "gauge", [(sched, length)]),
                     ("sglang:spec_accept_rate", "gauge", [(sched, rate)])]
        return prom(rows)


DIALECTS = {"generic": Dialect, "vllm": Vllm, "llamacpp": LlamaCpp, "sglang": SGLang}


def dialect_for(sc, engine) -> Dialect:
    """The dialect the scenario's engine speaks."""
    return DIALECTS[sc.engine](sc, engine)
