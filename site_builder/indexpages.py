"""The index of all runs as static pages of PAGE_SIZE runs, plus one lean file of
every run's index row that table.js loads only when a reader sorts, filters or
searches.

Why: inlining every run made the index grow with the site (2 MB at 300 runs).
Now the first screen holds one page of rows whatever the number of runs;
`index-2.html`, … hold the others, so without JavaScript a paginated static
table still reaches every run. The rows are built once here (`table_row`), in
one form both the template and table.js draw from: the texts are formatted in
Python, so the script never re-implements the number rules.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from rundir import words
from site_builder import raterank, runrows, trafficpage
from site_builder.render import json_script
from site_builder.views import RunView

PAGE_SIZE = 50
ROWS_FILE = "data/runs-table.js"  # loaded on demand by table.js (a script: works from file://)
ROWS_GLOBAL = "SPEED_MATRIX_RUNS_TABLE"
# The filters of the index's form: (select name, label, index_record key).
FILTERS = [("model", "Model", "model"), ("gpu", "GPU", "gpu"), ("engine", "Engine", "engine"),
           ("quantization", "Quantization", "quantization")]
# The columns: (key, label, kind); a row's cells come in this order (table_row).
COLUMNS = [
    ("model", "Model", "text"),
    ("gpu", "GPU", "text"),
    ("gpus", "GPUs", "num"),
    ("engine", "Engine", "text"),
    ("version", "Version", "text"),
    ("quantization", "Quantization", "text"),
    ("measured", "Measured", "text"),
    ("single", "Single stream tok/s", "num"),
    ("peak", "Peak total tok/s", "num"),
    ("prefill", "Prefill tok/s at 8K", "num"),
]
# A cell: [sort value, text, title, extra classes, status note]; trailing empties dropped.
CELL_FIELDS = ["value", "text", "title", "cls", "note"]
ROW_FIELDS = ["page", "model", "imported", "regression", "series_page", "search",
              *(f"f_{name}" for name, _, _ in FILTERS), "cells"]


@dataclass(frozen=True)
class IndexPage:
    """One static page of the index: its number, file and rows' place in the order."""

    number: int
    count: int  # pages in all
    first: int  # 0-based index of its first row
    rows: list[dict[str, Any]]

    @property
    def rel(self) -> str:
        return page_file(self.number)


def page_file(number: int) -> str:
    """index.html for the first page, index-2.html, … for the others."""
    return "index.html" if number == 1 else f"index-{number}.html"


def default_order(runs: list[RunView]) -> list[RunView]:
    """Newest measured first (what a reader of a big site looks for); runs without a
    date last, each group in the site's own order."""
    dated = sorted((r for r in runs if r.info.measured_at), key=lambda r: r.info.measured_at,
                   reverse=True)
    return dated + [r for r in runs if not r.info.measured_at]


def _cell(value: Any, text: str, title: str = "", cls: str = "", note: str = "") -> list[Any]:
    """[sort value, text, title, classes, note]: "" stands for none; trailing ones dropped."""
    out = [value if value is not None else "", text, title, cls, note]
    while len(out) > 2 and out[-1] == "":
        out.pop()
    return out


def _badge(run: RunView) -> list[str] | str:
    """The fall badge of a series' latest run as [text, title, classes] (red for a
    regression, plain for a change not established); "" without one."""
    fall = run.regression
    return [fall.label, fall.title, fall.badge_class] if fall is not None else ""


def _traffic_title(run: RunView) -> str:
    """What a run measured besides its matrix (``also measured: prefix reuse 0–99%,
    4 turns``), the model cell's hover text; "" for a run without traffic cells."""
    what = raterank.also_measured(run, trafficpage.summary(run.agg.traffic))
    return f"also measured: {what}" if what else ""


def table_row(run: RunView) -> dict[str, Any]:
    """The run's row of the index table, as the template and table.js draw it."""
    rec = runrows.index_record(run)
    miss = words.MISSING

    def low(key: str) -> str:
        return (rec[key] or "").lower()

    single_title = (f"at {words.context_label(rec['single_stream_context'])} context"
                    if rec["single_stream_context"] else "")
    note = run.peak_note or ""
    peak_title = ""
    if rec["peak_context"]:
        peak_title = (f"at {words.context_label(rec['peak_context'])} × "
                      f"{rec['peak_concurrency']}" + (f": {note}" if note else ""))
    version = rec["engine_version"] or ""
    cells = [  # each cell's classes in full: the template and table.js add none
        _cell(run.model.lower(), run.model, _traffic_title(run), cls="name"),
        _cell(low("gpu"), rec["gpu"] or miss, cls="name"),
        _cell(rec["gpu_count"], str(rec["gpu_count"]) if rec["gpu_count"] else miss, cls="num"),
        _cell(low("engine"), rec["engine"] or miss),
        _cell(version, version or miss, version, "clip"),  # truncated: the full text on hover
        _cell(low("quantization"), rec["quantization"] or miss),
        _cell(rec["measured_at"] or "", rec["measured"] or miss, cls="nowrap"),
        _cell(rec["single_stream_tok_s"], words.tok_s(rec["single_stream_tok_s"]), single_title,
              "num"),
        _cell(rec["peak_total_tok_s"], words.tok_s(rec["peak_total_tok_s"]), peak_title,
              f"num peak cell st-{rec['peak_status']}" if note else "num peak", note),
        _cell(rec["prefill_8k_tok_s"], words.tok_s(rec["prefill_8k_tok_s"]), cls="num"),
    ]
    search = " ".join(str(v) for v in (run.title, run.run_id, rec["engine"], rec["engine_version"],
                                       rec["quantization"], rec["submitter"]) if v).lower()
    return {"page": run.page, "model": run.model, "imported": run.imported,
            "regression": _badge(run), "series_page": run.series_page if run.regression
            else "", "search": search,
            **{f"f_{name}": rec[key] or "" for name, _, key in FILTERS}, "cells": cells}


def paginate(rows: list[dict[str, Any]], size: int | None = None) -> list[IndexPage]:
    """The rows cut into pages of `size` (PAGE_SIZE; one empty page for an empty site)."""
    size = size or PAGE_SIZE
    count = max(1, -(-len(rows) // size))
    return [IndexPage(n + 1, count, n * size, rows[n * size:(n + 1) * size])
            for n in range(count)]


def page_links(current: int, count: int, around: int = 2) -> list[int | None]:
    """The page numbers a pager lists: the first, the last and `around` either side of
    the current one; None where numbers are left out (an ellipsis)."""
    keep = {1, count, *range(current - around, current + around + 1)}
    out: list[int | None] = []
    for n in range(1, count + 1):
        if n in keep:
            out.append(n)
        elif out and out[-1] is not None:
            out.append(None)
    return out


def rows_data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every row, compact: each as a list in ROW_FIELDS order (the file table.js loads)."""
    return {"fields": ROW_FIELDS, "cell_fields": CELL_FIELDS, "page_size": PAGE_SIZE,
            "rows": [[1 if r[f] is True else 0 if r[f] is False else r[f] for f in ROW_FIELDS]
                     for r in rows]}


def rows_script(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """The rows file's text and the address pages load it by (its digest in the query,
    so a browser never mixes a new page with an old cached file)."""
    text = f"window.{ROWS_GLOBAL} = {json_script(rows_data(rows))};\n"
    tag = hashlib.sha256(text.encode()).hexdigest()[:10]
    return text, f"{ROWS_FILE}?v={tag}"
