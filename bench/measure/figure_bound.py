"""How far one published figure could be moved by the client, and whether a reader
would see it (pure): what every bound on a figure says, whichever rule found it
(bench/measure/stamp_bounds.py, bench/measure/reader_stalls.py, bench/distributed/clock_bounds.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
        """Whether the figure could read differently by more than half its step."""
        return self.moved > self.step / 2

    def describe(self) -> str:
        by = "any amount" if math.isinf(self.moved) else f"up to {self.moved:.3g}{self.unit}"
        return f"{self.label} could be off by {by} (shown to {self.step:g}{self.unit})"
