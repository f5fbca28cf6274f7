"""Static SVG pictures of the charts, drawn in Python: the no-JavaScript fallback.

vl-convert takes 20–60 ms a chart and a real run has ~150 of them (three on
each drill-down page), which alone would cost minutes per site. The live
chart (vega-embed, the same data) replaces the fallback as soon as scripts
run, so the fallback only has to be a faithful plain picture: axes with nice
ticks, bars, lines with points, heatmap cells, a legend. Each is a few
kilobytes and takes well under a millisecond. Every string is escaped; the
output holds no ids, scripts, links or event attributes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np
import vl_convert as vlc

FONT = "system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"
GRID, AXIS, INK, MUTED = "#e6e8eb", "#888", "#1f2328", "#555"
TABLEAU10 = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2",
             "#ff9da6", "#9d755d", "#bab0ac"]
_VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
            "#addc30", "#fde725"]
_BLUES = ["#cfe1f2", "#93c4de", "#4a98c9", "#1764ab", "#0b3d80"]
Point = tuple[float, float]


def _mix(stops: list[str], t: float) -> str:
    """Colour at t in [0, 1] along a list of hex stops (linear in RGB)."""
    t = min(1.0, max(0.0, t)) * (len(stops) - 1)
    i = min(int(t), len(stops) - 2)
    a, b = stops[i], stops[i + 1]
    f = t - i
    rgb = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{v:02x}" for v in rgb)


def viridis(n: int) -> list[str]:
    return [_mix(_VIRIDIS, i / max(1, n - 1)) for i in range(n)]


def tableau(n: int) -> list[str]:
    return [TABLEAU10[i % len(TABLEAU10)] for i in range(n)]


def blues(t: float) -> str:
    return _mix(_BLUES, t)


def si(v: float) -> str:
    """d3's "~s": 1.5k, 20k, 2M, 250, 0.5 (trailing zeros trimmed)."""
    if v == 0:
        return "0"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def plain(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:.3g}"


def nice_step(span: float, count: int) -> float:
    """d3's tick step: 1, 2 or 5 × 10^k, about span / count."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / count
    step = 10 ** math.floor(math.log10(raw))
    err = raw / step
    return step * (10 if err >= 7.07 else 5 if err >= 3.16 else 2 if err >= 1.41 else 1)


def nice_ticks(hi: float, count: int = 5, integer: bool = False) -> tuple[float, list[float]]:
    """A domain [0, top] rounded up to a nice step, and its ticks (whole steps for counts)."""
    hi = hi if hi > 0 and math.isfinite(hi) else 1.0
    step = nice_step(hi, count)
    step = max(step, 1.0) if integer else step
    top = math.ceil(hi / step - 1e-9) * step
    return top, [i * step for i in range(int(round(top / step)) + 1)]


def _t(x: float, y: float, text: str, anchor: str = "middle", size: int = 11,
       fill: str = MUTED, extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
            f'fill="{fill}"{extra}>{escape(text)}</text>')


class Canvas:
    """An SVG of a fixed size with one or more plot panels; parts are appended."""

    def __init__(self, width: float, height: float, label: str) -> None:
        self.w, self.h, self.label = width, height, label
        self.parts: list[str] = [f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>']

    def svg(self) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w:.0f}" '
                f'height="{self.h:.0f}" viewBox="0 0 {self.w:.0f} {self.h:.0f}" role="img" '
                f'aria-label="{escape(self.label)}" font-family="{escape(FONT)}">'
                + "".join(self.parts) + "</svg>")


class Panel:
    """A plot area at (x0, y0) of size w × h with a linear y axis from 0."""

    def __init__(self, canvas: Canvas, x0: float, y0: float, w: float, h: float,
                 y_max: float, y_title: str, y_si: bool = True, integer: bool = False) -> None:
        self.c, self.x0, self.y0, self.w, self.h = canvas, x0, y0, w, h
        self.top, ticks = nice_ticks(y_max, integer=integer)
        grid = []
        for v in ticks:
            y = self.y(v)
            grid.append(f"M{x0:.1f} {y:.1f}h{w:.1f}")
            canvas.parts.append(_t(x0 - 5, y + 4, si(v) if y_si else plain(v), "end"))
        canvas.parts.append(f'<path d="{"".join(grid)}" stroke="{GRID}" fill="none"/>')
        canvas.parts.append(_t(x0 - 44, y0 + h / 2, y_title, size=12, fill=INK,
                               extra=f' transform="rotate(-90 {x0 - 44:.1f} {y0 + h / 2:.1f})"'))

    def y(self, v: float) -> float:
        return self.y0 + self.h - (v / self.top) * self.h if self.top else self.y0 + self.h

    def x_axis(self, ticks: Sequence[tuple[float, str]], title: str) -> None:
        base = self.y0 + self.h
        self.c.parts.append(f'<path d="M{self.x0:.1f} {base:.1f}h{self.w:.1f}" stroke="{AXIS}"/>')
        for x, label in ticks:
            self.c.parts.append(_t(x, base + 15, label))
        self.c.parts.append(_t(self.x0 + self.w / 2, base + 32, title, size=12, fill=INK))


def bars(label: str, cats: list[str], values: list[float], *, x_title: str, y_title: str,
         color: str = TABLEAU10[0]) -> str:
    """Vertical bars, one per category."""
    c = Canvas(520, 300, label)
    p = Panel(c, 60, 10, 440, 240, max(values, default=0), y_title)
    step = p.w / max(1, len(cats))
    d = []
    for i, v in enumerate(values):
        bw = min(28.0, step * 0.8)
        x = p.x0 + step * (i + 0.5) - bw / 2
        d.append(f"M{x:.1f} {p.y(v):.1f}h{bw:.1f}V{p.y(0):.1f}h{-bw:.1f}Z")
    c.parts.append(f'<path d="{"".join(d)}" fill="{color}"/>')
    p.x_axis([(p.x0 + step * (i + 0.5), cat) for i, cat in enumerate(cats)], x_title)
    return c.svg()


def _legend(c: Canvas, entries: list[tuple[str, str]], x: float, y: float, title: str | None,
            line: bool = True) -> None:
    if title:
        c.parts.append(_t(x, y, title, "start", 12, INK))
        y += 16
    for name, color in entries:
        mark = (f'<path d="M{x:.1f} {y - 4:.1f}h14" stroke="{color}" stroke-width="2"/>' if line
                else f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="12" height="10" fill="{color}"/>')
        c.parts.append(mark + _t(x + 20, y, name[:90], "start"))
        y += 15


def lines(label: str, series: list[tuple[str, list[Point]]], colors: list[str], *,
          x_ticks: list[tuple[float, str]], x_log2: bool, x_title: str, y_title: str,
          legend_title: str | None, legend_below: bool = False,
          x_domain: tuple[float, float] | None = None) -> str:
    """One line with points per series; x linear (from 0, or over x_domain) or log2,
    y linear from 0."""
    legend_h = 22 + 15 * len(series) if legend_below else 0
    c = Canvas(60 + 440 + (40 if legend_below else 130), 10 + 240 + 45 + legend_h, label)
    _lines_into(c, 10, 240, series, colors, x_ticks=x_ticks, x_log2=x_log2, x_title=x_title,
                y_title=y_title, legend_title=legend_title, legend_below=legend_below,
                x_domain=x_domain)
    return c.svg()


def _lines_into(c: Canvas, y0: float, height: float, series: list[tuple[str, list[Point]]],
                colors: list[str], *, x_ticks: list[tuple[float, str]], x_log2: bool,
                x_title: str, y_title: str, legend_title: str | None, legend_below: bool,
                step: bool = False, y_si: bool = True,
                x_domain: tuple[float, float] | None = None) -> None:
    xs = [x for _, pts in series for x, _ in pts] + [x for x, _ in x_ticks]
    ys = [y for _, pts in series for _, y in pts]
    p = Panel(c, 60, y0, 440, height, max(ys, default=0), y_title, y_si, integer=not y_si)
    if x_domain is not None:
        lo, hi = x_domain
    elif x_log2:
        lo = math.log2(max(min(xs, default=1), 1e-9))
        hi = math.log2(max(max(xs, default=1), 1e-9))
    else:
        lo, hi = 0.0, nice_ticks(max(xs, default=1), 6)[0]

    def px(v: float) -> float:
        if x_log2:
            v = math.log2(max(v, 1e-9))
        return p.x0 + (p.w / 2 if hi == lo else (v - lo) / (hi - lo) * p.w)

    if not x_ticks:  # linear axis: nice ticks from 0
        x_ticks = [(v, plain(v)) for v in nice_ticks(max(xs, default=1), 6)[1]]
    for (_, pts), color in zip(series, colors, strict=True):
        coords = [(px(x), p.y(y)) for x, y in pts]
        if not coords:
            continue
        if step:
            d = f"M{coords[0][0]:.1f} {coords[0][1]:.1f}" + "".join(
                f"H{x:.1f}V{y:.1f}" for x, y in coords[1:])
        else:
            d = "M" + "L".join(f"{x:.1f} {y:.1f}" for x, y in coords)
        c.parts.append(f'<path d="{d}" stroke="{color}" stroke-width="2" fill="none"/>')
        if not step:  # step lines have a point per gauge sample: too many to mark
            dots = "".join(f"M{x - 3:.1f} {y:.1f}a3 3 0 1 0 6 0a3 3 0 1 0-6 0" for x, y in coords)
            c.parts.append(f'<path d="{dots}" fill="{color}"/>')
    p.x_axis([(px(v), text) for v, text in x_ticks], x_title)
    entries = [(name, color) for (name, _), color in zip(series, colors, strict=True)]
    if legend_below:
        _legend(c, entries, p.x0, y0 + height + 58, legend_title)
    else:
        _legend(c, entries, p.x0 + p.w + 16, y0 + 8, legend_title)


def heatmap(label: str, rows: list[str], cols: list[str],
            cells: list[tuple[int, int, float | None, str]], *, x_title: str,
            y_title: str) -> str:
    """Labelled cells: shade in [0, 1] (None: grey, no number)."""
    cw = 64
    ch = max(24, min(40, 360 // max(1, len(rows))))
    x0, y0 = 70, 10
    c = Canvas(x0 + cw * len(cols) + 30, y0 + ch * len(rows) + 45, label)
    for ri, ci, shade, text in cells:
        x, y = x0 + ci * cw, y0 + ri * ch
        fill = "#eceef1" if shade is None else blues(shade)
        ink = "white" if shade is not None and shade > 0.55 else INK
        c.parts.append(f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{fill}" '
                       f'stroke="white"/>' + _t(x + cw / 2, y + ch / 2 + 4, text, size=10, fill=ink))
    for ri, r in enumerate(rows):
        c.parts.append(_t(x0 - 6, y0 + ri * ch + ch / 2 + 4, r, "end"))
    base = y0 + ch * len(rows)
    for ci, col in enumerate(cols):
        c.parts.append(_t(x0 + ci * cw + cw / 2, base + 15, col))
    c.parts.append(_t(x0 + cw * len(cols) / 2, base + 32, x_title, size=12, fill=INK))
    c.parts.append(_t(14, y0 + ch * len(rows) / 2, y_title, size=12, fill=INK,
                      extra=f' transform="rotate(-90 14 {y0 + ch * len(rows) / 2:.1f})"'))
    return c.svg()


def histogram(label: str, bins: list[tuple[float, float, float]], *, x_title: str, y_title: str,
              color: str = TABLEAU10[0], rule: float | None = None) -> str:
    """Bars over [lo, hi) bins on a linear x axis; an optional dashed rule at x = rule."""
    c = Canvas(530, 10 + 200 + 45, label)
    _bins_into(c, 10, 200, bins, x_title=x_title, y_title=y_title, color=color, rule=rule)
    return c.svg()


def _bins_into(c: Canvas, y0: float, height: float, bins: list[tuple[float, float, float]], *,
               x_title: str, y_title: str, color: str, rule: float | None = None) -> None:
    p = Panel(c, 60, y0, 440, height, max((v for _, _, v in bins), default=0), y_title,
              integer=y_title in ("Requests", "Tokens"))
    x_lo = min((lo for lo, _, _ in bins), default=0.0)
    x_hi = max([hi for _, hi, _ in bins] + ([rule] if rule is not None else []), default=1.0)
    step = nice_step(x_hi - x_lo, 6)
    start = math.floor(x_lo / step) * step
    end = math.ceil(x_hi / step - 1e-9) * step
    end = end if end > start else start + step

    def px(v: float) -> float:
        return p.x0 + (v - start) / (end - start) * p.w

    d = "".join(f"M{px(lo):.1f} {p.y(v):.1f}H{max(px(hi) - 1, px(lo) + 0.5):.1f}V{p.y(0):.1f}"
                f"H{px(lo):.1f}Z" for lo, hi, v in bins if v > 0)
    c.parts.append(f'<path d="{d}" fill="{color}"/>')
    if rule is not None:
        c.parts.append(f'<path d="M{px(rule):.1f} {p.y0:.1f}V{p.y(0):.1f}" stroke="#e45756" '
                       f'stroke-width="2" stroke-dasharray="4 3"/>')
    n = int(round((end - start) / step))
    p.x_axis([(px(start + i * step), plain(start + i * step)) for i in range(n + 1)], x_title)


def value_bins(values: Sequence[float], maxbins: int = 30) -> list[tuple[float, float, float]]:
    """Counts in nice equal-width bins (at most maxbins), like Vega-Lite's bin."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if not len(arr):
        return []
    lo, hi = float(arr.min()), float(arr.max())
    step = nice_step(hi - lo, maxbins) if hi > lo else 1.0
    while (hi - lo) / step > maxbins:
        step *= 2
    start = math.floor(lo / step) * step
    n = max(1, math.floor((hi - start) / step) + 1)
    counts = np.bincount(np.minimum(((arr - start) // step).astype(np.int64), n - 1),
                         minlength=n)
    return [(start + i * step, start + (i + 1) * step, float(k)) for i, k in enumerate(counts)]


def timeline(label: str, bins: list[tuple[float, float, float]],
             series: list[tuple[str, list[Point]]]) -> str:
    """Output tok/s bars over the window, above the requests running (step lines)."""
    below = 10 + 160 + 45 + 12
    c = Canvas(530, below + 110 + 45 + 22 + 15 * len(series), label)
    _bins_into(c, 10, 160, bins, x_title="Seconds into the window", y_title="Output tok/s",
               color=TABLEAU10[0])
    _lines_into(c, below, 110, series, tableau(len(series)), x_ticks=[], x_log2=False,
                x_title="Seconds into the window", y_title="Requests", legend_title=None,
                legend_below=True, step=True, y_si=False)
    return c.svg()


# --------------------------------------------------------------------------
# vl-convert, for a chart that cannot draw itself
# --------------------------------------------------------------------------

UNSAFE = re.compile(
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


def vl_convert_svg(spec: dict[str, Any], title: str, chart_id: str, vl_version: str) -> str:
    """A Vega-Lite spec as inline-safe SVG via vl-convert (empty when unsafe)."""
    # allowed_base_urls=[]: a build never fetches anything (specs carry their data).
    svg = vlc.vegalite_to_svg(spec, vl_version=vl_version, allowed_base_urls=[])
    if UNSAFE.search(svg):
        return ""
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{escape(title)}" ', 1)
    return _scope_ids(svg, chart_id)
