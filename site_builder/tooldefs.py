"""Each peer tool's own definition of each figure it publishes, as its reader read it (data only).

Why a table here and not in the readers: the builder must not import the
importer, and run.yaml carries each definition as prose only. Every entry
names a rule from the small vocabulary below, which site_builder/toolcompare.py
recomputes from the run's rows, and the phrase of the reader's own
definition text (``importer/peers/<tool>.py``, DEFINITIONS or its metric
table) that says so: tests/site/test_tooldefs.py checks each phrase against
the text the reader writes into run.yaml, so the two cannot drift apart.
Tool names are exactly the readers' ``PeerRun.tool``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Rules: how one figure's samples are made from a request's stamps.
TTFT = "ttft"  # first content chunk − send
E2E_END = "e2e_end"  # the row's end (response read / completion) − send
E2E_LAST_CHUNK = "e2e_last_chunk"  # the last content chunk − send
PER_CHUNK = "per_chunk"  # every gap between consecutive content chunks, pooled, whatever their tokens
TOKEN_STAMPS = "token_stamps"  # per-token stamps pooled: a chunk's gap once, then a 0 per further token
FIRST_TO_LAST_CHUNK = "first_to_last_chunk"  # (last content chunk − first) / (tokens − 1) per request
CHUNK_RATE = "chunk_rate"  # 1 / FIRST_TO_LAST_CHUNK per request (tok/s)
FIRST_TO_LAST_TOKEN = "first_to_last_token"  # (last token's chunk − first) / (tokens − 1) per request
WITH_TTFT = "with_ttft"  # (last token's chunk − send) / tokens per request: the TTFT included
RULES = (TTFT, E2E_END, E2E_LAST_CHUNK, PER_CHUNK, TOKEN_STAMPS, FIRST_TO_LAST_CHUNK, CHUNK_RATE,
         FIRST_TO_LAST_TOKEN, WITH_TTFT)

# Weights of each sample in the tool's mean and percentiles.
WEIGHT_ONE = "one"
WEIGHT_TOKENS = "tokens"  # a request weighs its output tokens
WEIGHT_TOKENS_LESS_ONE = "tokens-1"  # ... its output tokens less one

# How the tool ranks a percentile.
LINEAR = "linear"  # numpy's default: linear between the two nearest ranks
FIRST_REACHING = "first_reaching"  # the smallest value whose cumulative weight share reaches N%


@dataclass(frozen=True)
class ToolRule:
    """One tool's definition of one figure.

    ``rule`` None: its rows cannot give it (``words`` says why). ``own_count``:
    the tool divides by its own tokenizer's count, which its rows may not hold.
    ``needs_chunk_counts``: recomputable only where the rows keep the tool's own
    tokens per chunk (cell token_counting ``peer_chunk_counts``)."""

    rule: str | None
    words: str
    source: str  # the phrase of the reader's definition text this entry rests on
    weight: str = WEIGHT_ONE
    ranking: str = LINEAR
    own_count: bool = False
    needs_chunk_counts: bool = False


# Short labels of the rules, next to a figure's name on the page.
RULE_LABELS = {TTFT: "", E2E_END: "to the response's end", E2E_LAST_CHUNK: "to the last chunk",
               PER_CHUNK: "per chunk", TOKEN_STAMPS: "per token stamp",
               FIRST_TO_LAST_CHUNK: "per request, to the last chunk", CHUNK_RATE: "per request",
               FIRST_TO_LAST_TOKEN: "per request", WITH_TTFT: "with the TTFT"}

_AIPERF = {
    "ttft_ms": ToolRule(TTFT, "first content chunk − the request's start", "first content chunk's arrival"),
    "itl_ms": ToolRule(PER_CHUNK, "AIPerf inter_chunk_latency: every gap between content chunks, pooled "
                       "(a chunk of k tokens is one gap); t-digest percentiles, exact at tens of requests",
                       "gaps between consecutive content chunks"),
    "tpot_ms": ToolRule(FIRST_TO_LAST_CHUNK, "AIPerf inter_token_latency: per request (latency − TTFT) / "
                        "(tokens − 1), latency to the last content chunk; tokens as AIPerf counted them",
                        "(request latency - TTFT) / (output tokens - 1)", own_count=True),
    "e2e_ms": ToolRule(E2E_LAST_CHUNK, "to the last content chunk (usage-only and [DONE] not counted)",
                       "last content chunk's arrival"),
    "per_request_tok_s": ToolRule(CHUNK_RATE, "1 / inter_token_latency per request; its pN is the Nth "
                                  "percentile upward (ours is the slow side)", "1 / inter_token_latency",
                                  own_count=True),
}
_VLLM = {
    "ttft_ms": ToolRule(TTFT, "first event holding a choice − send (with openai-chat a role-only delta)",
                        "first SSE event whose choices list is non-empty"),
    "itl_ms": ToolRule(PER_CHUNK, "one sample per chunk gap, pooled: a chunk of k tokens reads k× the "
                       "per-token gap", "per chunk, not per token"),
    "tpot_ms": ToolRule(FIRST_TO_LAST_CHUNK, "per request (latency − TTFT) / (tokens − 1), latency to the "
                        "last choice-bearing event", "(latency - TTFT) / (output tokens - 1)"),
    "e2e_ms": ToolRule(E2E_LAST_CHUNK, "to the last choice-bearing event", "send to the last choice-bearing"),
}
_SGLANG_DONE = ("its latency runs to the last SSE line read ([DONE] included), which the file does not "
                "keep: its rows end at the last chunk")
_SGLANG = {
    "ttft_ms": ToolRule(TTFT, "first event with non-empty text − send",
                        "first SSE event whose text is non-empty"),
    "itl_ms": ToolRule(PER_CHUNK, "one sample per chunk gap, pooled", "per chunk"),
    "tpot_ms": ToolRule(None, "per request (latency − TTFT) / (tokens − 1); " + _SGLANG_DONE,
                        "[DONE] included"),
    "e2e_ms": ToolRule(None, "send to [DONE]; " + _SGLANG_DONE, "[DONE] included"),
}
_GUIDELLM_PCT = "; its pN is the smallest value whose cumulative weight share reaches N%"
_GUIDELLM = {
    "ttft_ms": ToolRule(TTFT, "first token iteration − request start" + _GUIDELLM_PCT,
                        "first token iteration minus request start", ranking=FIRST_REACHING),
    "itl_ms": ToolRule(FIRST_TO_LAST_TOKEN, "per request (last token − first token) / (tokens − 1), weighted "
                       "by tokens − 1" + _GUIDELLM_PCT, "weighted by output tokens - 1",
                       weight=WEIGHT_TOKENS_LESS_ONE, ranking=FIRST_REACHING),
    "tpot_ms": ToolRule(WITH_TTFT, "(last token − send) / tokens per request: includes the TTFT; weighted "
                        "by tokens" + _GUIDELLM_PCT, "TTFT included", weight=WEIGHT_TOKENS,
                        ranking=FIRST_REACHING),
    "e2e_ms": ToolRule(E2E_END, "request end − request start" + _GUIDELLM_PCT,
                       "request end minus request start", ranking=FIRST_REACHING),
}
_INFERENCE_PERF = {
    "ttft_ms": ToolRule(TTFT, "first output-token stamp − request start", "first output-token stamp"),
    "itl_ms": ToolRule(TOKEN_STAMPS, "per-token stamps pooled: a chunk of k tokens (its tokenizer's count) "
                       "gives its gap once and k − 1 zeros", "gaps inside a chunk are 0", own_count=True,
                       needs_chunk_counts=True),
    "tpot_ms": ToolRule(FIRST_TO_LAST_TOKEN, "per request (last token − first) / (tokens − 1), tokens "
                        "re-counted by its own tokenizer", "re-tokenized count", own_count=True,
                        needs_chunk_counts=True),
    "e2e_ms": ToolRule(E2E_END, "request end (response read) − request start", "request end"),
}
_MLPERF = {
    "ttft_ms": ToolRule(TTFT, "sample.recv_first − sample.issued", "recv_first stamp minus sample.issued"),
    "tpot_ms": ToolRule(None, "(sample.complete − first chunk) / the tokens after the first chunk, counted "
                        "by its tokenizer at report time: not in the file", "after its first chunk",
                        own_count=True),
    "e2e_ms": ToolRule(E2E_END, "sample.complete − sample.issued", "sample.complete stamp minus"),
}

TOOL_DEFINITIONS: dict[tuple[str, str], ToolRule] = {
    (tool, metric): rule
    for tool, table in (("aiperf", _AIPERF), ("vllm-bench-serve", _VLLM), ("sglang-bench-serving", _SGLANG),
                        ("guidellm", _GUIDELLM), ("inference-perf", _INFERENCE_PERF),
                        ("mlperf-endpoints", _MLPERF))
    for metric, rule in table.items()
}

# How each tool's total tok/s is made, where it is not "its output tokens / its duration_s":
# (recomputable from its rows and duration_s where they hold its count, how it is made).
TOTAL_DEFINITIONS: dict[str, tuple[bool, str]] = {
    "aiperf": (False, "its output tokens over the profiling phase's span (start_time to end_time), "
                      "not over duration_s (benchmark_duration), and that span is not among its "
                      "imported figures"),
    "inference-perf": (True, "its re-tokenized output tokens over duration_s: its rows hold the server's "
                             "count"),
}
