"""The explorer's data (explore.html): every run's decode points, the Pareto
frontier of each view, and the view a reader lands on.

The explorer plots per-request tok/s (what one user gets) against total tok/s
or total tok/s per GPU (what the hardware delivers), one curve per run through
its concurrency levels, for a family (or all runs) at one context. The
frontier depends on the scope, the context and the y axis, all of which the
reader picks in the page, so the build computes it here for every choice
(a few hundred small lists) and the page's script only looks it up: the
rule that decides "best" lives in Python, once, and is tested here.

Under latency limits (site_builder/slo.py) the reader may keep only the cells
meeting them: each point carries its TTFT, time between tokens and per-request
tok/s at every level of rundir.tails.LEVELS (`levels`, with the texts the
tooltips print), so the page marks the cells meeting the limits the reader sets
and draws the frontier through those, with `pareto_front`'s rule (its twin in
templates/static/rules.js, since the limits and the percentile are chosen in the
page; tests/site/test_page_rules.py runs both; `slo_frontier` here is its reference).
The default view draws what it always did.

When the build has a price table (build-site --prices), each point also carries
its $ per 1M output tokens (site_builder/prices.py's formula and $ format) and
the data the prices used; without one, no point has a cost field at all.

Pure: RunViews in, plain dicts and lists out (written as data/explore.js, and split
by site_builder/exploredata.py into an index and a file per family and context, what
the explorer loads). The points are grouped by family, then context, so that each
such file is one slice of them and the indices here (the frontiers') hold for both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rundir import contract, tails, words
from site_builder import prices, slo
from site_builder.views import RunView

ALL = "*"  # the scope of every run (no slug holds "*"), beside each family's slug
Y_MODES = ("gpu", "total")  # total tok/s per GPU, total tok/s
# Columns of each point in the data file: raw values first, then the texts the
# tooltips print (formatted here, as the tables print them).
POINT_FIELDS = ["run", "context", "concurrency", "status", "total", "per_gpu", "per_request",
                "ttft", "Context", "Requests at once", "Status", "Total tok/s", "Per GPU tok/s",
                "Per request tok/s", "TTFT", "levels"]
# Appended to each point only when the build has a price table: raw $ and its text.
COST_FIELDS = ["cost", "Cost per 1M output tokens"]
NO_PRICE = "no price for this GPU in the price table"


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (higher is better
    on both), ordered by x. A point is beaten when another is at least as good on
    both axes and better on one; equal points are all kept."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front: list[int] = []
    best_y = -math.inf
    for i in order:
        y = points[i][1]
        if y > best_y or (y == best_y and front and points[front[-1]] == points[i]):
            front.append(i)
            best_y = y
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def per_gpu(total: float | None, gpu_count: int | None) -> float | None:
    """Total tok/s divided over the run's GPUs; None without a GPU count."""
    if total is None or not gpu_count or gpu_count < 1:
        return None
    return total / gpu_count


def priced(views: Sequence[RunView]) -> bool:
    """True when some run has a price (build-site --prices): only then is there a cost."""
    return any(run.price is not None for run in views)


def point_cost(run: RunView, gpus: int | None, total_tok_s: float | None,
               ) -> tuple[float | None, str]:
    """A point's $ per 1M output tokens and its text (prices.py's formula and format);
    a run whose GPU the table does not price says so rather than guessing."""
    if run.price is None:
        return None, NO_PRICE
    cost = prices.cost_per_million(run.price.usd_per_gpu_hour, gpus, total_tok_s)
    return cost, prices.dollars(cost)


def _point(index: int, run: RunView, x: Any, with_cost: bool) -> list[Any]:
    gpus = run.info.hardware.gpu_count if run.info.hardware.gpu_name else None
    by_gpu = per_gpu(x.total_tok_s, gpus)
    row = [index, x.context, x.concurrency, x.status, x.total_tok_s, by_gpu,
           x.per_request_tok_s, x.ttft_ms, words.context_label(x.context), str(x.concurrency),
           words.status_label(x.status), words.tok_s(x.total_tok_s), words.tok_s(by_gpu),
           words.tok_s(x.per_request_tok_s), words.ttft(x.ttft_ms), point_levels(x)]
    return [*row, *point_cost(run, gpus, x.total_tok_s)] if with_cost else row


# Each point metric's (name, key, [column of each level, None for the median]): what
# CellResult.tail reads, looked up once (a site has ~10 points a run).
_LEVEL_COLUMNS = [(name, key, [None if level == tails.DEFAULT_LEVEL
                               else tails.BY_KEY[key].column(level) for level in tails.LEVELS])
                  for name, key in (("ttft", "ttft_ms"), ("tbt", "tbt_ms"),
                                    ("per_request", "per_request_tok_s"))]


def point_levels(x: Any) -> dict[str, Any]:
    """A point's figures at every level (None: too few requests) and the texts of the
    two the explorer draws, TTFT and per-request tok/s (x.tail(key, level) of each)."""
    lv = {name: [getattr(x, key) if col is None else x.tails.get(col) for col in cols]
          for name, key, cols in _LEVEL_COLUMNS}
    return {**lv, "texts": {"ttft": [words.ttft(v) for v in lv["ttft"]],
                            "per_request": [words.tok_s(v) for v in lv["per_request"]]}}


def meets(point: list[Any], limits: slo.Slo) -> bool:
    """slo.judge's rule on a point's levels (slo.levels_meet)."""
    return slo.levels_meet(point[POINT_FIELDS.index("levels")], limits)


def slo_frontier(data: dict[str, Any], scope: str, context: int, mode: str,
                 limits: slo.Slo, level: str = tails.DEFAULT_LEVEL) -> list[int]:
    """The frontier of one view over the Valid points meeting the limits, per-request
    tok/s taken at `level`: what explore.js draws with "under the limits" ticked."""
    fields = {name: i for i, name in enumerate(POINT_FIELDS)}
    y_key = fields["per_gpu" if mode == "gpu" else "total"]
    scopes = {f["slug"]: f["runs"] for f in data["families"]}
    members = set(scopes.get(scope, range(len(data["runs"]))))
    li = tails.LEVELS.index(level)
    have = [i for i, p in enumerate(data["points"])
            if p[0] in members and p[1] == context and p[fields["status"]] == contract.VALID
            and p[y_key] is not None and meets(p, limits)
            and p[fields["levels"]]["per_request"][li] is not None]
    xy = [(data["points"][i][fields["levels"]]["per_request"][li], data["points"][i][y_key])
          for i in have]
    return [have[k] for k in pareto_front(xy)]


def _plotted(x: Any) -> bool:
    """A decode cell with the numbers the explorer's charts draw."""
    return bool(x.has_numbers and x.total_tok_s is not None and x.per_request_tok_s is not None)


def _frontiers(points: list[list[Any]], scopes: dict[str, list[int]],
               contexts: dict[str, list[int]]) -> dict[str, list[int]]:
    """`scope|context|y` -> the frontier's point indices, over Valid points only
    (a queued point's per-request speed leaves out the time its requests waited)."""
    fields = {name: i for i, name in enumerate(POINT_FIELDS)}
    out: dict[str, list[int]] = {}
    for scope, runs in scopes.items():
        members = set(runs)
        for ctx in contexts[scope]:
            pick = [i for i, p in enumerate(points) if p[0] in members and p[1] == ctx
                    and p[fields["status"]] == contract.VALID]
            for mode in Y_MODES:
                y_key = fields["per_gpu" if mode == "gpu" else "total"]
                have = [i for i in pick if points[i][y_key] is not None]
                xy = [(points[i][fields["per_request"]], points[i][y_key]) for i in have]
                out[f"{scope}|{ctx}|{mode}"] = [have[k] for k in pareto_front(xy)]
    return out


def best_context(members: Sequence[int], points: list[list[Any]]) -> int | None:
    """The context a view of these runs opens at: the one most of them have numbers
    for, preferring one where each has a curve (three points or more), then the
    largest."""
    per_run: dict[int, dict[int, int]] = {}
    wanted = set(members)
    for p in points:
        if p[0] in wanted:
            counts = per_run.setdefault(p[1], {})
            counts[p[0]] = counts.get(p[0], 0) + 1
    return max(per_run, key=lambda ctx: (len(per_run[ctx]), min(3, *per_run[ctx].values()), ctx),
               default=None)


def default_view(runs: list[dict[str, Any]], families: list[dict[str, Any]],
                 points: list[list[Any]]) -> dict[str, Any]:
    """The view a reader lands on: the family with the most runs (all runs when
    none has two) at its best context, per GPU when every one of its runs has a
    GPU count."""
    best = min(families, key=lambda f: (-len(f["runs"]), f["name"].lower()), default=None)
    scope, members = (best["slug"], best["runs"]) if best and len(best["runs"]) > 1 else (
        ALL, list(range(len(runs))))
    y = "gpu" if all(runs[i]["gpus"] for i in members) else "total"
    return {"family": scope, "context": best_context(members, points), "y": y,
            "view": "tradeoff", "logx": False, "logy": False}


# The explorer's run filters beside the family: (key in the address and in each
# run's record, the control's label). The date range is `from`/`to` on `date`.
FILTERS = [("gpu", "GPU"), ("engine", "Engine"), ("quantization", "Quantization")]


def filter_options(runs: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """(key, label, values) of each filter with the values some run has, sorted."""
    return [(key, label, sorted({r[key] for r in runs if r[key]}, key=str.lower))
            for key, label in FILTERS]


def explore_data(views: list[RunView]) -> dict[str, Any]:
    """Everything explore.html draws: runs, families, points, contexts per scope,
    the frontier of every view and the default view; with a price table, each point's
    cost and the prices used (`prices`: their notes). Charts are added by the caller."""
    with_cost = priced(views)
    runs: list[dict[str, Any]] = []
    points: list[list[Any]] = []
    families: dict[str, dict[str, Any]] = {}
    for i, run in enumerate(views):
        h = run.info.hardware
        e, at = run.info.engine, run.info.measured_at
        runs.append({"slug": run.slug, "name": run.name, "title": run.title,
                     "family": run.family, "family_slug": run.family_slug,
                     "variant": run.variant, "page": run.page,
                     "gpus": h.gpu_count if h.gpu_name and h.gpu_count else None,
                     # what the explorer's filters match (FILTERS)
                     "gpu": h.gpu_name or "", "engine": e.name or "",
                     "quantization": e.quantization or "",
                     "date": (at or "")[:10]})  # ISO 8601: YYYY-MM-DD first
        fam = families.setdefault(run.family_slug, {"slug": run.family_slug, "name": run.family,
                                                    "runs": []})
        fam["runs"].append(i)
        points += [_point(i, run, x, with_cost) for x in sorted(run.agg.decode(),
                                                     key=lambda x: (x.context, x.concurrency))
                   if _plotted(x)]
    fams = sorted(families.values(), key=lambda f: f["name"].lower())
    # Grouped by family, then context (stable: each run's points stay in its order), so
    # each (family, context) is one slice, loaded on its own (site_builder/exploredata.py).
    rank = {i: k for k, f in enumerate(fams) for i in f["runs"]}
    points.sort(key=lambda p: (rank[p[0]], p[1]))
    scopes = {ALL: list(range(len(runs))), **{f["slug"]: f["runs"] for f in fams}}
    contexts = {s: sorted({p[1] for p in points if p[0] in chosen})
                for s, members in scopes.items() if (chosen := set(members)) is not None}
    return {
        "fields": POINT_FIELDS + (COST_FIELDS if with_cost else []),
        "prices": sorted({run.price.note for run in views if run.price is not None}),
        "runs": runs,
        "families": fams,
        "points": points,
        "contexts": contexts,
        "context_labels": {str(ctx): words.context_label(ctx) for ctx in contexts[ALL]},
        "best_context": {s: best_context(members, points) for s, members in scopes.items()},
        "frontiers": _frontiers(points, scopes, contexts),
        "default": default_view(runs, fams, points),
        "levels": list(tails.LEVELS),
        "valid": contract.VALID,
        "slo": _limits(views).spec,
    }


def _limits(views: Sequence[Any]) -> slo.Slo:
    """The build's limits (publish puts them on every run), else the site default."""
    return next((v.slo.slo for v in views if isinstance(getattr(v, "slo", None), slo.RunSlo)),
                slo.DEFAULT)


def view_series(data: dict[str, Any], scope: str, context: int, mode: str,
                ) -> tuple[list[tuple[str, list[tuple[float, float, bool]]]],
                           list[tuple[float, float]]]:
    """One view's curves ((run name, [(per-request, y, queued)] by concurrency)),
    best first by their highest y (the live chart's ranking), and its frontier, for
    the no-JS picture of the default view."""
    fields = {name: i for i, name in enumerate(POINT_FIELDS)}
    y_key = fields["per_gpu" if mode == "gpu" else "total"]
    scopes = {f["slug"]: f["runs"] for f in data["families"]}
    members = set(scopes.get(scope, range(len(data["runs"]))))
    by_run: dict[int, list[tuple[Any, Any, bool]]] = {}  # one pass over the points
    for p in data["points"]:
        if p[1] == context and p[y_key] is not None:
            by_run.setdefault(p[0], []).append(
                (p[fields["per_request"]], p[y_key], p[fields["status"]] == contract.REQUESTS_QUEUED))
    series = []
    for i, run in enumerate(data["runs"]):
        pts = by_run.get(i)
        if i in members and pts:
            series.append((run["name"], pts))
    series.sort(key=lambda s: -max(y for _, y, _ in s[1]))
    front = [(data["points"][k][fields["per_request"]], data["points"][k][y_key])
             for k in data["frontiers"].get(f"{scope}|{context}|{mode}", [])]
    return series, front

