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
from bench.run.summary import (
    CellLine,
    ThrottleWatch,
    cell_label,
    cell_line,
    gpu_lines,
    header,
    row,
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
    VALID,
)
from rundir.statuses import carries_numbers
from rundir.words import context_label, status_label, tok_s

NOT_RUN_YET = "…"  # the live table's mark for a cell still to run (not a status)


PREFILL_TOK_S_GUESS = 20_000  # until a prefill cell is measured: a mid-size model on one GPU


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
    for status in (REQUESTS_QUEUED, LOOPED):
        if counts.get(status):
            parts.append(f"{counts[status]} {word(status)}")
    parts.append(f"{counts.get(ERROR, 0)} {word(ERROR)}")
    parts.append(f"{counts.get(OVER_CAPACITY, 0)} skipped ({word(OVER_CAPACITY)})")
    if counts.get(PENDING):
        parts.append(f"{counts[PENDING]} pending")
    total = sum(counts.values())
    return f"{total} cell{'' if total == 1 else 's'}: " + ", ".join(parts)


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live: Live | None = None
        self.plan: Plan | None = None
        self.results: dict[tuple[str, int, int], str] = {}
        self.current: Cell | None = None
        self.remaining: list[Cell] = []
        self.eta: Eta | None = None
        self.telemetry: GpuTelemetry | None = None  # None: nothing GPU-related is shown
        self.watch = ThrottleWatch()
        self.lines: list[CellLine] = []  # this session's finished cells, for the end table

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
        p(f"Contexts: {', '.join(context_label(c) for c in plan.contexts) or 'none'}; "
          f"concurrency: {', '.join(map(str, plan.concurrency))}; "
          f"prefill at: {', '.join(context_label(c) for c in plan.prefill_contexts) or 'none'}")
        for text in plan.dropped:
            p(f"  dropped context {text}")
        skipped = [c for c in plan.cells if c.status != PENDING and c not in todo]
        for c in skipped:
            if c.status != VALID:
                p(f"  skip {c.phase} {context_label(c.context)} × {c.concurrency}: "
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
        read by the display's own refresh thread, never the event loop."""
        self.plan = plan
        self.telemetry = telemetry if telemetry is not None and telemetry.enabled else None
        for key, status in ((k, r["status"]) for k, r in store.rows.items()):
            self.results[key] = NOT_RUN_YET if status == PENDING else status_label(status)
        self.note(header(self.telemetry is not None))
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
        text = status_label(outcome.status)
        if outcome.window and carries_numbers(outcome.status) and outcome.figures:
            text = tok_s(outcome.figures.total_tok_s) + ("*" if outcome.status != VALID else "")
        self.results[cell.key] = text
        if self.eta is not None and outcome.status != PENDING:  # interrupted: not a full cell
            self.eta.end(cell)
        if cell in self.remaining:
            self.remaining.remove(cell)
        line = cell_line(cell, outcome, gpu if self.telemetry is not None else None)
        self.lines.append(line)
        self.note(row(line, self.telemetry is not None))
        if outcome.reason and outcome.status != VALID:
            self.note(f"  {cell_label(cell)}: {outcome.reason}")
        if self.live is None:  # no refresh thread: look at the GPUs now
            self._look()
        self._refresh()

    def note(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)  # may quote the server

    def summary(self, counts: Mapping[str, int]) -> None:
        """The run's last line on stderr: how its cells ended."""
        self.console.print(summary_line(counts), markup=False, highlight=False)

    def stop(self) -> None:
        """The matrix, then every cell measured in this session, one line each."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        elif self.plan is not None:
            self.console.print(self._table())
        if self.lines:
            for text in table_lines(self.lines, self.telemetry is not None):
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

    def _table(self) -> Table:
        plan = self.plan
        eta = self.eta.remaining_s(self.remaining) if self.eta else 0
        table = Table(title=f"decode total tok/s (ETA {eta / 60:.1f} min)")
        table.add_column("context")
        for c in plan.concurrency if plan else []:
            table.add_column(str(c), justify="right")
        for ctx in plan.contexts if plan else []:
            row = [context_label(ctx)]
            for c in plan.concurrency:
                row.append(self.results.get((DECODE, ctx, c), ""))
            table.add_row(*row)
        pre = [f"{context_label(c)}: {self.results.get((PREFILL, c, 1), '')}"
               for c in (plan.prefill_contexts if plan else [])]
        if pre:
            table.caption = "prefill " + "  ".join(pre)
        return table
