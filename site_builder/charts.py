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

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import vl_convert as vlc

from rundir import contract as c
from site_builder import fallback as fb
from site_builder import formats as f
from site_builder.aggregate import CellResult
from site_builder.glossary import status_label


def _newest_vega_lite() -> str:
    """The newest Vega-Lite vl-convert ships (the one the specs target)."""
    return max(vlc.get_vegalite_versions(), key=lambda v: tuple(int(x) for x in v.split(".")))


VL_VERSION = _newest_vega_lite()
WIDTH, HEIGHT = 440, 240
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
CONFIG = {
    "font": FONT,
    "view": {"continuousWidth": 300, "continuousHeight": 300},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e6e8eb"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right"},
    "background": "white",
}
# Room for text: the fallback is laid out with estimated font metrics, a
# reader's browser may draw wider glyphs.
PADDING = {"left": 5, "top": 5, "right": 30, "bottom": 5}


@dataclass
class Chart:
    """One chart of a page: its element id, caption, spec, and no-JS fallback."""

    id: str
    title: str
    caption: str
    spec: dict[str, Any]
    svg: str = ""
    draw: Callable[[], str] | None = field(default=None, repr=False, compare=False)

    @property
    def spec_json(self) -> str:
        return json.dumps(self.spec, separators=(",", ":"), sort_keys=True, allow_nan=False)


def vega_versions() -> dict[str, str]:
    """Versions of the libraries in the vendored bundle (they name its file)."""
    return {
        "vega": vlc.get_vega_version(),
        "vega-lite": VL_VERSION,
        "vega-embed": vlc.get_vega_embed_version(),
    }


def bundle_name() -> str:
    v = vega_versions()
    return f"vega-{v['vega']}_vega-lite-{v['vega-lite']}_vega-embed-{v['vega-embed']}.js"


@functools.lru_cache(maxsize=1)
def bundle_js() -> str:
    """Vega, Vega-Lite and vega-embed in one script that sets window globals (built once)."""
    return vlc.javascript_bundle(vl_version=VL_VERSION)


def _make(chart_id: str, title: str, caption: str, spec: dict[str, Any],
          draw: Callable[[], str]) -> Chart:
    full = {**spec, "description": f"{title}. {caption}", "config": CONFIG, "padding": PADDING}
    return Chart(chart_id, title, caption, full, draw=draw)


def _n(name: str, title: str | None = None) -> dict[str, Any]:
    """A nominal field (tooltips, categories)."""
    return {"field": name, "type": "nominal", **({"title": title} if title else {})}


def _q(name: str, title: str | None = None, **kw: Any) -> dict[str, Any]:
    return {"field": name, "type": "quantitative", **({"title": title} if title else {}), **kw}


def _rows(cells: list[CellResult], label: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for x in cells:
        rows.append(
            {
                "run": label,
                "context": x.context,
                "Context": f.context_label(x.context),
                "concurrency": x.concurrency,
                "Requests at once": str(x.concurrency),
                "status": x.status,
                "Status": status_label(x.status) + (" (client-bound)" if x.client_bound else ""),
                "total": x.total_tok_s,
                "per_request": x.per_request_tok_s,
                "ttft": x.ttft_ms,
                "Total tok/s": f.tok_s(x.total_tok_s),
                "Per request tok/s": f.tok_s(x.per_request_tok_s),
                "TTFT": f.ttft(x.ttft_ms),
                "Time between tokens": f.tbt(x.tbt_ms),
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


def _series(rows: list[dict[str, Any]], key: str, x: str, order: list[str] | None = None,
            ) -> list[tuple[str, list[fb.Point]]]:
    """Rows grouped into lines (by key), points ordered by concurrency."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    names = order or sorted(groups)
    return [(n, [(float(r[x]), float(r["total"]))
                 for r in sorted(groups[n], key=lambda r: r["concurrency"])])
            for n in names if n in groups]


LINE_MARK = {"type": "line", "point": {"filled": True, "size": 60}}
RUN_COLOR = {"field": "run", "type": "nominal", "title": "Run", "scale": {"scheme": "tableau10"},
             "legend": {"orient": "bottom", "direction": "vertical", "labelLimit": 520}}
SHORT_STATUS = {c.OVER_CAPACITY: "over cap.", c.LOOPED: "looped", c.ERROR: "error",
                c.PENDING: "not run"}
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
    levels = sorted({x.concurrency for x in cells})
    rows = _rows(cells)
    keys = _DECODE_KEYS + (("per_request",) if x_field == "per_request" else ())
    spec = {
        "data": {"values": _slim(rows, keys)},
        "mark": LINE_MARK,
        "encoding": {
            "x": x, "y": _q("total", "Total tok/s", axis={"format": "~s"}),
            "color": {**_n("Context", "Context"), "scale": {"domain": labels, "scheme": "viridis"}},
            "order": _q("concurrency"), "tooltip": DECODE_TIP,
        },
        "width": WIDTH, "height": HEIGHT,
    }
    ticks = [(float(v), str(v)) for v in levels] if log2 else []
    return _make(chart_id, title, caption, spec, lambda: fb.lines(
        title, _series(rows, "Context", x_field, labels), fb.viridis(len(labels)),
        x_ticks=ticks, x_log2=log2, x_title=x.get("title", ""), y_title="Total tok/s",
        legend_title="Context"))


def decode_chart(cells: list[CellResult], chart_id: str = "chart-decode") -> Chart | None:
    """Total tok/s against concurrency, one line per context (log2 axis)."""
    data = [x for x in cells if x.phase == c.DECODE and x.has_numbers and x.total_tok_s is not None]
    if not data:
        return None
    levels = sorted({x.concurrency for x in data})
    return _context_lines(data, chart_id, "Throughput by concurrency",
                          "Total tok/s against requests at once, one line per context",
                          _log2_axis(levels), "concurrency", True)


def tradeoff_chart(cells: list[CellResult], chart_id: str = "chart-tradeoff") -> Chart | None:
    """What one stream gets (per-request tok/s) against what the server delivers."""
    data = [x for x in cells if x.phase == c.DECODE and x.has_numbers
            and x.total_tok_s is not None and x.per_request_tok_s is not None]
    if not data:
        return None
    return _context_lines(data, chart_id, "Per-request speed against total throughput",
                          "Each point is a concurrency level; up and right is better",
                          _q("per_request", "Per request tok/s"), "per_request", False)


def heatmap_chart(cells: list[CellResult], chart_id: str = "chart-heatmap") -> Chart | None:
    """The decode matrix as a heatmap of total tok/s (grey: no numbers)."""
    data = [x for x in cells if x.phase == c.DECODE]
    if not any(x.has_numbers and x.total_tok_s is not None for x in data):
        return None
    rows = _rows(data)
    peak = max(r["total"] or 0 for r in rows) or 1
    for r in rows:
        has = r["total"] is not None and r["status"] in (c.VALID, c.REQUESTS_QUEUED)
        r["label"] = r["Total tok/s"] if has else SHORT_STATUS.get(r["status"], "—")
        r["shade"] = (r["total"] or 0) / peak if has else 0
        if not has:
            r["total"] = None
    labels = _context_labels(data)
    levels = [str(v) for v in sorted({x.concurrency for x in data})]
    enc = {
        "x": {**_n("Requests at once", "Requests at once"), "sort": levels,
              "axis": {"labelAngle": 0}},
        "y": {**_n("Context", "Context"), "sort": labels},
        "tooltip": [_n("Context"), _n("Requests at once"), _n("Status"), _n("Total tok/s"),
                    _n("TTFT")],
    }
    step = max(24, min(40, 360 // max(1, len(labels))))
    spec = {
        "data": {"values": _slim(rows, ("Context", "Requests at once", "Status", "Total tok/s",
                                        "TTFT", "total", "label", "shade"))},
        "layer": [
            {"mark": {"type": "rect", "color": "#eceef1", "stroke": "white", "strokeWidth": 1},
             "encoding": enc},
            {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 1},
             "transform": [{"filter": "datum.total != null"}],
             "encoding": {**enc, "color": _q("total", "Total tok/s", scale={"scheme": "blues"},
                                             legend={"format": "~s"})}},
            {"mark": {"type": "text", "fontSize": 10},
             "encoding": {**enc, "text": _n("label"), "color": {
                 "condition": {"test": "datum.shade > 0.55", "value": "white"},
                 "value": "#1f2328"}}},
        ],
        "width": {"step": 64}, "height": {"step": step},
    }
    title = "Decode matrix heatmap"
    cells_xy = [(labels.index(r["Context"]), levels.index(r["Requests at once"]),
                 r["shade"] if r["total"] is not None else None, r["label"]) for r in rows]
    return _make(chart_id, title,
                 "Total tok/s by context and requests at once; grey cells have no numbers", spec,
                 lambda: fb.heatmap(title, labels, levels, cells_xy, x_title="Requests at once",
                                    y_title="Context"))


# --------------------------------------------------------------------------
# comparisons across runs
# --------------------------------------------------------------------------


def runs_decode_chart(series: list[tuple[str, list[CellResult]]], context: int,
                      chart_id: str) -> Chart | None:
    """Total tok/s against concurrency at one context, one line per run."""
    rows = []
    for label, cells in series:
        rows += _rows([x for x in cells if x.phase == c.DECODE and x.context == context
                       and x.has_numbers and x.total_tok_s is not None], label)
    if not rows:
        return None
    levels = sorted({r["concurrency"] for r in rows})
    spec = {
        "data": {"values": _slim(rows, ("run", *_DECODE_KEYS))},
        "mark": LINE_MARK,
        "encoding": {
            "x": _log2_axis(levels), "y": _q("total", "Total tok/s", axis={"format": "~s"}),
            "color": RUN_COLOR, "order": _q("concurrency"),
            "tooltip": [_n("run", "Run"), *DECODE_TIP],
        },
        "width": WIDTH, "height": HEIGHT,
    }
    ctx = f.context_label(context)
    title = f"Throughput at {ctx} context"
    lines = _series(rows, "run", "concurrency")
    return _make(chart_id, title,
                 f"Total tok/s against requests at once at {ctx}, one line per run", spec,
                 lambda: fb.lines(title, lines, fb.tableau(len(lines)),
                                  x_ticks=[(float(v), str(v)) for v in levels], x_log2=True,
                                  x_title="Requests at once", y_title="Total tok/s",
                                  legend_title="Run", legend_below=True))


def runs_context_chart(series: list[tuple[str, list[CellResult]]], phase: str,
                       chart_id: str) -> Chart | None:
    """Prefill tok/s, or single-stream decode tok/s, by context, one line per run."""
    rows = []
    for label, cells in series:
        pick = [x for x in cells if x.phase == phase and x.has_numbers and x.total_tok_s is not None
                and (phase == c.PREFILL or x.concurrency == 1)]
        rows += _rows(pick, label)
    if not rows:
        return None
    labels = [f.context_label(v) for v in sorted({r["context"] for r in rows})]
    ytitle = "Prompt tok/s" if phase == c.PREFILL else "Single-stream tok/s"
    spec = {
        "data": {"values": _slim(rows, ("run", "Context", "total", "Total tok/s", "TTFT"))},
        "mark": LINE_MARK,
        "encoding": {
            "x": {**_n("Context", "Context"), "sort": labels, "axis": {"labelAngle": 0}},
            "y": _q("total", ytitle, axis={"format": "~s"}),
            "color": RUN_COLOR,
            "tooltip": [_n("run", "Run"), _n("Context"), _n("Total tok/s", ytitle), _n("TTFT")],
        },
        "width": WIDTH, "height": HEIGHT,
    }
    if phase == c.PREFILL:
        title, caption = "Prefill by run", "Prompt tok/s by context, one line per run"
    else:
        title = "Single-stream decode by run"
        caption = "Decode tok/s of one request at a time by context, one line per run"
    pos = {label: i + 0.5 for i, label in enumerate(labels)}
    for r in rows:
        r["x"] = pos[r["Context"]]
    lines = _series(rows, "run", "x")
    return _make(chart_id, title, caption, spec, lambda: fb.lines(
        title, lines, fb.tableau(len(lines)),
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
        "width": WIDTH, "height": 160,
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
        act += [{"t": t, "v": v, "who": "server (waiting)"}
                for t, v in zip(waiting["t_s"], waiting["value"], strict=True)]
    for r in act:
        r["Requests"] = f.average(r["v"])
        r["Time"] = f"{r['t']:.2f} s"
    active = {
        "data": {"values": act},
        "mark": {"type": "line", "interpolate": "step-after", "point": True},
        "encoding": {"x": _q("t", "Seconds into the window"), "y": _q("v", "Requests"),
                     "color": {"field": "who", "type": "nominal", "title": None,
                               "legend": {"orient": "bottom"}},
                     "tooltip": [_n("who", "Source"), _n("Time"), _n("Requests")]},
        "width": WIDTH, "height": 110,
    }
    title = "Timeline"
    who = list(dict.fromkeys(r["who"] for r in act))
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
