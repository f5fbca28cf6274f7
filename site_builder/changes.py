"""What changed between two runs of a series: the cells that moved beyond noise.

Readers of a series ask "did the new engine version make this setup faster or
slower, and where?". This module answers it from two runs' decode cells,
purely (no I/O), so the series page (site_builder/series.py) and the index's
regression flags read one rule:

* Cells are paired by context (its label) × concurrency; a cell of one run
  with no partner in the other is not compared.
* Figures compared: total tok/s, per-request tok/s and TTFT (lower is better).
* "Beyond noise": when both cells carry 95% intervals (repeated windows,
  `bench run --repeats`), the intervals do not overlap. Without intervals on
  both sides, the figure moved by more than THRESHOLD (5%) of the older value;
  such runs have one window per cell, so smaller moves may be noise and larger
  ones are not claimed significant.
* A status change (Valid -> Over capacity, ...) is listed whatever the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rundir import words
from site_builder import formats
from site_builder.aggregate import CellResult
from site_builder.oppoint import overlaps

THRESHOLD = 0.05
# (CellResult field, header, higher is better, format)
FIGURES: list[tuple[str, str, bool, Callable[[float | None], str]]] = [
    ("total_tok_s", "Total tok/s", True, words.tok_s),
    ("per_request_tok_s", "Per request tok/s", True, words.tok_s),
    ("ttft_ms", "TTFT", False, words.ttft),
]
INTERVAL_RULE = ("Moved beyond noise: both cells have 95% intervals (repeated windows) "
                 "and they do not overlap.")
THRESHOLD_RULE = (f"Moved by more than {THRESHOLD:.0%} of the older value; these cells have "
                  "one window each, so smaller moves may be noise, and no move is claimed "
                  "significant.")


@dataclass(frozen=True)
class Move:
    """One figure of one cell that moved beyond noise."""

    where: str  # "32K × 8"
    figure: str
    before: str
    after: str
    change: str  # "+12.3%"
    better: bool
    by_intervals: bool  # judged by 95% intervals (else by THRESHOLD)


@dataclass(frozen=True)
class StatusChange:
    where: str
    before: str
    after: str


@dataclass
class Changes:
    """What changed from `older` to `newer` (any objects with `.agg`, RunViews)."""

    compared: int = 0  # cells paired
    moves: list[Move] = field(default_factory=list)
    statuses: list[StatusChange] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # the noise rules that applied

    @property
    def better(self) -> list[Move]:
        return [m for m in self.moves if m.better]

    @property
    def worse(self) -> list[Move]:
        return [m for m in self.moves if not m.better]


def interval_of(cell: CellResult | None, key: str) -> list[float] | None:
    """A cell's 95% interval of a figure, None without one (one window)."""
    found = cell.intervals.get(key) if cell is not None else None
    return None if not found or None in found else [float(found[0]), float(found[1])]


def beyond_noise(old: float, new: float, old_ci: list[float] | None,
                 new_ci: list[float] | None) -> tuple[bool, bool]:
    """(moved beyond noise?, judged by intervals?) by the rule in the module docstring."""
    if old_ci is not None and new_ci is not None:
        return not overlaps(old_ci, new_ci), True
    if old == 0:
        return new != 0, False
    return abs(new - old) > THRESHOLD * abs(old), False


def figure_move(where: str, old: CellResult, new: CellResult, key: str, header: str,
                higher: bool, fmt: Callable[[float | None], str]) -> Move | None:
    """The move of one figure between two cells, None when within noise or missing."""
    a, b = getattr(old, key), getattr(new, key)
    if a is None or b is None or not old.has_numbers or not new.has_numbers:
        return None
    moved, by_ci = beyond_noise(a, b, interval_of(old, key), interval_of(new, key))
    if not moved:
        return None
    return Move(where, header, fmt(a), fmt(b), formats.percent_change(b, a),
                (b > a) == higher, by_ci)


def _by_point(cells: list[CellResult]) -> dict[tuple[str, int], CellResult]:
    return {(words.context_label(x.context), x.concurrency): x for x in cells}


def compare(older: object, newer: object) -> Changes:
    """The decode cells that moved beyond noise from older to newer, and status changes."""
    old_cells = _by_point(older.agg.decode())  # type: ignore[attr-defined]
    new_cells = _by_point(newer.agg.decode())  # type: ignore[attr-defined]
    out = Changes()
    rules: set[bool] = set()
    for point in sorted(set(old_cells) & set(new_cells), key=lambda p: (
            old_cells[p].context, p[1])):
        a, b = old_cells[point], new_cells[point]
        where = f"{point[0]} × {point[1]}"
        out.compared += 1
        if a.status != b.status:
            out.statuses.append(StatusChange(where, words.status_label(a.status),
                                             words.status_label(b.status)))
        for key, header, higher, fmt in FIGURES:
            if a.has_numbers and b.has_numbers and None not in (getattr(a, key), getattr(b, key)):
                rules.add(interval_of(a, key) is not None and interval_of(b, key) is not None)
            move = figure_move(where, a, b, key, header, higher, fmt)
            if move is not None:
                out.moves.append(move)
    out.rules = [INTERVAL_RULE] * (True in rules) + [THRESHOLD_RULE] * (False in rules)
    return out


__all__ = ["Changes", "Move", "StatusChange", "THRESHOLD", "beyond_noise", "compare",
           "figure_move", "interval_of"]
