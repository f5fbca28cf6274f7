"""Chart specs of the pages, with a static SVG drawn at build time as a no-JS fallback.

Each chart is a Vega-Lite spec inlined in its page as JSON (vega-embed draws
it from the site's one vendored bundle) plus a plain SVG picture of the same
data inside the element (`fallback`), so a reader without JavaScript still
sees it. Specs are built as plain dicts (what Altair produced for them, minus
its per-chart validation cost, and with only the fields the encodings use),
since a real site has thousands of charts. Tooltip text is pre-formatted with
`formats` so a chart never shows a number differently from the tables.
`publish` skips the pages of unchanged runs, so a rebuild only draws the
charts of runs that changed.
"""

from __future__ import annotations

from typing import Any

from rundir import contract as c
from site_builder import fallback as fb
from site_builder import formats as f
from site_builder.aggregate import CellResult
from site_builder.chartkit import (
    AUTOSIZE,
    FIXED_WIDTH,
    HEIGHT,
    INVALID,
    NARROW_CELL,
    SHORT_STATUS,
    TINY_STATUS,
    VL_VERSION,
    WIDTH,
    Chart,
    bundle_js,
    bundle_name,
    vega_versions,
)
from site_builder.chartkit import color as _color
from site_builder.chartkit import make as _make
from site_builder.chartkit import nominal as _n
from site_builder.chartkit import quantitative as _q
from site_builder.glossary import status_label

__all__ = ["Chart", "SvgRenderer", "bundle_js", "bundle_name", "vega_versions"]
QUEUED = fb.QUEUED_LABEL


def _rows(cells: list[CellResult], label: str | None = None) -> list[dict[str, Any]]:
    """One row per cell. A cell without numbers to plot (Looped, Error, ...) gets null
    plotted fields, so it breaks its line; its tooltip text keeps what was published."""
    rows = []
    for x in cells:
        plot = x.has_numbers
        rows.append(
            {
                "run": label,
                "context": x.context,
                "Context": f.context_label(x.context),
                "concurrency": x.concurrency,
                "Requests at once": str(x.concurrency),
                "status": x.status,
                "Status": status_label(x.status) + (" (client-bound)" if x.client_bound else ""),
                "total": x.total_tok_s if plot else None,
                "per_request": x.per_request_tok_s if plot else None,
                "ttft": x.ttft_ms,
                "Total tok/s": f.tok_s(x.total_tok_s),
                "Per request tok/s": f.tok_s(x.per_request_tok_s),
                "TTFT": f.ttft(x.ttft_ms),
                "Time between tokens": f.tbt(x.tbt_ms),
                "point": QUEUED if x.status == c.REQUESTS_QUEUED else "Valid",
            }
        )
    return rows


def _slim(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Only the fields a spec's encodings use: the rest would be page weight."""
    return [{k: r[k] for k in keys} for r in rows]


def _context_labels(cells: list[CellResult]) -> list[str]:
    return list(dict.fromkeys(f.context_label(x) for x in sorted({x.context for x in cells})))


def _log2_axis(levels: list[int]) -> dict[str, Any]:
    return _q("concurrency", "Requests at once",
              scale={"type": "log", "base": 2, "domain": [min(levels), max(levels)],
                     "nice": False},
              axis={"values": levels, "format": "d", "grid": True})


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def _series(rows: list[dict[str, Any]], key: str, x: str, order: list[str] | None = None,
            ) -> list[tuple[str, list[fb.Point]]]:
    """Rows grouped into lines (by key), points ordered by concurrency; a cell
    without numbers is a (None) gap, a queued one is flagged."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    names = order or sorted(groups)
    return [(n, [(_num(r[x]), _num(r["total"]), r["point"] == QUEUED)
                 for r in sorted(groups[n], key=lambda r: r["concurrency"])])
            for n in names if n in groups]


def _line_spec(rows: list[dict[str, Any]], keys: tuple[str, ...], x: dict[str, Any],
               y: dict[str, Any], color: dict[str, Any], tooltip: list[dict[str, Any]],
               ) -> dict[str, Any]:
    """Lines broken at missing cells (null y), with a point per measured cell:
    filled for Valid, a hollow square for Requests queued (the caption says so)."""
    queued = any(r["point"] == QUEUED for r in rows)
    points: dict[str, Any] = {"tooltip": tooltip}
    if not queued:
        points["color"] = color
    else:
        # fill and stroke share the colour legend (same field, scale and legend)
        points |= {
            "shape": {"field": "point", "type": "nominal", "title": "Point",
                      "scale": {"domain": ["Valid", QUEUED], "range": ["circle", "square"]},
                      # the caption says it: a legend would draw its symbols unstroked
                      "legend": None},
            "fill": {"condition": {"test": f"datum.point === '{QUEUED}'", "value": "white"},
                     **color},
            "stroke": color,
        }
    return {
        "data": {"values": _slim(rows, (*keys, "point") if queued else keys)},
        "encoding": {"x": x, "y": y},
        "layer": [
            {"mark": {"type": "line", "invalid": INVALID},
             "encoding": {"color": color, "order": _q("concurrency")}},
            {"mark": {"type": "point", "filled": True, "size": 60, "opacity": 1,
                      "strokeWidth": 1.5}, "encoding": points},
        ],
        "width": WIDTH, "height": HEIGHT,
    }


def _queued_note(rows: list[dict[str, Any]]) -> str:
    return "; hollow squares: requests queued" if any(r["point"] == QUEUED for r in rows) else ""


RUN_LEGEND = {"orient": "bottom", "direction": "vertical", "columns": 1,
              # long run labels never make the chart wider than its container
              "labelLimit": {"expr": "max(120, containerSize()[0] - 60)"}}
DECODE_TIP = [_n("Context"), _n("Requests at once"), _n("Total tok/s"), _n("Per request tok/s"),
              _n("TTFT"), _n("Status")]
_DECODE_KEYS = ("Context", "Requests at once", "Total tok/s", "Per request tok/s", "TTFT",
                "Status", "concurrency", "total")


def prefill_chart(cells: list[CellResult], chart_id: str = "chart-prefill") -> Chart | None:
    """Prompt tok/s of a cold request at each context length."""
    rows = [r for r in _rows([x for x in cells if x.phase == c.PREFILL and x.has_numbers])
            if r["total"] is not None]
    if not rows:
        return None
    rows.sort(key=lambda r: r["context"])
    labels = [r["Context"] for r in rows]
    title = "Prefill"
    spec = {
        "data": {"values": _slim(rows, ("Context", "total", "Total tok/s", "TTFT"))},
        "mark": {"type": "bar", "color": "#4c78a8", "size": 28},
        "encoding": {
            "x": {**_n("Context", "Context"), "sort": labels, "axis": {"labelAngle": 0}},
            "y": _q("total", "Prompt tok/s", axis={"format": "~s"}),
            "tooltip": [_n("Context"), _n("Total tok/s", "Prompt tok/s"), _n("TTFT")],
        },
        "width": WIDTH, "height": HEIGHT,
    }
    return _make(chart_id, title, "Prompt tok/s of a cold request by context length", spec,
                 lambda: fb.bars(title, labels, [r["total"] for r in rows], x_title="Context",
                                 y_title="Prompt tok/s"))


def _context_lines(cells: list[CellResult], chart_id: str, title: str, caption: str,
                   x: dict[str, Any], x_field: str, log2: bool) -> Chart:
    labels = _context_labels(cells)
    levels = sorted({x.concurrency for x in cells if x.has_numbers})
    rows = _rows(cells)
    keys = _DECODE_KEYS + (("per_request",) if x_field == "per_request" else ())
    spec = _line_spec(rows, keys, x, _q("total", "Total tok/s", axis={"format": "~s"}),
                      _color("Context", "Context", labels), DECODE_TIP)
    ticks = [(float(v), str(v)) for v in levels] if log2 else []
    return _make(chart_id, title, caption + _queued_note(rows), spec, lambda: fb.lines(
        title, _series(rows, "Context", x_field, labels), fb.line_colors(len(labels)),
        x_ticks=ticks, x_log2=log2, x_title=x.get("title", ""), y_title="Total tok/s",
        legend_title="Context"))


def _plotted(cells: list[CellResult], *, per_request: bool = False) -> list[CellResult]:
    """The cells of the contexts that have at least one point to draw."""
    keep = {x.context for x in cells if x.has_numbers and x.total_tok_s is not None
            and (not per_request or x.per_request_tok_s is not None)}
    return [x for x in cells if x.context in keep]


def decode_chart(cells: list[CellResult], chart_id: str = "chart-decode") -> Chart | None:
    """Total tok/s against concurrency, one line per context (log2 axis); a cell
    without numbers breaks its context's line."""
    data = _plotted([x for x in cells if x.phase == c.DECODE])
    if not data:
        return None
    levels = sorted({x.concurrency for x in data if x.has_numbers and x.total_tok_s is not None})
    return _context_lines(data, chart_id, "Throughput by concurrency",
                          "Total tok/s against requests at once, one line per context; "
                          "gaps: no numbers", _log2_axis(levels), "concurrency", True)


def tradeoff_chart(cells: list[CellResult], chart_id: str = "chart-tradeoff") -> Chart | None:
    """What one stream gets (per-request tok/s) against what the server delivers."""
    data = _plotted([x for x in cells if x.phase == c.DECODE], per_request=True)
    if not data:
        return None
    return _context_lines(data, chart_id, "Per-request speed against total throughput",
                          "Each point is a concurrency level; up and right is better",
                          _q("per_request", "Per request tok/s"), "per_request", False)


def heatmap_chart(cells: list[CellResult], chart_id: str = "chart-heatmap") -> Chart | None:
    """The decode matrix as a heatmap of total tok/s; each status without numbers
    has its own labelled fill."""
    data = [x for x in cells if x.phase == c.DECODE]
    if not any(x.has_numbers and x.total_tok_s is not None for x in data):
        return None
    rows = _rows(data)
    peak = max(r["total"] or 0 for r in rows) or 1
    for r in rows:
        has = r["total"] is not None
        r["label"] = r["Total tok/s"] if has else SHORT_STATUS.get(r["status"], "—")
        r["tiny"] = (f.tok_s(r["total"], whole=True) if has
                     else TINY_STATUS.get(r["status"], "—"))
        r["shade"] = r["total"] / peak if has else 0
        r["missing"] = None if has else (status_label(r["status"]) if r["status"]
                                         in fb.MISSING_FILLS else "No numbers")
    labels = _context_labels(data)
    levels = [str(v) for v in sorted({x.concurrency for x in data})]
    present = {r["status"] for r in rows if r["missing"]}
    missing = [(status_label(s), fb.MISSING_FILLS[s]) for s in fb.MISSING_FILLS if s in present]
    if any(r["missing"] == "No numbers" for r in rows):
        missing.append(("No numbers", fb.NO_NUMBERS_FILL))
    enc = {
        "x": {**_n("Requests at once", "Requests at once"), "sort": levels,
              "axis": {"labelAngle": 0}},
        "y": {**_n("Context", "Context"), "sort": labels},
        "tooltip": [_n("Context"), _n("Requests at once"), _n("Status"), _n("Total tok/s"),
                    _n("TTFT")],
    }
    bottom = {"orient": "bottom", "direction": "horizontal"}
    layer: list[dict[str, Any]] = [
        {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 1},
         "transform": [{"filter": "datum.total != null"}],
         "encoding": {**enc, "color": _q("total", "Total tok/s", scale={"scheme": "blues"},
                                         legend={"format": "~s", **bottom})}},
        {"mark": {"type": "text", "fontSize": 10},
         "encoding": {**enc, "text": {
             "condition": {"test": f"width < {NARROW_CELL * len(levels)}", **_n("tiny")},
             **_n("label")}, "color": {
             "condition": {"test": "datum.shade > 0.55", "value": "white"},
             "value": "#1f2328"}}},
    ]
    if missing:
        layer.insert(0, {
            "mark": {"type": "rect", "stroke": "white", "strokeWidth": 1},
            "transform": [{"filter": "datum.missing != null"}],
            "encoding": {**enc, "fill": {**_n("missing", "No numbers"), "scale": {
                "domain": [m for m, _ in missing], "range": [v for _, v in missing]},
                "legend": {**bottom, "direction": "vertical"}}}})
    step = max(24, min(40, 360 // max(1, len(labels))))
    spec = {
        "data": {"values": _slim(rows, ("Context", "Requests at once", "Status", "Total tok/s",
                                        "TTFT", "total", "label", "tiny", "shade",
                                        "missing"))},
        # a fixed height, not a step: Vega-Lite warns about a container width with one
        "layer": layer, "width": WIDTH, "height": step * len(labels),
        "autosize": {**AUTOSIZE, "type": "fit-x"},
    }
    title = "Decode matrix heatmap"
    cells_xy = [(labels.index(r["Context"]), levels.index(r["Requests at once"]),
                 r["shade"] if r["total"] is not None else r["status"], r["label"]) for r in rows]
    return _make(chart_id, title, "Total tok/s by context and requests at once; cells without "
                 "numbers are coloured by status", spec,
                 lambda: fb.heatmap(title, labels, levels, cells_xy, x_title="Requests at once",
                                    y_title="Context", legend=missing))


# --------------------------------------------------------------------------
# comparisons across runs
# --------------------------------------------------------------------------


def _run_color(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return _color("run", "Run", sorted({r["run"] for r in rows}), legend=RUN_LEGEND)


def runs_decode_chart(series: list[tuple[str, list[CellResult]]], context: int,
                      chart_id: str) -> Chart | None:
    """Total tok/s against concurrency at one context, one line per run (broken
    where a run's cell has no numbers)."""
    rows = []
    for label, cells in series:
        rows += _rows(_plotted([x for x in cells if x.phase == c.DECODE
                                and x.context == context]), label)
    if not rows:
        return None
    levels = sorted({r["concurrency"] for r in rows if r["total"] is not None})
    spec = _line_spec(rows, ("run", *_DECODE_KEYS), _log2_axis(levels),
                      _q("total", "Total tok/s", axis={"format": "~s"}), _run_color(rows),
                      [_n("run", "Run"), *DECODE_TIP])
    ctx = f.context_label(context)
    title = f"Throughput at {ctx} context"
    lines = _series(rows, "run", "concurrency")
    return _make(chart_id, title, f"Total tok/s against requests at once at {ctx}, one line per "
                 f"run{_queued_note(rows)}", spec,
                 lambda: fb.lines(title, lines, fb.line_colors(len(lines)),
                                  x_ticks=[(float(v), str(v)) for v in levels], x_log2=True,
                                  x_title="Requests at once", y_title="Total tok/s",
                                  legend_title="Run", legend_below=True))


def runs_context_chart(series: list[tuple[str, list[CellResult]]], phase: str,
                       chart_id: str) -> Chart | None:
    """Prefill tok/s, or single-stream decode tok/s, by context, one line per run."""
    rows = []
    for label, cells in series:
        pick = [x for x in cells if x.phase == phase and (phase == c.PREFILL or x.concurrency == 1)]
        if any(x.has_numbers and x.total_tok_s is not None for x in pick):
            rows += _rows(pick, label)
    if not rows:
        return None
    labels = [f.context_label(v) for v in sorted({r["context"] for r in rows
                                                  if r["total"] is not None})]
    rows = [r for r in rows if r["Context"] in labels]
    ytitle = "Prompt tok/s" if phase == c.PREFILL else "Single-stream tok/s"
    spec = _line_spec(rows, ("run", "Context", "total", "Total tok/s", "TTFT", "context"),
                      {**_n("Context", "Context"), "sort": labels, "axis": {"labelAngle": 0}},
                      _q("total", ytitle, axis={"format": "~s"}), _run_color(rows),
                      [_n("run", "Run"), _n("Context"), _n("Total tok/s", ytitle), _n("TTFT")])
    spec["layer"][0]["encoding"]["order"] = _q("context")
    if phase == c.PREFILL:
        title, caption = "Prefill by run", "Prompt tok/s by context, one line per run"
    else:
        title = "Single-stream decode by run"
        caption = "Decode tok/s of one request at a time by context, one line per run"
    pos = {label: i + 0.5 for i, label in enumerate(labels)}
    for r in rows:
        r["x"] = pos[r["Context"]]
        r["concurrency"] = r["context"]  # _series orders points by this
    lines = _series(rows, "run", "x")
    return _make(chart_id, title, caption + _queued_note(rows), spec, lambda: fb.lines(
        title, lines, fb.line_colors(len(lines)),
        x_ticks=[(pos[x], x) for x in labels], x_log2=False, x_title="Context", y_title=ytitle,
        legend_title="Run", legend_below=True, x_domain=(0.0, float(len(labels)))))


# --------------------------------------------------------------------------
# drill-down
# --------------------------------------------------------------------------


def ttft_histogram(values_ms: list[float], chart_id: str = "chart-ttft") -> Chart | None:
    """Distribution of the cell's per-request TTFTs."""
    if not values_ms:
        return None
    spec = {
        "data": {"values": [{"ttft": v} for v in values_ms]},
        "mark": {"type": "bar", "color": "#4c78a8"},
        "encoding": {
            "x": _q("ttft", "TTFT (ms)", bin={"maxbins": 30}, axis={"format": "~r"}),
            "y": {"aggregate": "count", "type": "quantitative", "title": "Requests"},
            "tooltip": [{"field": "ttft", "type": "quantitative", "bin": True, "title": "TTFT (ms)",
                         "format": ",.0f"},
                        {"aggregate": "count", "type": "quantitative", "title": "Requests"}],
        },
        "width": WIDTH, "height": 200,
    }
    title = "TTFT distribution"
    return _make(chart_id, title, "Time to first token of each request", spec,
                 lambda: fb.histogram(title, fb.value_bins(values_ms), x_title="TTFT (ms)",
                                      y_title="Requests"))


def tbt_histogram(tbt: dict[str, Any], median_ms: float | None,
                  chart_id: str = "chart-tbt") -> Chart | None:
    """Distribution of per-token gaps (a k-token chunk counts k gaps)."""
    edges, counts = tbt.get("edges") or [], tbt.get("counts") or []
    if not counts:
        return None
    rows = [{"lo": edges[i], "hi": edges[i + 1], "tokens": counts[i],
             "Gap": f"{f.tbt(edges[i])} – {f.tbt(edges[i + 1])}", "Tokens": f.count(counts[i])}
            for i in range(len(counts))]
    bars = {
        "data": {"values": rows},
        "mark": {"type": "bar", "color": "#72b7b2"},
        "encoding": {"x": _q("lo", "Time between tokens (ms)", bin="binned"), "x2": {"field": "hi"},
                     "y": _q("tokens", "Tokens"), "tooltip": [_n("Gap"), _n("Tokens")]},
    }
    spec: dict[str, Any] = bars
    if median_ms is not None:
        rule = {
            "data": {"values": [{"m": median_ms, "Median": f.tbt(median_ms)}]},
            "mark": {"type": "rule", "color": "#e45756", "strokeDash": [4, 3], "strokeWidth": 2},
            "encoding": {"x": _q("m"), "tooltip": [_n("Median", "Median per request")]},
        }
        spec = {"layer": [bars, rule]}
    spec = {**spec, "width": WIDTH, "height": 200}
    caption = "Gap before each generated token inside the window; dashed: the cell's median"
    if tbt.get("overflow"):
        caption += f" ({f.count(tbt['overflow'])} slower tokens beyond the axis)"
    title = "Time between tokens distribution"
    bins = [(edges[i], edges[i + 1], counts[i]) for i in range(len(counts))]
    return _make(chart_id, title, caption, spec, lambda: fb.histogram(
        title, bins, x_title="Time between tokens (ms)", y_title="Tokens", color="#72b7b2",
        rule=median_ms))


def timeline_chart(detail: dict[str, Any], chart_id: str = "chart-timeline") -> Chart | None:
    """Output tok/s over the window, and how many requests were running."""
    tl = detail.get("timeline") or {}
    if not tl.get("t_s"):
        return None
    width = (tl.get("width_s") or [0.5])[0]
    rows = [{"t": t, "t2": t + width, "tok_s": v, "Time": f"{t:.1f}–{t + width:.1f} s",
             "Output tok/s": f.tok_s(v)} for t, v in zip(tl["t_s"], tl["tok_s"], strict=True)]
    tok = {
        "data": {"values": rows},
        "mark": {"type": "bar", "color": "#4c78a8", "opacity": 0.85},
        "encoding": {"x": _q("t", "Seconds into the window", bin="binned"), "x2": {"field": "t2"},
                     "y": _q("tok_s", "Output tok/s"),
                     "tooltip": [_n("Time"), _n("Output tok/s")]},
        "width": FIXED_WIDTH, "height": 160,
    }
    running = detail.get("running")
    if running:
        act = [{"t": t, "v": v, "who": "server (running)"}
               for t, v in zip(running["t_s"], running["value"], strict=True)]
        act.append({"t": tl["t_s"][-1] + width, "v": running["value"][-1],
                    "who": "server (running)"})
    else:
        act = [{"t": t + width / 2, "v": v, "who": "client (streaming)"}
               for t, v in zip(tl["t_s"], tl["client_active"], strict=True)]
    waiting = detail.get("waiting")
    if waiting and any(v > 0 for v in waiting["value"]):
        # drawn first (wide, dashed), so the running line stays visible on top of it
        act = [{"t": t, "v": v, "who": "server (waiting)"}
               for t, v in zip(waiting["t_s"], waiting["value"], strict=True)] + act
    for r in act:
        r["Requests"] = f.average(r["v"])
        r["Time"] = f"{r['t']:.2f} s"
    who = list(dict.fromkeys(r["who"] for r in act))
    style = [fb.TIMELINE_STYLE[w] for w in who]
    scale = {"domain": who, "range": [s[0] for s in style]}
    layers = [{
        "transform": [{"filter": {"field": "who", "equal": w}}],
        "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": st[1],
                 "point": {"size": 16}},
        "encoding": {
            "x": _q("t", "Seconds into the window"), "y": _q("v", "Requests"),
            "color": {"field": "who", "type": "nominal", "title": None, "scale": scale,
                      "legend": {"orient": "bottom"}},
            "strokeDash": {"field": "who", "type": "nominal", "title": None, "scale": {
                "domain": who, "range": [[float(v) for v in s[2].split()] or [1, 0]
                                         for s in style]}, "legend": {"orient": "bottom"}},
            "tooltip": [_n("who", "Source"), _n("Time"), _n("Requests")]},
    } for w, st in zip(who, style, strict=True)]
    active = {"data": {"values": act}, "layer": layers, "width": FIXED_WIDTH, "height": 110}
    title = "Timeline"
    lines = [(w, [(float(r["t"]), float(r["v"])) for r in act if r["who"] == w]) for w in who]
    bins = [(r["t"], r["t2"], r["tok_s"]) for r in rows]
    return _make(chart_id, title, "Output tokens per second across the window, and the "
                 "requests running at the same time", {"vconcat": [tok, active], "spacing": 12},
                 lambda: fb.timeline(title, bins, lines))


# --------------------------------------------------------------------------
# SVG fallback
# --------------------------------------------------------------------------


class SvgRenderer:
    """Renders the no-JS fallback SVG of charts: drawn in Python (`fallback`), or
    with vl-convert for a chart that cannot draw itself."""

    def __init__(self) -> None:
        self.rendered = 0

    def svg(self, chart: Chart) -> str:
        """The chart as inline-safe SVG rendered by vl-convert (empty when unsafe)."""
        self.rendered += 1
        return fb.vl_convert_svg(chart.spec, chart.title, chart.id, VL_VERSION)

    def fill(self, charts: list[Chart | None]) -> list[Chart]:
        """Render the fallback SVG of each chart present; drop the absent ones.

        Charts that can draw their own picture (all of this module's) do, in
        well under a millisecond; others go through vl-convert (`svg`).
        """
        out = [ch for ch in charts if ch is not None]
        for ch in out:
            if ch.draw is None:
                ch.svg = self.svg(ch)
                continue
            svg = ch.draw()
            self.rendered += 1
            ch.svg = "" if fb.UNSAFE.search(svg) else svg
        return out
