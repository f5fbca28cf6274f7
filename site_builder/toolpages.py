"""Comparison pages for one server measured by several tools (issue 36, item 3).

"Same server" is the same setup (site_builder/setups.py: model, variant, GPU
and count, engine) at the same load point (requests at once, or offered
rate). Not the context: a tool's configured input length is in its own
tokenizer's count without the chat template, ours in the server's tokens, so
the two never match; each column shows its input length instead (the cell's
context and its requests' median prompt tokens) and the page says when they
differ by more than a tenth. Where one run has several contexts at that
load, the column is the one nearest the other tools' inputs.
A setup with such a load point measured by two tools or more
(ours counts as one, "speed-matrix") gets `tools/<slug>.html`, one section per
shared load point; its runs' pages link to it and the compare page lists it.
The figures come from site_builder/toolcompare.py; this module reads the runs'
rows (the one I/O here) and shapes the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rundir import contract, io, slugs
from site_builder import formats, toolcompare, tooldefs
from site_builder.setups import order_runs, setup_key
from site_builder.views import RunView

FOLDER = "tools"
LABELS = {"ttft_ms": "TTFT", "itl_ms": "ITL", "tpot_ms": "TPOT", "e2e_ms": "E2E",
          "per_request_tok_s": "Per request tok/s"}
INPUT_SPREAD = 0.1  # inputs further apart than this share of the smaller are called out
TOTAL_LABELS = {"total_tok_s": "Total tok/s", "completed": "Completed requests",
                "output_tokens": "Output tokens", "duration_s": "Span (s)",
                "request_rate": "Request rate (req/s)"}


def tool_of(run: RunView) -> str | None:
    """The tool that measured a run: ours for a measured run, the imported tool's name,
    None for an import without one (a published page: no per-request rows)."""
    if not run.imported:
        return toolcompare.OURS
    imp = run.info.imported
    return imp.tool if imp is not None and imp.tool else None


@dataclass
class ToolGroup:
    """A setup measured by two tools or more: its runs, in the setup's order."""

    slug: str
    title: str
    runs: list[RunView]

    @property
    def page(self) -> str:
        return f"{FOLDER}/{self.slug}.html"

    @property
    def tools(self) -> list[str]:
        return sorted({t for r in self.runs if (t := tool_of(r))})


def groups(views: list[RunView]) -> list[ToolGroup]:
    """The setups whose runs come from two tools or more (whether they share a load
    point is known only from their rows: a page says so where they share none)."""
    by_setup: dict[tuple, list[RunView]] = {}
    for r in views:
        if tool_of(r):
            by_setup.setdefault(setup_key(r), []).append(r)
    found = []
    for key in sorted(by_setup):
        runs = order_runs(by_setup[key])
        if len({tool_of(r) for r in runs}) < 2:
            continue
        first = runs[0]
        title = f"{first.model} on {first.hardware} · {first.info.engine.name or 'engine'}"
        found.append(ToolGroup("", title, runs))
    names = slugs.unique_slugs([g.title for g in found]) if found else []
    for g, s in zip(found, names, strict=True):
        g.slug = s
    return found


def attach(views: list[RunView], found: list[ToolGroup]) -> None:
    """Give each member run the link to its comparison page (RunView.tool_compare)."""
    for r in views:
        r.tool_compare = ""
    for g in found:
        for r in g.runs:
            r.tool_compare = g.page


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return formats.MISSING
    if metric in ("completed", "output_tokens"):
        return formats.count(int(round(value)))
    return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def _level_label(phase: str, level: float) -> str:
    return f"{level:g} req/s offered" if phase == contract.RATE else f"{level:g} requests at once"


def input_length(p: toolcompare.LoadPoint) -> float:
    """A load point's input: its requests' median prompt tokens, else its cell's context."""
    return p.prompt_median if p.prompt_median is not None else float(p.context)


def _input_label(p: toolcompare.LoadPoint) -> str:
    median = formats.MISSING if p.prompt_median is None else formats.count(int(round(p.prompt_median)))
    return f"{formats.count(p.context)} · {median}"


def inputs_differ(points: list[toolcompare.LoadPoint]) -> bool:
    """Whether the inputs differ by more than INPUT_SPREAD of the smaller."""
    sizes = [input_length(p) for p in points]
    return min(sizes) > 0 and max(sizes) > min(sizes) * (1 + INPUT_SPREAD)


def _published(run: RunView) -> dict[str, float]:
    imp = run.info.imported
    return {p.name: p.value for p in (imp.published or [])} if imp else {}


def section(key: tuple[str, float], members: list[tuple[RunView, toolcompare.LoadPoint]]
            ) -> dict[str, Any]:
    """One shared load point: the one-definition table, and each tool's published table."""
    phase, level = key
    columns = [{"run": r, "tool": tool_of(r), "tier": _tier(r), "window": p.has_window} for r, p in members]
    rows = []
    for metric, label in toolcompare.METRICS:
        for stat in toolcompare.STATS:
            cells = []
            for r, p in members:
                whole = _common(p.whole, metric, stat, r)
                win = _common(p.window, metric, stat, r) if p.has_window else None
                cells += [_fmt(whole, metric), _fmt(win, metric)]
            rows.append({"label": f"{label} {stat}", "cells": cells})
    tot = []
    for name, label in (("total_tok_s", "Total tok/s"), ("output_tokens", "Output tokens"),
                        ("completed", "Completed requests")):
        cells = []
        for _, p in members:
            win = None if p.window_totals is None else getattr(p.window_totals, name)
            cells += [_fmt(getattr(p.whole_totals, name), name), _fmt(win, name)]
        tot.append({"label": label, "cells": cells})
    published = [_published_table(r, p) for r, p in members if r.imported]
    anchor = f"{phase}-{formats.plain_number(level)}".replace(".", "_")
    return {"title": _level_label(phase, level), "anchor": anchor, "columns": columns,
            "rows": rows, "totals": tot, "published": published,
            "inputs": [_input_label(p) for _, p in members],
            "inputs_differ": inputs_differ([p for _, p in members]),
            "no_clock": [tool_of(r) for r, p in members if not p.clock]}


def _tier(r: RunView) -> str:
    if not r.imported:
        return "chunk (ours)"
    return (r.info.imported.tier if r.info.imported else None) or formats.MISSING


def _common(reqs: list[toolcompare.Request], metric: str, stat: str, run: RunView) -> float | None:
    if metric == "itl_ms" and _tier(run) == contract.IMPORT_TIER_REQUEST:
        return None  # no gap is kept at that tier
    return toolcompare.rank(toolcompare.samples(reqs, metric), metric, stat)


def _published_table(run: RunView, p: toolcompare.LoadPoint) -> dict[str, Any]:
    """The tool's own figures: its name, its number, its definition recomputed from its
    rows, ours (one definition, whole run and window), and why they differ."""
    tool = tool_of(run) or ""
    pub = _published(run)
    rows = []
    request_tier = _tier(run) == contract.IMPORT_TIER_REQUEST
    for metric, _ in toolcompare.METRICS:
        for stat in ("mean", *toolcompare.STATS):
            name = f"{metric}.{stat}"
            if name not in pub:
                continue
            rule = toolcompare.tool_rule(tool, metric)
            own = toolcompare.tool_rank(toolcompare.tool_samples(p.whole, tool, metric, p.counting), stat,
                                        rule.ranking if rule else tooldefs.LINEAR)
            common = None if (request_tier and metric == "itl_ms") else \
                toolcompare.rank(toolcompare.samples(p.whole, metric), metric, stat, minimum=False)
            window = None if (request_tier and metric == "itl_ms") or not p.has_window else \
                toolcompare.rank(toolcompare.samples(p.window, metric), metric, stat, minimum=False)
            rule_label = tooldefs.RULE_LABELS.get(rule.rule, "") if rule and rule.rule else ""
            label = LABELS[metric] + (f" ({rule_label})" if rule_label else "") + f" {stat}"
            queued_s = toolcompare.queued_ttft(p.whole) if metric == "ttft_ms" else None
            queued = None if queued_s is None else toolcompare.rank(queued_s, metric, stat, minimum=False)
            rows.append({"name": label, "published": _fmt(pub[name], metric), "own": _fmt(own, metric),
                         "common": _fmt(common, metric), "window": _fmt(window, metric),
                         "why": toolcompare.why(metric, tool, common, own, pub[name], window, queued,
                                                p.counting)})
    w, win = p.whole_totals, p.window_totals
    if "total_tok_s" in pub:
        span = pub.get("duration_s")  # its own span: its rows' tokens over it are its definition
        own = w.output_tokens / span if span else w.total_tok_s
        if not tooldefs.TOTAL_DEFINITIONS.get(tool, (True, ""))[0]:
            own = None  # made over a span its rows do not give
        rows.append({"name": TOTAL_LABELS["total_tok_s"], "published": _fmt(pub["total_tok_s"], "x"),
                     "own": _fmt(own, "x"), "common": _fmt(w.total_tok_s, "x"),
                     "window": _fmt(win.total_tok_s if win else None, "x"),
                     "why": toolcompare.total_why(pub["total_tok_s"], w.output_tokens, w.span_s, span,
                                                  win.total_tok_s if win else None, tool)})
    for name, counted in (("completed", w.completed), ("output_tokens", w.output_tokens)):
        if name in pub:
            rows.append({"name": TOTAL_LABELS[name], "published": _fmt(pub[name], name),
                         "own": _fmt(counted, name), "common": _fmt(counted, name),
                         "window": _fmt(getattr(win, name) if win else None, name),
                         "why": toolcompare.count_why(pub[name], counted)})
    imp = run.info.imported
    defs = [(d.name, d.text) for d in (imp.definitions or [])] if imp else []
    return {"run": run, "tool": tool, "version": (imp.tool_version if imp else None) or "",
            "rows": rows, "definitions": defs}


def sections(group: ToolGroup, read: Any = io.read_run) -> list[dict[str, Any]]:
    """The group's shared load points (two tools or more), each a section (reads each run's rows)."""
    points: dict[tuple[str, float], list[tuple[RunView, toolcompare.LoadPoint]]] = {}
    for r in group.runs:
        data = read(Path(r.source_dir))
        tier = data.info.imported.tier if data.info.imported else None
        for p in toolcompare.load_points(data.cells, data.requests, tier, measured=not r.imported):
            points.setdefault((p.phase, p.level), []).append((r, p))
    return [section(k, _one_per_run(m)) for k, m in sorted(points.items())
            if len({tool_of(r) for r, _ in m}) >= 2]


def _one_per_run(members: list[tuple[RunView, toolcompare.LoadPoint]]
                 ) -> list[tuple[RunView, toolcompare.LoadPoint]]:
    """One column per run: of a run's several contexts at this load, the one whose input is
    nearest the median input of the other runs' points (the smallest context on a tie)."""
    out, runs = [], []
    for r, _ in members:
        if not any(r is seen for seen in runs):
            runs.append(r)
    for run in runs:
        mine = sorted((p for r, p in members if r is run), key=lambda p: p.context)
        others = [input_length(p) for r, p in members if r is not run]
        target = float(np.median(others)) if others else input_length(mine[0])
        out.append((run, min(mine, key=lambda p: abs(input_length(p) - target))))
    return out
