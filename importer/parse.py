"""Text of a published "Speed test matrix" page -> :class:`PublishedPage`.

Pure: no I/O, so every variant and every bad input is testable from a string.

Why it is forgiving about layout but strict about numbers: pages reach us
saved from a browser, which keeps the words but not always the separators.
Metadata comes as "- Key" / "- Value" lines (the value sometimes without its
"- ") or as "Key: value" lines; tables as Markdown pipes or tab-separated;
blocks with blank lines between them or none; and text glued where the
browser dropped a separator (``BF166 contexts``, ``...}'Prefill``,
``1,829.9305 ms TTFT``). The All measurements table is the authority for
every number; the summary line, the Prefill block and the Sustained decode
matrix are cross-checked against it, and ambiguous glued numbers are read
the one way that agrees with it. Anything that does not fit raises
:class:`PageError` naming the line, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from importer import numbers
from importer.tables import (
    Line,
    PageError,
    PublishedCell,
    Summary,
    cross_check,
    parse_matrix,
    parse_measurements,
    parse_prefill_block,
)
from rundir.contract import DECODE, PREFILL, Engine, Hardware, Model, Parameters

PAGE_MARK = "Speed test matrix"
HEADINGS = (
    "Hardware",
    "Engine",
    "Run",
    "Launch command",
    "Prefill",
    "Sustained decode",
    "All measurements",
)
# A heading the browser glued to the end of the previous text is recognised
# only when the next line starts its section the way every page does.
_SUBTITLES = {
    "Prefill": "prompt tok/s by context length",
    "Sustained decode": "total tok/s",
    "All measurements": "Latencies are medians",
}
_SPACES = str.maketrans({"\u00a0": " ", "\u202f": " ", "\u2009": " ", "\u2007": " "})
_WHEN = (
    r"(?P<when>(?:[A-Z][a-z]+\.?\s+\d{1,2},\s+\d{4}|\d{4}-\d{2}-\d{2}),?[\sT]+"
    r"\d{1,2}:\d{2}(?::\d{2})?)\s*(?:UTC|Z)"
)
_MEASURED_RE = re.compile(rf"Measured\s+{_WHEN}")
_WHEN_PARTS_RE = re.compile(
    r"^(?:(?P<mon>[A-Za-z]+)\.?\s+(?P<d>\d{1,2}),\s+(?P<y>\d{4})|(?P<iy>\d{4})-(?P<im>\d{2})-"
    r"(?P<id>\d{2})),?[\sT]+(?P<H>\d{1,2}):(?P<M>\d{2})(?::(?P<S>\d{2}))?$"
)
_BY_RE = re.compile(r"by\s+@(?P<user>[A-Za-z0-9][\w.-]*)")
_TITLE_RE = re.compile(
    r"^(?P<model>.+?) on (?P<gpu>.+?)(?:\s+(?P<vram>\d+(?:\.\d+)?)\s?GB)?"
    r"(?:\s*×\s*(?P<count>\d+))?$"
)
_SUMMARY_RE = re.compile(
    r"(?P<n>\d+)\s*contexts?\s*\((?P<ctx>[^)]*)\)\s*[×x]\s*(?P<k>\d+)\s*concurrency levels?"
    r"\s*\((?P<conc>[^)]*)\)(?:\s*·?\s*prefill at\s*(?P<prefill>.*))?"
)
_KV_RE = re.compile(r"^(?P<key>[A-Za-z][\w ./()-]{0,40}?):(?:\s+(?P<value>.*))?$")

# Published key (case-folded) -> field, per metadata block.
_KEYS = {
    "Hardware": {
        "type": "type",
        "gpu": "gpu_name",
        "gpu count": "gpu_count",
        "vram": "vram",
        "cpu": "cpu",
        "os": "os",
        "driver": "driver",
        "cuda": "cuda",
    },
    "Engine": {
        "engine": "name",
        "version": "version",
        "quantization": "quantization",
        "backend": "backend",
        "repository": "repository",
        "build": "build",
        "commit": "commit",
    },
    "Run": {
        "served model": "served_name",
        "model": "repository_id",
        "revision": "revision",
        "max model length": "max_model_len",
        "benchmark tool": "tool",
        "decode test": "decode_test",
        "prefill mode": "prefill_mode",
        "prefill repeats": "prefill_repeats",
        "time per measurement": "duration_s",
        "max output": "max_output_tokens",
        "submitter": "submitter",
        "measured": "measured",
    },
}
T = TypeVar("T")
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()


@dataclass
class PublishedPage:
    """Everything a page publishes, typed; ``format`` says which variant it was."""

    title: str
    hardware: Hardware
    engine: Engine
    model: Model
    parameters: Parameters
    cells: list[PublishedCell]
    submitter: str | None = None
    measured_at: str | None = None  # ISO 8601 UTC
    launch_command: str | None = None
    byline_label: str | None = None  # "by @user dev import": the "dev import"
    extra: list[tuple[str, str, str]] = field(default_factory=list)  # (block, key, value)
    format: str = ""


def parse_page(text: str) -> PublishedPage:
    """Parse a page saved as text; raise PageError(line, message) when it does not fit."""
    lines = _lines(text)
    header, sections, heading_no = _sections(lines)
    if "All measurements" not in sections:
        raise PageError(
            lines[-1].no, "page ends before the All measurements table (truncated page?)"
        )
    title, summary_line, (submitter, label), measured_at, others = _header(header, heading_no)
    meta = _Meta(submitter=submitter, measured_at=measured_at)
    meta.extra += [("Header", "line", text) for text in others]
    for block in ("Hardware", "Engine", "Run"):
        for key, value, no in _pairs(sections.get(block, []), block, meta.styles):
            _apply(block, key, value, no, meta)
    _title_into(title, meta.model, meta.hardware, "Hardware" in sections)
    command = "\n".join(ln.text for ln in sections.get("Launch command", [])) or None

    prefill = parse_prefill_block(sections.get("Prefill", []))
    matrix = None
    if "Sustained decode" in sections:
        matrix = parse_matrix(sections["Sustained decode"], heading_no["Sustained decode"])
    rows, table_style = parse_measurements(
        sections["All measurements"], heading_no["All measurements"]
    )
    cells = [r.cell for r in rows]
    decode_ctx = _unique(c.context for c in cells if c.phase == DECODE)
    summary = None
    if summary_line is not None:
        counts = [len(matrix.contexts)] if matrix else []
        summary = _summary(summary_line, [*counts, len(decode_ctx)], meta.engine)
    cross_check(rows, matrix, prefill, summary)

    params = meta.params
    params.contexts = list(matrix.contexts) if matrix else decode_ctx
    params.concurrency = (
        list(matrix.concurrency)
        if matrix
        else _unique(c.concurrency for c in cells if c.phase == DECODE)
    )
    params.prefill_contexts = _unique(c.context for c in cells if c.phase == PREFILL)
    tables = sorted({table_style} | ({matrix.style} if matrix else set()))
    fmt = "speed-test-matrix/text; metadata={}; tables={}".format(
        "+".join(sorted(meta.styles)) or "none", "+".join(tables)
    )
    return PublishedPage(
        title=title.text,
        hardware=meta.hardware,
        engine=meta.engine,
        model=meta.model,
        parameters=params,
        cells=cells,
        submitter=meta.submitter,
        measured_at=meta.measured_at,
        launch_command=command,
        byline_label=label,
        extra=meta.extra,
        format=fmt,
    )


@dataclass
class _Meta:
    """What the Hardware, Engine and Run blocks (and the header) say, as it is read."""

    hardware: Hardware = field(default_factory=Hardware)
    engine: Engine = field(default_factory=Engine)
    model: Model = field(default_factory=Model)
    params: Parameters = field(default_factory=Parameters)
    submitter: str | None = None
    measured_at: str | None = None
    extra: list[tuple[str, str, str]] = field(default_factory=list)
    styles: set[str] = field(default_factory=set)


def _unique(values: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(values))


def _lines(text: str) -> list[Line]:
    """Non-blank lines with their 1-based numbers; browser spaces made plain."""
    out = []
    for no, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        t = raw.translate(_SPACES).strip()
        if t:
            out.append(Line(no, t))
    return out


def _sections(lines: list[Line]) -> tuple[list[Line], dict[str, list[Line]], dict[str, int]]:
    """Split the page at its headings, which only ever appear in page order."""
    start = next((i for i, ln in enumerate(lines[:40]) if ln.text.startswith(PAGE_MARK)), None)
    if start is None:
        raise PageError(
            lines[0].no if lines else 1,
            f"not a Speed test matrix page (no '{PAGE_MARK}' heading)",
        )
    header: list[Line] = []
    first = lines[start]
    if first.text != PAGE_MARK:
        header.append(Line(first.no, first.text[len(PAGE_MARK) :].strip()))
    sections: dict[str, list[Line]] = {}
    heading_no: dict[str, int] = {}
    current, bucket = -1, header
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        nxt = lines[i + 1].text if i + 1 < len(lines) else ""
        found = _heading(ln.text, nxt, current)
        if found is None:
            bucket.append(ln)
            continue
        k, before, after = found
        if before:
            bucket.append(Line(ln.no, before))
        current, bucket = k, sections.setdefault(HEADINGS[k], [])
        heading_no[HEADINGS[k]] = ln.no
        if after:
            bucket.append(Line(ln.no, after))
    return header, sections, heading_no


def _heading(text: str, nxt: str, current: int) -> tuple[int, str, str] | None:
    """(heading index, text before it, text after it) when the line holds a heading."""
    for k in range(current + 1, len(HEADINGS)):
        h = HEADINGS[k]
        if text in (h, h + ":"):
            return k, "", ""
        if h == "Launch command" and text.startswith(h + ":"):
            return k, "", text[len(h) + 1 :].strip()
        sub = _SUBTITLES.get(h)
        if sub and text.endswith(h) and nxt.startswith(sub):
            return k, text[: -len(h)].rstrip(), ""
    return None


def _header(
    lines: list[Line], heading_no: dict[str, int]
) -> tuple[Line, Line | None, tuple[str | None, str | None], str | None, list[str]]:
    """Title, summary line, byline (submitter, its label), measurement time and
    any other lines of the page's top (kept, so nothing published is dropped
    silently). Text after ``by @user`` on its line (``dev import``) is the
    byline's label: it stays in the byline, where the page showed it."""
    submitter = measured = label = None
    kept: list[Line] = []
    for ln in lines:
        t = ln.text
        m = _MEASURED_RE.search(t)
        if m:
            measured = _iso(m["when"], ln.no)
            t = t[: m.start()] + " · " + t[m.end() :]
        b = _BY_RE.search(t)
        if b:
            submitter = b["user"].rstrip(".")
            after, _, rest = t[b.end() :].partition(" · ")
            label = after.strip(" ·|—-") or label
            t = t[: b.start()] + " " + rest
        t = t.strip(" ·|—-")
        if t:
            kept.append(Line(ln.no, t))
    if not kept:
        raise PageError(min(heading_no.values(), default=1), "page has no title line")
    summary = next((ln for ln in kept[1:] if _SUMMARY_RE.search(ln.text)), None)
    for ln in kept[1:]:
        if ln is not summary and re.match(r"^(Measured\b|by @)", ln.text):
            raise PageError(
                ln.no, f"{ln.text!r} is not like 'by @user' or 'Measured Mar 3, 2026, 14:05 UTC'"
            )
    others = [ln.text for ln in kept[1:] if ln is not summary]
    return kept[0], summary, (submitter, label), measured, others


def _iso(when: str, no: int) -> str:
    """``Mar 3, 2026, 14:05`` (or ``2026-03-03 14:05``) -> ``2026-03-03T14:05:00Z``."""
    m = _WHEN_PARTS_RE.match(when.strip())
    try:
        if m is None:
            raise ValueError(when)
        if m["mon"]:
            month = _MONTHS.index(m["mon"][:3].casefold()) + 1
            y, d = int(m["y"]), int(m["d"])
        else:
            y, month, d = int(m["iy"]), int(m["im"]), int(m["id"])
        dt = datetime(y, month, d, int(m["H"]), int(m["M"]), int(m["S"] or 0))
    except ValueError:
        example = "'Mar 3, 2026, 14:05 UTC'"
        raise PageError(no, f"Measured {when!r} is not a date like {example}") from None
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pairs(lines: list[Line], block: str, styles: set[str]) -> list[tuple[str, str, int]]:
    """(key, value, line) from "- Key"/"- Value" lines or "Key: value" lines."""
    known = _KEYS[block]
    out: list[tuple[str, str, int]] = []
    pending: Line | None = None
    for ln in lines:
        dashed = ln.text == "-" or ln.text.startswith("- ")
        body = ln.text[1:].strip() if dashed else ln.text
        if pending is not None:
            if body.casefold() in known and dashed:
                raise PageError(pending.no, f"{block} key {pending.text!r} has no value")
            out.append((pending.text, body, ln.no))
            pending = None
            continue
        m = _KV_RE.match(body)
        if m:
            styles.add("colon")
            out.append((m["key"].strip(), (m["value"] or "").strip(), ln.no))
        else:
            styles.add("dash")
            pending = Line(ln.no, body)
    if pending is not None:
        raise PageError(pending.no, f"{block} key {pending.text!r} has no value")
    seen: dict[str, int] = {}
    for key, _, no in out:
        if key.casefold() in seen:
            first = seen[key.casefold()]
            raise PageError(no, f"{block} key {key!r} appears twice (first on line {first})")
        seen[key.casefold()] = no
    return out


def _number(parse: Callable[[str, str], T], value: str, no: int, what: str) -> T:
    try:
        return parse(value, what)
    except numbers.NumberError as exc:
        raise PageError(no, f"{exc}") from None


def _apply(block: str, key: str, value: str, no: int, meta: _Meta) -> None:
    """Store one published key's value where run.yaml keeps it."""
    name = _KEYS[block].get(key.casefold())
    hw, model, params = meta.hardware, meta.model, meta.params
    if name is None:
        meta.extra.append((block, key, value))
    elif name == "gpu_count":
        count = _number(numbers.parse_int, value, no, key)
        if hw.gpu_count is not None and hw.gpu_count != count:
            raise PageError(no, f"GPU count {count} disagrees with VRAM ({hw.gpu_count} GPUs)")
        hw.gpu_count = count
    elif name == "vram":
        _, count_or_none, each = _number(lambda v, _: numbers.parse_vram(v), value, no, key)
        if count_or_none is not None and hw.gpu_count not in (None, count_or_none):
            raise PageError(no, f"VRAM {value!r} disagrees with GPU count {hw.gpu_count}")
        # A bare "96 GB" is one GPU's memory (pages print "(N × …)" for several).
        hw.vram_gb_per_gpu = each
        hw.gpu_count = count_or_none if count_or_none is not None else hw.gpu_count
    elif block in ("Hardware", "Engine"):
        setattr(hw if block == "Hardware" else meta.engine, name, value)
    elif name in ("served_name", "repository_id", "revision"):
        setattr(model, name, value)
    elif name == "max_model_len":
        parse = numbers.parse_tokens if "token" in value else numbers.parse_count
        model.max_model_len = _number(parse, value, no, key)
    elif name == "tool":
        params.tool_name, params.tool_version = numbers.parse_tool(value)
    elif name == "duration_s":
        params.duration_s = _number(numbers.parse_seconds, value, no, key)
    elif name == "max_output_tokens":
        params.max_output_tokens = _number(numbers.parse_tokens, value, no, key)
    elif name == "prefill_repeats":
        params.prefill_repeats = _number(numbers.parse_int, value, no, key)
    elif name in ("decode_test", "prefill_mode"):
        setattr(params, name, value)
    elif name == "submitter":
        meta.submitter = value.lstrip("@")
    elif name == "measured":
        m = _MEASURED_RE.search(f"Measured {value}")
        if m is None:
            raise PageError(no, f"Measured {value!r} is not a date like 'Mar 3, 2026, 14:05 UTC'")
        meta.measured_at = _iso(m["when"], no)


def _title_into(title: Line, model: Model, hw: Hardware, has_hardware: bool) -> None:
    """Model name from the title; GPU facts from it only when the page has no
    Hardware block (a block without a GPU line means none, e.g. a CPU run)."""
    m = _TITLE_RE.match(title.text)
    model.name = m["model"].strip() if m else title.text
    if m and not has_hardware:
        hw.gpu_name = m["gpu"].strip()
        hw.vram_gb_per_gpu = float(m["vram"]) if m["vram"] else None
        hw.gpu_count = int(m["count"]) if m["count"] else None
    if hw.gpu_count is None and (hw.vram_gb_per_gpu is not None or hw.gpu_name):
        hw.gpu_count = 1  # a single GPU's page prints no "×N" and no "(N × …)"


def _summary(line: Line, counts: list[int], engine: Engine) -> Summary:
    """Read the summary line; ``INT46 contexts`` is split by the Engine block's
    quantization or else by the context counts of the matrix and the table."""
    text = line.text
    m = _SUMMARY_RE.search(text)
    assert m is not None  # only summary lines are passed in
    lead, digits = text[: m.start("n")], m["n"]
    splits = [(lead + digits[:i], digits[i:]) for i in range(len(digits))]
    quant = engine.quantization
    chosen = next((sp for sp in splits if quant and sp[0].rstrip(" ·").endswith(quant)), None)
    for n in counts:  # the browser glued "INT4" and "6 contexts": which digits are the count?
        chosen = chosen or next((sp for sp in splits if n and sp[1] == str(n)), None)
    lead, count = (chosen[0], int(chosen[1])) if chosen else (lead, int(digits))
    parts = [p.strip() for p in lead.split("·") if p.strip()]
    for name, value in zip(("name", "version", "quantization"), parts, strict=False):
        if getattr(engine, name) is None:
            setattr(engine, name, value)
    prefill = None
    if m["prefill"]:
        prefill = [p.strip() for p in m["prefill"].split(",") if p.strip()]
    return Summary(
        line=line.no,
        n_contexts=count,
        context_range=[p.strip() for p in re.split(r"[–-]", m["ctx"]) if p.strip()],
        n_concurrency=int(m["k"]),
        concurrency_range=[p.strip() for p in re.split(r"[–-]", m["conc"]) if p.strip()],
        prefill=prefill,
    )
