"""A run as rows: its line of the index (index.json, index.csv, the index
and model tables), its cells' download records (cells.json, cells.csv) and
the A/B page's per-cell numbers (data.js).

Kept apart from `site_builder.views.RunView`, which says what a page shows of
a run (identity, summary, fact blocks, matrix): these are the machine-read
forms, whose columns are a published format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rundir import contract, tails, words
from site_builder import metrictable, rate, ratepage, raterank, slo, spec, trafficpage
from site_builder.aggregate import CellResult
from site_builder.views import RunView


def index_record(run: RunView) -> dict[str, Any]:
    """The run's line in index.json / index.csv / the index table."""
    h, e = run.info.hardware, run.info.engine
    ss, pk, pf = run.single_stream, run.peak, run.prefill_8k
    return {
        "run_id": run.run_id,
        "slug": run.slug,
        "title": run.title,
        "model": run.model,
        "family": run.family,
        "family_slug": run.family_slug,
        "variant": run.variant or None,
        "gpu": h.gpu_name or h.cpu or h.type,
        "gpu_count": h.gpu_count,
        "vram_gb_per_gpu": h.vram_gb_per_gpu,
        "engine": e.name,
        "engine_version": e.version,
        "quantization": e.quantization,
        "measured_at": run.info.measured_at,
        "measured": run.measured_date or None,
        "submitter": run.info.submitter,
        "source": run.info.source,
        "single_stream_tok_s": ss.total_tok_s if ss else None,
        "single_stream_context": ss.context if ss else None,
        "peak_total_tok_s": pk.total_tok_s if pk else None,
        "peak_context": pk.context if pk else None,
        "peak_concurrency": pk.concurrency if pk else None,
        "peak_status": pk.status if pk else None,
        "peak_status_label": words.status_label(pk.status) if pk else None,
        "prefill_8k_tok_s": pf.total_tok_s if pf else None,
        "page": run.page,
        "cells_json": f"runs/{run.slug}/cells.json",
        "cells_csv": f"runs/{run.slug}/cells.csv",
        "data_js": f"runs/{run.slug}/data.js",
    }

def cell_records(run: RunView) -> list[dict[str, Any]]:
    """Every cell with its raw (unrounded) numbers, for CSV/JSON downloads.

    The columns, in their published order: the cell's key and status; the metric
    table's download columns (site_builder/metrictable.py), then its telemetry
    ones for runs with telemetry; every percentile with its sample counts
    (rundir/tails.py); the windows behind the numbers and the 95% intervals.
    A figure a cell lacks (an imported run's tails, a cell without numbers) is
    an empty value, never a missing column: every row has the same keys.
    """
    measured = metrictable.download_columns("cells")
    if run.agg.telemetry:
        measured += metrictable.download_columns("energy")
    out = []
    for x in run.agg.cells:
        out.append({
            "run_id": run.run_id,
            "phase": x.phase,
            "context": x.context,
            "context_label": words.context_label(x.context),
            "concurrency": x.concurrency,
            "status": x.status,
            "status_label": words.status_label(x.status),
            "reason": x.reason,
            "client_bound": x.client_bound,
            **{name: _download_value(x, name) for name in measured},
            **{name: x.tails.get(name) for name in TAIL_COLUMNS},
            **_interval_record(x),
            **(run.slo.record(x) if run.slo is not None else {}),  # site_builder/slo.py
        })
    if run.agg.traffic:  # runs with traffic cells only: the others' downloads as before
        out = [{**r, **trafficpage.download_extra(None)} for r in out] + _extra_records(
            run, run.agg.traffic, out, _traffic_columns)
    if run.agg.rate:  # runs with rate cells only: the others' downloads as before
        reuse = bool(out) and "prefix_reuse_target" in out[0]
        out = [{**r, **ratepage.download_extra(None)} for r in out] + _extra_records(
            run, run.agg.rate, out, lambda x: _rate_columns(run, x, reuse))
    if run.agg.spec:  # runs with acceptance figures only: the others' downloads as before
        by_key = {(x.context, x.concurrency): x for x in run.agg.spec}
        out = [{**r, **spec.download_extra(by_key.get((r["context"], r["concurrency"]))
                                           if r["phase"] == contract.DECODE else None)}
               for r in out]
    source = run.info.parameters.prompt_source
    if source:  # runs with a prompt source only (one a run: --resume keeps it); issue 35's name
        out = [{**r, "prompt_source": source} for r in out]
    return out


def _extra_records(run: RunView, cells: list[Any], before: list[dict[str, Any]],
                   columns: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of cells off the matrix (traffic, rate): the keys of the rows `before`
    them, each filled with its cell's key and status and `columns(cell)`, every other
    column empty."""
    out = []
    for x in cells:
        row = dict.fromkeys(before[0]) if before else {}
        row |= {"run_id": run.run_id, "phase": x.phase, "context": x.context,
                "context_label": words.context_label(x.context), "concurrency": x.concurrency,
                "status": x.status, "status_label": words.status_label(x.status),
                "reason": x.reason, "client_bound": False, **columns(x)}
        out.append(row)
    return out


def _traffic_columns(x: Any) -> dict[str, Any]:
    """A traffic cell's TTFT and per-request tok/s (the same measures as the matrix's
    columns of those names) and its reuse columns."""
    return {"ttft_ms": x.ttft_ms, "per_request_tok_s": x.per_request_tok_s,
            **trafficpage.download_extra(x)}


def _rate_columns(run: RunView, x: Any, reuse: bool) -> dict[str, Any]:
    """A rate cell's delivered load and the columns that mean for it what they mean for
    a decode cell (TTFT and time between tokens at every level, per request from send;
    output tok/s as total tok/s: all its requests' tokens over the span they took); its
    reuse level as prefix_reuse_target where the run has that column (`reuse`)."""
    out = {"total_tok_s": x.output_tok_s, "ttft_ms": x.tail("ttft_ms", "p50"),
           "tbt_ms": x.tail("tbt_ms", "p50"), **{k: v for k, v in x.tails.items() if k in TAIL_COLUMNS},
           **ratepage.download_extra(x)}
    if reuse:
        out["prefix_reuse_target"] = x.reuse_target
    if run.slo is not None:  # the share of its requests meeting the SLO, as for a decode cell
        out["slo_met_share"] = rate.judge(x, run.slo.slo).goodput.share
    return out


# Every percentile column with its sample count: ttft_ms_p50 … e2e_ms_n (rundir/tails.py).
TAIL_COLUMNS = tails.all_columns()


def _download_value(x: CellResult, name: str) -> Any:
    """A cell field as the downloads write it (the throttle classes joined by ';')."""
    value = getattr(x, name)
    return ";".join(value) if isinstance(value, list) else value


def _interval_record(x: CellResult) -> dict[str, Any]:
    """The windows behind a measured decode cell's numbers (empty elsewhere: an imported
    run has none, a prefill cell is its samples) and each compared metric's 95% interval
    over them ([lo, hi]; empty with one window: an interval is never invented)."""
    measured = x.phase == contract.DECODE and bool(x.tails)
    out: dict[str, Any] = {"windows": x.windows if measured else None}
    for key in metrictable.INTERVAL_KEYS:
        lo, hi = x.intervals.get(key) or (None, None)
        out[f"{key}_ci95_lo"], out[f"{key}_ci95_hi"] = lo, hi
    return out

def compare_data(run: RunView) -> dict[str, Any]:
    """The compact per-cell numbers the A/B page needs (loaded as data.js).

    Each value comes with its text already formatted (the metric table's formats), as the
    run page shows it (prefill prompt tok/s whole, like the prefill list),
    so the page's script never re-implements the number rules."""
    cells = []
    repeated = any(x.windows > 1 for x in run.agg.cells)  # k = 1 runs: data.js as before
    for x in run.agg.cells:
        cells.append([
            x.phase, x.context, x.concurrency, x.status,
            *(getattr(x, m.key) for m in metrictable.COMPARED),
            words.context_label(x.context), words.status_label(x.status),
            *(m.listed_text(x) for m in metrictable.COMPARED)])
        if run.agg.telemetry:  # tok/s per kW: the page compares it only when both runs have it
            cells[-1] += [x.tok_s_per_kw, words.tok_s(x.tok_s_per_kw)]
        if repeated:  # --repeats k > 1: the windows and each 95% interval, [lo, hi] and its text
            cells[-1] += [x.windows, *(v for m in metrictable.COMPARED
                                       for v in (x.intervals.get(m.key), m.interval_text(x)))]
    energy = COMPARE_ENERGY_FIELDS if run.agg.telemetry else []
    spans = [f for m in metrictable.COMPARED for f in (f"{m.key}_ci", f"{m.key}_ci_text")]
    out = {"slug": run.slug, "run_id": run.run_id, "title": run.title,
           "engine": run.engine_summary, "page": run.page, "telemetry": run.agg.telemetry,
           "fields": [*COMPARE_FIELDS, *COMPARE_TEXT_FIELDS, *energy,
                      *(["windows", *spans] if repeated else [])], "cells": cells}
    if run.agg.traffic:  # prefix reuse, conversations: runs without them, data.js as before
        out["traffic"] = trafficpage.compare_data(run.agg.traffic)
    if run.agg.rate:  # rate cells: runs without them, data.js as before
        limits = run.slo.slo if isinstance(run.slo, slo.RunSlo) else slo.DEFAULT
        out["rate"] = raterank.compare_data(run.agg.rate, limits)
    if run.agg.spec:  # speculative decoding: runs without it, data.js as before
        out["spec"] = spec.compare_data(run.agg.spec)
    return out


# compare_data's columns: raw values, then the texts the page prints; the
# metrics are the metric table's compared ones (site_builder/metrictable.py).
COMPARE_FIELDS = ["phase", "context", "concurrency", "status",
                  *(m.key for m in metrictable.COMPARED)]
COMPARE_TEXT_FIELDS = ["context_label", "status_label",
                       *(f"{m.key}_text" for m in metrictable.COMPARED)]
# Runs with GPU telemetry only: total tok/s per kW of average GPU power, and its text.
COMPARE_ENERGY_FIELDS = ["tok_s_per_kw", "tok_s_per_kw_text"]
