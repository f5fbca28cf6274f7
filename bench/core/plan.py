"""The sweep plan: which cells run, which are skipped and why (pure).

Contexts × concurrency levels, the largest-context fit rule and the KV
budget check live here, so the plan printed before a run is exactly the
plan that runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from bench.core.workers import WorkerPlan
from rundir.contract import CONVERSATION, DECODE, OVER_CAPACITY, PENDING, PREFILL, PREFIX, RATE
from rundir.words import context_label

DEFAULT_CONTEXTS = (8192, 16384, 32768, 65536, 131072)
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128)
FIT_MARGIN = 64  # tokens of headroom for the chat template and specials
TRIM_RATIO = 0.9


class PlanError(ValueError):
    pass


MAX_TOKENS = 1 << 40  # a token count beyond this is a typo, and would overflow int64 sums
MAX_CONCURRENCY = 16_384  # streams per cell; past one process, --workers spreads them
MAX_TURNS = 1024  # conversation turns; each resends the whole history
MAX_RATE = 1_000_000.0  # offered requests/s; past this a rate is a typo
RATE_OUTPUT = 256  # a rate cell's output tokens per request, at most (--rate-output's default)


def shown(value: object, limit: int = 40) -> str:
    """A bad value as an error message quotes it: repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_tokens(text: str, flag: str) -> int:
    """'8k', '8K', '8192', '1.5k' -> tokens (1K = 1024), exactly (no float rounding)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmM]?)\s*", text)
    if not m:
        raise PlanError(f"{flag}: expected a token count like 8192, 8k or 1M, got {shown(text)}")
    if len(m.group(1)) > 24:  # far past MAX_TOKENS; and int() refuses 4,300+ digits
        raise PlanError(f"{flag}: expected at most {MAX_TOKENS:,} tokens, got {shown(text)}")
    value = Fraction(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    if value < 1 or value.denominator != 1:
        raise PlanError(f"{flag}: expected a positive whole token count, got {shown(text)}")
    if value > MAX_TOKENS:
        raise PlanError(f"{flag}: expected at most {MAX_TOKENS:,} tokens, got {shown(text)}")
    return int(value)


def parse_contexts(text: str | None, flag: str = "--contexts") -> list[int | str] | None:
    """Comma-separated contexts; 'max' stands for the largest that fits."""
    if text is None:
        return None
    out: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        if part.lower() == "max":
            value: int | str = "max"
        elif part:
            value = parse_tokens(part, flag)
        else:
            continue
        if value not in out:
            out.append(value)
    if not out:
        raise PlanError(f"{flag}: expected at least one context like 8k,32k,max, got {shown(text)}")
    return out


def parse_concurrency(text: str | None, flag: str = "--concurrency") -> list[int] | None:
    """Comma-separated levels, whole numbers 1..MAX_CONCURRENCY, sorted."""
    return _whole_numbers(text, flag, 1, MAX_CONCURRENCY, "level", "1,2,4")


def parse_percents(text: str | None, flag: str = "--prefix-reuse") -> list[int] | None:
    """Comma-separated whole percents 0..100, de-duplicated, sorted."""
    return _whole_numbers(text, flag, 0, 100, "percent", "0,50,90,99")


def parse_turns(text: str | None, flag: str = "--turns") -> list[int] | None:
    """Comma-separated conversation turns, whole numbers ≥ 1, sorted."""
    return _whole_numbers(text, flag, 1, MAX_TURNS, "turn", "1,4,16,32")


def parse_rates(text: str | None, flag: str = "--rate") -> list[float] | None:
    """Comma-separated offered rates in requests/s: finite numbers > 0, sorted, unique."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part) if re.fullmatch(r"[0-9.eE+-]{1,24}", part) else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= MAX_RATE):
            raise PlanError(f"{flag}: expected requests per second above 0 and at most "
                            f"{MAX_RATE:,.0f} like 0.5,1,2,4,8, got {shown(part)}")
        out.append(value)
    if not out:
        raise PlanError(f"{flag}: expected at least one rate like 0.5,1,2,4,8, got {shown(text)}")
    return sorted(set(out))


def rate_output(max_output: int, given: int | None = None) -> int:
    """A rate cell's output tokens per request: --rate-output, else min(--max-output, 256)
    (every request must finish for its E2E to mean anything)."""
    return given if given is not None else min(max_output, RATE_OUTPUT)


def _whole_numbers(text: str | None, flag: str, low: int, high: int, what: str,
                   example: str) -> list[int] | None:
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not re.fullmatch(r"[0-9]{1,9}", part) or not low <= int(part) <= high:
            raise PlanError(f"{flag}: expected whole numbers from {low} to {high:,} "
                            f"like {example}, got {shown(part)}")
        out.append(int(part))
    if not out:
        raise PlanError(f"{flag}: expected at least one {what} like {example}, got {shown(text)}")
    return sorted(set(out))


def fit_context(context: int, max_output: int, max_model_len: int | None) -> int | None:
    """The largest-context rule: keep, trim to the room left, or drop."""
    if max_model_len is None:
        return context
    room = max_model_len - max_output - FIT_MARGIN
    if context <= room:
        return context
    if room >= TRIM_RATIO * context:
        return room
    return None


@dataclass
class Cell:
    """A cell of the run; `reuse` (percent, prefix cells) and `turn`
    (conversation cells) are the traffic cells' key parts, None on the matrix."""

    phase: str
    context: int
    concurrency: int
    reuse: int | None = None
    turn: int | None = None
    rate: float | None = None  # rate cells: offered requests/s
    status: str = PENDING
    reason: str | None = None

    @property
    def key(self) -> tuple[str, int, int, int | None, int | None, float | None]:
        """rundir.contract.cell_key's tuple: two cells at different targets, turns or
        rates never collide."""
        return (self.phase, self.context, self.concurrency, self.reuse, self.turn, self.rate)

    @property
    def traffic(self) -> bool:
        return self.phase in (PREFIX, CONVERSATION, RATE)

    @property
    def part(self) -> str:
        """The key beyond phase, context and concurrency, as a label adds it ("" on the matrix)."""
        if self.rate is not None:
            return f" rate {self.rate:g}/s" + (f" reuse {self.reuse}%" if self.reuse is not None else "")
        if self.reuse is not None:
            return f" reuse {self.reuse}%"
        return f" turn {self.turn}" if self.turn is not None else ""


def _rate_reuse(cells: list[Cell]) -> str:
    """The rate line's tail on cells at a prefix reuse level (none: nothing)."""
    shared = [c for c in cells if c.reuse is not None]
    return (f"; at {_listed(c.reuse for c in shared)}% prefix reuse, each group's shared prefix "
            f"primed first") if shared else ""


def _rate_cap(rates: list[Cell]) -> str:
    """What the rate cells' cap on requests in flight means (0: none)."""
    caps = sorted({c.concurrency for c in rates})
    if caps == [0]:
        return ("no cap on requests in flight (the KV cache they need is unknown: a request "
                "the server cannot hold fails the cell)")
    return (f"at most {_listed(caps)} requests in flight (a request due while the cap is "
            f"full waits in the client: send lag, counted in its TTFT)")


@dataclass
class Plan:
    contexts: list[int]
    concurrency: list[int]
    prefill_contexts: list[int]
    cells: list[Cell] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # contexts that did not fit
    workers: WorkerPlan | None = None  # how many processes read a decode cell's streams
    slots: int | None = None  # requests the server runs at once (llama.cpp's total_slots), if told
    arrivals: str = "poisson"  # rate cells' arrival process (rundir.arrivals), as the plan line says it
    rate_output: int | None = None  # rate cells' output tokens per request

    @property
    def to_run(self) -> list[Cell]:
        return [c for c in self.cells if c.status == PENDING]

    def queued(self, cells: list[Cell]) -> list[Cell]:
        """The decode cells of `cells` with more streams than the server has slots."""
        return [c for c in cells if c.phase == DECODE and more_than_slots(c.concurrency, self.slots)]

    def traffic_lines(self, todo: list[Cell]) -> list[str]:
        """The plan's lines on its traffic cells in `todo`, one per kind (none: no line)."""
        lines = []
        for phase, label, key, tail in self._traffic_kinds():
            cells = [c for c in todo if c.phase == phase]
            if cells:
                lines.append(f"{label}: {len(cells)} cells at {key(cells)}, contexts "
                             f"{_listed((c.context for c in cells), context_label)}{tail(cells)}")
        return lines

    def _traffic_kinds(self) -> list[tuple[str, str, Callable[[list[Cell]], str],
                                           Callable[[list[Cell]], str]]]:
        """Per traffic phase: its line's label, the key its cells are listed by, and what
        follows the contexts (the streams, or the cap, and what a request does)."""
        def streams(cells: list[Cell]) -> str:
            return f", streams {_listed(c.concurrency for c in cells)}"

        return [
            (PREFIX, "Prefix reuse", lambda cs: f"{_listed(c.reuse for c in cs)}% shared",
             lambda cs: f"{streams(cs)}; 1 output token each, after the shared prefixes are primed"),
            (CONVERSATION, "Conversations", lambda cs: f"turns {_listed(c.turn for c in cs)}",
             lambda cs: f"{streams(cs)}; each stream resends its whole history every turn "
                        f"(fixed replies)"),
            (RATE, "Rates", lambda cs: f"{_listed((c.rate for c in cs), lambda r: f'{r:g}')} "
                                       f"requests/s ({self.arrivals} arrivals)",
             lambda cs: f"; {_rate_cap(cs)}; {self.rate_output} output tokens each; requests "
                        f"counted by scheduled time in the window, then drained{_rate_reuse(cs)}"),
        ]

    def slots_line(self, todo: list[Cell]) -> str | None:
        """The plan's line on the server's slots: how many, and what happens to
        the cells of `todo` with more streams than that (None: slots unknown)."""
        if self.slots is None:
            return None
        s = self.slots
        line = f"Server slots: {s} (at most {s} request{'' if s == 1 else 's'} run at once)"
        over = sorted({c.concurrency for c in self.queued(todo)})
        if not over:
            return line
        levels = ", ".join(f"×{c}" for c in over)
        return (f"{line}; {levels} {'has' if len(over) == 1 else 'have'} more streams than slots: "
                f"measured with {s} running and the rest waiting in the server's queue, so they are "
                f"Requests queued (never published as that many concurrent streams), and "
                f"readiness waits for {s} streams, not for all")


def _listed(values, show=str) -> str:
    return ", ".join(show(v) for v in sorted(set(values)))


def more_than_slots(concurrency: int, slots: int | None) -> bool:
    """Whether a decode cell's streams outnumber the server's slots (unknown: no)."""
    return slots is not None and concurrency > slots


def running_at_once(concurrency: int, slots: int | None) -> int:
    """Streams the server runs at once: all of them, or its slots when fewer;
    the others wait in its queue and hold no KV cache."""
    return concurrency if slots is None else min(concurrency, slots)


def make_plan(
    *,
    contexts: list[int | str] | None,
    concurrency: list[int] | None,
    max_output: int,
    max_model_len: int | None,
    kv_budget: int | None,
    prefill: bool = True,
    prefill_contexts: list[int | str] | None = None,
    slots: int | None = None,
    prefix_reuse: list[int] | None = None,
    turns: list[int] | None = None,
    traffic_concurrency: list[int] | None = None,
    rates: list[float] | None = None,
    rate_cap: int | None = None,
    rate_output_tokens: int | None = None,
    arrivals: str = "poisson",
    rate_reuse: list[int] | None = None,
) -> Plan:
    """Build the matrix; over-capacity cells are planned as skipped. With the
    server's `slots`, a cell needs the KV cache of the streams that run at
    once (queued requests hold none)."""
    requested = list(contexts) if contexts else [*DEFAULT_CONTEXTS, "max"]
    fitted: list[int] = []
    dropped: list[str] = []
    for ctx in requested:
        if ctx == "max":
            if max_model_len is None:
                dropped.append("max (the server does not report its max model length)")
                continue
            # the largest context that fits is the room itself
            room = max_model_len - max_output - FIT_MARGIN
            value = room if room >= 1 else None
        else:
            value = fit_context(int(ctx), max_output, max_model_len)
        if value is None or value < 1:
            label = "max" if ctx == "max" else context_label(int(ctx))
            dropped.append(
                f"{label} (does not fit {max_model_len} tokens with {max_output} output)"
            )
        elif value not in fitted:
            fitted.append(value)
    fitted.sort()
    levels = sorted(set(concurrency or DEFAULT_CONCURRENCY))
    if prefill_contexts:
        pre = sorted({_fit_prefill(c, max_model_len) for c in prefill_contexts} - {None})
    elif prefill:
        pre = list(fitted)
        if max_model_len is not None and contexts is None:
            full = _fit_prefill("max", max_model_len)
            if full and full not in pre:
                pre.append(full)
    else:
        pre = []
    plan = Plan(fitted, levels, pre, dropped=dropped, slots=slots, arrivals=arrivals,
                rate_output=rate_output(max_output, rate_output_tokens) if rates else None)
    for ctx in pre:
        plan.cells.append(Cell(PREFILL, ctx, 1))
    for ctx in fitted:
        for c in levels:
            cell = Cell(DECODE, ctx, c)
            running = running_at_once(c, slots)
            need = running * (ctx + max_output)
            if kv_budget is not None and need > kv_budget:
                cell.status = OVER_CAPACITY
                why = f"{running} × ({ctx:,} + {max_output:,})"
                if running < c:
                    why += f": {running} of its {c} streams run at once, one per slot"
                cell.reason = f"needs {need:,} KV tokens ({why}), server budget is {kv_budget:,}"
            plan.cells.append(cell)
    levels = sorted(set(traffic_concurrency or [1]))
    plan.cells += traffic_cells(pre, fitted, levels, prefix_reuse or [], turns or [],
                                conversation_output(max_output), kv_budget, slots)
    plan.cells += rate_cells(fitted, rates or [], rate_cap or 0, plan.rate_output or 0, kv_budget,
                             slots, rate_reuse or [])
    return plan


PREFIX_MIN_GROUPS, PREFIX_MAX_GROUPS = 2, 8
CONVERSATION_OUTPUT = 64  # a turn's live output, at most


def conversation_output(max_output: int) -> int:
    """max_tokens of a conversation turn (measured for per-request tok/s, then discarded)."""
    return min(max_output, CONVERSATION_OUTPUT)


def prefix_groups(concurrency: int, slots: int | None = None, shared: int = 0,
                  room: int | None = None) -> int:
    """G, the prefix groups of a prefix cell: at least 2 (C streams must not
    trivially share one prefix), C up to 8, no more than the server's slots
    when it tells them, and no more prefixes than `room` KV tokens hold."""
    g = min(max(PREFIX_MIN_GROUPS, concurrency), PREFIX_MAX_GROUPS)
    if slots is not None:
        g = min(g, max(1, slots))
    if room is not None and shared > 0:
        g = min(g, max(1, room // shared))
    return g


def traffic_cells(prefill_contexts: list[int], decode_contexts: list[int], levels: list[int],
                  reuse: list[int], turns: list[int], turn_output: int, kv_budget: int | None,
                  slots: int | None) -> list[Cell]:
    """Prefix cells per (prefill context, level, target) and conversation cells
    per (decode context, level, listed turn), after the matrix's; a cell whose
    running streams' contexts exceed the KV budget is planned Over capacity."""
    cells = []
    for ctx in prefill_contexts if reuse else []:
        for c in levels:
            running = running_at_once(c, slots)
            for r in reuse:
                cell = Cell(PREFIX, ctx, c, reuse=r)
                need = running * (ctx + 1)
                if kv_budget is not None and need > kv_budget:
                    cell.status = OVER_CAPACITY
                    cell.reason = (f"needs {need:,} KV tokens ({running} × ({ctx:,} + 1)), "
                                   f"server budget is {kv_budget:,}")
                cells.append(cell)
    for ctx in decode_contexts if turns else []:
        for c in levels:
            running = running_at_once(c, slots)
            need = running * (ctx + turn_output)
            for k in turns:
                cell = Cell(CONVERSATION, ctx, c, turn=k)
                if kv_budget is not None and need > kv_budget:
                    cell.status = OVER_CAPACITY
                    cell.reason = (f"needs {need:,} KV tokens ({running} × ({ctx:,} + "
                                   f"{turn_output:,})), server budget is {kv_budget:,}")
                cells.append(cell)
    return cells


def rate_cells(decode_contexts: list[int], rates: list[float], cap: int, output: int,
               kv_budget: int | None, slots: int | None, reuse: list[int] | None = None) -> list[Cell]:
    """Rate cells per (decode context, reuse level, rate), after every other cell (no
    `reuse`: one level, unique prompts); concurrency is the cap on requests in flight
    (0: none). Planned Over capacity when the requests that run at once (the cap, or the
    server's slots when fewer or no cap) exceed the KV budget; with neither a cap nor
    slots the need is unknown and nothing is skipped."""
    cells = []
    for ctx in decode_contexts:
        running = min(cap or slots or 0, slots or cap or 0)
        need = running * (ctx + output)
        for level, r in ((lv, r) for lv in (sorted(set(reuse or [])) or [None])
                         for r in sorted({float(x) for x in rates})):
            cell = Cell(RATE, ctx, cap, reuse=level, rate=r)
            if kv_budget is not None and running and need > kv_budget:
                cell.status = OVER_CAPACITY
                cell.reason = (f"needs {need:,} KV tokens ({running} × ({ctx:,} + {output:,}): "
                               f"{running} requests in flight at most), server budget is "
                               f"{kv_budget:,}")
            cells.append(cell)
    return cells


def _fit_prefill(ctx: int | str, max_model_len: int | None) -> int | None:
    """Prefill needs room for one output token only."""
    if max_model_len is None:
        return None if ctx == "max" else int(ctx)
    room = max_model_len - 1 - FIT_MARGIN
    if ctx == "max":
        return room
    return int(ctx) if int(ctx) <= room else (room if room >= TRIM_RATIO * int(ctx) else None)
