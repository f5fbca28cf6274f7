"""One run's published files: its pages, cell pages, tables, data script, raw files.

Written the same way by the build process and by a worker process
(`workers.render_one`), so it lives below both: `publish` and `workers`
import it, it imports neither.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from site_builder import curves, load, prices, raterank, runrows, slo
from site_builder.aggregate import AggregateCache, aggregate_run
from site_builder.pages import Pages
from site_builder.render import json_script
from site_builder.sitewriter import SiteWriter, digest
from site_builder.views import RunView


def csv_text(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """rows as CSV with a header of `columns`, else the first row's keys ('' when
    there are neither: no rows and no columns given)."""
    buf = io.StringIO()
    names = columns if columns is not None else list(rows[0]) if rows else []
    if names:
        w = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def json_text(value: Any) -> str:
    """value as the site's JSON files are written: readable, strict (no NaN)."""
    return json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def _details(cache: AggregateCache, run: RunView, src_dir: Path) -> dict[str, Any]:
    """A cached run's drill-down details; aggregated again if the cache lost them."""
    try:
        return cache.details(run.agg.digest)
    except (OSError, ValueError):
        agg = aggregate_run(load.load_run(load.RunSource(src_dir, run.agg.digest)),
                            run.agg.digest)
        cache.put(agg)
        return agg.details


DATA_FILES = ("cells.csv", "cells.json", "curve.csv", "curve.json", "data.js")
# Runs with rate cells only: their rate curve. Kept out of curve.csv, whose points are
# MLPerf's endpoint curve (one decode cell at a fixed number of requests each, its fixed
# columns documented in docs/data-format.md): a rate point's x is an offered rate, and its
# knee flag depends on the build's limits.
RATE_FILES = ("rate_curve.csv", "rate_curve.json")


def data_files(run: RunView) -> tuple[str, ...]:
    """The download and data files a run's folder holds."""
    return DATA_FILES + (RATE_FILES if run.agg.rate else ())


def _write_data(writer: SiteWriter, run: RunView, base: str, key: str) -> None:
    records = runrows.cell_records(run)
    writer.write(f"{base}/cells.csv", csv_text(records), key)
    writer.write(f"{base}/cells.json", json_text({"run": {**runrows.index_record(run),
                                                          "info": run.info.to_dict()},
                                                  "cells": records}), key)
    curve = curves.curve_record(run)
    writer.write(f"{base}/curve.csv", csv_text(curve["points"], curves.POINT_COLUMNS), key)
    writer.write(f"{base}/curve.json", json_text(curve), key)
    if run.agg.rate:
        limits = run.slo.slo if isinstance(run.slo, slo.RunSlo) else slo.DEFAULT
        rated = raterank.curve_record(run, limits)
        writer.write(f"{base}/rate_curve.csv", csv_text(rated["points"], raterank.CURVE_COLUMNS), key)
        writer.write(f"{base}/rate_curve.json", json_text(rated), key)
    writer.write(f"{base}/data.js", "(window.SPEED_MATRIX_RUNS = window.SPEED_MATRIX_RUNS || {})"
                 f"[{json_script(run.slug)}] = {json_script(runrows.compare_data(run))};\n", key)


def write_run(writer: SiteWriter, pages: Pages, run: RunView, fp: str,
              cache: AggregateCache | None = None) -> None:
    """Write everything under runs/<slug>/ for one run.

    Pages are keyed by the builder's fingerprint and the run's digest and
    slugs, so an unchanged run is not rendered again; a cached run's details
    are read only when its cell pages must be rendered, and freed after.
    """
    src_dir = Path(run.source_dir)
    base = f"runs/{run.slug}"
    key = digest(f"{fp}|{run.agg.digest}|{run.slug}|{run.family_slug}".encode())
    fall = run.regression.title if run.regression else ""
    page_key = digest(f"{key}|{run.series_slug}|{run.series_prev}|{run.series_next}|"
                      f"{fall}|{prices.page_key(run.price)}"  # and shows its cost
                      f"{'|' + run.tool_compare if run.tool_compare else ''}"  # links its tools' page
                      .encode())  # the run page links its series' neighbours
    slo.attach(run, cache.folder if cache is not None else None,  # goodput: page, downloads
               lambda: run.agg.details or (_details(cache, run, src_dir) if cache else {}))
    if not writer.is_current(f"{base}/index.html", page_key):
        writer.write(f"{base}/index.html", pages.run_page(run), page_key)
    cell_rels = [f"{base}/cells/{x.key}.html" for x in run.agg.cells if x.has_detail]
    if not all(writer.is_current(rel, key) for rel in cell_rels):
        if not run.agg.details and cell_rels and cache is not None:
            run.agg.details = _details(cache, run, src_dir)  # a cached run: load on demand
        for name, html in pages.cell_pages(run):
            writer.write(f"{base}/cells/{name}", html, key)
    run.agg.details = {}  # written: free the memory (site-wide pages need cells only)
    # The downloads and data script: keyed like the run page, plus its site-wide name and
    # its price (a cost is computed from it), so an unchanged run's are not made again.
    data_key = digest(f"{page_key}|{run.name}|{run.price!r}".encode())
    if not all(writer.is_current(f"{base}/{name}", data_key) for name in data_files(run)):
        _write_data(writer, run, base, data_key)
    for name, _size in run.raw_files:
        writer.copy(f"{base}/raw/{name}", src_dir / name, digest(f"{run.agg.digest}|{name}".encode()))
