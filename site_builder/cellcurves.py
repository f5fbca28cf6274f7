"""The run page's curves of its traffic and rate cells: a line per series over a
quantitative x, its points with the figures as the tables print them, and for
rate curves each knee as a diamond; the no-JS fallback draws the same lines.

One chart kind for both pages (site_builder/trafficpage.py, ratepage.py): they
differ in the legend's title, the x axis's numbers (whole turns and percents,
or rates) and the knee, the template's three parameters; each page builds its
rows and its x ticks.
"""

from __future__ import annotations

import altair as alt

from site_builder import chartkit, fallback, formats
from site_builder.chartkit import HEIGHT, INVALID, WIDTH, Chart, Look, Template, nominal

CELLS = alt.Data(name="cells")
KNEE = "the knee"  # a row's "Knee" on the knee of its curve ("" elsewhere)


@chartkit.compiled
def template(legend: str, whole_x: bool, knee: bool) -> Template:
    """The chart kind: `legend` titles the series, `whole_x` ticks x at whole numbers
    only (a turn axis ticked 1.5 means nothing), `knee` adds the knee's tooltip field and
    its diamond layer."""
    color = chartkit.color("series", Look("x", "y", legend))
    base = alt.Chart()
    line = base.mark_line(invalid=INVALID).encode(color=alt.Color(**color),
                                                  order=alt.Order(field="x", type="quantitative"))
    tooltip = [nominal("series", legend), nominal("X", chartkit.slot("x_title")),
               nominal("Y", chartkit.slot("y_title")), nominal("Status")]
    points = base.mark_point(filled=True, size=60, opacity=1).encode(
        color=alt.Color(**color), tooltip=[*tooltip, nominal("Knee")] if knee else tooltip)
    layers = [line, points]
    if knee:
        layers.append(base.mark_point(shape="diamond", size=260, filled=False, strokeWidth=2).encode(
            color=alt.Color(**color)).transform_filter(f"datum.Knee == '{KNEE}'"))
    x_axis = {"format": "d", "tickMinStep": 1} if whole_x else {"format": "~s"}
    chart = alt.layer(*layers, data=CELLS).encode(
        x=alt.X(field="x", type="quantitative", title=chartkit.slot("x_title"), axis=x_axis),
        y=alt.Y(field="y", type="quantitative", title=chartkit.slot("y_title"), axis={"format": "~s"}),
    ).properties(width=WIDTH, height=HEIGHT)
    return chartkit.template(chart)


def chart(chart_id: str, title: str, caption: str, look: Look, rows: list[dict],
          x_ticks: list[float], x_domain: tuple[float, float], *, whole_x: bool,
          knee: bool) -> Chart:
    """The chart of `rows` (each with its series, x, y, their texts X and Y, Status, and
    Knee where `knee`), its lines in the order their first rows come."""
    lines = list(dict.fromkeys(r["series"] for r in rows))
    colors = chartkit.line_colors(len(lines))
    spec = template(look.legend, whole_x, knee).fill(
        {"cells": rows}, lines=lines, colors=colors, x_title=look.x, y_title=look.y)
    series = [(name, sorted((r["x"], r["y"]) for r in rows if r["series"] == name)) for name in lines]
    ticks = [(v, formats.count(v)) for v in x_ticks]
    return chartkit.make(chart_id, title, caption, spec, lambda: fallback.lines(
        title, series, colors, look, x_ticks=ticks, x_log2=False, x_domain=x_domain))
