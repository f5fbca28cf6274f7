"""inference-perf's ``per_request_lifecycle_metrics.json`` (0.7.x): chunk tier.

Why chunk tier: inference-perf keeps, per streamed request, the arrival stamp
of every chunk that carried content (``chunk_times``), on ``time.perf_counter()``
(CLOCK_MONOTONIC on Linux: the same clock as our own stamps). Its per-token
stamps (``output_token_times``) repeat a chunk's stamp once per token its
tokenizer counted in that chunk, which gives tokens per chunk where that count
agrees with the server's.

The file holds no summary; inference-perf writes its own figures beside it in
``summary_lifecycle_metrics.json`` (same folder, same optional prefix), read
here when present, and the configuration it ran in ``config.yaml`` (same
folder, same prefix; the tool's Config dumped as YAML), read for the load,
the model and fixed lengths when present. The file names no schema version
and no tool version.
See docs/import-inference-perf.md.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

from importer.peers.files import count_at, load_json, load_yaml, number_at, numbers
from importer.peers.model import TIER_CHUNK, PeerFormatError, PeerRequest, PeerRun, published_key

FORMAT = "inference-perf/per_request_lifecycle_metrics.json"
CLOCK = "time.perf_counter() (CLOCK_MONOTONIC), float seconds, rounded to ns"
PER_REQUEST = "per_request_lifecycle_metrics.json"
SUMMARY = "summary_lifecycle_metrics.json"
CONFIG = "config.yaml"
# its records open with start_time, end_time, then request/response (default on) or info
_HEAD = re.compile(rb'^\s*\[\s*\{\s*"start_time"\s*:\s*[-+0-9.eE]+\s*,\s*"end_time"\s*:\s*[-+0-9.eE]+\s*,'
                   rb'\s*"(?:request|response|info)"\s*:')

# inference-perf summary latency name -> our metric (all in seconds there)
_LATENCIES = (
    ("time_to_first_token", "ttft_ms"),
    ("inter_token_latency", "itl_ms"),
    ("time_per_output_token", "tpot_ms"),
    ("request_latency", "e2e_ms"),
)
DEFINITIONS = {
    "ttft_ms": "first output-token stamp (the first content chunk's arrival) minus the request start, "
               "per successful streamed request",
    "itl_ms": "pooled over every successive pair of per-token stamps of every successful request: tokens "
              "the tool's tokenizer counts in one chunk get that chunk's stamp, so gaps inside a chunk "
              "are 0 and the next chunk's gap carries the whole wait",
    "tpot_ms": "(last output-token stamp - first) / (output tokens - 1) per request, TTFT excluded; "
               "output tokens are the tool's re-tokenized count unless use_server_output_tokens was set",
    "e2e_ms": "request end (response read) minus request start, per successful request",
    "percentiles": "numpy.percentile with linear interpolation; p50 is the file's 'median'",
    "total_tok_s": "sum of output tokens (the tool's re-tokenized count by default) of successful requests "
                   "/ (last end - first start over all requests, failed ones included)",
    "request_rate": "successful requests / (last end - first start over all requests)",
    "duration_s": "benchmark_time_seconds: last end - first start over all requests",
    "completed": "successful requests (no error recorded)",
    "output_tokens": "sum of the server-reported completion tokens over successful requests "
                     "(the tool's own re-tokenized count is in output_len)",
}
LOST = (
    "the server's token count per chunk (tokens per chunk come from the tool's tokenizer; kept only "
    "where its total equals the server's completion_tokens)",
    "the stamps of chunks without content (role-only and usage-only chunks are not kept)",
    "configured concurrency, lengths, model and tool version (they are in the run's config.yaml, "
    "not in this file)",
)


def sniff(head: bytes) -> bool:
    """A JSON array whose first object starts with inference-perf's start_time and end_time."""
    return bool(_HEAD.match(head))


def read(path: Path) -> PeerRun:
    """Every request of the file, and the tool's summary beside it where there is one."""
    path = Path(path)
    doc = load_json(path)
    if not isinstance(doc, list):
        raise PeerFormatError("expected a JSON array of per-request records")
    if not doc:
        raise PeerFormatError("no requests in the file")
    rows = sorted((_request(entry, f"[{i}]") for i, entry in enumerate(doc)), key=lambda r: r.send_ns)
    summary_path = _summary_path(path)
    published: dict[str, float] = {}
    extra: dict[str, str] = {}
    if summary_path is not None and summary_path.exists():
        published = _published(load_json(summary_path), summary_path.name)
        extra["summary_file"] = summary_path.name
    else:
        extra["summary_file"] = "none beside it: no published figures"
    config = _config(path, extra)
    mismatched = sum(1 for r in rows if r.error is None and r.chunk_tokens is None)
    if mismatched:
        extra["tokens_per_chunk"] = (f"{mismatched} request(s): the tool's per-chunk token count disagreed "
                                     "with the server's completion_tokens, so none is kept")
    return PeerRun(
        tool="inference-perf", tool_version=None, format=FORMAT, tier=TIER_CHUNK, source_file=path,
        clock=CLOCK, requests=tuple(rows), published=published, definitions=dict(DEFINITIONS),
        lost=LOST if not config else LOST[:-1] + ("the tool version (not in its files)",),
        extra=extra, **config)


def _config(path: Path, extra: dict[str, str]) -> dict[str, Any]:
    """PeerRun fields from the config.yaml inference-perf wrote beside the file, if there:
    the load of a one-stage run (a concurrent stage's concurrency_level, a constant or
    poisson stage's rate), server.model_name, and lengths where the distribution is fixed."""
    where = path.with_name(path.name[: -len(PER_REQUEST)] + CONFIG) if path.name.endswith(PER_REQUEST) \
        else None
    if where is None or not where.is_file():
        extra["config_file"] = "none beside it: load, model and lengths not from the tool"
        return {}
    try:
        doc = load_yaml(where)
    except PeerFormatError as exc:
        raise PeerFormatError(f"{where.name} beside it: {exc.message}", field="config") from None
    if not isinstance(doc, dict):
        raise PeerFormatError(f"{where.name} beside it: expected a mapping", field="config")
    out: dict[str, Any] = {}
    load = doc.get("load") if isinstance(doc.get("load"), dict) else {}
    stages = load.get("stages") if isinstance(load.get("stages"), list) else []
    kind = load.get("type")
    said = [f"{where.name} (the tool's configuration)"]
    if len(stages) == 1 and isinstance(stages[0], dict):
        stage = stages[0]
        level, rate = stage.get("concurrency_level"), stage.get("rate")
        if kind == "concurrent" and isinstance(level, int) and level > 0:
            out["concurrency"] = level
        elif kind in ("constant", "poisson") and isinstance(rate, int | float) and rate > 0:
            out["rate"] = float(rate)
            said.append(f"arrivals: {kind}")
        else:
            said.append(f"load type {kind!r}: no single concurrency or rate read")
    else:
        said.append(f"{len(stages)} load stages: the per-request file mixes them, no one load read")
    server = doc.get("server") if isinstance(doc.get("server"), dict) else {}
    if isinstance(server.get("model_name"), str) and server["model_name"]:
        out["model"] = server["model_name"]
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    for key, field_name in (("input_distribution", "input_tokens"), ("output_distribution", "output_tokens")):
        dist = data.get(key) if isinstance(data.get(key), dict) else {}
        lo, hi = dist.get("min"), dist.get("max")
        if field_name == "output_tokens" and isinstance(hi, int):
            out[field_name] = hi  # the cap on each request's output
        elif isinstance(lo, int) and lo == hi:
            out[field_name] = lo
    extra["config_file"] = "; ".join(said)
    return out


def _summary_path(path: Path) -> Path | None:
    """The summary inference-perf wrote beside this file (same report_file_prefix)."""
    if not path.name.endswith(PER_REQUEST):
        return None
    return path.with_name(path.name[: -len(PER_REQUEST)] + SUMMARY)


def _request(entry: Any, where: str) -> PeerRequest:
    if not isinstance(entry, dict):
        raise PeerFormatError("expected an object", field=where)
    start = _stamp(entry, "start_time", where)
    end = _stamp(entry, "end_time", where)
    if end < start:
        raise PeerFormatError("end before the request's start", field=f"{where}.end_time")
    info = _obj(entry, "info", where)
    rm = info.get("response_metrics")
    rm = rm if isinstance(rm, dict) else {}
    rw = f"{where}.info.response_metrics"
    chunks = _stamps(rm, "chunk_times", rw)
    for i in range(1, len(chunks)):
        if chunks[i] < chunks[i - 1]:
            raise PeerFormatError(f"item {i}: a negative gap (earlier than item {i - 1})",
                                  field=f"{rw}.chunk_times")
    if chunks and chunks[0] < start:
        raise PeerFormatError("item 0: before the request's start", field=f"{rw}.chunk_times")
    usage = rm.get("server_usage") if isinstance(rm.get("server_usage"), dict) else {}
    server_out = count_at(usage, "completion_tokens", f"{rw}.server_usage")
    client_out = count_at(rm, "output_tokens", rw)
    req_metrics = info.get("request_metrics")
    text = req_metrics.get("text") if isinstance(req_metrics, dict) else None
    prompt = count_at(usage, "prompt_tokens", f"{rw}.server_usage")
    if prompt is None and isinstance(text, dict):
        prompt = count_at(text, "input_tokens", f"{where}.info.request_metrics.text")
    error = entry.get("error")
    error_text = None
    if error is not None:
        if not isinstance(error, dict):
            raise PeerFormatError("expected an object or null", field=f"{where}.error")
        kind, msg = error.get("error_type"), error.get("error_msg")
        error_text = ": ".join(str(x) for x in (kind, msg) if x) or "error (no text)"
    return PeerRequest(
        send_ns=start, end_ns=end, chunk_ns=tuple(chunks),
        chunk_tokens=_chunk_tokens(rm, chunks, server_out, rw) if error is None else None,
        prompt_tokens=prompt, output_tokens=server_out if server_out is not None else client_out,
        error=error_text)


def _chunk_tokens(rm: dict[str, Any], chunks: list[int], server_out: int | None,
                  where: str) -> tuple[int, ...] | None:
    """Cumulative tokens at each chunk, from the tool's per-token stamps, where they can be trusted.

    Each per-token stamp equals the stamp of the chunk that token came in; a count
    that does not add up to the server's completion_tokens is not kept.
    """
    if not chunks:
        return None
    tokens = _stamps(rm, "output_token_times", where)
    per_chunk = dict.fromkeys(chunks, 0)
    for t in tokens:
        if t not in per_chunk:
            return None  # not stamps of this request's chunks: nothing to count by
        per_chunk[t] += 1
    if sum(per_chunk.values()) != len(tokens) or any(v == 0 for v in per_chunk.values()):
        return None
    if server_out is not None and len(tokens) != server_out:
        return None
    total, out = 0, []
    for t in chunks:
        total += per_chunk[t]
        out.append(total)
    return tuple(out)


def _published(doc: Any, name: str) -> dict[str, float]:
    if not isinstance(doc, dict):
        raise PeerFormatError(f"{name}: expected a JSON object")
    successes = _obj(doc, "successes", name)
    latency = _obj(successes, "latency", f"{name}.successes")
    out: dict[str, float] = {}
    for key, metric in _LATENCIES:
        dist = latency.get(key)
        if not isinstance(dist, dict):
            continue  # None where no request streamed
        dw = f"{name}.successes.latency.{key}"
        for stat, field in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99")):
            out[published_key(metric, stat)] = number_at(dist, field, dw) * 1000.0
    throughput = _obj(successes, "throughput", f"{name}.successes")
    out["total_tok_s"] = number_at(throughput, "output_tokens_per_sec", f"{name}.successes.throughput")
    out["request_rate"] = number_at(throughput, "requests_per_sec", f"{name}.successes.throughput")
    out["duration_s"] = number_at(doc, "benchmark_time_seconds", name)
    out["completed"] = number_at(successes, "count", f"{name}.successes")
    tokens = successes.get("output_tokens")
    if isinstance(tokens, dict) and tokens.get("total") is not None:
        out["output_tokens"] = number_at(tokens, "total", f"{name}.successes.output_tokens")
    return out


def _obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise PeerFormatError("missing or not an object", field=f"{where}.{key}")
    return value




def _ns(seconds: float) -> int:
    return round(Fraction(seconds) * 1_000_000_000)


def _stamp(obj: dict[str, Any], key: str, where: str) -> int:
    return _ns(number_at(obj, key, where))


def _stamps(obj: dict[str, Any], key: str, where: str) -> list[int]:
    try:
        values = numbers(obj, key, required=False, minimum=0) or []
    except PeerFormatError as exc:
        raise PeerFormatError(exc.message, field=f"{where}.{key}") from None
    return [_ns(v) for v in values]



FORMATS = ((FORMAT, sniff, read),)
