"""How far one published figure could be moved by the client, and whether a reader
would see it (pure): what every bound on a figure says, whichever rule found it
(bench/measure/stamp_bounds.py, bench/measure/reader_stalls.py, bench/distributed/clock_bounds.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rundir.words import round_half_up


def bound_text(value: float, step: float) -> str:
    """A bound as the reason prints it: plain digits, never an exponent (1,010,
    not 1.01e+03), to the figure's own step and at least two significant
    figures (0.53 against a 1 ms step, 15.3 against 0.1)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    own = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    two = max(0, 1 - math.floor(math.log10(abs(value))))
    digits = max(own, two)
    text = f"{round_half_up(value, digits):,.{digits}f}"
    while digits > own and text.endswith("0"):  # 0.50 -> 0.5 against a 0.1 step
        text, digits = text[:-1], digits - 1
    return text.removesuffix(".")


@dataclass(frozen=True)
class FigureBound:
    """How far one published figure could be from what the stamps' true
    arrivals give (`moved`: inf when nothing bounds it), and its display step."""

    name: str
    moved: float
    step: float
    unit: str = ""
    level: str = ""  # "median", "p90", ...: which level of a per-request figure

    @property
    def label(self) -> str:
        """The figure as the reason names it: "TTFT median", "TTFT p99", "total tok/s"."""
        return f"{self.name} {self.level}" if self.level else self.name

    @property
    def visible(self) -> bool:
        """Whether the bound exceeds half the figure's step: then the true value
        may lie more than one unit of the last shown digit from the shown one
        (rounding alone keeps it within half a unit; docs/methodology.md)."""
        return self.moved > self.step / 2

    def describe(self) -> str:
        if math.isinf(self.moved):
            return f"{self.label} could be off by any amount"
        step = bound_text(self.step, self.step)
        return (f"{self.label} could be off by up to {bound_text(self.moved, self.step)}{self.unit}, "
                f"over half the {step}{self.unit} it is shown to")
