"""One server, several tools: every run's figures recomputed under one definition (pure).

Different benchmark tools publish different numbers for the same server
because they define them differently (vLLM's ITL is one sample per chunk,
guidellm's time per output token includes the TTFT), count over different
spans (a tool's span includes ramp-up and ramp-down) or count differently.
This module recomputes, from each run's per-request rows (requests.parquet),
the same figures under ONE definition (docs/methodology.md, "Several tools,
one definition"), and where a tool's own definition is known, that
definition too, so a reader sees which of the two explains its number.

Definitions (per request, from its send, its content chunks' arrivals and
cumulative tokens; "first"/"last" are its first and last chunk carrying tokens):

* TTFT = first − send; E2E = end (the last chunk where no end) − send;
* TPOT = (last − first) / (tokens − 1): without the TTFT; per-request tok/s = its inverse;
* ITL, per token: each chunk's gap to the chunk before, divided over its k
  tokens, counted k times (pooled over the requests); not available at the
  "request" tier (only first and last token kept: no gap is known);
* total tok/s = output tokens / span (whole run: first send to last end of
  the finished requests; window: tokens of chunks inside the cell's window / its length).

The whole-run figures use every request that finished (no error, not
cancelled, one token or more); the window figures those sent and ended
inside the cell's window. Percentiles are rundir.tails' (linear, with its
minimum sample counts); a tool's own definition is ranked linearly with no
minimum, as the tools publish theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir import contract, tails
from rundir.metrics import first_content

OURS = "speed-matrix"
STATS = ("p50", "p90", "p99")
# (metric, label, per-request or pooled samples, higher is better)
METRICS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("itl_ms", "ITL per token (ms)"),
           ("per_request_tok_s", "Per request tok/s"), ("e2e_ms", "E2E (ms)"))
_RATES = {"per_request_tok_s"}


@dataclass(frozen=True)
class Request:
    """One finished request's stamps (ns) and output tokens, as the figures need them."""

    send: int
    end: int
    first: int  # first chunk carrying tokens
    last: int  # last chunk carrying tokens
    tokens: int  # output tokens (the last cumulative count)
    gaps: tuple[tuple[int, int], ...]  # (gap to the chunk before, its tokens), token chunks after the first
    scheduled: int | None = None  # a rate request's scheduled send (its send lag: send − scheduled)


def requests_of(rows: list[dict], chunked: bool) -> list[Request]:
    """The finished requests of a cell's rows (no error, not cancelled, a token); `chunked`:
    whether the rows hold every chunk (False at the request tier: no gap is kept)."""
    out = []
    for r in rows:
        if r.get("error") or r.get("cancelled"):
            continue
        ns, cum = list(r["chunk_ns"] or ()), list(r["chunk_tokens"] or ())
        i = first_content(cum)
        if i is None:
            continue
        token_at = [k for k in range(i, len(cum)) if k == i or (cum[k] or 0) > (cum[k - 1] or 0)]
        last = token_at[-1]
        gaps = tuple((ns[k] - ns[j], cum[k] - cum[j]) for j, k in zip(token_at, token_at[1:],
                                                                      strict=False)) if chunked else ()
        end = r.get("end_ns")
        out.append(Request(r["send_ns"], end if end is not None else ns[last], ns[i], ns[last],
                           int(cum[last]), gaps, r.get("scheduled_ns")))
    return out


def samples(reqs: list[Request], metric: str) -> np.ndarray:
    """The common definition's samples of one metric (ITL: per token, pooled)."""
    if metric == "ttft_ms":
        return np.array([(q.first - q.send) / 1e6 for q in reqs], dtype=float)
    if metric == "e2e_ms":
        return np.array([(q.end - q.send) / 1e6 for q in reqs], dtype=float)
    if metric in ("tpot_ms", "per_request_tok_s"):
        ok = [q for q in reqs if q.tokens > 1 and q.last > q.first]
        tpot = np.array([(q.last - q.first) / 1e6 / (q.tokens - 1) for q in ok], dtype=float)
        return 1e3 / tpot if metric == "per_request_tok_s" else tpot
    if metric == "itl_ms":
        return np.array([g / 1e6 / k for q in reqs for g, k in q.gaps if k > 0 for _ in range(k)],
                        dtype=float)
    raise ValueError(f"no common metric {metric}")


# A tool's own definition of one published metric, where it differs from ours and
# we can recompute it from its rows: (tool, metric) -> (rule, words). Rules:
# "per_chunk": one sample per chunk gap, whatever its tokens (pooled);
# "with_ttft": (last − send) / tokens per request; "to_end": (end − first) / (tokens − 1);
# "first_to_last": (last − first) / (tokens − 1), our TPOT under the tool's name.
TOOL_DEFINITIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("vllm-bench-serve", "itl_ms"): ("per_chunk", "one sample per chunk gap, so a chunk of k tokens "
                                                  "reads k× the per-token gap"),
    ("sglang", "itl_ms"): ("per_chunk", "one sample per chunk gap"),
    ("vllm-bench-serve", "tpot_ms"): ("to_end", "(latency − TTFT) / (tokens − 1), latency to the "
                                                "stream's end"),
    ("aiperf", "itl_ms"): ("to_end", "per request (latency − TTFT) / (tokens − 1)"),
    ("guidellm", "tpot_ms"): ("with_ttft", "(last token − send) / tokens: includes the TTFT"),
    ("guidellm", "itl_ms"): ("first_to_last", "per request (last token − first token) / (tokens − 1)"),
}


def tool_samples(reqs: list[Request], tool: str, metric: str) -> np.ndarray | None:
    """The samples of `metric` under the tool's own definition (TOOL_DEFINITIONS; the
    common one where the tool's equals ours: TTFT, E2E); None where its rows cannot give it."""
    rule = TOOL_DEFINITIONS.get((tool, metric), (None, ""))[0]
    if rule == "per_chunk":
        if not any(q.gaps for q in reqs):
            return None
        return np.array([g / 1e6 for q in reqs for g, k in q.gaps if k > 0], dtype=float)
    if rule == "with_ttft":
        return np.array([(q.last - q.send) / 1e6 / q.tokens for q in reqs], dtype=float)
    if rule == "first_to_last":
        return samples(reqs, "tpot_ms")
    if rule == "to_end":
        ok = [q for q in reqs if q.tokens > 1]
        return np.array([(q.end - q.first) / 1e6 / (q.tokens - 1) for q in ok], dtype=float)
    if metric in ("ttft_ms", "e2e_ms") or (tool == OURS and metric != "itl_ms"):
        return samples(reqs, metric)
    return None


def queued_ttft(reqs: list[Request]) -> np.ndarray | None:
    """TTFT counted from each request's scheduled send (the send lag included), for rows
    that keep a schedule (rate cells); None where none does."""
    if not reqs or any(q.scheduled is None for q in reqs):
        return None
    return np.array([(q.first - q.scheduled) / 1e6 for q in reqs], dtype=float)


def rank(values: np.ndarray, metric: str, stat: str, minimum: bool = True) -> float | None:
    """A stat of samples: "mean", or a level by rundir.tails (a rate's level is its slow
    side); minimum=False ranks any count (as the tools do), still linearly."""
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    if stat == "mean":
        return float(values.mean())
    m = tails.TailMetric(metric, metric in _RATES)
    if minimum:
        return tails.percentile(values, m, stat)
    return float(np.percentile(values, m.rank(stat)))


@dataclass(frozen=True)
class Totals:
    completed: int
    output_tokens: int
    span_s: float | None
    total_tok_s: float | None


def totals_whole(reqs: list[Request]) -> Totals:
    """Output tokens over first send → last end of the finished requests."""
    toks = sum(q.tokens for q in reqs)
    if not reqs:
        return Totals(0, 0, None, None)
    span = (max(q.end for q in reqs) - min(q.send for q in reqs)) / 1e9
    return Totals(len(reqs), toks, span, toks / span if span > 0 else None)


def totals_window(rows: list[dict], start_ns: int, end_ns: int) -> Totals:
    """Tokens of the chunks arriving inside [start, end] (any request) over its length;
    completed: requests finished without error whose end falls inside it."""
    toks, done = 0, 0
    for r in rows:
        ns, cum, prev = r["chunk_ns"] or (), r["chunk_tokens"] or (), 0
        for t, c in zip(ns, cum, strict=False):
            if start_ns <= t <= end_ns and c is not None and c > prev:
                toks += c - prev
            prev = c if c is not None else prev
        end = r.get("end_ns")
        if not r.get("error") and not r.get("cancelled") and end is not None and start_ns <= end <= end_ns:
            done += 1
    span = (end_ns - start_ns) / 1e9
    return Totals(done, toks, span, toks / span if span > 0 else None)


@dataclass(frozen=True)
class LoadPoint:
    """One load point of a run: its cell key, its window, its finished requests."""

    phase: str
    context: int
    level: float  # concurrency, or the offered rate (req/s) of a rate cell
    whole: list[Request]
    window: list[Request]
    whole_totals: Totals
    window_totals: Totals | None
    has_window: bool


_COLUMNS = ("phase", "context", "concurrency", "rate_target", "send_ns", "end_ns", "error", "cancelled",
            "chunk_ns", "chunk_tokens", "scheduled_ns")


def load_points(cells: pa.Table, requests: pa.Table, tier: str | None, measured: bool) -> list[LoadPoint]:
    """A run's decode and rate cells as load points (ours: their measured requests only)."""
    keep = pc.is_in(requests["phase"], pa.array([contract.DECODE, contract.RATE]))
    if measured:
        keep = pc.and_(keep, pc.is_in(requests["purpose"], pa.array([contract.PURPOSE_MEASURE,
                                                                     contract.PURPOSE_ARRIVAL])))
    needed = [n for n in _COLUMNS if n in requests.column_names]
    rows = requests.filter(keep).select(needed).to_pylist()  # only what the figures read
    out = []
    for c in cells.to_pylist():
        if c["phase"] not in (contract.DECODE, contract.RATE):
            continue
        rate = c.get("rate_target")
        mine = [r for r in rows if r["phase"] == c["phase"] and r["context"] == c["context"]
                and r["concurrency"] == c["concurrency"] and r.get("rate_target") == rate]
        if not mine:
            continue
        reqs = requests_of(mine, chunked=tier != contract.IMPORT_TIER_REQUEST)
        ws, we = c.get("window_start_ns"), c.get("window_end_ns")
        has = ws is not None and we is not None and we > ws
        inside = [q for q in reqs if has and ws <= q.send and q.end <= we]
        level = float(rate) if c["phase"] == contract.RATE and rate is not None else float(c["concurrency"])
        out.append(LoadPoint(c["phase"], c["context"], level, reqs, inside, totals_whole(reqs),
                             totals_window(mine, ws, we) if has else None, has))
    return out


# ---- why the numbers differ ---------------------------------------------------

AGREE = 0.02  # a recomputation within 2% of what the tool published agrees with it


def relative(a: float | None, b: float | None) -> float | None:
    """(a − b) / b, or None."""
    if a is None or b is None or b == 0:
        return None
    return (a - b) / b


def why(metric: str, tool: str, common: float | None, own: float | None,
        published: float | None, window: float | None = None, queued: float | None = None) -> str:
    """The short "why they differ" line of one figure, from what can be computed:
    `common` ours under the one definition (whole run), `own` the tool's definition
    recomputed from its rows, `published` the tool's figure, `window` ours over the window,
    `queued` (TTFT) its rows counted from their scheduled sends."""
    if published is None:
        return "The tool published no such figure."
    off_queued = relative(queued, published)
    if off_queued is not None and abs(off_queued) <= AGREE and not (
            (o := relative(own, published)) is not None and abs(o) <= AGREE):
        return (f"Queueing: its rows counted from each request's scheduled send (the wait before it "
                f"was sent included) give its figure; from the send they read "
                f"{_pct(relative(common, published))} from it.") + _window_line(relative(window, common))
    defined = (tool, metric) in TOOL_DEFINITIONS
    parts = []
    off_own = relative(published, own)
    off_common = relative(published, common)
    if own is not None and off_own is not None and abs(off_own) <= AGREE:
        if defined and off_common is not None and abs(off_common) > AGREE:
            parts.append(f"Definition: its rows give its figure under its own definition "
                         f"({TOOL_DEFINITIONS[(tool, metric)][1]}); under ours they read "
                         f"{_pct(relative(common, published))} from it.")
        else:
            parts.append("Same definition: its rows give its figure.")
    elif own is not None and off_own is not None:
        parts.append(f"Not explained by its rows: under its own definition they read "
                     f"{_pct(relative(own, published))} from its figure (window, counting or "
                     f"rounding of its own).")
    else:
        parts.append("Its definition cannot be recomputed from its rows at this tier.")
    return " ".join(parts) + _window_line(relative(window, common))


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def total_why(published: float | None, tokens: int, span_s: float | None,
              own_span_s: float | None, window: float | None) -> str:
    """The total tok/s line: its rows' output tokens over the tool's own span (where it
    published one) against its figure, then over their first send → last end, then the window."""
    if published is None:
        return "The tool published no such figure."
    ours = tokens / span_s if span_s else None
    if own_span_s:
        own = tokens / own_span_s
        off = relative(own, published)
        if off is not None and abs(off) <= AGREE:
            line = (f"Span: its rows' {tokens} tokens over its own span ({own_span_s:g} s) give its "
                    f"figure; over first send → last end ({span_s or 0:.3f} s) they read "
                    f"{_pct(relative(ours, published))} from it.")
        else:
            line = (f"Not explained by its rows: over its own span ({own_span_s:g} s) they read "
                    f"{_pct(off)} from its figure (counting of its own).")
    else:
        line = why("total_tok_s", "", ours, ours, published)
        return line + ("" if window is None else _window_line(relative(window, ours)))
    return line + _window_line(relative(window, ours))


def _window_line(off: float | None) -> str:
    if off is None or abs(off) <= AGREE:
        return ""
    return (f" Window: over the steady window ours reads {_pct(off)} from the whole run "
            "(the tool's span includes ramp-up and ramp-down).")


def count_why(published: float | None, counted: int) -> str:
    """The counting line: the tool's count against the rows it wrote."""
    if published is None:
        return "The tool published no such count."
    if round(published) == counted:
        return "Its rows hold the same count."
    return f"Counting: it published {published:g}, its rows hold {counted}."
