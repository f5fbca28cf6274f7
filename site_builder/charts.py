"""The page charts, authored with Altair, with a static SVG drawn at build time
as a no-JS fallback.

Each chart is a Vega-Lite spec inlined in its page as JSON (vega-embed draws
it from the site's one vendored bundle) plus a plain SVG picture of the same
data inside the element (`fallback`), so a reader without JavaScript still
sees it. Each chart kind is an Altair chart over named datasets, compiled once
per process into a template (`chartkit.template`, cached here per kind and
variant) and filled with each page's rows and scale domains, since a real
site has thousands of charts. Rows carry only the fields the encodings use.
Tooltip text is pre-formatted so a chart never shows a number differently
from the tables. Axis titles and colours come from `chartkit`'s `Look` of
each chart, and layout (a line kind's axes, series and legend, the bars' width,
the heatmap's rows) from the definitions here: the template and the fallback
both read them, so the two drawings of a chart cannot drift apart. On a page with
the percentile selector (`levels=True`) each row also carries its latencies and
per-request tok/s at every level, pre-formatted, and the spec the titles they get
there (`usermeta`); site.js swaps them in, and the fallback stays the median.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import altair as alt

from rundir import contract, words
from site_builder import chartkit, fallback, runbars
from site_builder.aggregate import CellResult
from site_builder.chartkit import (
    HEIGHT,
    INVALID,
    QUEUED_LABEL,
    WIDTH,
    Chart,
    Look,
    Template,
    bundle_js,
    bundle_name,
    nominal,
    slot,
    slots,
    template,
)
from site_builder.chartkit import make as _make

__all__ = ["Chart", "RunLine", "SvgRenderer", "bundle_js", "bundle_name"]
CELLS = alt.Data(name="cells")
SI = {"format": "~s"}


# --------------------------------------------------------------------------
# line charts: one template per kind (and whether any point is queued)
# --------------------------------------------------------------------------

# A run's line: its key (the run's slug: what the chart's scale and the page's run
# list key it by), its name (site_builder/names.py: distinct beside the others) and cells.
RunLine = tuple[str, str, list[CellResult]]
DECODE_TIP = ("Context", "Requests at once", "Total tok/s", "Per request tok/s", "TTFT", "Status")
_DECODE_KEYS = (*DECODE_TIP, "concurrency", "total")


@dataclass(frozen=True)
class LineKind:
    """A line chart kind, defined once: the Altair template (`_line_template`) and
    the fallback picture (`_line_chart`) are both made from it, so the two cannot
    disagree on axes, scales, series or legend.

    x: "log2" (concurrency on a log2 axis, the page's levels as ticks), "context"
    (context labels in the page's order, evenly spaced), or a quantitative field
    (linear from 0). Each line is the rows of one `series` value, its points in
    `order`. Lines by run (series "key", the run's slug) are ranked by the chart's
    measure: the best chartkit.TOP_LINES coloured, the rest grey, and their legend
    is the page's run list under the plot (usermeta `legend`, drawn by site.js),
    the plot's height fixed (`fit-x`); the fallback's legend is below its plot."""

    look: Look
    x: str
    series: str
    order: str

    @property
    def by_run(self) -> bool:
        return self.series == "key"


LINE_KINDS = {
    "decode": LineKind(chartkit.DECODE, "log2", "Context", "concurrency"),
    "tradeoff": LineKind(chartkit.TRADEOFF, "per_request", "Context", "concurrency"),
    "runs_decode": LineKind(chartkit.RUNS_DECODE, "log2", "key", "concurrency"),
    "runs_prefill": LineKind(chartkit.RUNS_PREFILL, "context", "key", "context"),
    "runs_single": LineKind(chartkit.RUNS_SINGLE, "context", "key", "context"),
}


def _x_axis(kind: str, look: Look) -> alt.X:
    if kind == "log2":  # concurrency levels: the page's levels as ticks
        return alt.X(field="concurrency", type="quantitative", title=look.x,
                     scale=alt.Scale(type="log", base=2, domain=slots("x_domain"), nice=False),
                     axis=alt.Axis(values=slots("x_values"), format="d", grid=True))
    if kind == "context":
        return alt.X(field="Context", type="nominal", title=look.x, sort=slots("labels"),
                     axis=alt.Axis(labelAngle=0))
    return alt.X(field=kind, type="quantitative", title=look.x)


def _tooltip(kind: str, look: Look) -> list[alt.Tooltip]:
    if kind in ("runs_prefill", "runs_single"):
        return [nominal("run", "Run"), nominal("Context"), nominal("Total tok/s", look.y), nominal("TTFT")]
    tips = [nominal(name) for name in DECODE_TIP]
    return [nominal("run", "Run"), *tips] if kind == "runs_decode" else tips


@chartkit.compiled
def _line_template(kind: str, queued: bool) -> Template:
    """Lines broken at missing cells (null y), with a point per measured cell:
    filled for Valid, a hollow square for Requests queued (the caption says so)."""
    k = LINE_KINDS[kind]
    look, x, field, order = k.look, k.x, k.series, k.order
    color = chartkit.color(field, look, **({"legend": None} if k.by_run else {}))
    base = alt.Chart()
    point: dict[str, Any] = {"tooltip": _tooltip(kind, look)}
    fade: dict[str, Any] = {"opacity": alt.Opacity(**chartkit.faded())} if k.by_run else {}
    if not queued:
        point["color"] = alt.Color(**color)
    else:  # fill and stroke share the colour legend (same field, scale and legend)
        point |= {
            "shape": alt.Shape(field="point", type="nominal", title="Point", scale=alt.Scale(
                domain=["Valid", QUEUED_LABEL], range=["circle", "square"]),
                legend=None),  # the caption says it: a legend would draw its symbols unstroked
            "fill": alt.Fill(**color, condition={
                "test": f"datum.point === '{QUEUED_LABEL}'", "value": "white"}),
            "stroke": alt.Stroke(**color),
        }
    line = base.mark_line(invalid=INVALID).encode(
        color=alt.Color(**color), order=alt.Order(field=order, type="quantitative"), **fade,
        **({"tooltip": [nominal("run", "Run")]} if k.by_run else {}))
    points = base.mark_point(filled=True, size=60, opacity=1, strokeWidth=1.5).encode(
        **point, **fade)
    if k.by_run:  # points on the coloured runs and the highlighted one: a grey line says its name
        points = points.transform_filter(chartkit.ON_TOP)
    chart = alt.layer(line, points, data=CELLS).encode(
        x=_x_axis(x, look), y=alt.Y(field="total", type="quantitative", title=look.y, axis=SI),
    ).properties(width=WIDTH, height=HEIGHT)
    if k.by_run:  # the plot keeps its height; the run list highlights through `hl`
        chart = chart.properties(autosize=alt.AutoSizeParams(**chartkit.AUTOSIZE_X)).add_params(
            alt.param(name=chartkit.HIGHLIGHT, value=""))
    return template(chart)


def _run_colors(lines: list[str], palette: chartkit.Palette | None) -> tuple[list[str], list[str]]:
    """(lines, colours) of a chart of runs, `lines` ranked best first by the chart's
    measure: without a palette the chart's best TOP_LINES are coloured; with the
    page's, each run has its page colour and the coloured runs come first."""
    if palette is None:
        return lines, chartkit.run_colors(len(lines))
    grey = [key for key in lines if palette.of(key) == chartkit.REST_COLOR]
    lines = [key for key in lines if key not in set(grey)] + grey
    return lines, [palette.of(key) for key in lines]


def _rest_caption(colors: list[str], palette: chartkit.Palette | None) -> str:
    """The caption's note on grey runs, when a chart has any."""
    if chartkit.REST_COLOR not in colors:
        return ""
    which = palette.rule if palette else f"the best {chartkit.TOP_LINES} in colour"
    return f"; {which}, {chartkit.REST_NOTE}"


def _line_chart(kind: str, chart_id: str, title: str, caption: str, rows: list[dict[str, Any]],
                keys: tuple[str, ...], lines: list[str], palette: chartkit.Palette | None = None,
                **holes: Any) -> Chart:
    """A line chart of `kind` over rows: its spec from the kind's template, its
    fallback from the same kind, rows, lines and holes (the x ticks are the
    page's levels, or its context labels, as on the live axis). Lines by run
    come ranked best first (`lines`: their keys), coloured by the page's `palette`
    or, without one, by `chartkit.run_colors`."""
    k = LINE_KINDS[kind]
    queued = chartkit.any_queued(rows)
    colors = chartkit.line_colors(len(lines))
    if k.by_run:  # the worst first in the data: the best are drawn on top
        lines, colors = _run_colors(lines, palette)
        rank = {key: i for i, key in enumerate(lines)}
        rows = sorted(rows, key=lambda r: -rank[r["key"]])
        for r in rows:
            r["top"] = colors[rank[r["key"]]] != chartkit.REST_COLOR
        keys = (*keys, "top")
    data = chartkit.slim(rows, (*keys, "point") if queued else keys)
    spec = _line_template(kind, queued).fill({"cells": data}, lines=lines, colors=colors, **holes)
    x_field, x_domain = k.x, None
    x_ticks = [(float(v), str(v)) for v in holes.get("x_values") or []]
    if k.x == "log2":
        x_field = "concurrency"
    elif k.x == "context":  # nominal: label i centred at i + 0.5 of len(labels)
        x_field, x_domain = "x", (0.0, float(len(holes["labels"])))
        pos = {label: i + 0.5 for i, label in enumerate(holes["labels"])}
        rows = [{**r, "x": pos[r["Context"]]} for r in rows]
        x_ticks = [(pos[label], label) for label in holes["labels"]]
    series = chartkit.line_series(rows, k.series, x_field, lines)
    series_colors = [colors[lines.index(key)] for key, _ in series]  # the live scale's colour
    legend_max = None
    if k.by_run:
        names = {r["key"]: r["run"] for r in rows}
        series = [(names[key], pts) for key, pts in series]
        spec["usermeta"] = {"legend": chartkit.legend_meta(
            k.look.legend or "Run", lines, [names[key] for key in lines], colors,
            palette.rule if palette else "")}
        legend_max = len(lines) - colors.count(chartkit.REST_COLOR)
        caption += _rest_caption(colors, palette)
    return _make(chart_id, title, caption + chartkit.queued_note(rows), spec, lambda: fallback.lines(
        title, series, series_colors, k.look, x_ticks=x_ticks,
        x_log2=k.x == "log2", legend_below=k.by_run, x_domain=x_domain,
        legend_max=legend_max, rest_note="in grey"))


def _log2_holes(levels: list[int]) -> dict[str, Any]:
    return {"x_domain": [min(levels), max(levels)], "x_values": levels}


def _plotted(cells: list[CellResult], *, per_request: bool = False) -> list[CellResult]:
    """The cells of the contexts that have at least one point to draw."""
    keep = {x.context for x in cells if x.has_numbers and x.total_tok_s is not None
            and (not per_request or x.per_request_tok_s is not None)}
    return [x for x in cells if x.context in keep]


def _context_lines(cells: list[CellResult], kind: str, chart_id: str, title: str, caption: str,
                   levels: bool, **holes: Any) -> Chart:
    x = LINE_KINDS[kind].x
    keys = _DECODE_KEYS + (("per_request",) if x == "per_request" else ())
    return _line_chart(kind, chart_id, title, caption, chartkit.cell_rows(cells, levels=levels),
                       keys, chartkit.context_labels(cells), **holes)


def decode_chart(cells: list[CellResult], chart_id: str = "chart-decode", *,
                 levels: bool = False) -> Chart | None:
    """Total tok/s against concurrency, one line per context (log2 axis); a cell
    without numbers breaks its context's line."""
    data = _plotted([x for x in cells if x.phase == contract.DECODE])
    if not data:
        return None
    concurrency = sorted({x.concurrency for x in data if x.has_numbers and x.total_tok_s is not None})
    return _context_lines(data, "decode", chart_id, "Throughput by concurrency",
                          "Total tok/s against requests at once, one line per context; "
                          "gaps: no numbers", levels, **_log2_holes(concurrency))


def tradeoff_chart(cells: list[CellResult], chart_id: str = "chart-tradeoff", *,
                   levels: bool = False) -> Chart | None:
    """What one stream gets (per-request tok/s) against what the server delivers
    (at a level past the median, its slow side: the x of p99 is per-request tok/s p1)."""
    data = _plotted([x for x in cells if x.phase == contract.DECODE], per_request=True)
    if not data:
        return None
    return _context_lines(data, "tradeoff", chart_id, "Per-request speed against total throughput",
                          "Each point is a concurrency level; up and right is better", levels)


def _ranked(rows: list[dict[str, Any]]) -> list[str]:
    """The runs' keys, best first by their highest total tok/s in the chart."""
    best: dict[str, float | None] = {}
    for r in rows:
        v, old = r["total"], best.get(r["key"])
        best[r["key"]] = v if old is None or (v is not None and v > old) else old
    return chartkit.rank_lines(best)


def runs_decode_chart(series: list[RunLine], context: int, chart_id: str, *,
                      levels: bool = False, palette: chartkit.Palette | None = None) -> Chart | None:
    """Total tok/s against concurrency at one context, one line per run (broken
    where a run's cell has no numbers); a bar per run when only one level has numbers
    (a line through one x is a lone dot). `palette`: the page's run colours."""
    rows = []
    for key, name, cells in series:
        rows += chartkit.cell_rows(_plotted([x for x in cells if x.phase == contract.DECODE
                                and x.context == context]), name, levels=levels, key=key)
    if not rows:
        return None
    concurrency = sorted({r["concurrency"] for r in rows if r["total"] is not None})
    ctx = words.context_label(context)
    title = f"Throughput at {ctx} context"
    if len(concurrency) == 1:
        n = concurrency[0]
        return runbars.chart(chartkit.RUNS_DECODE, ("run", *DECODE_TIP), chart_id, title,
                             f"Total tok/s of each run at {ctx} × {n} request{'' if n == 1 else 's'} "
                             "at once, the only level with numbers at this context",
                             rows, _ranked(rows), palette)
    return _line_chart("runs_decode", chart_id, title,
                       f"Total tok/s against requests at once at {ctx}, one line per run", rows,
                       ("key", "run", *_DECODE_KEYS), _ranked(rows), palette,
                       **_log2_holes(concurrency))


def runs_context_chart(series: list[RunLine], phase: str, chart_id: str, *,
                       levels: bool = False, palette: chartkit.Palette | None = None) -> Chart | None:
    """Prefill tok/s, or single-stream decode tok/s, by context, one line per run; a bar
    per run when only one context has numbers. `palette`: the page's run colours."""
    rows = []
    for key, name, cells in series:
        pick = [x for x in cells if x.phase == phase and (phase == contract.PREFILL or x.concurrency == 1)]
        if any(x.has_numbers and x.total_tok_s is not None for x in pick):
            rows += chartkit.cell_rows(pick, name, levels=levels, key=key)
    if not rows:
        return None
    labels = [words.context_label(v) for v in sorted({r["context"] for r in rows
                                                      if r["total"] is not None})]
    rows = [r for r in rows if r["Context"] in labels]
    kind = "runs_prefill" if phase == contract.PREFILL else "runs_single"
    if phase == contract.PREFILL:
        title, caption = "Prefill by run", "Prompt tok/s by context, one line per run"
    else:
        title = "Single-stream decode by run"
        caption = "Decode tok/s of one request at a time by context, one line per run"
    keys = ("key", "run", "Context", "total", "Total tok/s", "TTFT")
    if len(labels) == 1:
        what = "Prompt tok/s" if phase == contract.PREFILL else "Single-stream decode tok/s"
        return runbars.chart(LINE_KINDS[kind].look, ("run", "Context", "Total tok/s", "TTFT"),
                             chart_id, title, f"{what} of each run at {labels[0]}, the only "
                             "context with numbers", rows, _ranked(rows), palette)
    for r in rows:
        r["concurrency"] = r["context"]  # line_series orders a line's points by this
    return _line_chart(kind, chart_id, title, caption, rows, (*keys, "context"),
                       _ranked(rows), palette, labels=labels)


# --------------------------------------------------------------------------
# prefill bars and the heatmap
# --------------------------------------------------------------------------


# Layout both drawings of a chart read (the template and the fallback): the prefill
# bars' width; the heatmap's row height for a number of contexts, its cell text
# colour, and the shade above which that text turns white.
PREFILL_BAR_WIDTH = 28
HEATMAP_INK, HEATMAP_WHITE_TEXT_ABOVE = "#1f2328", 0.55


def heatmap_row_height(contexts: int) -> int:
    """Pixels a heatmap row gets: 24 to 40, the whole grid about 360 high."""
    return max(24, min(40, 360 // max(1, contexts)))


@chartkit.compiled
def _prefill_template() -> Template:
    look = chartkit.PREFILL
    return template(alt.Chart(CELLS).mark_bar(color=look.color, size=PREFILL_BAR_WIDTH).encode(
        x=alt.X(field="Context", type="nominal", title=look.x, sort=slots("labels"),
                axis=alt.Axis(labelAngle=0)),
        y=alt.Y(field="total", type="quantitative", title=look.y, axis=SI),
        tooltip=[nominal("Context"), nominal("Total tok/s", look.y), nominal("TTFT")],
    ).properties(width=WIDTH, height=HEIGHT))


def prefill_chart(cells: list[CellResult], chart_id: str = "chart-prefill", *,
                  levels: bool = False) -> Chart | None:
    """Prompt tok/s of a cold request at each context length."""
    pick = [x for x in cells if x.phase == contract.PREFILL and x.has_numbers]
    rows = [r for r in chartkit.cell_rows(pick, levels=levels) if r["total"] is not None]
    if not rows:
        return None
    rows.sort(key=lambda r: r["context"])
    labels = [r["Context"] for r in rows]
    title = "Prefill"
    spec = _prefill_template().fill(
        {"cells": chartkit.slim(rows, ("Context", "total", "Total tok/s", "TTFT"))}, labels=labels)
    return _make(chart_id, title, "Prompt tok/s of a cold request by context length", spec,
                 lambda: fallback.bars(title, labels, [r["total"] for r in rows], chartkit.PREFILL,
                                       bar_width=PREFILL_BAR_WIDTH))


@chartkit.compiled
def _heatmap_template(missing: bool) -> Template:
    """Cells shaded by total tok/s; with `missing`, a layer below fills each cell
    without numbers by its status."""
    look = chartkit.HEATMAP
    base = alt.Chart().encode(
        x=alt.X(field="Requests at once", type="nominal", title=look.x, sort=slots("levels"),
                axis=alt.Axis(labelAngle=0)),
        y=alt.Y(field="Context", type="nominal", title=look.y, sort=slots("labels")),
        tooltip=[nominal(k) for k in ("Context", "Requests at once", "Status", "Total tok/s", "TTFT")])
    bottom = {"orient": "bottom", "direction": "horizontal"}
    layers = [
        base.mark_rect(stroke="white", strokeWidth=1).transform_filter("datum.total != null")
        .encode(color=alt.Color(field="total", type="quantitative", title=look.legend,
                                scale=alt.Scale(scheme=chartkit.HEATMAP_SCHEME),
                                legend=alt.Legend(format="~s", **bottom))),
        base.mark_text(fontSize=10).encode(
            text=alt.Text(field="label", type="nominal",
                          condition={"test": slot("narrow"), "value": {"expr": "datum.tiny"}}),
            color=alt.ColorValue(value=HEATMAP_INK, condition={
                "test": f"datum.shade > {HEATMAP_WHITE_TEXT_ABOVE}", "value": "white"})),
    ]
    if missing:
        layers.insert(0, base.mark_rect(stroke="white", strokeWidth=1)
                      .transform_filter("datum.missing != null")
                      .encode(fill=alt.Fill(field="missing", type="nominal", title=chartkit.NO_NUMBERS,
                                            scale=alt.Scale(domain=slots("missing_names"),
                                                            range=slots("missing_fills")),
                                            legend=alt.Legend(**{**bottom,
                                                                 "direction": "vertical"}))))
    # a fixed height, not a step: Vega-Lite warns about a container width with one
    return template(alt.layer(*layers, data=CELLS).properties(
        width=WIDTH, height=HEIGHT,
        autosize=alt.AutoSizeParams(**{**chartkit.AUTOSIZE, "type": "fit-x"})))


def heatmap_chart(cells: list[CellResult], chart_id: str = "chart-heatmap", *,
                  levels: bool = False) -> Chart | None:
    """The decode matrix as a heatmap of total tok/s; each status without numbers
    has its own labelled fill."""
    data = [x for x in cells if x.phase == contract.DECODE]
    if not any(x.has_numbers and x.total_tok_s is not None for x in data):
        return None
    rows = chartkit.cell_rows(data, levels=levels)
    peak = max(r["total"] or 0 for r in rows) or 1
    for r in rows:
        has = r["total"] is not None
        r["label"] = r["Total tok/s"] if has else chartkit.SHORT_STATUS.get(r["status"], "—")
        r["tiny"] = (words.tok_s(r["total"], whole=True) if has
                     else chartkit.TINY_STATUS.get(r["status"], "—"))
        r["shade"] = r["total"] / peak if has else 0
        r["missing"] = None if has else (words.status_label(r["status"]) if r["status"]
                                         in chartkit.MISSING_FILLS else chartkit.NO_NUMBERS)
    labels = chartkit.context_labels(data)
    levels = [str(v) for v in sorted({x.concurrency for x in data})]
    present = {r["status"] for r in rows if r["missing"]}
    missing = [(words.status_label(s), fill) for s, fill in chartkit.MISSING_FILLS.items()
               if s in present]
    if any(r["missing"] == chartkit.NO_NUMBERS for r in rows):
        missing.append((chartkit.NO_NUMBERS, chartkit.NO_NUMBERS_FILL))
    holes: dict[str, Any] = {"labels": labels, "levels": levels,
                             "narrow": f"width < {chartkit.NARROW_CELL * len(levels)}"}
    if missing:
        holes |= {"missing_names": [m for m, _ in missing],
                  "missing_fills": [v for _, v in missing]}
    spec = _heatmap_template(bool(missing)).fill({"cells": chartkit.slim(rows, (
        "Context", "Requests at once", "Status", "Total tok/s", "TTFT", "total", "label", "tiny",
        "shade", "missing"))}, **holes)
    spec["height"] = heatmap_row_height(len(labels)) * len(labels)
    title = "Decode matrix heatmap"
    cells_xy = [(labels.index(r["Context"]), levels.index(r["Requests at once"]),
                 r["shade"] if r["total"] is not None else r["status"], r["label"]) for r in rows]
    return _make(chart_id, title, "Total tok/s by context and requests at once; cells without "
                 "numbers are coloured by status", spec,
                 lambda: fallback.heatmap(title, labels, levels, cells_xy, chartkit.HEATMAP, legend=missing,
                                          row_height=heatmap_row_height(len(labels)),
                                          ink=HEATMAP_INK, white_above=HEATMAP_WHITE_TEXT_ABOVE))


# --------------------------------------------------------------------------
# SVG fallback
# --------------------------------------------------------------------------


class SvgRenderer:
    """Draws the no-JS fallback SVG of charts (`fallback`, in Python)."""

    def fill(self, charts: list[Chart | None]) -> list[Chart]:
        """Draw the fallback SVG of each chart present (under a millisecond each);
        drop the absent ones."""
        out = [ch for ch in charts if ch is not None]
        for ch in out:
            svg = ch.draw()
            ch.svg = "" if fallback.UNSAFE.search(svg) else svg
        return out
