"""Reading an llm-inference-bench ``benchmark_results.json`` (pure, no disk).

Why a reader of its own: that tool's file is not a page but a JSON report
whose shape grew over its releases (0.4.0 onwards). This module decides
whether a file is that tool's decode report at all, which version wrote it,
and whether every field the importer relies on is there; each refusal is one
line naming the version and the field. What the fields mean, and which
release added which, is written down in docs/import-llm-inference-bench.md.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_NAME = "llm-inference-bench"
FIRST_VERSION = (0, 4, 0)  # the first release with the results[] layout read here

# Per decode cell: fields present in every release since 0.4.0. A file without
# one of them is refused (one line naming the version and the field).
REQUIRED_RESULT_FIELDS = (
    "concurrency",
    "context_tokens",
    "aggregate_tps",
    "per_request_avg_tps",
    "ttft_p50",
    "inter_token_latency_p50",
    "measurement_seconds",
)
# Per prefill context.
REQUIRED_PREFILL_FIELDS = ("tok_per_sec", "ttft_seconds")


class JsonImportError(Exception):
    """The file is not an importable llm-inference-bench report; one line says why."""


@dataclass
class ToolReport:
    """What the importer uses of one report, checked; ``data`` is the whole file."""

    version: str
    version_tuple: tuple[int, ...]
    metadata: dict[str, Any]
    results: list[dict[str, Any]]
    prefill: dict[int, dict[str, Any]]
    data: dict[str, Any] = field(repr=False)


def looks_like_json(raw: bytes) -> bool:
    """Whether the bytes start like a JSON document (saved pages start with text)."""
    head = raw[:64].lstrip(b"\xef\xbb\xbf").lstrip()
    return head[:1] in (b"{", b"[")


def load_json(raw: bytes) -> Any:
    """Parsed JSON; JsonImportError with the line of the first mistake otherwise."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise JsonImportError(f"line {line}: not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JsonImportError(f"line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # NaN / Infinity
        raise JsonImportError(f"not valid JSON ({exc})") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _version_tuple(text: str) -> tuple[int, ...] | None:
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-].*)?", text.strip())
    if not m:
        return None
    return tuple(int(g) for g in m.groups(default="0"))


def is_tool_report(data: Any) -> bool:
    """Whether parsed JSON was written by llm-inference-bench (any of its modes)."""
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return False
    meta = data["metadata"]
    if not isinstance(meta.get("version"), str):
        return False
    marks = ("results", "summary_table", "prefill", "startup_diagnostics", "methodology")
    return any(k in data for k in marks) or "mode" in meta or "decode_mode" in meta


def read_report(data: Any) -> ToolReport:
    """Check parsed JSON as an llm-inference-bench decode report and type its parts."""
    if not is_tool_report(data):
        raise JsonImportError(
            f"not an {TOOL_NAME} result (expected an object with metadata.version "
            "and results, as its benchmark_results.json has)"
        )
    meta = data["metadata"]
    version = meta["version"]
    vt = _version_tuple(version)
    label = f"{TOOL_NAME} {version}"
    if vt is None:
        raise JsonImportError(f"{label}: field metadata.version: not a version number")
    if vt < FIRST_VERSION:
        missing = _first_missing(data.get("results"))
        raise JsonImportError(
            f"{label}: versions before 0.4.0 are not supported (the layout read here "
            "starts at 0.4.0" + (f"; field {missing} missing)" if missing else ")")
        )
    mode = meta.get("mode")
    if isinstance(mode, str) and mode:
        raise JsonImportError(
            f"{label}: a '{mode}' report holds no decode matrix (no results); nothing to import"
        )
    results = data.get("results")
    if results is None:
        raise JsonImportError(f"{label}: field results: missing")
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise JsonImportError(f"{label}: field results: expected a list of objects")
    prefill = _prefill(data.get("prefill"), label)
    if not results and not prefill:
        raise JsonImportError(f"{label}: no results (results and prefill are empty); nothing to import")
    for i, r in enumerate(results):
        _check_result(r, i, label)
    _check_lists(meta, label)
    return ToolReport(version, vt, meta, results, prefill, data)


def _first_missing(results: Any) -> str | None:
    """The first required field a list of results lacks, as ``results[i].name``."""
    for i, r in enumerate(results if isinstance(results, list) else []):
        for name in REQUIRED_RESULT_FIELDS:
            if not isinstance(r, dict) or name not in r:
                return f"results[{i}].{name}"
    return None


def _check_result(r: dict[str, Any], i: int, label: str) -> None:
    where = f"{label}: field results[{i}]"
    for name in REQUIRED_RESULT_FIELDS:
        if name not in r:
            raise JsonImportError(f"{where}.{name}: missing")
    for name in ("concurrency", "context_tokens"):
        v = r[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (name == "concurrency" and v < 1):
            raise JsonImportError(f"{where}.{name}: expected a whole number, got {_show(v)}")
    for name in REQUIRED_RESULT_FIELDS[2:]:
        v = r[name]
        if v is not None and not is_number(v):
            raise JsonImportError(f"{where}.{name}: expected a number or null, got {_show(v)}")


def _prefill(block: Any, label: str) -> dict[int, dict[str, Any]]:
    if block is None or block == {}:
        return {}
    if not isinstance(block, dict):
        raise JsonImportError(f"{label}: field prefill: expected an object keyed by context")
    out: dict[int, dict[str, Any]] = {}
    for key, row in block.items():
        where = f"{label}: field prefill.{key}"
        if not re.fullmatch(r"\d+", str(key)) or not isinstance(row, dict):
            raise JsonImportError(f"{where}: expected a context in tokens mapping to an object")
        if not row.get("skipped"):
            for name in REQUIRED_PREFILL_FIELDS:
                if name not in row:
                    raise JsonImportError(f"{where}.{name}: missing")
                if not is_number(row[name]):
                    raise JsonImportError(f"{where}.{name}: expected a number, got {_show(row[name])}")
        out[int(key)] = row
    return out


def _check_lists(meta: dict[str, Any], label: str) -> None:
    for name in ("concurrency_levels", "context_lengths"):
        v = meta.get(name)
        if v is None:
            continue
        if not isinstance(v, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v
        ):
            raise JsonImportError(f"{label}: field metadata.{name}: expected a list of whole numbers")


def is_number(v: Any) -> bool:
    """A finite JSON number (bools are not numbers here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _show(v: Any) -> str:
    if isinstance(v, (int, float, bool)) or v is None:
        return repr(v)
    if isinstance(v, str) and len(v) <= 20 and re.fullmatch(r"[\w .,:/-]*", v):
        return repr(v)
    return f"a {type(v).__name__}"


def is_json_file(path: Any) -> bool:
    """Whether the file at path starts like JSON: the content decides, not the extension."""
    with open(path, "rb") as fh:
        return looks_like_json(fh.read(64))
