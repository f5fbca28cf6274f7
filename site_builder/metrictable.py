"""The metric table: one record per published metric, everything a page needs of it.

A metric's computation lives in rundir/metrics.py and its definition in
docs/methodology.md (the glossary reads it there, by the record's `term`).
Everything else is here: its header (a table column, a glossary name and a
chart tooltip field at once), its hover text, unit, number format, which way
is better, the phases it applies to and whether it has tails (percentiles:
rundir/tails.py). The run page's All measurements, the cell pages' figures,
the chart tooltips, the compare page's choices and its script (given
`js_rules` as JSON by the build) and the glossary's metric terms iterate
this table, in its order: a record's place in TABLE is its place on the pages.

The downloads' metric columns are declared apart, in DOWNLOAD_COLUMNS: their
order is a published format (tools read cells.csv by position), so a new
metric's column goes at the end of its group there, wherever its record
stands on the pages.

Adding a metric is one record here, its computation and its methodology
entry (docs/contributing.md, "A metric"). The table is the builder's: the
collector's live view prints its own compact columns (bench/run/summary.py) with
the shared number formats of rundir/words.py, and needs nothing else of a metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rundir import tails
from rundir.contract import DECODE, PREFILL
from site_builder import formats

Format = Callable[[Any], str]


@dataclass(frozen=True)
class Metric:
    """How one published metric reads and compares."""

    key: str  # the CellResult attribute (or property) and the downloads' column
    header: str  # column header, glossary term name and chart tooltip field
    term: str | None  # glossary id: docs/methodology.md `{#term-<id>}` (None: no entry)
    hint: str  # the header's hover text
    fmt: Format  # the number as every page prints it
    unit: str  # what the number counts (headers name it; formats print ms and s)
    better: str | None  # "higher", "lower" or None (no better way)
    phases: tuple[str, ...]  # the cell phases it is published for
    # what it counts on a cell's page, per phase it is listed for there
    on_cell: dict[str, str] = field(default_factory=dict)
    column: str | None = None  # All measurements: "measured" (every run), "energy" (telemetry)
    tooltip: bool = False  # a field of the charts' tooltips
    compare: bool = False  # a choice on the compare page
    prefill_words: str | None = None  # the compare page's prefill table caption
    # a prefill cell's number where it differs (the prefill list's whole tok/s)
    prefill_fmt: Format | None = None

    def text(self, value: Any) -> str:
        """The value as the pages print it."""
        return self.fmt(value)

    def cell_text(self, cell: Any) -> str:
        """This metric of a cell, as the pages print it."""
        return self.fmt(getattr(cell, self.key))

    def interval_text(self, cell: Any) -> str | None:
        """The cell's 95% interval of this metric over repeated windows, as the pages
        print it ("6,120.4–6,288.0"), or None (one window: no interval is claimed)."""
        span = (getattr(cell, "intervals", None) or {}).get(self.key)
        return None if not span else f"{self.fmt(span[0])}–{self.fmt(span[1])}"

    def listed_text(self, cell: Any) -> str:
        """As the run page's lists print it: a prefill cell by `prefill_fmt` when it has one."""
        fmt = self.prefill_fmt if cell.phase == PREFILL and self.prefill_fmt else self.fmt
        return fmt(getattr(cell, self.key))

    @property
    def tail_metric(self) -> tails.TailMetric | None:
        """Its percentiles' definition (rundir/tails.py), or None: a figure with no tails."""
        return tails.BY_KEY.get(self.key)

    def tail_text(self, cell: Any, level: str) -> str:
        """This metric of a cell at a percentile level (p50: the published median), printed."""
        return self.fmt(cell.tail(self.key, level))


# Prefill's name for total tok/s first: a cell page lists a prefill cell's figures
# in this order, a decode cell's in the order of the decode records.
TABLE: tuple[Metric, ...] = (
    Metric("total_tok_s", "Prompt tok/s", "prompt-tok-s", "Prefill speed of a cold prompt.",
           formats.tok_s, "tok/s", "higher", (PREFILL,),
           on_cell={PREFILL: "median of the samples used"}, prefill_words="prompt tok/s"),
    Metric("total_tok_s", "Total tok/s", "total-tok-s", "Output tokens per second across all streams.",
           formats.tok_s, "tok/s", "higher", (DECODE,), on_cell={DECODE: ""},
           column="measured", tooltip=True, compare=True,
           prefill_fmt=lambda v: formats.tok_s(v, whole=True)),
    Metric("per_request_tok_s", "Per request tok/s", "per-request-tok-s",
           "Median decode speed one stream sees.", formats.tok_s, "tok/s", "higher", (DECODE,),
           on_cell={DECODE: ""}, column="measured", tooltip=True, compare=True),
    Metric("ttft_ms", "TTFT", "ttft", "Time to first token (median).", formats.ttft, "ms", "lower",
           (PREFILL, DECODE),
           on_cell={PREFILL: "median of the samples used", DECODE: "median over the requests"},
           column="measured", tooltip=True, compare=True, prefill_words="cold TTFT"),
    Metric("tbt_ms", "Time between tokens", "time-between-tokens",
           "Median time per generated token within a stream.", formats.tbt, "ms", "lower",
           (DECODE,), on_cell={DECODE: ""}, column="measured", tooltip=True, compare=True),
    # Published by its percentiles only (e2e_ms_p50 …): no column of All measurements.
    Metric("e2e_ms", "End-to-end latency", "end-to-end-latency",
           "Time from sending a request to the end of its stream (median, completed requests).",
           formats.ttft, "ms", "lower", (DECODE,)),
    Metric("avg_active", "Average active requests", "average-active-requests",
           "Time-weighted mean of requests in flight minus those waiting.", formats.average,
           "requests", None, (DECODE,), on_cell={DECODE: ""}, column="measured"),
    Metric("completed", "Completed requests", "completed-requests",
           "Requests that finished in the window.", formats.count, "requests", None,
           (PREFILL, DECODE),
           on_cell={PREFILL: "cold samples used", DECODE: "ended inside the window"},
           column="measured"),
    Metric("output_tokens", "Output tokens", "output-tokens", "Tokens generated inside the window.",
           formats.count, "tokens", None, (DECODE,), on_cell={DECODE: "inside the window"},
           column="measured"),
    Metric("measured_s", "Measured for", "measured-for", "Length of the measurement window.",
           formats.seconds, "s", None, (DECODE,), on_cell={DECODE: ""}, column="measured"),
    # GPU telemetry (runs that recorded it): the methodology's Energy and throttling.
    Metric("j_per_token", "J/token", "j-per-token",
           "Energy of all GPUs per generated token, in joules.", formats.joules_3g, "J", "lower",
           (PREFILL, DECODE), column="energy"),
    Metric("avg_w", "Avg W", "avg-w", "Average power of all GPUs over the window.",
           formats.count, "W", None, (PREFILL, DECODE), column="energy"),
    Metric("tok_s_per_kw", "Total tok/s per kW", None,
           "Total tok/s per kW of average GPU power.", formats.tok_s, "tok/s per kW", "higher",
           (DECODE,)),
)

BY_TERM: dict[str, Metric] = {m.term: m for m in TABLE if m.term}
MEASURED = [m for m in TABLE if m.column == "measured"]
ENERGY = [m for m in TABLE if m.column == "energy"]
TOOLTIP = [m for m in TABLE if m.tooltip]
COMPARED = [m for m in TABLE if m.compare]
# The figures published at every percentile level (rundir/tails.py), in the table's order.
TAILED = [m for m in TABLE if m.tail_metric is not None]
# The metrics with a 95% interval over repeated windows (`{key}_ci95_lo`/`_hi`): those the
# A/B page compares, which calls a difference significant only when the intervals separate.
INTERVAL_KEYS: tuple[str, ...] = tuple(m.key for m in COMPARED)
# Shown only beside the energy metrics: the throttle classes, a list, not a number.
THROTTLING = "Throttling"


def on_cell_page(phase: str) -> list[Metric]:
    """The figures a cell page lists for a cell of this phase, in order."""
    return [m for m in TABLE if phase in m.on_cell]


# cells.csv / cells.json's metric columns in their published order: "cells" for every
# run, "energy" for runs with telemetry (site_builder/runrows.py puts them after the
# cell's key and status, before the tails). Each metric's key is followed by the cell
# fields that qualify it (avg_active_source) or say what it was measured over. Not
# TABLE's order, which is the pages': a new metric goes at the end of its group here
# and wherever it reads best on the pages. e2e_ms has no column of its own (its
# percentiles are published, e2e_ms_p50 the median).
DOWNLOAD_COLUMNS: dict[str, tuple[str, ...]] = {
    "cells": ("total_tok_s", "per_request_tok_s", "ttft_ms", "tbt_ms", "avg_active",
              "avg_active_source", "completed", "output_tokens", "measured_s", "requests",
              "token_counting", "warmup_s"),
    "energy": ("j_per_token", "avg_w", "peak_w", "energy_j", "energy_source", "tok_s_per_kw",
               "throttle"),
}


def download_columns(group: str) -> list[str]:
    """The downloads' columns of a group ("cells" or "energy"), in their published order."""
    return list(DOWNLOAD_COLUMNS[group])


def downloaded(metric: Metric) -> str | None:
    """The download group whose columns carry this metric, or None (none does)."""
    return next((g for g, cols in DOWNLOAD_COLUMNS.items() if metric.key in cols), None)


def glossary_metrics(energy: bool = False) -> list[Metric]:
    """The metrics with a glossary entry, in the glossary's order: a decode cell's
    figures in the table's order, then prefill's own (Prompt tok/s); or, with
    `energy`, the telemetry figures."""
    termed = [m for m in TABLE if m.term and (m.column == "energy") == energy]
    return sorted(termed, key=lambda m: DECODE not in m.phases)


def js_rules() -> dict[str, object]:
    """What the compare page's script needs: which way is better for each metric
    it can compare (its choices and tok/s per kW), and the prefill table's caption
    words for the metrics prefill cells have."""
    ranked = [m for m in TABLE if m.compare or m.key == "tok_s_per_kw"]
    return {"higher": {m.key: m.better == "higher" for m in ranked},
            "prefill": {m.key: m.prefill_words for m in TABLE if m.prefill_words}}
