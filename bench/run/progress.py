"""What the user sees while a sweep runs: the plan, a live matrix, an ETA.

Only presentation lives here; numbers shown live are the figures the
cell's judge computed with the same `rundir.metrics` functions the site uses.
With GPU telemetry the live view also shows each GPU's latest sample and a
line when throttling starts (bench.run.summary formats both).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import pyarrow as pa
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bench.core.plan import Cell, Plan
from bench.measure.cells import Settings
from bench.run.length_setup import length_lines
from bench.run.summary import (
    MARK_LEGEND,
    CellLine,
    ThrottleWatch,
    cell_label,
    cell_line,
    gpu_lines,
    header,
    legend,
    matrix_text,
    row,
    stored_line,
    table_lines,
)
from bench.server.telemetry import GpuTelemetry
from rundir.contract import (
    DECODE,
    ERROR,
    LOOPED,
    OVER_CAPACITY,
    PENDING,
    PREFILL,
    REQUESTS_QUEUED,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    VALID,
    matrix_key,
)
from rundir.words import context_label, status_label

NOT_RUN_YET = "…"  # the live table's mark for a cell still to run (not a status)
# A log or CI (stderr not a terminal): plain lines, never wrapped at 80 columns
LOG_WIDTH = 10_000


PREFILL_TOK_S_GUESS = 20_000  # until a prefill cell is measured: a mid-size model on one GPU


def _order(cell: Cell) -> tuple:
    """Prefill first, then decode, then the traffic cells, each by its key (empty parts first)."""
    rank = {PREFILL: 0, DECODE: 1}.get(cell.phase, 2)
    return (rank, cell.phase, cell.context, cell.concurrency, cell.reuse or -1, cell.turn or -1)


def estimate_s(cells: list[Cell], settings, prefill_tok_s: float = PREFILL_TOK_S_GUESS) -> float:
    """Rough time: per decode cell its C prefix warm-ups (C × context prompt
    tokens, queued), readiness, window and drain; per prefill cell its
    samples. Prompt processing dominates large cells, so its speed is the
    figure that matters."""
    total = 0.0
    for c in cells:
        if c.phase == DECODE:
            warm = c.concurrency * c.context / prefill_tok_s
            windows = getattr(settings, "repeats", 1)  # back-to-back: one warm-up, k windows
            total += warm + windows * settings.duration_s + settings.stable_s + 4
        else:
            total += settings.prefill_repeats * (0.2 + c.context / prefill_tok_s)
    return total


class Eta:
    """The remaining time, with the prompt-processing speed learnt from the
    prefill cells as they finish (they run first): the one figure the rough
    estimate cannot know, and the one that made a 24-minute sweep read
    "about 15"."""

    def __init__(self, settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self.prompt_tokens = 0.0
        self.prefill_s = 0.0
        self._began: float | None = None

    @property
    def prefill_tok_s(self) -> float:
        if self.prefill_s <= 0 or self.prompt_tokens <= 0:
            return PREFILL_TOK_S_GUESS
        return self.prompt_tokens / self.prefill_s

    def begin(self) -> None:
        self._began = self.clock()

    def end(self, cell: Cell) -> None:
        """A finished cell; a prefill cell teaches the prompt speed, overheads
        and retried samples included (so the estimate errs long)."""
        if self._began is None:
            return
        took = self.clock() - self._began
        self._began = None
        if cell.phase == PREFILL:
            self.prompt_tokens += self.settings.prefill_repeats * cell.context
            self.prefill_s += took

    def remaining_s(self, cells: list[Cell]) -> float:
        return estimate_s(cells, self.settings, self.prefill_tok_s)


def summary_line(counts: Mapping[str, int]) -> str:
    """'12 cells: 9 valid, 1 error, 2 skipped (over capacity)': valid, error
    and skipped always, the other statuses when any cell has them."""
    def word(status: str) -> str:
        return status_label(status).lower()

    parts = [f"{counts.get(VALID, 0)} {word(VALID)}"]
    for status in (REQUESTS_QUEUED, LOOPED, REUSE_OFF_TARGET, REUSE_UNVERIFIED):
        if counts.get(status):
            parts.append(f"{counts[status]} {word(status)}")
    parts.append(f"{counts.get(ERROR, 0)} {word(ERROR)}")
    parts.append(f"{counts.get(OVER_CAPACITY, 0)} skipped ({word(OVER_CAPACITY)})")
    if counts.get(PENDING):
        parts.append(f"{counts[PENDING]} pending")
    total = sum(counts.values())
    return f"{total} cell{'' if total == 1 else 's'}: " + ", ".join(parts)


def stderr_console() -> Console:
    """The terminal's console; on a log or CI (stderr not a terminal) one that
    prints every line whole instead of wrapping it at Rich's default 80 columns."""
    console = Console(stderr=True)
    if console.is_terminal:
        return console
    return Console(stderr=True, width=LOG_WIDTH, soft_wrap=True)


class Progress:
    """The plan, then one line per finished cell as it ends, then the matrix:
    live in a terminal, printed once at the end on a log."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or stderr_console()
        self.live: Live | None = None
        self.plan: Plan | None = None
        self.results: dict[tuple, str] = {}
        self.current: Cell | None = None
        self.remaining: list[Cell] = []
        self.eta: Eta | None = None
        self.telemetry: GpuTelemetry | None = None  # None: nothing GPU-related is shown
        self.watch = ThrottleWatch()
        self.lines: list[CellLine] = []  # this session's finished cells, for the end table
        self.earlier: list[CellLine] = []  # cells an earlier session measured (a resumed run)

    def show_plan(self, info, plan: Plan, todo: list[Cell], settings, kv_budget, kv_source, run_dir) -> None:
        self.eta = Eta(settings)
        self.remaining = list(todo)
        p = self.console.print
        # The server's own strings may hold "[...]": escaped, not read as markup.
        p(f"[bold]{escape(info.engine)}[/] {escape(info.version or '')} at "
          f"{escape(info.base_url)} serving [bold]{escape(info.model)}[/] "
          f"(max model length {info.max_model_len or 'unknown'})")
        for text in getattr(info, "notes", []):
            p(f"  note: {text}", markup=False, highlight=False)
        p(f"KV budget: {f'{kv_budget:,} tokens' if kv_budget else 'unknown'}"
          f"{f' ({kv_source})' if kv_source else ''}", markup=False, highlight=False)
        if (slots := plan.slots_line(todo)) is not None:
            p(slots, markup=False, highlight=False, soft_wrap=True)
        for line in plan.traffic_lines(todo):
            p(line, markup=False, highlight=False, soft_wrap=True)
        for line in length_lines(settings) if isinstance(settings, Settings) else ():
            p(line, markup=False, highlight=False, soft_wrap=True)
        p(f"Contexts: {', '.join(context_label(c) for c in plan.contexts) or 'none'}; "
          f"concurrency: {', '.join(map(str, plan.concurrency))}; "
          f"prefill at: {', '.join(context_label(c) for c in plan.prefill_contexts) or 'none'}")
        for text in plan.dropped:
            p(f"  dropped context {text}")
        skipped = [c for c in plan.cells if c.status != PENDING and c not in todo]
        for c in skipped:
            if c.status != VALID:
                p(f"  skip {c.phase} {context_label(c.context)} × {c.concurrency}{c.part}: "
                  f"{status_label(c.status)}{' — ' + c.reason if c.reason else ''}")
        if plan.workers is not None:
            p(plan.workers.line(), markup=False, highlight=False, soft_wrap=True)
        eta = estimate_s(todo, settings)
        k = getattr(settings, "repeats", 1)
        if k > 1:
            p(f"Repeats: {k} back-to-back windows of {settings.duration_s:g} s per decode cell")
        p(f"Will run {len(todo)} cells, about {eta / 60:.0f} min (refined as cells finish); "
          f"writing {run_dir}")

    def start(self, plan: Plan, store, telemetry: GpuTelemetry | None = None) -> None:
        """The live view; `telemetry` (an enabled sampler) adds the GPU panel,
        read by the display's own refresh thread, never the event loop. Cells
        an earlier session measured (a resumed run) show their figures, read
        back from the run directory, in the matrix and in the cell list."""
        self.plan = plan
        self.telemetry = telemetry if telemetry is not None and telemetry.enabled else None
        again = {c.key for c in self.remaining}
        requests = getattr(store, "requests", None)
        gpu = getattr(store, "resumed_gpu", None) if self.telemetry is not None else None
        for key, r in store.rows.items():
            status = r["status"]
            if status == PENDING:
                self.results[key] = NOT_RUN_YET
            elif key in again or status == OVER_CAPACITY or requests is None:
                self.results[key] = status_label(status)  # to measure now, or never measured
            else:
                line = stored_line(Cell(*key), r, requests, gpu)
                self.earlier.append(line)
                self.results[key] = matrix_text(line)
        self.note(header(self.telemetry is not None))
        for line, r in sorted(((x, store.rows[x.cell.key]) for x in self.earlier),
                              key=lambda p: _order(p[0].cell)):
            self._say(line, r.get("reason"))
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=2, get_renderable=self._view)
            self.live.start()

    def begin(self, cell: Cell) -> None:
        self.current = cell
        self.watch.new_cell()
        if self.eta is not None:
            self.eta.begin()
        self.results[cell.key] = "running"
        self._refresh()

    def end(self, cell: Cell, outcome, gpu: pa.Table | None = None) -> None:
        """A finished cell: its line of figures (`gpu`, the run's telemetry so
        far, gives J/token); in the matrix its decode total tok/s or its status."""
        line = cell_line(cell, outcome, gpu if self.telemetry is not None else None)
        self.results[cell.key] = matrix_text(line)
        if self.eta is not None and outcome.status != PENDING:  # interrupted: not a full cell
            self.eta.end(cell)
        if cell in self.remaining:
            self.remaining.remove(cell)
        self.lines.append(line)
        self._say(line, outcome.reason)
        if self.live is None:  # no refresh thread: look at the GPUs now
            self._look()
        self._refresh()

    def _say(self, line: CellLine, reason: str | None) -> None:
        """A cell's line, and its reason when it is not Valid or is client-bound
        (a Valid client-bound cell is marked, so its reason is printed too)."""
        self.note(row(line, self.telemetry is not None))
        if reason and (line.status != VALID or line.client_bound):
            self.note(f"  {cell_label(line.cell)}: {reason}")

    def note(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)  # may quote the server

    def summary(self, counts: Mapping[str, int]) -> None:
        """The run's last line on stderr: how its cells ended."""
        self.console.print(summary_line(counts), markup=False, highlight=False)

    def stop(self) -> None:
        """The final matrix (every cell's figures, earlier sessions' too). In a
        terminal the live view ends on it and every cell's line follows, in
        order; on a log, where each line was printed as its cell ended, the
        matrix is printed once and the legend under it."""
        every = [*self.earlier, *self.lines]
        if self.live is not None:
            self.live.update(self._table(final=True), refresh=True)
            self.live.stop()
            self.live = None
            if every:
                for text in table_lines(every, self.telemetry is not None):
                    self.note(text)
        elif self.plan is not None:
            self.console.print(self._table(final=True))
            for text in legend(every):
                self.note(text)

    def _look(self) -> list[str]:
        """The GPUs' latest sample as panel lines; prints a warning when
        throttling starts. Nothing without telemetry."""
        if self.telemetry is None:
            return []
        readings = self.telemetry.latest()
        where = cell_label(self.current) if self.current is not None else "the run"
        for text in self.watch.check(readings, where):
            self.note(text)
        return gpu_lines(readings)

    def _view(self) -> RenderableType:
        """What the live display draws at each refresh: the matrix and the GPUs."""
        panel = self._look()
        table = self._table()
        return Group(table, *(Text(t) for t in panel)) if panel else table

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._table())

    def _table(self, final: bool = False) -> Table:
        """The decode matrix (prefill in its caption), as the run page lays it out;
        `final`: the run's last, without an ETA."""
        plan = self.plan
        if final:
            title = "decode total tok/s"
        else:
            eta = self.eta.remaining_s(self.remaining) if self.eta else 0
            title = f"decode total tok/s (ETA {eta / 60:.1f} min)"
        table = Table(title=title)
        table.add_column("context")
        for c in plan.concurrency if plan else []:
            table.add_column(str(c), justify="right")
        for ctx in plan.contexts if plan else []:
            row = [context_label(ctx)]
            for c in plan.concurrency:
                row.append(self.results.get(matrix_key(DECODE, ctx, c), ""))
            table.add_row(*row)
        pre = [f"{context_label(c)}: {self.results.get(matrix_key(PREFILL, c, 1), '')}"
               for c in (plan.prefill_contexts if plan else [])]
        caption = ["prefill prompt tok/s " + "  ".join(pre)] if pre else []
        if any(x.client_bound for x in (*self.earlier, *self.lines)):
            caption.append(MARK_LEGEND)
        if caption:
            table.caption = "\n".join(caption)
        return table
