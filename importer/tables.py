"""The number blocks of a page: All measurements, the decode matrix, the Prefill block.

Why apart from parse.py: these carry every number, so they get the strict
treatment (cell counts against the header, each number parsed, rows counted
against the shape the page announces) and the cross-checks that let a glued
cell such as ``1,829.9305 ms TTFT`` be read the one way the All measurements
table agrees with.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from importer import numbers
from rundir.contract import (
    DECODE,
    ERROR,
    PENDING,
    PREFILL,
    VALID,
)
from rundir.words import STATUS_LABELS

# The published status words (a page never shows a cell that was not measured).
STATUS_WORDS = {label: status for status, label in STATUS_LABELS.items() if status != PENDING}
PHASE_WORDS = {"prefill": PREFILL, "sustained decode": DECODE, "decode": DECODE}
PREFILL_SUBTITLE = "prompt tok/s by context length"
_SEPARATOR_RE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")
_PREFILL_LINE_RE = re.compile(r"^(?P<label>\d[\d,]*K?)\s*context\s*(?P<rest>.*)$")
_LATENCY_RE = re.compile(r"^(?P<blob>.*?)\s*(?P<unit>ms|s)$")

T = TypeVar("T")
_Parser = Callable[[str, str], object]
# Column title (case-folded) -> PublishedCell field and how its values read.
_COLUMNS: dict[str, tuple[str, _Parser | None]] = {
    "phase": ("phase", None),
    "context": ("context", None),
    "requests at once": ("concurrency", None),
    "status": ("status", None),
    "total tok/s": ("total_tok_s", numbers.parse_number),
    "per request tok/s": ("per_request_tok_s", numbers.parse_number),
    "ttft": ("ttft_ms", numbers.parse_ms),
    "time between tokens": ("tbt_ms", numbers.parse_ms),
    "average active requests": ("avg_active", numbers.parse_number),
    "completed requests": ("completed", numbers.parse_count),
    "output tokens": ("output_tokens", numbers.parse_count),
    "measured for": ("measured_s", numbers.parse_seconds),
}
_REQUIRED = ("phase", "context", "requests at once", "status")


class PageError(ValueError):
    """The page does not fit; ``line`` (1-based, None for the whole file) and a
    one-line ``message`` that says what to look at."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(f"{line}: {message}" if line else message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Line:
    """A non-blank line of the page and its number in the file."""

    no: int
    text: str


@dataclass
class PublishedCell:
    """One row of the All measurements table, in contract terms."""

    phase: str
    context: int  # tokens: the label's K × 1024
    concurrency: int
    status: str
    reason: str | None = None
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    tbt_ms: float | None = None
    avg_active: float | None = None
    completed: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None


@dataclass
class Row:
    line: int
    label: str
    cell: PublishedCell


@dataclass
class Table:
    header: list[str]
    header_no: int
    rows: list[tuple[int, list[str]]]
    style: str  # "pipe" or "tsv"


@dataclass
class Matrix:
    contexts: list[int]
    concurrency: list[int]
    cells: list[tuple[int, str, int, int, str]]  # line, label, context, concurrency, text
    header_no: int
    last_no: int
    style: str


@dataclass
class PrefillLine:
    line: int
    label: str
    context: int
    text: str


@dataclass
class Summary:
    """The line under the title: engine · version · quantization and the matrix's shape."""

    line: int
    n_contexts: int
    context_range: list[str]
    n_concurrency: int
    concurrency_range: list[str]
    prefill: list[str] | None


def _split(text: str, style: str) -> list[str]:
    if style == "tsv":
        return [c.strip() for c in text.split("\t")]
    inner = text[1:-1] if text.endswith("|") and len(text) > 1 else text[1:]
    return [c.strip() for c in inner.split("|")]


def _find_header(text: str, first_col: str) -> tuple[int, str] | None:
    """(where the header starts, its style) when text holds the table's header."""
    pipe = re.search(rf"\|\s*{re.escape(first_col)}\s*\|", text)
    if pipe:
        return pipe.start(), "pipe"
    tab = re.search(rf"{re.escape(first_col)}\t", text)
    return (tab.start(), "tsv") if tab else None


def read_table(lines: list[Line], first_col: str, what: str, heading_no: int) -> Table:
    """Find the table whose first column is first_col (its header may be glued
    to the text before it) and read rows until the first line that is not one."""
    found = next(
        ((i, hit) for i, ln in enumerate(lines) if (hit := _find_header(ln.text, first_col))),
        None,
    )
    if found is None:
        raise PageError(heading_no, f"{what}: no table with a {first_col!r} column")
    i, (start, style) = found
    header_text, header_no = lines[i].text[start:], lines[i].no
    header = _split(header_text, style)
    rows: list[tuple[int, list[str]]] = []
    j = i + 1
    if style == "pipe" and j < len(lines) and _SEPARATOR_RE.match(lines[j].text):
        j += 1
    for ln in lines[j:]:
        if (style == "pipe" and not ln.text.startswith("|")) or (
            style == "tsv" and "\t" not in ln.text
        ):
            break
        cells = _split(ln.text, style)
        if len(cells) != len(header):
            raise PageError(ln.no, f"{what} row has {len(cells)} cells, header has {len(header)}")
        if style == "pipe" and not ln.text.endswith("|"):
            raise PageError(ln.no, f"{what} row does not end with '|' (truncated page?)")
        rows.append((ln.no, cells))
    return Table(header, header_no, rows, style)


def _parse(parse: Callable[[str, str], T], text: str, what: str, no: int, where: str) -> T:
    try:
        return parse(text, what)
    except numbers.NumberError as exc:
        raise PageError(no, f"{where}: {exc}") from None


def _status(text: str, no: int) -> tuple[str, str | None]:
    """``Valid`` -> valid; ``Error: timeout`` -> (error, "timeout")."""
    t = text.strip()
    for word, status in STATUS_WORDS.items():
        if t.casefold() == word.casefold():
            return status, None
    if t.casefold().startswith("error"):
        return ERROR, t[5:].strip(" :—-()") or None
    raise PageError(no, f"All measurements: unknown status {t!r}")


def parse_measurements(lines: list[Line], heading_no: int) -> tuple[list[Row], str]:
    """The authoritative table: one PublishedCell per row, every number parsed."""
    table = read_table(lines, "Phase", "All measurements", heading_no)
    keys = [h.casefold() for h in table.header]
    for h, key in zip(table.header, keys, strict=True):
        if key not in _COLUMNS:
            raise PageError(table.header_no, f"All measurements has an unknown column {h!r}")
        if keys.count(key) > 1:
            raise PageError(table.header_no, f"All measurements has the column {h!r} twice")
    for key in _REQUIRED:
        if key not in keys:
            raise PageError(table.header_no, f"All measurements has no {key!r} column")
    if not table.rows:
        raise PageError(table.header_no, "All measurements has no rows (truncated page?)")
    rows: list[Row] = []
    seen: dict[tuple[str, int, int], int] = {}
    for no, texts in table.rows:
        by = dict(zip(keys, texts, strict=True))
        phase = PHASE_WORDS.get(by["phase"].casefold())
        if phase is None:
            raise PageError(no, f"All measurements: unknown phase {by['phase']!r}")
        context = _parse(numbers.parse_context, by["context"], "Context", no, "All measurements")
        conc_text = by["requests at once"]
        concurrency = (
            1
            if phase == PREFILL and numbers.is_missing(conc_text)
            else _parse(numbers.parse_int, conc_text, "Requests at once", no, "All measurements")
        )
        status, reason = _status(by["status"], no)
        values: dict[str, object] = {}
        for key, text in by.items():
            name, parser = _COLUMNS[key]
            if parser is not None and not numbers.is_missing(text):
                values[name] = _parse(
                    parser, text, table.header[keys.index(key)], no, "All measurements"
                )
        cell = PublishedCell(phase, context, concurrency, status, reason, **values)  # type: ignore[arg-type]
        k = (phase, context, concurrency)
        if k in seen:
            raise PageError(no, f"All measurements repeats the row of line {seen[k]}")
        seen[k] = no
        rows.append(Row(no, by["context"], cell))
    return rows, table.style


def parse_matrix(lines: list[Line], heading_no: int) -> Matrix:
    """The Sustained decode matrix: contexts × concurrency, cell texts kept for checking."""
    what = "Sustained decode matrix"
    table = read_table(lines, "Context", what, heading_no)
    conc = [
        _parse(numbers.parse_int, h, "concurrency", table.header_no, what) for h in table.header[1:]
    ]
    if not table.rows:
        raise PageError(table.header_no, f"{what} has no rows (truncated page?)")
    contexts: list[int] = []
    cells = []
    for no, texts in table.rows:
        ctx = _parse(numbers.parse_context, texts[0], "context", no, what)
        if ctx in contexts:
            raise PageError(no, f"{what} repeats the context {texts[0]}")
        contexts.append(ctx)
        cells += [(no, texts[0], ctx, c, t) for c, t in zip(conc, texts[1:], strict=True)]
    return Matrix(contexts, conc, cells, table.header_no, table.rows[-1][0], table.style)


def parse_prefill_block(lines: list[Line]) -> list[PrefillLine]:
    """``8K context17.6K465 ms TTFT`` lines; other lines (notes) are not data."""
    out: list[PrefillLine] = []
    for ln in lines:
        text = ln.text.removeprefix(PREFILL_SUBTITLE).strip()
        m = _PREFILL_LINE_RE.match(text)
        if m is None:
            continue
        ctx = _parse(numbers.parse_context, m["label"], "context", ln.no, "Prefill")
        out.append(PrefillLine(ln.no, m["label"], ctx, m["rest"]))
    return out


def _shown_agrees(text: str, cell: PublishedCell) -> bool:
    """Whether a matrix / prefill-block cell shows what the table row holds.

    The cell is ``[tok/s][status][TTFT ms TTFT]`` with any part absent and
    no separators; the tok/s and TTFT may be glued into one digit run, read
    every possible way until one agrees.
    """
    t = " ".join(text.split())
    if numbers.is_missing(t):
        return cell.total_tok_s is None and cell.status != VALID
    word = next((w for w in STATUS_WORDS if w in t), None)
    if word is not None:
        before, after = t.split(word, 1)
        if not after.rstrip().endswith("TTFT"):
            after = ""  # an error's reason, not a number
        return (
            STATUS_WORDS[word] == cell.status
            and (not before.strip() or numbers.shown_agrees(before, cell.total_tok_s))
            and (not after.strip() or numbers.shown_agrees(after.strip()[:-4], cell.ttft_ms))
        )
    if cell.status != VALID:
        return False
    if not t.endswith("TTFT"):
        return numbers.shown_agrees(t, cell.total_tok_s)
    m = _LATENCY_RE.match(t[:-4].strip())
    if m is None:
        return False
    return any(
        numbers.shown_agrees(a, cell.total_tok_s) and numbers.shown_agrees(f"{b} {m['unit']}", cell.ttft_ms)
        for a, b in numbers.glued_splits(m["blob"])
    )


def cross_check(
    rows: list[Row],
    matrix: Matrix | None,
    prefill: list[PrefillLine],
    summary: Summary | None,
) -> None:
    """Count the table's rows against the announced shape; check every cell shown twice."""
    decode = {(r.cell.context, r.cell.concurrency): r for r in rows if r.cell.phase == DECODE}
    pre = {r.cell.context: r for r in rows if r.cell.phase == PREFILL}
    decode_ctx = list(dict.fromkeys(c for c, _ in decode))
    decode_conc = list(dict.fromkeys(k for _, k in decode))
    if summary and matrix:
        _check_matrix_shape(matrix, summary)
    n_ctx = len(matrix.contexts) if matrix else summary.n_contexts if summary else len(decode_ctx)
    n_conc = (
        len(matrix.concurrency)
        if matrix
        else summary.n_concurrency
        if summary
        else len(decode_conc)
    )
    n_pre = (
        len(prefill)
        if prefill
        else len(summary.prefill)
        if summary and summary.prefill
        else len(pre)
    )
    _check_row_count(rows, n_pre, n_ctx, n_conc)
    if matrix:
        _check_matrix_cells(matrix, decode)
    _check_prefill_lines(prefill, pre)
    if summary:
        _check_summary(
            summary,
            matrix.contexts if matrix else decode_ctx,
            matrix.concurrency if matrix else decode_conc,
            list(pre),
        )


def _check_matrix_shape(matrix: Matrix, summary: Summary) -> None:
    """The matrix has as many rows and columns as the summary line announces."""
    if summary.n_contexts != len(matrix.contexts):
        short = len(matrix.contexts) < summary.n_contexts
        raise PageError(
            matrix.last_no if short else summary.line,
            f"Sustained decode matrix has {len(matrix.contexts)} rows, the summary "
            f"line says {summary.n_contexts} contexts" + (" (truncated page?)" if short else ""),
        )
    if summary.n_concurrency != len(matrix.concurrency):
        raise PageError(
            matrix.header_no,
            f"Sustained decode matrix has {len(matrix.concurrency)}"
            f" columns, the summary line says {summary.n_concurrency} levels",
        )


def _check_row_count(rows: list[Row], n_pre: int, n_ctx: int, n_conc: int) -> None:
    """All measurements has one row per prefill context and per decode cell."""
    expected = n_pre + n_ctx * n_conc
    if len(rows) != expected:
        hint = " (truncated page?)" if len(rows) < expected else ""
        raise PageError(
            rows[-1].line,
            f"All measurements has {len(rows)} rows, expected "
            f"{expected} ({n_pre} prefill + {n_ctx} contexts × {n_conc} "
            f"concurrency levels){hint}",
        )


def _check_matrix_cells(matrix: Matrix, decode: dict[tuple[int, int], Row]) -> None:
    """Every matrix cell has its All measurements row, and shows its figures."""
    for no, label, ctx, conc, text in matrix.cells:
        row = decode.get((ctx, conc))
        if row is None:
            raise PageError(
                no, f"Sustained decode matrix cell {label} × {conc} has no All measurements row"
            )
        if not _shown_agrees(text, row.cell):
            raise PageError(
                no,
                f"Sustained decode matrix cell {label} × {conc} {text!r} "
                f"disagrees with All measurements line {row.line}",
            )


def _check_prefill_lines(prefill: list[PrefillLine], pre: dict[int, Row]) -> None:
    """Every line of the Prefill block has its row, and shows its figures."""
    for pl in prefill:
        row = pre.get(pl.context)
        if row is None:
            raise PageError(
                pl.line,
                f"Prefill block lists {pl.label} but All measurements has no Prefill row for it",
            )
        if not _shown_agrees(pl.text, row.cell):
            raise PageError(
                pl.line,
                f"Prefill block {pl.label} {pl.text!r} disagrees with "
                f"All measurements line {row.line}",
            )


def _check_summary(s: Summary, contexts: list[int], conc: list[int], prefill: list[int]) -> None:
    def ends(labels: list[str], values: list[int], parse: Callable[[str], int]) -> bool:
        try:
            got = [parse(x) for x in labels]
        except numbers.NumberError:
            return False
        return bool(values) and got == ([values[0], values[-1]] if len(got) == 2 else values[:1])

    if s.n_contexts != len(contexts) or not ends(s.context_range, contexts, numbers.parse_context):
        raise PageError(
            s.line,
            f"summary line says {s.n_contexts} contexts "
            f"({'–'.join(s.context_range)}), the tables have {len(contexts)}",
        )
    if s.n_concurrency != len(conc) or not ends(s.concurrency_range, conc, numbers.parse_int):
        raise PageError(
            s.line,
            f"summary line says {s.n_concurrency} concurrency levels, the tables have {len(conc)}",
        )
    if s.prefill is not None:
        try:
            listed = [numbers.parse_context(x) for x in s.prefill]
        except numbers.NumberError as exc:
            raise PageError(s.line, f"summary line: {exc}") from None
        if listed != prefill:
            raise PageError(
                s.line,
                "summary line's prefill contexts differ from the All measurements Prefill rows",
            )
