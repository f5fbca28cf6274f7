"""Speculative decoding's acceptance per decode cell, as the pages and downloads publish it.

The client figure is rundir/speculative.py's, from the cell's measured requests'
stored chunks; the server figure is the collector's (cells.parquet
spec_tokens_per_step_server, from the engine's counters or timings). A run
publishes these only when some cell has either: every other run's pages and
downloads stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from rundir import contract
from rundir.speculative import agreement, client_figure


@dataclass
class SpecCell:
    """One decode cell's acceptance: tokens per verification step, client and server."""

    context: int
    concurrency: int
    client: float | None  # spec_tokens_per_step (None: not measurable, `note` says why)
    server: float | None  # spec_tokens_per_step_server (None: the engine told nothing)
    source: str | None  # which counters or timings the server figure came from
    note: str | None  # why the client figure is missing, or that the two disagree
    disagrees: bool = False  # both figures, more than 2% apart: published as disagreeing


def spec_cells(cells: pa.Table, requests: pa.Table, engine: str | None) -> list[SpecCell]:
    """Every measured decode cell's acceptance; empty unless the engine counted drafts."""
    rows = [r for r in cells.to_pylist() if r["phase"] == contract.DECODE
            and r["status"] != contract.PENDING]
    if not any(r.get("spec_tokens_per_step_server") is not None for r in rows):
        return []  # no engine-counted drafts: no client figure either (rundir/speculative.py)
    chunks: dict[tuple, list] = {}
    if len(requests):
        picked = requests.select(["phase", "context", "concurrency", "purpose", "chunk_tokens"])
        for r in picked.to_pylist():
            if r["phase"] == contract.DECODE and r["purpose"] == contract.PURPOSE_MEASURE:
                chunks.setdefault((r["context"], r["concurrency"]), []).append(r["chunk_tokens"])
    name = (engine or "").lower() or None
    out = []
    for row in rows:
        server = row.get("spec_tokens_per_step_server")
        fig = client_figure(chunks.get((row["context"], row["concurrency"]), []), name,
                            row.get("token_counting"), row.get("spec_draft_length"),
                            server is not None)
        off = agreement(fig.value, server)
        out.append(SpecCell(row["context"], row["concurrency"], fig.value, server,
                            row.get("spec_source"), off or fig.reason, off is not None))
    return sorted(out, key=lambda x: (x.context, x.concurrency))


# cells.csv / cells.json's speculative-decoding columns (names fixed by issue 35), after
# every other (runs with any acceptance figure only).
DOWNLOAD_COLUMNS = ["spec_tokens_per_step", "spec_tokens_per_step_server", "spec_source",
                    "spec_note"]


def download_extra(cell: SpecCell | None) -> dict[str, Any]:
    """The speculative-decoding columns of a row (None on a cell without them)."""
    if cell is None:
        return dict.fromkeys(DOWNLOAD_COLUMNS)
    return {"spec_tokens_per_step": cell.client, "spec_tokens_per_step_server": cell.server,
            "spec_source": cell.source, "spec_note": cell.note}


COMPARE_FIELDS = ["context", "concurrency", "client", "client_text", "server", "server_text",
                  "source", "note", "disagrees"]


def compare_data(cells: list[SpecCell]) -> dict[str, Any]:
    """Each cell's acceptance with its texts as the run page prints them (runs/<slug>/data.js
    "spec"), so the compare page's script formats nothing."""
    return {"fields": COMPARE_FIELDS,
            "cells": [[x.context, x.concurrency, x.client, steps(x.client), x.server, steps(x.server),
                       x.source, x.note, x.disagrees] for x in cells]}


def steps(value: float | None) -> str:
    """Tokens per step as the pages print it (three decimals: 2% is 0.02 of 1.0)."""
    return "—" if value is None else f"{value:.3f}"
