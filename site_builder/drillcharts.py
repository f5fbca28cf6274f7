"""The drill-down pages' charts: TTFT and time-between-tokens distributions
(histograms, and per-request CDFs with the published percentiles marked), the
token timeline and, for runs with GPU telemetry, power and clocks on the same
bins.

Written like the run pages' charts (`charts`): each kind an Altair chart over
named datasets, compiled once per process into a `chartkit` template and
filled per page, with the no-JS picture drawn by `fallback` from the same
`Look`.
"""

from __future__ import annotations

from typing import Any

import altair as alt

from rundir import tails, words
from site_builder import chartkit, drilldown, fallback, formats, scales
from site_builder.chartkit import INVALID, WIDTH, Chart, Template, nominal, slots, template
from site_builder.chartkit import make as _make

CELLS = alt.Data(name="cells")
# Layout read by each chart's template and by its fallback alike (defined once,
# in `fallback`): plot heights, the median rule's style, the gap between panels.
HISTOGRAM_HEIGHT, MEDIAN_RULE = fallback.HISTOGRAM_HEIGHT, fallback.MEDIAN_RULE
TIMELINE_HEIGHTS, POWER_HEIGHTS, PANEL_GAP = (fallback.TIMELINE_HEIGHTS, fallback.POWER_HEIGHTS,
                                              fallback.PANEL_GAP)
CDF_HEIGHT, SHARE_TICKS, LABEL_ROWS = fallback.CDF_HEIGHT, fallback.CDF_SHARE_TICKS, fallback.LABEL_ROWS
LOG_SPREAD = 20  # a CDF's x axis is logarithmic when its largest value passes 20× its smallest


@chartkit.compiled
def _ttft_template() -> Template:
    look = chartkit.TTFT
    return template(alt.Chart(CELLS).mark_bar(color=look.color).encode(
        x=alt.X(field="ttft", type="quantitative", title=look.x, bin=alt.Bin(maxbins=30),
                axis=alt.Axis(format="~r")),
        y=alt.Y(aggregate="count", type="quantitative", title=look.y),
        tooltip=[alt.Tooltip(field="ttft", type="quantitative", bin=True, title=look.x,
                             format=",.0f"),
                 alt.Tooltip(aggregate="count", type="quantitative", title=look.y)],
    ).properties(width=WIDTH, height=HISTOGRAM_HEIGHT))


def ttft_histogram(values_ms: list[float], chart_id: str = "chart-ttft") -> Chart | None:
    """Distribution of the cell's per-request TTFTs."""
    if not values_ms:
        return None
    spec = _ttft_template().fill({"cells": [{"ttft": v} for v in values_ms]})
    title = "TTFT distribution"
    return _make(chart_id, title, "Time to first token of each request", spec,
                 lambda: fallback.histogram(title, scales.value_bins(values_ms), chartkit.TTFT,
                                            height=HISTOGRAM_HEIGHT, rule_style=MEDIAN_RULE))


@chartkit.compiled
def _tbt_template(median: bool) -> Template:
    look = chartkit.TBT
    bars = alt.Chart(alt.Data(name="bins")).mark_bar(color=look.color).encode(
        x=alt.X(field="lo", type="quantitative", title=look.x, bin="binned"),
        x2=alt.X2(field="hi"), y=alt.Y(field="tokens", type="quantitative", title=look.y),
        tooltip=[nominal("Gap"), nominal("Tokens")])
    chart: Any = bars
    if median:
        chart = alt.layer(bars, alt.Chart(alt.Data(name="median")).mark_rule(
            color=chartkit.TBT_MEDIAN, strokeDash=list(MEDIAN_RULE[1]), strokeWidth=MEDIAN_RULE[0]).encode(
            x=alt.X(field="m", type="quantitative"),
            tooltip=[nominal("Median", "Median per request")]))
    return template(chart.properties(width=WIDTH, height=HISTOGRAM_HEIGHT))


def tbt_histogram(tbt: dict[str, Any], median_ms: float | None,
                  chart_id: str = "chart-tbt") -> Chart | None:
    """Distribution of per-token gaps (a k-token chunk counts k gaps); a bin's
    Gap text has the decimals its width needs (one at least, as every TBT)."""
    edges, counts = tbt.get("edges") or [], tbt.get("counts") or []
    if not counts:
        return None
    digits = formats.step_digits(min(b - a for a, b in zip(edges, edges[1:], strict=False)), least=1)
    rows = [{"lo": edges[i], "hi": edges[i + 1], "tokens": counts[i],
             "Gap": f"{formats.tbt(edges[i], digits)} – {formats.tbt(edges[i + 1], digits)}",
             "Tokens": formats.count(counts[i])}
            for i in range(len(counts))]
    data = {"bins": rows}
    if median_ms is not None:
        data["median"] = [{"m": median_ms, "Median": formats.tbt(median_ms)}]
    spec = _tbt_template(median_ms is not None).fill(data)
    caption = "Gap before each generated token inside the window; dashed: the cell's median"
    if tbt.get("overflow"):
        caption += f" ({formats.count(tbt['overflow'])} slower tokens beyond the axis)"
    title = "Time between tokens distribution"
    bins = [(edges[i], edges[i + 1], counts[i]) for i in range(len(counts))]
    return _make(chart_id, title, caption, spec,
                 lambda: fallback.histogram(title, bins, chartkit.TBT, rule=median_ms,
                                            height=HISTOGRAM_HEIGHT, rule_style=MEDIAN_RULE))


@chartkit.compiled
def _timeline_template(who: tuple[str, ...]) -> Template:
    """Output tok/s bars above the requests running; one line per source in `who`,
    drawn in that order (waiting first, so running stays visible on top of it)."""
    tokens, active = chartkit.TIMELINE_TOKENS, chartkit.TIMELINE_ACTIVE
    tok = alt.Chart(alt.Data(name="bins")).mark_bar(color=tokens.color, opacity=0.85).encode(
        x=alt.X(field="t", type="quantitative", title=tokens.x, bin="binned"),
        x2=alt.X2(field="t2"), y=alt.Y(field="tok_s", type="quantitative", title=tokens.y),
        tooltip=[nominal("Time"), nominal("Output tok/s")],
    ).properties(width=chartkit.FIXED_WIDTH, height=TIMELINE_HEIGHTS[0])
    style = [chartkit.TIMELINE_STYLE[w] for w in who]
    legend = alt.Legend(orient="bottom")
    color = alt.Color(field="who", type="nominal", title=None, legend=legend, scale=alt.Scale(
        domain=list(who), range=[s[0] for s in style]))
    dash = alt.StrokeDash(field="who", type="nominal", title=None, legend=legend, scale=alt.Scale(
        domain=list(who), range=[[float(v) for v in s[2].split()] or [1, 0] for s in style]))
    lines = [alt.Chart().transform_filter(alt.FieldEqualPredicate(field="who", equal=w))
             .mark_line(interpolate="step-after", strokeWidth=s[1], point={"size": 16})
             .encode(x=alt.X(field="t", type="quantitative", title=active.x),
                     y=alt.Y(field="v", type="quantitative", title=active.y),
                     color=color, strokeDash=dash,
                     tooltip=[nominal("who", "Source"), nominal("Time"), nominal("Requests")])
             for w, s in zip(who, style, strict=True)]
    running = alt.layer(*lines, data=alt.Data(name="activity")).properties(
        width=chartkit.FIXED_WIDTH, height=TIMELINE_HEIGHTS[1])
    return template(alt.vconcat(tok, running, spacing=PANEL_GAP))


def timeline_chart(detail: dict[str, Any], chart_id: str = "chart-timeline") -> Chart | None:
    """Output tok/s over the window, and how many requests were running."""
    tl = detail.get("timeline") or {}
    if not tl.get("t_s"):
        return None
    width = (tl.get("width_s") or [0.5])[0]
    # t and width carry 3 and 4 decimals: t2 too, without float noise (0.30000000000000004)
    rows = [{"t": t, "t2": round(t + width, 4), "tok_s": v, "Time": formats.seconds_range(t, width),
             "Output tok/s": words.tok_s(v)} for t, v in zip(tl["t_s"], tl["tok_s"], strict=True)]
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
        r["Requests"] = formats.average(r["v"])
        r["Time"] = f"{r['t']:.2f} s"
    who = tuple(dict.fromkeys(r["who"] for r in act))
    spec = _timeline_template(who).fill({"bins": rows, "activity": act})
    title = "Timeline"
    lines = [(w, [(float(r["t"]), float(r["v"])) for r in act if r["who"] == w]) for w in who]
    bins = [(r["t"], r["t2"], r["tok_s"]) for r in rows]
    return _make(chart_id, title, "Output tokens per second across the window, and the "
                 "requests running at the same time", spec, lambda: fallback.timeline(
                     title, bins, lines, heights=TIMELINE_HEIGHTS, gap=PANEL_GAP))


@chartkit.compiled
def _power_template() -> Template:
    """GPU power above the SM clock, x from 0 to the window's end like the token timeline."""

    def panel(look: chartkit.Look, field: str, tip: str, height: int) -> alt.Chart:
        return alt.Chart(alt.Data(name="power")).mark_line(
            color=look.color, invalid=INVALID, point={"size": 16, "color": look.color}).encode(
            x=alt.X(field="t", type="quantitative", title=look.x,
                    scale=alt.Scale(domain=slots("x_domain"), nice=False)),
            y=alt.Y(field=field, type="quantitative", title=look.y),
            tooltip=[nominal("Time"), nominal(tip)],
        ).properties(width=chartkit.FIXED_WIDTH, height=height)
    top, bottom = POWER_HEIGHTS
    return template(alt.vconcat(panel(chartkit.POWER, "w", "Power", top),
                                panel(chartkit.SM_CLOCK, "mhz", "SM clock", bottom), spacing=PANEL_GAP))


def power_chart(detail: dict[str, Any], chart_id: str = "chart-power") -> Chart | None:
    """GPU power and SM clock over the window, aligned with the token timeline
    (same bins, same x axis); only for a run that recorded GPU telemetry."""
    pw = detail.get("power") or {}
    if not pw.get("t_s"):
        return None
    width = (pw.get("width_s") or [0.5])[0]
    rows = [{"t": round(t + width / 2, 4), "w": w, "mhz": mhz, "Time": formats.seconds_range(t, width),
             "Power": "—" if w is None else f"{formats.count(w)} W",
             "SM clock": "—" if mhz is None else f"{formats.count(mhz)} MHz"}
            for t, w, mhz in zip(pw["t_s"], pw["power_w"], pw["sm_clock_mhz"], strict=True)]
    spec = _power_template().fill({"power": rows}, x_domain=[0, round(pw["t_s"][-1] + width, 4)])
    gpus, title = pw.get("gpus") or 1, "Power and clocks"
    caption = (f"Power of {f'all {gpus} GPUs together' if gpus > 1 else 'the GPU'} "
               "and mean SM clock across the window, in the timeline's bins")
    return _make(chart_id, title, caption, spec, lambda: fallback.power(
        title, [(r["t"], r["w"]) for r in rows], [(r["t"], r["mhz"]) for r in rows], width,
        heights=POWER_HEIGHTS, gap=PANEL_GAP))


@chartkit.compiled
def _cdf_template(look_name: str, log: bool) -> Template:
    """A step-after CDF line, a dashed rule at each level and its label (two text
    layers: labels right of their rule, and left of it near the axis's end)."""
    look: chartkit.Look = getattr(chartkit, look_name)
    x = alt.X(field="x", type="quantitative", title=look.x,
              axis=alt.Axis(values=slots("x_ticks"), format=",~r"),
              scale=alt.Scale(type="log" if log else "linear", domain=slots("x_domain"), nice=False))
    share = {"scale": alt.Scale(domain=[0, 1]), "title": look.y,  # every layer's: they merge
             "axis": alt.Axis(values=SHARE_TICKS, format="~%", labelOverlap=False)}
    line = alt.Chart(alt.Data(name="steps")).mark_line(
        interpolate="step-after", color=look.color, strokeWidth=2).encode(
        x=x, y=alt.Y(field="y", type="quantitative", **share))
    marks = alt.Chart(alt.Data(name="marks"))
    at = alt.X(field="x", type="quantitative")
    rule = marks.mark_rule(color=chartkit.LEVEL_RULE, strokeDash=list(MEDIAN_RULE[1]),
                           strokeWidth=MEDIAN_RULE[0]).encode(x=at, tooltip=[nominal("label", "Percentile")])

    def labels(left: bool, halo: bool) -> alt.Chart:
        """A side's labels; the halo (white, drawn first) keeps them legible across a rule."""
        ink = {"color": "white", "stroke": "white", "strokeWidth": 3} if halo else {"color": fallback.INK}
        return marks.transform_filter(alt.FieldEqualPredicate(field="left", equal=left)).mark_text(
            align="right" if left else "left", dx=-4 if left else 4, fontSize=10, **ink,
        ).encode(x=at, y=alt.Y(field="row", type="quantitative", **share), text=alt.Text(field="label"))
    texts = [labels(left, halo) for halo in (True, False) for left in (True, False)]
    return template(alt.layer(line, rule, *texts).properties(width=WIDTH, height=CDF_HEIGHT))


CDF_KINDS = {  # kind: (Look name, title, number format, what one sample is)
    "ttft": ("TTFT_CDF", "TTFT CDF", formats.ttft,
             "requests that produced a token with a TTFT at or below x"),
    "tbt": ("TBT_CDF", "Time between tokens CDF", formats.tbt,
            "requests whose time between tokens (window span ÷ tokens after the first) "
            "is at or below x"),
}


def _cdf_axis(lo: float, hi: float, log: bool) -> tuple[tuple[float, float], list[tuple[float, str]]]:
    if log:
        domain, values = fallback.log_axis(lo, hi)
        return domain, [(v, fallback.tick_text(v)) for v in values]
    ax = scales.axis(lo, hi, 6)
    return (ax.start, ax.end), [(v, ax.label(v)) for v in ax.ticks]


def latency_cdf(kind: str, values: list[float | None], levels: list[tuple[str, float]],
                chart_id: str | None = None) -> Chart | None:
    """The empirical CDF of one sample per request (`values`, None skipped), with
    a dashed rule and label at each published level ((name, exact value), the
    percentile table's numbers); x on a log scale when the values spread past
    LOG_SPREAD ×. The curve is thinned for large cells (`drilldown.cdf_steps`);
    the rules are never moved to a kept step."""
    look_name, title, fmt, unit = CDF_KINDS[kind]
    samples = [v for v in values if v is not None]
    if not samples:
        return None
    marked = [v for _, v in levels]
    lo, hi = min(samples + marked), max(samples + marked)
    log = lo > 0 and hi > LOG_SPREAD * lo
    domain, ticks = _cdf_axis(lo, hi, log)
    where = (scales.log2 if log else scales.linear)(domain, (0.0, 1.0))
    marks = [{"x": v, "label": f"{name} {fmt(v)}", "row": LABEL_ROWS[tails.LEVELS.index(name)],
              "left": where(v) > fallback.LABEL_LEFT_FROM} for name, v in levels]
    steps = drilldown.cdf_steps(samples, marked, log=log)
    spec = _cdf_template(look_name, log).fill(
        {"steps": [{"x": x, "y": y} for x, y in steps], "marks": marks},
        x_domain=list(domain), x_ticks=[v for v, _ in ticks])
    caption = (f"Share of the {formats.count(len(samples))} {unit}: one sample per request, the "
               f"samples of the percentile table{'; log scale' if log else ''}; dashed: each "
               "percentile published.")
    look = getattr(chartkit, look_name)
    return _make(chart_id or f"chart-{kind}-cdf", title, caption, spec, lambda: fallback.cdf(
        title, steps, [(m["x"], m["label"], m["row"], m["left"]) for m in marks], look,
        domain=domain, ticks=ticks, log=log))

