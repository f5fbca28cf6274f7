"""Traffic cells (prefix reuse, conversations) -> the figures their page parts show (pure).

Kept apart from the matrix (site_builder/aggregate.py): a run's prefill and
decode cells feed every existing table, chart, ranking and download as they
did before traffic cells existed; only the parts that know traffic cells read
these. The reuse a page shows is recomputed from the raw request rows with
rundir/reuse.py (what the server reported per request), next to the engine's
own count the collector stored per cell, never the knob that was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from rundir import contract, reuse
from rundir.checks import CELL_KEY
from rundir.metrics import first_content

# The requests a traffic cell's figures are over, by phase.
MEASURED_PURPOSE = {contract.PREFIX: contract.PURPOSE_REUSE,
                    contract.CONVERSATION: contract.PURPOSE_TURN}


@dataclass
class TrafficCell:
    """One traffic cell with the numbers its row shows (None: not measurable)."""

    phase: str
    context: int
    concurrency: int
    status: str
    reason: str | None = None
    target: int | None = None  # prefix cells: the reuse asked for (percent)
    turn: int | None = None  # conversation cells: the turn
    achieved: float | None = None  # percent of prompt tokens cached, from the requests
    server: float | None = None  # percent, from the engine (counters or timings)
    server_source: str | None = None
    ttft_ms: float | None = None  # median, send -> first content chunk
    uncached_tok_s: float | None = None  # median of (prompt - cached) / TTFT
    per_request_tok_s: float | None = None  # median, tokens after the first chunk / time
    prompt_tokens: float | None = None  # mean over the measured requests
    requests: int = 0  # measured requests behind the figures

    @property
    def has_detail(self) -> bool:
        """No drill-down page (the status notes ask)."""
        return False

    @property
    def key(self) -> tuple[str, int, int, int | None, int | None]:
        return (self.phase, self.context, self.concurrency, self.target, self.turn)


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def request_figures(req: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(TTFT ms, uncached prefill tok/s, per-request tok/s) of one request row;
    None where it did not finish normally or lacks what the figure needs."""
    if req.get("error") is not None or req.get("cancelled") or req.get("finish_reason") is None:
        return None, None, None
    ns, tok = req["chunk_ns"] or [], req["chunk_tokens"] or []
    first = first_content(tok)
    if first is None:
        return None, None, None
    ttft_s = (ns[first] - req["send_ns"]) / 1e9
    ttft = ttft_s * 1e3 if ttft_s > 0 else None
    uncached = None
    prompt, cached = req.get("prompt_tokens"), req.get("cached_tokens")
    if ttft is not None and prompt is not None and cached is not None:
        uncached = (prompt - cached) / ttft_s
    per_request = None
    span = (ns[-1] - ns[first]) / 1e9
    if len(ns) > first + 1 and span > 0:
        per_request = (tok[-1] - tok[first]) / span
    return ttft, uncached, per_request


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def cell_figures(row: dict[str, Any], requests: list[dict[str, Any]]) -> TrafficCell:
    """A traffic cell's figures from its cells.parquet row and its measured requests."""
    cell = TrafficCell(row["phase"], int(row["context"]), int(row["concurrency"]), row["status"],
                       row.get("reason"), _int(row.get("prefix_reuse_target")),
                       _int(row.get("turn")))
    cell.requests = len(requests)
    cell.achieved = reuse.requests_ratio([r.get("prompt_tokens") for r in requests],
                                         [r.get("cached_tokens") for r in requests])
    sp, sc = row.get("server_prompt_tokens"), row.get("server_cached_tokens")
    if sp is not None and sc is not None:
        cell.server = reuse.percent(sc, sp)
        cell.server_source = row.get("server_source")
    prompts = [r["prompt_tokens"] for r in requests if r.get("prompt_tokens") is not None]
    cell.prompt_tokens = float(np.mean(prompts)) if prompts else None
    figures = [request_figures(r) for r in requests]
    cell.ttft_ms = _median([f[0] for f in figures if f[0] is not None])
    cell.uncached_tok_s = _median([f[1] for f in figures if f[1] is not None])
    if cell.phase == contract.CONVERSATION:
        cell.per_request_tok_s = _median([f[2] for f in figures if f[2] is not None])
    return cell


def _order(cell: TrafficCell) -> tuple:
    return (0 if cell.phase == contract.PREFIX else 1, cell.context, cell.concurrency,
            cell.target if cell.target is not None else -1, cell.turn or 0)


_SMALL = (*CELL_KEY, "purpose", "send_ns", "prompt_tokens", "cached_tokens", "finish_reason",
          "error", "cancelled", "chunk_ns", "chunk_tokens")


def traffic_cells(cells: pa.Table, requests: pa.Table) -> list[TrafficCell]:
    """Every traffic cell of a run with its figures (empty for a run without any:
    nothing of the matrix is read)."""
    rows = [r for r in cells.to_pylist() if r["phase"] in MEASURED_PURPOSE]  # rate: site_builder/rate.py
    if not rows:
        return []
    phase = requests.column("phase").to_pylist() if len(requests) else []
    keep = [i for i, p in enumerate(phase) if p in MEASURED_PURPOSE]
    picked = requests.take(pa.array(keep, type=pa.int64())) if keep else requests.slice(0, 0)
    names = [n for n in _SMALL if n in picked.column_names]
    by_key: dict[tuple, list[dict[str, Any]]] = {}
    for r in picked.select(names).to_pylist():
        if r["purpose"] != MEASURED_PURPOSE.get(r["phase"]):
            continue
        by_key.setdefault(contract.cell_key(r), []).append(r)
    out = [cell_figures(row, by_key.get(contract.cell_key(row), [])) for row in rows]
    return sorted(out, key=_order)
