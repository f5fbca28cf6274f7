"""The run page's account of a run imported from another benchmark tool (issue 36).

Why a section of its own: the page's matrix shows our figures, computed from
the tool's per-request rows over the run's steady span (rundir/plateau.py);
the tool's own figures cover its whole run under its own definitions. Both
are shown, each labelled, with the tier that says what could be rebuilt and
checked, so a reader never takes one tool's number for another's.
"""

from __future__ import annotations

from typing import Any

from rundir.contract import (
    IMPORT_TIER_AGGREGATE,
    IMPORT_TIER_CHUNK,
    IMPORT_TIER_GAP,
    IMPORT_TIER_REQUEST,
    RunInfo,
)

# The published-figure vocabulary's order (importer/peers/model.py: the builder does not
# import the importer; tests/site check the two agree).
PUBLISHED_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "per_request_tok_s")
PUBLISHED_STATS = ("mean", "p50", "p90", "p99")
PUBLISHED_TOTALS = ("total_tok_s", "request_rate", "duration_s", "completed", "output_tokens")

TIER_TEXT = {
    IMPORT_TIER_CHUNK: ("chunk: every chunk's arrival as the tool stamped it; our figures and "
                        "checks are those of a measured run"),
    IMPORT_TIER_GAP: ("gap: chunk arrivals rebuilt from the send, the TTFT and each gap the tool "
                      "kept; our figures and checks are those of a measured run"),
    IMPORT_TIER_REQUEST: ("request: first and last token and the token count only; our TTFT, "
                          "completions and end-to-end latency are computed, time between tokens "
                          "and rates are not (the format does not keep them)"),
    IMPORT_TIER_AGGREGATE: ("aggregate: the tool's summary figures only; nothing was recomputed "
                            "or checked"),
}


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3f}"


def published_rows(published: list[Any], definitions: dict[str, str],
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tool's figures as one row per metric (its percentiles in columns, the definition
    once) and one row per total, in the vocabulary's order; a name outside it is a total row."""
    values = {f.name: f.value for f in published}
    metrics = []
    order = list(PUBLISHED_METRICS) + sorted({n.split(".")[0] for n in values if "." in n}
                                             - set(PUBLISHED_METRICS))
    for metric in order:
        stats = {st: values.get(f"{metric}.{st}") for st in PUBLISHED_STATS}
        if all(v is None for v in stats.values()):
            continue
        metrics.append({"name": metric, "definition": definitions.get(metric, ""),
                        "cells": [_fmt(v) if v is not None else "—" for v in stats.values()]})
    metric_keys = {f"{m}.{st}" for m in order for st in PUBLISHED_STATS}
    names = [t for t in PUBLISHED_TOTALS if t in values] + sorted(
        n for n in values if n not in PUBLISHED_TOTALS and n not in metric_keys)
    totals = [{"name": n, "value": _fmt(values[n]), "definition": definitions.get(n, "")} for n in names]
    return metrics, totals


def peer_section(info: RunInfo | None) -> dict[str, Any] | None:
    """Facts and the tool's published figures of an imported tool's run; None for any other run."""
    imp = info.imported if info is not None else None
    if imp is None or imp.tool is None:
        return None
    definitions = {d.name: d.text for d in imp.definitions or []}
    figures, totals = published_rows(imp.published or [], definitions)
    facts = [("Tool", imp.tool), ("Version", imp.tool_version or "not in the file"),
             ("Tier", TIER_TEXT.get(imp.tier or "", imp.tier or "not said")),
             ("Clock", imp.clock or "not said"), ("Format", imp.format or "not said")]
    if imp.lost:
        facts.append(("What the format does not keep", "; ".join(imp.lost)))
    return {"tool": imp.tool, "facts": facts, "figures": figures, "totals": totals,
            "stats": list(PUBLISHED_STATS),
            "ours": imp.tier != IMPORT_TIER_AGGREGATE}


__all__ = ["TIER_TEXT", "peer_section", "published_rows"]
