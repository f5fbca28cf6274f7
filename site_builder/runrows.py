"""A run as rows: its line of the index (index.json, index.csv, the index
and model tables), its cells' download records (cells.json, cells.csv) and
the A/B page's per-cell numbers (data.js).

Kept apart from `site_builder.views.RunView`, which says what a page shows of
a run (identity, summary, fact blocks, matrix): these are the machine-read
forms, whose columns are a published format.
"""

from __future__ import annotations

from typing import Any

from rundir import words
from site_builder import metrictable
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
    """Every cell with its raw (unrounded) numbers, for CSV/JSON downloads."""
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
            "total_tok_s": x.total_tok_s,
            "per_request_tok_s": x.per_request_tok_s,
            "ttft_ms": x.ttft_ms,
            "tbt_ms": x.tbt_ms,
            "avg_active": x.avg_active,
            "avg_active_source": x.avg_active_source,
            "completed": x.completed,
            "output_tokens": x.output_tokens,
            "measured_s": x.measured_s,
            "requests": x.requests,
            "token_counting": x.token_counting,
            "warmup_s": x.warmup_s,
            **(_energy_record(x) if run.agg.telemetry else {}),
        })
    return out

def _energy_record(x: CellResult) -> dict[str, Any]:
    """A cell's GPU telemetry figures (runs with telemetry only: others keep their columns)."""
    return {"j_per_token": x.j_per_token, "avg_w": x.avg_w, "peak_w": x.peak_w,
            "energy_j": x.energy_j, "energy_source": x.energy_source,
            "tok_s_per_kw": x.tok_s_per_kw,
            "throttle": None if x.throttle is None else ";".join(x.throttle)}

def compare_data(run: RunView) -> dict[str, Any]:
    """The compact per-cell numbers the A/B page needs (loaded as data.js).

    Each value comes with its text already formatted (the metric table's formats), as the
    run page shows it (prefill prompt tok/s whole, like the prefill list),
    so the page's script never re-implements the number rules."""
    cells = []
    for x in run.agg.cells:
        cells.append([
            x.phase, x.context, x.concurrency, x.status,
            *(getattr(x, m.key) for m in metrictable.COMPARED),
            words.context_label(x.context), words.status_label(x.status),
            *(m.listed_text(x) for m in metrictable.COMPARED)])
        if run.agg.telemetry:  # tok/s per kW: the page compares it only when both runs have it
            cells[-1] += [x.tok_s_per_kw, words.tok_s(x.tok_s_per_kw)]
    energy = COMPARE_ENERGY_FIELDS if run.agg.telemetry else []
    return {"slug": run.slug, "run_id": run.run_id, "title": run.title,
            "engine": run.engine_summary, "page": run.page, "telemetry": run.agg.telemetry,
            "fields": [*COMPARE_FIELDS, *COMPARE_TEXT_FIELDS, *energy], "cells": cells}


# compare_data's columns: raw values, then the texts the page prints; the
# metrics are the metric table's compared ones (site_builder/metrictable.py).
COMPARE_FIELDS = ["phase", "context", "concurrency", "status",
                  *(m.key for m in metrictable.COMPARED)]
COMPARE_TEXT_FIELDS = ["context_label", "status_label",
                       *(f"{m.key}_text" for m in metrictable.COMPARED)]
# Runs with GPU telemetry only: total tok/s per kW of average GPU power, and its text.
COMPARE_ENERGY_FIELDS = ["tok_s_per_kw", "tok_s_per_kw_text"]
