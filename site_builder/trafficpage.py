"""A run's traffic cells as its page shows them: the Prefix reuse and Conversations
tables and their charts, and the download columns (site_builder/traffic.py has
the figures).

Every chart's x is the reuse the requests report (achieved), never the reuse
asked for: a knob the server ignored must not draw a curve it did not make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rundir import contract, statuses, words
from site_builder import cellcurves
from site_builder.chartkit import Chart, Look
from site_builder.traffic import TrafficCell

TTFT_REUSE = Look("Prefix reuse achieved (%)", "TTFT (ms)", "Context × requests")
UNCACHED_REUSE = Look("Prefix reuse achieved (%)", "Uncached prefill tok/s", "Context × requests")
TTFT_TURN = Look("Turn", "TTFT (ms)", "Context × requests")


def percent(value: float | None) -> str:
    """A reuse share: ``50.5%``; ``—`` where nothing reported it."""
    return words.MISSING if value is None else f"{words.round_half_up(value, 1):.1f}%"


# The traffic statuses' entries under the methodology's Statuses (docs/methodology.md):
# their words in the traffic tables link there.
STATUS_ANCHORS = {contract.REUSE_OFF_TARGET: "reuse-off-target",
                  contract.REUSE_UNVERIFIED: "reuse-unverified"}


def status_anchor(code: str) -> str | None:
    """The id of a traffic status's entry on the methodology page (None: others)."""
    return STATUS_ANCHORS.get(code)


@dataclass
class TrafficTable:
    """One table of the page: its heading and its cells, in order."""

    heading: str
    cells: list[TrafficCell] = field(default_factory=list)


def _series(cell: TrafficCell) -> str:
    return f"{words.context_label(cell.context)} × {cell.concurrency}"


def prefix_tables(cells: list[TrafficCell]) -> list[TrafficTable]:
    """Per context (and requests at once, when a run has several), its prefix cells
    by target."""
    out: dict[tuple[int, int], TrafficTable] = {}
    for x in cells:
        if x.phase == contract.PREFIX:
            out.setdefault((x.context, x.concurrency), TrafficTable(
                f"{words.context_label(x.context)} context, {x.concurrency} at once")).cells.append(x)
    return list(out.values())


def conversation_tables(cells: list[TrafficCell]) -> list[TrafficTable]:
    """Per context and requests at once, its conversation cells by turn."""
    out: dict[tuple[int, int], TrafficTable] = {}
    for x in cells:
        if x.phase == contract.CONVERSATION:
            many = "conversations" if x.concurrency != 1 else "conversation"
            out.setdefault((x.context, x.concurrency), TrafficTable(
                f"{words.context_label(x.context)} context, {x.concurrency} {many} at once"
            )).cells.append(x)
    return list(out.values())


def summary(cells: list[TrafficCell]) -> str:
    """``prefix reuse 0–99%, 4 turns``: what a run measured besides its matrix."""
    targets = sorted({x.target for x in cells if x.target is not None})
    turns = sorted({x.turn for x in cells if x.turn is not None})
    parts = []
    if targets:
        span = f"{targets[0]}%" if len(targets) == 1 else f"{targets[0]}–{targets[-1]}%"
        parts.append(f"prefix reuse {span}")
    if turns:
        parts.append(f"{turns[-1]} turn{'s' if turns[-1] != 1 else ''}")
    return ", ".join(parts)


# The explorer's note on a site with traffic cells: its points are decode matrix cells only.
EXPLORE_NOTE = ("Prefix-reuse and conversation cells are not drawn here: each is measured "
                "at a reuse or turn rather than on the context × requests matrix these charts "
                "compare. They are on their runs' pages (Prefix reuse, Conversations), in their "
                "cells.csv and cells.json, and side by side on the compare page.")


def _chart(chart_id: str, title: str, caption: str, look: Look, cells: list[TrafficCell],
           x_of: Any, y_of: Any, x_text: Any, y_text: Any) -> Chart | None:
    rows = []
    for c in cells:
        x, y = x_of(c), y_of(c)
        if x is None or y is None or not statuses.carries_numbers(c.status):
            continue
        rows.append({"series": _series(c), "x": x, "y": y, "X": x_text(c), "Y": y_text(c),
                     "Status": words.status_label(c.status)})
    if not rows:
        return None
    xs = [r["x"] for r in rows]
    lo, hi = min(0.0, min(xs)), max(xs) if max(xs) > 0 else 1.0
    # whole numbers on x: turns and percents
    return cellcurves.chart(chart_id, title, caption, look, rows, _ticks(lo, hi), (lo, hi),
                            whole_x=True, knee=False)


def _ticks(lo: float, hi: float) -> list[float]:
    step = max(1.0, (hi - lo) / 5)
    for nice in (1, 2, 5, 10, 20, 25, 50, 100):
        if nice >= step:
            step = nice
            break
    out, v = [], lo
    while v <= hi + 1e-9:
        out.append(v)
        v += step
    return out


def page_charts(cells: list[TrafficCell]) -> list[Chart | None]:
    """The run page's traffic charts (absent ones None): TTFT and uncached prefill
    tok/s against the reuse achieved, and TTFT against the conversation's turn."""
    prefix = [c for c in cells if c.phase == contract.PREFIX]
    conv = [c for c in cells if c.phase == contract.CONVERSATION]
    return [
        _chart("chart-reuse-ttft", "TTFT by prefix reuse", "Median time to first token against "
               "the share of prompt tokens the requests report cached", TTFT_REUSE, prefix,
               lambda c: c.achieved, lambda c: c.ttft_ms, lambda c: percent(c.achieved),
               lambda c: words.ttft(c.ttft_ms)),
        _chart("chart-reuse-uncached", "Uncached prefill by prefix reuse", "Median uncached "
               "prompt tokens per second of TTFT against the share the requests report cached",
               UNCACHED_REUSE, prefix, lambda c: c.achieved, lambda c: c.uncached_tok_s,
               lambda c: percent(c.achieved), lambda c: words.tok_s(c.uncached_tok_s)),
        _chart("chart-turn-ttft", "TTFT by conversation turn", "Median time to first token of "
               "each listed turn (the whole history resent)", TTFT_TURN, conv,
               lambda c: c.turn, lambda c: c.ttft_ms, lambda c: str(c.turn),
               lambda c: words.ttft(c.ttft_ms)),
    ]


# cells.csv / cells.json's traffic columns, after every other (runs with traffic cells only).
DOWNLOAD_COLUMNS = ["prefix_reuse_target", "turn", "prefix_reuse_achieved", "prefix_reuse_server"]


def download_extra(cell: TrafficCell | None) -> dict[str, Any]:
    """The traffic columns of a row (None on a matrix cell's row)."""
    if cell is None:
        return dict.fromkeys(DOWNLOAD_COLUMNS)
    return {"prefix_reuse_target": cell.target, "turn": cell.turn,
            "prefix_reuse_achieved": cell.achieved, "prefix_reuse_server": cell.server}


# data.js's traffic part (runs with traffic cells only): the compare page's
# A/B tables of prefix-reuse and conversation cells (static/compare_traffic.js).
COMPARE_FIELDS = ["phase", "context", "context_label", "concurrency", "target", "turn", "status",
                  "status_label", "reason", "achieved", "achieved_text", "server", "server_text",
                  "ttft_ms", "ttft_ms_text", "uncached_tok_s", "uncached_tok_s_text"]


def compare_data(cells: list[TrafficCell]) -> dict[str, Any]:
    """Each traffic cell's key, status and figures with their texts as the run page
    prints them, so the page's script formats nothing."""
    rows = [[x.phase, x.context, words.context_label(x.context), x.concurrency, x.target, x.turn,
             x.status, words.status_label(x.status), x.reason, x.achieved, percent(x.achieved),
             x.server, percent(x.server), x.ttft_ms, words.ttft(x.ttft_ms), x.uncached_tok_s,
             words.tok_s(x.uncached_tok_s, whole=True)] for x in cells]
    return {"fields": COMPARE_FIELDS, "cells": rows,
            "anchors": dict(STATUS_ANCHORS)}
