"""The series page's chart: total tok/s at each operating point, run after run.

One line per operating point (site_builder/oppoint.py's summary points), the
runs of the series along x in measured order (named by
site_builder/names.py), a vertical rule over each point's 95% interval when
its run has repeated windows. The plot keeps its height whatever the legend:
the chart fits its container's width only (`fit-x`), so the legend below adds
to the figure's height instead of squeezing the plot. Without JavaScript the
build-time SVG (site_builder/fallback.py) shows the same lines.
"""

from __future__ import annotations

from typing import Any

from site_builder import chartkit, fallback
from site_builder.chartkit import CONFIG, HEIGHT, PADDING, Chart, Look

LOOK = Look("Run (oldest first)", "Total tok/s", "Operating point")
TITLE = "Total tok/s over the series"
CAPTION = ("each line is one operating point (context × requests at once); each point is one "
           "run, oldest first; vertical bars: 95% intervals where a run has repeated windows")


def _spec(rows: list[dict[str, Any]], names: list[str], points: list[str]) -> dict[str, Any]:
    """The Vega-Lite spec: error rules under lines with points, x ordered by the series."""
    color = {"field": "point", "type": "nominal", "title": LOOK.legend,
             "scale": {"domain": points, "range": chartkit.line_colors(len(points))},
             "legend": {"orient": "bottom", "direction": "vertical", "columns": 1}}
    x = {"field": "run", "type": "ordinal", "sort": names, "title": LOOK.x,
         "axis": {"labelAngle": -30, "labelLimit": 160}}
    y = {"field": "total", "type": "quantitative", "title": LOOK.y, "axis": {"format": "~s"}}
    tooltip = [{"field": "run", "type": "nominal", "title": "Run"},
               {"field": "point", "type": "nominal", "title": "At"},
               {"field": "text", "type": "nominal", "title": "Total tok/s"}]
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


def series_chart(names: list[str], points: list[str],
                 values: list[list[tuple[float | None, list[float] | None, str]]],
                 chart_id: str = "chart-series") -> Chart | None:
    """The chart of a series: names (x, in order), point labels (lines), and per point
    per run (total tok/s, its 95% interval or None, its text); None with nothing to draw."""
    rows = []
    for label, per_run in zip(points, values, strict=True):
        for name, (total, ci, text) in zip(names, per_run, strict=True):
            rows.append({"run": name, "point": label, "total": total, "text": text,
                         "lo": ci[0] if ci else None, "hi": ci[1] if ci else None})
    if not any(r["total"] is not None for r in rows):
        return None
    series = [(label, [(i + 0.5, total, False) for i, (total, _, _) in enumerate(per_run)])
              for label, per_run in zip(points, values, strict=True)]
    ticks = [(i + 0.5, name) for i, name in enumerate(names)]
    colors = chartkit.line_colors(len(points))
    return chartkit.make(chart_id, TITLE, CAPTION, _spec(rows, names, points), lambda: fallback.lines(
        TITLE, series, colors, LOOK, x_ticks=ticks, x_log2=False, legend_below=True,
        x_domain=(0.0, float(len(names)))))


__all__ = ["series_chart"]
