"""Words of the pages: status labels, the notes that explain them, and the
glossary terms that table headers link to.

Kept in one module so a table header, its hover text, the methodology page's
glossary and the status notes under a table all say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

from rundir import contract as c

STATUS_LABELS: dict[str, str] = {
    c.VALID: "Valid",
    c.OVER_CAPACITY: "Over capacity",
    c.REQUESTS_QUEUED: "Requests queued",
    c.LOOPED: "Looped",
    c.ERROR: "Error",
    c.PENDING: "Not measured",
}

# The order notes appear in under a table: the published pages' legend order
# (Requests queued, Looped, Over capacity) and wording.
STATUS_NOTES: dict[str, str] = {
    c.REQUESTS_QUEUED: "Requests queued: the server could not run all requests at once, "
    "so some waited in a queue.",
    c.LOOPED: "Looped: the model kept repeating the same text, so the benchmark discarded "
    "this measurement.",
    c.OVER_CAPACITY: "Over capacity: not run because this many requests at this context "
    "would exceed the server's KV cache.",
    c.ERROR: "Error: a request failed during the measurement, so no numbers are shown; "
    "the reason is on the cell's page.",
    c.PENDING: "Not measured: the run stopped before this cell was measured.",
}

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
    "This run was imported from a published page: it carries the published numbers "
    "only and has no raw data (no token timestamps), so its numbers cannot be recomputed "
    "and it has no per-cell pages."
)

PHASE_LABELS = {c.PREFILL: "Prefill", c.DECODE: "Sustained decode"}


def status_label(status: str) -> str:
    """The reader-facing word for a contract status."""
    return STATUS_LABELS.get(status, status)


# The one definition of average active requests (docs/methodology.md's): the
# glossary entry, the header hover text and the builder's own methodology use it.
AVG_ACTIVE_DEFINITION = (
    "Time-weighted mean over the window of the requests the server was running: "
    "requests in flight (sent and not yet ended) minus the ones waiting, when the "
    "server exposes a waiting-requests gauge; otherwise the client's streams that "
    "were receiving tokens (first token to end). Well below the requested count "
    "means requests queued."
)


@dataclass(frozen=True)
class Term:
    key: str
    name: str
    short: str  # one line, used as the header's hover text
    long: str  # Markdown, the glossary entry

    @property
    def anchor(self) -> str:
        """The glossary entry's id on the methodology page (prefixed: never a heading's)."""
        return f"term-{self.key}"


TERMS: list[Term] = [
    Term("phase", "Phase", "Prefill (a cold prompt) or sustained decode (streams generating).",
         "**Prefill** times a cold request: a unique prompt with no cache hit, one output "
         "token. **Sustained decode** keeps a fixed number of streams generating for the "
         "whole measurement window."),
    Term("context", "Context", "Prompt length in tokens (1K = 1024, rounded down).",
         "Prompt length in tokens. Labels are whole K, 1K = 1024 tokens, rounded down: "
         "the largest context that fits a 262,144-token model with 4,096 output tokens "
         "is 257,984 tokens, shown as 251K."),
    Term("requests-at-once", "Requests at once", "Simultaneous streams kept open.",
         "How many streams the benchmark keeps open at the same time (the concurrency). "
         "When a request finishes, a new one starts in its place."),
    Term("status", "Status", "Whether the cell's numbers can be trusted.",
         "*Valid*; *Requests queued* (the server could not run all requests at once: its "
         "waiting gauge was non-zero, or fewer than 95% of the requested streams ran); "
         "*Over capacity* (not run: the requests would not fit the server's KV cache); "
         "*Looped* (the model repeated itself; discarded); *Error* (a stream failed); "
         "*Not measured* (the run stopped first)."),
    Term("total-tok-s", "Total tok/s", "Output tokens per second across all streams.",
         "Output tokens that arrived inside the measurement window, divided by its "
         "length: the server's throughput across all simultaneous requests. For prefill "
         "rows it is prompt tokens per second of a cold request."),
    Term("per-request-tok-s", "Per request tok/s", "Median decode speed one stream sees.",
         "For each request, the tokens after its first chunk in the window divided by the "
         "time from that chunk to its last one; the median over requests."),
    Term("ttft", "TTFT", "Time to first token (median).",
         "Time from sending a request to its first content token; the median over the "
         "cell's requests. Decode cells warm the prompt cache first, so their TTFT mostly "
         "excludes prefill; prefill rows measure it cold."),
    Term("time-between-tokens", "Time between tokens",
         "Median time per generated token within a stream.",
         "The inverse of each request's decode rate, median over requests. A chunk that "
         "carries three tokens counts as three gaps, so speculative decoding is measured "
         "per token, not per chunk."),
    Term("average-active-requests", "Average active requests",
         "Time-weighted mean of requests in flight minus those waiting.",
         AVG_ACTIVE_DEFINITION),
    Term("completed-requests", "Completed requests", "Requests that finished in the window.",
         "Requests that finished normally inside the window (streams still open when the "
         "window closed are not counted). For prefill rows, the number of cold samples."),
    Term("output-tokens", "Output tokens", "Tokens generated inside the window.",
         "Tokens carried by chunks that arrived inside the window, counted from the "
         "server's cumulative usage where it reports it."),
    Term("measured-for", "Measured for", "Length of the measurement window.",
         "The length of the measurement window, after warm-up."),
    Term("prompt-tok-s", "Prompt tok/s", "Prefill speed of a cold prompt.",
         "Prompt tokens divided by the TTFT of a cold request (unique prefix, no cache "
         "hit); the median of the repeats."),
    Term("client-bound", "Client-bound", "The client may have limited the measurement.",
         "The benchmark client could not keep up (for example its event loop lagged), so "
         "the server may be faster than the numbers show."),
]

# drill-down: what each count on a cell's page counts. Requests sent = finished
# normally + cancelled at window end + rejected + failed + ended without a finish
# reason; Completed requests are the finished-normally ones that ended inside the window.
TERMS += [
    Term("requests-sent", "Requests sent", "Every request the cell timed, warm-up and window alike.",
         "Every timed request of the cell. For a decode cell, the streams sent from the start "
         "of warm-up to the end of the window (not the requests that first fill the prompt "
         "cache); for a prefill cell, every cold sample sent, rejected ones included. It is "
         "the sum of the requests finished normally, cancelled at window end, rejected, "
         "failed and ended without a finish reason."),
    Term("finished-normally", "Finished normally",
         "Ended with a finish reason and no error, at any time (warm-up or window).",
         "Requests that ended with a finish reason, no error and no cancellation, whenever "
         "they ended. *Completed requests* counts only the ones that ended inside the window."),
    Term("cancelled-at-window-end", "Cancelled at window end",
         "Streams still open when the window closed; the benchmark cut them off.",
         "Streams still generating when the measurement window closed: the benchmark "
         "cancels them, so they have no finish reason. Their tokens inside the window count."),
    Term("rejected-samples", "Rejected samples",
         "Prefill samples that hit a prefix cache: kept as evidence, never used.",
         "A prefill sample the server partly answered from its prefix cache (cached tokens "
         "above 10% of the prompt, or its prefix-cache hit counter rising) is not cold: the "
         "benchmark rejects it, keeps it in the raw data and sends another. Published "
         "figures never use it."),
    Term("failed-requests", "Failed requests", "Requests that ended with an error.",
         "Requests that ended with an error (HTTP status, lost connection, stall, malformed "
         "event); the first few errors are listed on the cell's page."),
    Term("no-finish-reason", "Ended without a finish reason",
         "Ended with no finish reason, no error and no cancellation.",
         "Requests whose stream closed with no finish reason, no error and no "
         "cancellation. Normally zero."),
    Term("produced-a-token", "Produced a first token",
         "Requests that streamed at least one token: the TTFT distribution's requests.",
         "Requests that received at least one generated token, whatever their outcome and "
         "whether in warm-up or window. The TTFT distribution shows each of them, and the "
         "cell's TTFT is their median."),
    Term("samples-used", "Samples used",
         "Cold prefill samples the published Prompt tok/s and TTFT are medians of.",
         "Prefill samples with no error (not rejected, not failed) and a timed first token: "
         "the published Prompt tok/s and TTFT are the medians over them, and the prefill "
         "row's Completed requests is their number."),
]

# Under a cell page's counts: how they add up, per phase.
COUNTS_NOTES: dict[str, str] = {
    c.DECODE: "Requests sent = finished normally + cancelled at window end + failed "
    "(+ rejected or ended without a finish reason, when any). Completed requests are the "
    "requests finished normally that ended inside the window.",
    c.PREFILL: "Requests sent = finished normally + rejected + failed (+ ended without a "
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

MEASUREMENT_HEADERS = [
    "Phase",
    "Context",
    "Requests at once",
    "Status",
    "Total tok/s",
    "Per request tok/s",
    "TTFT",
    "Time between tokens",
    "Average active requests",
    "Completed requests",
    "Output tokens",
    "Measured for",
]
