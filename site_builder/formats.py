"""Number and label formats of the pages, exactly as the published seeds show them.

One place decides how a number reads, so the run page, the index, the CSV
preview and the chart tooltips never disagree. The rules, from the seeds:

* throughput (tok/s): one decimal with thousands separators below 10,000
  (``6,216.0``, ``2,777.1``); from 10,000 up in thousands with one decimal
  and no trailing ``.0`` (``17.6K``, ``10K``), from a million up ``1.2M``.
  The prefill summary shows whole numbers below 10,000 (``8,820``).
* TTFT: whole milliseconds (``56 ms``, ``1,064 ms``); below 10 ms one
  decimal so a fast cached TTFT does not read as ``0 ms``.
* time between tokens: one decimal at any size (``4.8 ms``, ``100.6 ms``).
* durations: one decimal second (``30.0 s``); run parameters as written
  (``30 s``).
* counts: whole numbers with separators (``1,648``); averages one decimal.
* context labels: whole K, 1K = 1024 tokens, rounded down (257,984 -> 251K).
* anything missing: an em dash.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

MISSING = "—"


def _missing(value: object) -> bool:
    if value is None:
        return True
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


def _trim(text: str) -> str:
    return text[:-2] if text.endswith(".0") else text


def _round_half_up(value: float, digits: int) -> float:
    """Round like a person does (2.25 -> 2.3), not banker's rounding on binary noise."""
    scale = 10**digits
    return math.floor(abs(value) * scale + 0.5 + 1e-9) / scale * (1 if value >= 0 else -1)


def tok_s(value: float | None, *, whole: bool = False) -> str:
    """Throughput: ``6,216.0`` / ``17.6K`` / ``10K``; ``whole`` gives ``6,216``."""
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    small = _round_half_up(v, 0 if whole else 1)
    if abs(small) < 10_000:
        return f"{small:,.0f}" if whole else f"{small:,.1f}"
    thousands = _round_half_up(v / 1000, 1)
    if abs(thousands) < 1000:
        return _trim(f"{thousands:,.1f}") + "K"
    return _trim(f"{_round_half_up(v / 1e6, 1):,.1f}") + "M"


def ttft(value: float | None) -> str:
    """Time to first token: ``56 ms``, ``1,064 ms``; ``4.8 ms`` below 10 ms."""
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if abs(_round_half_up(v, 1)) < 10:
        return f"{_round_half_up(v, 1):.1f} ms"
    return f"{_round_half_up(v, 0):,.0f} ms"


def tbt(value: float | None) -> str:
    """Time between tokens: always one decimal (``4.8 ms``, ``100.6 ms``)."""
    if _missing(value):
        return MISSING
    return f"{_round_half_up(float(value), 1):,.1f} ms"  # type: ignore[arg-type]


def seconds(value: float | None) -> str:
    """A measured duration: ``30.0 s``."""
    if _missing(value):
        return MISSING
    return f"{_round_half_up(float(value), 1):,.1f} s"  # type: ignore[arg-type]


def plain_number(value: float | None) -> str:
    """A configured number as written: 30 -> ``30``, 7.5 -> ``7.5``, 141.0 -> ``141``."""
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if v == int(v):
        return f"{int(v):,}"
    return _trim(f"{_round_half_up(v, 2):,.2f}".rstrip("0"))


def param_seconds(value: float | None) -> str:
    """A configured duration: ``30 s``."""
    return MISSING if _missing(value) else f"{plain_number(value)} s"


def count(value: float | None) -> str:
    """A count of things: ``1,648``."""
    if _missing(value):
        return MISSING
    return f"{int(_round_half_up(float(value), 0)):,}"  # type: ignore[arg-type]


def tokens(value: float | None) -> str:
    """A token budget: ``4,096 tokens``."""
    return MISSING if _missing(value) else f"{count(value)} tokens"


def average(value: float | None) -> str:
    """An average count such as average active requests: ``127.4``."""
    if _missing(value):
        return MISSING
    return f"{_round_half_up(float(value), 1):,.1f}"  # type: ignore[arg-type]


def context_label(n_tokens: int | None) -> str:
    """Whole K rounded down (1K = 1024): 262,144 -> ``256K``, 257,984 -> ``251K``."""
    if n_tokens is None:
        return MISSING
    n = int(n_tokens)
    if n < 1024:
        return str(n)
    return f"{n // 1024}K"  # whole K without separators, as published: 1019K


def percent_change(new: float | None, old: float | None) -> str:
    """Change from old to new in percent: ``+12.3%``, ``−4.0%``, ``0.0%``."""
    if _missing(new) or _missing(old) or float(old) == 0:  # type: ignore[arg-type]
        return MISSING
    change = (float(new) - float(old)) / float(old) * 100  # type: ignore[arg-type]
    r = _round_half_up(change, 1)
    if r == 0:
        return "0.0%"
    sign = "+" if r > 0 else "−"
    return f"{sign}{abs(r):,.1f}%"


def vram_gb(value: float | None) -> str:
    """Per-GPU memory in a title: ``96GB``, ``141GB``."""
    return "" if _missing(value) else f"{plain_number(value)}GB"


def vram_block(per_gpu: float | None, gpu_count: int | None) -> str:
    """VRAM row: ``96 GB``, or ``1128 GB (8 × 141 GB)`` for several GPUs."""
    if _missing(per_gpu):
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


def utc_date(iso: str | None) -> str:
    """Just the UTC day, for sortable index columns: ``2025-11-29``."""
    text = utc_datetime(iso)
    return text[:10] if text else ""


def range_label(values: list[str]) -> str:
    """``8K–251K``: first–last of already formatted labels."""
    if not values:
        return MISSING
    return values[0] if len(values) == 1 else f"{values[0]}–{values[-1]}"
