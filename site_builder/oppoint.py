"""Operating points: rank runs at one context × concurrency (issue 13, item 2).

Readers ask "at 32K context and 8 requests at once, which run is fastest?".
This module answers it from the runs' decode cells, purely (no I/O): the
family pages and the index print its build-time answers (the "fastest at"
summary, shown without JavaScript too) and site_builder/rankings.py hands its
choices to templates/static/oppoint.js, which only re-sorts them (the rule for
picking a cell lives here alone; every number arrives pre-formatted). The
pages rank runs within one model family (rankings.py says why and how).

Which cell of a run stands for a point:

* its decode cell at the point (same context label, same concurrency). If
  that cell was planned but has no numbers (Over capacity, Error, Looped),
  the run is listed under the ranking with that status, never replaced by
  another cell: the run cannot serve that point.
* otherwise (the run's matrix lacks the point) the nearest measured cell,
  marked "nearest" and ranked after the runs measured at the point: distance
  is |log2(context ratio)| + |log2(concurrency ratio)|, ties to the smaller
  context, then the smaller concurrency (the cautious choice: less work than
  asked, never more).

Metrics: total tok/s, total tok/s per GPU (total / the run's GPU count;
missing when the run records no GPU count), per-request tok/s, TTFT (lower is
better), and $ per 1M output tokens when the build was given a price table (each
run's `price`, site_builder/prices.py; lower is better).

Under latency limits (site_builder/slo.py) each run is also ranked by its best
cell among those meeting the limits (`slo_rank`); the page's scripts redo that
choice when the reader changes the limits or the percentile, from every cell's
percentiles in the ranking data (`rankings.client_data`: `lv`, `lt`, `ci`). When
cells carry 95% intervals (repeated windows), neighbouring places whose intervals
overlap are marked tied within noise; without intervals no tie is claimed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rundir import contract, words
from site_builder import metrictable, prices, slo
from site_builder.aggregate import CellResult
from site_builder.views import RunView

# The ranking measures, from the metric table (site_builder/metrictable.py): (ranking
# key, the decode metric it reads, divided over the run's GPUs?). A measure's label and
# which way is better are its metric's; per GPU adds " per GPU" to the header.
MEASURES: tuple[tuple[str, str, bool], ...] = (
    ("total", "total_tok_s", False),
    ("per_gpu", "total_tok_s", True),
    ("per_request", "per_request_tok_s", False),
    ("ttft", "ttft_ms", False),
)


def _decode_metric(key: str) -> metrictable.Metric:
    return next(m for m in metrictable.TABLE if m.key == key and contract.DECODE in m.phases)


# key, label, higher is better: what the pages and oppoint.js read of each measure
METRICS: list[tuple[str, str, bool]] = [
    (key, _decode_metric(metric).header + (" per GPU" if split else ""),
     _decode_metric(metric).better == "higher") for key, metric, split in MEASURES]
COST_METRIC = ("cost", "$ per 1M output tokens", False)
SUMMARY_METRICS = ("total", "per_gpu")  # the columns of the "fastest at" summary
NEAREST_NOTE = ("nearest: the run has no cell at this point; its nearest measured cell "
                "(by context, then requests) stands in, as marked")


@dataclass(frozen=True)
class Point:
    """A context × concurrency, named in the address as ``32K-8``."""

    context: int
    concurrency: int

    @property
    def context_label(self) -> str:
        return words.context_label(self.context)

    @property
    def key(self) -> str:
        return f"{self.context_label}-{self.concurrency}"

    @property
    def label(self) -> str:
        return f"{self.context_label} × {self.concurrency}"


@dataclass
class Entry:
    """One run at a point: the cell standing for it, and whether it is the exact one."""

    run: RunView
    cell: CellResult | None
    exact: bool
    values: dict[str, float | None]

    @property
    def ranked(self) -> bool:
        return self.cell is not None and self.cell.has_numbers


def gpus(run: RunView) -> int | None:
    """GPUs the run used; None when it records none (a CPU run, or a count not given)."""
    h = run.info.hardware
    return h.gpu_count if h.gpu_name and h.gpu_count else None


def _measured(run: RunView) -> list[CellResult]:
    return [x for x in run.agg.decode() if x.has_numbers and x.total_tok_s is not None]


def _distance(x: CellResult, point: Point) -> tuple[float, int, int]:
    d = (abs(math.log2(max(x.context, 1) / max(point.context, 1)))
         + abs(math.log2(max(x.concurrency, 1) / max(point.concurrency, 1))))
    return (round(d, 9), x.context, x.concurrency)


def pick(run: RunView, point: Point) -> tuple[CellResult | None, bool]:
    """(the cell standing for the run at point, exact?); (None, False) when the run
    has no measured decode cell at all."""
    for x in run.agg.decode():
        if words.context_label(x.context) == point.context_label and \
                x.concurrency == point.concurrency:
            return x, True
    measured = _measured(run)
    if not measured:
        return None, False
    return min(measured, key=lambda x: _distance(x, point)), False


def cell_values(run: RunView, cell: CellResult | None,
                price: prices.Price | None = None) -> dict[str, float | None]:
    """Every metric's raw value at a cell (None where it has none)."""
    if cell is None or not cell.has_numbers:
        return {key: None for key, _, _ in [*METRICS, COST_METRIC]}
    n = gpus(run)
    total = cell.total_tok_s
    return {
        "total": total,
        "per_gpu": total / n if total is not None and n else None,
        "per_request": cell.per_request_tok_s,
        "ttft": cell.ttft_ms,
        "cost": prices.cost_per_million(price.usd_per_gpu_hour if price else None, n, total),
    }


def priced(runs: list[RunView]) -> bool:
    """True when some run has a price (build-site --prices): only then is there a cost."""
    return any(r.price is not None for r in runs)


def better(by: str) -> bool:
    """True when a higher value of metric `by` is better."""
    return next(hi for key, _, hi in [*METRICS, COST_METRIC] if key == by)


def rank(runs: list[RunView], point: Point, by: str = "per_gpu") -> list[Entry]:
    """The runs at point, best first by metric `by`: runs measured at the point
    first, then runs standing in with their nearest cell (a cell elsewhere does not
    compete with cells at the point), then runs without a value for `by` (a status
    at the point, no GPU count, no price) in title order."""
    entries = []
    for run in runs:
        cell, exact = pick(run, point)
        entries.append(Entry(run, cell, exact, cell_values(run, cell, run.price)))
    sign = -1 if better(by) else 1
    with_value = [e for e in entries if e.values[by] is not None]
    without = [e for e in entries if e.values[by] is None]
    with_value.sort(key=lambda e: (not e.exact, sign * e.values[by],  # type: ignore[operator]
                                   e.run.title, e.run.slug))
    without.sort(key=lambda e: (e.run.title, e.run.slug))
    return with_value + without


def _definers(runs: list[RunView]) -> list[RunView]:
    """The runs whose cells decide the summary's points: the runs on GPUs, or every
    run when none records a GPU. A CPU test run (a tiny model at 1K) is still ranked
    at the points, at its nearest cell, but never sets them."""
    measured = [r for r in runs if _measured(r)]
    return [r for r in measured if gpus(r)] or measured


def summary_points(runs: list[RunView]) -> list[tuple[str, Point]]:
    """The points of the "fastest at" summary, each named by the point itself:
    1 request at the smallest of the contexts measured by the most runs; 8 requests
    at 32K when some run measured it; the largest context a majority of the runs
    measured, at the most requests a majority of those measured there. Counted over
    `_definers` (by context label), so neither one run's odd matrix nor a CPU test
    run names a row; with no context a majority shares, the most measured stands in."""
    definers = _definers(runs)
    if not definers:
        return []
    per_run = [{(words.context_label(x.context), x.concurrency) for x in _measured(r)}
               for r in definers]
    tokens: dict[str, int] = {}
    for r in definers:
        for x in _measured(r):
            label = words.context_label(x.context)
            tokens[label] = min(tokens.get(label, x.context), x.context)
    support = Counter(label for cells in per_run for label in {c for c, _ in cells})
    most = max(support.values())
    small = min((c for c, k in support.items() if k == most), key=tokens.__getitem__)
    majority = len(definers) // 2 + 1
    common = [c for c, k in support.items() if k >= majority]
    large = max(common or [c for c, k in support.items() if k == most], key=tokens.__getitem__)
    at_large = Counter(n for cells in per_run for c, n in cells if c == large)
    need = support[large] // 2 + 1
    top = max((n for n, k in at_large.items() if k >= need), default=min(at_large))
    out = [("single request", Point(tokens[small], 1))]
    if any(("32K", 8) in cells for cells in per_run):
        out.append(("common serving point", Point(32 * 1024, 8)))
    out.append(("largest context most runs measured" if common else "most measured context",
                Point(tokens[large], top)))
    seen: set[str] = set()
    return [(t, p) for t, p in out if not (p.key in seen or seen.add(p.key))]  # type: ignore[func-returns-value]


def text_of(by: str) -> Callable[[float | None], str]:
    """The page's format of a metric (rundir/words.py, formats.py, prices.py)."""
    return {"total": words.tok_s, "per_gpu": words.tok_s, "per_request": words.tok_s,
            "ttft": words.ttft, "cost": prices.dollars}[by]


def summary(runs: list[RunView], cost: bool | None = None) -> list[dict[str, Any]]:
    """The build-time "fastest at" rows: per summary point (the row's title is the
    point, its note what it stands for), the best run by each of SUMMARY_METRICS and
    the cheapest when `cost` (default: when some run has a price; a page of several
    families passes the site's answer, so every block has the same columns)."""
    keys = [*SUMMARY_METRICS, *(["cost"] if (priced(runs) if cost is None else cost) else [])]
    rows = []
    for title, point in summary_points(runs):
        best = []
        for by in keys:
            top = rank(runs, point, by)
            e = top[0] if top and top[0].values[by] is not None else None
            best.append({
                "by": by,
                "run": e.run if e else None,
                "text": text_of(by)(e.values[by]) if e else words.MISSING,
                "nearest": "" if e is None or e.exact else
                Point(e.cell.context, e.cell.concurrency).label,  # type: ignore[union-attr]
                "status": words.status_label(e.cell.status)  # type: ignore[union-attr]
                if e and e.cell.status != contract.VALID else "",  # type: ignore[union-attr]
            })
        rows.append({"title": point.label, "note": title, "point": point, "best": best})
    return rows


def all_points(runs: list[RunView]) -> list[Point]:
    """Every context (by label) × concurrency some run has a decode cell at, crossed,
    so the chooser offers any pair and each run answers with its cell or nearest."""
    contexts: dict[str, int] = {}
    levels: set[int] = set()
    for run in runs:
        for x in run.agg.decode():
            label = words.context_label(x.context)
            contexts[label] = min(contexts.get(label, x.context), x.context)
            levels.add(x.concurrency)
    return [Point(n, lv) for n in sorted(contexts.values()) for lv in sorted(levels)]


def cost_rows(run: RunView) -> list[tuple[str, list[str]]]:
    """A run page's cost matrix: (context label, $ per 1M output tokens per
    concurrency level in run.levels); empty without a price or a GPU count."""
    price = run.price
    if price is None or gpus(run) is None:
        return []
    rows = []
    for row in run.matrix:
        texts = []
        for x in row.cells:
            cost = cell_values(run, x, price)["cost"]
            texts.append(prices.dollars(cost) if cost is not None
                         else words.status_label(x.status) if not x.has_numbers
                         else words.MISSING)
        rows.append((words.context_label(row.context), texts))
    return rows


def default_point(runs: list[RunView]) -> Point | None:
    """The point a ranking opens at: 32K × 8 when the runs have it, else the first
    8-request point of the summary, else its first point."""
    points = all_points(runs)
    tops = [p for _, p in summary_points(runs) if p in points]
    for p in tops:
        if p.key == "32K-8":
            return p
    return next((p for p in tops if p.concurrency == 8), tops[0] if tops else
                (points[0] if points else None))


# ---- under latency limits ----------------------------------------------------
# The metric each ranking key reads its interval from (per GPU and cost scale total).
INTERVAL_KEY = {**{key: metric for key, metric, _ in MEASURES}, "cost": "total_tok_s"}
LEVEL_KEYS = {"ttft": "ttft_ms", "tbt": "tbt_ms", "per_request": "per_request_tok_s"}


@dataclass
class SloEntry:
    """One run under the limits: its best meeting cell (None: no cell meets them)."""

    run: RunView
    cell: CellResult | None
    values: dict[str, float | None]
    tied: bool = False  # tied within noise with the place above


def interval(run: RunView, cell: CellResult | None, by: str) -> list[float] | None:
    """The 95% interval of a cell's value of metric `by` (None: one window, no interval)."""
    if cell is None:
        return None
    found = cell.intervals.get(INTERVAL_KEY[by])
    if not found or None in found:
        return None
    lo, hi = found
    if by in ("total", "per_request", "ttft"):
        return [lo, hi]
    ends = [cell_values(run, replace(cell, total_tok_s=v), run.price)[by] for v in (lo, hi)]
    if None in ends:
        return None
    return sorted(ends)  # type: ignore[type-var]


def overlaps(a: list[float] | None, b: list[float] | None) -> bool:
    """Tied within noise: both intervals known and overlapping (else no claim)."""
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def slo_rank(runs: list[RunView], limits: slo.Slo, by: str = "per_gpu") -> list[SloEntry]:
    """Each run's best cell meeting the limits by metric `by`, best run first; then
    runs with a meeting cell but no value for `by` (no GPU count, no price), then
    runs with no meeting cell, each group in title order."""
    out = []
    for run in runs:
        def value(x: CellResult, run: RunView = run) -> float | None:
            return cell_values(run, x, run.price)[by]
        cell = slo.best_cell(_measured(run), limits, value, better(by)) or slo.best_cell(
            _measured(run), limits, lambda x: x.total_tok_s)  # no value for `by`: listed after
        out.append(SloEntry(run, cell, cell_values(run, cell, run.price)))
    sign = -1 if better(by) else 1
    ranked = sorted((e for e in out if e.values[by] is not None),
                    key=lambda e: (sign * e.values[by], e.run.title, e.run.slug))  # type: ignore[operator]
    rest = sorted((e for e in out if e.values[by] is None),  # a meeting cell first
                  key=lambda e: (e.cell is None, e.run.title, e.run.slug))
    for above, e in zip(ranked, ranked[1:], strict=False):
        e.tied = overlaps(interval(above.run, above.cell, by), interval(e.run, e.cell, by))
    return ranked + rest


def run_limits(runs: list[RunView]) -> slo.RunSlo:
    """The build's limits, as publish gave every run (the site default when none was)."""
    return next((r.slo for r in runs if isinstance(r.slo, slo.RunSlo)), slo.RunSlo(slo.DEFAULT))
