"""The words both towers print: status labels and notes (from the status table,
rundir/statuses.py), context labels and the throughput, TTFT and
joules-per-token formats, in the published wording.

The collector's live display and the site builder show the same cells; they
share these definitions so a cell reads the same in the terminal and on the
page. The builder's other formats (site_builder/formats.py) build on the
rounding rule here; the site's JavaScript gets its rules from the build.
"""

from __future__ import annotations

import math

from rundir import statuses
from rundir.contract import ERROR

MISSING = "—"
# round_half_up's allowance for binary noise (2.25 is stored as 2.2499999...).
HALF_UP_NUDGE = 1e-9

# Labels and legend notes come from the status table (rundir/statuses.py); the
# notes in the published pages' legend order (Requests queued, Looped, Over capacity).
STATUS_LABELS: dict[str, str] = {s.code: s.label for s in statuses.TABLE}
STATUS_NOTES: dict[str, str] = {s.code: s.note for s in statuses.TABLE if s.note}

# What went wrong, by the words an Error cell's reason uses: the checks' own
# messages (rundir/decode_checks.py, rundir/crosscheck.py, bench/measure/records.py,
# bench/measure/chunks.py, bench/measure/cells.py). A reason is several parts joined by "; ";
# a first part that names none of these is the error the collector kept of a failed request
# (HTTP status, lost connection, malformed event, stalled stream), and any
# later one a note (client-bound, gauge coverage, readiness).
ERROR_CAUSES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("the server stalled",), "the server sent no token to any stream for too long inside the window"),
    (("inconsistent figures",),
     "total tok/s disagreed with per-request tok/s × the streams receiving tokens"),
    (("ended 'length'",), "requests ended 'length' before max_tokens"),
    (("token count", "tokens per chunk", "/tokenize"), "the token counts could not be trusted"),
    (("no tokens arrived", "no stream received a second token"),
     "no decode rate was measured inside the window"),
    (("cold samples",), "too few prefill samples missed the prefix cache"),
    (("requests missing for stream",), "a stream's requests are missing from the raw data"),
    (("more requests ran at once than the cell sent", "column stream_index: stream"),
     "the raw data holds requests the cell did not send"),
)
FAILED_REQUEST = "a request failed"
LEAD_CHARS = 60  # of a failed request's error, in the legend


def error_cause(reason: str | None) -> str | None:
    """What an Error cell's reason says went wrong, in the legend's words
    (None: no reason recorded)."""
    if not reason:
        return None
    parts = reason.split("; ")
    for markers, cause in ERROR_CAUSES:
        if any(m in part for part in parts for m in markers):
            return cause
    lead = parts[0].split(": ", 1)[0].split(" (", 1)[0]
    lead = lead if len(lead) <= LEAD_CHARS else lead[:LEAD_CHARS - 1] + "…"
    return f"{FAILED_REQUEST}: {lead}"


def error_note(reasons: list[str | None], on_pages: bool = True) -> str:
    """The Error legend for cells with these reasons: each cause they name,
    with how many cells name it when there are several cells."""
    causes = [error_cause(r) for r in reasons]
    if not any(causes):
        return STATUS_NOTES[ERROR]
    counts: dict[str, int] = {}
    for cause in causes:
        key = cause or "no reason was recorded"
        counts[key] = counts.get(key, 0) + 1
    shown = [f"{c} ({n} cell{'s' if n > 1 else ''})" if len(reasons) > 1 else c
             for c, n in counts.items()]
    where = " Each cell's page gives its full reason." if on_pages else ""
    return f"Error: no numbers are shown because {'; '.join(shown)}.{where}"


def status_note(status: str, reasons: list[str | None], on_pages: bool = True) -> str | None:
    """The legend entry for cells of one status (an Error's from their reasons)."""
    if status == ERROR:
        return error_note(reasons, on_pages)
    return STATUS_NOTES.get(status)


# An imported tool's summary-only run: its figures stand as the tool gave them, unchecked.
NOT_CHECKED = "Not checked"
NOT_CHECKED_NOTE = ("Not checked: these figures are the other tool's own summary, as it published "
                    "them; none of our checks could run on them.")


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
