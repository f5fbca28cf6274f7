"""Number formats of the pages, by kind, exactly as the published seeds show them.

One module decides how a number reads, so the run page, the index, the CSV
preview and the chart tooltips never disagree. The formats the collector's
live display shares (throughput, TTFT, J/token, context labels, the missing
mark and the rounding rule) live in rundir/words.py and are re-exported here,
so the builder reads every format from this module. By kind:

* rules: half-up rounding (``2.25`` -> ``2.3``), the missing mark ``—``, and
  as many decimals as a bin or tick step needs (`step_digits`).
* rates: throughput ``6,216.0`` / ``17.6K``; a change between two runs
  ``+12.3%`` (the compare page's script gets its constants from js_rules).
* durations: TTFT ``56 ms`` / ``4.8 ms``; time between tokens one decimal at
  any size (``100.6 ms``); measured ``30.0 s``; configured as written ``30 s``;
  a timeline bin ``1.0–1.5 s``.
* counts: whole with separators (``1,648``); token budgets ``4,096 tokens``;
  averages one decimal (``127.4``); configured numbers as written (``7.5``).
* energy: J/token, three significant figures (``0.421``; ``%.3g`` in the
  measurements table).
* memory and sizes: VRAM ``96GB`` / ``1128 GB (8 × 141 GB)``; files ``1.2 MB``.
* dates: the byline's ``Sep 27, 2026, 19:59 UTC``, table days, ``2025-11-29 14:03 UTC``.
* labels: contexts in whole K (``251K``) and ranges ``8K–251K``.

(Money, ``$0.42``, is the price table's: site_builder/prices.py.)

A missing value (None, NaN) reads as the missing mark; ±inf is no measurement
and raises ValueError naming it. Every number reads back to its value within
half a unit of its last digit (tests/site/test_site_properties.py).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from rundir.words import (
    HALF_UP_NUDGE,
    MISSING,
    context_label,
    is_missing,
    j_per_token,
    round_half_up,
    tok_s,
    ttft,
)

__all__ = [
    "MISSING", "is_missing", "round_half_up", "step_digits",
    "tok_s", "percent_change", "js_rules", "PERCENT_DIGITS", "PLUS", "MINUS",
    "ttft", "tbt", "seconds", "param_seconds", "seconds_range",
    "count", "tokens", "average", "plain_number",
    "j_per_token", "joules_3g",
    "vram_gb", "vram_block", "file_size",
    "published_datetime", "published_date", "utc_datetime",
    "context_label", "range_label",
]


# --------------------------------------------------------------------------
# rules: rounding, the missing mark, digits for a step
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# rates: throughput (tok_s, from rundir.words) and the change between two runs
# --------------------------------------------------------------------------

# The percent-change rule, also handed to the compare page's script
# (js_rules): the page formats a change between two runs it loads, so it
# cannot be pre-formatted, but its constants come from here.
PERCENT_DIGITS = 1
PLUS, MINUS = "+", "\u2212"


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


# --------------------------------------------------------------------------
# durations: TTFT (ttft, from rundir.words), time between tokens, seconds
# --------------------------------------------------------------------------


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


def param_seconds(value: float | None) -> str:
    """A configured duration: ``30 s``."""
    return MISSING if is_missing(value) else f"{plain_number(value)} s"


def seconds_range(start: float, width: float) -> str:
    """A timeline bin: ``1.0–1.5 s``; a bin narrower than 0.1 s keeps its digits
    (``0.05–0.10 s``)."""
    d = step_digits(width, least=1)
    return f"{_fixed(start, d)}–{_fixed(float(start) + float(width), d)} s"


# --------------------------------------------------------------------------
# counts: things, tokens, averages, configured numbers
# --------------------------------------------------------------------------


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


def plain_number(value: float | None) -> str:
    """A configured number as written: 30 -> ``30``, 7.5 -> ``7.5``, 141.0 -> ``141``."""
    if is_missing(value):
        return MISSING
    v = _half_up(value, 2)
    return f"{v:,.2f}".rstrip("0").rstrip(".")  # 7.50 -> 7.5, 96.00 -> 96


# --------------------------------------------------------------------------
# energy: J/token (j_per_token, from rundir.words, and the measurements table's)
# --------------------------------------------------------------------------


def joules_3g(value: float | None) -> str:
    """J/token as the measurements table prints it: three significant figures (``%.3g``)."""
    return MISSING if value is None else f"{value:.3g}"


# --------------------------------------------------------------------------
# memory and sizes
# --------------------------------------------------------------------------


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


def file_size(n: int | None) -> str:
    """A download's size: ``512 B``, ``1.2 KB``, ``3.4 MB``, ``1.0 GB``."""
    if n is None:
        return MISSING
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"


# --------------------------------------------------------------------------
# dates
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# labels: contexts (context_label, from rundir.words) and ranges
# --------------------------------------------------------------------------


def range_label(values: list[str]) -> str:
    """``8K–251K``: first–last of already formatted labels."""
    if not values:
        return MISSING
    return values[0] if len(values) == 1 else f"{values[0]}–{values[-1]}"
