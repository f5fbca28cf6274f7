"""The explorer's chart kinds (explore.html, and the A/B page's curves), authored
in Altair and compiled once into chartkit templates that the page fills.

Unlike the other charts, whose rows are known when a page is built, these are
redrawn whenever the reader picks another family, context or axis. So the
build writes the compiled templates (one per chart kind and axis scale) into
data/explore.js, and the page's script fills their holes (`chartkit.slot`: the
runs' names and colours, the axis titles) and puts the chosen rows in the
spec's datasets, as `chartkit.Template.fill` does here. The no-JS picture of the
default view is drawn by `fallback`.
"""

from __future__ import annotations

import functools
from typing import Any

import altair as alt

from site_builder import chartkit, explore, fallback
from site_builder.chartkit import WIDTH, Look, Template, nominal, slot, template

KINDS = ("tradeoff", "curves", "ttft")
HEIGHT = 360
FRONTIER_COLOR = "#1f2328"  # the Pareto frontier: dark, dashed, drawn over the curves
FRONTIER_LABEL = "Pareto frontier"
DIM = 0.25  # a point that misses the reader's latency limits (explore.js sets `dim`)
TOOLTIP = ("Context", "Requests at once", "Per request tok/s", "Total tok/s", "Per GPU tok/s",
           "TTFT", "Status")
RUN = Look("Per request tok/s", "Total tok/s per GPU", "Run")


def _scale(log: bool) -> alt.Scale:
    return alt.Scale(type="log") if log else alt.Scale(type="linear", zero=True)


@functools.cache
def explore_template(kind: str, x_log: bool, y_log: bool, cost: bool = False) -> Template:
    """One curve per run through its concurrency levels (points filled when Valid,
    hollow when requests queued, faint when `dim`: it misses the latency limits the
    reader keeps to). Kind "tradeoff": per-request tok/s (x) against
    total tok/s or total per GPU (y), points labelled with their concurrency, the
    frontier (dataset "frontier") dashed on top; "curves": the same without a
    frontier (an empty dataset would leave Vega an empty extent). Kind "ttft": TTFT
    against concurrency. `cost`: the tooltip also prints the point's $ per 1M output
    tokens (only a build with a price table). Holes: lines (the runs' keys, their
    slugs, best first), colors (chartkit.run_colors), x_title, y_title. Runs are
    keyed by slug and named by `run` (their distinct name); the legend is the page's
    run list (site.js), which highlights a run through the `hl` param; the plot
    keeps its height (`fit-x`); points and concurrency labels only on the coloured
    runs (`top`) and the highlighted one (a grey line's tooltip names its run)."""
    color = chartkit.color("key", RUN, legend=None)
    hl = chartkit.HIGHLIGHT
    axis = {"format": "~s"}
    enc = {"x": alt.X(field="x", type="quantitative", title=slot("x_title"), scale=_scale(x_log),
                      axis=alt.Axis(**axis) if kind != "ttft" else alt.Axis(format="d")),
           "y": alt.Y(field="y", type="quantitative", title=slot("y_title"), scale=_scale(y_log),
                      axis=alt.Axis(**axis))}
    points = alt.Chart(alt.Data(name="points")).encode(**enc)
    layers: list[Any] = [
        points.mark_line(strokeWidth=2).encode(
            color=alt.Color(**color), order=alt.Order(field="concurrency", type="quantitative"),
            detail=alt.Detail(field="key", type="nominal"), tooltip=[nominal("run", "Run")],
            opacity=alt.Opacity(**chartkit.faded())).properties(name="curves"),
        points.mark_point(filled=True, size=50, opacity=1, strokeWidth=1.5).transform_filter(
            chartkit.ON_TOP).encode(
            fill=alt.Fill(**color, condition={"test": "datum.queued", "value": "white"}),
            stroke=alt.Stroke(**color),
            opacity=alt.Opacity(**chartkit.faded([{"test": "datum.dim", "value": DIM}])),
            tooltip=[nominal("run", "Run"), *(nominal(k) for k in TOOLTIP),
                     *([nominal(explore.COST_FIELDS[1])] if cost else [])]).properties(
            name="points"),
    ]
    if kind != "ttft":
        layers.append(points.mark_text(align="left", dx=5, dy=-7, fontSize=10).transform_filter(
            chartkit.ON_TOP).encode(
            text=alt.Text(field="Requests at once", type="nominal"),
            color=alt.Color(**color)).properties(name="labels"))
    if kind == "tradeoff":
        front = alt.Chart(alt.Data(name="frontier")).encode(**enc)
        layers += [front.mark_line(color=FRONTIER_COLOR, strokeDash=[6, 3], strokeWidth=2.5)
                   .encode(order=alt.Order(field="x", type="quantitative"))
                   .properties(name="frontier"),
                   front.mark_point(shape="circle", size=180, color=FRONTIER_COLOR,
                                    strokeWidth=1.5, filled=False)
                   .properties(name="frontier_points")]
    return template(alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT, autosize=alt.AutoSizeParams(**chartkit.AUTOSIZE_X),
    ).add_params(alt.param(name=hl, value="")))


def templates(cost: bool = False) -> dict[str, str]:
    """Every explorer template's JSON by `kind|xlog ylog` (`tradeoff|01`: log y);
    `cost` when the build has a price table (tooltips print each point's cost)."""
    return {f"{kind}|{int(x_log)}{int(y_log)}": explore_template(kind, x_log, y_log, cost).text
            for kind in KINDS for x_log in (False, True) for y_log in (False, True)}


def explore_fallback(title: str, series: list[tuple[str, list[tuple[float, float, bool]]]],
                     front: list[tuple[float, float]], y_title: str) -> str:
    """The no-JS picture of one trade-off view: each run's curve, the frontier dark
    (drawn first, so a run's curve that lies on it stays visible)."""
    lines: list[tuple[str, list[Any]]] = [(FRONTIER_LABEL, list(front))] if front else []
    lines += series
    colors = ([FRONTIER_COLOR] if front else []) + chartkit.run_colors(len(series))
    return fallback.lines(title, lines, colors, Look(RUN.x, y_title, RUN.legend), x_ticks=[],
                          x_log2=False, legend_below=True,
                          legend_max=chartkit.TOP_LINES + (1 if front else 0), rest_note="in grey")


def default_picture(data: dict[str, Any]) -> dict[str, str]:
    """Title, caption, words and no-JS SVG of the explorer's default view, and the
    index of its data (`explore_index`, exploredata.split's) when the build gives one:
    the page holds it (without it, the page loads the whole data/explore.js)."""
    view = data["default"]
    ctx = view["context"]
    src = {"explore_index": data["explore_index"]} if "explore_index" in data else {}
    if ctx is None:
        return {"chart_title": "No run has decode numbers", "chart_caption": "",
                "fallback_svg": "", "view_text": "no run has decode numbers yet",
                "cost_note": "", **src}
    gpu = view["y"] == "gpu"
    label = data["context_labels"][str(ctx)]
    scope = next((f["name"] for f in data["families"] if f["slug"] == view["family"]), "all runs")
    series, front = explore.view_series(data, view["family"], ctx, view["y"])
    title = (f"Per-request speed against {'throughput per GPU' if gpu else 'total throughput'}"
             f" at {label}")
    svg = explore_fallback(title, series, front, "Total tok/s per GPU" if gpu else "Total tok/s")
    return {"chart_title": title,
            "chart_caption": "One line per run through its concurrency levels; dark line: the "
                             "Pareto frontier over Valid points; up and right is better.",
            "fallback_svg": "" if fallback.UNSAFE.search(svg) else svg,
            "view_text": f"{scope} at {label}", "cost_note": cost_note(data), **src}


def cost_note(data: dict[str, Any]) -> str:
    """The words under the chart naming the prices behind the tooltips' costs (each
    with its date and source); empty without a price table."""
    if not data.get("prices"):
        return ""
    return (f"{explore.COST_FIELDS[1]} (in each point's tooltip): the run's GPUs at "
            f"{'; '.join(data['prices'])}. A run whose GPU has no price has no cost.")
