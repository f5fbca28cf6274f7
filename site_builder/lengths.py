"""The lengths a run's requests had, as the run page's details say them.

Why: with a length mix or a prompt file's own lengths (`--output-lengths`, `--input-lengths`)
each request asks its own `max_tokens` and rate requests send prompts of their own length,
so "Max output" and the context no longer tell a reader what was sent. From the run's
requests alone (requests.parquet `output_target`, `input_target`, `prompt_tokens`), per
phase: the asked output lengths and, where prompts were sized per request, the prompt
lengths the server counted, as min / median / max. A run without per-request lengths has
none, so its page stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rundir import contract
from rundir.words import context_label

_SENT = (contract.PURPOSE_MEASURE, contract.PURPOSE_ARRIVAL)  # decode streams, rate requests
_PHASES = (contract.DECODE, contract.RATE)


@dataclass
class LengthStat:
    """One phase's requests' lengths: asked max_tokens and prompt tokens, (min, median, max)."""

    phase: str
    requests: int  # measured requests of the phase with a per-request length
    output: list[float] | None  # output_target: (min, median, max); None: none asked its own
    prompt: list[float] | None  # prompt_tokens (the server's count; else input_target) of the
    #                             requests sized per request; None: every prompt at its context
    prompt_requests: int = 0
    # decode only: per cell [context, concurrency, least, most max_tokens asked], for a reader
    # comparing cells (each decode cell's streams start at one prompt: with a file's replies
    # every request of a cell asks one length, and cells may differ)
    cells: list[list[int]] | None = None


def _spread(values: list[int]) -> list[float] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return [float(a.min()), float(np.median(a)), float(a.max())]


def length_stats(requests: pa.Table) -> list[LengthStat]:
    """Per phase (decode, then rate), the lengths of its measured requests that had their own;
    empty for a run whose requests all asked the cell's own (no output_target, no input_target)."""
    names = set(requests.column_names)
    if not len(requests) or not {"output_target", "input_target"} & names:
        return []
    cols = [c for c in ("phase", "context", "concurrency", "purpose", "output_target", "input_target",
                        "prompt_tokens") if c in names]
    out = []
    rows = requests.select(cols).to_pylist()
    for phase in _PHASES:
        sent = [r for r in rows if r["phase"] == phase and r["purpose"] in _SENT]
        asked = [r["output_target"] for r in sent if r.get("output_target") is not None]
        sized = [r for r in sent if r.get("input_target") is not None]
        prompts = [r["prompt_tokens"] if r.get("prompt_tokens") is not None else r["input_target"]
                   for r in sized]
        if asked or prompts:
            out.append(LengthStat(phase, len(asked) if asked else len(prompts), _spread(asked),
                                  _spread(prompts), len(prompts),
                                  _per_cell(sent) if phase == contract.DECODE and asked else None))
    return out


def _per_cell(sent: list[dict]) -> list[list[int]]:
    by: dict[tuple[int, int], list[int]] = {}
    for r in sent:
        if r.get("output_target") is not None:
            by.setdefault((r["context"], r["concurrency"]), []).append(r["output_target"])
    return [[c, k, min(v), max(v)] for (c, k), v in sorted(by.items())]


def _cell_text(context: int, concurrency: int, low: int, high: int) -> str:
    """"1K×2 50–64": a decode cell and the max_tokens its requests asked."""
    return f"{context_label(context)}×{concurrency} {low:,}" + (f"–{high:,}" if high != low else "")


def _triple(values: list[float]) -> str:
    low, mid, high = values
    if low == high:
        return f"{low:,.0f}"
    return f"{low:,.0f} / {mid:,.0f} / {high:,.0f}"


def request_length_rows(stats: list[LengthStat]) -> list[tuple[str, str]]:
    """The run page's details rows: one per phase, lengths as min / median / max."""
    rows = []
    for s in stats:
        parts = []
        if s.output is not None:
            parts.append(f"max_tokens asked {_triple(s.output)}")
        if s.prompt is not None:
            parts.append(f"prompts {_triple(s.prompt)} tokens (the server's count)")
        label = "Decode request lengths" if s.phase == contract.DECODE else "Rate request lengths"
        spread = "min / median / max, " if any(v and v[0] != v[2] for v in (s.output, s.prompt)) else ""
        n = max(s.requests, s.prompt_requests)
        text = f"{'; '.join(parts)} ({spread}{n:,} request{'' if n == 1 else 's'})"
        if s.cells and len(s.cells) > 1 and s.output and s.output[0] != s.output[2]:
            text += "; per cell: " + ", ".join(_cell_text(*x) for x in s.cells)
        rows.append((label, text))
    return rows
