"""The status table: one record per contract status, everything a reader sees of it.

The codes themselves are the contract's (rundir/contract/); this table says
how each one reads (label, legend note, the heatmap's short and tiny forms),
whether its cells carry numbers, and its colours. It lives in rundir/ because
both towers read it: the collector's live matrix prints the labels and shows
a number only for statuses that carry one; the builder generates from it the
stylesheet's status rules (site_builder/statusstyle.py), the heatmap fills
(chartkit.MISSING_FILLS) and the rules the pages' scripts get as JSON.

Colours, one per status on every page (badge, matrix and measurements
tables, heatmap and its no-JS picture). Until issue 19 the tables and the
heatmap disagreed (Over capacity grey vs pink, Error and Looped one pale red
vs lilac and amber). The heatmap's hues were kept, because readers see the
heatmap most and it tells Looped from Error; each was lightened, mixed with
white just enough that the tables' text on it reads at WCAG AA (4.5:1), which
the chart fills as they were did not (3.5-4.3:1): Error and Looped for their
red ink #c4291c and the compare page's grey #59636e, Over capacity for the
grey. Not measured stays a grey dark enough to tell from the heatmap's
"No numbers" fill, so its ink is a shade darker than the page's grey.
Valid and Requests queued keep their table colours: the heatmap shades
their cells by their numbers instead.

Roles say what a status does to a table cell: ``measured`` (numbers, no
fill), ``flagged`` (numbers, the cell filled and its status word in bold
ink), ``failed`` (no numbers, the cell in ink on its fill, status word bold),
``absent`` (no numbers, the cell and the compare page's A/B texts in its
muted ink).
"""

from __future__ import annotations

from dataclasses import dataclass

from rundir.contract import (
    ERROR,
    LOAD_NOT_DELIVERED,
    LOOPED,
    OVER_CAPACITY,
    PENDING,
    REQUESTS_QUEUED,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    STATUSES,
    VALID,
)

ROLES = ("measured", "flagged", "failed", "absent")


@dataclass(frozen=True)
class Status:
    """How one contract status reads and looks."""

    code: str
    label: str  # the reader-facing word (terminal and pages)
    note: str | None  # its legend line under a table (None: never explained)
    numbers: bool  # its cells carry numbers (Total tok/s, TTFT, ...)
    role: str  # one of ROLES
    fill: str  # background: badge, table cells, heatmap cell
    ink: str  # text on that fill (contrast >= 4.5:1)
    short: str | None = None  # a heatmap cell's text (statuses without numbers)
    tiny: str | None = None  # the same in a narrow cell (a phone)
    edge: str | None = None  # a badge's border, where it has its own
    # Only traffic cells (prefix reuse, conversations) take it: a site without such
    # cells leaves its rules out, so it is byte for byte what it was before them.
    traffic: bool = False


# In the published pages' legend order (Requests queued, Looped, Over capacity):
# notes under a table follow it.
TABLE: tuple[Status, ...] = (
    Status(VALID, "Valid", None, True, "measured", fill="#dafbe1", ink="#1a7f37",
           edge="#aceebb"),
    Status(REQUESTS_QUEUED, "Requests queued",
           "Requests queued: the server could not run all requests at once, "
           "so some waited in a queue.", True, "flagged", fill="#fff8e1", ink="#9a6700"),
    Status(LOOPED, "Looped",
           "Looped: the model kept repeating the same text, so the benchmark discarded "
           "this measurement.", False, "failed", fill="#f9e3b5", ink="#c4291c",
           short="looped", tiny="loop"),
    Status(OVER_CAPACITY, "Over capacity",
           "Over capacity: not run because this many requests at this context "
           "would exceed the server's KV cache.", False, "absent", fill="#f7d6d3", ink="#59636e",
           short="over cap.", tiny="cap."),
    # The note is only for Error cells that record no reason (imported ones): the
    # others' note says what their reasons say (rundir.words.error_note).
    Status(ERROR, "Error",
           "Error: the measurement failed, so no numbers are shown (no reason was recorded).",
           False, "failed", fill="#eee1f4", ink="#c4291c", short="error", tiny="err."),
    Status(PENDING, "Not measured", "Not measured: the run stopped before this cell was measured.",
           False, "absent", fill="#d8d8d8", ink="#555f6a", short="not run", tiny="—"),
    # Flagged, like Requests queued: the numbers are what the server did, at a reuse
    # other than the one asked for (or one nothing could confirm).
    Status(REUSE_OFF_TARGET, "Reuse off target",
           "Reuse off target: the share of each prompt the server took from its prefix cache "
           "was not the share asked for, or its two measures disagreed.", True, "flagged",
           fill="#fde7d9", ink="#a4410e", traffic=True),
    Status(REUSE_UNVERIFIED, "Reuse not verifiable",
           "Reuse not verifiable: the server reports no cached tokens and no prefix-cache "
           "counters, so the reuse it delivered is unknown.", True, "flagged",
           fill="#eaeef2", ink="#57606a", traffic=True),
    # Flagged too: the server's numbers are real, at a load other than the one offered.
    Status(LOAD_NOT_DELIVERED, "Load not delivered",
           "Load not delivered: the benchmark did not send the requests its schedule asked "
           "for (too few, too late, or spaced unlike the arrival process), so the server saw "
           "another load than the one offered.", True, "flagged",
           fill="#f3e8fd", ink="#6e40c9", traffic=True),
)

BY_CODE: dict[str, Status] = {s.code: s for s in TABLE}
# The heatmap legend's order of the statuses without numbers.
HEATMAP_ORDER: tuple[str, ...] = (OVER_CAPACITY, LOOPED, ERROR, PENDING)
NUMBER_STATUSES: tuple[str, ...] = tuple(s.code for s in TABLE if s.numbers)


def check(table: tuple[Status, ...], codes: tuple[str, ...], heatmap: tuple[str, ...]) -> None:
    """The table covers the contract's codes exactly, with known roles, and the
    heatmap orders exactly the statuses without numbers: a status added to the
    contract without its record fails when this module loads, not on a page."""
    unmatched = set(codes) ^ {s.code for s in table}
    if unmatched:
        raise LookupError(f"rundir/statuses.py: statuses without a record (or not in the "
                          f"contract): {sorted(unmatched)}")
    for s in table:
        if s.role not in ROLES or (s.role in ("measured", "flagged")) != s.numbers:
            raise ValueError(f"rundir/statuses.py: {s.code}: role {s.role!r} and numbers={s.numbers}")
    if sorted(heatmap) != sorted(s.code for s in table if not s.numbers):
        raise ValueError("rundir/statuses.py: HEATMAP_ORDER must list the statuses without numbers")


check(TABLE, STATUSES, HEATMAP_ORDER)


def carries_numbers(code: str) -> bool:
    """Whether cells of this status have numbers to show."""
    return code in NUMBER_STATUSES


def page_table(traffic: bool = False) -> tuple[Status, ...]:
    """The statuses a site's stylesheet and scripts know: the traffic ones only
    on a site with traffic cells."""
    return tuple(s for s in TABLE if traffic or not s.traffic)


def js_rules(traffic: bool = False) -> dict[str, object]:
    """What the pages' scripts need, so no script writes a status code: which
    statuses carry numbers, which of those are flagged (drawn hollow), the
    Valid code (the compare summary counts cells Valid in both runs) and the
    status of a cell a run does not have."""
    shown = page_table(traffic)
    return {"numbers": [s.code for s in shown if s.numbers],
            "flagged": [s.code for s in shown if s.role == "flagged"],
            "valid": VALID, "absent": PENDING}
