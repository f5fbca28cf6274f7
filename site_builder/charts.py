"""Altair charts of the pages, with an SVG rendered at build time as a no-JS fallback.

Each chart is a Vega-Lite spec inlined in its page as JSON (vega-embed draws
it from the site's one vendored bundle) plus the same chart rendered to SVG
by vl-convert inside the element, so a reader without JavaScript still sees
it. Tooltip text is pre-formatted with `formats` so a chart never shows a
number differently from the tables. `publish` skips the pages of unchanged
runs, so a rebuild only renders the charts of runs that changed.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd
import vl_convert as vlc

from rundir import contract as c
from site_builder import formats as f
from site_builder.aggregate import CellResult
from site_builder.glossary import status_label

VL_VERSION = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
WIDTH, HEIGHT = 440, 240
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
CONFIG = {
    "font": FONT,
    "view": {"stroke": None},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e6e8eb"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right"},
    "background": "white",
}


@dataclass
class Chart:
    """One chart of a page: its element id, caption, spec, and no-JS fallback."""

    id: str
    title: str
    caption: str
    spec: dict[str, Any]
    svg: str = ""

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


def _spec(chart: alt.TopLevelMixin, description: str) -> dict[str, Any]:
    spec = chart.properties(description=description).to_dict(validate=False)
    spec.pop("$schema", None)  # vega-embed warns when it differs from the bundled version
    spec["config"] = {**CONFIG, **spec.get("config", {})}
    # Room for text: the SVG fallback is laid out with vl-convert's font metrics, a
    # reader's browser may draw wider glyphs.
    spec["padding"] = {"left": 5, "top": 5, "right": 30, "bottom": 5}
    return spec


def _make(chart_id: str, title: str, caption: str, chart: alt.TopLevelMixin) -> Chart:
    return Chart(chart_id, title, caption, _spec(chart, f"{title}. {caption}"))


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


def _context_scale(cells: list[CellResult]) -> tuple[list[str], alt.Scale]:
    labels = list(dict.fromkeys(f.context_label(x) for x in sorted({x.context for x in cells})))
    return labels, alt.Scale(domain=labels, scheme="viridis")


def _log2_axis(levels: list[int]) -> alt.X:
    return alt.X(
        "concurrency:Q",
        title="Requests at once",
        scale=alt.Scale(type="log", base=2, domain=[min(levels), max(levels)], nice=False),
        axis=alt.Axis(values=levels, format="d", grid=True),
    )


RUN_COLOR = alt.Color("run:N", title="Run", scale=alt.Scale(scheme="tableau10"),
                      legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=520))
SHORT_STATUS = {c.OVER_CAPACITY: "over cap.", c.LOOPED: "looped", c.ERROR: "error",
                c.PENDING: "not run"}
DECODE_TIP = ["Context:N", "Requests at once:N", "Total tok/s:N", "Per request tok/s:N",
              "TTFT:N", "Status:N"]


def prefill_chart(cells: list[CellResult], chart_id: str = "chart-prefill") -> Chart | None:
    """Prompt tok/s of a cold request at each context length."""
    rows = [r for r in _rows([x for x in cells if x.phase == c.PREFILL and x.has_numbers])
            if r["total"] is not None]
    if not rows:
        return None
    labels = [r["Context"] for r in sorted(rows, key=lambda r: r["context"])]
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar(color="#4c78a8", size=28)
        .encode(
            x=alt.X("Context:N", sort=labels, title="Context", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("total:Q", title="Prompt tok/s", axis=alt.Axis(format="~s")),
            tooltip=["Context:N", alt.Tooltip("Total tok/s:N", title="Prompt tok/s"), "TTFT:N"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )
    return _make(chart_id, "Prefill", "Prompt tok/s of a cold request by context length", chart)


def decode_chart(cells: list[CellResult], chart_id: str = "chart-decode") -> Chart | None:
    """Total tok/s against concurrency, one line per context (log2 axis)."""
    data = [x for x in cells if x.phase == c.DECODE and x.has_numbers and x.total_tok_s is not None]
    if not data:
        return None
    _, scale = _context_scale(data)
    levels = sorted({x.concurrency for x in data})
    chart = (
        alt.Chart(pd.DataFrame(_rows(data)))
        .mark_line(point=alt.OverlayMarkDef(size=60, filled=True))
        .encode(
            x=_log2_axis(levels),
            y=alt.Y("total:Q", title="Total tok/s", axis=alt.Axis(format="~s")),
            color=alt.Color("Context:N", scale=scale, title="Context"),
            order="concurrency:Q",
            tooltip=DECODE_TIP,
        )
        .properties(width=WIDTH, height=HEIGHT)
    )
    return _make(chart_id, "Throughput by concurrency",
                 "Total tok/s against requests at once, one line per context", chart)


def tradeoff_chart(cells: list[CellResult], chart_id: str = "chart-tradeoff") -> Chart | None:
    """What one stream gets (per-request tok/s) against what the server delivers."""
    data = [x for x in cells if x.phase == c.DECODE and x.has_numbers
            and x.total_tok_s is not None and x.per_request_tok_s is not None]
    if not data:
        return None
    _, scale = _context_scale(data)
    chart = (
        alt.Chart(pd.DataFrame(_rows(data)))
        .mark_line(point=alt.OverlayMarkDef(size=60, filled=True))
        .encode(
            x=alt.X("per_request:Q", title="Per request tok/s"),
            y=alt.Y("total:Q", title="Total tok/s", axis=alt.Axis(format="~s")),
            color=alt.Color("Context:N", scale=scale, title="Context"),
            order="concurrency:Q",
            tooltip=DECODE_TIP,
        )
        .properties(width=WIDTH, height=HEIGHT)
    )
    return _make(chart_id, "Per-request speed against total throughput",
                 "Each point is a concurrency level; up and right is better", chart)


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
    labels, _ = _context_scale(data)
    levels = [str(v) for v in sorted({x.concurrency for x in data})]
    base = alt.Chart(pd.DataFrame(rows)).encode(
        x=alt.X("Requests at once:N", sort=levels, title="Requests at once",
                axis=alt.Axis(labelAngle=0)),
        y=alt.Y("Context:N", sort=labels, title="Context"),
        tooltip=["Context:N", "Requests at once:N", "Status:N", "Total tok/s:N", "TTFT:N"],
    )
    grey = base.mark_rect(color="#eceef1", stroke="white", strokeWidth=1)
    rect = base.transform_filter("datum.total != null").mark_rect(
        stroke="white", strokeWidth=1
    ).encode(
        color=alt.Color("total:Q", title="Total tok/s", scale=alt.Scale(scheme="blues"),
                        legend=alt.Legend(format="~s")),
    )
    text = base.mark_text(fontSize=10).encode(
        text="label:N",
        color=alt.condition("datum.shade > 0.55", alt.value("white"), alt.value("#1f2328")),
    )
    step = max(24, min(40, 360 // max(1, len(labels))))
    chart = (grey + rect + text).properties(width=alt.Step(64), height=alt.Step(step))
    return _make(chart_id, "Decode matrix heatmap",
                 "Total tok/s by context and requests at once; grey cells have no numbers", chart)


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
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_line(point=alt.OverlayMarkDef(size=60, filled=True))
        .encode(
            x=_log2_axis(levels),
            y=alt.Y("total:Q", title="Total tok/s", axis=alt.Axis(format="~s")),
            color=RUN_COLOR,
            order="concurrency:Q",
            tooltip=[alt.Tooltip("run:N", title="Run"), *DECODE_TIP],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )
    ctx = f.context_label(context)
    return _make(chart_id, f"Throughput at {ctx} context",
                 f"Total tok/s against requests at once at {ctx}, one line per run", chart)


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
    title = "Prompt tok/s" if phase == c.PREFILL else "Single-stream tok/s"
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_line(point=alt.OverlayMarkDef(size=60, filled=True))
        .encode(
            x=alt.X("Context:N", sort=labels, title="Context", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("total:Q", title=title, axis=alt.Axis(format="~s")),
            color=RUN_COLOR,
            tooltip=[alt.Tooltip("run:N", title="Run"), "Context:N",
                     alt.Tooltip("Total tok/s:N", title=title), "TTFT:N"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )
    if phase == c.PREFILL:
        return _make(chart_id, "Prefill by run", "Prompt tok/s by context, one line per run",
                     chart)
    return _make(chart_id, "Single-stream decode by run",
                 "Decode tok/s of one request at a time by context, one line per run", chart)


# --------------------------------------------------------------------------
# drill-down
# --------------------------------------------------------------------------


def ttft_histogram(values_ms: list[float], chart_id: str = "chart-ttft") -> Chart | None:
    """Distribution of the cell's per-request TTFTs."""
    if not values_ms:
        return None
    rows = [{"ttft": v} for v in values_ms]
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar(color="#4c78a8")
        .encode(
            x=alt.X("ttft:Q", bin=alt.Bin(maxbins=30), title="TTFT (ms)",
                    axis=alt.Axis(format="~r")),
            y=alt.Y("count():Q", title="Requests"),
            tooltip=[alt.Tooltip("ttft:Q", bin=True, title="TTFT (ms)", format=",.0f"),
                     alt.Tooltip("count():Q", title="Requests")],
        )
        .properties(width=WIDTH, height=200)
    )
    return _make(chart_id, "TTFT distribution", "Time to first token of each request", chart)


def tbt_histogram(tbt: dict[str, Any], median_ms: float | None,
                  chart_id: str = "chart-tbt") -> Chart | None:
    """Distribution of per-token gaps (a k-token chunk counts k gaps)."""
    edges, counts = tbt.get("edges") or [], tbt.get("counts") or []
    if not counts:
        return None
    rows = [{"lo": edges[i], "hi": edges[i + 1], "tokens": counts[i],
             "Gap": f"{f.tbt(edges[i])} – {f.tbt(edges[i + 1])}", "Tokens": f.count(counts[i])}
            for i in range(len(counts))]
    bars = alt.Chart(pd.DataFrame(rows)).mark_bar(color="#72b7b2").encode(
        x=alt.X("lo:Q", title="Time between tokens (ms)", bin="binned"),
        x2="hi:Q",
        y=alt.Y("tokens:Q", title="Tokens"),
        tooltip=["Gap:N", "Tokens:N"],
    )
    layers: alt.TopLevelMixin = bars
    if median_ms is not None:
        rule = alt.Chart(pd.DataFrame([{"m": median_ms, "Median": f.tbt(median_ms)}])).mark_rule(
            color="#e45756", strokeDash=[4, 3], strokeWidth=2
        ).encode(x="m:Q", tooltip=[alt.Tooltip("Median:N", title="Median per request")])
        layers = bars + rule
    chart = layers.properties(width=WIDTH, height=200)
    caption = "Gap before each generated token inside the window; dashed: the cell's median"
    if tbt.get("overflow"):
        caption += f" ({f.count(tbt['overflow'])} slower tokens beyond the axis)"
    return _make(chart_id, "Time between tokens distribution", caption, chart)


def timeline_chart(detail: dict[str, Any], chart_id: str = "chart-timeline") -> Chart | None:
    """Output tok/s over the window, and how many requests were running."""
    tl = detail.get("timeline") or {}
    if not tl.get("t_s"):
        return None
    width = (tl.get("width_s") or [0.5])[0]
    rows = [{"t": t, "t2": t + width, "tok_s": v, "Time": f"{t:.1f}–{t + width:.1f} s",
             "Output tok/s": f.tok_s(v)} for t, v in zip(tl["t_s"], tl["tok_s"], strict=True)]
    tok = alt.Chart(pd.DataFrame(rows)).mark_bar(color="#4c78a8", opacity=0.85).encode(
        x=alt.X("t:Q", title="Seconds into the window", bin="binned"),
        x2="t2:Q",
        y=alt.Y("tok_s:Q", title="Output tok/s"),
        tooltip=["Time:N", "Output tok/s:N"],
    ).properties(width=WIDTH, height=160)
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
    active = alt.Chart(pd.DataFrame(act)).mark_line(interpolate="step-after", point=True).encode(
        x=alt.X("t:Q", title="Seconds into the window"),
        y=alt.Y("v:Q", title="Requests"),
        color=alt.Color("who:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("who:N", title="Source"), "Time:N", "Requests:N"],
    ).properties(width=WIDTH, height=110)
    chart = alt.vconcat(tok, active, spacing=12)
    return _make(chart_id, "Timeline", "Output tokens per second across the window, and the "
                 "requests running at the same time", chart)


# --------------------------------------------------------------------------
# SVG fallback
# --------------------------------------------------------------------------

_UNSAFE = re.compile(
    r"<\s*(script|foreignObject|iframe|object|embed|image|use)\b|<[^>]*\son[a-z]+\s*=|javascript:",
    re.IGNORECASE,
)
_ID = re.compile(r'\bid="([^"]+)"')


def _scope_ids(svg: str, prefix: str) -> str:
    """Prefix SVG element ids so several inline charts on a page never collide."""
    ids = set(_ID.findall(svg))
    for i in sorted(ids, key=len, reverse=True):
        svg = svg.replace(f'id="{i}"', f'id="{prefix}-{i}"')
        svg = svg.replace(f"url(#{i})", f"url(#{prefix}-{i})")
        svg = svg.replace(f'href="#{i}"', f'href="#{prefix}-{i}"')
    return svg


class SvgRenderer:
    """Renders chart specs to inline-safe SVG with vl-convert (the no-JS fallback)."""

    def __init__(self) -> None:
        self.rendered = 0

    def svg(self, chart: Chart) -> str:
        """The chart as inline-safe SVG (empty when it cannot be rendered safely)."""
        # allowed_base_urls=[]: a build never fetches anything (specs carry their data).
        svg = vlc.vegalite_to_svg(chart.spec, vl_version=VL_VERSION, allowed_base_urls=[])
        self.rendered += 1
        if _UNSAFE.search(svg):
            return ""
        svg = svg.replace("<svg ", f'<svg role="img" aria-label="{_attr(chart.title)}" ', 1)
        return _scope_ids(svg, chart.id)

    def fill(self, charts: list[Chart | None]) -> list[Chart]:
        """Render the fallback SVG of each chart present; drop the absent ones."""
        out = [ch for ch in charts if ch is not None]
        for ch in out:
            ch.svg = self.svg(ch)
        return out


def _attr(text: str) -> str:
    return (text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;"))
