"""Number formats of the pages, exactly as the published seeds show them.

One place decides how a number reads, so the run page, the index, the CSV
preview and the chart tooltips never disagree. Throughput, context labels,
the missing mark, TTFT (whole milliseconds, one decimal below 10 ms) and the
rounding rule are shared with the collector's live display and live in
rundir/words.py; the rest, from the seeds:

* time between tokens: one decimal at any size (``4.8 ms``, ``100.6 ms``).
* durations: one decimal second (``30.0 s``); run parameters as written
  (``30 s``).
* counts: whole numbers with separators (``1,648``); averages one decimal.
* a change between two runs: ``+12.3%`` (the compare page's script gets this
  rule's constants from js_rules).
* a bin's range (a chart tooltip): as many decimals as the bin's width needs
  (`step_digits`), so neighbouring bins never read alike.

A missing value (None, NaN) reads as the missing mark; ±inf is no measurement
and raises ValueError naming it. Every number reads back to its value within
half a unit of its last digit (tests/test_site_properties.py).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from rundir.words import HALF_UP_NUDGE, MISSING, is_missing, round_half_up

# The percent-change rule, also handed to the compare page's script
# (js_rules): the page formats a change between two runs it loads, so it
# cannot be pre-formatted, but its constants come from here.
PERCENT_DIGITS = 1
PLUS, MINUS = "+", "\u2212"


# From 2**53 up every float is a whole number: nothing is left to round (and
# round_half_up's scaling could overflow near the float maximum).
_WHOLE = 2.0**53


def _half_up(value: object, digits: int) -> float:
    """round_half_up of a finite value, never ``-0`` (−0.04 reads ``0.0``)."""
    v = float(value)  # type: ignore[arg-type]
    if not math.isfinite(v):
        raise ValueError(f"cannot show {v!r}: not a measured number")
    return v if abs(v) >= _WHOLE else round_half_up(v, digits) + 0.0


def _fixed(value: object, digits: int) -> str:
    """``1,234.5``: half-up rounded to `digits` decimals, with separators."""
    return f"{_half_up(value, digits):,.{digits}f}"


def step_digits(step: float, least: int = 0, most: int = 6) -> int:
    """The fewest decimals (from `least`, at most `most`) whose last digit is no
    larger than a bin width or tick step (0.05 -> 2, 0.75 -> 1, 2 -> 0): numbers
    a step apart then never read alike."""
    step = abs(float(step))
    if not math.isfinite(step):
        raise ValueError(f"a step must be a finite number, got {step!r}")
    d = least
    while d < most and 10.0**-d > step:
        d += 1
    return d


def tbt(value: float | None, digits: int = 1) -> str:
    """Time between tokens: one decimal at any size (``4.8 ms``, ``100.6 ms``);
    more for a narrow histogram bin's edges (`step_digits`)."""
    if is_missing(value):
        return MISSING
    return f"{_fixed(value, digits)} ms"


def seconds(value: float | None, digits: int = 1) -> str:
    """A measured duration: ``30.0 s`` (more decimals for a narrow bin's edges)."""
    if is_missing(value):
        return MISSING
    return f"{_fixed(value, digits)} s"


def seconds_range(start: float, width: float) -> str:
    """A timeline bin: ``1.0–1.5 s``; a bin narrower than 0.1 s keeps its digits
    (``0.05–0.10 s``)."""
    d = step_digits(width, least=1)
    return f"{_fixed(start, d)}–{_fixed(float(start) + float(width), d)} s"


def plain_number(value: float | None) -> str:
    """A configured number as written: 30 -> ``30``, 7.5 -> ``7.5``, 141.0 -> ``141``."""
    if is_missing(value):
        return MISSING
    v = _half_up(value, 2)
    return f"{v:,.2f}".rstrip("0").rstrip(".")  # 7.50 -> 7.5, 96.00 -> 96


def param_seconds(value: float | None) -> str:
    """A configured duration: ``30 s``."""
    return MISSING if is_missing(value) else f"{plain_number(value)} s"


def count(value: float | None) -> str:
    """A count of things: ``1,648``."""
    if is_missing(value):
        return MISSING
    return f"{int(_half_up(value, 0)):,}"


def tokens(value: float | None) -> str:
    """A token budget: ``4,096 tokens``."""
    return MISSING if is_missing(value) else f"{count(value)} tokens"


def average(value: float | None) -> str:
    """An average count such as average active requests: ``127.4``."""
    if is_missing(value):
        return MISSING
    return _fixed(value, 1)


def percent_change(new: float | None, old: float | None) -> str:
    """Change from old to new in percent: ``+12.3%``, ``−4.0%``, ``0.0%``; a
    change too large for a float (or an infinite input): ValueError."""
    if is_missing(new) or is_missing(old) or float(old) == 0:  # type: ignore[arg-type]
        return MISSING
    change = (float(new) - float(old)) / float(old) * 100  # type: ignore[arg-type]
    r = _half_up(change, PERCENT_DIGITS)
    if r == 0:
        return f"{0:.{PERCENT_DIGITS}f}%"
    return f"{PLUS if r > 0 else MINUS}{abs(r):,.{PERCENT_DIGITS}f}%"


def js_rules() -> dict[str, object]:
    """What the compare page's script needs to write a change exactly as
    percent_change does: the missing mark, the signs and the digits."""
    return {"missing": MISSING, "plus": PLUS, "minus": MINUS, "digits": PERCENT_DIGITS,
            "nudge": HALF_UP_NUDGE}


def vram_gb(value: float | None) -> str:
    """Per-GPU memory in a title: ``96GB``, ``141GB``."""
    return "" if is_missing(value) else f"{plain_number(value)}GB"


def vram_block(per_gpu: float | None, gpu_count: int | None) -> str:
    """VRAM row: ``96 GB``, or ``1128 GB (8 × 141 GB)`` for several GPUs."""
    if is_missing(per_gpu):
        return MISSING
    n = gpu_count or 1
    each = plain_number(per_gpu).replace(",", "")
    if n > 1:
        total = plain_number(float(per_gpu) * n).replace(",", "")  # type: ignore[arg-type]
        return f"{total} GB ({n} × {each} GB)"
    return f"{each} GB"


def _utc(iso: str | None) -> tuple[datetime | None, str, bool]:
    """(the time in UTC or None when unparseable, the stripped text, date only?)."""
    text = (iso or "").strip()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None, text, True
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC)
    return dt, text, len(text) <= 10


def published_datetime(iso: str | None) -> str:
    """An ISO 8601 timestamp the way the published pages' byline writes it:
    ``Sep 27, 2026, 19:59 UTC`` (``Mar 3, 2026 UTC`` when there is no time)."""
    dt, text, date_only = _utc(iso)
    if dt is None:
        return text
    day = f"{dt.strftime('%b')} {dt.day}, {dt.year}"
    return f"{day} UTC" if date_only else f"{day}, {dt.strftime('%H:%M')} UTC"


def published_date(iso: str | None) -> str:
    """Just the day of a timestamp in the byline's style, for table columns
    (index, model pages): ``Sep 27, 2026``; the text as given when unparseable."""
    dt, text, _date_only = _utc(iso)
    if dt is None:
        return text
    return f"{dt.strftime('%b')} {dt.day}, {dt.year}"


def utc_datetime(iso: str | None) -> str:
    """An ISO 8601 timestamp as ``2025-11-29 14:03 UTC`` (date only when no time)."""
    dt, text, date_only = _utc(iso)
    if dt is None:
        return text
    return dt.strftime("%Y-%m-%d UTC" if date_only else "%Y-%m-%d %H:%M UTC")


def range_label(values: list[str]) -> str:
    """``8K–251K``: first–last of already formatted labels."""
    if not values:
        return MISSING
    return values[0] if len(values) == 1 else f"{values[0]}–{values[-1]}"
