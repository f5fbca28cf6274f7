"""MLPerf Endpoints `events.jsonl`: every request's chunk arrivals, one event per line.

Why chunk tier: the tool's event logger writes one line per event it sees,
each stamped with time.monotonic_ns() in its main process: a request's
`sample.issued`, its first content chunk (`sample.recv_first`), every later
chunk (`sample.recv_non_first`) and its end (`sample.complete`). So every
chunk's arrival is kept; what is not kept is how many tokens each chunk held
(the tool counts tokens from the text with the model's tokenizer when it
reports), nor the run's configuration (config.yaml beside it) or summary
(performance/result_summary.json). Field meanings, as read in the tool's
source, are in docs/import-mlperf-endpoints.md.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from importer.peers.files import iter_jsonl, load_json, load_yaml, number
from importer.peers.model import TIER_CHUNK, PeerFormatError, PeerRequest, PeerRun, published_key

FORMAT = "mlperf-endpoints/events.jsonl"
CLOCK = "time.monotonic_ns in the tool's main process (CLOCK_MONOTONIC)"

# The event names this reader knows (mlcommons/endpoints core/record.py; the
# sample.client_*/transport_* names are from its earlier versions).
KNOWN_EVENTS: dict[str, frozenset[str]] = {
    "session": frozenset({"started", "ended", "interrupted", "stop_loadgen",
                          "start_performance_tracking", "stop_performance_tracking"}),
    "error": frozenset({"generic", "loadgen", "session", "client"}),
    "sample": frozenset({"issued", "complete", "recv_first", "recv_non_first", "client_send",
                         "client_resp_done", "transport_sent", "transport_recv"}),
}

DEFINITIONS = {
    "ttft_ms": "sample.recv_first stamp minus sample.issued stamp, per tracked request",
    "tpot_ms": ("(sample.complete stamp minus sample.recv_first stamp) divided by the tokens of the "
                "output after its first chunk (tokenizer run on the text at report time); excludes TTFT"),
    "e2e_ms": "sample.complete stamp minus sample.issued stamp",
    "total_tok_s": ("system_tps: output tokens of the tracked requests (tokenized text) divided by the "
                    "tracked duration (start_performance_tracking to the last tracked completion)"),
    "duration_s": "start_performance_tracking to the last tracked request's sample.complete",
    "completed": "tracked requests that reached sample.complete without an error event",
    "output_tokens": "sum over tracked requests of the tokenizer's count of the output text",
}
LOST = (
    "tokens per chunk: the file keeps each chunk's text only on the first chunk and in the final "
    "output, not a token count; the tool tokenizes at report time",
    "prompt and output token counts (prompt counted only where the file holds its token ids)",
    "the tool's summary figures (performance/result_summary.json, not in this file)",
    "configuration: concurrency or rate, model, lengths (config.yaml, not in this file)",
    "wall-clock date: stamps are monotonic only",
    "tool version: the file does not say",
)


@dataclass
class _Sample:
    issued: int
    line: int
    tracked: bool
    chunks: list[int] = field(default_factory=list)
    complete: int | None = None
    error: str | None = None
    prompt_tokens: int | None = None


def sniff(head: bytes) -> bool:
    """The first line is an event: a dotted event_type of a known category and timestamp_ns."""
    first = head.split(b"\n", 1)[0].strip()
    if not first.startswith(b"{"):
        return False
    try:
        obj = json.loads(first)
    except ValueError:
        return False
    if not isinstance(obj, dict) or "timestamp_ns" not in obj or "sample_uuid" not in obj:
        return False
    kind = obj.get("event_type")
    return isinstance(kind, str) and kind.split(".", 1)[0] in KNOWN_EVENTS and "." in kind


def _event(obj: dict[str, Any], line: int) -> tuple[str, str, int]:
    kind = obj.get("event_type")
    if not isinstance(kind, str):
        raise PeerFormatError("missing or not a string (expected e.g. 'sample.issued')",
                              line=line, field="event_type")
    category, _, name = kind.partition(".")
    if name not in KNOWN_EVENTS.get(category, ()):
        raise PeerFormatError(f"unknown event type {kind[:60]!r}: a newer events.jsonl schema than this "
                              "reader knows (mlcommons/endpoints record.py)", line=line, field="event_type")
    ts = number(obj, "timestamp_ns", line, minimum=0)
    if not isinstance(ts, int):
        raise PeerFormatError("expected integer nanoseconds, found a fraction", line=line,
                              field="timestamp_ns")
    return category, name, ts


def _error_text(data: Any) -> str:
    """ErrorData as the tool encodes it (tagged array, or an object in older versions)."""
    if isinstance(data, list) and data and data[0] == "ErrorData":
        parts = [str(p) for p in data[1:3] if p]
        return ": ".join(parts) or "error"
    if isinstance(data, dict):
        parts = [str(data[k]) for k in ("error_type", "error_message") if data.get(k)]
        return ": ".join(parts) or "error"
    return "error (no detail in the event)"


def _prompt_tokens(data: Any) -> int | None:
    """len(token_ids) of a PromptData that carries ids (["PromptData", text, ids, ...])."""
    if isinstance(data, list) and len(data) >= 3 and data[0] == "PromptData" and isinstance(data[2], list):
        return len(data[2])
    if isinstance(data, dict) and isinstance(data.get("token_ids"), list):
        return len(data["token_ids"])
    return None


def _uuid(obj: dict[str, Any], line: int) -> str:
    uid = obj.get("sample_uuid")
    if not isinstance(uid, str) or not uid:
        raise PeerFormatError("a sample event needs a non-empty string", line=line, field="sample_uuid")
    return uid


def read(path: Path) -> PeerRun:
    """Each tracked sample's issue, chunk and completion stamps, in ns on CLOCK_MONOTONIC."""
    samples: dict[str, _Sample] = {}
    tracking_seen = False
    tracking = False
    untracked = 0
    for line, obj in iter_jsonl(path):
        category, name, ts = _event(obj, line)
        if category == "session":
            if name == "start_performance_tracking":
                tracking_seen = tracking = True
            elif name == "stop_performance_tracking":
                tracking = False
            continue
        if category == "error":
            uid = obj.get("sample_uuid")
            if isinstance(uid, str) and uid in samples:
                samples[uid].error = _error_text(obj.get("data"))
            continue
        uid = _uuid(obj, line)
        if name == "issued":
            prev = samples.get(uid)
            if prev is not None and (prev.chunks or prev.complete is not None):
                raise PeerFormatError("sample.issued again after its chunks arrived", line=line,
                                      field="sample_uuid")
            samples[uid] = _Sample(ts, line, tracking, [],
                                   prompt_tokens=_prompt_tokens(obj.get("data")))
            continue
        s = samples.get(uid)
        if s is None:
            raise PeerFormatError(f"sample.{name} for a sample never issued", line=line, field="sample_uuid")
        if name in ("recv_first", "recv_non_first", "complete"):
            last = s.chunks[-1] if s.chunks else s.issued
            if ts < last:
                what = "its previous chunk" if s.chunks else "its sample.issued"
                raise PeerFormatError(f"negative gap: {(last - ts) / 1e6:.3f} ms before {what}",
                                      line=line, field="timestamp_ns")
            if s.complete is not None:
                raise PeerFormatError(f"sample.{name} after the sample completed", line=line,
                                      field="event_type")
            if name == "recv_first" and s.chunks:
                raise PeerFormatError("a second sample.recv_first", line=line, field="event_type")
            if name == "recv_non_first" and not s.chunks:
                raise PeerFormatError("sample.recv_non_first before sample.recv_first", line=line,
                                      field="event_type")
            if name == "complete":
                s.complete = ts
            else:
                s.chunks.append(ts)
    requests = []
    for s in sorted(samples.values(), key=lambda x: x.issued):
        if tracking_seen and not s.tracked:  # a file without tracking events: all measured
            untracked += 1
            continue
        error = s.error
        if error is None and s.complete is None:
            error = "no sample.complete event: the run ended before this request finished"
        requests.append(PeerRequest(send_ns=s.issued, end_ns=s.complete, chunk_ns=tuple(s.chunks),
                                    chunk_tokens=None, prompt_tokens=s.prompt_tokens, output_tokens=None,
                                    error=error, line=s.line))
    if not requests:
        raise PeerFormatError("no tracked sample.issued events: nothing was measured")
    extra = {"untracked_samples": str(untracked)} if untracked else {}
    run = PeerRun(tool="mlperf-endpoints", tool_version=None, format=FORMAT, tier=TIER_CHUNK,
                  source_file=Path(path), clock=CLOCK, requests=tuple(requests), published={},
                  definitions=dict(DEFINITIONS), lost=LOST, extra=extra)
    return with_companions(run)


# ---- config.yaml and performance/result_summary.json beside the events ---------------
# Read as the tool's own submission CLI reads them (endpoints-submission-cli 1.5.3.0:
# submissions/builder.py, runs/formatters.py; the summary's fields from the checker's
# models/file/point_summary.py, which follows the tool's Report struct): the concurrency
# is config.yaml's settings.load_pattern.target_concurrency, the model model_params.name;
# the summary keeps ns timings as {total: sum over samples, percentiles: {"50": ...}}.
_SUMMARY_SERIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("latency", "e2e_ms"))
_LOST_CONFIG = LOST[3]
_LOST_SUMMARY = LOST[2]


def _summary_path(path: Path) -> Path | None:
    for candidate in (path.with_name("performance") / "result_summary.json",
                      path.with_name("result_summary.json")):
        if candidate.is_file():
            return candidate
    return None


def _summary_figures(doc: Any, name: str) -> dict[str, float]:
    if not isinstance(doc, dict):
        raise PeerFormatError(f"{name} beside it: expected a JSON object", field="result_summary")
    done = number(doc, "n_samples_completed", None, minimum=0)
    span = number(doc, "duration_ns", None, minimum=0)
    out: dict[str, float] = {"completed": float(done), "duration_s": span / 1e9}
    for key, metric in _SUMMARY_SERIES:
        series = doc.get(key)
        if not isinstance(series, dict):
            continue
        pct = series.get("percentiles") if isinstance(series.get("percentiles"), dict) else {}
        for stat in ("50", "90", "99"):
            value = pct.get(stat, pct.get(f"{stat}.0"))
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[published_key(metric, f"p{stat}")] = value / 1e6
        total = series.get("total")
        if isinstance(total, int | float) and not isinstance(total, bool) and done:
            out[published_key(metric, "mean")] = total / done / 1e6
    osl = doc.get("output_sequence_lengths")
    if isinstance(osl, dict) and isinstance(osl.get("total"), int | float):
        out["output_tokens"] = float(osl["total"])
        if span:
            out["total_tok_s"] = osl["total"] / (span / 1e9)
    return out


def with_companions(run: PeerRun) -> PeerRun:
    """The run with config.yaml's load and model and the summary's figures, where those
    files lie beside the events; ``lost`` keeps saying what was not found."""
    path = Path(run.source_file)
    lost, extra, changes = list(run.lost), dict(run.extra), {}
    config = path.with_name("config.yaml")
    if config.is_file():
        try:
            doc = load_yaml(config)
        except PeerFormatError as exc:
            raise PeerFormatError(f"config.yaml beside it: {exc.message}", field="config") from None
        doc = doc if isinstance(doc, dict) else {}
        pattern = ((doc.get("settings") or {}).get("load_pattern") or {}) if isinstance(
            doc.get("settings"), dict) else {}
        target = pattern.get("target_concurrency") if isinstance(pattern, dict) else None
        if isinstance(target, int) and not isinstance(target, bool) and target > 0:
            changes["concurrency"] = target
        name = (doc.get("model_params") or {}).get("name") if isinstance(doc.get("model_params"), dict) \
            else None
        if isinstance(name, str) and name:
            changes["model"] = name
        lost.remove(_LOST_CONFIG)
        if "concurrency" not in changes:
            lost.append("the load: config.yaml beside it names no settings.load_pattern.target_concurrency")
        extra["config_file"] = "config.yaml (the tool's configuration)"
    summary = _summary_path(path)
    if summary is not None:
        changes["published"] = _summary_figures(load_json(summary), summary.name)
        lost.remove(_LOST_SUMMARY)
        extra["summary_file"] = f"{summary.relative_to(path.parent)} (the tool's own figures)"
    return dataclasses.replace(run, lost=tuple(lost), extra=extra, **changes)


FORMATS = ((FORMAT, sniff, read),)
