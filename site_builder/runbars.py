"""A chart of runs with one x value, drawn as a bar per run.

A family chart whose runs have numbers at one concurrency level only (every
run Over capacity past 1 request at 251K) or at one context only was a line
chart through a single x: each run a lone dot at the same place, the runs
told apart by colour alone. Here each run is a bar, best first, in its colour
(the page's palette, `chartkit.Palette`, as in its other charts), named under
the bar while there are few enough to name, its value printed over it; the
run list under the plot (site.js) names and highlights every run as for
lines. The no-JS picture draws the same bars, colours and names.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

import altair as alt

from site_builder import chartkit, fallback
from site_builder.chartkit import HEIGHT, WIDTH, Chart, Look, Template, nominal, slot

CELLS = alt.Data(name="cells")
X_TITLE = "Run (best first)"
NAME_LIMIT = 150  # pixels of a run's name under its bar
BAR_WIDTH = 36


@chartkit.compiled
def _template(look: Look, tips: tuple[str, ...], labelled: bool) -> Template:
    """Bars by run key (x sorted best first, labelled by name through `names`, an
    expression: keys are slugs, never names), coloured by the page's colours; with
    `labelled` (a few runs) each bar's name under it and its value over it."""
    titles = {"run": "Run", "Total tok/s": look.y}
    axis = (alt.Axis(labelExpr=slot("names"), labelAngle=-25, labelLimit=NAME_LIMIT)
            if labelled else alt.Axis(labels=False, ticks=False))
    base = alt.Chart().encode(
        x=alt.X(field="key", type="nominal", title=X_TITLE, sort=chartkit.slots("lines"),
                axis=axis),
        y=alt.Y(field="total", type="quantitative", title=look.y, axis={"format": "~s"}))
    bars = base.mark_bar(size=BAR_WIDTH).encode(
        color=alt.Color(**chartkit.color("key", look, legend=None)),
        opacity=alt.Opacity(**chartkit.faded()),
        tooltip=[nominal(t, titles.get(t)) for t in tips])
    layers = [bars]
    if labelled:
        layers.append(base.mark_text(dy=-6, baseline="bottom").encode(
            text=alt.Text(field="Total tok/s", type="nominal"),
            opacity=alt.Opacity(**chartkit.faded())))
    chart = alt.layer(*layers, data=CELLS).properties(
        width=WIDTH, height=HEIGHT, autosize=alt.AutoSizeParams(**chartkit.AUTOSIZE_X)
    ).add_params(alt.param(name=chartkit.HIGHLIGHT, value=""))
    return chartkit.template(chart)


def _text(x: float, y: float, text: str) -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle" font-size="11" '
            f'fill="{fallback.MUTED}">{escape(text)}</text>')


def _legend(c: fallback.Canvas, entries: list[tuple[str, str]], x: float, y: float) -> None:
    """Swatch and name per entry, one a line, from (x, y) down."""
    for name, color in entries:
        c.parts.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="12" height="10" fill="{color}"/>'
                       f'<text x="{x + 20:.1f}" y="{y:.1f}" font-size="11" '
                       f'fill="{fallback.MUTED}">{escape(name[:90])}</text>')
        y += 15


def _svg(title: str, look: Look, bars: list[tuple[str, float, str, str]], labelled: bool,
         listed: int) -> str:
    """The no-JS picture: (name, value, value text, colour) per bar, best first; the
    first `listed` (the coloured ones) named in a legend below, then how many more."""
    entries = [(name, color) for name, _, _, color in bars[:listed]]
    if len(bars) > listed:
        n = len(bars) - listed
        entries.append((f"+ {n} more run{'' if n == 1 else 's'} (in grey)", chartkit.REST_COLOR))
    c = fallback.Canvas(540, 10 + 240 + 45 + 15 * len(entries), title)
    p = fallback.Panel(c, 60, 10, 440, 240, max(v for _, v, _, _ in bars), look.y)
    step = p.w / len(bars)
    width = min(float(BAR_WIDTH), step * 0.8)
    for i, (_, v, text, color) in enumerate(bars):
        x = p.x0 + step * (i + 0.5)
        c.parts.append(f'<path d="M{x - width / 2:.1f} {p.y(v):.1f}h{width:.1f}V{p.y(0):.1f}'
                       f'h{-width:.1f}Z" fill="{color}"/>')
        if labelled:
            c.parts.append(_text(x, p.y(v) - 5, text))
    fit = max(1, int(step / 6.5))  # characters of a name that fit under its bar
    ticks = [(p.x0 + step * (i + 0.5), name if len(name) <= fit else name[:fit - 1] + "…")
             for i, (name, *_) in enumerate(bars)]
    p.x_axis(ticks if labelled else [], X_TITLE)
    _legend(c, entries, p.x0, 10 + 240 + 58)
    return c.svg()


def chart(look: Look, tips: tuple[str, ...], chart_id: str, title: str, caption: str,
          rows: list[dict[str, Any]], ranked: list[str],
          palette: chartkit.Palette | None) -> Chart:
    """A bar per run (rows: chartkit.cell_rows, one with numbers per run; `ranked`:
    the keys best first), coloured by the page's `palette` (without one, the best
    TOP_LINES in the palette's colours), with the run list's legend metadata."""
    rows = [r for r in rows if r["total"] is not None]
    present = {r["key"] for r in rows}
    lines = [k for k in ranked if k in present]
    if palette is None:
        colors = chartkit.run_colors(len(lines))
    else:  # the page's colours; the coloured runs first, each part best first
        lines = ([k for k in lines if palette.of(k) != chartkit.REST_COLOR]
                 + [k for k in lines if palette.of(k) == chartkit.REST_COLOR])
        colors = [palette.of(k) for k in lines]
    labelled = len(lines) <= chartkit.TOP_LINES
    names = {r["key"]: r["run"] for r in rows}
    holes: dict[str, Any] = {"lines": lines, "colors": colors}
    if labelled:
        holes["names"] = f"{json.dumps(names, ensure_ascii=False)}[datum.value]"
    data = chartkit.slim(rows, tuple(dict.fromkeys(("key", "total", *tips))))
    spec = _template(look, tips, labelled).fill({"cells": data}, **holes)
    grey = colors.count(chartkit.REST_COLOR)
    rule = palette.rule if palette else f"the best {chartkit.TOP_LINES} in colour"
    spec["usermeta"] = {"legend": chartkit.legend_meta(
        look.legend or "Run", lines, [names[k] for k in lines], colors,
        palette.rule if palette else "")}
    if grey:
        caption += f"; {rule}, {chartkit.REST_NOTE}"
    by_key = {r["key"]: r for r in rows}
    bars = [(names[k], float(by_key[k]["total"]), str(by_key[k]["Total tok/s"]), color)
            for k, color in zip(lines, colors, strict=True)]
    return chartkit.make(chart_id, title, caption, spec,
                         lambda: _svg(title, look, bars, labelled, len(lines) - grey))


__all__ = ["chart"]
