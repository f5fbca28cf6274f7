"""Numbers and labels as Speed test matrix pages print them.

Why a module of its own: pages format numbers for people (``17.6K``,
``1,317 ms``, ``30.0 s``, ``—``) and a browser may glue two of them together
(``1,829.9305 ms``). Parsing them strictly here keeps the page parser about
structure only, and makes "is this a number?" one decision, not many.

Every parser raises :class:`NumberError` with a short message quoting the
text; the page parser adds the file and line.
"""

from __future__ import annotations

import re
from decimal import Decimal

MISSING_MARKS = frozenset({"—", "–", "-"})

# A printed number: no leading zeros, thousands separators either everywhere
# or nowhere ("1128 GB" is printed without them), optional decimals.
_NUM = r"(?:0|[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d*)(?:\.\d+)?"
_NUMBER_RE = re.compile(rf"^(?P<n>{_NUM})(?P<mult>[KM])?$")
_UNIT_RE = re.compile(rf"^(?P<n>{_NUM})\s*(?P<unit>[a-z]+)$")
_CONTEXT_RE = re.compile(r"^(?P<n>[1-9]\d*)K$")
_VRAM_RE = re.compile(
    rf"^(?P<total>{_NUM})\s*GB(?:\s*\(\s*(?P<count>\d+)\s*[×x]\s*(?P<each>{_NUM})\s*GB\s*\))?$"
)
_TOOL_RE = re.compile(r"^(?P<name>.*?)\s+v?(?P<version>\d[\w.+-]*)$")

_MULTIPLIERS = {None: 1, "K": 1000, "M": 1_000_000}
K_TOKENS = 1024  # a context label's K is 1024 tokens


class NumberError(ValueError):
    """A printed number or label that does not parse; the message quotes it."""


def is_missing(text: str) -> bool:
    """Whether a cell shows the missing mark (an em dash) rather than a value."""
    return text.strip() in MISSING_MARKS


def _decimal(text: str, what: str) -> Decimal:
    m = _NUMBER_RE.match(text.strip())
    if m is None:
        raise NumberError(f"{what} {text.strip()!r} is not a number")
    return Decimal(m["n"].replace(",", "")) * _MULTIPLIERS[m["mult"]]


def parse_number(text: str, what: str = "value") -> float:
    """``6,216.0`` -> 6216.0, ``17.6K`` -> 17600.0, ``10K``, ``1.2M``."""
    return float(_decimal(text, what))


def parse_count(text: str, what: str = "count") -> int:
    """A whole count: ``1,648`` -> 1648 (``83.2K`` is accepted when whole)."""
    value = _decimal(text, what)
    if value != value.to_integral_value():
        raise NumberError(f"{what} {text.strip()!r} is not a whole number")
    return int(value)


def _with_unit(text: str, what: str, units: dict[str, float], example: str) -> float:
    m = _UNIT_RE.match(text.strip())
    if m is None or m["unit"] not in units:
        raise NumberError(f"{what} {text.strip()!r} is not a number like {example!r}")
    return float(Decimal(m["n"].replace(",", "")) * Decimal(str(units[m["unit"]])))


def parse_ms(text: str, what: str = "latency") -> float:
    """A latency in milliseconds: ``1,317 ms``, ``4.8 ms`` (``1.2 s`` also read)."""
    return _with_unit(text, what, {"ms": 1, "s": 1000}, "1,317 ms")


def parse_seconds(text: str, what: str = "duration") -> float:
    """A duration in seconds: ``30.0 s``, ``30 s`` (``500 ms`` and ``2 min`` also read)."""
    return _with_unit(text, what, {"s": 1, "ms": 0.001, "min": 60}, "30.0 s")


def parse_tokens(text: str, what: str = "token count") -> int:
    """A token budget: ``4,096 tokens`` -> 4096."""
    value = _with_unit(text, what, {"tokens": 1, "token": 1}, "4,096 tokens")
    if value != int(value):
        raise NumberError(f"{what} {text.strip()!r} is not a whole number")
    return int(value)


def parse_context(text: str, what: str = "context") -> int:
    """A context label in tokens: ``251K`` -> 251 × 1024 = 257024.

    Labels are whole K rounded down, so this is the label's lower bound: an
    imported context is precise to the label only (251K may have been
    257,984 tokens). Labels under 1K are printed as plain token counts.
    """
    t = text.strip()
    m = _CONTEXT_RE.match(t)
    if m is not None:
        return int(m["n"]) * K_TOKENS
    try:
        return parse_count(t, what)
    except NumberError:
        raise NumberError(f"{what} {t!r} is not a context label such as 8K") from None


def parse_int(text: str, what: str = "value") -> int:
    """A plain whole number such as a concurrency level: ``128``."""
    return parse_count(text, what)


def parse_vram(text: str) -> tuple[float, int | None, float]:
    """``1128 GB (8 × 141 GB)`` -> (1128, 8, 141); ``96 GB`` -> (96, None, 96).

    Returns (total GB, GPU count when printed, GB per GPU when printed, else
    the total).
    """
    m = _VRAM_RE.match(text.strip())
    if m is None:
        raise NumberError(f"VRAM {text.strip()!r} is not like '96 GB' or '1128 GB (8 × 141 GB)'")
    total = parse_number(m["total"], "VRAM")
    if m["count"] is None:
        return total, None, total
    count, each = int(m["count"]), parse_number(m["each"], "VRAM")
    if abs(total - count * each) > count * 0.5:  # each GB may be rounded for print
        raise NumberError(f"VRAM {text.strip()!r}: {count} × {each:g} GB is not {total:g} GB")
    return total, count, each


def parse_tool(text: str) -> tuple[str, str | None]:
    """``llm-inference-bench v0.7.6`` -> ("llm-inference-bench", "0.7.6")."""
    t = text.strip()
    m = _TOOL_RE.match(t)
    if m is None or not m["name"]:
        return t, None
    return m["name"], m["version"]


def shown_agrees(shown: str, value: float | None) -> bool:
    """Whether value, rounded as the shown text is, reads as the shown text.

    Why: the matrix and the prefill block may print fewer digits than the
    All measurements table (``8,820`` vs ``8,820.0``); they agree when the
    table's value rounds to what they show.
    """
    if value is None:
        return False
    t = shown.strip()
    m = _NUMBER_RE.match(t) or _UNIT_RE.match(t)
    if m is None:
        return False
    digits = m["n"].split(".")[1] if "." in m["n"] else ""
    mult = _MULTIPLIERS.get(m.groupdict().get("mult"), 1)
    unit = Decimal(1).scaleb(-len(digits)) * mult
    number = Decimal(m["n"].replace(",", "")) * mult
    if m.groupdict().get("unit") == "s":  # a latency printed in seconds
        number, unit = number * 1000, unit * 1000
    return abs(Decimal(str(value)) - number) <= unit / 2 + Decimal("1e-9")


def glued_splits(text: str) -> list[tuple[str, str]]:
    """Every way to read ``text`` as two printed numbers written side by side.

    ``1,829.9305`` -> [("1,829.9", "305"), ("1,829.93", "05")?, ...] keeping
    only splits where both halves are well-formed numbers (``05`` is not).
    When the two are separated by whitespace that separation is the only
    reading. Choosing among the readings is the caller's job (the All
    measurements table decides).
    """
    t = text.strip()
    parts = t.split()
    if len(parts) == 2:
        return [(parts[0], parts[1])] if all(_NUMBER_RE.match(p) for p in parts) else []
    if len(parts) != 1:
        return []
    return [
        (t[:i], t[i:])
        for i in range(1, len(t))
        if _NUMBER_RE.match(t[:i]) and _NUMBER_RE.match(t[i:])
    ]
