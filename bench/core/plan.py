"""The sweep plan: which cells run, which are skipped and why (pure).

Contexts × concurrency levels, the largest-context fit rule and the KV
budget check live here, so the plan printed before a run is exactly the
plan that runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from bench.core.workers import WorkerPlan
from rundir.contract import DECODE, OVER_CAPACITY, PENDING, PREFILL
from rundir.words import context_label

DEFAULT_CONTEXTS = (8192, 16384, 32768, 65536, 131072)
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128)
FIT_MARGIN = 64  # tokens of headroom for the chat template and specials
TRIM_RATIO = 0.9


class PlanError(ValueError):
    pass


MAX_TOKENS = 1 << 40  # a token count beyond this is a typo, and would overflow int64 sums
MAX_CONCURRENCY = 16_384  # streams per cell; past one process, --workers spreads them


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


def parse_concurrency(text: str | None) -> list[int] | None:
    """Comma-separated levels, whole numbers 1..MAX_CONCURRENCY, sorted."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not re.fullmatch(r"[0-9]{1,9}", part) or not 1 <= int(part) <= MAX_CONCURRENCY:
            raise PlanError(f"--concurrency: expected whole numbers from 1 to {MAX_CONCURRENCY:,} "
                            f"like 1,2,4, got {shown(part)}")
        out.append(int(part))
    if not out:
        raise PlanError(f"--concurrency: expected at least one level like 1,2,4, got {shown(text)}")
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
    phase: str
    context: int
    concurrency: int
    status: str = PENDING
    reason: str | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.phase, self.context, self.concurrency)


@dataclass
class Plan:
    contexts: list[int]
    concurrency: list[int]
    prefill_contexts: list[int]
    cells: list[Cell] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # contexts that did not fit
    workers: WorkerPlan | None = None  # how many processes read a decode cell's streams
    slots: int | None = None  # requests the server runs at once (llama.cpp's total_slots), if told

    @property
    def to_run(self) -> list[Cell]:
        return [c for c in self.cells if c.status == PENDING]

    def queued(self, cells: list[Cell]) -> list[Cell]:
        """The decode cells of `cells` with more streams than the server has slots."""
        return [c for c in cells if c.phase == DECODE and more_than_slots(c.concurrency, self.slots)]

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
    plan = Plan(fitted, levels, pre, dropped=dropped, slots=slots)
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
    return plan


def _fit_prefill(ctx: int | str, max_model_len: int | None) -> int | None:
    """Prefill needs room for one output token only."""
    if max_model_len is None:
        return None if ctx == "max" else int(ctx)
    room = max_model_len - 1 - FIT_MARGIN
    if ctx == "max":
        return room
    return int(ctx) if int(ctx) <= room else (room if room >= TRIM_RATIO * int(ctx) else None)
