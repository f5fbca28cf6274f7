"""Static SVG pictures of the charts, drawn in Python: the no-JavaScript fallback.

Rendering the Vega-Lite spec itself (vl-convert) was re-measured on today's
per-run cached builds (benchmarks/chart_fallback.py, docs/performance.md): ~90x
these pictures' cost per chart (210-290 ms against 2-4 ms), 4-5x an incremental
build, and 1.4-1.7x the gzipped HTML. The live chart (vega-embed, the same data)
replaces the fallback as soon as scripts run, so the fallback only has to be a
faithful plain picture: axes with nice ticks, bars, lines with points, heatmap
cells, a legend (ticks, bins and scales from `scales`, exact where floats are
not). Each is a few kilobytes and takes a few milliseconds at most. Axis titles
and colours are read from the chart's `chartkit.Look` and palettes; layout
(line kinds, bar width, heatmap rows, from `charts`; the drill-down charts'
heights and median rule, defined below) is passed in by the chart's module,
whose template reads the same values. Every string is escaped; the output
holds no ids, scripts, links or event attributes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from html import escape

from site_builder import chartkit, scales
from site_builder.chartkit import QUEUED_LABEL, Look, Point

FONT = "system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"
GRID, AXIS, INK, MUTED = "#e6e8eb", "#888", "#1f2328", "#555"


def _mix(stops: list[str], t: float) -> str:
    """Colour at t along a list of hex stops (linear in RGB); t is clamped to
    [0, 1] (a shade of total / peak may carry rounding noise), NaN or inf is a
    ValueError (no colour stands for "not a number")."""
    t = min(1.0, max(0.0, scales.finite(t, "shade"))) * (len(stops) - 1)
    i = min(int(t), len(stops) - 2)
    a, b = stops[i], stops[i + 1]
    f = t - i
    rgb = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{v:02x}" for v in rgb)


def blues(t: float) -> str:
    """The heatmap shade at t in [0, 1] (the live chart's "blues" scheme, approximated)."""
    return _mix(chartkit.BLUES, t)


SI_PREFIXES = ((1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"),
               (1e6, "M"), (1e3, "k"))


def _sig3(v: float) -> str:
    """v (already three significant figures) in plain decimals, zeros trimmed."""
    digits = max(0, 2 - math.floor(math.log10(abs(v))))
    text = f"{v:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def si(v: float) -> str:
    """d3's "~s" from 1,000 up (1.5k, 20k, 2M; 999.9 reads 1k), three significant
    figures below (250, 0.5, 0.000123), never an exponent; NaN or inf: ValueError."""
    v = scales.finite(v, "axis value")
    if v == 0:
        return "0"
    r = float(f"{v:.3g}")  # round first, so the rounded value picks the prefix
    for scale, prefix in SI_PREFIXES:
        if abs(r) >= scale:
            return _sig3(r / scale) + prefix
    return _sig3(r)


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
    """A plot area at (x0, y0) of size w × h with a linear y axis from 0 to a
    nice top at or above y_max (labels "~s", or whole numbers for counts)."""

    def __init__(self, canvas: Canvas, x0: float, y0: float, w: float, h: float,
                 y_max: float, y_title: str, y_si: bool = True, integer: bool = False,
                 y_label: Callable[[float], str] | None = None) -> None:
        self.c, self.x0, self.y0, self.w, self.h = canvas, x0, y0, w, h
        y_max = scales.finite(y_max, "y maximum")
        ax = scales.axis(0.0, y_max if y_max > 0 else 1.0, 5, integer=integer)
        self.top = ax.end
        self.y = scales.linear((0.0, self.top), (y0 + h, y0))
        grid = []
        label = y_label or (si if y_si else ax.label)
        for v in ax.ticks:
            y = self.y(v)
            grid.append(f"M{x0:.1f} {y:.1f}h{w:.1f}")
            canvas.parts.append(_t(x0 - 5, y + 4, label(v), "end"))
        canvas.parts.append(f'<path d="{"".join(grid)}" stroke="{GRID}" fill="none"/>')
        canvas.parts.append(_t(x0 - 44, y0 + h / 2, y_title, size=12, fill=INK,
                               extra=f' transform="rotate(-90 {x0 - 44:.1f} {y0 + h / 2:.1f})"'))

    def x_axis(self, ticks: Sequence[tuple[float, str]], title: str) -> None:
        base = self.y0 + self.h
        self.c.parts.append(f'<path d="M{self.x0:.1f} {base:.1f}h{self.w:.1f}" stroke="{AXIS}"/>')
        for x, label in ticks:
            self.c.parts.append(_t(x, base + 15, label))
        self.c.parts.append(_t(self.x0 + self.w / 2, base + 32, title, size=12, fill=INK))


def bars(label: str, cats: list[str], values: list[float], look: Look, *,
         bar_width: float) -> str:
    """Vertical bars, one per category, bar_width wide (narrower where they would touch)."""
    c = Canvas(520, 300, label)
    p = Panel(c, 60, 10, 440, 240, max(values, default=0), look.y)
    step = p.w / max(1, len(cats))
    d = []
    for i, v in enumerate(values):
        bw = min(float(bar_width), step * 0.8)
        x = p.x0 + step * (i + 0.5) - bw / 2
        d.append(f"M{x:.1f} {p.y(v):.1f}h{bw:.1f}V{p.y(0):.1f}h{-bw:.1f}Z")
    c.parts.append(f'<path d="{"".join(d)}" fill="{look.color}"/>')
    p.x_axis([(p.x0 + step * (i + 0.5), cat) for i, cat in enumerate(cats)], look.x)
    return c.svg()


Entry = tuple[str, str] | tuple[str, str, str]  # name, colour[, line dash rect dot hollow]


def _legend(c: Canvas, entries: list[Entry], x: float, y: float, title: str | None,
            line: bool = True) -> float:
    """Draw a legend from (x, y) down; return the y below it."""
    if title:
        c.parts.append(_t(x, y, title, "start", 12, INK))
        y += 16
    for entry in entries:
        name, color = entry[0], entry[1]
        kind = entry[2] if len(entry) > 2 else ("line" if line else "rect")
        if kind == "rect":
            mark = f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="12" height="10" fill="{color}"/>'
        elif kind == "dot":
            mark = f'<circle cx="{x + 6.5:.1f}" cy="{y - 4.5:.1f}" r="3" fill="{color}"/>'
        elif kind == "hollow":
            mark = (f'<rect x="{x + 3:.1f}" y="{y - 8:.1f}" width="7" height="7" fill="white" '
                    f'stroke="{color}" stroke-width="1.5"/>')
        else:
            dash = ' stroke-dasharray="5 3"' if kind == "dash" else ""
            mark = (f'<path d="M{x:.1f} {y - 4:.1f}h14" stroke="{color}" '
                    f'stroke-width="{3 if kind == "dash" else 2}"{dash}/>')
        c.parts.append(mark + _t(x + 20, y, name[:90], "start"))
        y += 15
    return y


def lines(label: str, series: list[tuple[str, list[Point]]], colors: list[str], look: Look, *,
          x_ticks: list[tuple[float, str]], x_log2: bool, legend_below: bool = False,
          x_domain: tuple[float, float] | None = None, legend_max: int | None = None,
          rest_note: str = "") -> str:
    """One line with points per series; x linear (from 0, or over x_domain) or log2,
    y linear from 0. A point without x or y breaks its line; a queued point is hollow.
    With `legend_max` (series ranked best first: lines by run) the first series are
    drawn last, on top, and the legend names only the first legend_max, then
    `rest_note` for the others (the page's tables name every run)."""
    queued = any(len(pt) > 2 and pt[2] for _, pts in series for pt in pts)
    listed = len(series) if legend_max is None else min(len(series), legend_max)
    more = len(series) > listed
    rows = listed + (1 if more else 0) + (2 if queued else 0)
    legend_h = 22 + 15 * rows if legend_below else 0
    side_h = 10 + 16 + 15 * rows + 10
    c = Canvas(60 + 440 + (40 if legend_below else 130),
               max(10 + 240 + 45, side_h) + legend_h, label)
    _lines_into(c, 10, 240, series, colors, look, x_ticks=x_ticks, x_log2=x_log2,
                legend_below=legend_below, x_domain=x_domain,
                legend_max=legend_max, rest_note=rest_note)
    return c.svg()


def _segments(coords: list[tuple[float, float] | None]) -> list[list[tuple[float, float]]]:
    """Runs of consecutive points, split where a point is missing (None)."""
    out: list[list[tuple[float, float]]] = [[]]
    for xy in coords:
        if xy is None:
            if out[-1]:
                out.append([])
        else:
            out[-1].append(xy)
    return [seg for seg in out if seg]


def _lines_into(c: Canvas, y0: float, height: float, series: list[tuple[str, list[Point]]],
                colors: list[str], look: Look, *, x_ticks: list[tuple[float, str]],
                x_log2: bool, legend_below: bool,
                step: bool = False, y_si: bool = True,
                x_domain: tuple[float, float] | None = None,
                styles: list[tuple[float, str]] | None = None,
                legend_max: int | None = None, rest_note: str = "") -> None:
    """Lines into a panel; styles: (stroke width, dash array) per series, drawn in order.
    x_domain is in data units (log2 or not); without it a log2 axis spans the
    points and a linear one runs from 0 to a nice end. A point without a
    finite x or y (or with x <= 0 on a log2 axis) is a gap, never an error."""
    def placed(pt: Point) -> bool:
        x, y = pt[0], pt[1]
        return (x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
                and (x > 0 or not x_log2))

    pts_ok = [pt for _, pts in series for pt in pts if placed(pt)]
    xs = [float(pt[0]) for pt in pts_ok] + [x for x, _ in x_ticks]  # type: ignore[arg-type]
    ys = [float(pt[1]) for pt in pts_ok]  # type: ignore[arg-type]
    p = Panel(c, 60, y0, 440, height, max(ys, default=0), look.y, y_si, integer=not y_si)
    span = (p.x0, p.x0 + p.w)
    px: Callable[[float], float]
    if x_log2:
        px = scales.log2(x_domain or (min(xs, default=1.0), max(xs, default=1.0)), span)
    elif x_domain is not None:
        px = scales.linear(x_domain, span)
    else:  # linear axis: nice ticks from 0
        ax = scales.axis(0.0, max(max(xs, default=1.0), 0.0) or 1.0, 6)
        px = scales.linear((0.0, ax.end), span)
        x_ticks = x_ticks or [(v, ax.label(v)) for v in ax.ticks]
    any_queued = False
    drawn = list(enumerate(zip(series, colors, strict=True)))
    if legend_max is not None:  # ranked best first: the best drawn last, on top
        drawn.reverse()
    for i, ((_, pts), color) in drawn:
        coords = [(px(pt[0]), p.y(pt[1])) if placed(pt) else None  # type: ignore[arg-type]
                  for pt in pts]
        queued = [len(pt) > 2 and bool(pt[2]) for pt in pts]
        width, dash = styles[i] if styles else (2.0, "")
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        d = ""
        for seg in _segments(coords):
            if step:
                d += f"M{seg[0][0]:.1f} {seg[0][1]:.1f}" + "".join(
                    f"H{x:.1f}V{y:.1f}" for x, y in seg[1:])
            else:
                d += "M" + "L".join(f"{x:.1f} {y:.1f}" for x, y in seg)
        if d:
            c.parts.append(f'<path d="{d}" stroke="{color}" stroke-width="{width:g}" '
                           f'fill="none"{extra}/>')
        if step:  # step lines have a point per gauge sample: too many to mark
            continue
        dots = "".join(f"M{xy[0] - 3:.1f} {xy[1]:.1f}a3 3 0 1 0 6 0a3 3 0 1 0-6 0"
                       for xy, q in zip(coords, queued, strict=True) if xy and not q)
        if dots:
            c.parts.append(f'<path d="{dots}" fill="{color}"/>')
        hollow = "".join(f"M{xy[0] - 3.5:.1f} {xy[1] - 3.5:.1f}h7v7h-7Z"
                         for xy, q in zip(coords, queued, strict=True) if xy and q)
        if hollow:
            any_queued = True
            c.parts.append(f'<path d="{hollow}" fill="white" stroke="{color}" '
                           f'stroke-width="1.5"/>')
    p.x_axis([(px(v), text) for v, text in x_ticks], look.x)
    entries: list[Entry] = [
        (name, color, "dash" if styles and styles[i][1] else "line")
        for i, ((name, _), color) in enumerate(zip(series, colors, strict=True))]
    if legend_max is not None and len(entries) > legend_max:
        n = len(entries) - legend_max
        entries = [*entries[:legend_max],
                   (f"+ {n} more run{'' if n == 1 else 's'}" + (f" ({rest_note})" if rest_note else ""),
                    series_rest(colors, legend_max))]
    if any_queued:
        entries += [("Valid", MUTED, "dot"), (QUEUED_LABEL, MUTED, "hollow")]
    if legend_below:
        _legend(c, entries, p.x0, y0 + height + 58, look.legend)
    else:
        _legend(c, entries, p.x0 + p.w + 16, y0 + 8, look.legend)


def series_rest(colors: list[str], listed: int) -> str:
    """The colour the legend's "more runs" entry is drawn in: the first unlisted line's."""
    return colors[listed] if listed < len(colors) else MUTED


def heatmap(label: str, rows: list[str], cols: list[str],
            cells: list[tuple[int, int, float | str, str]], look: Look,
            legend: list[tuple[str, str]] | None = None, *, row_height: int, ink: str,
            white_above: float) -> str:
    """Labelled cells: a shade in [0, 1] (blues), or a status whose cell has no
    number (its own fill from MISSING_FILLS); legend: (label, fill) of those, drawn below.
    Rows are row_height high; a cell's text is ink, white on a shade above white_above."""
    cw = 64
    ch = row_height
    x0, y0 = 70, 10
    legend = legend or []
    legend_h = 10 + 15 * len(legend) if legend else 0
    c = Canvas(x0 + cw * len(cols) + 30, y0 + ch * len(rows) + 45 + legend_h, label)
    for ri, ci, shade, text in cells:
        x, y = x0 + ci * cw, y0 + ri * ch
        if isinstance(shade, str):
            fill, text_ink = chartkit.MISSING_FILLS.get(shade, chartkit.NO_NUMBERS_FILL), ink
        else:
            fill, text_ink = blues(shade), "white" if shade > white_above else ink
        c.parts.append(f'<rect x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{fill}" '
                       f'stroke="white"/>' + _t(x + cw / 2, y + ch / 2 + 4, text, size=10,
                                                fill=text_ink))
    for ri, r in enumerate(rows):
        c.parts.append(_t(x0 - 6, y0 + ri * ch + ch / 2 + 4, r, "end"))
    base = y0 + ch * len(rows)
    for ci, col in enumerate(cols):
        c.parts.append(_t(x0 + ci * cw + cw / 2, base + 15, col))
    c.parts.append(_t(x0 + cw * len(cols) / 2, base + 32, look.x, size=12, fill=INK))
    c.parts.append(_t(14, y0 + ch * len(rows) / 2, look.y, size=12, fill=INK,
                      extra=f' transform="rotate(-90 14 {y0 + ch * len(rows) / 2:.1f})"'))
    if legend:
        _legend(c, [(name, fill, "rect") for name, fill in legend], x0, base + 52, None)
    return c.svg()


RuleStyle = tuple[float, tuple[float, ...]]  # stroke width, dash pattern
# The drill-down charts' layout, defined here once: `drillcharts` builds each
# template from these and passes them back when it draws the picture. The
# histograms' plot height, the median rule's stroke width and dash, the
# timeline's and the power chart's plot heights (upper, lower) and the gap
# between a chart's panels.
HISTOGRAM_HEIGHT = 200
MEDIAN_RULE: RuleStyle = (2, (4, 3))
TIMELINE_HEIGHTS, POWER_HEIGHTS, PANEL_GAP = (160, 110), (140, 110), 12


def histogram(label: str, bins: list[tuple[float, float, float]], look: Look,
              rule: float | None = None, *, height: int = HISTOGRAM_HEIGHT,
              rule_style: RuleStyle = MEDIAN_RULE) -> str:
    """Counts over [lo, hi) bins on a linear x axis, the plot height px high; an
    optional dashed rule at x = rule, styled as the live chart's (rule_style)."""
    c = Canvas(530, 10 + height + 45, label)
    _bins_into(c, 10, height, bins, look, integer=True, rule=rule, rule_style=rule_style)
    return c.svg()


def _bins_into(c: Canvas, y0: float, height: float, bins: list[tuple[float, float, float]],
               look: Look, *, integer: bool, rule: float | None = None,
               rule_style: RuleStyle | None = None) -> None:
    """Bars over a nice linear x axis covering every bin and the rule; a bin with
    a non-finite edge or height is left out (not a measurement)."""
    bins = [b for b in bins if all(math.isfinite(v) for v in b)]
    if rule is not None and not math.isfinite(rule):
        rule = None
    p = Panel(c, 60, y0, 440, height, max((v for _, _, v in bins), default=0), look.y,
              integer=integer)
    x_lo = min((lo for lo, _, _ in bins), default=0.0)
    x_hi = max([hi for _, hi, _ in bins] + ([rule] if rule is not None else []), default=1.0)
    ax = scales.axis(min(x_lo, x_hi), x_hi, 6)
    px = scales.linear((ax.start, ax.end), (p.x0, p.x0 + p.w))
    d = "".join(f"M{px(lo):.1f} {p.y(v):.1f}H{max(px(hi) - 1, px(lo) + 0.5):.1f}V{p.y(0):.1f}"
                f"H{px(lo):.1f}Z" for lo, hi, v in bins if v > 0)
    c.parts.append(f'<path d="{d}" fill="{look.color}"/>')
    if rule is not None:
        if rule_style is None:
            raise ValueError("a rule needs its style (the live chart's stroke width and dash)")
        width, dash = rule_style
        c.parts.append(f'<path d="M{px(rule):.1f} {p.y0:.1f}V{p.y(0):.1f}" stroke="{chartkit.TBT_MEDIAN}" '
                       f'stroke-width="{width:g}" stroke-dasharray="{" ".join(f"{v:g}" for v in dash)}"/>')
    p.x_axis([(px(v), ax.label(v)) for v in ax.ticks], look.x)


# The CDFs' layout (`drillcharts` builds their templates from these): the plot
# height, the share axis's ticks, the row of each level's label (a share of the
# height, one row per level from the bottom: under the curve, right of its
# median) and the axis fraction past which a label sits left of its rule.
CDF_HEIGHT = HISTOGRAM_HEIGHT
CDF_SHARE_TICKS: list[float] = scales.axis(0.0, 1.0, 5).ticks
LABEL_ROWS = (0.06, 0.15, 0.24, 0.33, 0.42)
LABEL_LEFT_FROM = 0.7
LOG_DECADES_ONLY = 200  # a log axis spanning more than this ticks decades only
Mark = tuple[float, str, float, bool]  # x, label, row (share), label left of the rule
HALO = ' stroke="white" stroke-width="3" paint-order="stroke"'  # a label legible across a rule


def share_label(v: float) -> str:
    """A share axis tick: ``40%``."""
    return f"{round(v * 100)}%"


def _one_two_five(k: int) -> list[float]:
    return [float(f"{m}e{k}") for m in (1, 2, 5)]


def log_axis(lo: float, hi: float) -> tuple[tuple[float, float], list[float]]:
    """A log axis over [lo, hi] (0 < lo <= hi): its ends are the 1-2-5 steps at
    or beyond them, its ticks the 1, 2 and 5 × 10^k inside (decades only over a
    span past LOG_DECADES_ONLY); ValueError for a non-positive or reversed span."""
    lo, hi = scales.finite(lo, "log axis start"), scales.finite(hi, "log axis end")
    if not 0 < lo <= hi:
        raise ValueError(f"a log axis needs 0 < start <= end, got {lo!r}, {hi!r}")
    steps = [v for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
             for v in _one_two_five(k)]
    start = max(v for v in steps if v <= lo)
    end = min(v for v in steps if v >= hi)
    if end == start:
        end = min(v for v in steps if v > hi)
    inside = [v for v in steps if start <= v <= end]
    if end / start > LOG_DECADES_ONLY:
        inside = [v for v in inside if f"{v:e}".startswith("1")]
    return (start, end), inside


def tick_text(v: float) -> str:
    """A log axis tick (a 1-2-5 step): ``2,000``, ``50``, ``0.05``."""
    if v >= 1:
        return f"{v:,.0f}"
    return f"{v:.{-math.floor(math.log10(v))}f}"


def cdf(label: str, points: list[tuple[float, float]], marks: list[Mark], look: Look, *,
        domain: tuple[float, float], ticks: list[tuple[float, str]], log: bool,
        height: int = CDF_HEIGHT, rule_style: RuleStyle = MEDIAN_RULE) -> str:
    """An empirical CDF: a step-after line through (x, share) corners over the x
    domain (log or linear), the share axis 0-100%, a dashed rule at each mark's
    x and its label on the mark's row, left of the rule when asked."""
    c = Canvas(530, 10 + height + 45, label)
    p = Panel(c, 60, 10, 440, height, 1.0, look.y, y_label=share_label)
    span = (p.x0, p.x0 + p.w)
    px = scales.log2(domain, span) if log else scales.linear(domain, span)

    def placed(x: float, y: float) -> bool:
        return math.isfinite(x) and math.isfinite(y) and (x > 0 or not log)

    xy = [(px(x), p.y(y)) for x, y in points if placed(x, y)]
    if xy:
        d = f"M{xy[0][0]:.1f} {xy[0][1]:.1f}" + "".join(f"H{x:.1f}V{y:.1f}" for x, y in xy[1:])
        c.parts.append(f'<path d="{d}" stroke="{look.color}" stroke-width="2" fill="none"/>')
    width, dash = rule_style
    pattern = " ".join(f"{v:g}" for v in dash)
    for x, text, row, left in marks:
        if not placed(x, row):
            continue
        at = px(x)
        c.parts.append(f'<path d="M{at:.1f} {p.y0:.1f}V{p.y(0):.1f}" stroke="{chartkit.LEVEL_RULE}" '
                       f'stroke-width="{width:g}" stroke-dasharray="{pattern}"/>')
        c.parts.append(_t(at - 4 if left else at + 4, p.y(row) + 4, text, "end" if left else "start",
                          size=10, fill=INK, extra=HALO))
    p.x_axis([(px(v), text) for v, text in ticks], look.x)
    return c.svg()


def timeline(label: str, bins: list[tuple[float, float, float]],
             series: list[tuple[str, list[Point]]], *,
             heights: tuple[int, int] = TIMELINE_HEIGHTS, gap: int = PANEL_GAP) -> str:
    """Output tok/s bars over the window, above the requests running (step lines,
    styled by chartkit's TIMELINE_STYLE and drawn in the given order); the two
    panels' plot heights and the gap between them as the live chart has them."""
    top, bottom = heights
    below = 10 + top + 45 + gap
    c = Canvas(530, below + bottom + 45 + 22 + 15 * len(series), label)
    _bins_into(c, 10, top, bins, chartkit.TIMELINE_TOKENS, integer=False)
    styles = [chartkit.TIMELINE_STYLE.get(name, (MUTED, 2.0, "")) for name, _ in series]
    _lines_into(c, below, bottom, series, [s[0] for s in styles], chartkit.TIMELINE_ACTIVE, x_ticks=[],
                x_log2=False, legend_below=True, step=True, y_si=False,
                styles=[s[1:] for s in styles])
    return c.svg()


def power(label: str, watts: list[Point], clocks: list[Point], width_s: float, *,
          heights: tuple[int, int] = POWER_HEIGHTS, gap: int = PANEL_GAP) -> str:
    """GPU power above the SM clock over the window (a missing reading breaks the
    line), on the token timeline's x axis (0 to the window's end); the panels'
    plot heights and the gap between them as the live chart has them."""
    top, bottom = heights
    below = 10 + top + 45 + gap
    c = Canvas(530, below + bottom + 45 + 22 + 15, label)
    # the points sit mid-bin, their times rounded to 4 decimals: so is the end
    end = round(max((x for x, _ in watts + clocks if x is not None), default=0.0) + width_s / 2, 4)
    ax = scales.axis(0.0, end if end > 0 else 1.0, 6)
    ticks = [(v, ax.label(v)) for v in ax.ticks]
    for y0, h, pts, look in ((10, top, watts, chartkit.POWER), (below, bottom, clocks, chartkit.SM_CLOCK)):
        _lines_into(c, y0, h, [(look.y, pts)], [look.color], look, x_ticks=ticks, x_log2=False,
                    legend_below=y0 == below, x_domain=(0.0, ax.end))
    return c.svg()


# Drawn pictures hold only our own markup; a chart whose SVG matched this anyway is
# published without a fallback rather than with an unchecked one.
UNSAFE = re.compile(
    r"<\s*(script|foreignObject|iframe|object|embed|image|use)\b|<[^>]*\son[a-z]+\s*=|javascript:",
    re.IGNORECASE,
)
