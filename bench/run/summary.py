"""The terminal's figures: one fixed-width line per finished cell, and the GPU panel.

Why: an engineer on the box came for the numbers and should not have to build
a site for them: per prefill context its prompt tok/s and TTFT, per decode
cell its total tok/s, per-request tok/s, TTFT, status and, with GPU telemetry,
joules per token, in an 80-column terminal. The figures are the ones the pages
compute (rundir.metrics, rundir.energy), written in their formats (rundir.words).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.core.plan import Cell
from bench.measure.rate_cells import load_of
from rundir.arrivals import parse_process
from rundir.contract import (
    CONVERSATION,
    DECODE,
    LOAD_NOT_DELIVERED,
    PREFILL,
    PREFIX,
    PURPOSE_ARRIVAL,
    PURPOSE_MEASURE,
    PURPOSE_REUSE,
    PURPOSE_TURN,
    RATE,
    REQUESTS_QUEUED,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    VALID,
)
from rundir.energy import THROTTLE_CLASSES, cell_energy
from rundir.metrics import Chunks, decode_metrics, first_content, prefill_metrics, prefill_used
from rundir.reuse import requests_ratio
from rundir.words import (
    MISSING,
    context_label,
    is_missing,
    j_per_token,
    round_half_up,
    status_label,
    tok_s,
    ttft,
)

WIDTH = 80  # the terminal every line must fit
# statuses whose cells have figures (a traffic cell off its reuse target is shown, marked)
NUMBER_STATUSES = (VALID, REQUESTS_QUEUED, REUSE_OFF_TARGET, REUSE_UNVERIFIED, LOAD_NOT_DELIVERED)
NAME_CHARS = 16  # a GPU's name in the panel, cut to this


@dataclass
class CellLine:
    """One finished cell's figures as the terminal shows them (None: not measured)."""

    cell: Cell
    status: str
    tok_s: float | None = None  # decode: total output tok/s; prefill: prompt tok/s
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    j_per_token: float | None = None
    client_bound: bool = False  # the collector may have limited it: MARK beside its figures
    reused: float | None = None  # traffic cells: percent of prompt tokens the requests report cached
    load: Any = None  # rate cells: the delivered load (rundir.arrivals.LoadCheck)
    spec: float | None = None  # decode cells: the engine's tokens per verification step


def cell_label(cell: Cell) -> str:
    """``prefill 8K`` / ``decode 8K×64``."""
    if cell.phase == PREFILL:
        return f"prefill {context_label(cell.context)}"
    if cell.phase == PREFIX:
        return f"reuse {cell.reuse}% {context_label(cell.context)}×{cell.concurrency}"
    if cell.phase == CONVERSATION:
        return f"turn {cell.turn} {context_label(cell.context)}×{cell.concurrency}"
    if cell.phase == RATE:
        cap = f"≤{cell.concurrency}" if cell.concurrency else ""
        reuse = f" reuse {cell.reuse}%" if cell.reuse is not None else ""
        return f"{cell.rate:g}/s {context_label(cell.context)}{cap}{reuse}"
    return f"decode {context_label(cell.context)}×{cell.concurrency}"


def cell_line(cell: Cell, outcome: Any, gpu: pa.Table | None = None) -> CellLine:
    """The figures of a finished cell: the decode judge's own, a prefill cell's
    from its samples (rundir.metrics.prefill_used, as on the pages), joules per
    output token over the decode window when `gpu` (the run's telemetry) has it."""
    line = CellLine(cell, outcome.status, client_bound=bool(getattr(outcome, "client_bound", False)))
    if cell.phase == RATE:
        return _rate_figures(line, outcome.table, outcome.server or {}, outcome.window)
    if outcome.status not in NUMBER_STATUSES:
        return line
    if cell.phase == DECODE:
        fig, window = getattr(outcome, "figures", None), getattr(outcome, "window", None)
        if fig is not None and window is not None:
            _decode_figures(line, fig, window, gpu)
        line.spec = (getattr(outcome, "server", None) or {}).get("spec_tokens_per_step_server")
        return line
    table = getattr(outcome, "table", None)
    if table is not None and table.num_rows:
        (_traffic_figures if cell.traffic else _prefill_figures)(line, table)
    return line


def stored_line(cell: Cell, row: Mapping[str, Any], requests: pa.Table,
                gpu: pa.Table | None = None) -> CellLine:
    """The figures of a cell an earlier session measured (a resumed run), from
    its row of cells.parquet and its rows of requests.parquet (`requests`, the
    run's), computed as the judge and the pages compute them."""
    line = CellLine(cell, row["status"], client_bound=bool(row.get("client_bound")))
    if cell.phase == RATE and requests.num_rows:
        mine = requests.filter(pc.is_in(requests.column("request_id"),
                                        pa.array(_ids_of(cell, requests))))
        start, end = row.get("window_start_ns"), row.get("window_end_ns")
        return _rate_figures(line, mine, row, (start, end) if start is not None else None)
    if line.status not in NUMBER_STATUSES or not requests.num_rows:
        return line
    mine = requests.filter(pc.and_(pc.and_(pc.equal(requests.column("phase"), cell.phase),
                                           pc.equal(requests.column("context"), cell.context)),
                                   pc.equal(requests.column("concurrency"), cell.concurrency)))
    if cell.traffic:
        for name, value in (("prefix_reuse_target", cell.reuse), ("turn", cell.turn)):
            if value is not None and name in mine.column_names:
                mine = mine.filter(pc.fill_null(pc.equal(mine.column(name), value), False))
    if not mine.num_rows:
        return line
    if cell.traffic:
        _traffic_figures(line, mine)
        return line
    if cell.phase != DECODE:
        _prefill_figures(line, mine)
        return line
    start, end = row.get("window_start_ns"), row.get("window_end_ns")
    line.spec = row.get("spec_tokens_per_step_server")
    if start is None or end is None or end <= start:
        return line
    measured = mine.filter(pc.equal(mine.column("purpose"), PURPOSE_MEASURE))
    cancelled = np.asarray(pc.fill_null(measured.column("cancelled"), False)
                           .to_numpy(zero_copy_only=False), dtype=bool)
    failed = np.asarray(pc.is_valid(measured.column("error")).to_numpy(zero_copy_only=False),
                        dtype=bool)
    try:
        fig = decode_metrics(Chunks.from_table(measured), start, end, ~cancelled & ~failed)
    except ValueError:
        return line
    _decode_figures(line, fig, (start, end), gpu)
    return line


def _decode_figures(line: CellLine, fig: Any, window: tuple[int, int], gpu: pa.Table | None) -> None:
    line.tok_s = fig.total_tok_s
    line.per_request_tok_s = getattr(fig, "per_request_tok_s", None)
    line.ttft_ms = getattr(fig, "ttft_ms", None)
    tokens = getattr(fig, "output_tokens", None)
    if gpu is not None and gpu.num_rows and tokens:
        energy = cell_energy(gpu, window[0], window[1], tokens)
        line.j_per_token = energy.j_per_token if energy is not None else None


def _prefill_figures(line: CellLine, table: pa.Table) -> None:
    chunks = Chunks.from_table(table)
    prompt = np.asarray(pc.fill_null(table.column("prompt_tokens"), 0)
                        .to_numpy(zero_copy_only=False), dtype=np.int64)
    used = prefill_used(table, chunks, prompt)
    if used.any():
        pm = prefill_metrics(chunks.subset(np.flatnonzero(used)), prompt[used])
        line.tok_s, line.ttft_ms = pm.prompt_tok_s, pm.ttft_ms


def _traffic_figures(line: CellLine, table: pa.Table,
                     purposes: tuple[str, ...] = (PURPOSE_REUSE, PURPOSE_TURN)) -> None:
    """A traffic cell's median TTFT over its measured requests, to its first chunk with
    content as on the pages (a role chunk first is not a token); the pages chart the rest."""
    rows = table.filter(pc.is_in(table.column("purpose"), pa.array(list(purposes))))
    firsts = []
    for ns, tok, send in zip(rows.column("chunk_ns").to_pylist(), rows.column("chunk_tokens").to_pylist(),
                             rows.column("send_ns").to_pylist(), strict=True):
        first = first_content(tok)
        if first is not None and send is not None:
            firsts.append((ns[first] - send) / 1e6)
    line.ttft_ms = float(np.median(firsts)) if firsts else None
    line.reused = requests_ratio(rows.column("prompt_tokens").to_pylist(),
                                 rows.column("cached_tokens").to_pylist())


def _ids_of(cell: Cell, requests: pa.Table) -> list[str]:
    """The request ids of a rate cell's rows (its full key: phase, context, cap, rate)."""
    keys = zip(requests.column("phase").to_pylist(), requests.column("context").to_pylist(),
               requests.column("concurrency").to_pylist(),
               requests.column("rate_target").to_pylist() if "rate_target" in requests.column_names
               else [None] * requests.num_rows, requests.column("request_id").to_pylist(), strict=True)
    return [rid for phase, ctx, c, rate, rid in keys
            if (phase, ctx, c, rate) == (cell.phase, cell.context, cell.concurrency, cell.rate)]


def _rate_figures(line: CellLine, table: pa.Table | None, columns: Mapping[str, Any],
                  window: tuple[int, int] | None) -> CellLine:
    """A rate cell's median TTFT, and the load it delivered (schedule computed again
    from its seed), whatever its status: a cell that did not deliver shows why."""
    if table is None or not table.num_rows or window is None or columns.get("arrivals") is None:
        return line
    if line.status in NUMBER_STATUSES:
        _traffic_figures(line, table, (PURPOSE_ARRIVAL,))
        line.reused = None
    line.load = load_of(parse_process(columns["arrivals"]), line.cell, window,
                        int(columns["arrival_seed"]), table)
    return line


def matrix_text(line: CellLine) -> str:
    """A cell in the live matrix, as the run page's matrix shows it: total
    tok/s (MARK when client-bound), the status word under it when not Valid;
    a cell without numbers, its status word."""
    if line.status not in NUMBER_STATUSES or line.tok_s is None:
        return status_label(line.status) + (MARK if line.client_bound else "")
    text = tok_s(line.tok_s) + (MARK if line.client_bound else "")
    return text if line.status == VALID else f"{text}\n{status_label(line.status)}"


# Columns: cell, tok/s, tok/s per request, TTFT, J/token (with telemetry), status.
_LABEL, _TOK, _REQ, _TTFT, _J = 17, 9, 10, 11, 8


def header(energy: bool) -> str:
    """The column heads of the cell lines."""
    j = f"{'J/tok':>{_J}}" if energy else ""
    return (f"{'cell':<{_LABEL}}{'tok/s':>{_TOK}}{'tok/s/req':>{_REQ}}{'TTFT':>{_TTFT}}{j}"
            "  status")


LEGEND = "tok/s: decode output of all streams, prefill prompt; medians per request"
MARK = "*"  # client-bound, and nothing else: the pages' mark (site_builder/glossary.py)
MARK_LEGEND = f"{MARK} client-bound: the collector may have limited it (reason under its line)"


def row(line: CellLine, energy: bool) -> str:
    """One cell, fixed columns: a prefill row leaves the per-request and J/tok
    columns blank (they are decode figures); missing figures read as MISSING."""
    measured = line.status in NUMBER_STATUSES
    decode = line.cell.phase == DECODE

    def shown(text: str, applies: bool = True) -> str:
        return text if applies and measured else ""

    tok = shown(tok_s(line.tok_s))
    req = shown(tok_s(line.per_request_tok_s), decode)
    first = shown(ttft(line.ttft_ms))
    j = f"{shown(j_per_token(line.j_per_token), decode):>{_J}}" if energy else ""
    # what a traffic cell's server reused: the figure its pages lead with (rundir/reuse.py)
    reused = f", {line.reused:.1f}% cached" if line.reused is not None and measured else ""
    if line.spec is not None and measured:  # speculative decoding: what the engine accepted
        reused = f", {line.spec:.2f} tokens/step (engine)"
    if line.load is not None:  # what the client delivered, whatever the verdict
        lag = line.load.lag_p99_ms
        reused = (f", {line.load.achieved_rate:.3g} req/s sent of {line.load.schedule_rate:.3g} "
                  f"scheduled" + (f", lag p99 {lag:.2f} ms" if lag is not None else ""))
    return (f"{cell_label(line.cell):<{_LABEL}}{tok:>{_TOK}}{req:>{_REQ}}{first:>{_TTFT}}{j}"
            f"  {status_label(line.status)}{MARK if line.client_bound else ''}{reused}")


def table_lines(lines: Iterable[CellLine], energy: bool) -> list[str]:
    """The end-of-run table: prefill contexts, then decode cells by context and
    concurrency; the heads and the legend once."""
    def order(x: CellLine) -> tuple:
        rank = {PREFILL: 0, DECODE: 1}.get(x.cell.phase, 2)
        return (rank, x.cell.phase, x.cell.context, x.cell.concurrency, x.cell.reuse or -1,
                x.cell.turn or -1)

    lines = sorted(lines, key=order)
    return [header(energy), *(row(x, energy) for x in lines), *legend(lines)]


def legend(lines: Iterable[CellLine]) -> list[str]:
    """What the figures are, and what the mark means when a cell carries it."""
    return [LEGEND, *([MARK_LEGEND] if any(x.client_bound for x in lines) else [])]


# -- the GPU panel ----------------------------------------------------------------


def _whole(value: Any, unit: str, width: int) -> str:
    text = MISSING if is_missing(value) else f"{round_half_up(float(value), 0):,.0f}"
    return f"{text:>{width}}{unit}"


def throttled(reading: Mapping[str, Any]) -> list[str]:
    """The throttle classes (rundir.energy's) active in one GPU's reading."""
    bits = reading.get("throttle_reasons")
    if bits is None:
        return []
    return [name for name, mask in THROTTLE_CLASSES.items() if int(bits) & mask]


def gpu_lines(readings: list[Mapping[str, Any]]) -> list[str]:
    """Per GPU of the latest sample: watts, SM clock, temperature, utilisation."""
    out = []
    for r in readings:
        name = str(r.get("gpu_name") or "")[:NAME_CHARS]
        text = (f"GPU {r['gpu']} {name:<{NAME_CHARS}} {_whole(r.get('power_w'), ' W', 5)}"
                f"  SM {_whole(r.get('sm_clock_mhz'), ' MHz', 5)}"
                f"  {_whole(r.get('temp_c'), ' °C', 3)}  util {_whole(r.get('util_gpu_pct'), '%', 3)}")
        out.append(text + ("  throttled" if throttled(r) else ""))
    return out


class ThrottleWatch:
    """Says when throttling starts: a line when a GPU enters a throttle class it
    was not in at the last look, at most once per GPU and class in a cell (a
    power cap flickers under load and would print a line at every look)."""

    def __init__(self) -> None:
        self._active: set[tuple[int, str]] = set()
        self._warned: set[tuple[int, str]] = set()

    def new_cell(self) -> None:
        self._warned.clear()

    def check(self, readings: list[Mapping[str, Any]], where: str) -> list[str]:
        """Warning lines for the classes that started since the last look."""
        now = {(int(r["gpu"]), name) for r in readings for name in throttled(r)}
        started = now - self._active - self._warned
        self._active = now
        self._warned |= started
        by_gpu: dict[int, list[str]] = defaultdict(list)
        for gpu, name in started:
            by_gpu[gpu].append(name)
        out = []
        for r in readings:
            names = [n for n in THROTTLE_CLASSES if n in by_gpu.get(int(r["gpu"]), [])]
            if names:
                out.append(_warning(r, names, where))
        return out


def _warning(reading: Mapping[str, Any], names: list[str], where: str) -> str:
    """One line: the GPU, the classes, and as much context as fits WIDTH."""
    base = f"GPU {reading['gpu']} throttling: {', '.join(names)}"
    detail = (f" (SM {_whole(reading.get('sm_clock_mhz'), ' MHz', 0)}, "
              f"{_whole(reading.get('power_w'), ' W', 0)}, {_whole(reading.get('temp_c'), ' °C', 0)})")
    for text in (f"{base} in {where}{detail}", f"{base} in {where}", base):
        if len(text) <= WIDTH:
            return text
    return base[:WIDTH - 1] + "…"
