"""`vllm bench serve --save-result` JSON: gap tier with --save-detailed, aggregate without.

Why its own reader: the result file keeps, per request, the send stamp
(time.perf_counter seconds), the TTFT and every gap between the streamed
events that carried a choice, so each chunk's arrival can be rebuilt by
summing; without --save-detailed only the tool's summary figures (and the
bare latencies) are left. The file has no schema version and no tool version;
its fixed leading keys tell it apart. What each field means, as read in
vLLM 0.32.0's source, is in docs/import-vllm.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from importer.peers.files import load_json, number, numbers
from importer.peers.model import (
    TIER_AGGREGATE,
    TIER_GAP,
    PeerFormatError,
    PeerRequest,
    PeerRun,
    published_key,
)

TOOL = "vllm-bench-serve"
FORMAT_DETAILED = "vllm-bench-serve/result-detailed.json"
FORMAT_AGGREGATE = "vllm-bench-serve/result.json"
CLOCK = "time.perf_counter (CLOCK_MONOTONIC on Linux), float seconds, converted to integer ns"

# The file always opens with these keys, in this order (serve.py writes them first).
_HEAD = re.compile(
    rb'^\s*\{\s*"date"\s*:\s*"\d{8}-\d{6}"\s*,\s*"endpoint_type"\s*:\s*"[^"]*"\s*,'
    rb'\s*"backend"\s*:\s*"[^"]*"\s*,\s*"label"\s*:'
)
_DETAIL_KEY = b'"input_lens"'
# Per-request lists --save-detailed keeps (in the order serve.py writes them).
_DETAIL_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")
# A request's rebuilt end (start + TTFT + gaps) may differ from start + latency only by float rounding.
_SUM_TOLERANCE_S = 1e-6

# vLLM's metric name -> ours (the summary keys are f"{stat}_{name}_ms").
_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2e_ms"}
_TOTALS = {
    "output_throughput": "total_tok_s",
    "request_throughput": "request_rate",
    "duration": "duration_s",
    "completed": "completed",
    "total_output_tokens": "output_tokens",
}
DEFINITIONS = {
    "ttft_ms": "succeeded requests only: from the client's perf_counter just before the POST to the "
    "first SSE event whose choices list is non-empty (with openai-chat a role-only first delta "
    "counts); numpy mean / median / linear percentile",
    "itl_ms": "per chunk, not per token: every gap between consecutive choice-bearing SSE events of "
    "all succeeded requests, pooled into one list (a chunk of k tokens is one gap)",
    "tpot_ms": "per request (latency - TTFT) / (output tokens - 1), requests with more than one "
    "output token; output tokens are the server's usage completion_tokens, else the tool's "
    "tokenizer count of the text; then mean / median / percentile over requests",
    "e2e_ms": "send to the last choice-bearing event (the usage-only event and [DONE] are not "
    "counted); time waiting for the tool's own concurrency semaphore is excluded",
    "total_tok_s": "output tokens of succeeded requests / duration",
    "request_rate": "succeeded requests / duration",
    "duration_s": "perf_counter from just before the first request is dispatched to after the last "
    "one ends: the whole run, ramp-up and tail included",
    "completed": "requests whose stream carried at least one choice and ended without an exception",
    "output_tokens": "sum over succeeded requests of usage completion_tokens (else the tokenizer count)",
}
# With these backends the first "chunk" is the first event holding any choice: a role-only delta
# where the server sends one first (vLLM, SGLang, the reference server do), not a token.
_CHAT_BACKENDS = ("openai-chat",)
_CHAT_FIRST = ("first token: with a chat backend the first stamp (and the tool's TTFT) is the first "
               "event holding a choice, which is a role-only delta on servers that send one first; "
               "the stamps are kept as recorded")
_LOST_ALWAYS = (
    "tool version (the file does not say)",
    "configured input and output lengths (the file keeps only what each request got)",
    "time zone of the date field (local time of the machine that ran it)",
)


def sniff_detailed(head: bytes) -> bool:
    return bool(_HEAD.match(head)) and _DETAIL_KEY in head


def sniff_aggregate(head: bytes) -> bool:
    return bool(_HEAD.match(head)) and _DETAIL_KEY not in head


def read_detailed(path: Path) -> PeerRun:
    doc = _load(path)
    lists = _detail_lists(doc)
    requests = tuple(_request(i, lists) for i in range(len(lists["ttfts"])))
    chat = (_CHAT_FIRST,) if doc.get("backend") in _CHAT_BACKENDS else ()
    lost = (
        *chat,
        "each chunk's arrival stamp: rebuilt as start_times + ttfts + the running sum of itls",
        "tokens per chunk (only each request's total output tokens is kept)",
        "the client-side queue time before the concurrency semaphore (queue_times) is not a stamp",
        *_LOST_ALWAYS,
    )
    return _run(path, doc, FORMAT_DETAILED, TIER_GAP, requests, lost)


def read_aggregate(path: Path) -> PeerRun:
    doc = _load(path)
    lost = (
        "every request's stamps (saved without --save-detailed: only summary figures, latencies "
        "and queue_times remain)",
        *_LOST_ALWAYS,
    )
    return _run(path, doc, FORMAT_AGGREGATE, TIER_AGGREGATE, (), lost)


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = load_json(path)
    except PeerFormatError as exc:
        if exc.message.startswith("not valid JSON (Extra data"):
            raise PeerFormatError("holds more than one result (written with --append-result?): "
                                  "split it into one JSON document per file") from None
        if "is not a number JSON allows" not in exc.message:
            raise
        # Python's json.dump writes NaN/Infinity; parse them (the size cap has passed) so that
        # the field checks below name the field that holds one.
        doc = json.loads(Path(path).read_bytes())
    if not isinstance(doc, dict) or not isinstance(doc.get("backend"), str):
        raise PeerFormatError("expected a vllm bench serve result object", field="backend")
    return doc


def _detail_lists(doc: dict[str, Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for key in _DETAIL_LISTS:
        value = doc.get(key)
        if not isinstance(value, list):
            raise PeerFormatError("missing or not a list (a layout this reader does not know; "
                                  "written by vLLM 0.32?)", field=key)
        out[key] = value
    sizes = {key: len(value) for key, value in out.items()}
    if len(set(sizes.values())) != 1:
        raise PeerFormatError(f"per-request lists differ in length: {sizes}", field="ttfts")
    for key in ("input_lens", "output_lens", "ttfts", "latencies", "start_times"):
        numbers(doc, key, minimum=0)
    for i, gaps in enumerate(out["itls"]):
        if not isinstance(gaps, list):
            raise PeerFormatError("expected a list of gaps per request (a layout this reader does "
                                  "not know)", field=f"itls[{i}]")
        numbers({f"itls[{i}]": gaps}, f"itls[{i}]", minimum=0)
    for i, err in enumerate(out["errors"]):
        if not isinstance(err, str):
            raise PeerFormatError("expected the error text (a string)", field=f"errors[{i}]")
    return out


def _request(i: int, lists: dict[str, list[Any]]) -> PeerRequest:
    start, ttft, latency = lists["start_times"][i], lists["ttfts"][i], lists["latencies"][i]
    gaps, error = lists["itls"][i], lists["errors"][i]
    send_ns = round(start * 1e9)
    prompt = int(lists["input_lens"][i])
    failed = bool(error) or (ttft == 0 and latency == 0 and not gaps)
    if failed:
        return PeerRequest(send_ns=send_ns, end_ns=None, chunk_ns=(), chunk_tokens=None,
                           prompt_tokens=prompt, output_tokens=None,
                           error=_last_line(error) or "failed (the tool kept no error text)")
    stamps, at = [], start + ttft
    stamps.append(round(at * 1e9))
    for gap in gaps:
        at += gap
        stamps.append(round(at * 1e9))
    if abs((ttft + sum(gaps)) - latency) > _SUM_TOLERANCE_S:
        raise PeerFormatError(f"request {i}: {latency:.6f} s is not ttft + the sum of itls "
                              f"({ttft + sum(gaps):.6f} s): mixed clocks or an edited file",
                              field=f"latencies[{i}]")
    return PeerRequest(send_ns=send_ns, end_ns=round((start + latency) * 1e9), chunk_ns=tuple(stamps),
                       chunk_tokens=None, prompt_tokens=prompt, output_tokens=int(lists["output_lens"][i]))


def _last_line(text: str) -> str:
    """The exception's own line of a traceback (the tool saves the whole traceback)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _published(doc: dict[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    published: dict[str, float] = {}
    for theirs, ours in _METRICS.items():
        for stat, key in (("mean", f"mean_{theirs}_ms"), ("p50", f"p50_{theirs}_ms"),
                          ("p50", f"median_{theirs}_ms"), ("p90", f"p90_{theirs}_ms"),
                          ("p99", f"p99_{theirs}_ms")):
            value = number(doc, key, required=False)
            if value is not None:
                published.setdefault(published_key(ours, stat), float(value))
    for theirs, ours in _TOTALS.items():
        value = number(doc, theirs, required=False, minimum=0)
        if value is not None:
            published[ours] = float(value)
    names = {key.split(".")[0] for key in published}
    return published, {name: text for name, text in DEFINITIONS.items() if name in names}


def _run(path: Path, doc: dict[str, Any], fmt: str, tier: str, requests: tuple[PeerRequest, ...],
         lost: tuple[str, ...]) -> PeerRun:
    published, definitions = _published(doc)
    rate = doc.get("request_rate")
    concurrency = doc.get("max_concurrency")
    extra = {"date (local time, zone not saved)": str(doc.get("date"))}
    for key in ("backend", "label", "num_prompts", "failed", "burstiness", "request_goodput",
                "max_output_tokens_per_s"):
        if doc.get(key) is not None:
            extra[key] = str(doc[key])
    if doc.get("max_concurrent_requests") is not None:
        extra["max_concurrent_requests"] = (
            f"{doc['max_concurrent_requests']} (requests active at any time in the busiest whole "
            "second since the first send: not how many were in flight at once)")
    return PeerRun(
        tool=TOOL, tool_version=None, format=fmt, tier=tier, source_file=Path(path), clock=CLOCK,
        requests=requests, published=published, definitions=definitions, lost=lost,
        concurrency=concurrency if isinstance(concurrency, int) and not isinstance(concurrency, bool)
        else None,
        rate=float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) else None,
        model=doc.get("model_id") if isinstance(doc.get("model_id"), str) else None,
        extra=extra,
    )


FORMATS = (
    (FORMAT_DETAILED, sniff_detailed, read_detailed),
    (FORMAT_AGGREGATE, sniff_aggregate, read_aggregate),
)
