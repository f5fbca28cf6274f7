"""The sustained request rate under the SLO: each context's knee as a figure runs
are ranked by (the family page and the index), named beside a run on its family
page, and exported per run as the rate curve (rate_curve.csv / .json).

A run's **sustained rate** at a context is the highest knee among that context's
curves (site_builder/rate.py: per context, cap and reuse level), the curve named
beside it; None where no curve of the context sustains any rate. It is judged
under the build's limits, as the run page's Request rate tables are. Runs without
rate cells have no sustained rate and are absent from all of it, so a site
without rate cells builds as before. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rundir import words
from site_builder import slo as slo_mod
from site_builder.rate import KNEE_SHARE, Judged, RateCell
from site_builder.ratepage import STATUS_ANCHORS, achieved, rate, tables
from site_builder.views import RunView

NONE_TEXT = "no offered rate sustained"


def curve_label(cell: RateCell) -> str:
    """The curve a cell is on, in words: ``no cap``, ``at most 8 in flight, 50% reuse``."""
    out = f"at most {cell.concurrency} in flight" if cell.concurrency else "no cap"
    return out + (f", {cell.reuse_target}% prefix reuse" if cell.reuse_target is not None else "")


def sustained(cells: list[RateCell], limits: slo_mod.Slo) -> dict[int, Judged | None]:
    """Per context with rate cells, the highest knee of its curves (None: none sustained)."""
    out: dict[int, Judged | None] = {}
    for t in tables(cells, limits):
        ctx = t.rows[0].cell.context
        best = out.get(ctx)
        if t.knee is not None and (best is None or t.knee.cell.rate_target > best.cell.rate_target):
            out[ctx] = t.knee
        else:
            out.setdefault(ctx, None)
    return out


def summary(cells: list[RateCell], limits: slo_mod.Slo) -> str:
    """``request rate 1–8/s, sustained 2/s at 1K``: what a run measured at rates and
    the knee per context (``none sustained at 4K``); "" for a run without rate cells."""
    if not cells:
        return ""
    offered = sorted({c.rate_target for c in cells})
    span = rate(offered[0]) if len(offered) == 1 else f"{rate(offered[0])[:-2]}–{rate(offered[-1])}"
    knees = [f"{rate(j.cell.rate_target) if j else 'none'} at {words.context_label(ctx)}"
             for ctx, j in sorted(sustained(cells, limits).items())]
    return f"request rate {span}, sustained {', '.join(knees)}"


def also_measured(run: RunView, traffic: str) -> str:
    """What a run measured besides its matrix: `traffic` (trafficpage.summary) and its
    rate summary under the build's limits, joined; "" for a run with neither."""
    limits = run.slo.slo if isinstance(run.slo, slo_mod.RunSlo) else slo_mod.DEFAULT
    return "; ".join(filter(None, (traffic, summary(run.agg.rate, limits))))


# The explorer's note on a site with rate cells: they are not matrix cells either.
EXPLORE_NOTE = ("Request-rate cells are not drawn here: each is measured at an offered "
                "rate, not at a number of simultaneous requests. They are on their runs' pages "
                "(Request rate, with each context's knee), in their cells.csv, cells.json and "
                "rate_curve.csv, and the family pages rank runs by the rate they sustain under "
                "the limits.")


@dataclass(frozen=True)
class Entry:
    """One run's row of a context's ranking: its knee (None: none sustained)."""

    run: RunView
    knee: Judged | None
    place: int | None
    highest: float  # the highest rate it was offered at the context

    @property
    def texts(self) -> dict[str, str]:
        j = self.knee
        c = j.cell if j else None
        return {"sustained": rate(c.rate_target) if c else NONE_TEXT,
                "curve": curve_label(c) if c else words.MISSING,
                "completed": rate(c.completed_rps) if c else words.MISSING,
                "ttft": words.ttft(c.tail("ttft_ms", "p90")) if c else words.MISSING,
                "highest": rate(self.highest)}


def ranking(runs: list[RunView], limits: slo_mod.Slo) -> list[dict[str, Any]]:
    """Per context some run measured rate cells at: its runs by sustained rate, the
    highest first (equal rates share a place; otherwise the runs' own order), those
    sustaining none after, unplaced. Empty when no run has rate cells."""
    by_ctx: dict[int, list[tuple[RunView, Judged | None, float]]] = {}
    for run in runs:
        if not run.agg.rate:
            continue
        highest: dict[int, float] = {}
        for c in run.agg.rate:
            highest[c.context] = max(highest.get(c.context, 0.0), c.rate_target)
        for ctx, j in sustained(run.agg.rate, limits).items():
            by_ctx.setdefault(ctx, []).append((run, j, highest[ctx]))
    out = []
    for ctx in sorted(by_ctx):
        group = by_ctx[ctx]
        knees = [j.cell.rate_target for _, j, _ in group if j is not None]
        entries = [Entry(run, j, None if j is None else 1 + sum(k > j.cell.rate_target for k in knees), hi)
                   for run, j, hi in group]
        entries.sort(key=lambda e: (e.knee is None, -(e.knee.cell.rate_target if e.knee else 0.0)))
        out.append({"context": words.context_label(ctx), "entries": entries})
    return out


# rate_curve.csv / rate_curve.json: one point per rate cell, by context, cap, reuse, rate.
CURVE_COLUMNS = ["context", "context_label", "concurrency", "prefix_reuse_target", "arrivals",
                 "rate_target", "rate_achieved", "completed_rps", "ttft_ms_p50", "ttft_ms_p90",
                 "ttft_ms_p99", "status", "slo_meets", "knee"]


def curve_points(cells: list[RateCell], limits: slo_mod.Slo) -> list[dict[str, Any]]:
    """Every rate cell as a point of its curve (raw numbers); `knee` marks each curve's
    knee under `limits`, `slo_meets` whether the cell meets them."""
    out = []
    for t in tables(cells, limits):
        for j in t.rows:
            c = j.cell
            out.append({"context": c.context, "context_label": words.context_label(c.context),
                        "concurrency": c.concurrency, "prefix_reuse_target": c.reuse_target,
                        "arrivals": c.arrivals, "rate_target": c.rate_target,
                        "rate_achieved": c.rate_achieved, "completed_rps": c.completed_rps,
                        "ttft_ms_p50": c.tail("ttft_ms", "p50"), "ttft_ms_p90": c.tail("ttft_ms", "p90"),
                        "ttft_ms_p99": c.tail("ttft_ms", "p99"), "status": c.status,
                        "slo_meets": j.verdict.meets, "knee": j is t.knee})
    return out


def curve_record(run: RunView, limits: slo_mod.Slo) -> dict[str, Any]:
    """rate_curve.json: the run, the limits the knee was judged under, its points."""
    return {"run_id": run.run_id, "slug": run.slug, "title": run.title, "slo": limits.spec,
            "knee_share": KNEE_SHARE, "points": curve_points(run.agg.rate, limits)}


# The compare page's rate cells (runs/<slug>/data.js "rate"): key, status, figures and texts.
COMPARE_FIELDS = ["context", "context_label", "concurrency", "reuse", "rate_target", "rate_text",
                  "heading", "status", "status_label", "reason", "achieved", "achieved_text",
                  "ttft_p90", "ttft_p90_text", "knee"]


def compare_data(cells: list[RateCell], limits: slo_mod.Slo) -> dict[str, Any]:
    """Each rate cell's key, status and figures with their texts as the run page prints
    them (the knee under `limits`), so the compare page's script formats nothing."""
    rows = []
    for t in tables(cells, limits):
        for j in t.rows:
            c = j.cell
            p90 = c.tail("ttft_ms", "p90")
            rows.append([c.context, words.context_label(c.context), c.concurrency, c.reuse_target,
                         c.rate_target, rate(c.rate_target), t.heading, c.status,
                         words.status_label(c.status), c.reason, c.rate_achieved, achieved(c),
                         p90, words.ttft(p90), j is t.knee])
    return {"fields": COMPARE_FIELDS, "cells": rows, "anchors": dict(STATUS_ANCHORS)}
