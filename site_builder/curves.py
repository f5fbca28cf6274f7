"""A run's throughput-latency curve in the shape of MLPerf's endpoint benchmark.

MLPerf's endpoint benchmark draws a server as points of system throughput
against the speed one user sees, both at the 90th percentile: tok/s per user
= 1000 / TPOT p90 (ms), with TTFT p90 beside it. Our time between tokens is
the per-request TPOT (rundir/tails.py: one sample per request, a 3-token
chunk three gaps), so each decode cell with numbers is one such point. A p90
with fewer than 10 samples is None (rundir.tails.MIN_SAMPLES): the median is
never put in its place. Written per run as curve.json and curve.csv
(docs/data-format.md, "The curve").
"""

from __future__ import annotations

from typing import Any

from rundir import contract, tails, words
from site_builder.aggregate import CellResult
from site_builder.views import RunView

LEVEL = "p90"  # MLPerf's endpoint curve is drawn at P90
TBT_P90 = tails.TBT.column(LEVEL)  # tbt_ms_p90
TTFT_P90 = tails.TTFT.column(LEVEL)  # ttft_ms_p90

# The points' columns, in the order the CSV writes them.
POINT_COLUMNS = ["context", "context_label", "concurrency", "status", "system_tok_s",
                 "tok_s_per_user", TBT_P90, tails.TBT.count_column(), TTFT_P90,
                 tails.TTFT.count_column()]


def tok_s_per_user(tbt_ms_p90: float | None) -> float | None:
    """1000 / the p90 time between tokens (ms per token): None where that p90 is."""
    if tbt_ms_p90 is None or not tbt_ms_p90 > 0:
        return None
    return 1000.0 / tbt_ms_p90


def curve_point(cell: CellResult) -> dict[str, Any]:
    """One decode cell as a point of the curve (raw, unrounded numbers)."""
    tbt_p90 = cell.tails.get(TBT_P90)
    return {
        "context": cell.context,
        "context_label": words.context_label(cell.context),
        "concurrency": cell.concurrency,
        "status": cell.status,
        "system_tok_s": cell.total_tok_s,
        "tok_s_per_user": tok_s_per_user(tbt_p90),
        TBT_P90: tbt_p90,
        tails.TBT.count_column(): cell.tails.get(tails.TBT.count_column()),
        TTFT_P90: cell.tails.get(TTFT_P90),
        tails.TTFT.count_column(): cell.tails.get(tails.TTFT.count_column()),
    }


def curve_points(run: RunView) -> list[dict[str, Any]]:
    """Every decode cell with numbers, by context then concurrency (an imported run's
    points have its published throughput and no p90s: it kept no stamps)."""
    cells = [x for x in run.agg.cells
             if x.phase == contract.DECODE and x.has_numbers and x.total_tok_s is not None]
    return [curve_point(x) for x in sorted(cells, key=lambda x: (x.context, x.concurrency))]


def curve_record(run: RunView) -> dict[str, Any]:
    """curve.json: the run, the level and its points."""
    return {"run_id": run.run_id, "slug": run.slug, "title": run.title,
            "percentile": LEVEL, "points": curve_points(run)}
