"""Per run -> the list of cell results every page shows.

Measured runs are recomputed from their raw Parquet with `rundir.metrics`,
so a page number always traces back to token timestamps; imported runs
(no raw data) carry their published `pub_*` aggregates as they are.
Aggregates are cached by a content hash of the run's files (plus the code
that computes them), so adding one run to a site does not recompute the rest.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir import contract, energy, intervals, statuses, tails, windows
from rundir.activity import Gauge, summed_gauge, window_activity_from_gauge
from rundir.io import RunData, atomic_write_text
from rundir.metrics import (
    Chunks,
    first_token_ns,
    has_negative_tokens,
    prefill_metrics,
    prefill_used,
)
from rundir.recheck import LIST_COLUMNS, completed_mask, figure_problems, group_requests
from rundir.validate import recheck_reason  # one wording with bench validate
from site_builder import drilldown, fingerprint
from site_builder.lengths import LengthStat, length_stats
from site_builder.rate import RateCell, rate_cells
from site_builder.spec import SpecCell, spec_cells
from site_builder.traffic import TrafficCell, traffic_cells

CACHE_FORMAT = 9  # 9: rate cells (site_builder/rate.py)
# Statuses whose cells get numbers on the pages.
NUMBER_STATUSES = statuses.NUMBER_STATUSES  # the status table (rundir/statuses.py)


@dataclass
class CellResult:
    """One planned cell with the numbers its row on the page shows.

    For prefill cells `total_tok_s` holds prompt tok/s, `ttft_ms` the cold
    TTFT and `completed` the number of samples, as the seeds show them.
    """

    phase: str
    context: int
    concurrency: int
    status: str
    reason: str | None = None
    client_bound: bool = False
    token_counting: str | None = None
    warmup_s: float | None = None
    # What measured the cell (cells.parquet's processes, hosts); None: not recorded
    processes: int | None = None
    hosts: int | None = None
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    tbt_ms: float | None = None
    avg_active: float | None = None
    avg_active_source: str | None = None  # "server", "client" or "published"
    completed: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None
    requests: int | None = None  # requests behind the numbers (measure or samples)
    has_detail: bool = False  # a drill-down page exists
    # GPU telemetry (rundir.energy), only for runs with gpu_metrics.parquet; None
    # elsewhere. Decode: over the window, per output token; prefill: over the used
    # samples (send to first token), per prompt token.
    avg_w: float | None = None  # all GPUs together
    peak_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None  # "counter", "integral" or "mixed"
    j_per_token: float | None = None
    tok_s_per_kw: float | None = None
    throttle: list[str] | None = None  # throttle classes over the flag share; [] none
    # Every rank of the per-request latencies (rundir/tails.py), by download column:
    # ttft_ms_p99, tbt_ms_p50, per_request_tok_s_p1, e2e_ms_p99_9, ttft_ms_n (samples);
    # None where too few samples. Empty for imported runs (no raw data).
    tails: dict[str, float | None] = field(default_factory=dict)
    # Repeats (`bench run --repeats k`): the windows behind the numbers, and per
    # metric key its 95% interval [lo, hi] over them (empty: one window, no interval).
    windows: int = 1
    intervals: dict[str, list[float]] = field(default_factory=dict)
    # One window (no `--repeats`): per metric key its noise band [lo, hi]
    # (rundir.intervals.one_window_bands), read only by the change rule
    # (site_builder/changes.py), never printed as an interval.
    noise: dict[str, list[float]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Stable id of the cell, also the drill-down page's file stem."""
        return f"{self.phase}-{self.context}-{self.concurrency}"

    @property
    def has_numbers(self) -> bool:
        return self.status in NUMBER_STATUSES

    @property
    def e2e_ms(self) -> float | None:
        """Median end-to-end latency of the requests completed in the window."""
        return self.tails.get(tails.E2E.column(tails.DEFAULT_LEVEL))

    def tail(self, key: str, level: str) -> float | None:
        """A metric at a level (rundir.tails.LEVELS): p50 is the published median."""
        if level == tails.DEFAULT_LEVEL:
            return getattr(self, key)
        return self.tails.get(tails.BY_KEY[key].column(level))


@dataclass
class RunAggregate:
    """A run's cells (sorted: prefill by context, then decode by context, concurrency)."""

    run_id: str
    source: str
    digest: str
    cells: list[CellResult]
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    telemetry: bool = False  # the run has GPU telemetry: its pages show the energy columns
    # Its traffic cells (prefix reuse, conversations; site_builder/traffic.py), apart from
    # `cells` (the matrix), which every page part that predates them reads as before.
    traffic: list[TrafficCell] = field(default_factory=list)
    # Its rate cells (site_builder/rate.py), apart from both.
    rate: list[RateCell] = field(default_factory=list)
    # Its decode cells' speculative-decoding acceptance (site_builder/spec.py); empty
    # unless some cell has a figure.
    spec: list[SpecCell] = field(default_factory=list)
    # Its requests' own lengths per phase (site_builder/lengths.py); empty unless some
    # request asked its own max_tokens or was sized on its own.
    lengths: list[LengthStat] = field(default_factory=list)

    def to_json(self) -> str:
        data = {
            "format": CACHE_FORMAT,
            "run_id": self.run_id,
            "source": self.source,
            "digest": self.digest,
            "cells": [asdict(x) for x in self.cells],
            "details": self.details,
            "telemetry": self.telemetry,
            "traffic": [asdict(x) for x in self.traffic],
            "rate": [asdict(x) for x in self.rate],
            "spec": [asdict(x) for x in self.spec],
        }
        if self.lengths:
            data["lengths"] = [asdict(x) for x in self.lengths]
        return json.dumps(data, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> RunAggregate:
        data = json.loads(text)
        if data.get("format") != CACHE_FORMAT:
            raise ValueError("stale cache format")
        names = {f.name for f in fields(CellResult)}
        cells = [CellResult(**{k: v for k, v in x.items() if k in names}) for x in data["cells"]]
        traffic = [TrafficCell(**x) for x in data.get("traffic", [])]
        rate = [RateCell(**x) for x in data.get("rate", [])]
        spec = [SpecCell(**x) for x in data.get("spec", [])]
        lengths = [LengthStat(**x) for x in data.get("lengths", [])]
        return cls(data["run_id"], data["source"], data["digest"], cells, data["details"],
                   bool(data.get("telemetry", False)), traffic, rate, spec, lengths)

    def head(self) -> RunAggregate:
        """The aggregate less its drill-down details (what the cache's head file holds)."""
        return RunAggregate(self.run_id, self.source, self.digest, self.cells,
                            telemetry=self.telemetry, traffic=self.traffic, rate=self.rate,
                            spec=self.spec, lengths=self.lengths)

    def decode(self) -> list[CellResult]:
        return [x for x in self.cells if x.phase == contract.DECODE]

    def prefill(self) -> list[CellResult]:
        return [x for x in self.cells if x.phase == contract.PREFILL]


def _sort_key(cell: CellResult) -> tuple[int, int, int]:
    return (0 if cell.phase == contract.PREFILL else 1, cell.context, cell.concurrency)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    v = float(value)
    return None if np.isnan(v) or np.isinf(v) else v


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _base_cell(row: dict[str, Any]) -> CellResult:
    return CellResult(
        phase=row["phase"],
        context=int(row["context"]),
        concurrency=int(row["concurrency"]),
        status=row["status"],
        reason=row.get("reason"),
        client_bound=bool(row.get("client_bound") or False),
        token_counting=row.get("token_counting"),
        warmup_s=_num(row.get("warmup_s")),
        processes=_int(row.get("processes")),
        hosts=_int(row.get("hosts")),
    )


def imported_cells(cells: pa.Table) -> list[CellResult]:
    """Cells of an imported run: the published aggregates, taken as they are.

    Whatever status a row has, its published numbers stand (a Looped row's
    ``0`` completed requests, an Over capacity row's 30.0 s): the page must
    show what the original showed. Charts and headlines still use only
    cells whose status carries numbers (``has_numbers``).
    """
    out = []
    for row in cells.to_pylist():
        if row["phase"] not in contract.MATRIX_PHASES:
            continue  # a traffic cell: never published with the matrix's figures
        cell = _base_cell(row)
        cell.total_tok_s = _num(row["pub_total_tok_s"])
        cell.per_request_tok_s = _num(row["pub_per_request_tok_s"])
        cell.ttft_ms = _num(row["pub_ttft_ms"])
        cell.tbt_ms = _num(row["pub_tbt_ms"])
        cell.avg_active = _num(row["pub_avg_active"])
        cell.avg_active_source = "published" if cell.avg_active is not None else None
        cell.completed = _int(row["pub_completed"])
        cell.output_tokens = _int(row["pub_output_tokens"])
        cell.measured_s = _num(row["pub_measured_s"])
        out.append(cell)
    return sorted(out, key=_sort_key)


def _rows(table: pa.Table, idx: np.ndarray) -> pa.Table:
    """table.take(idx) for ascending idx; a contiguous range is a zero-copy slice."""
    if len(idx) and int(idx[-1]) - int(idx[0]) + 1 == len(idx):
        return table.slice(int(idx[0]), len(idx))
    return table.take(pa.array(idx, type=pa.int64()))


def _put_energy(cell: CellResult, fig: energy.CellEnergy | None) -> None:
    """Copy a cell's telemetry figures onto it (nothing when there are none)."""
    if fig is None:
        return
    cell.avg_w, cell.peak_w, cell.energy_j = fig.avg_w, fig.peak_w, fig.energy_j
    cell.energy_source, cell.j_per_token = fig.energy_source, fig.j_per_token
    cell.tok_s_per_kw, cell.throttle = fig.tok_s_per_kw, list(fig.throttle_flags)


def _decode_cell(cell: CellResult, row: dict[str, Any], requests: pa.Table, chunks: Chunks,
                 done: np.ndarray, running: Gauge, waiting: Gauge,
                 details: dict[str, dict[str, Any]], gpu: pa.Table,
                 max_tokens: int | None = None, bounds: windows.Bounds | None = None) -> None:
    start, end = row.get("window_start_ns"), row.get("window_end_ns")
    if start is None or end is None or end <= start:
        return
    cell.requests = len(requests)
    per_window: list[dict[str, float | None]] = []
    if cell.has_numbers:
        m, problems = figure_problems(row, requests, chunks, done, max_tokens)  # as bench validate
        act = window_activity_from_gauge(chunks, waiting, start, end)
        if problems:
            # The raw data refutes the stored status (an older collector, a hand-made
            # run): publish what the collector now would, an Error naming the checks.
            cell.reason = recheck_reason(cell.status, problems, cell.reason)
            cell.status = contract.ERROR
        else:
            cell.total_tok_s = m.total_tok_s
            cell.per_request_tok_s = m.per_request_tok_s
            cell.ttft_ms = m.ttft_ms
            cell.tbt_ms = m.tbt_ms
            cell.avg_active = act.avg_active
            cell.avg_active_source = "server" if act.from_server else "client"
            cell.completed = m.completed
            cell.output_tokens = m.output_tokens
            cell.measured_s = m.duration_s
            figures = tails.request_figures(chunks, start, end, done)
            cell.tails = tails.decode_tails(figures)
            if len(gpu):
                _put_energy(cell, energy.cell_energy(gpu, start, end, m.output_tokens))
            if bounds is not None and len(bounds) > 1:
                per_window = _put_repeats(cell, chunks, done, bounds)
            else:
                cell.noise = intervals.one_window_bands(intervals.window_samples(
                    figures, np.zeros(chunks.n_requests, dtype=np.int64), 0,
                    intervals.slice_rates(chunks, start, end)))
    if len(requests):
        details[cell.key] = drilldown.decode_detail(
            requests, chunks, start, end, done=done, running=running, waiting=waiting,
            with_tails=cell.status in (contract.LOOPED, contract.ERROR), gpu=gpu,
        )
        if cell.has_numbers and cell.status != contract.ERROR:
            details[cell.key]["per_request"] = drilldown.per_request(figures)
            if cell.windows > 1:
                details[cell.key]["windows"] = per_window
        cell.has_detail = True


def _put_repeats(cell: CellResult, chunks: Chunks, done: np.ndarray,
                 bounds: windows.Bounds) -> list[dict[str, float | None]]:
    """A cell measured in k windows (`--repeats k`): its four headline figures
    become the median over the windows, with their 95% intervals; the tails,
    activity and counts stay over the whole span (more samples behind a p99).
    Returns each window's figures (the drill-down lists them). Never reached
    for a one-window cell, so k = 1 runs pay nothing for it."""
    first = windows.first_token_window(first_token_ns(chunks), bounds)
    samples = [intervals.window_samples(tails.request_figures(chunks, s, e, done), first, i,
                                        intervals.slice_rates(chunks, s, e))
               for i, (s, e) in enumerate(bounds)]
    found = intervals.repeated(samples, cell.key)
    for name, value in found.medians.items():
        setattr(cell, name, value)
    cell.windows = len(bounds)
    cell.intervals = found.intervals
    return found.per_window


def _prefill_cell(cell: CellResult, requests: pa.Table, chunks: Chunks,
                  details: dict[str, dict[str, Any]], gpu: pa.Table) -> None:
    prompt = np.asarray(
        pc.fill_null(requests.column("prompt_tokens"), 0).to_numpy(zero_copy_only=False)
        if len(requests) else np.zeros(0), dtype=np.int64,
    )
    cell.requests = len(requests)
    used = prefill_used(requests, chunks, prompt)
    if cell.has_numbers:
        pm = prefill_metrics(chunks.subset(np.flatnonzero(used)), prompt[used])
        cell.total_tok_s = pm.prompt_tok_s
        cell.ttft_ms = pm.ttft_ms
        cell.completed = pm.samples
        cell.tails = tails.prefill_tails(
            (first_token_ns(chunks) - chunks.send_ns)[used] / 1e6)
        if len(gpu) and used.any():
            spans = list(zip(chunks.send_ns[used].tolist(),
                             first_token_ns(chunks)[used].tolist(), strict=True))
            _put_energy(cell, energy.spans_energy(gpu, spans, int(prompt[used].sum())))
    if len(requests):
        details[cell.key] = drilldown.prefill_detail(
            requests, chunks, prompt, used=used, done=completed_mask(requests))
        cell.has_detail = True


_LIST_COLUMNS = LIST_COLUMNS


def measured_cells(data: RunData) -> tuple[list[CellResult], dict[str, dict[str, Any]]]:
    """Cells of a measured run, every number recomputed from the raw chunks.

    The chunks are flattened once for the whole table; a cell's requests are
    a range of it (the collector writes them together), so its chunks are
    views, not copies; only the small per-request columns are sliced out.
    """
    requests = data.requests
    groups = group_requests(requests)
    running = summed_gauge(data.server_metrics, contract.METRIC_RUNNING)
    waiting = summed_gauge(data.server_metrics, contract.METRIC_WAITING)
    chunks = Chunks.from_table(requests)
    has_negative_tokens(chunks)  # one pass for the run: each cell's chunks inherit "none"
    done = completed_mask(requests)
    small = requests.drop_columns([n for n in _LIST_COLUMNS if n in requests.column_names])
    empty = np.zeros(0, dtype=np.int64)
    repeated = windows.by_cell(data.windows) if len(data.windows) else {}
    details: dict[str, dict[str, Any]] = {}
    out = []
    for row in data.cells.to_pylist():
        if row["phase"] not in contract.MATRIX_PHASES:
            continue  # traffic cells: site_builder/traffic.py
        cell = _base_cell(row)
        key = (cell.phase, cell.context, cell.concurrency)
        if cell.phase == contract.DECODE and cell.token_counting == contract.COUNT_PEER_REQUEST:
            idx = groups.get((*key, contract.PURPOSE_MEASURE), empty)
            _request_tier_cell(cell, row, chunks.subset(idx), done[idx])
        elif cell.phase == contract.DECODE:
            idx = groups.get((*key, contract.PURPOSE_MEASURE), empty)
            _decode_cell(cell, row, _rows(small, idx), chunks.subset(idx), done[idx], running,
                         waiting, details, data.gpu_metrics, data.info.parameters.max_output_tokens,
                         repeated.get(key))
        else:
            idx = groups.get((*key, contract.PURPOSE_PREFILL))
            if idx is None:  # samples taken during another cell (e.g. decode warm-up)
                found = [v for k, v in groups.items()
                         if k[1] == cell.context and k[3] == contract.PURPOSE_PREFILL]
                idx = np.sort(np.concatenate(found)) if found else empty
            _prefill_cell(cell, _rows(small, idx), chunks.subset(idx), details,
                          data.gpu_metrics)
        out.append(cell)
    return sorted(out, key=_sort_key), details


def _request_tier_cell(cell: CellResult, row: dict[str, Any], chunks: Chunks,
                       done: np.ndarray) -> None:
    """A cell imported at tier request (first and last token and the count only): its
    TTFT, completions and end-to-end latency over the window; never a time between
    tokens or a rate, which need the chunks the format did not keep."""
    start, end = row.get("window_start_ns"), row.get("window_end_ns")
    cell.requests = chunks.n_requests
    if start is None or end is None or end <= start or not cell.has_numbers:
        return
    figures = tails.request_figures(chunks, start, end, done)
    ttft = figures.samples(tails.TTFT)
    cell.ttft_ms = float(np.median(ttft)) if len(ttft) else None
    e2e = figures.samples(tails.E2E)
    cell.completed = len(e2e)
    cell.measured_s = (end - start) / 1e9
    cell.tails = {**tails.tail_columns(ttft, tails.TTFT), **tails.tail_columns(e2e, tails.E2E)}


def aggregate_run(data: RunData, digest: str = "") -> RunAggregate:
    """Aggregate one validated run directory into its cell results.

    Imported runs carry their published aggregates, except another tool's output
    kept per request (issue 36): its figures are ours, over its steady window,
    computed by the same code as a measured run's."""
    if data.imported and not data.peer_requests:
        return RunAggregate(data.info.run_id, data.info.source, digest, imported_cells(data.cells))
    cells, details = measured_cells(data)
    return RunAggregate(data.info.run_id, data.info.source, digest, cells, details,
                        telemetry=len(data.gpu_metrics) > 0,
                        traffic=traffic_cells(data.cells, data.requests),
                        rate=rate_cells(data.cells, data.requests),
                        spec=spec_cells(data.cells, data.requests, data.info.engine.name),
                        lengths=length_stats(data.requests))


# --------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------

def code_salt() -> str:
    """A fingerprint of the code that computes aggregates (site_builder.fingerprint's
    rule: every module of rundir/ and site_builder/): changing it invalidates the cache."""
    return fingerprint.fingerprint(fingerprint.code_files(), f"format {CACHE_FORMAT}")[:16]


class AggregateCache:
    """Per-run aggregates stored as JSON files named by the run's content digest.

    Cells and drill-down details live in two files (`<digest>.json`,
    `<digest>.details.json`): a rebuild needs every run's cells for the
    site-wide pages but the details only of runs whose pages it renders.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, digest: str, part: str = "") -> Path:
        return self.folder / f"{digest}{part}.json"

    def has(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def has_details(self, digest: str) -> bool:
        """True when the run's drill-down details are on file (the entry is whole)."""
        return self._path(digest, ".details").is_file()

    def head_path(self, digest: str) -> Path:
        """The file of the run's cells (buildstate.RunIndex checks it is unchanged)."""
        return self._path(digest)

    def get(self, digest: str, details: bool = True) -> RunAggregate | None:
        """The cached aggregate (details empty unless asked for), or None."""
        try:
            agg = RunAggregate.from_json(self._path(digest).read_text(encoding="utf-8"))
            if details:
                agg.details = self.details(digest)
            elif not self._path(digest, ".details").is_file():
                return None  # half an entry: aggregate again
            return agg
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def details(self, digest: str) -> dict[str, dict[str, Any]]:
        """The drill-down details of a cached run (OSError/ValueError when missing)."""
        data = json.loads(self._path(digest, ".details").read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("bad details cache")
        return data

    def put(self, aggregate: RunAggregate) -> None:
        details = json.dumps(aggregate.details, separators=(",", ":"), allow_nan=False)
        atomic_write_text(self._path(aggregate.digest, ".details"), details)
        atomic_write_text(self._path(aggregate.digest), aggregate.head().to_json())

    def prune(self, keep: set[str]) -> None:
        """Drop entries of runs that are no longer in the data folder."""
        if not self.folder.is_dir():
            return
        for entry in os.scandir(self.folder):
            if entry.name.endswith(".json") and entry.name.split(".", 1)[0] not in keep:
                os.unlink(entry.path)
