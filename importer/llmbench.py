"""llm-inference-bench report -> imported run directory.

Why the mapping is spelled out here: that tool measures similar things under
other definitions (its per-request figure is the aggregate divided by C, its
prefill one scout request, its statuses flags). Every cell carries the
tool's own published figures in ``pub_*``, its statuses are mapped to ours
with the reason kept, and the run's notes say where the definitions differ,
so the page never passes them off as our measurement. The whole report,
redacted, is kept as ``raw/llm-inference-bench.json`` in the run directory
(per-request samples included). The reading rules are in
docs/import-llm-inference-bench.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from importer.llmbench_read import (
    TOOL_NAME,
    JsonImportError,
    ToolReport,
    is_number,
    load_json,
    read_report,
)
from importer.write import ImportResult, write_run_dir
from rundir.contract import (
    CELLS_SCHEMA,
    DECODE,
    ERROR,
    LOOPED,
    OVER_CAPACITY,
    PREFILL,
    REQUESTS_QUEUED,
    SCHEMA_VERSION,
    SOURCE_IMPORTED,
    VALID,
    Engine,
    Hardware,
    Imported,
    KvBudget,
    Model,
    Parameters,
    RunInfo,
)
from rundir.identity import source_key
from rundir.redact import redact, redact_tree
from rundir.slugs import slugify

RAW_FILE = "raw/llm-inference-bench.json"
FORMAT = "llm-inference-bench/json"

DEFINITIONS = """\
Imported from an llm-inference-bench JSON report (benchmark_results.json, \
version {version}): the figures are the tool's own published aggregates; there \
are no token timestamps, so they cannot be recomputed. The whole report \
(redacted) is kept in the run's raw data, `{raw}`, with the tool's per-request \
samples.

Where the tool's definitions differ from ours:

- **Per request tok/s** is the tool's aggregate ÷ C (its `per_request_avg_tps`), \
not the median over requests of each request's own rate.
- **Time between tokens** is the tool's per-request inter-token latency, \
(last token − first token) ÷ (tokens − 1) over each whole stream, median over \
requests (`inter_token_latency_p50`){itl_note}; ours is measured inside the \
window only.
- **TTFT** is the median over the cell's requests (`ttft_p50`), as ours, but its \
requests include those that waited in a queue.
- **Average active requests** is the tool's effective concurrency (the server's \
running-requests gauge), not a time-weighted mean over the window.
- **Completed requests** counts requests the tool saw finish (`completed_request_count`).
- **Prefill** is {prefill_note}, not the median of repeated cold requests.
- **Statuses**: the tool's capacity-limited or underfilled cells are shown as \
Requests queued; cells it did not write (it leaves out skipped and over-budget \
cells) as Over capacity; its loop guard as Looped; failed streams as Error. \
Each keeps the tool's reason."""


def import_json_file(path: Path, out: Path) -> ImportResult:
    """Read the report at path and write its run directory under out."""
    raw = Path(path).read_bytes()
    report = read_report(load_json(raw))
    return write_report(report, out, Path(path).name, hashlib.sha256(raw).hexdigest())


def write_report(report: ToolReport, out: Path, source_file: str, sha256: str) -> ImportResult:
    """Redact everything first (its args and env may hold keys), then write."""
    report = ToolReport(
        report.version, report.version_tuple, redact_tree(report.metadata),
        redact_tree(report.results), redact_tree(report.prefill), redact_tree(report.data),
    )
    info = run_info(report, "", redact(source_file), sha256)
    cells = cells_table(report)
    # the id ends in the source key (rundir.identity): the report's published
    # figures by cell and its timestamp, whatever its formatting or key order
    digest = source_key(info, cells) or ""
    parts = [info.model.name, info.engine.name, info.engine.version]
    run_id = slugify("-".join(p for p in parts if p), "imported") + f"-{digest[:8]}"
    info.run_id = run_id
    raw = json.dumps(report.data, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    return write_run_dir(out, run_id, info, cells, {RAW_FILE: raw})


# -- run.yaml -----------------------------------------------------------------


def _events(report: ToolReport) -> list[str]:
    log = report.data.get("event_log")
    return [e for e in log if isinstance(e, str)] if isinstance(log, list) else []


def _event(report: ToolReport, pattern: str) -> re.Match[str] | None:
    for line in _events(report):
        m = re.search(pattern, line)
        if m:
            return m
    return None


def _int_text(text: str) -> int:
    return int(text.replace(",", ""))


def _str(v: Any) -> str | None:
    return v.strip() or None if isinstance(v, str) else None


def hardware(report: ToolReport) -> Hardware:
    """What its startup diagnostics say of the machine (the OS from uname)."""
    diag = report.data.get("startup_diagnostics")
    hw = Hardware()
    if isinstance(diag, dict):
        uname = _str(diag.get("uname"))
        if uname:
            words = uname.split()
            hw.os = " ".join(words[:1] + words[2:3])  # "Linux 6.8.0-49-generic"
    return hw


def run_info(report: ToolReport, run_id: str, source_file: str, sha256: str) -> RunInfo:
    """The run.yaml of an imported report: its values, nothing invented."""
    meta = report.metadata
    engine_m = _event(report, r"startup engine (\S+) (\S+)")
    kv_m = _event(report, r"KV cache budget from ([^:]+): ([\d,]+) tokens")
    len_m = _event(report, r"model context length: ([\d,]+) tokens")
    kv_tokens = meta.get("max_total_tokens")
    kv = KvBudget()
    if is_number(kv_tokens) and kv_tokens > 0:
        how = f"; its log: from {kv_m.group(1)}" if kv_m else ""
        kv = KvBudget(int(kv_tokens), f"{TOOL_NAME} metadata.max_total_tokens{how}")
    elif kv_m:
        kv = KvBudget(_int_text(kv_m.group(2)), f"{TOOL_NAME} event log: from {kv_m.group(1)}")
    model_name = _str(meta.get("model"))
    contexts = _levels(meta.get("context_lengths"), [r["context_tokens"] for r in report.results])
    conc = _levels(meta.get("concurrency_levels"), [r["concurrency"] for r in report.results])
    return RunInfo(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        source=SOURCE_IMPORTED,
        measured_at=measured_at(meta.get("timestamp")),
        hardware=hardware(report),
        engine=Engine(name=_str(meta.get("engine")), version=engine_m.group(2) if engine_m else None),
        model=Model(name=model_name, served_name=model_name,
                    max_model_len=_int_text(len_m.group(1)) if len_m else None),
        parameters=Parameters(
            contexts=[c for c in contexts if c >= 1],
            concurrency=conc,
            prefill_contexts=sorted(c for c in report.prefill if c >= 1),
            duration_s=_positive(meta.get("duration_per_test")),
            max_output_tokens=_whole(meta.get("max_tokens")),
            prefill_mode=_str(meta.get("prefill_mode")),
            decode_test=_str(meta.get("primary_decode_layer")) or _str(meta.get("decode_mode")),
            tool_name=TOOL_NAME,
            tool_version=report.version,
        ),
        kv_budget=kv,
        notes=notes(report),
        imported=Imported(source_file=source_file, source_sha256=sha256,
                          format=f"{FORMAT}; version={report.version}"),
    )


def measured_at(stamp: Any) -> str | None:
    """Its timestamp (written at the end of the run, local time without a zone) as UTC."""
    if not isinstance(stamp, str) or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?", stamp):
        return _str(stamp) if isinstance(stamp, str) and re.search(r"(Z|[+-]\d\d:\d\d)$", stamp) else None
    return stamp + "+00:00"


def _levels(listed: Any, seen: list[int]) -> list[int]:
    values = listed if isinstance(listed, list) and listed else seen
    return sorted({int(v) for v in values})


def _positive(v: Any) -> float | None:
    return float(v) if is_number(v) and v > 0 else None


def _whole(v: Any) -> int | None:
    return int(v) if is_number(v) and v >= 1 and float(v).is_integer() else None


def notes(report: ToolReport) -> str:
    """The run's notes: provenance and every definition difference (shown on the page)."""
    has_chunk_itl = any("chunk_inter_token_latency_p50" in r for r in report.results)
    itl_note = (
        "; the tool also records a per-chunk figure (`chunk_inter_token_latency_p50`), "
        "kept in the raw data"
        if has_chunk_itl
        else "; this version records no separate per-chunk figure, so with several tokens "
        "per chunk it may be per chunk"
    )
    methods = sorted({str(p.get("method")) for p in report.prefill.values() if p.get("method")})
    samples = sorted({p.get("samples") for p in report.prefill.values() if is_number(p.get("samples"))})
    if methods:
        prefill_note = (
            f"prompt tokens ÷ TTFT of the tool's prefill requests ({', '.join(methods)}; "
            f"samples per context: {', '.join(str(s) for s in samples) or 'not recorded'}): "
            "the integrated scout is one request that fills the prefix cache before a decode cell"
        )
    else:
        prefill_note = "prompt tokens ÷ TTFT of the tool's prefill request(s)"
    text = DEFINITIONS.format(version=report.version, raw=RAW_FILE, itl_note=itl_note,
                              prefill_note=prefill_note)
    extra = []
    if measured_at(report.metadata.get("timestamp")) != report.metadata.get("timestamp"):
        extra.append("The tool writes its timestamp when the run ends, in local time without a "
                     "time zone; it is shown here as UTC.")
    zero = sorted({r["context_tokens"] for r in report.results if r["context_tokens"] < 1})
    zero += sorted(c for c in report.prefill if c < 1 and c not in zero)
    if zero:
        extra.append("Cells at context 0 (no filler prompt) have no row here: contexts start at "
                     "1 token. They are in the raw data.")
    args = (report.data.get("startup_diagnostics") or {}).get("args")
    if isinstance(args, dict) and args:
        listed = " ".join(f"--{str(k).replace('_', '-')} {v}" for k, v in args.items())
        extra.append(f"Tool arguments: `{redact(listed)}`")
    return "\n\n".join([text, *extra])


# -- cells.parquet --------------------------------------------------------------


def _num(v: Any, scale: float = 1.0) -> float | None:
    """A published figure; the tool writes 0 or a negative sentinel for 'none'."""
    return float(v) * scale if is_number(v) and v > 0 else None


def _count(v: Any) -> int | None:
    return int(v) if is_number(v) and v >= 0 else None


def decode_status(r: dict[str, Any]) -> tuple[str, str | None]:
    """Our status and its reason from the tool's flags, the reason in its words."""
    reason = _str(r.get("failure_reason")) or _str(r.get("loop_reason"))
    if r.get("loop_detected"):
        return LOOPED, reason or f"{TOOL_NAME}: repetition guard fired (loop_detected)"
    if reason or not is_number(r.get("aggregate_tps")) or r["aggregate_tps"] < 0:
        tps = r.get("aggregate_tps")
        return ERROR, reason or f"{TOOL_NAME}: no throughput for this cell (aggregate_tps {tps!r})"
    errors = r.get("num_errors")
    if is_number(errors) and errors > 0:
        return ERROR, f"{TOOL_NAME}: {int(errors)} request(s) failed (num_errors)"
    if r.get("capacity_limited") or r.get("underfilled"):
        flags = [f for f in ("capacity_limited", "underfilled", "warmup_timed_out") if r.get(f)]
        bits = [f"{TOOL_NAME}: {', '.join(flags)}"]
        if is_number(r.get("effective_concurrency")):
            bits.append(f"effective concurrency {r['effective_concurrency']:g} of {r['concurrency']}")
        if is_number(r.get("avg_queue_reqs")) and r["avg_queue_reqs"] > 0:
            bits.append(f"{r['avg_queue_reqs']:g} queued on average")
        why = _str(r.get("timeout_reason")) or _str(r.get("ready_reason"))
        if why:
            bits.append(why)
        return REQUESTS_QUEUED, "; ".join(bits)
    return VALID, None


def decode_row(r: dict[str, Any]) -> dict[str, Any]:
    status, reason = decode_status(r)
    active = r.get("effective_concurrency", r.get("avg_running_reqs"))
    output = r.get("client_output_tokens", r.get("total_tokens"))
    return {
        "phase": DECODE, "context": r["context_tokens"], "concurrency": r["concurrency"],
        "status": status, "reason": redact(reason) if reason else None,
        "pub_total_tok_s": _num(r["aggregate_tps"]),
        "pub_per_request_tok_s": _num(r["per_request_avg_tps"]),
        "pub_ttft_ms": _num(r["ttft_p50"], 1000.0),
        "pub_tbt_ms": _num(r["inter_token_latency_p50"], 1000.0),
        "pub_avg_active": _num(active),
        "pub_completed": _count(r.get("completed_request_count")),
        "pub_output_tokens": _count(output),
        "pub_measured_s": _num(r["measurement_seconds"]),
    }


def prefill_row(context: int, p: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"phase": PREFILL, "context": context, "concurrency": 1,
                           "status": VALID, "reason": None}
    if p.get("skipped"):
        row.update(status=OVER_CAPACITY, reason=f"{TOOL_NAME}: prefill skipped")
    else:
        row.update(pub_total_tok_s=_num(p["tok_per_sec"]), pub_ttft_ms=_num(p["ttft_seconds"], 1000.0))
    return row


def cells_table(report: ToolReport) -> pa.Table:
    """One row per planned cell: every prefill context, every decode C × context."""
    rows = [prefill_row(c, p) for c, p in sorted(report.prefill.items()) if c >= 1]
    by_key = {(r["context_tokens"], r["concurrency"]): r for r in report.results}
    contexts = _levels(report.metadata.get("context_lengths"), [k[0] for k in by_key])
    conc = _levels(report.metadata.get("concurrency_levels"), [k[1] for k in by_key])
    keys = sorted(set(by_key) | {(x, c) for x in contexts for c in conc})
    for key in keys:
        if key[0] < 1:
            continue
        if key in by_key:
            rows.append(decode_row(by_key[key]))
        else:
            rows.append({"phase": DECODE, "context": key[0], "concurrency": key[1],
                         "status": OVER_CAPACITY,
                         "reason": f"{TOOL_NAME}: not in its results (the tool does not write "
                                   "cells it skipped, e.g. over its KV budget)"})
    return pa.Table.from_pylist(rows, schema=CELLS_SCHEMA)


__all__ = ["JsonImportError", "import_json_file", "write_report"]
