"""Distinct names for runs shown side by side (legends, pickers, rankings, series).

Two runs with the same label (one setup measured on two dates, or under two
engine versions) must never merge into one chart line or one picker option,
and a reader must be able to tell which is which from the name alone. Each
run is named by the shortest sequence of its parts that no other run of the
same set shares, taken in this order:

    model · GPU ×count · engine version · quantization · date · time · run id

A part is added only for runs still sharing a name with another run of the
set, and only when it differs among them, so a set of runs that differ only
by date reads "Qwen3.5-4B · Sep 2, 2026" and "Qwen3.5-4B · Sep 27, 2026"
rather than repeating a GPU and an engine every run has. The model leads
every name unless the page already names it (`with_model=False`, a family
page's own runs); the run id (unique on a site) ends the sequence, so names
are distinct whatever the runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from rundir.contract import RunInfo
from site_builder import formats


class Named(Protocol):
    """What naming needs of a run (site_builder.views.RunView has it)."""

    info: RunInfo

    @property
    def model(self) -> str: ...

    @property
    def hardware(self) -> str: ...


def _engine(r: Named) -> str:
    e = r.info.engine
    return " ".join(x for x in (e.name, e.version) if x)


def _quantization(r: Named) -> str:
    return r.info.engine.quantization or ""


def _date(r: Named) -> str:
    at = r.info.measured_at
    return formats.published_date(at) if at else ""


def _time(r: Named) -> str:
    at = r.info.measured_at
    return formats.published_datetime(at) if at else ""


# (part, the part it stands in for when that one is already in the name): the
# time says the date again, so it replaces it rather than standing beside it.
_PARTS: list[tuple[Callable[[Named], str], Callable[[Named], str] | None]] = [
    (lambda r: r.hardware, None),
    (_engine, None),
    (_quantization, None),
    (_date, None),
    (_time, _date),
    (lambda r: r.info.run_id, None),
]


def distinct_names(runs: Sequence[Named], *, with_model: bool = True) -> list[str]:
    """The name of each run (aligned with runs) by the rule in the module docstring."""
    names: list[list[str]] = [[r.model] if with_model else [] for r in runs]
    parts = _PARTS if with_model else [(lambda r: r.model, None), *_PARTS]
    # Runs still sharing a name, as lists of indices; a run alone in its group is done.
    groups = [list(range(len(runs)))] if len(runs) > 1 else []
    for part, replaces in parts:
        if not groups:
            break
        split: list[list[int]] = []
        for group in groups:
            values = [part(runs[i]) for i in group]
            if len(set(values)) > 1:
                for i, value in zip(group, values, strict=True):
                    if replaces and names[i] and names[i][-1] == replaces(runs[i]):
                        names[i].pop()
                    if value:
                        names[i].append(value)
            by_value: dict[str, list[int]] = {}
            for i, value in zip(group, values, strict=True):
                by_value.setdefault(value, []).append(i)
            split += [g for g in by_value.values() if len(g) > 1]
        groups = split
    return [" · ".join(n) if n else r.hardware
            for n, r in zip(names, runs, strict=True)]


__all__ = ["distinct_names"]
