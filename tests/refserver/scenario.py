"""What the reference server does: a `Scenario`, plus its toy model.

A scenario is plain JSON-serialisable data (`to_dict` / `from_dict`), so a test
writes it to a file and the server process reads it back. Every field is
optional; the defaults describe a fast, well-behaved vLLM-like server.

The toy model the scenario drives (documented here because tests rely on it):

- **Tokenizer**: one token = one whitespace-separated word. A chat prompt's
  tokens are the words of all message contents concatenated (text parts of
  list contents included), with no chat-template overhead; a completions
  prompt is a string (its words) or a list of token ids (one token each).
- **Token ids** (`/tokenize`): a word's id is `crc32(word) % 100000`; an int
  stays itself.
- **Output text**: token k of a channel is the word `w<n> ` where n comes from
  a seeded hash of (seed, channel, k): the same for every request. The first
  `reasoning_tokens` tokens go to `delta.reasoning_content`, the rest to
  `delta.content`. With `loop_after_tokens` = L, the looping channel (content,
  or reasoning if `loop_in_reasoning`) repeats its words L .. L+loop_period-1
  forever after its first L tokens; with `loop_in_reasoning` the model never
  leaves reasoning (every token is reasoning).
- **Time**: a request gets a slot when one is free (FIFO). Its first token is
  due `ttft_ms` after the slot, plus (prompt_tokens − cached) /
  `prefill_tok_per_s`, cached being what the prefix cache reuses (below).
- **Prefix cache** (prefix_cache.py), looked up when a request gets its slot
  and filled when its prefill is done (its first token). By default it is
  all or nothing: a hit (its first `prefix_cache_words` words were prefilled
  before, or its number k has k % `cache_hit_every` == 0) caches every prompt
  token. With `prefix_cache_block` = B it keeps blocks of B prompt tokens
  (the words, in message order: a conversation's history is a prefix of its
  next turn; chat-template tokens are never cached): a request reuses its
  longest run of stored leading whole blocks, never its last token; after
  prefill every whole block of its prompt is stored. With
  `prefix_cache_capacity_tokens` the cache holds that many tokens (whole
  blocks) and evicts the least recently used blocks (a lookup's hit counts as
  a use; a prompt's tail goes before its head). vLLM POST /reset_prefix_cache
  and SGLang POST /flush_cache empty it (404 with `prefix_cache_flush` false).
  What is reused is the truth record's `cached_tokens` (`cached`: > 0). It is
  published as usage `prompt_tokens_details.cached_tokens` (0 with
  `report_cached_tokens` false; plus `cached_tokens_extra`, a fault: more
  cached than the prompt has; no prompt_tokens_details at all with
  `prompt_tokens_details` false), in the engine's counters (vLLM
  prefix_cache_hits_total / prefix_cache_queries_total = prompt tokens,
  SGLang cached_tokens_total / prompt_tokens_total and cache_hit_rate) and in
  llama.cpp's `timings` {cache_n, prompt_n = prompt − cached, ...} on a
  request's last chunk (the usage chunk, else the finish chunk; the body when
  not streaming). Broken caches: `prefix_cache_silent_off` reuses nothing
  while vLLM's cache_config_info still says enable_prefix_caching True;
  `prefix_cache_miss_marker` makes a chat request whose last message holds
  that text reuse nothing (one dropped conversation turn);
  `prefix_counters_lie` = f makes the counters and cache_n claim hits × f
  (rounded); `prefix_counters` false drops those counters and cache_n (with
  `prompt_tokens_details` false too, reuse cannot be verified); with
  `metrics_enabled` false no engine serves /metrics.
- **Decode**: one global step clock drives decode: every decoding
  stream emits one chunk per step, all at the same instant; a step lasts
  1 / `tokens_per_s` × (1 + `slowdown_per_active` × (running − 1)). A chunk
  carries `tokens_per_chunk` tokens (an int, or a list cycled per step like
  speculative decoding), so chunk size does not change the step interval. A
  first token due between steps waits for the next step while others decode.
- **Speculative decoding** (speculative.py): with `spec_draft_tokens` = k each
  decode chunk is a verification step yielding accepted + 1 tokens (accepted
  from `spec_accept`, or seeded draws with `spec_accept_p`), logged per request
  (`spec_steps`, `spec_accepted`) and counted in vLLM's spec_decode counters
  and llama.cpp's timings.draft_n / draft_n_accepted (claimed × `spec_counters_lie`,
  absent without `spec_counters`), SGLang's windowed gauges alike;
  `spec_steps_per_chunk` batches steps per chunk.
- **Per-request variation** (variation.py), by request number: request k with
  k % `slow_first_every` == 0 has its first token due `slow_first_extra_ms`
  later (a list is cycled over those requests: the j-th, k = j ×
  slow_first_every, waits entry (j − 1) mod len); request k with
  k % `half_speed_every` == 0 emits a chunk only at every
  `half_speed_steps`-th step of the global clock after its first token (2,
  the default: half speed; a list is cycled the same way). Each truth record
  carries its request's `first_extra_ms` and `every_steps`, and `steps`: per
  streamed chunk, the number of clock steps so far (a first token between
  steps has the last step's number), so consecutive chunks of a request are
  `every_steps` apart in it however late the host runs the clock.
- **Requests** are numbered 1, 2, ... in arrival order (completion requests
  that pass the API key); `status_every` answers number k with k % n == 0,
  and the mid-stream faults (reset, fail, stall, malformed; streaming requests
  only) hit number k with k % `fault_every` == 0, once each, at the first step
  at which the request has sent at least the given number of tokens. A stall
  generates nothing meanwhile (the slot stays taken). A usage skew reports a
  wrong cumulative `completion_tokens` in one chunk; a freeze blocks the whole
  server (every stream and endpoint) once. Without `max_tokens` a
  request generates `default_max_tokens`, else max_model_len − prompt tokens.
- **Cells**: each request is also numbered within the collector's cell its
  prompt's tag names, and `inject` places a fault at the k-th request of a
  cell (inject.py): how fault and lifecycle tests land in a phase without
  waiting by the clock.
  A request ends with finish_reason "length" at its max_tokens, unless
  `finish_length_after_tokens` (a lying "length") or `finish_stop_after_tokens`
  ("stop", as if EOS, ignore_eos or not) ends every request sooner; `eos_after_tokens`
  ends with "stop" (a model's EOS) after that many tokens each request numbered k with
  k % `eos_every` == 0 whose body does not ask ignore_eos (a server that honours it).
- **Engines** (dialects.py): "vllm" serves /health, /version, /tokenize,
  /metrics (vLLM names; kv_cache_usage_perc is 0 without `kv_budget_tokens`;
  cache_config_info, with `kv_budget_tokens` or `prefix_cache_block`, has
  block_size = prefix_cache_block (16 if unset) and num_gpu_blocks = the
  budget, else the cache's capacity, else 16 × max_model_len, in blocks);
  "llamacpp" serves /health, /props, /slots, /tokenize, /metrics (llama.cpp
  names) and has 1 slot unless `slots` says otherwise; "sglang" serves
  /health, /get_server_info and /server_info (max_total_num_tokens only with
  `kv_budget_tokens`, page_size only with `prefix_cache_block`),
  /get_model_info, /tokenize and /v1/tokenize (a prompt
  only, a BOS token unless add_special_tokens is false), /metrics (`sglang:`
  names, only with `metrics_enabled`) and answers errors in its flat shape;
  "generic" serves only /v1/models (without max_model_len) and the
  completion endpoints. All serve /v1/chat/completions and /v1/completions,
  streaming or not. A chat prompt counts `chat_template_tokens` more than
  its words (vLLM's /tokenize of messages counts them too; a bare-text
  count does not).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tests.refserver.answers import check as check_answers
from tests.refserver.inject import check as check_inject
from tests.refserver.speculative import check as check_spec
from tests.refserver.variation import check as check_variation

USAGE_MODES = ("continuous", "final", "none")
ROLE_CHUNK = ("start", "first_token")


@dataclass
class Scenario:
    # identity and limits
    model: str = "ref"
    max_model_len: int = 32768
    engine: str = "vllm"  # a key of tests/refserver/dialects.py DIALECTS
    chat_template_tokens: int = 0  # a chat prompt's tokens beyond its words
    metrics_enabled: bool = True  # False: no /metrics, any engine (SGLang without --enable-metrics)
    seed: int = 0
    # timing
    ttft_ms: float = 10.0
    prefill_tok_per_s: float | None = None  # None: prefill costs nothing
    prefix_cache_words: int = 64
    cache_hit_every: int | None = None  # request k with k % n == 0 is a prefix-cache hit
    report_cached_tokens: bool = True  # False: only /metrics tells of a hit
    cached_tokens_extra: int = 0  # a fault: a hit reports this many more cached tokens than its prompt
    # the block-granular prefix cache (prefix_cache.py; None: the all-or-nothing cache above)
    prefix_cache_block: int | None = None  # tokens per block
    prefix_cache_capacity_tokens: int | None = None  # None: unlimited; else LRU eviction
    prefix_cache_flush: bool = True  # vLLM POST /reset_prefix_cache, SGLang POST /flush_cache
    # broken prefix caches: claimed on, nothing reused; counters that report hits x factor;
    # no prefix-cache counters (nor llama.cpp's timings.cache_n); usage without
    # prompt_tokens_details (with no counters: reuse not verifiable)
    prefix_cache_silent_off: bool = False
    # a chat request whose last message contains this text reuses nothing (a cache that
    # drops one conversation turn's hits while the turns around it hit)
    prefix_cache_miss_marker: str | None = None
    prefix_counters_lie: float = 1.0
    prefix_counters: bool = True
    prompt_tokens_details: bool = True
    tokens_per_s: float = 100.0
    slowdown_per_active: float = 0.0
    tokens_per_chunk: int | list[int] = 1
    reasoning_tokens: int = 0
    # per-request variation by request number (variation.py): a later first token,
    # a decode at every m-th step (lists are cycled over the requests they hit)
    slow_first_every: int | None = None
    slow_first_extra_ms: float | list[float] = 0.0
    half_speed_every: int | None = None
    half_speed_steps: int | list[int] = 2
    # capacity
    slots: int | None = None  # None: the dialect's default_slots (unlimited; llamacpp: 1)
    kv_budget_tokens: int | None = None
    refuse_over_kv: bool = False
    dp_ranks: int = 1
    default_max_tokens: int | None = None  # None: max_model_len - prompt (vLLM)
    # text
    loop_after_tokens: int | None = None
    loop_period: int = 8
    loop_in_reasoning: bool = False
    # finishes: every request ends after this many tokens (if below its max_tokens)
    # with finish_reason "length" (impossible: a misreporting server) or "stop"
    finish_length_after_tokens: int | None = None
    finish_stop_after_tokens: int | None = None
    # EOS: requests number k % eos_every == 0 not asking ignore_eos end "stop" after this many
    eos_after_tokens: int | None = None
    eos_every: int = 1
    # protocol
    usage_mode: str = "continuous"  # "continuous" | "final" | "none"
    role_chunk: str = "start"  # "start": at response start; "first_token": just before it
    # faults
    status_every: dict[str, int] | None = None  # {"n": 5, "code": 429}
    fault_every: int = 1  # mid-stream faults hit requests number k with k % fault_every == 0
    reset_after_tokens: int | None = None
    malformed_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    stall_s: float = 0.5
    fail_after_tokens: int | None = None
    # a faulty request's frame at this many tokens announces `bad_chunk_size` as its
    # HTTP chunk size line instead of the true hex length (e.g. "-5", "0x10")
    bad_chunk_size_after_tokens: int | None = None
    bad_chunk_size: str = "-5"
    api_key: str | None = None
    # faults: token counts and whole-server freezes (lead). A faulty request's usage
    # is off by `usage_skew` once (negative: the count goes backwards; positive: it
    # jumps) at its first step with at least `usage_skew_after_tokens` tokens; when a
    # faulty request reaches `freeze_after_tokens`, the whole server (streams, /metrics,
    # accepts) blocks for `freeze_s` once, as if SIGSTOPped.
    usage_skew_after_tokens: int | None = None
    usage_skew: int = 0
    freeze_after_tokens: int | None = None
    freeze_s: float = 2.0
    # faults: endpoint answers (answers.py). A path (any method, completion paths too)
    # answers {"status", "body" (raw text), "content_type", "delay_s", "reset", "close"}
    # instead of its real answer; /metrics answers `metrics_delay_s` late (not blocking).
    endpoint_answers: dict[str, dict[str, Any]] | None = None
    metrics_delay_s: float = 0.0
    # lifecycle: API key scope, a server dying between cells (H5). With `api_key_scope`
    # "completions" only the completion endpoints check `api_key` (llama-server exempts
    # /v1/models, so a probe passes with a wrong key); `exit_on_tokenize_after` = N: the
    # process exits at the first /tokenize after N completion requests, before answering.
    api_key_scope: str = "all"  # "all" | "completions"
    # lifecycle: a server still loading its model. The first `loading_answers` HTTP
    # requests (any path) answer 503 {"error": {"message": "Loading model", ...}}, as
    # llama-server does until its model is loaded.
    loading_answers: int = 0
    exit_on_tokenize_after: int | None = None
    # faults by request count and cell (inject.py): [{"cell": ["decode", 128, 2], "at": 3,
    # "do": "hold" | "exit" | "stop" | "freeze" | "refuse" | "mark", ...}, ...]
    inject: list[dict[str, Any]] | None = None
    # speculative decoding (speculative.py): a draft of `spec_draft_tokens` (k) tokens per
    # verification step, accepted per `spec_accept` (a list of accepted counts cycled over a
    # request's steps) or else seeded draws (each draft token kept with `spec_accept_p`, up
    # to the first rejected); counters and timings claim accepted x `spec_counters_lie`
    # (none with `spec_counters` false); `spec_steps_per_chunk` steps' tokens go in one chunk
    spec_draft_tokens: int | None = None
    spec_accept: list[int] | None = None
    spec_accept_p: float = 0.7
    spec_counters: bool = True
    spec_counters_lie: float = 1.0
    spec_steps_per_chunk: int = 1
    # precision: this long before a step the server leaves the event loop's ms-coarse
    # timers for a precise blocking sleep and a final spin (I/O waits meanwhile)
    precise_us: int = 1500

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"scenario: {what}")

        engines = tuple(_dialects())
        need(self.engine in engines, f"engine must be one of {engines}, got {self.engine!r}")
        need(self.usage_mode in USAGE_MODES, f"usage_mode must be one of {USAGE_MODES}")
        need(self.role_chunk in ROLE_CHUNK, f"role_chunk must be one of {ROLE_CHUNK}")
        need(self.tokens_per_s > 0, "tokens_per_s must be > 0")
        need(self.chat_template_tokens >= 0, "chat_template_tokens must be >= 0")
        need(self.ttft_ms >= 0, "ttft_ms must be >= 0")
        need(self.prefill_tok_per_s is None or self.prefill_tok_per_s > 0,
             "prefill_tok_per_s must be > 0")
        pattern = self.chunk_pattern
        need(len(pattern) > 0 and all(isinstance(n, int) and n > 0 for n in pattern),
             "tokens_per_chunk must be a positive int or a non-empty list of them")
        need(self.slots is None or self.slots > 0, "slots must be > 0")
        need(self.dp_ranks >= 1, "dp_ranks must be >= 1")
        need(self.fault_every >= 1, "fault_every must be >= 1")
        need(self.eos_every >= 1, "eos_every must be >= 1")
        need(self.cache_hit_every is None or self.cache_hit_every >= 1,
             "cache_hit_every must be >= 1")
        need(self.loop_period >= 1, "loop_period must be >= 1")
        need(self.prefix_cache_block is None or self.prefix_cache_block >= 1,
             "prefix_cache_block must be >= 1 (tokens) or null")
        need(self.prefix_cache_capacity_tokens is None or (
            self.prefix_cache_block is not None and self.prefix_cache_capacity_tokens >= 0),
             "prefix_cache_capacity_tokens must be >= 0 and needs prefix_cache_block")
        need(self.prefix_cache_block is None or self.cache_hit_every is None,
             "cache_hit_every forces whole-prompt hits: not with prefix_cache_block")
        need(self.prefix_counters_lie >= 0, "prefix_counters_lie must be >= 0 (a factor)")
        if self.status_every is not None:
            need(set(self.status_every) == {"n", "code"} and self.status_every["n"] >= 1,
                 'status_every must be {"n": N >= 1, "code": CODE}')
        need(self.api_key_scope in ("all", "completions"),
             'api_key_scope must be "all" or "completions"')
        answers_problem = check_answers(self.endpoint_answers, self.metrics_delay_s)
        need(answers_problem is None, str(answers_problem))
        inject_problem = check_inject(self.inject)
        need(inject_problem is None, str(inject_problem))
        spec_problem = check_spec(self)
        need(spec_problem is None, str(spec_problem))
        variation_problem = check_variation(self)
        need(variation_problem is None, str(variation_problem))

    # ---- serialisation -------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"scenario: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    # ---- derived -------------------------------------------------------

    @property
    def chunk_pattern(self) -> list[int]:
        t = self.tokens_per_chunk
        return [t] if isinstance(t, int) else list(t)

    @property
    def effective_slots(self) -> int | None:
        return self.slots if self.slots is not None else _dialects()[self.engine].default_slots

    def step_interval_ns(self, running: int) -> int:
        base = 1e9 / self.tokens_per_s
        return int(base * (1.0 + self.slowdown_per_active * max(0, running - 1)))

    def is_reasoning(self, k: int) -> bool:
        """Whether completion token k (0-based) is reasoning."""
        if self.loop_in_reasoning and self.loop_after_tokens is not None:
            return True
        return k < self.reasoning_tokens

    def token_text(self, k: int) -> str:
        """Text of completion token k (0-based), including its trailing space."""
        reasoning = self.is_reasoning(k)
        pos = k if reasoning else k - self.reasoning_tokens
        loops = self.loop_after_tokens is not None and reasoning == self.loop_in_reasoning
        if loops and pos >= self.loop_after_tokens:
            pos = self.loop_after_tokens + (pos - self.loop_after_tokens) % self.loop_period
        n = zlib.crc32(f"{self.seed}:{int(reasoning)}:{pos}".encode()) % 100000
        return f"w{n} "


# ---- the toy tokenizer -------------------------------------------------


def text_words(text: str) -> list[str]:
    return text.split()


def message_heads(messages: list[dict[str, Any]], words: int = 8) -> list[list[str]]:
    """[role, the content's first `words` words] per message of a chat request (for a test
    to see which texts a history held, and in what order)."""
    return [[str(m.get("role")), " ".join(message_words([m])[:words])]
            for m in messages or [] if isinstance(m, dict)]


def message_words(messages: list[dict[str, Any]]) -> list[str]:
    """Prompt tokens of a chat request: words of every message content."""
    words: list[str] = []
    for m in messages or []:
        content = m.get("content")
        if isinstance(content, str):
            words += content.split()
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    words += part["text"].split()
    return words


def prompt_words(prompt: Any) -> list[str]:
    """Prompt tokens of a completions request (string, list of strings, or ids)."""
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list):
        if all(isinstance(p, int) for p in prompt):
            return [str(p) for p in prompt]
        return [w for p in prompt if isinstance(p, str) for w in p.split()]
    return []


def token_ids(words: list[str]) -> list[int]:
    return [int(w) if w.isdigit() else zlib.crc32(w.encode()) % 100000 for w in words]


def _dialects() -> dict:
    """The engines the server can speak as: one Dialect each (dialects.py imports this
    module, hence the late import), so a new dialect is named there and only there."""
    from tests.refserver.dialects import DIALECTS

    return DIALECTS
