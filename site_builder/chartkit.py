"""The common ground of the page charts: the vendored Vega versions, the shared
config, each chart's axis titles and colours (one definition, read by the live
Altair chart and by its no-JS fallback), the rows a chart is drawn from,
compiled chart templates, and the `Chart` record (spec, caption and fallback)
of each one.

Charts are authored with Altair over named datasets. Altair costs 30–60 ms to
compile a chart, and a real site has thousands, so each chart kind is compiled
once per process (`template`) into a `Template`: the Vega-Lite JSON with named
holes (`slot`). A page's chart is the template's JSON with its holes filled
and its rows put in the spec's `datasets`: a string replace and a JSON parse,
a fresh dict each time, the compiled template never touched.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import vl_convert as vlc

from rundir import contract, statuses, tails, words
from rundir.io import atomic_write
from site_builder import metrictable, views
from site_builder.aggregate import CellResult


def _newest_vega_lite() -> str:
    """The newest Vega-Lite vl-convert ships (the one the specs target)."""
    return max(vlc.get_vegalite_versions(), key=lambda v: tuple(int(x) for x in v.split(".")))


VL_VERSION = _newest_vega_lite()
# Live charts are drawn to their container's width (vega-embed refits them on a
# window resize), so their text stays at its size (>= 10 px) on a phone.
WIDTH, HEIGHT = "container", 240
FIXED_WIDTH = 440  # parts of a concatenated chart (site.js fits them to the container)
AUTOSIZE = {"type": "fit", "contains": "padding", "resize": True}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
CONFIG = {
    "font": FONT,
    "view": {"continuousWidth": 300, "continuousHeight": 300},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e6e8eb"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right"},
    "title": {"fontSize": 13}, "text": {"fontSize": 11},
    "background": "white",
}
# A missing cell (null y) breaks its line instead of joining its neighbours.
INVALID = "break-paths-filter-domains"
# Room for text: the fallback is laid out with estimated font metrics, a
# reader's browser may draw wider glyphs.
PADDING = {"left": 5, "top": 5, "right": 30, "bottom": 5}

# --------------------------------------------------------------------------
# colours and titles: one definition per chart, live and fallback alike
# --------------------------------------------------------------------------

BLUE, TEAL, RED = "#4c78a8", "#72b7b2", "#e45756"
# One colour per line (context or run), in this order: ten hues that stay apart
# from each other (CIE76 distance > 20) and from the white background (contrast
# >= 3:1, so no pale yellow), neighbours in the order as different as possible.
LINE_COLORS = ["#1f77b4", "#d95f02", "#2ca02c", "#d62728", "#7b4fb0", "#8c564b", "#c2187a",
               "#5f6b73", "#7a7a00", "#00838f"]
# Heatmap shades: Vega's "blues" scheme live; the fallback mixes these stops of it.
HEATMAP_SCHEME = "blues"
BLUES = ["#cfe1f2", "#93c4de", "#4a98c9", "#1764ab", "#0b3d80"]
# Heatmap fills of cells without numbers, one per status (each also has its text):
# the status table's colours (rundir/statuses.py), as the tables fill those cells.
MISSING_FILLS = {code: statuses.BY_CODE[code].fill for code in statuses.HEATMAP_ORDER}
NO_NUMBERS_FILL = "#f6f8fa"
NO_NUMBERS = "No numbers"
QUEUED_LABEL = words.status_label(contract.REQUESTS_QUEUED)
VALID_LABEL = words.status_label(contract.VALID)
# Timeline lines: (colour, stroke width, dash). Waiting is wide and dashed and drawn
# first, running thin and solid on top, so both show where they coincide.
TIMELINE_STYLE = {"server (waiting)": ("#d95f02", 3.5, "6 3"),
                  "server (running)": ("#1f77b4", 2.0, ""),
                  "client (streaming)": ("#1f77b4", 2.0, "")}
# Heatmap cell text in narrow cells (a phone): whole numbers, shorter words.
NARROW_CELL = 58
TINY_STATUS = {code: statuses.BY_CODE[code].tiny for code in statuses.HEATMAP_ORDER}
SHORT_STATUS = {code: statuses.BY_CODE[code].short for code in statuses.HEATMAP_ORDER}


@dataclass(frozen=True)
class Look:
    """A chart's axis titles, legend title and mark colour."""

    x: str
    y: str
    legend: str | None = None
    color: str = BLUE


PREFILL = Look("Context", "Prompt tok/s")
DECODE = Look("Requests at once", "Total tok/s", "Context")
TRADEOFF = Look("Per request tok/s", "Total tok/s", "Context")
HEATMAP = Look("Requests at once", "Context", "Total tok/s")
RUNS_DECODE = Look("Requests at once", "Total tok/s", "Run")
RUNS_PREFILL = Look("Context", "Prompt tok/s", "Run")
RUNS_SINGLE = Look("Context", "Single-stream tok/s", "Run")
TTFT = Look("TTFT (ms)", "Requests")
TBT = Look("Time between tokens (ms)", "Tokens", color=TEAL)
TBT_MEDIAN = RED  # the dashed rule at the cell's median
# The drill-down's CDFs (one sample per request), a dashed rule at each published level.
TTFT_CDF = Look("TTFT (ms)", "Share of requests")
TBT_CDF = Look("Time between tokens (ms)", "Share of requests", color=TEAL)
LEVEL_RULE = RED
TIMELINE_TOKENS = Look("Seconds into the window", "Output tok/s")
TIMELINE_ACTIVE = Look("Seconds into the window", "Requests")
# The power-and-clocks timeline under it (runs with GPU telemetry), on the same x axis.
POWER = Look("Seconds into the window", "GPU power (W)", color=RED)
SM_CLOCK = Look("Seconds into the window", "SM clock (MHz)", color=TEAL)


def line_colors(n: int) -> list[str]:
    """The first n line colours (they repeat past ten)."""
    return [LINE_COLORS[i % len(LINE_COLORS)] for i in range(n)]


# --------------------------------------------------------------------------
# lines by run: many of them (a family of 100 runs, the explorer's 1,000)
# --------------------------------------------------------------------------

# A chart of runs draws the best TOP_LINES runs (by the chart's own measure) in the
# palette's colours and the rest in one grey under them: ten colours are as many as
# a reader tells apart. Its legend is the page's (site.js `SpeedMatrixLegend`): a
# list under the plot, best first, that scrolls, can be searched and highlights a
# run on click, so the plot keeps its height whatever the number of runs (a Vega
# legend is counted inside the chart's height, and drops entries past 30).
TOP_LINES = len(LINE_COLORS)
REST_COLOR = "#aeb6bd"
REST_NOTE = "grey: the other runs (each named in the list and its tooltip)"
HIGHLIGHT = "hl"  # the chart's param: the key of the highlighted run ("" for none)
# The rows drawn with points and labels: a coloured run's (`top`), or the highlighted one's.
ON_TOP = f"datum.top || ({HIGHLIGHT} !== '' && datum.key === {HIGHLIGHT})"
FADED = 0.12  # the opacity of the other runs while one is highlighted
# Only the plot's width is fitted to the container: its height stays the chart's.
AUTOSIZE_X = {"type": "fit-x", "contains": "padding", "resize": True}


def rank_lines(best: dict[str, float | None], *, higher: bool = True) -> list[str]:
    """Series keys, best first by their measure (None last), ties by key: the
    legend's order, and the first TOP_LINES are the coloured ones."""
    def order(key: str) -> tuple[bool, float, str]:
        v = best[key]
        return (v is None, 0.0 if v is None else (-v if higher else v), key)
    return sorted(best, key=order)


def run_colors(n: int) -> list[str]:
    """Colours of n lines in rank order: the palette for the first TOP_LINES, grey after."""
    return LINE_COLORS[:min(n, TOP_LINES)] + [REST_COLOR] * max(0, n - TOP_LINES)


@dataclass(frozen=True)
class Palette:
    """One run -> colour assignment shared by every chart of a page, so a run reads
    the same colour in each of them (a chart ranking its own runs made the H200 run
    blue in two charts of a family page and orange in the other two). `rule` says
    which runs got the palette's colours (the rest are grey)."""

    colors: dict[str, str]
    rule: str

    def of(self, key: str) -> str:
        return self.colors.get(key, REST_COLOR)


def page_palette(ranked: list[str], measure: str) -> Palette:
    """The page's colours: the palette for its first TOP_LINES runs (`ranked`, best
    first by `measure`), grey after."""
    rule = (f"the {min(len(ranked), TOP_LINES)} runs with the highest {measure} in colour, "
            "the same in every chart of this page")
    return Palette(dict(zip(ranked, run_colors(len(ranked)), strict=True)), rule)


def legend_meta(title: str, keys: list[str], names: list[str],
                colors: list[str], rule: str = "") -> dict[str, Any]:
    """What site.js draws a chart's run list from (spec usermeta `legend`): its title,
    [key, name, colour] per line (the coloured first, each part best first), how many
    are grey, and which runs are coloured (`rule`; without it, the chart's best)."""
    rest = sum(c == REST_COLOR for c in colors)
    return {"title": title, "items": [list(x) for x in zip(keys, names, colors, strict=True)],
            "rest": rest, **({"rule": rule} if rule and rest else {})}


def faded(others: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An opacity encoding that fades every line but the highlighted one (and keeps
    any `others` conditions, e.g. the explorer's points that miss latency limits)."""
    test = f"{HIGHLIGHT} !== '' && datum.key !== {HIGHLIGHT}"
    return {"condition": [{"test": test, "value": FADED}, *(others or [])], "value": 1}


def highlight_param() -> dict[str, Any]:
    """The chart's highlight param (a Vega signal site.js sets from the run list)."""
    return {"name": HIGHLIGHT, "value": ""}


# --------------------------------------------------------------------------
# rows: a chart's data, one per cell
# --------------------------------------------------------------------------

# A fallback point: x, y (None breaks the line there), and optionally whether requests queued.
Point = tuple[float, float | None] | tuple[float | None, float | None, bool]


# Tooltip fields with tails, and the plotted field that is one (the tradeoff's x).
LEVEL_FIELDS = [m for m in metrictable.TOOLTIP if m.key in tails.BY_KEY]
PLOTTED_LEVELS = {"per_request": "Per request tok/s"}  # plotted field -> its header
# Shown instead of a chart whose plotted field has no value at the chosen level.
NO_POINT_AT_LEVEL = "Nothing to draw at this level: no cell has enough requests for its rank."


def _levels(x: CellResult, plot: bool) -> dict[str, dict[str, Any]]:
    """A row's tailed fields at every level past the median (site.js swaps them in
    when the reader picks one): tooltip texts, and the plotted per-request tok/s."""
    return {lv: {**{m.header: m.fmt(x.tail(m.key, lv)) for m in LEVEL_FIELDS},
                 "per_request": x.tail("per_request_tok_s", lv) if plot else None}
            for lv in tails.LEVELS[1:]}


def cell_rows(cells: list[CellResult], label: str | None = None, *,
              levels: bool = False, key: str | None = None) -> list[dict[str, Any]]:
    """One row per cell. A cell without numbers to plot (Looped, Error, ...) gets null
    plotted fields, so it breaks its line; its tooltip text keeps what was published.
    With `levels` (a page with the percentile selector) each row also carries its
    tailed fields at every level. `key`: the line's key (a run's slug), beside its
    `label` (the name a reader sees)."""
    rows = []
    for x in cells:
        plot = x.has_numbers
        extra = {"levels": _levels(x, plot)} if levels else {}
        rows.append(
            {
                "run": label,
                "key": key,
                "context": x.context,
                "Context": words.context_label(x.context),
                "concurrency": x.concurrency,
                "Requests at once": str(x.concurrency),
                "status": x.status,
                "Status": words.status_label(x.status) + (" (client-bound)" if x.client_bound else ""),
                "total": x.total_tok_s if plot else None,
                "per_request": x.per_request_tok_s if plot else None,
                "ttft": x.ttft_ms,
                **{m.header: m.cell_text(x) for m in metrictable.TOOLTIP},  # tooltip texts
                "point": QUEUED_LABEL if x.status == contract.REQUESTS_QUEUED else VALID_LABEL,
                **extra,
            }
        )
    return rows


def slim(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Only the fields a spec's encodings use: the rest would be page weight. A row's
    `levels` (when it has them) keep only those fields too."""
    out = []
    for r in rows:
        row = {k: r[k] for k in keys}
        if "levels" in r:
            row["levels"] = {lv: {k: v for k, v in fields.items() if k in keys}
                             for lv, fields in r["levels"].items()}
        out.append(row)
    return out


def level_titles(spec: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """The titles of a spec's tailed fields at every level past the median (``TTFT
    p99``), for site.js to retitle the tooltips and axes it swaps; None for a spec
    whose rows carry no levels."""
    rows = [r for data in (spec.get("datasets") or {}).values() for r in data if "levels" in r]
    if not rows:
        return None
    names = sorted({k for r in rows for fields in r["levels"].values() for k in fields})
    return {lv: {k: views.level_header(PLOTTED_LEVELS.get(k, k), lv) for k in names}
            for lv in tails.LEVELS[1:]}


def context_labels(cells: list[CellResult]) -> list[str]:
    """The cells' context labels, shortest context first."""
    return list(dict.fromkeys(words.context_label(x) for x in sorted({x.context for x in cells})))


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def line_series(rows: list[dict[str, Any]], key: str, x: str,
                order: list[str] | None = None) -> list[tuple[str, list[Point]]]:
    """Rows grouped into lines (by key), points ordered by concurrency; a cell
    without numbers is a (None) gap, a queued one is flagged."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    names = order or sorted(groups)
    return [(n, [(_num(r[x]), _num(r["total"]), r["point"] == QUEUED_LABEL)
                 for r in sorted(groups[n], key=lambda r: r["concurrency"])])
            for n in names if n in groups]


def any_queued(rows: list[dict[str, Any]]) -> bool:
    """Whether any point is a Requests queued cell (drawn as a hollow square)."""
    return any(r["point"] == QUEUED_LABEL for r in rows)


def queued_note(rows: list[dict[str, Any]]) -> str:
    """The caption's note on hollow squares, when there are any."""
    return "; hollow squares: requests queued" if any_queued(rows) else ""


# --------------------------------------------------------------------------
# templates
# --------------------------------------------------------------------------

_SLOT = re.compile(r'\["@(\w+)@"\]|"@(\w+)@"')


def slot(name: str) -> str:
    """A hole in a template for a page's value (a title, an expression)."""
    return f"@{name}@"


def slots(name: str) -> list[str]:
    """A hole for a page's list (a scale domain, axis values, a sort order)."""
    return [slot(name)]


@dataclass(frozen=True)
class Template:
    """A chart kind compiled once: Vega-Lite JSON with named holes."""

    text: str
    holes: frozenset[str]

    def fill(self, data: dict[str, list[dict[str, Any]]], **values: Any) -> dict[str, Any]:
        """A new spec: every hole filled with values[name], data put in `datasets`."""
        if set(values) != self.holes:
            raise ValueError(f"template holes {sorted(self.holes)}, given {sorted(values)}")
        text = _SLOT.sub(lambda m: json.dumps(values[m[1] or m[2]], allow_nan=False), self.text)
        spec = json.loads(text)
        spec["datasets"] = data
        return spec


def template(chart: alt.TopLevelMixin) -> Template:
    """Compile an Altair chart (validated once) with the site's config."""
    spec = chart.to_dict()
    spec.pop("$schema", None)  # vega-embed is told the mode; no URL on the page
    spec |= {"config": CONFIG, "padding": PADDING}
    if spec.get("width") == WIDTH:
        spec.setdefault("autosize", AUTOSIZE)
    text = json.dumps(spec, separators=(",", ":"))
    return Template(text, frozenset(a or b for a, b in _SLOT.findall(text)))


# Compiled templates kept in the build cache between processes (`keep`): Altair
# compiles a run page's dozen chart kinds in ~1 s, once a process, whatever the
# site's size, so a rebuild that renders one new run would pay it every time.
_KEPT: dict[str, Any] = {"path": None, "texts": {}, "made": {}}
COMPILED: list[Any] = []  # every `compiled` function (tests clear their caches)


def compiled(fn: Callable[..., Template]) -> Callable[..., Template]:
    """functools.cache for a function making a Template, whose text is also looked up
    in (and added to) the kept templates of the build (`keep`). A kept text was made
    by the same code and Altair: the file is named by both (publish)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.cache
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Template:
        key = f"{name}{args!r}"
        text = _KEPT["texts"].get(key)
        if isinstance(text, str):
            return Template(text, frozenset(a or b for a, b in _SLOT.findall(text)))
        got = fn(*args)
        _KEPT["made"][key] = got.text
        return got

    COMPILED.append(wrapper)
    return wrapper


def kept_path(cache_dir: Path, fp: str, *, clean: bool = False) -> Path:
    """The kept templates' file in the build cache for the page fingerprint `fp` (the
    builder's code) and Altair's version; with `clean`, the files of others are removed."""
    name = hashlib.sha256(f"{fp}|{alt.__version__}".encode()).hexdigest()[:24]
    path = Path(cache_dir) / f"chart-templates-{name}.json"
    if clean and not path.is_file():
        for old in Path(cache_dir).glob("chart-templates-*.json"):
            old.unlink(missing_ok=True)
    return path


def keep(path: Path | None) -> None:
    """Use the templates kept in `path` (None: none) from now on in this process."""
    texts: Any = {}
    if path is not None:
        try:
            texts = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            texts = {}
    _KEPT.update(path=path, texts=texts if isinstance(texts, dict) else {})


def save_kept() -> None:
    """Add the templates this process made to the kept file, when it lacks some
    (written whole and atomically; the file's other entries are kept)."""
    path = _KEPT["path"]
    if path is None:
        return
    texts = _KEPT["texts"]
    if all(texts.get(k) == v for k, v in _KEPT["made"].items()):
        return
    try:
        on_file = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        on_file = {}
    merged = {**(on_file if isinstance(on_file, dict) else {}), **texts, **_KEPT["made"]}
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(merged, sort_keys=True), "utf-8"))
    _KEPT["texts"] = merged


@dataclass
class Chart:
    """One chart of a page: its element id, caption, spec, and no-JS fallback."""

    id: str
    title: str
    caption: str
    spec: dict[str, Any]
    draw: Callable[[], str] = field(repr=False, compare=False)
    svg: str = ""


def make(chart_id: str, title: str, caption: str, spec: dict[str, Any],
         draw: Callable[[], str]) -> Chart:
    """A chart with its description (read by screen readers)."""
    spec["description"] = f"{title}. {caption}"
    titles = level_titles(spec)
    if titles:  # Vega-Lite's free slot for the page's own data
        spec.setdefault("usermeta", {})["tails"] = titles
        if any(k in PLOTTED_LEVELS for k in titles[tails.LEVELS[-1]]):
            spec["usermeta"]["empty"] = NO_POINT_AT_LEVEL
    return Chart(chart_id, title, caption, spec, draw=draw)


# --------------------------------------------------------------------------
# Altair shorthands and the vendored bundle
# --------------------------------------------------------------------------


def nominal(name: str, title: str | None = None) -> alt.Tooltip:
    """A nominal tooltip field."""
    return alt.Tooltip(field=name, type="nominal", **({"title": title} if title else {}))


def color(name: str, look: Look, **kw: Any) -> dict[str, Any]:
    """A nominal colour encoding over the line palette (domain and colours per page)."""
    return {"field": name, "type": "nominal", "title": look.legend,
            "scale": {"domain": slots("lines"), "range": slots("colors")}, **kw}


def vega_versions() -> dict[str, str]:
    """Versions of the libraries in the vendored bundle (they name its file)."""
    return {
        "vega": vlc.get_vega_version(),
        "vega-lite": VL_VERSION,
        "vega-embed": vlc.get_vega_embed_version(),
    }


def bundle_name() -> str:
    """File name of the vendored bundle (changes with its versions)."""
    v = vega_versions()
    return f"vega-{v['vega']}_vega-lite-{v['vega-lite']}_vega-embed-{v['vega-embed']}.js"


@functools.lru_cache(maxsize=1)
def bundle_js() -> str:
    """Vega, Vega-Lite and vega-embed in one script that sets window globals (built once)."""
    return vlc.javascript_bundle(vl_version=VL_VERSION)
