"""guidellm's ``benchmarks.json`` (schema ``metadata.version`` 2, guidellm 0.8.x): request tier.

Why request tier: guidellm keeps, per request, only the stamps of its first
and last token iterations (plus start and end) and the token counts; the
stamps of the chunks in between are summed away. Its stamps are
``time.time()`` wall-clock seconds (floats), not a monotonic clock.

One file can hold several benchmarks (a sweep or ``--override`` list, one per
load point); :func:`read_all` gives one PeerRun each, :func:`read` (the
registry's reader) the first, saying in ``extra`` how many the file holds.
See docs/import-guidellm.md for what each field means.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from importer.peers.files import count_at, load_json, number, number_at
from importer.peers.model import TIER_REQUEST, PeerFormatError, PeerRequest, PeerRun, published_key

FORMAT = "guidellm/benchmarks.json"
SCHEMA_VERSIONS = (2,)
CLOCK = "time.time() wall clock (CLOCK_REALTIME), float seconds, rounded to ns"
_HEAD = re.compile(rb'^\s*\{\s*"metadata"\s*:\s*\{[^{}]*"guidellm_version"\s*:')

# guidellm's StatusDistributionSummary name -> our metric, and the scale to ms
_DISTRIBUTIONS = (
    ("time_to_first_token_ms", "ttft_ms", 1.0),
    ("inter_token_latency_ms", "itl_ms", 1.0),
    ("time_per_output_token_ms", "tpot_ms", 1.0),
    ("request_latency", "e2e_ms", 1000.0),
)
DEFINITIONS = {
    "ttft_ms": "first token iteration minus request start (client wall clock), per successful request; "
               "mean and percentiles over requests, each weighted 1",
    "itl_ms": "(last token iteration - first token iteration) / (output tokens - 1) per request; "
              "mean and percentiles weighted by output tokens - 1 (a per-token average, TTFT excluded)",
    "tpot_ms": "(last token iteration - request start) / output tokens per request, TTFT included; "
               "mean and percentiles weighted by output tokens",
    "e2e_ms": "request end minus request start (response fully read), per successful request, weight 1",
    "percentiles": "guidellm's pN is the smallest value whose cumulative weight share reaches N/100 "
                   "(no interpolation)",
    "total_tok_s": "output tokens of successful requests / the benchmark's measured span "
                   "(mean of its duration-weighted rate-over-time distribution)",
    "request_rate": "successful requests / the benchmark's measured span",
    "duration_s": "the benchmark's measured span: first request start to the last completion "
                  "(warm-up and cool-down excluded where configured)",
    "completed": "requests guidellm counted successful",
    "output_tokens": "sum of output tokens over successful requests (the server's usage count, "
                     "else one per streamed iteration)",
}
LOST = (
    "chunk stamps between the first and the last token (only first/last token iteration kept)",
    "tokens per chunk (the first chunk's token count is not recorded)",
    "monotonic clock (stamps are time.time() wall clock: an NTP step inside the run shifts them)",
)


def sniff(head: bytes) -> bool:
    """A JSON object whose first key is guidellm's ``metadata`` with ``guidellm_version``."""
    return bool(_HEAD.match(head))


def read(path: Path) -> PeerRun:
    """The file's first benchmark (a multi-benchmark file: see read_all)."""
    return read_all(path)[0]


def read_all(path: Path) -> list[PeerRun]:
    """One PeerRun per benchmark (load point) in the file, in file order."""
    doc = load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        raise PeerFormatError("expected a guidellm benchmarks.json object", field="metadata")
    version = doc["metadata"].get("version")
    if version not in SCHEMA_VERSIONS:
        raise PeerFormatError(f"schema version {version!r} is not one this reader knows "
                              f"({', '.join(map(str, SCHEMA_VERSIONS))})", field="metadata.version")
    benchmarks = doc.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise PeerFormatError("expected a non-empty list of benchmarks", field="benchmarks")
    tool_version = doc["metadata"].get("guidellm_version")
    config = doc.get("config")
    spec = _obj(config, "spec", "config", required=False) if isinstance(config, dict) else {}
    return [_run(Path(path), bench, i, len(benchmarks), tool_version, spec)
            for i, bench in enumerate(benchmarks)]


def _run(path: Path, bench: Any, index: int, total: int, tool_version: Any,
         spec: dict[str, Any]) -> PeerRun:
    where = f"benchmarks[{index}]"
    if not isinstance(bench, dict):
        raise PeerFormatError("expected an object", field=where)
    config = _obj(bench, "config", where)
    requests = _obj(bench, "requests", where)
    rows: list[PeerRequest] = []
    for status in ("successful", "incomplete", "errored"):
        items = requests.get(status) or []
        if not isinstance(items, list):
            raise PeerFormatError("expected a list", field=f"{where}.requests.{status}")
        for i, item in enumerate(items):
            rows.append(_request(item, f"{where}.requests.{status}[{i}]", status))
    rows.sort(key=lambda r: r.send_ns)
    strategy = config.get("strategy") or {}
    kind = strategy.get("type_")
    backend = config.get("backend") or {}
    data = spec.get("data") if isinstance(spec.get("data"), list) else []
    synthetic = data[0] if len(data) == 1 and isinstance(data[0], dict) else {}
    extra = {"benchmark": f"{index + 1} of {total} in the file", "strategy": str(strategy.get("type_"))}
    for key in ("warmup_duration", "cooldown_duration"):
        if bench.get(key):
            extra[key] = f"{bench[key]:g} s"
    start = number_at(bench, "start_time", where)
    return PeerRun(
        tool="guidellm", tool_version=str(tool_version) if tool_version is not None else None,
        format=FORMAT, tier=TIER_REQUEST, source_file=path, clock=CLOCK, requests=tuple(rows),
        published=_published(bench, where), definitions=dict(DEFINITIONS), lost=LOST,
        concurrency=_int_or_none(strategy.get("streams")) if kind == "concurrent" else None,
        rate=_float_or_none(strategy.get("rate")) if kind in ("constant", "poisson") else None,
        input_tokens=_int_or_none(synthetic.get("prompt_tokens")),
        output_tokens=_int_or_none(synthetic.get("output_tokens")),
        model=backend.get("model") if isinstance(backend.get("model"), str) else None,
        server_url=backend.get("target") if isinstance(backend.get("target"), str) else None,
        measured_at=datetime.fromtimestamp(start, UTC).isoformat().replace("+00:00", "Z"),
        extra=extra,
    )


def _request(item: Any, where: str, status: str) -> PeerRequest:
    if not isinstance(item, dict):
        raise PeerFormatError("expected an object", field=where)
    info = _obj(item, "info", where)
    timings = _obj(info, "timings", f"{where}.info")
    tw = f"{where}.info.timings"
    start = _stamp(timings, "request_start", tw, required=True)
    end = _stamp(timings, "request_end", tw)
    first = _stamp(timings, "first_token_iteration", tw)
    last = _stamp(timings, "last_token_iteration", tw)
    chunks: tuple[int, ...] = ()
    if first is not None:
        if first < start:
            raise PeerFormatError("first token before the request start", field=f"{tw}.first_token_iteration")
        if last is not None and last < first:
            raise PeerFormatError("last token before the first (a negative gap)",
                                  field=f"{tw}.last_token_iteration")
        chunks = (first,) if last is None or last == first else (first, last)
    if end is not None and end < start:
        raise PeerFormatError("request end before its start", field=f"{tw}.request_end")
    error = None
    if status != "successful":
        text = info.get("error")
        error = text if isinstance(text, str) and text else f"{status} ({info.get('status')})"
    return PeerRequest(
        send_ns=start, end_ns=end, chunk_ns=chunks, chunk_tokens=None,
        prompt_tokens=count_at(item, "prompt_tokens", where),
        output_tokens=count_at(item, "output_tokens", where), error=error)


def _published(bench: dict[str, Any], where: str) -> dict[str, float]:
    metrics = _obj(bench, "metrics", where)
    out: dict[str, float] = {}
    for name, metric, scale in _DISTRIBUTIONS:
        dist = (metrics.get(name) or {}).get("successful")
        if not isinstance(dist, dict) or not dist.get("count"):
            continue
        mw = f"{where}.metrics.{name}.successful"
        pct = _obj(dist, "percentiles", mw)
        out[published_key(metric, "mean")] = number_at(dist, "mean", mw) * scale
        for stat in ("p50", "p90", "p99"):
            out[published_key(metric, stat)] = number_at(pct, stat, f"{mw}.percentiles") * scale
    totals = _obj(metrics, "request_totals", f"{where}.metrics")
    out["completed"] = number_at(totals, "successful", f"{where}.metrics.request_totals")
    out["duration_s"] = number_at(bench, "duration", where)
    for key, name, stat in (("request_rate", "requests_per_second", "mean"),
                            ("total_tok_s", "output_tokens_per_second", "mean"),
                            ("output_tokens", "output_token_count", "total_sum")):
        dist = (metrics.get(name) or {}).get("successful")
        if isinstance(dist, dict):
            out[key] = number_at(dist, stat, f"{where}.metrics.{name}.successful")
    return out




def _obj(parent: dict[str, Any], key: str, where: str, *, required: bool = True) -> dict[str, Any]:
    value = parent.get(key)
    if isinstance(value, dict):
        return value
    if value is None and not required:
        return {}
    raise PeerFormatError("missing or not an object", field=f"{where}.{key}")


def _stamp(timings: dict[str, Any], key: str, where: str, *, required: bool = False) -> int | None:
    try:
        value = number(timings, key, required=required, minimum=0)
    except PeerFormatError as exc:
        raise PeerFormatError(exc.message, field=f"{where}.{key}") from None
    # exact: float seconds since 1970 times 1e9 in floats would lose ~256 ns
    return None if value is None else round(Fraction(value) * 1_000_000_000)



def _int_or_none(value: Any) -> int | None:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


FORMATS = ((FORMAT, sniff, read),)
READ_ALL = {FORMAT: read_all}
