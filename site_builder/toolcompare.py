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
  the finished requests; window: tokens of chunks inside the cell's window / its length);
  none where the rows share no clock (every send 0: SGLang's file keeps no send times).

The whole-run figures use every request that finished (no error, not
cancelled, one token or more); the window figures those sent and ended
inside the cell's window. Percentiles are rundir.tails' (linear, with its
minimum sample counts). Each tool's own definition (site_builder/tooldefs.py,
one rule per tool and figure, as its reader read it) is recomputed with the
tool's own weights and percentile (numpy's linear one; guidellm's weighted
"first value reaching N%"), at any sample count, as the tools publish theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rundir import contract, tails
from rundir.metrics import first_content
from site_builder import tooldefs

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
    last_chunk: int | None = None  # the last chunk's arrival, tokens or not (None: `last`)
    steps: tuple[tuple[int, int], ...] = ()  # every chunk from the first: (gap to the one before, tokens)
    prompt: int | None = None  # its prompt tokens, where known


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
        steps = ((0, int(cum[i])),) + tuple((ns[k] - ns[k - 1], int((cum[k] or 0) - (cum[k - 1] or 0)))
                                             for k in range(i + 1, len(ns))) if chunked else ()
        end = r.get("end_ns")
        out.append(Request(r["send_ns"], end if end is not None else ns[last], ns[i], ns[last],
                           int(cum[last]), gaps, r.get("scheduled_ns"), ns[-1], steps,
                           r.get("prompt_tokens")))
    return out


def shared_clock(rows: list[dict]) -> bool:
    """Whether the rows' sends lie on one clock. A format without send times (SGLang's
    bench_serving: stamps relative to each request's own send) is imported with every
    send_ns 0: spans, totals and windows cannot be computed from such rows."""
    sends = {r.get("send_ns") for r in rows}
    return not (len(rows) > 1 and sends == {0})


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


# A tool's own definition of each figure it publishes: site_builder/tooldefs.py.
TOOL_DEFINITIONS = tooldefs.TOOL_DEFINITIONS


def _last_chunk(q: Request) -> int:
    return q.last if q.last_chunk is None else q.last_chunk


def _rule_samples(reqs: list[Request], rule: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(samples, per-request token counts) of one rule (tooldefs), None where the rows lack it."""
    if rule == tooldefs.TTFT:
        return np.array([(q.first - q.send) / 1e6 for q in reqs], dtype=float), _tok(reqs)
    if rule == tooldefs.E2E_END:
        return np.array([(q.end - q.send) / 1e6 for q in reqs], dtype=float), _tok(reqs)
    if rule == tooldefs.E2E_LAST_CHUNK:
        return np.array([(_last_chunk(q) - q.send) / 1e6 for q in reqs], dtype=float), _tok(reqs)
    if rule in (tooldefs.PER_CHUNK, tooldefs.TOKEN_STAMPS):
        if not any(q.steps for q in reqs):
            return None  # no gap kept (request tier)
        if rule == tooldefs.PER_CHUNK:
            vals = [g / 1e6 for q in reqs for g, _ in q.steps[1:]]
        else:  # each chunk's gap once (not the first's), then one 0 for each further token in it
            vals = [v for q in reqs for n, (g, k) in enumerate(q.steps)
                    for v in ([g / 1e6] if n else []) + [0.0] * (k - 1)]
        return np.array(vals, dtype=float), np.ones(len(vals))
    ok = [q for q in reqs if q.tokens > 1]
    if rule in (tooldefs.FIRST_TO_LAST_CHUNK, tooldefs.CHUNK_RATE):
        v = np.array([(_last_chunk(q) - q.first) / 1e6 / (q.tokens - 1) for q in ok], dtype=float)
        if rule == tooldefs.CHUNK_RATE:
            with np.errstate(divide="ignore"):
                v = 1e3 / v
        return v, _tok(ok)
    if rule == tooldefs.FIRST_TO_LAST_TOKEN:
        return np.array([(q.last - q.first) / 1e6 / (q.tokens - 1) for q in ok], dtype=float), _tok(ok)
    if rule == tooldefs.WITH_TTFT:
        return np.array([(q.last - q.send) / 1e6 / q.tokens for q in reqs], dtype=float), _tok(reqs)
    raise ValueError(f"no rule {rule}")


def _tok(reqs: list[Request]) -> np.ndarray:
    return np.array([q.tokens for q in reqs], dtype=float)


def tool_rule(tool: str, metric: str) -> tooldefs.ToolRule | None:
    """The tool's own definition of `metric`; ours is the common one (TTFT, E2E, TPOT, tok/s)."""
    if tool == OURS and metric != "itl_ms":
        return None
    return TOOL_DEFINITIONS.get((tool, metric))


def tool_samples(reqs: list[Request], tool: str, metric: str, counting: str | None = None
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """(samples, weights) of `metric` under the tool's own definition (tooldefs), None where its
    rows cannot give it: no rule known, its end not kept, its tokenizer's counts not kept, or no
    gap at the request tier. `counting`: the cell's token_counting."""
    if tool == OURS and metric != "itl_ms":
        v = samples(reqs, metric)
        return v, np.ones(len(v))
    rule = TOOL_DEFINITIONS.get((tool, metric))
    if rule is None or rule.rule is None:
        return None
    if rule.needs_chunk_counts and counting != contract.COUNT_PEER_CHUNKS:
        return None
    got = _rule_samples(reqs, rule.rule)
    if got is None:
        return None
    values, tokens = got
    weights = {tooldefs.WEIGHT_ONE: np.ones(len(values)), tooldefs.WEIGHT_TOKENS: tokens,
               tooldefs.WEIGHT_TOKENS_LESS_ONE: tokens - 1}[rule.weight]
    return values, weights


def tool_rank(got: tuple[np.ndarray, np.ndarray] | None, stat: str, ranking: str = tooldefs.LINEAR
              ) -> float | None:
    """A stat as the tool ranks it: its (weighted) mean, or its percentile at the stat's level
    (a rate's pN is the Nth percentile upward, as the tools publish it), at any sample count."""
    if got is None:
        return None
    values, weights = got
    keep = np.isfinite(values)
    values, weights = values[keep], weights[keep]
    if not len(values) or weights.sum() <= 0:
        return None
    q = float(stat[1:]) if stat != "mean" else 0.0
    if ranking == tooldefs.FIRST_REACHING:
        # guidellm's own arithmetic (0.8): equal values merged, each share normalised, then summed
        # cumulatively; the float rounding of that sum decides ties at N%, so it is followed exactly.
        uniq, inverse = np.unique(values, return_inverse=True)
        merged = np.zeros(len(uniq))
        np.add.at(merged, inverse, weights)
        uniq, merged = uniq[merged > 0], merged[merged > 0]
        share = merged / merged.sum()
        if stat == "mean":
            return float(np.sum(uniq * share))
        cdf = np.cumsum(share)
        return float(uniq[min(int(np.searchsorted(cdf, q / 100, side="left")), len(uniq) - 1)])
    if stat == "mean":
        return float(np.sum(values * weights) / weights.sum())
    return float(np.percentile(values, q))


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


def totals_whole(reqs: list[Request], clock: bool = True) -> Totals:
    """Output tokens over first send → last end of the finished requests (no span where
    the rows share no clock: `clock` False, see shared_clock)."""
    toks = sum(q.tokens for q in reqs)
    if not reqs:
        return Totals(0, 0, None, None)
    if not clock:
        return Totals(len(reqs), toks, None, None)
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
    counting: str | None = None  # the cell's token_counting
    clock: bool = True  # whether its sends share one clock (shared_clock)
    prompt_median: float | None = None  # the median prompt tokens of its finished requests, where known


_COLUMNS = ("phase", "context", "concurrency", "rate_target", "send_ns", "end_ns", "error", "cancelled",
            "chunk_ns", "chunk_tokens", "scheduled_ns", "prompt_tokens")


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
        clock = shared_clock(mine)
        ws, we = c.get("window_start_ns"), c.get("window_end_ns")
        has = clock and ws is not None and we is not None and we > ws
        inside = [q for q in reqs if has and ws <= q.send and q.end <= we]
        level = float(rate) if c["phase"] == contract.RATE and rate is not None else float(c["concurrency"])
        prompts = [q.prompt for q in reqs if q.prompt]
        out.append(LoadPoint(c["phase"], c["context"], level, reqs, inside, totals_whole(reqs, clock),
                             totals_window(mine, ws, we) if has else None, has, c.get("token_counting"),
                             clock, float(np.median(prompts)) if prompts else None))
    return out


# ---- why the numbers differ ---------------------------------------------------

# A recomputation within 0.1% of what the tool published gives its figure (the tests find
# 1e-6 on the tools' own files; the slack is for figures the tools round when they write them).
AGREE = 0.001
WINDOW_NOTE = 0.02  # the window is named where ours over it moves the whole run's by more


def relative(a: float | None, b: float | None) -> float | None:
    """(a − b) / b, or None."""
    if a is None or b is None or b == 0:
        return None
    return (a - b) / b


def _agrees(a: float | None, b: float | None) -> bool:
    off = relative(a, b)
    return off is not None and abs(off) <= AGREE


def why(metric: str, tool: str, common: float | None, own: float | None,
        published: float | None, window: float | None = None, queued: float | None = None,
        counting: str | None = None) -> str:
    """The short "why they differ" line of one figure, from what can be computed:
    `common` ours under the one definition (whole run), `own` the tool's definition
    recomputed from its rows, `published` the tool's figure, `window` ours over the window,
    `queued` (TTFT) its rows counted from their scheduled sends, `counting` the cell's."""
    if published is None:
        return "The tool published no such figure."
    if _agrees(queued, published) and not _agrees(own, published):
        return (f"Queueing: its rows counted from each request's scheduled send (the wait before it "
                f"was sent included) give its figure; from the send they read "
                f"{_pct(relative(common, published))} from it.") + _window_line(relative(window, common))
    rule = tool_rule(tool, metric)
    parts = []
    if own is not None and _agrees(own, published):
        if common is None:
            words = f" ({rule.words})" if rule is not None else ""
            parts.append(f"Definition: its rows give its figure under its own definition{words}; "
                         f"ours cannot be computed from them.")
        elif rule is not None and rule.rule not in (tooldefs.TTFT, None) and not _agrees(common, published):
            parts.append(f"Definition: its rows give its figure under its own definition "
                         f"({rule.words}); under ours they read {_pct(relative(common, published))} "
                         f"from it.")
        else:
            parts.append("Same definition: its rows give its figure.")
    elif own is not None:
        cause = (" It divides by its own tokenizer's count, which its rows may not hold."
                 if rule is not None and rule.own_count else "")
        parts.append(f"Not explained by its rows: under its own definition they read "
                     f"{_pct(relative(own, published))} from its figure (window, counting or "
                     f"rounding of its own).{cause}")
    elif rule is not None and rule.rule is None:
        parts.append(f"Its definition cannot be recomputed from its rows: {rule.words}.")
    elif rule is not None and rule.needs_chunk_counts and counting != contract.COUNT_PEER_CHUNKS:
        parts.append(f"Counting: its definition ({rule.words}) needs its own tokens per chunk, which "
                     f"its rows do not hold.")
    else:
        parts.append("Its definition cannot be recomputed from its rows at this tier.")
    return " ".join(parts) + _window_line(relative(window, common))


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def total_why(published: float | None, tokens: int, span_s: float | None,
              own_span_s: float | None, window: float | None, tool: str = "") -> str:
    """The total tok/s line: its rows' output tokens over the tool's own span (where it
    published one) against its figure, then over their first send → last end (None: the
    rows share no clock), then the window."""
    if published is None:
        return "The tool published no such figure."
    ours = tokens / span_s if span_s else None
    recomputable, special = tooldefs.TOTAL_DEFINITIONS.get(tool, (True, ""))
    if not recomputable:
        return (f"Its definition cannot be recomputed from its rows: {special}."
                + _window_line(relative(window, ours)))
    if own_span_s:
        own = tokens / own_span_s
        off = relative(own, published)
        if off is not None and abs(off) <= AGREE:
            theirs = (f"over first send → last end ({span_s:.3f} s) they read "
                      f"{_pct(relative(ours, published))} from it." if span_s else
                      "its rows share no clock, so they have no span of ours.")
            line = (f"Span: its rows' {tokens} tokens over its own span ({own_span_s:g} s) give its "
                    f"figure; {theirs}")
        else:
            line = (f"Not explained by its rows: over its own span ({own_span_s:g} s) they read "
                    f"{_pct(off)} from its figure" + (f". Its figure is {special}." if special
                                                      else " (counting of its own)."))
    else:
        line = why("total_tok_s", "", ours, ours, published)
        return line + ("" if window is None else _window_line(relative(window, ours)))
    return line + _window_line(relative(window, ours))


def _window_line(off: float | None) -> str:
    if off is None or abs(off) <= WINDOW_NOTE:
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
