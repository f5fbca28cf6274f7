"""The rankings as the pages show them: within a model family, their data on demand
(issue 21, item 5 and the ranking half of item 2).

Different models are not comparable on speed alone (a 4B model out-runs a 1T one
on the same GPUs), so every ranking is within one model family by default:

* a family page ranks its own runs;
* the index prints the "fastest at" summary of its SUMMARY_FAMILIES largest
  families (one block each, the family with the most runs first; every family's
  page has its own) and the latency-limit ranking of its largest family (its
  top SLO_TOP; the chooser shows the rest). The chooser opens on that family,
  offers every other one, and "All models", labelled ALL_LABEL.

The chooser's data (each decode cell's values, texts and percentiles; per point
the cell standing for each run, oppoint.pick's choice) is not inlined in the
pages: one file per family, `data/oppoint/<family slug>.js`, written through the
SiteWriter (atomic, only when changed, keyed so an unchanged family is not even
recomputed) and loaded by oppoint.js with a <script> tag (pages opened from
file:// cannot fetch()) when the reader reaches the rankings or uses them.
Every file carries the choices at every point of the site, so "All models" is
the files laid end to end. Pure but for `write_data`, the one writing edge.
"""

from __future__ import annotations

import json
from typing import Any

from rundir import contract, tails, words
from site_builder import raterank, slo
from site_builder.aggregate import CellResult
from site_builder.oppoint import (
    COST_METRIC,
    LEVEL_KEYS,
    METRICS,
    NEAREST_NOTE,
    SUMMARY_METRICS,
    Point,
    all_points,
    cell_values,
    default_point,
    gpus,
    interval,
    pick,
    priced,
    run_limits,
    slo_rank,
    summary,
    text_of,
)
from site_builder.prices import page_key
from site_builder.render import json_script
from site_builder.sitewriter import SiteWriter, digest
from site_builder.views import FamilyGroup, RunView

SUMMARY_FAMILIES = 6  # family blocks in the index's "fastest at" summary
SLO_TOP = 10  # rows of the index's static latency-limit ranking
ALL = "*"  # the chooser's value for every model at once
ALL_LABEL = "All models — different models are not comparable on speed alone"
DATA_DIR = "data/oppoint"
GLOBAL = "SPEED_MATRIX_OPPOINT"  # the files fill window[GLOBAL][family slug]


def data_file(slug: str) -> str:
    """Where a family's ranking data lives in the site."""
    return f"{DATA_DIR}/{slug}.js"


def metrics_of(runs: list[RunView]) -> list[tuple[str, str, bool]]:
    """The ranking measures: cost only when some run has a price."""
    return [*METRICS, *([COST_METRIC] if priced(runs) else [])]


def by_size(models: list[FamilyGroup]) -> list[FamilyGroup]:
    """Families with the most runs first (ties by name): the index's order."""
    return sorted(models, key=lambda m: (-len(m.runs), m.name.lower(), m.slug))


def _levels(cell: CellResult) -> tuple[dict[str, list[float | None]], dict[str, list[str]]]:
    """A cell's value at every level (tails.LEVELS) of TTFT, time between tokens and
    per-request tok/s, and the texts of the two rankings print (TTFT, per request)."""
    lv = {name: [cell.tail(key, level) for level in tails.LEVELS]
          for name, key in LEVEL_KEYS.items()}
    lt = {"ttft": [words.ttft(v) for v in lv["ttft"]],
          "per_request": [words.tok_s(v) for v in lv["per_request"]]}
    return lv, lt


def client_data(runs: list[RunView], points: list[Point] | None = None,
                metrics: list[tuple[str, str, bool]] | None = None) -> dict[str, Any]:
    """What oppoint.js needs to re-rank without re-deciding anything: per run its
    decode cells (raw values for sorting, texts for printing), and per point (every
    one of `points`, default the runs' own) the cell standing for each run: i >= 0
    the exact cell i, -(i + 2) the nearest cell i, -1 none. A cell with numbers also
    carries `lv` (its TTFT, time between tokens and per-request tok/s at every level
    of rundir.tails.LEVELS, None where too few requests), `lt` (the TTFT and
    per-request texts of those) and, with repeated windows, `ci` (each metric's 95%
    interval, None where it has none). `metrics` default: metrics_of(runs)."""
    points = all_points(runs) if points is None else points
    metrics = metrics_of(runs) if metrics is None else metrics
    keys = [key for key, _, _ in metrics]
    out_runs, cells_by_run = [], []
    for run in runs:
        price = run.price
        cells = run.agg.decode()
        cells_by_run.append(cells)
        rows = []
        for x in cells:
            v = cell_values(run, x, price)
            row = {"label": Point(x.context, x.concurrency).label,
                   "status": x.status, "status_label": words.status_label(x.status),
                   "values": [v[k] for k in keys],
                   "texts": [text_of(k)(v[k]) for k in keys]}
            if x.has_numbers:  # every level, for the percentile switch and the limits
                row["lv"], row["lt"] = _levels(x)
                if x.intervals:
                    row["ci"] = [interval(run, x, k) for k in keys]
            rows.append(row)
        out_runs.append({"slug": run.slug, "name": run.name, "title": run.title,
                         "family": run.family, "family_slug": run.family_slug,
                         "page": run.page, "price": price.note if price else "",
                         "cells": rows, **({"medians": True} if slo.medians_only(cells) else {})})
    choices = {}
    for point in points:
        row = []
        for run, cells in zip(runs, cells_by_run, strict=True):
            cell, exact = pick(run, point)
            i = next((j for j, x in enumerate(cells) if x is cell), -1)
            row.append(-1 if i < 0 else (i if exact else -(i + 2)))
        choices[point.key] = row
    return {"metrics": [{"key": k, "label": label, "higher": hi} for k, label, hi in metrics],
            "points": {p.key: p.label for p in points}, "choices": choices,
            "runs": out_runs, "missing": words.MISSING, "valid": contract.VALID,
            "levels": list(tails.LEVELS)}


def data_script(slug: str, data: dict[str, Any]) -> str:
    """A family's data file: a script that files its data under window[GLOBAL]."""
    return f"(window.{GLOBAL} = window.{GLOBAL} || {{}})[{json.dumps(slug)}] = " \
           f"{json_script(data)};\n"


def write_data(writer: SiteWriter, runs: list[RunView], models: list[FamilyGroup],
               fp: str) -> None:
    """Write every family's ranking data (publish._site_pages' hook). A file is keyed
    by the page fingerprint (code, limits), the site's points and measures (cost among
    them when any run has a price), and its runs' digests, slugs, names and prices: an
    unchanged family is neither recomputed nor rewritten; a family gone is removed by
    the writer's manifest."""
    points = all_points(runs)
    metrics = metrics_of(runs)
    shared = "|".join([fp, *(p.key for p in points), *(k for k, _, _ in metrics)])
    for m in models:
        rel = data_file(m.slug)
        key = digest("|".join([shared, m.slug, *(f"{r.agg.digest}:{r.slug}:{r.name}:"
                                                 f"{page_key(r.price)}"  # its costs
                                                 for r in m.runs)]).encode())
        if not writer.is_current(rel, key):
            writer.write(rel, data_script(m.slug, client_data(m.runs, points, metrics)), key)


def slo_context(runs: list[RunView], top: int | None = None,
                metrics: list[tuple[str, str, bool]] | None = None) -> dict[str, Any]:
    """What the "fastest under latency limits" block prints without JavaScript (the
    build's limits, ranked by per GPU; its first `top` rows when given; the columns
    `metrics`, default metrics_of(runs)) and hands slo.js / oppoint.js."""
    rs = run_limits(runs)
    by = "per_gpu" if any(gpus(r) for r in runs) else "total"
    entries = slo_rank(runs, rs.slo, by)
    rows = []
    place = 0
    for e in entries:
        place += e.cell is not None and e.values[by] is not None
        rows.append({"entry": e, "place": place if e.values[by] is not None else None,
                     "label": Point(e.cell.context, e.cell.concurrency).label if e.cell else
                     slo.none_meets(e.run.agg.cells, rs.slo),
                     "texts": {k: text_of(k)(e.values[k]) for k in e.values}})
    shown = rows if top is None else rows[:top]
    return {"limits": rs.slo, "given": rs.given, "by": by, "rows": shown, "total": len(rows),
            "levels": tails.LEVELS, "default_spec": rs.slo.spec,
            "metrics": metrics_of(runs) if metrics is None else metrics}


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def page_context(runs: list[RunView], *, index: bool,
                 models: list[FamilyGroup]) -> dict[str, Any]:
    """What templates/_partials/oppoint.html prints: the "fastest at" blocks (one per
    family shown), the chooser's options and defaults, the prices used, the
    latency-limit ranking of the first family, and where oppoint.js finds the data.
    `models`: the page's families (a family page: its own)."""
    groups = by_size(models)
    shown = groups[:SUMMARY_FAMILIES] if index else groups
    cost = priced(runs)
    blocks = [{"name": m.name, "slug": m.slug, "count": _plural(len(m.runs), "run"),
               "summary": summary(m.runs, cost)} for m in shown]
    blocks = [b for b in blocks if b["summary"]]
    first = groups[0] if groups else None
    default = default_point(first.runs) if first else None
    points = all_points(runs)
    metrics = metrics_of(runs)
    families = [{"slug": m.slug, "name": m.name, "count": _plural(len(m.runs), "run"),
                 "default_at": (p.key if (p := default_point(m.runs)) else "")}
                for m in groups] if index else []
    everyone = default_point(runs) if index else None
    return {
        "index": index,
        "blocks": blocks,
        "more_families": len(groups) - len(shown),
        "metrics": metrics,
        "summary_labels": [label for key, label, _ in metrics
                           if key in (*SUMMARY_METRICS, "cost")],
        "contexts": list(dict.fromkeys(p.context_label for p in points)),
        "levels": sorted({p.concurrency for p in points}),
        "default_at": default.key if default else "",
        "all_at": everyone.key if everyone else "",
        "default_by": "per_gpu",
        "family": first.slug if first else "",
        "family_name": first.name if first else "",
        "families": families,
        "all": ALL,
        "all_label": ALL_LABEL,
        "prices": sorted({r.price.note for r in runs if r.price is not None}),
        "nearest_note": NEAREST_NOTE,
        "data_dir": DATA_DIR,
        "slo": slo_context(first.runs if first else runs, SLO_TOP if index else None, metrics),
        # the sustained request rate under the build's limits (runs with rate cells only)
        "rate": raterank.ranking(first.runs if first else runs, run_limits(runs).slo),
    }
