"""History: runs of one setup across engine versions and dates (a *series*).

Readers ask "did this setup get faster or slower with the new engine?". A
series is every run of the same model (display name and variant, i.e.
quantization), the same hardware (GPU name × count) and the same engine
(name), whatever the engine version and the date; its runs are ordered by
engine version where versions differ, else by when they were measured
(site_builder/setups.py: order_runs). Only series of
two or more runs get a page, `series/<slug>.html`: the headline figures at
the operating points site_builder/oppoint.py picks for those runs (the same
cell choice), run after run, a chart of them, and what changed between each
two consecutive runs (site_builder/changes.py). `attach` gives each run its
series, its previous and next run (run pages link them) and, for a series'
latest run, a regression note when a headline figure went down beyond noise
against the previous run, or a fall past 5% that is not established (the
index badges either, changes.Fall). Pure but for `write_pages`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rundir import words
from rundir.slugs import unique_slugs
from site_builder import changes, formats, oppoint, serieschart
from site_builder.aggregate import CellResult
from site_builder.names import distinct_names
from site_builder.pages import Pages
from site_builder.setups import by_version, order_runs, setup_key
from site_builder.sitewriter import SiteWriter, digest
from site_builder.views import RunView

INDEX = "series/index.html"


@dataclass
class Series:
    """The runs of one setup, oldest first, with their names on this series' page."""

    title: str
    slug: str
    runs: list[RunView] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    @property
    def page(self) -> str:
        return f"series/{self.slug}.html"

    @property
    def latest(self) -> RunView:
        return self.runs[-1]

    @property
    def by_version(self) -> bool:
        """Whether its runs are ordered by engine version (else by date)."""
        return by_version(self.runs)

    @property
    def order_words(self) -> str:
        """How its runs are ordered, as the page says it."""
        return "oldest engine version first" if self.by_version else "oldest first"

    @property
    def latest_label(self) -> str:
        """The latest run by engine version and date (with its time when the
        series' names need it), whatever part its distinct name is: the list
        of series shows every latest run the same way."""
        run, name = self.latest, self.names[-1]
        date = run.measured_date
        when = name[name.index(date):] if date and date in name else date
        return " · ".join(x for x in (_engine_version(run), when) if x) or name


def series_title(run: RunView) -> str:
    """``Qwen3.5-4B NVFP4 on H200 SXM 141GB ×8 · vllm``."""
    model = " ".join(x for x in (run.model, run.info.engine.quantization) if x)
    return " · ".join(x for x in (f"{model} on {run.hardware}", run.info.engine.name) if x)


def series_groups(views: list[RunView]) -> list[Series]:
    """The series of two or more runs, in title order, their runs in order (order_runs)."""
    groups: dict[tuple[str, str, str, int, str], list[RunView]] = {}
    for r in views:
        groups.setdefault(setup_key(r), []).append(r)
    found = sorted((order_runs(g) for g in groups.values() if len(g) > 1),
                   key=lambda g: (series_title(g[0]).lower(), g[0].run_id))
    slugs = unique_slugs([series_title(g[0]) for g in found], "series")
    return [Series(series_title(g[0]), slug, g, distinct_names(g, with_model=False))
            for g, slug in zip(found, slugs, strict=True)]


# ---- headline figures --------------------------------------------------------

def points(s: Series) -> list[oppoint.Point]:
    """The operating points the series is shown at (oppoint's summary points of its runs)."""
    return [p for _, p in oppoint.summary_points(s.runs)]


def headlines(run: RunView, at: list[oppoint.Point]) -> list[tuple[str, CellResult | None]]:
    """(label, cell) of a run's headline figures: its peak, then total tok/s at each point
    (oppoint.pick's cell: exact, or the nearest measured one)."""
    out: list[tuple[str, CellResult | None]] = [("Peak total tok/s", run.peak)]
    for p in at:
        cell, _ = oppoint.pick(run, p)
        out.append((f"Total tok/s at {p.label}", cell))
    return out


def regression(older: RunView, older_name: str, newer: RunView,
               at: list[oppoint.Point]) -> changes.Fall | None:
    """The largest fall of a headline total tok/s from older to newer
    (``Peak total tok/s −12.0% vs vllm 0.29.0 (Sep 2, 2026)``): the largest
    established one (changes.judge), else the largest fall past changes.THRESHOLD
    that is not established, with why; None when nothing fell that far."""
    worst: tuple[bool, float, str, str] | None = None  # (not established, ratio, text, why)
    for (label, a), (_, b) in zip(headlines(older, at), headlines(newer, at), strict=True):
        if a is None or b is None:
            continue
        move = changes.figure_move("", a, b, "total_tok_s", label, True, words.tok_s)
        if move is None or move.better:
            continue
        found = (not move.established, (b.total_tok_s or 0) / (a.total_tok_s or 1),
                 f"{label} {move.change}", move.why)
        if worst is None or found[:2] < worst[:2]:
            worst = found
    if worst is None:
        return None
    note = f"{worst[2]} vs {older_name} ({older.measured_date or words.MISSING})"
    return changes.Fall(note, not worst[0], worst[3])


def attach(views: list[RunView]) -> list[Series]:
    """Give every run its series, previous and next run and regression note (views'
    `series_*` and `regression` fields); return the series."""
    for r in views:
        r.series_slug, r.series_prev, r.series_next, r.regression = "", None, None, None
    found = series_groups(views)
    for s in found:
        for i, r in enumerate(s.runs):
            r.series_slug = s.slug
            r.series_prev = (s.runs[i - 1].slug, s.names[i - 1]) if i else None
            r.series_next = (s.runs[i + 1].slug, s.names[i + 1]) if i + 1 < len(s.runs) else None
        prev_name = _engine_version(s.runs[-2]) or s.names[-2]
        s.latest.regression = regression(s.runs[-2], prev_name, s.latest, points(s))
    return found


def _engine_version(run: RunView) -> str:
    e = run.info.engine
    return " ".join(x for x in (e.name, e.version) if x)


# ---- the page ----------------------------------------------------------------

def _figure(cell: CellResult | None, key: str, fmt: Any) -> dict[str, Any]:
    """A table cell: its text, its 95% interval's half-width ("± …") and status."""
    if cell is None or not cell.has_numbers:
        return {"text": words.status_label(cell.status) if cell else words.MISSING, "pm": "",
                "nearest": ""}
    value, ci = getattr(cell, key), changes.interval_of(cell, key)
    pm = fmt(max(ci[1] - value, value - ci[0])) if ci and value is not None else ""
    return {"text": fmt(value), "pm": pm, "nearest": ""}


def table_rows(s: Series, at: list[oppoint.Point]) -> list[dict[str, Any]]:
    """One row per run: its name, page, engine version, date and figures at each point."""
    rows = []
    for run, name in zip(s.runs, s.names, strict=True):
        figures = [_figure(run.peak, "total_tok_s", words.tok_s)]
        for p in at:
            cell, exact = oppoint.pick(run, p)
            for key, _, _, fmt in changes.FIGURES:
                figures.append(_figure(cell, key, fmt) | {
                    "nearest": "" if exact or cell is None else
                    oppoint.Point(cell.context, cell.concurrency).label})
        rows.append({"run": run, "name": name, "version": run.info.engine.version or "",
                     "date": run.measured_date, "figures": figures,
                     "windows": max((x.windows for x in run.agg.decode()), default=1)})
    return rows


def _chart(s: Series, at: list[oppoint.Point]) -> serieschart.Chart | None:
    values = []
    for p in at:
        per_run = []
        for run in s.runs:
            cell, _ = oppoint.pick(run, p)
            ok = cell is not None and cell.has_numbers
            total = cell.total_tok_s if ok else None  # type: ignore[union-attr]
            per_run.append((total, changes.interval_of(cell, "total_tok_s") if ok else None,
                            words.tok_s(total)))
        values.append(per_run)
    return serieschart.series_chart(s.names, [p.label for p in at], values, s.order_words)


def series_page(pages: Pages, s: Series) -> str:
    """The series page: table, chart, what changed between consecutive runs."""
    at = points(s)
    pairs = [{"older": s.runs[i], "newer": s.runs[i + 1], "older_name": s.names[i],
              "newer_name": s.names[i + 1], "changes": changes.compare(s.runs[i], s.runs[i + 1])}
             for i in range(len(s.runs) - 1)]
    return pages.r.render("series.html", depth=1, series=s, points=at, nav="history",
                          headers=[h for _, h, _, _ in changes.FIGURES],
                          rows=table_rows(s, at), charts=pages.svg.fill([_chart(s, at)]),
                          pairs=pairs, threshold=formats.plain_number(changes.THRESHOLD * 100))


def index_page(pages: Pages, found: list[Series]) -> str:
    """Every series, those whose latest run regressed first, then those whose latest
    run fell by a change not established."""
    def rank(s: Series) -> int:
        fall = s.latest.regression
        return 2 if fall is None else 0 if fall.established else 1
    ordered = sorted(found, key=lambda s: (rank(s), s.title.lower()))
    return pages.r.render("series.html", depth=1, series=None, all_series=ordered, nav="history",
                          charts=[])


def write_pages(writer: SiteWriter, pages: Pages, found: list[Series], fp: str) -> None:
    """Write each series' page (keyed by its runs' digests, slugs and names, so only a
    series whose runs changed is rendered again) and the list of series."""
    for s in found:
        key = digest("|".join([fp, s.slug, *(f"{r.agg.digest}:{r.slug}:{n}"
                                             for r, n in zip(s.runs, s.names, strict=True))])
                     .encode())
        if not writer.is_current(s.page, key):
            writer.write(s.page, series_page(pages, s), key)
    writer.write(INDEX, index_page(pages, found))


__all__ = ["Series", "attach", "headlines", "index_page", "regression", "series_groups",
           "series_page", "setup_key", "write_pages"]
