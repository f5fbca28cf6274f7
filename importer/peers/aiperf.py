"""NVIDIA AIPerf's three exports, read into PeerRun (docs/import-aiperf.md).

Why three readers: AIPerf writes the same run at three levels of detail and a
team may publish any of them. ``profile_export_raw.jsonl`` (``--export-level
raw``) keeps every SSE message with its ``time.perf_counter_ns`` arrival: the
chunk tier. ``profile_export.jsonl`` (the default ``records`` level) keeps per
request a wall-clock start, the TTFT and the list of gaps between content
chunks: the gap tier, chunk stamps rebuilt by summing. ``profile_export_aiperf.json``
keeps only AIPerf's own summary: the aggregate tier. Read from AIPerf 0.13.0's
source (aiperf/metrics/types, aiperf/common/models/record_models.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from importer.peers.files import iter_jsonl, load_json, number, numbers
from importer.peers.model import (
    TIER_AGGREGATE,
    TIER_CHUNK,
    TIER_GAP,
    PeerFormatError,
    PeerRequest,
    PeerRun,
    published_key,
)

TOOL = "aiperf"
RAW_FORMAT = "aiperf/profile_export_raw.jsonl"
RECORDS_FORMAT = "aiperf/profile_export.jsonl"
SUMMARY_FORMAT = "aiperf/profile_export_aiperf.json"
# Versions whose layout was read from the source. A later minor (0.x) is read as this
# one (AIPerf adds fields between minors); a later major, or summary schema, is refused.
KNOWN_MAJOR = 0
KNOWN_SCHEMA_MAJOR = 1
PERF_CLOCK = "time.perf_counter_ns (CLOCK_MONOTONIC), the AIPerf worker's"
WALL_CLOCK = ("time.time_ns (wall clock, UTC epoch) at each request's start; chunk offsets "
              "are time.perf_counter_ns differences added to it")
_USER_AGENT = re.compile(r"aiperf/(\d+)\.(\d+)(?:\.(\d+))?\S*")
# Where the record line begins the same way in both JSONL exports.
_LINE_HEAD = re.compile(rb'^\s*\{\s*"metadata"\s*:\s*\{')
_NS_PER_MS = 1_000_000

# AIPerf metric tag -> our vocabulary, and how AIPerf computes it (our words, 0.13.0 source).
_METRICS = {
    "time_to_first_token": ("ttft_ms", "first content chunk's arrival minus the request's start "
                            "(perf_counter_ns); the role-only chunk does not count"),
    "inter_chunk_latency": ("itl_ms", "per chunk: gaps between consecutive content chunks of each "
                            "request, pooled over all requests; percentiles are t-digest estimates"),
    "inter_token_latency": ("tpot_ms", "per request: (request latency - TTFT) / (output tokens - 1) "
                            "(minus the first chunk's tokens with --per-chunk-usage); TTFT excluded"),
    "request_latency": ("e2e_ms", "last content chunk's arrival minus the request's start "
                        "(usage-only and [DONE] messages excluded)"),
    "output_token_throughput_per_user": ("per_request_tok_s", "per request: 1 / inter_token_latency "
                                         "(seconds): decode rate, TTFT excluded"),
}
# The two rates divide by the profiling phase's span (start_time .. end_time in the summary:
# from the phase's start, before its first request, to the end of its last), not by
# benchmark_duration: checked against AIPerf 0.13.0's own files (tests/importer).
_PHASE_SPAN = "the profiling phase's span (start_time to end_time in the same file), not benchmark_duration"
_TOTALS = {
    "output_token_throughput": ("total_tok_s", "tokens/sec", f"total output tokens / {_PHASE_SPAN}"),
    "request_throughput": ("request_rate", "requests/sec", f"requests without error / {_PHASE_SPAN}"),
    "benchmark_duration": ("duration_s", "sec", "latest request start + its request latency, minus "
                           "the earliest request start (wall-clock starts), whole run incl. ramp"),
    "request_count": ("completed", "requests", "requests that ended without error"),
    "total_output_tokens": ("output_tokens", "tokens", "sum of each request's output tokens, counted "
                            "by AIPerf's tokenizer on the text, or the server's usage with "
                            "--use-server-token-count"),
}
_STATS = {"avg": "mean", "p50": "p50", "p90": "p90", "p99": "p99"}
_MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "sec": 1e3, "s": 1e3}


# ---- sniffs: content, never the file name ------------------------------------------


def _first_line(head: bytes) -> bytes:
    return head.split(b"\n", 1)[0]


def sniff_raw(head: bytes) -> bool:
    line = _first_line(head)
    return bool(_LINE_HEAD.match(line)) and b'"start_perf_ns"' in line and b'"responses"' in line \
        and b'"x_request_id"' in line


def sniff_records(head: bytes) -> bool:
    line = _first_line(head)
    return bool(_LINE_HEAD.match(line)) and b'"metrics"' in line and b'"x_request_id"' in line \
        and b'"start_perf_ns"' not in line and b'"responses"' not in line


def sniff_summary(head: bytes) -> bool:
    return head.lstrip().startswith(b"{") and b'"aiperf_version"' in head and b'"schema_version"' in head


# ---- shared pieces ------------------------------------------------------------------


def _metadata(obj: dict[str, Any], line: int) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise PeerFormatError("missing (expected the record's metadata object)", line=line, field="metadata")
    return meta


def _profiling(meta: dict[str, Any]) -> bool:
    """Warmup records are not part of AIPerf's figures, so not of ours either."""
    return meta.get("benchmark_phase", "profiling") == "profiling"


def _error_text(obj: dict[str, Any]) -> str | None:
    err = obj.get("error")
    if err is None:
        return None
    if not isinstance(err, dict):
        return "error (no details)"
    parts = [str(err.get(k)) for k in ("code", "type", "message") if err.get(k) not in (None, "")]
    return " ".join(parts) or "error (no details)"


def _iso_utc(ns: float | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat().replace("+00:00", "Z")


def _ms_to_ns(value: float) -> int:
    return round(value * _NS_PER_MS)


def _one(values: set[Any]) -> Any:
    """The value all requests share, or None when they differ or none has it."""
    values.discard(None)
    return values.pop() if len(values) == 1 else None


# ---- profile_export_raw.jsonl: the chunk tier ---------------------------------------


def _version_from_headers(obj: dict[str, Any], line: int) -> str | None:
    headers = obj.get("request_headers") or {}
    agent = headers.get("User-Agent") if isinstance(headers, dict) else None
    match = _USER_AGENT.fullmatch(agent) if isinstance(agent, str) else None
    if not match:
        return None
    if int(match.group(1)) > KNOWN_MAJOR:
        raise PeerFormatError(f"AIPerf {match.group(0).split('/')[1]} is newer than the {KNOWN_MAJOR}.x "
                              "layout this reader knows", line=line, field="request_headers.User-Agent")
    return agent.split("/", 1)[1]


def _sse_data(packet: Any) -> dict[str, Any] | None:
    if not isinstance(packet, dict) or packet.get("name") != "data":
        return None
    value = packet.get("value")
    if not isinstance(value, str) or value.strip() == "[DONE]":
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None  # AIPerf keeps a server's malformed message; it carries no content we can date
    return data if isinstance(data, dict) else None


def _has_content(data: dict[str, Any]) -> bool:
    """AIPerf's content response: a message whose parsed text is not empty."""
    for choice in data.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        texts = [choice.get("text")]
        for part in (choice.get("delta"), choice.get("message")):  # streamed, or the whole answer
            if isinstance(part, dict):
                texts += [part.get("content"), part.get("reasoning_content"), part.get("reasoning")]
        if any(isinstance(t, str) and t for t in texts):
            return True
    return False


def _raw_request(obj: dict[str, Any], line: int) -> tuple[PeerRequest, dict[str, Any]]:
    send = int(number(obj, "start_perf_ns", line, minimum=0))
    responses = obj.get("responses")
    if not isinstance(responses, list):
        raise PeerFormatError("missing (expected a list of responses)", line=line, field="responses")
    chunks: list[int] = []
    cum: list[int | None] = []
    usage: dict[str, Any] = {}
    last = None
    for i, resp in enumerate(responses):
        if not isinstance(resp, dict):
            raise PeerFormatError(f"item {i}: expected an object", line=line, field="responses")
        stamp = int(number(resp, "perf_ns", line, minimum=send))
        if last is not None and stamp < last:
            raise PeerFormatError(f"item {i}: perf_ns goes back in time", line=line, field="responses")
        last = stamp
        packets = resp.get("packets")
        if packets is None and isinstance(resp.get("text"), str):  # a non-streaming answer
            try:
                body = json.loads(resp["text"])
            except ValueError:
                body = None
            if isinstance(body, dict) and _has_content(body):  # the whole answer is one chunk
                chunks.append(stamp)
                cum.append(None)
                usage = body.get("usage") if isinstance(body.get("usage"), dict) else usage
            continue
        content, own = False, None  # own: the usage this very message carried
        for packet in packets or ():
            data = _sse_data(packet)
            if data is None:
                continue
            if isinstance(data.get("usage"), dict):
                usage = own = data["usage"]
            content = content or _has_content(data)
        if content:
            chunks.append(stamp)
            tokens = own.get("completion_tokens") if own else None
            cum.append(tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None)
    # Cumulative usage on every content chunk (--per-chunk-usage) is tokens per chunk.
    chunk_tokens = tuple(cum) if cum and None not in cum and list(cum) == sorted(cum) else None
    req = PeerRequest(
        send_ns=send, end_ns=last, chunk_ns=tuple(chunks), chunk_tokens=chunk_tokens,  # type: ignore[arg-type]
        prompt_tokens=usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None,
        output_tokens=usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int)
        else None,
        error=_error_text(obj), line=line)
    return req, (obj.get("payload") or {})


# Workers on one host share CLOCK_MONOTONIC, so wall minus perf is the same for every
# request to within microseconds (a few us here); workers on several hosts (AIPerf's
# Kubernetes mode) each have their own perf clock, hours apart. A second is far from both.
MIXED_CLOCK_NS = 1_000_000_000


def _same_clock(first: int | None, offset: int, line: int) -> int:
    if first is not None and abs(offset - first) > MIXED_CLOCK_NS:
        raise PeerFormatError(
            f"this request's perf_counter clock is {(offset - first) / 1e9:+,.1f} s from the first "
            "request's: stamps from more than one clock (workers on several hosts?); import "
            "profile_export.jsonl, whose starts are wall clock", line=line, field="start_perf_ns")
    return first if first is not None else offset


def read_raw(path: Path) -> PeerRun:
    requests: list[PeerRequest] = []
    version, models, max_tokens, starts = None, set(), set(), []
    offset = None  # wall clock minus perf clock at the first request's start
    for line, obj in iter_jsonl(path):
        meta = _metadata(obj, line)
        if not _profiling(meta):
            continue
        version = _version_from_headers(obj, line) or version
        req, payload = _raw_request(obj, line)
        requests.append(req)
        wall = number(meta, "request_start_ns", line, required=False)
        if wall is not None:
            offset = _same_clock(offset, int(wall) - req.send_ns, line)
        if isinstance(payload, dict):
            models.add(payload.get("model") if isinstance(payload.get("model"), str) else None)
            cap = payload.get("max_completion_tokens", payload.get("max_tokens"))
            max_tokens.add(cap if isinstance(cap, int) else None)
        starts.append(number(meta, "request_start_ns", line, required=False))
    if not requests:
        raise PeerFormatError("no profiling records (expected one JSON object per request)")
    lost = []
    if any(r.chunk_tokens is None for r in requests if r.chunk_ns):
        lost.append("tokens per chunk (the server's usage was not on every chunk: "
                    "run with --per-chunk-usage)")
    return with_summary(PeerRun(
        tool=TOOL, tool_version=version, format=RAW_FORMAT, tier=TIER_CHUNK, source_file=Path(path),
        clock=PERF_CLOCK, requests=tuple(requests), published={}, definitions={}, lost=tuple(lost),
        output_tokens=_one(max_tokens), model=_one(models),
        measured_at=_iso_utc(min((s for s in starts if s is not None), default=None)),
        extra={"version_from": "the User-Agent header AIPerf sent"} if version else {}))


# ---- profile_export.jsonl: the gap tier ---------------------------------------------


def _metric(metrics: dict[str, Any], tag: str, line: int, unit: str) -> Any:
    """metrics[tag]["value"] in `unit`, or None when AIPerf did not compute it."""
    entry = metrics.get(tag)
    if entry is None:
        return None
    if not isinstance(entry, dict) or "value" not in entry:
        raise PeerFormatError("expected {value, unit}", line=line, field=f"metrics.{tag}")
    if entry.get("unit") != unit:
        raise PeerFormatError(f"unit {entry.get('unit')!r}, expected {unit!r}", line=line,
                              field=f"metrics.{tag}.unit")
    return entry["value"]


def _records_request(obj: dict[str, Any], line: int) -> PeerRequest:
    meta = _metadata(obj, line)
    metrics = obj.get("metrics")
    if not isinstance(metrics, dict):
        raise PeerFormatError("missing (expected an object of metrics)", line=line, field="metrics")
    send = int(number(meta, "request_start_ns", line, minimum=0))
    end = number(meta, "request_end_ns", line, required=False, minimum=send)
    flat = {f"metrics.{tag}": _metric(metrics, tag, line, unit) for tag, unit in (
        ("time_to_first_token", "ms"), ("inter_chunk_latency", "ms"), ("request_latency", "ms"),
        ("output_sequence_length", "tokens"), ("input_sequence_length", "tokens"))}
    ttft = number(flat, "metrics.time_to_first_token", line, required=False, minimum=0)
    gaps = numbers(flat, "metrics.inter_chunk_latency", line, required=False, minimum=0) or []
    chunks: list[int] = []
    if ttft is not None:
        stamp = send + _ms_to_ns(ttft)
        chunks.append(stamp)
        for gap in gaps:
            stamp += _ms_to_ns(gap)
            chunks.append(stamp)
    elif gaps:
        raise PeerFormatError("gaps without a time_to_first_token", line=line,
                              field="metrics.inter_chunk_latency")
    latency = number(flat, "metrics.request_latency", line, required=False, minimum=0)
    if latency is not None and chunks and abs(send + _ms_to_ns(latency) - chunks[-1]) > 1000:
        raise PeerFormatError("TTFT plus the gaps does not add up to request_latency",
                              line=line, field="metrics.inter_chunk_latency")
    osl = number(flat, "metrics.output_sequence_length", line, required=False, minimum=0)
    isl = number(flat, "metrics.input_sequence_length", line, required=False, minimum=0)
    return PeerRequest(
        send_ns=send, end_ns=int(end) if end is not None else None, chunk_ns=tuple(chunks),
        chunk_tokens=None, prompt_tokens=int(isl) if isl is not None else None,
        output_tokens=int(osl) if osl is not None else None, error=_error_text(obj), line=line)


def read_records(path: Path) -> PeerRun:
    requests = []
    for line, obj in iter_jsonl(path):
        if _profiling(_metadata(obj, line)):
            requests.append(_records_request(obj, line))
    if not requests:
        raise PeerFormatError("no profiling records (expected one JSON object per request)")
    return with_summary(PeerRun(
        tool=TOOL, tool_version=None, format=RECORDS_FORMAT, tier=TIER_GAP, source_file=Path(path),
        clock=WALL_CLOCK, requests=tuple(requests), published={}, definitions={},
        lost=("chunk stamps: rebuilt as request start + TTFT + the running sum of inter_chunk_latency",
              "tokens per chunk", "the tool version (the records export does not say it)",
              "a failed request's chunks (AIPerf keeps only its error, no metrics, in this export)"),
        measured_at=_iso_utc(min(r.send_ns for r in requests))))


# ---- the summary beside a raw or records export -------------------------------------


def summary_beside(path: Path) -> Path | None:
    """The summary AIPerf wrote in the same folder as this export, if it is there.

    AIPerf names its exports from one stem: ``<stem>.jsonl`` (records),
    ``<stem>_raw.jsonl`` and ``<stem>_aiperf.json`` (``profile_export`` by default)."""
    name = Path(path).name
    stem = name[: -len("_raw.jsonl")] if name.endswith("_raw.jsonl") else name.removesuffix(".jsonl")
    for candidate in (Path(path).with_name(f"{stem}_aiperf.json"),
                      Path(path).with_name("profile_export_aiperf.json")):
        if candidate.is_file():
            return candidate
    return None


def with_summary(run: PeerRun) -> PeerRun:
    """A per-request export with the configuration and the published figures of the
    summary beside it, when that summary is of the same run (its request count is the
    export's count of requests without error); what was not found is said in ``lost``."""
    found = summary_beside(run.source_file)
    lost = list(run.lost)
    if found is None:
        lost.append("the configured concurrency or rate, lengths and AIPerf's own figures "
                    "(no profile_export_aiperf.json beside this file)")
        return dataclasses.replace(run, lost=tuple(lost))
    try:
        with open(found, "rb") as fh:
            ok = sniff_summary(fh.read(64 * 1024))
        summary = read_summary(found) if ok else None
    except (PeerFormatError, OSError) as exc:
        lost.append(f"the configuration and AIPerf's own figures ({found.name} beside it did not read: "
                    f"{exc})")
        return dataclasses.replace(run, lost=tuple(lost))
    done = sum(1 for r in run.requests if r.error is None)
    count = summary.published.get("completed") if summary else None
    if summary is None or (count is not None and int(count) != done):
        why = "not an AIPerf summary" if summary is None else (
            f"it counts {int(count)} requests, this file {done}: another run")
        lost.append(f"the configuration and AIPerf's own figures ({found.name} beside it is {why})")
        return dataclasses.replace(run, lost=tuple(lost))
    extra = {**run.extra, "summary_file": f"{found.name} (configuration and AIPerf's own figures)"}
    return dataclasses.replace(
        run, tool_version=run.tool_version or summary.tool_version, published=dict(summary.published),
        definitions=dict(summary.definitions), concurrency=summary.concurrency, rate=summary.rate,
        input_tokens=summary.input_tokens, output_tokens=run.output_tokens or summary.output_tokens,
        model=run.model or summary.model, lost=tuple(lost), extra=extra)


# ---- profile_export_aiperf.json: the aggregate tier ---------------------------------


def _check_schema(doc: dict[str, Any]) -> str:
    schema = doc.get("schema_version")
    match = re.fullmatch(r"(\d+)(?:\.\d+)*", schema) if isinstance(schema, str) else None
    if not match:
        raise PeerFormatError("expected a version string like \"1.4\"", field="schema_version")
    if int(match.group(1)) > KNOWN_SCHEMA_MAJOR:
        raise PeerFormatError(f"schema {schema} is newer than the {KNOWN_SCHEMA_MAJOR}.x this reader "
                              "knows", field="schema_version")
    return schema


def _figure(doc: dict[str, Any], tag: str, stat: str, unit: str) -> float | None:
    entry = doc.get(tag)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise PeerFormatError("expected an object with unit and statistics", field=tag)
    value = number(entry, stat, required=False)
    if value is None:
        return None
    got = entry.get("unit")
    if unit == "ms" and got in _MS_PER_UNIT:
        return value * _MS_PER_UNIT[got]
    if unit == "sec" and got in _MS_PER_UNIT:
        return value * _MS_PER_UNIT[got] / 1e3
    if got != unit:
        raise PeerFormatError(f"unit {got!r}, expected {unit!r}", field=f"{tag}.unit")
    return value


def read_summary(path: Path) -> PeerRun:
    doc = load_json(path)
    if not isinstance(doc, dict):
        raise PeerFormatError("expected a JSON object")
    schema = _check_schema(doc)
    published: dict[str, float] = {}
    definitions: dict[str, str] = {}
    for tag, (metric, how) in _METRICS.items():
        unit = "tokens/sec/user" if metric == "per_request_tok_s" else "ms"
        for stat, ours in _STATS.items():
            value = _figure(doc, tag, stat, unit)
            if value is not None:
                published[published_key(metric, ours)] = value
                definitions[metric] = f"AIPerf {tag}: {how}"
    for tag, (key, unit, how) in _TOTALS.items():
        value = _figure(doc, tag, "avg", unit)
        if value is not None:
            published[key] = value
            definitions[key] = f"AIPerf {tag}: {how}"
    config = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
    phase = next((p for p in config.get("phases") or () if isinstance(p, dict)
                  and p.get("kind", "profiling") == "profiling"), {})
    prompts = next((d.get("prompts") for d in config.get("datasets") or ()
                    if isinstance(d, dict) and isinstance(d.get("prompts"), dict)), {})
    models = (config.get("models") or {}).get("items") or []
    version = doc.get("aiperf_version")
    start = doc.get("start_time")
    return PeerRun(
        tool=TOOL, tool_version=version if isinstance(version, str) else None, format=SUMMARY_FORMAT,
        tier=TIER_AGGREGATE, source_file=Path(path), clock="none (summary figures only)", requests=(),
        published=published, definitions=definitions,
        lost=("every per-request figure: only AIPerf's summary is kept",
              "the time zone of start_time (AIPerf writes local time without one)"),
        concurrency=_int(phase.get("concurrency")), rate=_num(phase.get("rate")),
        input_tokens=_int((prompts.get("isl") or {}).get("mean")),
        output_tokens=_int((prompts.get("osl") or {}).get("mean")),
        model=models[0].get("name") if models and isinstance(models[0], dict) else None,
        extra={k: str(v) for k, v in (("schema_version", schema), ("start_time_local", start),
                                      ("benchmark_id", doc.get("benchmark_id"))) if v is not None})


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    num = _num(value)
    return int(num) if num is not None and num == int(num) else None


FORMATS = (
    (RAW_FORMAT, sniff_raw, read_raw),
    (RECORDS_FORMAT, sniff_records, read_records),
    (SUMMARY_FORMAT, sniff_summary, read_summary),
)
