"""The words both towers print: status labels and notes, context labels and
the throughput, TTFT and joules-per-token formats, in the published wording.

The collector's live display and the site builder show the same cells; they
share these definitions so a cell reads the same in the terminal and on the
page. The builder's other formats (site_builder/formats.py) build on the
rounding rule here; the site's JavaScript gets its rules from the build.
"""

from __future__ import annotations

import math

from rundir.contract import ERROR, LOOPED, OVER_CAPACITY, PENDING, REQUESTS_QUEUED, VALID

MISSING = "—"
# round_half_up's allowance for binary noise (2.25 is stored as 2.2499999...).
HALF_UP_NUDGE = 1e-9

STATUS_LABELS: dict[str, str] = {
    VALID: "Valid",
    OVER_CAPACITY: "Over capacity",
    REQUESTS_QUEUED: "Requests queued",
    LOOPED: "Looped",
    ERROR: "Error",
    PENDING: "Not measured",
}

# The order notes appear in under a table: the published pages' legend order
# (Requests queued, Looped, Over capacity) and wording.
STATUS_NOTES: dict[str, str] = {
    REQUESTS_QUEUED: "Requests queued: the server could not run all requests at once, "
    "so some waited in a queue.",
    LOOPED: "Looped: the model kept repeating the same text, so the benchmark discarded "
    "this measurement.",
    OVER_CAPACITY: "Over capacity: not run because this many requests at this context "
    "would exceed the server's KV cache.",
    ERROR: "Error: a request failed during the measurement, so no numbers are shown; "
    "the reason is on the cell's page.",
    PENDING: "Not measured: the run stopped before this cell was measured.",
}


def status_label(status: str) -> str:
    """The reader-facing word for a contract status (an unknown code as given)."""
    return STATUS_LABELS.get(status, status)


def context_label(n_tokens: int | None) -> str:
    """Whole K rounded down (1K = 1024), no separators: 262,144 -> ``256K``,
    257,984 -> ``251K``, 1,043,456 -> ``1019K``; below 1K the count itself."""
    if n_tokens is None:
        return MISSING
    n = int(n_tokens)
    return f"{n // 1024}K" if n >= 1024 else str(n)


def is_missing(value: object) -> bool:
    """None, NaN or not a number: shown as MISSING."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


def trim_zero(text: str) -> str:
    """``10.0`` -> ``10``: the K/M forms drop a trailing ``.0``."""
    return text[:-2] if text.endswith(".0") else text


def round_half_up(value: float, digits: int) -> float:
    """Round like a person does (2.25 -> 2.3), not banker's rounding on binary noise.

    The site's JavaScript uses the same rule (its constants come from the build)."""
    scale = 10**digits
    return math.floor(abs(value) * scale + 0.5 + HALF_UP_NUDGE) / scale * (1 if value >= 0 else -1)


def tok_s(value: float | None, *, whole: bool = False) -> str:
    """Throughput: ``6,216.0`` / ``17.6K`` / ``10K`` / ``1.2M``; ``whole`` gives ``6,216``."""
    if is_missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    small = round_half_up(v, 0 if whole else 1)
    if abs(small) < 10_000:
        return f"{small:,.0f}" if whole else f"{small:,.1f}"
    thousands = round_half_up(v / 1000, 1)
    if abs(thousands) < 1000:
        return trim_zero(f"{thousands:,.1f}") + "K"
    return trim_zero(f"{round_half_up(v / 1e6, 1):,.1f}") + "M"


def ttft(value: float | None) -> str:
    """Time to first token: ``56 ms``, ``1,064 ms``; ``4.8 ms`` below 10 ms (so a
    fast cached TTFT does not read as ``0 ms``)."""
    if is_missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if abs(round_half_up(v, 1)) < 10:
        return f"{round_half_up(v, 1):.1f} ms"
    return f"{round_half_up(v, 0):,.0f} ms"


def j_per_token(value: float | None) -> str:
    """Energy per token in joules, three significant figures, never an exponent:
    ``0.421``, ``12.3``, ``0.000512``; the unit goes in the header."""
    if is_missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    if v == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(v))))
    return f"{round_half_up(v, digits):,.{digits}f}"
