"""One function per kind of page: gathers its charts and context, renders it.

`publish` decides which pages to write and where; this module decides what
each page says. Pages never read run files: they get RunViews.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from rundir import contract, statuses, tails, words
from site_builder import (
    chartkit,
    charts,
    drillcharts,
    explore,
    explorecharts,
    formats,
    indexpages,
    metrictable,
    names,
    oppoint,
    peerpage,
    rankings,
    ratepage,
    raterank,
    runrows,
    slo,
    spec,
    toolcompare,
    trafficpage,
)
from site_builder.aggregate import CellResult
from site_builder.glossary import (
    CACHE_NOTE,
    CLIENT_BOUND_NOTE,
    COUNTS_NOTES,
    ENERGY_HEADERS,
    MEASUREMENT_HEADERS,
    MEDIANS_NOTE,
    PHASE_LABELS,
    SAMPLE_USE,
    imported_note,
)
from site_builder.render import Renderer, markdown
from site_builder.setups import order_runs, setup_key
from site_builder.views import (
    FamilyGroup,
    RunView,
    cell_title,
    family_matrix_notes,
    latency_notes,
    rank_label,
    sample_needs,
)

TOKEN_COUNTING = {
    contract.COUNT_USAGE_CONTINUOUS: "server's cumulative usage on every chunk",
    contract.COUNT_CHUNKS: "one token per content chunk (fallback)",
}
AVG_SOURCE = {"server": "requests in flight − server's waiting gauge",
              "client": "client's streams receiving tokens",
              "published": "as published"}

# The index's columns: (key, label, kind) (site_builder/indexpages.py).
INDEX_COLUMNS = indexpages.COLUMNS
# The compare page's choices: (key, label, better), from the metric table.
COMPARE_METRICS = [(m.key, m.header, m.better) for m in metrictable.COMPARED]


def compare_groups(runs: list[RunView]) -> list[tuple[str, list[RunView]]]:
    """The compare page's runs by model family (its pickers' groups and its
    no-JS list), families by name; within one, a setup's runs
    (site_builder/setups.py) together in their history page's order (engine
    version where versions differ, else date):
    with a thousand runs a reader finds one by family, then setup, then date."""
    by_family: dict[str, dict[tuple[str, str, str, int, str], list[RunView]]] = {}
    for r in runs:
        by_family.setdefault(r.family, {}).setdefault(setup_key(r), []).append(r)
    return [(family, [r for key in sorted(setups) for r in order_runs(setups[key])])
            for family, setups in sorted(by_family.items(), key=lambda x: x[0].lower())]


def compare_default(runs: list[RunView]) -> tuple[str, str]:
    """(A, B) the compare page opens on: the newest run that has an earlier
    run of its setup (its series, site_builder/series.py, attached before
    the pages are made) as B, that earlier run as A, since "what changed
    since last time" is the comparison most readers come for. Without any
    series, two runs of one model family (different models are not comparable
    on speed alone): the newest run of a family with two or more runs as B, the
    family's next newest as A. With no such family, ("", ""): the page asks the
    reader to pick (its first two runs were two different models)."""
    def newest(rs: list[RunView]) -> RunView:
        return max(rs, key=lambda r: (r.info.measured_at or "", r.run_id))

    latest = [r for r in runs if r.series_prev and not r.series_next]
    if latest:
        b = newest(latest)
        assert b.series_prev is not None
        return b.series_prev[0], b.slug
    families: dict[str, list[RunView]] = {}
    for r in runs:
        families.setdefault(r.family_slug, []).append(r)
    pool = [r for members in families.values() if len(members) > 1 for r in members]
    if not pool:
        return "", ""
    b = newest(pool)
    return newest([r for r in families[b.family_slug] if r is not b]).slug, b.slug


def family_palette(runs: list[RunView]) -> chartkit.Palette:
    """The family page's run colours, shared by all its charts: the palette for the
    runs with the highest peak total tok/s (the family's headline figure), grey after."""
    best = {r.slug: (r.peak.total_tok_s if r.peak else None) for r in runs}
    return chartkit.page_palette(chartkit.rank_lines(best), "peak total tok/s")


def _peak_notes(runs: list[RunView]) -> list[str]:
    """The status notes for the peaks marked on the index and model pages."""
    marked = {r.peak.status for r in runs if r.peak and r.peak_note}
    return [text for status, text in words.STATUS_NOTES.items() if status in marked]


def measured_by(processes: int | None, hosts: int | None) -> str | None:
    """What a cell's streams were spread over ("2 processes on 1 host"); None when the
    run directory did not record it (written before cells.parquet had the columns):
    nothing is shown rather than a guess."""
    if processes is None:
        return None
    text = f"{formats.count(processes)} process{'' if processes == 1 else 'es'}"
    if hosts is not None:
        text += f" on {formats.count(hosts)} host{'' if hosts == 1 else 's'}"
    return text


def _count_rows(x: CellResult, d: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The cell's request counts, each labelled by what it counts; the disjoint
    outcomes add up to Requests sent (glossary: Requests sent)."""
    o = d.get("outcomes") or {}
    if not o:
        return []
    scope = "every sample" if x.phase == contract.PREFILL else "warm-up and window"
    rows = [("Requests sent", scope, formats.count(o.get("total")))]
    by = o.get("finish_reasons", {})
    reasons = ", ".join(f"{k}: {formats.count(v)}" for k, v in by.items())
    finished = formats.count(o.get("finished")) + (f" ({reasons})" if reasons else "")
    rows.append(("Finished normally", "any time", finished))
    if x.phase == contract.DECODE and x.completed is not None:
        rows.append(("Completed requests", "of those, ended inside the window",
                     formats.count(x.completed)))
    if x.phase == contract.DECODE or o.get("cancelled"):
        rows.append(("Cancelled at window end", "", formats.count(o.get("cancelled"))))
    if x.phase == contract.PREFILL or o.get("rejected"):
        rows.append(("Rejected samples", "prefix-cache hits", formats.count(o.get("rejected"))))
    rows.append(("Failed requests", "ended with an error", formats.count(o.get("errors"))))
    if o.get("unfinished"):
        rows.append(("Ended without a finish reason", "", formats.count(o.get("unfinished"))))
    if x.phase == contract.PREFILL and d.get("used") is not None:
        rows.append(("Samples used", "in the published figures", formats.count(d.get("used"))))
    if d.get("kind") == "decode":
        rows.append(("Produced a first token", "TTFT distribution",
                     formats.count(len(d.get("ttft_ms") or []))))
    return rows


# The cell page's percentile table: its rows' metrics, per phase (prefill: TTFT only).
TAIL_ROWS = {contract.DECODE: tails.METRICS, contract.PREFILL: (tails.TTFT,)}
# Which requests each row's samples are (rundir.tails.request_figures).
TAIL_SAMPLES = {
    contract.DECODE: "Samples: for TTFT every request that produced a token; for time between "
    "tokens and per request tok/s the requests with a token after their first inside the "
    "window; for end-to-end latency the requests completed inside it.",
    contract.PREFILL: "Samples: the cold samples used.",
}


def _tail_record(metric: tails.TailMetric, phase: str) -> metrictable.Metric:
    """The metric table's record of a tail metric: its header and number format."""
    return next(m for m in metrictable.TAILED if m.tail_metric == metric and phase in m.phases)


def sample_rule(unit: str) -> str:
    """The rule for publishing a rank, from rundir.tails.MIN_SAMPLES (p50 needs one)."""
    return (f"A percentile is shown only with enough {unit} that, on average, at least one lies "
            f"beyond it: {', '.join(sample_needs())}; with fewer it reads {formats.MISSING}.")


def tail_table(x: CellResult) -> dict[str, Any] | None:
    """The cell page's every-percentile table (rows: metric, values at each level,
    samples), or just `missing` when the run has no per-request data; None for a
    cell without numbers. A rate's level is its slow side, so its row names the
    ranks it holds (per request tok/s at p90 is its 10th percentile)."""
    if not x.has_numbers:
        return None
    unit = "samples" if x.phase == contract.PREFILL else "requests"
    if not x.tails:
        return {"rows": [], "missing": "The per-request data behind the percentiles is not "
                "available for this run (imported, or aggregated before they were computed)."}
    rows = []
    for metric in TAIL_ROWS[x.phase]:
        record = _tail_record(metric, x.phase)
        ranks = [rank_label(metric, lv) for lv in tails.LEVELS] if metric.higher_is_better else []
        hover = (f"{record.header} of each {unit[:-1]}, at each percentile of them "
                 "(p50: the published median).")
        rows.append({"header": record.header, "ranks": ranks, "hover": hover,
                     "cells": [record.tail_text(x, lv) for lv in tails.LEVELS],
                     "n": formats.count(x.tails.get(metric.count_column()))})
    return {"levels": list(tails.LEVELS), "rows": rows, "missing": "",
            "rule": " ".join(filter(None, (sample_rule(unit), TAIL_SAMPLES.get(x.phase))))}


def _level_marks(x: CellResult, key: str) -> list[tuple[str, float]]:
    """(level, exact value) of every published level of a metric: the CDF's rules."""
    return [(lv, v) for lv in tails.LEVELS if (v := x.tail(key, lv)) is not None]


class Pages:
    """Renders every kind of page with one Renderer and one SVG renderer."""

    def __init__(self, renderer: Renderer, svg: charts.SvgRenderer, assets: dict[str, str],
                 version: str) -> None:
        self.r = renderer
        self.svg = svg
        self.r.env.filters["filesize"] = formats.file_size
        self.r.env.globals.update(
            assets=assets, version=version, phase_labels=PHASE_LABELS,
            headers=MEASUREMENT_HEADERS, energy_headers=ENERGY_HEADERS, cache_note=CACHE_NOTE,
            medians_note=MEDIANS_NOTE, measured_metrics=metrictable.MEASURED,
            energy_metrics=metrictable.ENERGY,
            client_bound_note=CLIENT_BOUND_NOTE, imported_note=imported_note,
            peer_section=peerpage.peer_section,
        )

    # ---- run ------------------------------------------------------------
    def run_page(self, run: RunView) -> str:
        cells, lv = run.agg.cells, run.has_tails  # percentiles: the selector and its data
        page_charts = self.svg.fill([
            charts.prefill_chart(cells, levels=lv), charts.decode_chart(cells, levels=lv),
            charts.tradeoff_chart(cells, levels=lv), charts.heatmap_chart(cells, levels=lv)])
        traffic = run.agg.traffic  # prefix reuse, conversations: only runs that have them
        extra = {"traffic_charts": self.svg.fill(trafficpage.page_charts(traffic)) if traffic else [],
                 "prefix_tables": trafficpage.prefix_tables(traffic),
                 "conversation_tables": trafficpage.conversation_tables(traffic),
                 "reuse_pct": trafficpage.percent, "reuse_anchor": trafficpage.status_anchor}
        if run.agg.rate:  # request-rate cells: only runs that have them
            limits = run.slo.slo if run.slo is not None else slo.DEFAULT
            rate_tables = ratepage.tables(run.agg.rate, limits)
            extra |= {"rate_tables": rate_tables, "rate_slo": limits.text,
                      "rate_charts": self.svg.fill(ratepage.page_charts(rate_tables)),
                      "rate_fmt": ratepage.rate, "rate_achieved": ratepage.achieved,
                      "rate_lag": ratepage.lag, "rate_anchor": ratepage.status_anchor,
                      "rate_note": ratepage.QUEUEING_NOTE, "slo_pct": slo.percent}
        if run.agg.spec:  # speculative decoding: only runs with an acceptance figure
            per_request = {(x.context, x.concurrency): x.per_request_tok_s for x in run.agg.decode()}
            extra |= {"spec_rows": [(x, per_request.get((x.context, x.concurrency)))
                                    for x in run.agg.spec], "spec_steps": spec.steps}
        return self.r.render("run.html", depth=2, run=run, charts=page_charts, nav="runs",
                             costs=oppoint.cost_rows(run), tail_levels=lv,
                             latency_notes=latency_notes(MEDIANS_NOTE), **extra)

    def cell_pages(self, run: RunView) -> Iterator[tuple[str, str]]:
        """(file name, html) of every drill-down page of a measured run."""
        with_detail = [x for x in run.agg.cells if x.has_detail and x.key in run.agg.details]
        for i, cell in enumerate(with_detail):
            prev = with_detail[i - 1] if i else None
            nxt = with_detail[i + 1] if i + 1 < len(with_detail) else None
            html = self.cell_page(run, cell, run.agg.details[cell.key], prev, nxt)
            yield f"{cell.key}.html", html

    def cell_page(self, run: RunView, cell: CellResult, detail: dict[str, Any],
                  prev: CellResult | None, nxt: CellResult | None) -> str:
        page_charts: list[charts.Chart] = []
        if detail["kind"] == "decode":
            ttft = drillcharts.ttft_histogram(detail["ttft_ms"])
            if ttft is not None:  # say which requests it holds (the Produced a first token row)
                ttft = replace(ttft, caption=(
                    f"Time to first token of each of the {formats.count(len(detail['ttft_ms']))} "
                    "requests that produced a token (warm-up and window, any outcome); "
                    "the cell's TTFT is their median."))
            per_request = detail.get("per_request") or {}
            page_charts = self.svg.fill([
                ttft,
                drillcharts.latency_cdf("ttft", per_request.get("ttft_ms") or [],
                                        _level_marks(cell, tails.TTFT.key)),
                drillcharts.tbt_histogram(detail["tbt"], cell.tbt_ms),
                drillcharts.latency_cdf("tbt", per_request.get("tbt_ms") or [],
                                        _level_marks(cell, tails.TBT.key)),
                drillcharts.timeline_chart(detail),
                drillcharts.power_chart(detail),  # runs with GPU telemetry only
            ])
        metrics = self._cell_metrics(cell) if cell.has_numbers else []
        note = words.status_note(cell.status, [cell.reason], on_pages=False)
        if cell.client_bound:
            note = f"{note} {CLIENT_BOUND_NOTE}" if note else CLIENT_BOUND_NOTE
        return self.r.render(
            "cell.html", depth=3, run=run, cell=cell, title=cell_title(cell), charts=page_charts,
            metrics=metrics, note=note, window_rows=self._window_rows(run, cell, detail),
            tail_table=tail_table(cell),
            samples=detail.get("samples") or [], samples_used=detail.get("used"),
            sample_use=SAMPLE_USE, counts_note=COUNTS_NOTES.get(cell.phase, ""),
            errors=detail.get("errors") or [],
            tails=detail.get("tails") or [], prev=prev, next=nxt,
            prev_title=cell_title(prev) if prev else "", next_title=cell_title(nxt) if nxt else "",
            nav="runs",
        )

    def _cell_metrics(self, x: CellResult) -> list[tuple[str, str, str]]:
        """(term, what it counts, value) of the cell's published numbers (the metric table's)."""
        return [(m.header, m.on_cell[x.phase], m.cell_text(x))
                for m in metrictable.on_cell_page(x.phase)]

    def _window_rows(self, run: RunView, x: CellResult,
                     d: dict[str, Any]) -> list[tuple[str, str, str]]:
        """(term or label, what it counts, value) of the window and request counts."""
        rows: list[tuple[str, str, str]] = []
        win = d.get("window_ns")
        if win:
            clock = run.info.clock
            wall = clock.wall_anchor_ns + (win[0] - clock.monotonic_anchor_ns)
            when = datetime.fromtimestamp(wall / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            rows += [("Window start", "", when),
                     ("Window length", "", formats.seconds((win[1] - win[0]) / 1e9))]
        if x.warmup_s is not None:
            rows.append(("Warm-up", "", formats.seconds(x.warmup_s)))
        if (spread := measured_by(x.processes, x.hosts)) is not None:
            rows.append(("Measured by", "", spread))
        if x.token_counting:
            how = TOKEN_COUNTING.get(x.token_counting, x.token_counting)
            rows.append(("Tokens counted by", "", how))
        if x.avg_active_source:
            rows.append(("Active requests from", "", AVG_SOURCE.get(x.avg_active_source, "")))
        return rows + _count_rows(x, d)

    # ---- site-wide ------------------------------------------------------
    def index_pages(self, runs: list[RunView],
                    models: list[FamilyGroup]) -> list[tuple[str, str]]:
        """The index's static pages (index.html, index-2.html, …) and the rows file
        table.js loads on demand, as (path, text); newest runs first."""
        rows = [indexpages.table_row(r) for r in indexpages.default_order(runs)]
        rows_text, rows_src = indexpages.rows_script(rows)
        records = [runrows.index_record(r) for r in runs]

        def options(key: str) -> list[str]:
            return sorted({v for rec in records if (v := rec[key])}, key=str.lower)

        filters = [(name, label, options(key)) for name, label, key in indexpages.FILTERS]
        common = {"total": len(runs), "models": models, "filters": filters,
                  "columns": INDEX_COLUMNS, "peak_notes": _peak_notes(runs), "nav": "runs",
                  "rows_src": rows_src}
        out = [(indexpages.ROWS_FILE, rows_text)]
        for page in indexpages.paginate(rows):
            extra: dict[str, Any] = {}
            if page.number == 1:  # the rankings and the model list: on the first page only
                extra = {"oppoint": rankings.page_context(runs, index=True, models=models),
                         "family_points": {m.slug: oppoint.default_point(m.runs)
                                           for m in models}}
            out.append((page.rel, self.r.render(
                "index.html", depth=0, page=page, **common, **extra,
                links=indexpages.page_links(page.number, page.count),
                page_file=indexpages.page_file)))
        return out

    def model_page(self, model: FamilyGroup) -> str:
        # Each run by its name within the family (the page names the model), keyed by slug.
        run_names = names.distinct_names(model.runs, with_model=False)
        series = [(r.slug, name, r.agg.cells) for r, name in zip(model.runs, run_names, strict=True)]
        shared = None
        ctx_sets = [set(r.decode_contexts) for r in model.runs if r.decode_contexts]
        if ctx_sets:
            common = set.intersection(*ctx_sets)
            shared = max(common) if common else None
        smallest = min((min(s) for s in ctx_sets), default=None)
        wanted = [x for x in dict.fromkeys([smallest, shared]) if x is not None]
        lv = model.has_tails  # percentiles: the selector and its data
        palette = family_palette(model.runs)  # one colour per run in every chart
        page_charts = [charts.runs_decode_chart(series, x, f"chart-decode-{x}", levels=lv,
                                                palette=palette) for x in wanted]
        page_charts += [charts.runs_context_chart(series, phase, chart_id, levels=lv,
                                                  palette=palette)
                        for phase, chart_id in ((contract.DECODE, "chart-single"),
                                                (contract.PREFILL, "chart-prefill"))]
        # A matrix's heading: the run's label (hardware, engine, variant), or its name
        # where the family has another run of that label (the same setup on another date).
        labels = [r.short_label for r in model.runs]
        heads = [label if labels.count(label) == 1 else name
                 for label, name in zip(labels, run_names, strict=True)]
        return self.r.render("model.html", depth=1, model=model, charts=self.svg.fill(page_charts),
                             matrix_heads=heads,
                             peak_notes=_peak_notes(model.runs), nav="runs",
                             oppoint=rankings.page_context(model.runs, index=False, models=[model]),
                             tail_levels=lv, matrix_notes=family_matrix_notes(),
                             also_measured=lambda r: raterank.also_measured(
                                 r, trafficpage.summary(r.agg.traffic)))

    def compare_page(self, runs: list[RunView], tool_groups: list[Any] | None = None) -> str:
        # A site with traffic cells: their A/B tables, and the status rules that know
        # their statuses; without, the page as it was before them.
        traffic = any(r.agg.traffic or r.agg.rate for r in runs)  # rate cells: theirs too
        drafts = any(r.agg.spec for r in runs)  # speculative decoding: its A/B table, same script
        return self.r.render("compare.html", depth=0, groups=compare_groups(runs),
                             pick=compare_default(runs), metrics=COMPARE_METRICS, nav="compare",
                             traffic=traffic or drafts, STATUS_RULES=statuses.js_rules(traffic),
                             tool_groups=tool_groups or [])

    def tool_compare_page(self, group: Any, sections: list[dict[str, Any]]) -> str:
        """One server measured by several tools (site_builder/toolpages.py)."""
        return self.r.render("tools.html", depth=1, group=group, sections=sections, nav="compare",
                             stats=toolcompare.STATS)

    def explore_page(self, data: dict[str, Any], traffic: bool = False, rate: bool = False) -> str:
        """The explorer: its controls, and the default view's picture for readers without JS.
        `traffic` / `rate`: some run has prefix-reuse or conversation cells / rate cells,
        which the explorer leaves out (its points are decode matrix cells): a note says
        where they are."""
        dates = sorted(r["date"] for r in data["runs"] if r.get("date"))
        return self.r.render("explore.html", depth=0, families=data["families"], nav="explore",
                             filters=explore.filter_options(data["runs"]),
                             dates=(dates[0], dates[-1]) if dates else None,
                             traffic_note=" ".join(note for note, has in ((trafficpage.EXPLORE_NOTE, traffic),
                                                                          (raterank.EXPLORE_NOTE, rate))
                                                   if has),
                             slo_spec=data.get("slo", ""), **explorecharts.default_picture(data))

    def downloads_page(self, runs: list[RunView]) -> str:
        return self.r.render("downloads.html", depth=0, runs=runs,
                             schema_version=contract.SCHEMA_VERSION, nav="downloads")

    def methodology_page(self, text: str) -> str:
        return self.r.render("methodology.html", depth=0, body=markdown(text, notes=False),
                             nav="methodology")
