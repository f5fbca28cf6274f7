"""The series page's chart: total tok/s at each operating point, run after run,
each point relative to its own first run.

One line per operating point (site_builder/oppoint.py's summary points), the
runs of the series along x in the series' order (named by
site_builder/names.py), each point's total tok/s as a percentage of the first
run with a figure there (100%): the points differ by orders of magnitude (8K ×
1 against 251K × 128), and on one linear axis of tok/s an 18% fall of the
smallest was a 2-pixel dip. A vertical rule over each point's 95% interval
(scaled alike) when its run has repeated windows; the tooltip gives tok/s as
the table prints them. The plot keeps its height whatever the legend: the
chart fits its container's width only (`fit-x`), so the legend below adds to
the figure's height instead of squeezing the plot. Without JavaScript the
build-time SVG (site_builder/fallback.py) shows the same lines.
"""

from __future__ import annotations

from typing import Any

from rundir import words
from site_builder import chartkit, fallback
from site_builder.chartkit import CONFIG, HEIGHT, PADDING, Chart, Look

Y_TITLE = "% of its first run's total tok/s"
LOOK = Look("Run", Y_TITLE, "Operating point")
TITLE = "Total tok/s over the series"
CAPTION = ("each line is one operating point (context × requests at once), its total tok/s as a "
           "percentage of the series' first run with a figure there, so a change reads the same "
           "at any size; each point is one run, {order}; vertical bars: 95% intervals where a run "
           "has repeated windows")


def _spec(rows: list[dict[str, Any]], names: list[str], points: list[str],
          x_title: str) -> dict[str, Any]:
    """The Vega-Lite spec: error rules under lines with points, x ordered by the series."""
    color = {"field": "point", "type": "nominal", "title": LOOK.legend,
             "scale": {"domain": points, "range": chartkit.line_colors(len(points))},
             "legend": {"orient": "bottom", "direction": "vertical", "columns": 1}}
    x = {"field": "run", "type": "ordinal", "sort": names, "title": x_title,
         "axis": {"labelAngle": -30, "labelLimit": 160}}
    y = {"field": "rel", "type": "quantitative", "title": LOOK.y}
    tooltip = [{"field": "run", "type": "nominal", "title": "Run"},
               {"field": "point", "type": "nominal", "title": "At"},
               {"field": "text", "type": "nominal", "title": "Total tok/s"},
               {"field": "change", "type": "nominal", "title": "Against the first run"}]
    rules = [{"transform": [{"filter": "datum.lo != null && datum.hi != null"}],
              "mark": {"type": "rule", "strokeWidth": 2},
              "encoding": {"y": {**y, "field": "lo"}, "y2": {"field": "hi"}}}]
    line = {"mark": {"type": "line", "invalid": chartkit.INVALID,
                     "point": {"filled": True, "size": 60}},
            "encoding": {"y": y, "tooltip": tooltip}}
    with_intervals = any(r["lo"] is not None for r in rows)  # no empty layer (Vega warns)
    return {
        "width": "container", "height": HEIGHT,
        "autosize": {"type": "fit-x", "contains": "padding", "resize": True},
        "config": CONFIG, "padding": PADDING,
        "datasets": {"points": rows}, "data": {"name": "points"},
        "encoding": {"x": x, "color": color},
        "layer": [*(rules if with_intervals else []), line],
    }


def _pct(v: float | None, base: float | None) -> float | None:
    return None if v is None or not base else v / base * 100.0


def series_chart(names: list[str], points: list[str],
                 values: list[list[tuple[float | None, list[float] | None, str]]],
                 order: str = "oldest first", chart_id: str = "chart-series") -> Chart | None:
    """The chart of a series: names (x, in order: `order` says which), point labels
    (lines), and per point per run (total tok/s, its 95% interval or None, its text);
    each point's values relative to its first run with one. None with nothing to draw."""
    rows = []
    rel_lines = []
    for label, per_run in zip(points, values, strict=True):
        base = next((total for total, _, _ in per_run if total), None)
        rel = []
        for name, (total, ci, text) in zip(names, per_run, strict=True):
            r = _pct(total, base)
            rel.append(r)
            rows.append({"run": name, "point": label, "rel": r, "text": text,
                         "change": words.MISSING if r is None else f"{r - 100:+.1f}%",
                         "lo": _pct(ci[0], base) if ci else None,
                         "hi": _pct(ci[1], base) if ci else None})
        rel_lines.append(rel)
    if not any(r["rel"] is not None for r in rows):
        return None
    series = [(label, [(i + 0.5, v, False) for i, v in enumerate(rel)])
              for label, rel in zip(points, rel_lines, strict=True)]
    ticks = [(i + 0.5, name) for i, name in enumerate(names)]
    colors = chartkit.line_colors(len(points))
    x_title = f"Run ({order})"
    look = Look(x_title, LOOK.y, LOOK.legend)
    return chartkit.make(chart_id, TITLE, CAPTION.format(order=order),
                         _spec(rows, names, points, x_title), lambda: fallback.lines(
                             TITLE, series, colors, look, x_ticks=ticks, x_log2=False,
                             legend_below=True, x_domain=(0.0, float(len(names)))))


__all__ = ["series_chart"]
