"""Property tests of every binning, tick, domain, scale and step-computing format
of the site (issue 18): random inputs, including equal values, one value, huge
and tiny ranges, values floats cannot hold exactly (0.1 + 0.2, 43.797),
negatives and zero, and NaN/inf (refused or filtered, as each docstring says).

Covered: scales.nice_step, axis, nice_ticks, value_bins, linear, log2;
fallback.Panel (y axis), _bins_into (through histogram), _lines_into (through
lines), power, si, blues; chartkit.line_colors; charts._log2_holes and the
heatmap's shades; drillcharts' TTFT bins, TBT Gap and timeline/power Time
labels; formats.tbt, seconds, average, count, plain_number, percent_change,
step_digits, seconds_range. The examples are the same on every run
(tests/conftest.py's "ci" profile); the last test goes through `build-site`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import reduce
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rundir import contract
from site_builder import chartkit, charts, drillcharts, fallback, formats, scales
from site_builder.aggregate import CellResult
from tests.conftest import run_cli
from tests.support.synthetic_runs import make_measured_run

FAST = settings(max_examples=150)
SLOW = settings(max_examples=25)  # examples that compile or draw a chart

# Numbers floats cannot hold exactly, and edges of the float range.
AWKWARD = [43.66, 43.797, 0.1 + 0.2, 0.3, 0.7 + 0.1, 1 / 3, 5e-324, 2.2250738585072014e-308,
           1e-300, 0.0, -0.0, -43.66, 1e15 + 0.3, 2.0**53 + 2, 1e300, -1e300]
finite = st.floats(min_value=-scales.LIMIT, max_value=scales.LIMIT, allow_nan=False,
                   allow_infinity=False)
awkward = st.sampled_from(AWKWARD)
number = st.one_of(finite, awkward, st.integers(-10**6, 10**6).map(lambda i: i / 1000))


@st.composite
def value_sets(draw: st.DrawFn) -> list[float]:
    """Value lists of every shape: spread, equal, one value, a tiny range (a few
    floats apart), millisecond-like decimals (TTFTs)."""
    kind = draw(st.sampled_from(["spread", "equal", "tiny", "ms"]))
    if kind == "spread":
        return draw(st.lists(number, min_size=1, max_size=40))
    if kind == "equal":
        return [draw(number)] * draw(st.integers(1, 5))
    if kind == "tiny":
        base, ks = draw(number), draw(st.lists(st.integers(0, 6), min_size=1, max_size=20))
        return [reduce(lambda v, _: math.nextafter(v, math.inf), range(k), base) for k in ks]
    return draw(st.lists(st.integers(0, 5_000_000).map(lambda i: i / 1000), min_size=1, max_size=60))


def _parse(text: str) -> float:
    return float(text.replace(",", "").replace(formats.MINUS, "-"))


def _rising(values: list[float]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


# --- bins


@FAST
@given(value_sets(), st.integers(2, 40))
@example([43.66, 43.797], 30)  # the audited run: the first bin started above 43.66
@example([0.1 + 0.2, 0.3], 30)
@example([5e-324, 5e-324], 30)
@example([-1e300, 1e300], 2)
def test_every_value_lands_in_the_bin_that_holds_it(values: list[float], maxbins: int) -> None:
    bins = scales.value_bins(values, maxbins)
    assert 1 <= len(bins) <= maxbins
    edges = [lo for lo, _, _ in bins] + [bins[-1][1]]
    assert _rising(edges), "edges strictly increase"
    assert all(bins[i][1] == bins[i + 1][0] for i in range(len(bins) - 1)), "bins touch"
    counts = [c for _, _, c in bins]
    assert all(c >= 0 and c == int(c) for c in counts)
    assert sum(counts) == len(values)
    # each value in the one bin whose [lo, hi) holds it; the maximum in the last, closed
    expect = [0] * len(bins)
    for v in values:
        holders = [i for i, (lo, hi, _) in enumerate(bins) if lo <= v < hi]
        if not holders and v == bins[-1][1]:
            holders = [len(bins) - 1]
        assert len(holders) == 1, (v, bins)
        expect[holders[0]] += 1
    assert counts == expect
    # equal widths, up to the rounding of each edge to its nearest float
    width = Fraction(bins[0][1]) - Fraction(bins[0][0])
    noise = 2 * Fraction(math.ulp(max(abs(edges[0]), abs(edges[-1]))))
    assert all(abs((Fraction(hi) - Fraction(lo)) - width) <= noise for lo, hi, _ in bins)
    assert counts[0] > 0 and counts[-1] > 0, "no empty end bin"


@FAST
@given(value_sets(), st.lists(st.sampled_from([math.nan, math.inf, -math.inf]), min_size=1))
def test_non_finite_values_are_filtered_from_bins(values: list[float], bad: list[float]) -> None:
    assert scales.value_bins(values + bad) == scales.value_bins(values)
    assert scales.value_bins(bad) == []


# --- steps, axes, ticks


def _nice_mantissa(step: float) -> int:
    return int(f"{step:.0e}".split("e")[0])


@FAST
@given(st.floats(min_value=1e-290, max_value=1e300), st.integers(1, 40))
@example(0.137, 30)
@example(0.1 + 0.2, 6)
def test_nice_step_is_1_2_or_5_times_a_power_of_ten_near_span_over_count(span: float, count: int) -> None:
    step = scales.nice_step(span, count)
    assert _nice_mantissa(step) in (1, 2, 5)
    assert 0.6 <= (span / count) / step <= 1.6


@FAST
@given(number, number, st.integers(1, 12), st.booleans())
@example(43.66, 43.797, 6, False)
@example(0.0, 0.1 + 0.2, 5, False)
@example(0.0, 1e-320, 5, False)
@example(1e300, 1e300, 6, True)
def test_an_axis_covers_its_values_with_increasing_ticks(a: float, b: float, count: int,
                                                         integer: bool) -> None:
    lo, hi = min(a, b), max(a, b)
    ax = scales.axis(lo, hi, count, integer=integer)
    assert ax.start <= lo and ax.end >= hi and ax.start < ax.end
    assert ax.ticks[0] == ax.start and ax.ticks[-1] == ax.end
    assert _rising(ax.ticks)
    assert len(ax.ticks) <= 2 * count + 3
    if integer:
        assert all(v == int(v) for v in ax.ticks)
    labels = [ax.label(v) for v in ax.ticks]
    parsed = [_parse(t) for t in labels]
    assert _rising(parsed), labels  # no two alike
    unit = 10.0 ** -ax.step.decimals
    for v, p in zip(ax.ticks, parsed, strict=True):
        assert abs(p - v) <= unit / 2 + math.ulp(v) * 2


@FAST
@given(st.one_of(finite, awkward), st.integers(1, 12), st.booleans())
@example(0.1 + 0.2, 5, False)
@example(300.00000003, 5, False)  # the old 1e-9 allowance put its top below it
def test_nice_ticks_run_from_zero_to_a_top_at_or_above_the_maximum(hi: float, count: int,
                                                                   integer: bool) -> None:
    top, ticks = scales.nice_ticks(hi, count, integer)
    assert ticks[0] == 0.0 and ticks[-1] == top
    assert top >= hi and top > 0
    assert _rising(ticks)
    if hi <= 0:
        assert top == 1.0 or integer


# --- scales

screen = st.floats(min_value=-5000, max_value=5000, allow_nan=False)


@FAST
@given(number, number, screen, screen, st.floats(0, 1))
def test_a_linear_scale_maps_domain_ends_to_range_ends(d0: float, d1: float, r0: float, r1: float,
                                                       t: float) -> None:
    if not math.isfinite(d1 - d0):
        with pytest.raises(ValueError, match="width"):
            scales.linear((d0, d1), (r0, r1))
        return
    f = scales.linear((d0, d1), (r0, r1))
    if d0 == d1:
        assert f(d0) == (r0 + r1) / 2
        return
    assert f(d0) == r0 and f(d1) == r1
    v = d0 + (d1 - d0) * t
    lo, hi, slack = min(r0, r1), max(r0, r1), 1e-9 * (abs(r0) + abs(r1) + 1)
    assert lo - slack <= f(v) <= hi + slack
    w = d0 + (d1 - d0) * min(1.0, t + 0.25)
    assert (f(w) - f(v)) * (r1 - r0) >= -slack * abs(r1 - r0), "monotone"


@FAST
@given(st.floats(1e-300, 1e300), st.floats(1e-300, 1e300), screen, screen)
@example(1.0, 512.0, 60.0, 500.0)
def test_a_log2_scale_maps_domain_ends_to_range_ends(a: float, b: float, r0: float, r1: float) -> None:
    f = scales.log2((a, b), (r0, r1))
    if a == b:
        assert f(a) == (r0 + r1) / 2
    else:
        assert f(a) == r0 and f(b) == r1
    with pytest.raises(ValueError, match="log scale"):
        f(0.0)
    with pytest.raises(ValueError, match="positive"):
        scales.log2((0.0, b), (r0, r1))


@FAST
@given(st.one_of(st.floats(0, 1e300), awkward.filter(lambda v: v >= 0)), st.booleans())
def test_a_panels_y_axis_maps_zero_to_the_bottom_and_its_top_to_the_top(y_max: float,
                                                                        integer: bool) -> None:
    c = fallback.Canvas(530, 300, "t")
    p = fallback.Panel(c, 60, 10, 440, 240, y_max, "y", y_si=not integer, integer=integer)
    assert p.top >= y_max
    assert p.y(0) == 250 and p.y(p.top) == 10
    labels = re.findall(r'text-anchor="end" font-size="11" fill="#555">([^<]*)<', c.svg())
    assert len(set(labels)) == len(labels), labels


# --- drawn pictures: every mark inside its plot area, tick labels told apart

X0, X1 = 60.0, 500.0
PIXEL = 0.06  # the SVG writes one decimal


def _x_labels(svg: str, base: float) -> list[str]:
    return re.findall(rf'<text x="[^"]*" y="{base + 15:.1f}" text-anchor="middle" font-size="11" '
                      r'fill="#555">([^<]*)<', svg)


@SLOW
@given(value_sets(), st.one_of(st.none(), st.floats(0, 1e6)))
@example([43.66, 43.797], None)
@example([0.3, 0.1 + 0.2, 0.3], 0.30000000000000004)
@example([1e300], None)  # its bin's far edge lies past LIMIT (was refused as an axis end)
def test_a_histograms_bars_and_rule_lie_on_its_axis(values: list[float], rule: float | None) -> None:
    bins = scales.value_bins(values)
    if rule is not None:  # a rule within the bins' span (a median is)
        rule = min(max(rule, bins[0][0]), bins[-1][1])
    svg = fallback.histogram("h", bins, chartkit.TTFT, rule=rule)
    bars = re.search(r'<path d="([^"]*)" fill="#4c78a8"/>', svg).group(1)
    xs = [float(v) for v in re.findall(r"[MH](-?[\d.]+)", bars)]
    assert len(xs) == 3 * sum(1 for _, _, c in bins if c > 0)
    assert all(X0 - PIXEL <= x <= X1 + PIXEL for x in xs), xs
    labels = _x_labels(svg, 210)
    parsed = [_parse(t) for t in labels]
    assert len(labels) >= 2 and _rising(parsed), labels
    assert parsed[0] <= min(values) + abs(min(values)) * 1e-9 + 1e-300


point = st.one_of(st.floats(0, 1e7), st.none(), st.just(math.nan))


@SLOW
@given(st.lists(st.lists(st.tuples(point, point, st.booleans()), max_size=8), min_size=1, max_size=4),
       st.booleans())
def test_every_drawn_point_lies_inside_its_panel(series: list[list[tuple]], log2: bool) -> None:
    if log2:  # concurrency levels: positive whole numbers, the levels as ticks
        series = [[(None if x is None or x != x else float(max(1, round(x)) % 1024 + 1), y, q)
                   for x, y, q in pts] for pts in series]
    levels = sorted({pt[0] for pts in series for pt in pts if pt[0] is not None and pt[0] == pt[0]})
    ticks = [(v, f"{v:g}") for v in levels] if log2 else []
    named = [(f"s{i}", pts) for i, pts in enumerate(series)]
    svg = fallback.lines("l", named, chartkit.line_colors(len(named)), chartkit.DECODE,
                         x_ticks=ticks, x_log2=log2, legend_below=True)
    assert "nan" not in svg and "inf" not in svg
    for x, y in re.findall(r"M(-?[\d.]+) (-?[\d.]+)a3 3", svg):  # filled points
        assert X0 - PIXEL <= float(x) + 3 <= X1 + PIXEL and 10 - PIXEL <= float(y) <= 250 + PIXEL
    for x, y in re.findall(r"M(-?[\d.]+) (-?[\d.]+)h7v7", svg):  # hollow squares
        assert X0 - PIXEL <= float(x) + 3.5 <= X1 + PIXEL and 10 - PIXEL <= float(y) + 3.5 <= 250 + PIXEL
    assert log2 or _rising([_parse(t) for t in _x_labels(svg, 250)])


@SLOW
@given(st.integers(10, 120), st.floats(0.005, 5.0), st.lists(st.floats(0, 2000) | st.none(), min_size=1))
def test_power_ticks_cover_the_window(n: int, width: float, watts: list[float | None]) -> None:
    width = round(width, 4)
    pts = [(round(i * width + width / 2, 4), watts[i % len(watts)]) for i in range(n)]
    svg = fallback.power("p", pts, pts, width)
    parsed = [_parse(t) for t in _x_labels(svg, 10 + 140)]
    assert parsed[0] == 0 and parsed[-1] >= round(n * width, 4) - 1e-9 and _rising(parsed)


PREFIX = dict((p, scale) for scale, p in fallback.SI_PREFIXES)


@FAST
@given(st.one_of(finite, awkward))
@example(999.9)  # read "1e+03" before
@example(999_950.0)  # read "1e+03k" before
@example(1.5e12)
@example(0.0000123)
def test_si_labels_read_back_within_three_significant_figures(v: float) -> None:
    text = fallback.si(v)
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)([kMGTPEZY]?)", text)
    assert m, text
    number, prefix = float(m[1]), m[2]
    back = number * PREFIX.get(prefix, 1.0)
    assert abs(back - v) <= 5e-3 * abs(v) * (1 + 1e-9), (v, text)
    assert prefix == "Y" or abs(number) < 1000
    assert not prefix or abs(number) >= 1


# --- colours


@FAST
@given(st.floats(-10, 10, allow_nan=False) | awkward)
def test_heatmap_shades_stay_between_their_stops(t: float) -> None:
    colour = fallback.blues(t)
    assert re.fullmatch(r"#[0-9a-f]{6}", colour)
    stops = chartkit.BLUES
    assert (t > 0 or colour == stops[0]) and (t < 1 or colour == stops[-1])
    i = min(int(min(max(t, 0), 1) * (len(stops) - 1)), len(stops) - 2)
    for k in (1, 3, 5):
        a, b, c = (int(s[k:k + 2], 16) for s in (stops[i], stops[i + 1], colour))
        assert min(a, b) <= c <= max(a, b)


@FAST
@given(st.integers(0, 40))
def test_line_colours_cycle_the_palette(n: int) -> None:
    colours = chartkit.line_colors(n)
    assert len(colours) == n
    assert all(colours[i] == chartkit.LINE_COLORS[i % len(chartkit.LINE_COLORS)] for i in range(n))
    assert all(a != b for a, b in zip(colours, colours[1:], strict=False))


@SLOW
@given(st.lists(st.floats(0, 1e7) | st.none(), min_size=1, max_size=12))
def test_heatmap_shades_order_like_the_totals(totals: list[float | None]) -> None:
    cells = [CellResult(contract.DECODE, 1024 * (1 + i // 4), 2 ** (i % 4),
                        contract.VALID if t is not None else contract.ERROR, total_tok_s=t)
             for i, t in enumerate(totals)]
    chart = charts.heatmap_chart(cells)
    if all(t is None for t in totals):
        assert chart is None
        return
    rows = chart.spec["datasets"]["cells"]
    shaded = [(r["total"], r["shade"]) for r in rows if r["total"] is not None]
    assert all(0 <= s <= 1 for _, s in shaded)
    assert max(s for _, s in shaded) in (0, 1)
    ordered = [shade for _, shade in sorted(shaded)]
    assert all(a <= b for a, b in zip(ordered, ordered[1:], strict=False))


@FAST
@given(st.lists(st.integers(1, 4096), min_size=1))
def test_a_log2_axis_domain_holds_every_level(levels: list[int]) -> None:
    holes = charts._log2_holes(sorted(set(levels)))
    lo, hi = holes["x_domain"]
    assert all(lo <= v <= hi for v in levels) and lo in levels and hi in levels


# --- drill-down labels: a bin's text has the digits its width needs


@SLOW
@given(st.floats(0.05, 5000.0), st.integers(1, 10**6))
@example(3.0, 100)  # 40 bins of 0.075 ms read "0.1 ms – 0.2 ms", "0.2 ms – 0.2 ms" before
def test_tbt_gap_labels_are_never_alike(hi: float, tokens: int) -> None:
    n = 40
    edges = [round(i * hi * 1.0001 / n, 3) for i in range(n + 1)]
    chart = drillcharts.tbt_histogram({"edges": edges, "counts": [tokens] * n, "overflow": 0}, None)
    gaps = [r["Gap"] for r in chart.spec["datasets"]["bins"]]
    assert len(set(gaps)) == n, gaps
    for r in chart.spec["datasets"]["bins"]:
        lo_text, hi_text = (g.removesuffix(" ms") for g in r["Gap"].split(" – "))
        digits = len(lo_text.split(".")[1])
        assert abs(_parse(lo_text) - r["lo"]) <= 0.5 * 10.0**-digits + 1e-9
        assert abs(_parse(hi_text) - r["hi"]) <= 0.5 * 10.0**-digits + 1e-9


@SLOW
@given(st.floats(0.1, 3600.0))
@example(0.5)  # 10 bins of 0.05 s read "0.0–0.1 s", "0.1–0.1 s" before
def test_timeline_time_labels_are_never_alike(duration_s: float) -> None:
    n = int(min(max(round(duration_s / 0.5), 10), 120))  # drilldown._bin_count
    width = round(duration_s / n, 4)
    t_s = [round(i * duration_s / n, 3) for i in range(n)]
    detail = {"timeline": {"t_s": t_s, "width_s": [width], "tok_s": [1.0] * n,
                           "client_active": [1] * n}}
    rows = drillcharts.timeline_chart(detail).spec["datasets"]["bins"]
    assert len({r["Time"] for r in rows}) == n
    assert all(r["t2"] == round(r["t"] + width, 4) for r in rows)


# --- number formats: each reads back to its value within half its last digit

measured = st.one_of(st.floats(-1e18, 1e18, allow_nan=False), awkward,
                     st.integers(-10**7, 10**7).map(lambda i: i / 100))
FIXED = [(formats.tbt, 1, " ms"), (formats.seconds, 1, " s"), (formats.average, 1, ""),
         (formats.count, 0, "")]


def _close(text: str, v: float, digits: int) -> None:
    assert abs(_parse(text) - v) <= (0.5 + 1e-9) * 10.0**-digits + abs(v) * 4e-16, (text, v)


@FAST
@given(measured)
@example(0.05)
@example(-0.04)  # read "-0.0" before
@example(2.25)
def test_fixed_formats_round_trip_to_their_digits(v: float) -> None:
    for fn, digits, unit in FIXED:
        text = fn(v)
        assert text.endswith(unit) and "e" not in text
        body = text.removesuffix(unit)
        assert re.fullmatch(r"-?\d{1,3}(,\d{3})*" + (rf"\.\d{{{digits}}}" if digits else ""), body), text
        _close(body, v, digits)
        assert not re.fullmatch(r"-0(\.0*)?", body), text  # no negative zero


@FAST
@given(measured)
@example(0.001)  # read "0." before
@example(95.999)  # read "96." before
@example(7.5)
def test_plain_numbers_round_trip_without_trailing_zeros(v: float) -> None:
    text = formats.plain_number(v)
    assert re.fullmatch(r"-?\d{1,3}(,\d{3})*(\.\d?[1-9])?", text), text
    _close(text, v, 2)


@FAST
@given(measured, measured.filter(lambda v: abs(v) >= 1e-6))
@example(112.3, 100.0)
@example(100.0, 100.0)
def test_percent_change_round_trips_with_its_sign(new: float, old: float) -> None:
    change = (new - old) / old * 100
    text = formats.percent_change(new, old)
    assert re.fullmatch(rf"[{formats.PLUS}{formats.MINUS}]?\d{{1,3}}(,\d{{3}})*\.\d%", text), text
    assert (text[0] == formats.PLUS) == (_parse(text.lstrip(formats.PLUS)[:-1]) > 0)
    _close(text.lstrip(formats.PLUS)[:-1], change, 1)


NAN, INF = math.nan, math.inf
SHOWN = (formats.tbt, formats.seconds, formats.average, formats.count, formats.plain_number)
REFUSED = [  # (call, what the one-line ValueError says)
    *((lambda bad=bad: scales.nice_step(bad, 5), "finite") for bad in (NAN, INF, -INF)),
    *((lambda bad=bad: scales.nice_ticks(bad), "finite") for bad in (NAN, INF, -INF)),
    *((lambda bad=bad: scales.axis(0.0, bad, 5), "finite") for bad in (NAN, INF)),
    (lambda: scales.axis(2.0, 1.0, 5), "below"), (lambda: scales.axis(0.0, 1e302, 5), "within"),
    (lambda: scales.value_bins([0.0, 1e305]), "within"),
    (lambda: scales.value_bins([1.0, 2.0], maxbins=1), "maxbins"),
    (lambda: fallback.Panel(fallback.Canvas(10, 10, "t"), 0, 0, 10, 10, NAN, "y"), "finite"),
    *((lambda bad=bad: fallback.si(bad), "finite") for bad in (NAN, INF)),
    *((lambda bad=bad: fallback.blues(bad), "finite") for bad in (NAN, INF)),
    *((lambda fn=fn, bad=bad: fn(bad), "not a measured number") for fn in SHOWN for bad in (INF, -INF)),
    (lambda: formats.percent_change(1e308, -1e-308), "not a measured number"),  # past the float range
    (lambda: formats.step_digits(INF), "finite"),
]


@pytest.mark.parametrize(("call", "says"), REFUSED)
def test_nan_and_inf_are_refused_in_a_clear_value_error(call, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        call()


def test_what_has_nothing_to_show_gets_an_empty_answer() -> None:
    assert all(fn(NAN) == formats.MISSING for fn in SHOWN)
    assert scales.value_bins([]) == []
    assert scales.nice_step(0.0, 5) == scales.nice_step(-3.0, 5) == 1.0
    assert scales.nice_step(5e-324, 30) > 0  # the quotient underflows; the step does not


@FAST
@given(st.floats(1e-7, 1e6), st.integers(0, 3))
def test_step_digits_are_the_fewest_that_tell_steps_apart(step: float, least: int) -> None:
    d = formats.step_digits(step, least)
    assert d >= least
    assert d == 6 or 10.0**-d <= step
    assert d == least or 10.0 ** -(d - 1) > step


# --- through the real CLI: the audited run publishes with its histogram

RUN = "ttft-edge"
OLD_BUG_TTFTS = (43.66, 43.797)  # floor(43.66 / 0.005) * 0.005 > 43.66: bin −1 before


def test_a_run_whose_ttfts_broke_the_binning_publishes_with_its_histogram(tmp_path: Path) -> None:
    run = make_measured_run(tmp_path / "data" / RUN, run_id=RUN, contexts=[1024], concurrency=[2],
                            duration_s=0.5, seed=1)
    path = run / contract.REQUESTS_FILE
    table = pq.read_table(path)
    rows = table.to_pylist()
    measure = [r for r in rows if r["purpose"] == contract.PURPOSE_MEASURE]
    assert len(measure) >= 2
    for i, r in enumerate(measure):  # move each send so its TTFT is one of the audited values
        first = next(ns for ns, k in zip(r["chunk_ns"], r["chunk_tokens"], strict=True) if k > 0)
        r["send_ns"] = first - round(OLD_BUG_TTFTS[i % 2] * 1e6)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)

    res = run_cli("build-site", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "site"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "could not render" not in res.stdout + res.stderr
    page = (tmp_path / "site" / "runs" / RUN / "cells" / "decode-1024-2.html").read_text(encoding="utf-8")
    svg = re.search(r'<svg[^>]*aria-label="TTFT distribution".*?</svg>', page, re.S)
    assert svg, "the TTFT histogram's picture is on the page"
    bars = re.search(r'<path d="([^"]*)" fill="#4c78a8"/>', svg.group(0)).group(1)
    assert bars.count("Z") == 2  # one bar holding 43.66, one 43.797
    labels = _x_labels(svg.group(0), 210)
    assert len(set(labels)) == len(labels) >= 2, labels
    assert 'id="chart-ttft"' in page
