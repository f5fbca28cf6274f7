"""The run page's answer to "was it power-capped or throttled?".

Readers distrust a slow cell until they know the GPUs ran at full clocks. The
collector's GPU telemetry (rundir/energy.py) flags a decode cell with each
throttle class (power-capped, thermal, clocks below application clocks) active
for more than THROTTLE_FLAG_SHARE of its window on some GPU. This module turns
those flags into one sentence for the whole run, and says plainly when the run
cannot answer (no telemetry recorded, or the driver gave no throttle readings),
never guessing. Pure: it reads the aggregate only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rundir import energy, words
from site_builder.aggregate import CellResult, RunAggregate

# At most this many cells named per class; the rest are counted.
NAMED = 4
NO_TELEMETRY = "No GPU telemetry recorded"
NO_TELEMETRY_WHY = {
    True: ("this run was imported from a published page, which records no GPU readings, "
           "so whether its GPUs were power-capped or throttled cannot be told."),
    False: ("the collector samples the GPUs only where NVML (or amdsmi) sees them from the "
            "client host and --gpu-telemetry is not off, so whether this run's GPUs were "
            "power-capped or throttled cannot be told."),
}
NO_TELEMETRY_PEER = ("this run was imported from another benchmark tool's output, which records no "
                     "GPU readings, so whether its GPUs were power-capped or throttled cannot be told.")


@dataclass(frozen=True)
class ThrottleAnswer:
    """`verdict`: "yes", "no" or "unknown"; `headline` the short answer; `detail` why."""

    verdict: str
    headline: str
    detail: str
    cells: dict[str, list[str]] = field(default_factory=dict)  # class -> "32K × 8", ...


def _where(cell: CellResult) -> str:
    return f"{words.context_label(cell.context)} × {cell.concurrency}"


def _list(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def answer(agg: RunAggregate, *, imported: bool, peer: bool = False) -> ThrottleAnswer:
    """The run's answer, from its decode cells' throttle flags (``peer``: imported from
    another benchmark tool's output)."""
    if not agg.telemetry:
        return ThrottleAnswer("unknown", NO_TELEMETRY,
                              NO_TELEMETRY_PEER if peer else NO_TELEMETRY_WHY[imported])
    read = [x for x in agg.decode() if x.has_numbers and x.throttle is not None]
    if not read:
        return ThrottleAnswer(
            "unknown", "GPU telemetry recorded, but no throttle readings for any decode cell",
            "the driver reported no clocks-event reasons during the measured windows, so "
            "throttling cannot be told.")
    share = f"{energy.THROTTLE_FLAG_SHARE:.0%}"
    flagged = {cls: [_where(x) for x in read if cls in (x.throttle or [])]
               for cls in energy.THROTTLE_CLASSES}
    flagged = {cls: names for cls, names in flagged.items() if names}
    of = f"of {len(read)} decode cell{'' if len(read) == 1 else 's'} with readings"
    if not flagged:
        return ThrottleAnswer(
            "no", "No: not power-capped or throttled",
            f"no throttle reason held any GPU back for more than {share} of a measured window "
            f"({len(read)} decode cell{'' if len(read) == 1 else 's'} with readings).")
    parts = [f"{cls} in {len(names)} {of} ({_list(names)})" for cls, names in flagged.items()]
    head = " and ".join(flagged).capitalize()
    return ThrottleAnswer(
        "yes", f"Yes: {head}",
        "; ".join(parts) + f", each for more than {share} of the cell's window on some GPU. "
        "Those cells' figures are what the GPUs gave while held back.", flagged)


__all__ = ["NO_TELEMETRY", "ThrottleAnswer", "answer"]
