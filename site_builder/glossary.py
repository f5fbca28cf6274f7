"""Words of the pages: the notes under tables and the glossary terms that
table headers link to.

Status labels and their notes are shared with the collector (rundir/words.py).
Each glossary term's definition is the one docs/methodology.md gives: the
methodology is the one home of every definition, and this module reads the
terms' text from it (the wheel ships it as site_builder/methodology.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rundir import contract
from site_builder.metrictable import ENERGY, MEASURED, THROTTLING, Metric, glossary_metrics


def methodology_path() -> Path:
    """The methodology shipped with the builder: the wheel's packaged copy, else
    the checkout's docs/methodology.md (an editable install). Never the current
    folder's docs/: `build-site` run in another project must not publish its text."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "methodology.md", here.parent / "docs" / "methodology.md"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"the builder's methodology is missing: expected {here / 'methodology.md'}")


_ANCHORED = re.compile(r"^(?:- )?\{#([a-z][a-z0-9-]*)\}(.*)$")
_NAME = re.compile(r"^\*\*[^*]+\*\*(?:\s*\([^)]*\))?\s*:?\s*")


def definitions(text: str) -> dict[str, str]:
    """Each `{#id}` paragraph or list item of the methodology, as Markdown, keyed
    by its id, with its bold lead-in name dropped (the glossary shows the name)."""
    out: dict[str, str] = {}
    key: str | None = None
    parts: list[str] = []
    for line in [*text.splitlines(), ""]:
        m = _ANCHORED.match(line)
        if key is not None and (m or not line.strip() or line.startswith(("- ", "#"))):
            body = _NAME.sub("", " ".join(parts), count=1)
            out.setdefault(key, body[:1].upper() + body[1:])
            key = None
        if m:
            key, parts = m.group(1), [m.group(2).strip()]
        elif key is not None:
            parts.append(line.strip())
    return out


def body_without_glossary(text: str) -> str:
    """The methodology without its `## Glossary` section: the page lists the terms
    itself (with their ids), so the section's text must not appear twice."""
    m = re.search(r"^## Glossary[ \t]*$", text, flags=re.MULTILINE)
    if m is None:
        return text
    rest = re.search(r"^## ", text[m.end():], flags=re.MULTILINE)
    return text[: m.start()] + (text[m.end() + rest.start():] if rest else "")


CLIENT_BOUND_NOTE = (
    "Client-bound (marked *): the benchmark client, not the server, may have limited "
    "this measurement, so the server may be faster than shown."
)
CACHE_NOTE = (
    "TTFT is measured after the benchmark warms the server's prompt cache, "
    "so it mostly excludes prefill."
)
MEDIANS_NOTE = "Latencies are medians. Total tok/s is output across all simultaneous requests."
IMPORTED_NOTE = (
    "This run was imported from {source}: it carries the published numbers "
    "only and has no raw data (no token timestamps), so its numbers cannot be recomputed "
    "and it has no per-cell pages."
)
# What an imported run came from, by the importer's `imported.format` prefix.
IMPORTED_SOURCES = {"llm-inference-bench/json": "an llm-inference-bench JSON report"}


def imported_note(fmt: str | None) -> str:
    """The notice on an imported run's page, naming what it was imported from."""
    source = next((what for prefix, what in IMPORTED_SOURCES.items()
                   if (fmt or "").startswith(prefix)), "a published page")
    return IMPORTED_NOTE.format(source=source)

PHASE_LABELS = {contract.PREFILL: "Prefill", contract.DECODE: "Sustained decode"}


@dataclass(frozen=True)
class Term:
    key: str
    name: str
    short: str  # one line, used as the header's hover text
    long: str  # Markdown, the glossary entry: the methodology's definition

    @property
    def anchor(self) -> str:
        """The glossary entry's id on the methodology page (prefixed: never a heading's)."""
        return f"term-{self.key}"


def _metric(m: Metric) -> tuple[str, str, str]:
    """A metric's glossary entry: its name and hover text are the metric table's."""
    assert m.term is not None
    return m.term, m.header, m.hint


# (key, name, hover text); the metrics' from the metric table (site_builder/metrictable.py:
# every record with a `term`, in its glossary order). The definition is the methodology's
# paragraph with id `term-<key>` (its Glossary section) or, for a term the body defines, `<key>`.
_TERMS: list[tuple[str, str, str]] = [
    ("phase", "Phase", "Prefill (a cold prompt) or sustained decode (streams generating)."),
    ("context", "Context", "Prompt length in tokens (1K = 1024, rounded down)."),
    ("requests-at-once", "Requests at once", "Simultaneous streams kept open."),
    ("status", "Status", "Whether the cell's numbers can be trusted."),
    *(_metric(m) for m in glossary_metrics()),
    ("percentile-levels", "Percentile levels",
     "p50 (the median) to p99.9: the slow side of each figure, with the samples behind it."),
    ("client-bound", "Client-bound", "The client may have limited the measurement."),
    # drill-down: what each count on a cell's page counts.
    ("requests-sent", "Requests sent", "Every request the cell timed, warm-up and window alike."),
    ("finished-normally", "Finished normally",
     "Ended with a finish reason and no error, at any time (warm-up or window)."),
    ("cancelled-at-window-end", "Cancelled at window end",
     "Streams still open when the window closed; the benchmark cut them off."),
    ("rejected-samples", "Rejected samples",
     "Prefill samples that hit a prefix cache: kept as evidence, never used."),
    ("failed-requests", "Failed requests", "Requests that ended with an error."),
    ("no-finish-reason", "Ended without a finish reason",
     "Ended with no finish reason, no error and no cancellation."),
    ("produced-a-token", "Produced a first token",
     "Requests that streamed at least one token: the TTFT distribution's requests."),
    ("samples-used", "Samples used",
     "Cold prefill samples the published Prompt tok/s and TTFT are medians of."),
    # GPU telemetry (runs that recorded it): the methodology's Energy and throttling.
    *(_metric(m) for m in glossary_metrics(energy=True)),
    ("throttling", "Throttling", "Throttle reasons active for over 10% of the window."),
]


def _terms() -> list[Term]:
    found = definitions(methodology_path().read_text(encoding="utf-8"))
    out = []
    for key, name, short in _TERMS:
        long = found.get(f"term-{key}", found.get(key))
        if long is None:
            raise LookupError(f"{methodology_path()}: no definition of the glossary term {name!r} "
                              f"(expected a paragraph starting {{#term-{key}}} or {{#{key}}})")
        out.append(Term(key, name, short, long))
    return out


TERMS: list[Term] = _terms()

# Under a cell page's counts: how they add up, per phase.
COUNTS_NOTES: dict[str, str] = {
    contract.DECODE: "Requests sent = finished normally + cancelled at window end + failed "
    "(+ rejected or ended without a finish reason, when any). Completed requests are the "
    "requests finished normally that ended inside the window.",
    contract.PREFILL: "Requests sent = finished normally + rejected + failed (+ ended without a "
    "finish reason, when any). Completed requests are the samples used: finished normally "
    "with a timed first token.",
}

# How the drill-down marks each prefill sample (keys from drilldown._sample_use).
SAMPLE_USE: dict[str, str] = {
    "used": "Used",
    "rejected": "Rejected",
    "failed": "Not used: failed",
    "untimed": "Not used: no first token",
}

TERM_BY_NAME = {t.name: t for t in TERMS}

# All measurements: the cell's key and status, then the metric table's columns.
MEASUREMENT_HEADERS = ["Phase", "Context", "Requests at once", "Status",
                       *(m.header for m in MEASURED)]

# After MEASUREMENT_HEADERS, only for runs with GPU telemetry (rundir/energy.py):
# energy per output token (per prompt token on prefill rows), average watts of all
# GPUs over the window, and the throttle classes active for over 10% of it.
ENERGY_HEADERS = [*(m.header for m in ENERGY), THROTTLING]
