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
"""

from __future__ import annotations

from datetime import UTC, datetime

from rundir.words import HALF_UP_NUDGE, MISSING, is_missing, round_half_up, trim_zero

# The percent-change rule, also handed to the compare page's script
# (js_rules): the page formats a change between two runs it loads, so it
# cannot be pre-formatted, but its constants come from here.
PERCENT_DIGITS = 1
PLUS, MINUS = "+", "\u2212"


def tbt(value: float | None) -> str:
    """Time between tokens: always one decimal (``4.8 ms``, ``100.6 ms``)."""
    if is_missing(value):
        return MISSING
    return f"{round_half_up(float(value), 1):,.1f} ms"  # type: ignore[arg-type]


def seconds(value: float | None) -> str:
    """A measured duration: ``30.0 s``."""
    if is_missing(value):
        return MISSING
    return f"{round_half_up(float(value), 1):,.1f} s"  # type: ignore[arg-type]


def plain_number(value: float | None) -> str:
    """A configured number as written: 30 -> ``30``, 7.5 -> ``7.5``, 141.0 -> ``141``."""
    if is_missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if v == int(v):
        return f"{int(v):,}"
    return trim_zero(f"{round_half_up(v, 2):,.2f}".rstrip("0"))


def param_seconds(value: float | None) -> str:
    """A configured duration: ``30 s``."""
    return MISSING if is_missing(value) else f"{plain_number(value)} s"


def count(value: float | None) -> str:
    """A count of things: ``1,648``."""
    if is_missing(value):
        return MISSING
    return f"{int(round_half_up(float(value), 0)):,}"  # type: ignore[arg-type]


def tokens(value: float | None) -> str:
    """A token budget: ``4,096 tokens``."""
    return MISSING if is_missing(value) else f"{count(value)} tokens"


def average(value: float | None) -> str:
    """An average count such as average active requests: ``127.4``."""
    if is_missing(value):
        return MISSING
    return f"{round_half_up(float(value), 1):,.1f}"  # type: ignore[arg-type]


def percent_change(new: float | None, old: float | None) -> str:
    """Change from old to new in percent: ``+12.3%``, ``−4.0%``, ``0.0%``."""
    if is_missing(new) or is_missing(old) or float(old) == 0:  # type: ignore[arg-type]
        return MISSING
    change = (float(new) - float(old)) / float(old) * 100  # type: ignore[arg-type]
    r = round_half_up(change, PERCENT_DIGITS)
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
