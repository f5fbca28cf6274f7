"""What changed between two runs of a series: the cells that moved beyond noise.

Readers of a series ask "did the new engine version make this setup faster or
slower, and where?". This module answers it from two runs' decode cells,
purely (no I/O), so the series page (site_builder/series.py) and the index's
regression flags read one rule:

* Cells are paired by context (its label) × concurrency; a cell of one run
  with no partner in the other is not compared.
* Figures compared: total tok/s, per-request tok/s and TTFT (lower is better).
* A move is *established* (a regression or an improvement) only when the two
  cells' bands do not overlap: their 95% intervals where the cell has repeated
  windows (`bench run --repeats`), else its one-window noise band (the
  window's own slices or requests, widened for drift: rundir/intervals.py,
  `one_window_bands`). A cell with neither (an imported run, a window of
  fewer than 6 requests for a median) establishes nothing.
* Listed: every established move, and every move by more than THRESHOLD (5%)
  of the older value that is not established, marked so with its reason: the
  reader sees the numbers and that they may be noise.
* A status change (Valid -> Over capacity, ...) is listed whatever the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rundir import words
from site_builder import formats
from site_builder.aggregate import CellResult
from site_builder.oppoint import overlaps
from site_builder.views import Fall

THRESHOLD = 0.05
# (CellResult field, header, higher is better, format)
FIGURES: list[tuple[str, str, bool, Callable[[float | None], str]]] = [
    ("total_tok_s", "Total tok/s", True, words.tok_s),
    ("per_request_tok_s", "Per request tok/s", True, words.tok_s),
    ("ttft_ms", "TTFT", False, words.ttft),
]
INTERVAL_RULE = ("Established: the two cells' 95% intervals (repeated windows) do not "
                 "overlap.")
BAND_RULE = ("Established from one window: the bands of the windows' own noise (their time "
             "slices, their requests), widened for the drift one window cannot show, do "
             "not overlap.")
THRESHOLD_RULE = (f"Also listed, as not established: moves by more than {THRESHOLD:.0%} of the "
                  "older value that the data cannot tell from noise.")
APART = "95% intervals apart"
BANDS_APART = "apart beyond one window's noise"
OVERLAP = "within noise: the 95% intervals overlap"
BANDS_OVERLAP = "within noise: one window's noise bands overlap"
NO_BAND = "no spread to tell it from noise (imported figures, or too few requests)"


@dataclass(frozen=True)
class Move:
    """One figure of one cell that moved beyond noise, or more than THRESHOLD."""

    where: str  # "32K × 8"
    figure: str
    before: str
    after: str
    change: str  # "+12.3%"
    better: bool
    established: bool  # the bands do not overlap (else it may be noise)
    why: str  # how it was judged (APART, OVERLAP, NO_BAND, ...)


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


def band_of(cell: CellResult | None, key: str) -> tuple[list[float] | None, bool]:
    """(the band a change of a figure must clear, is it a repeats interval?): the 95%
    interval over repeated windows, else the one-window noise band, else None."""
    found = interval_of(cell, key)
    if found is not None or cell is None:
        return found, found is not None
    band = cell.noise.get(key)
    return (None if not band or None in band else [float(band[0]), float(band[1])]), False


def judge(old_band: list[float] | None, new_band: list[float] | None,
          repeats: bool) -> tuple[bool, str]:
    """(established?, why) by the rule in the module docstring."""
    if old_band is None or new_band is None:
        return False, NO_BAND
    if overlaps(old_band, new_band):
        return False, OVERLAP if repeats else BANDS_OVERLAP
    return True, APART if repeats else BANDS_APART


def figure_move(where: str, old: CellResult, new: CellResult, key: str, header: str,
                higher: bool, fmt: Callable[[float | None], str]) -> Move | None:
    """The move of one figure between two cells: None when missing, or neither
    established nor more than THRESHOLD."""
    a, b = getattr(old, key), getattr(new, key)
    if a is None or b is None or not old.has_numbers or not new.has_numbers:
        return None
    (old_band, old_rep), (new_band, new_rep) = band_of(old, key), band_of(new, key)
    established, why = judge(old_band, new_band, old_rep and new_rep)
    large = abs(b - a) > THRESHOLD * abs(a) if a else b != a
    if not established and not large:
        return None
    return Move(where, header, fmt(a), fmt(b), formats.percent_change(b, a),
                (b > a) == higher, established, why)


def _by_point(cells: list[CellResult]) -> dict[tuple[str, int], CellResult]:
    return {(words.context_label(x.context), x.concurrency): x for x in cells}


def compare(older: object, newer: object) -> Changes:
    """The decode cells that moved beyond noise from older to newer, and status changes."""
    old_cells = _by_point(older.agg.decode())  # type: ignore[attr-defined]
    new_cells = _by_point(newer.agg.decode())  # type: ignore[attr-defined]
    out = Changes()
    rules: set[str] = set()
    for point in sorted(set(old_cells) & set(new_cells), key=lambda p: (
            old_cells[p].context, p[1])):
        a, b = old_cells[point], new_cells[point]
        where = f"{point[0]} × {point[1]}"
        out.compared += 1
        if a.status != b.status:
            out.statuses.append(StatusChange(where, words.status_label(a.status),
                                             words.status_label(b.status)))
        for key, header, higher, fmt in FIGURES:
            move = figure_move(where, a, b, key, header, higher, fmt)
            if move is not None:
                out.moves.append(move)
                rules.add({APART: INTERVAL_RULE, BANDS_APART: BAND_RULE}.get(move.why,
                                                                             THRESHOLD_RULE))
    out.rules = [r for r in (INTERVAL_RULE, BAND_RULE, THRESHOLD_RULE) if r in rules]
    return out


__all__ = ["Changes", "Fall", "Move", "StatusChange", "THRESHOLD", "band_of", "compare",
           "figure_move", "interval_of", "judge"]
