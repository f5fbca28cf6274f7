"""SGLang `bench_serving` --output-file JSONL: gap tier with --output-details, aggregate without.

Why its own reader: SGLang writes one JSON line per run (appended), and with
--output-details keeps each request's TTFT and chunk gaps but, unlike vLLM,
no send time and no per-request latency. Chunk stamps can be rebuilt only
relative to each request's own send, so the requests share no origin: the
run cannot be laid out in time (no in-flight count, no window). What each
field means, as read in SGLang 0.5.23's source, is in docs/import-sglang.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from importer.peers.files import MAX_JSON_BYTES, iter_jsonl, number, numbers
from importer.peers.model import (
    TIER_AGGREGATE,
    TIER_GAP,
    PeerFormatError,
    PeerRequest,
    PeerRun,
    published_key,
)

TOOL = "sglang-bench-serving"
FORMAT = "sglang-bench-serving/result.jsonl"
CLOCK = ("per request: ns since that request's own send (time.perf_counter differences); the file "
         "keeps no send times, so every send_ns is 0 and requests share no origin")

# Every line opens with these keys, in this order (serving.py builds the dict that way).
_HEAD = re.compile(
    rb'^\s*\{\s*"tag"\s*:\s*(null|"[^"]*")\s*,\s*"backend"\s*:\s*"[^"]*"\s*,'
    rb'\s*"dataset_name"\s*:\s*"[^"]*"\s*,\s*"request_rate"\s*:'
)
_DETAIL_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "errors")

_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e_latency": "e2e_ms"}
_TOTALS = {
    "output_throughput": "total_tok_s",
    "request_throughput": "request_rate",
    "duration": "duration_s",
    "completed": "completed",
    "total_output_tokens": "output_tokens",
}
DEFINITIONS = {
    "ttft_ms": "succeeded requests only: from the client's perf_counter just before the POST to the "
    "first SSE event whose text is non-empty (empty-text events are skipped); numpy statistics",
    "itl_ms": "per chunk: every gap between consecutive non-empty-text events of all succeeded "
    "requests, pooled (split per token only with speculative decoding on SGLang's own OpenAI backends)",
    "tpot_ms": "per request (latency - TTFT) / (output tokens - 1), requests with more than one token; "
    "latency runs to the last SSE line read ([DONE] included), so it holds the tail after the last token",
    "e2e_ms": "send to the last SSE line read, [DONE] included (not to the last token)",
    "total_tok_s": "output tokens / duration; output tokens are the server's usage completion_tokens "
    "seen on a text chunk, else the requested max_tokens (not what was streamed)",
    "request_rate": "succeeded requests / duration",
    "duration_s": "perf_counter span of the whole run after the warm-up request: ramp-up and tail included",
    "completed": "requests whose stream ended without an exception or a non-200 status",
    "output_tokens": "sum of output_lens (usage completion_tokens, else the requested max_tokens)",
}
_LOST_ALWAYS = ("tool version (the file does not say)", "when the run was made (the file has no date)")


def sniff(head: bytes) -> bool:
    return bool(_HEAD.match(head))


def read(path: Path) -> PeerRun:
    doc, first = _one_line(path)
    if "ttfts" in doc or "itls" in doc:
        requests = _requests(doc, first)
        tier = TIER_GAP
        lost = (
            "send times: each request's chunk stamps are relative to its own send, so requests "
            "cannot be placed against each other (no in-flight count, no window)",
            "each chunk's arrival stamp: rebuilt as ttfts + the running sum of itls",
            "per-request latency (to [DONE]): the end is taken as the last chunk",
            "tokens per chunk (only each request's total)",
            *_LOST_ALWAYS,
        )
    else:
        requests, tier = (), TIER_AGGREGATE
        lost = ("every request's figures (saved without --output-details)", *_LOST_ALWAYS)
    return _run(path, doc, first, tier, requests, lost)


def _one_line(path: Path) -> tuple[dict[str, Any], int]:
    """The file's one run. Python's json.dumps writes `Infinity` for an unlimited request rate
    (every closed-loop run), which strict JSON refuses; such a line is parsed again allowing the
    constants, and the field checks then name any NaN where a number belongs."""
    found: list[tuple[int, dict[str, Any]]] = []
    try:
        for line, obj in iter_jsonl(path):
            found.append((line, obj))
            if len(found) > 1:
                break
    except PeerFormatError as exc:
        if "is not a number JSON allows" not in exc.message or Path(path).stat().st_size > MAX_JSON_BYTES:
            raise
        found = _permissive(Path(path).read_bytes())
    if len(found) > 1:
        raise PeerFormatError("a second run: bench_serving appends one line per run to "
                              "--output-file; keep one line per file", line=found[1][0])
    if not found:
        raise PeerFormatError("empty file (expected one JSON line per run)")
    line, doc = found[0]
    if not isinstance(doc, dict):
        raise PeerFormatError("expected a JSON object", line=line)
    return doc, line


def _permissive(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """(line, object) of the first two non-blank lines, NaN and Infinity allowed."""
    out: list[tuple[int, dict[str, Any]]] = []
    for number_, text in enumerate(data.split(b"\n"), start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            cut = not data.endswith(b"\n") and data.rstrip(b"\n").count(b"\n") + 1 == number_
            raise PeerFormatError("the last line is cut off (the file was truncated)" if cut
                                  else "not valid JSON", line=number_) from None
        out.append((number_, obj))
        if len(out) > 1:
            break
    return out


def _requests(doc: dict[str, Any], line: int) -> tuple[PeerRequest, ...]:
    for key in _DETAIL_LISTS:
        if not isinstance(doc.get(key), list):
            raise PeerFormatError("missing or not a list (a layout this reader does not know; "
                                  "written by SGLang 0.5.23?)", line=line, field=key)
    sizes = {key: len(doc[key]) for key in _DETAIL_LISTS}
    if len(set(sizes.values())) != 1:
        raise PeerFormatError(f"per-request lists differ in length: {sizes}", line=line, field="ttfts")
    for key in ("input_lens", "output_lens", "ttfts"):
        numbers(doc, key, line, minimum=0)
    out = []
    for i, gaps in enumerate(doc["itls"]):
        field = f"itls[{i}]"
        if not isinstance(gaps, list):
            raise PeerFormatError("expected a list of gaps per request (a layout this reader does "
                                  "not know)", line=line, field=field)
        numbers({field: gaps}, field, line, minimum=0)
        error = doc["errors"][i]
        if not isinstance(error, str):
            raise PeerFormatError("expected the error text (a string)", line=line, field=f"errors[{i}]")
        ttft, prompt = doc["ttfts"][i], int(doc["input_lens"][i])
        if error or ttft == 0:
            # The tool marks no other failure: a request without a first token counted none.
            out.append(PeerRequest(send_ns=0, end_ns=None, chunk_ns=(), chunk_tokens=None,
                                   prompt_tokens=prompt, output_tokens=None, line=line,
                                   error=_last_line(error) or "failed (no first token; no error text)"))
            continue
        stamps, at = [round(ttft * 1e9)], ttft
        for gap in gaps:
            at += gap
            stamps.append(round(at * 1e9))
        out.append(PeerRequest(send_ns=0, end_ns=stamps[-1], chunk_ns=tuple(stamps), chunk_tokens=None,
                               prompt_tokens=prompt, output_tokens=int(doc["output_lens"][i]), line=line))
    return tuple(out)


def _last_line(text: str) -> str:
    """The exception's own line of a traceback, or the HTTP reason and body's first line."""
    lines = [part.strip() for part in text.strip().splitlines() if part.strip()]
    return lines[-1] if lines else ""


def _run(path: Path, doc: dict[str, Any], line: int, tier: str, requests: tuple[PeerRequest, ...],
         lost: tuple[str, ...]) -> PeerRun:
    published: dict[str, float] = {}
    for theirs, ours in _METRICS.items():
        for stat, key in (("mean", f"mean_{theirs}_ms"), ("p50", f"median_{theirs}_ms"),
                          ("p90", f"p90_{theirs}_ms"), ("p99", f"p99_{theirs}_ms")):
            value = number(doc, key, line, required=False)
            if value is not None:
                published[published_key(ours, stat)] = float(value)
    for theirs, ours in _TOTALS.items():
        value = number(doc, theirs, line, required=False, minimum=0)
        if value is not None:
            published[ours] = float(value)
    names = {key.split(".")[0] for key in published}
    rate, concurrency = doc.get("request_rate"), doc.get("max_concurrency")
    random = str(doc.get("dataset_name", "")).startswith("random")
    extra = {}
    for key in ("backend", "dataset_name", "tag", "random_range_ratio", "total_output_tokens_retokenized",
                "accept_length", "max_output_tokens_per_s"):
        if doc.get(key) is not None:
            extra[key] = str(doc[key])
    if doc.get("concurrency") is not None:
        extra["concurrency"] = f"{doc['concurrency']} (mean in flight: sum of E2E / duration)"
    if doc.get("max_concurrent_requests") is not None:
        extra["max_concurrent_requests"] = (
            f"{doc['max_concurrent_requests']} (requests active at any time in the busiest whole "
            "second: not how many were in flight at once)")
    return PeerRun(
        tool=TOOL, tool_version=None, format=FORMAT, tier=tier, source_file=Path(path), clock=CLOCK,
        requests=requests, published=published,
        definitions={name: text for name, text in DEFINITIONS.items() if name in names}, lost=lost,
        concurrency=concurrency if isinstance(concurrency, int) and not isinstance(concurrency, bool)
        else None,
        rate=float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool)
        and rate != float("inf") else None,
        input_tokens=_int(doc.get("random_input_len")) if random else None,
        output_tokens=_int(doc.get("random_output_len")) if random else None,
        extra=extra,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


FORMATS = ((FORMAT, sniff, read),)
