"""The page metrics, computed from raw chunks: pure, vectorised, no I/O.

One definition serves both halves: the collector uses it to judge a cell
while it runs (statuses), the builder to recompute every published number.
Definitions are in docs/methodology.md; the short version:

* a chunk's tokens = increase of the cumulative completion-token count;
* output tokens = tokens in chunks that arrived inside the window [s, e];
* per-request rate = tokens after its first in-window token chunk /
  time from that chunk to its last in-window token chunk (so a chunk of
  three tokens counts three gaps, not one);
* TTFT = first token-carrying chunk − send time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Keys of the values a Chunks memo shares between metrics and the drill-down.
_FIRST_TOKEN = "first_token"
_NEGATIVE = "negative"
_WINDOW = "window"
_RATES = "rates"


def _list_parts(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """Values and zero-based offsets of a list column, without copying when it
    can (no nulls, one chunk); None when the slow, general path is needed."""
    arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    if arr.null_count or not isinstance(arr, pa.ListArray | pa.LargeListArray):
        return None
    values = arr.values
    if values.null_count:
        return None
    off = np.asarray(arr.offsets.to_numpy(), dtype=np.int64)
    flat = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)[off[0]:off[-1]]
    return flat, off - off[0]


class Chunks:
    """Flattened chunks of a set of requests, ordered by request then time.

    `offsets` (request i's chunks are [offsets[i], offsets[i + 1])) lets the
    metrics find per-request firsts and lasts by binary search instead of
    scanning every chunk; the memo keeps what several metrics of one cell
    share (token positions, first tokens, the window scan), so each is
    computed once. Its keys belong to this module alone: other modules ask
    for the shared values through the functions below.
    """

    __slots__ = ("chunk_ns", "tokens", "cum", "send_ns", "end_ns", "n_requests", "_offsets", "_memo")

    def __init__(self, chunk_ns: np.ndarray, tokens: np.ndarray, cum: np.ndarray,
                 send_ns: np.ndarray, end_ns: np.ndarray, offsets: np.ndarray) -> None:
        self.chunk_ns = chunk_ns  # arrival time per chunk
        self.tokens = tokens  # tokens carried by each chunk (increments)
        self.cum = cum  # cumulative tokens after each chunk
        self.send_ns = send_ns  # per request
        self.end_ns = end_ns  # per request (-1 when unknown)
        self.n_requests = len(offsets) - 1
        self._offsets = offsets
        self._memo: dict[Any, Any] = {}

    @classmethod
    def from_table(cls, requests: pa.Table) -> Chunks:
        n = len(requests)
        if not n:
            return _empty_chunks()
        send = np.asarray(requests.column("send_ns").to_numpy(zero_copy_only=False), dtype=np.int64)
        end = np.asarray(
            pc.fill_null(requests.column("end_ns"), -1).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        chunk_ns_parts = _list_parts(requests.column("chunk_ns"))
        tok_parts = _list_parts(requests.column("chunk_tokens"))
        if chunk_ns_parts is not None and tok_parts is not None and np.array_equal(
                chunk_ns_parts[1], tok_parts[1]):
            chunk_ns, offsets = chunk_ns_parts
            cum = tok_parts[0]
        else:  # nulls somewhere: flatten (null lists hold no chunks)
            chunk_ns_col = requests.column("chunk_ns").combine_chunks()
            tok_col = requests.column("chunk_tokens").combine_chunks()
            chunk_ns = np.asarray(pc.list_flatten(chunk_ns_col).to_numpy(zero_copy_only=False),
                                  dtype=np.int64)
            cum = np.asarray(pc.list_flatten(tok_col).to_numpy(zero_copy_only=False),
                             dtype=np.int64)
            lengths = np.asarray(
                pc.fill_null(pc.list_value_length(chunk_ns_col), 0).to_numpy(zero_copy_only=False),
                dtype=np.int64,
            )
            offsets = np.concatenate(([0], np.cumsum(lengths)))
        return cls(chunk_ns, _increments(cum, offsets), cum, send, end, offsets)

    def starts(self) -> np.ndarray:
        """Chunk offsets of the requests (n_requests + 1 entries)."""
        return self._offsets

    def _memoised(self, key: Any, compute: Callable[[], Any]) -> Any:
        """compute() once per key for this set of chunks (callers must not mutate it)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def subset(self, rows: np.ndarray) -> Chunks:
        """The chunks of the requests at `rows` (ascending), as from_table of those rows
        would give them; a contiguous range costs no copy of the chunk arrays."""
        rows = np.asarray(rows, dtype=np.int64)
        off = self.starts()
        if not len(rows):
            return _empty_chunks()
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        if hi - lo == len(rows):  # contiguous: views
            a, b = int(off[lo]), int(off[hi])
            sub = Chunks(self.chunk_ns[a:b], self.tokens[a:b], self.cum[a:b],
                         self.send_ns[lo:hi], self.end_ns[lo:hi], off[lo:hi + 1] - a)
        else:
            lengths = off[rows + 1] - off[rows]
            sub_off = np.concatenate(([0], np.cumsum(lengths)))
            take = np.repeat(off[rows] - sub_off[:-1], lengths) + np.arange(sub_off[-1])
            sub = Chunks(self.chunk_ns[take], self.tokens[take], self.cum[take],
                         self.send_ns[rows], self.end_ns[rows], sub_off)
        if self._memo.get(_NEGATIVE) is False:  # known for all: known for a part
            sub._memo[_NEGATIVE] = False
        return sub


def _empty_chunks() -> Chunks:
    z = np.zeros(0, dtype=np.int64)
    return Chunks(z, z, z, z, z, np.zeros(1, dtype=np.int64))


def _increments(cum: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Tokens per chunk: the rise of the cumulative count (the first chunk: its count)."""
    tokens = np.empty_like(cum)
    if len(cum):
        tokens[0] = cum[0]
        np.subtract(cum[1:], cum[:-1], out=tokens[1:])
        starts = offsets[:-1][offsets[1:] > offsets[:-1]]
        tokens[starts] = cum[starts]
    return tokens


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


def _first_token(chunks: Chunks) -> np.ndarray:
    """first_token_ns, shared (memoised). A request's first token usually rides
    its first or second chunk (after a 0-token role chunk), so those are
    checked per request; only requests not settled by them are searched."""

    def compute() -> np.ndarray:
        off, tok = chunks.starts(), chunks.tokens
        out = np.full(chunks.n_requests, -1, dtype=np.int64)
        todo = np.arange(chunks.n_requests)
        for step in range(2):
            at = off[:-1][todo] + step
            inside = at < off[1:][todo]
            hit = np.zeros(len(todo), dtype=bool)
            hit[inside] = tok[at[inside]] > 0
            out[todo[hit]] = chunks.chunk_ns[at[hit]]
            todo = todo[~hit & inside]  # requests with no chunk left are settled (-1)
        if len(todo):  # the rest: binary search among the token-carrying chunks
            pos = np.flatnonzero(tok > 0)
            i = np.searchsorted(pos, off[:-1][todo])
            ic = np.minimum(i, max(len(pos) - 1, 0))
            has = (i < len(pos)) & (pos[ic] < off[1:][todo]) if len(pos) else i < 0
            out[todo[has]] = chunks.chunk_ns[pos[ic[has]]]
        return out

    return chunks._memoised(_FIRST_TOKEN, compute)


def has_negative_tokens(chunks: Chunks) -> bool:
    """Whether any chunk's count fell (memoised): binning only the
    token-carrying chunks is exact only when none did."""
    return chunks._memoised(
        _NEGATIVE, lambda: bool(len(chunks.tokens)) and bool(chunks.tokens.min() < 0))


def last_chunk_ns(chunks: Chunks) -> np.ndarray:
    """Per request, the arrival time of its last chunk (-1: no chunk)."""
    off = chunks.starts()
    out = np.full(chunks.n_requests, -1, dtype=np.int64)
    nonempty = off[1:] > off[:-1]
    out[nonempty] = chunks.chunk_ns[off[1:][nonempty] - 1]
    return out


def first_token_ns(chunks: Chunks) -> np.ndarray:
    """Per request, the arrival time of its first token-carrying chunk (-1: none)."""
    return _first_token(chunks).copy()


def first_content(chunk_tokens: Sequence[int | None] | None) -> int | None:
    """Index of one request's first token-carrying chunk (None: none), from its row's
    cumulative counts: `first_token_ns` for code that reads a request at a time (a
    traffic cell's figures on the page and on the terminal). A 0-token role chunk,
    which many servers send first, is never its first content."""
    for i, t in enumerate(chunk_tokens or ()):
        if t and t > 0:
            return i
    return None


def ttft_ms(chunks: Chunks) -> np.ndarray:
    """TTFT of every request that produced a token, in milliseconds."""
    first = _first_token(chunks)
    ok = first >= 0
    return (first[ok] - chunks.send_ns[ok]) / 1e6


@dataclass(frozen=True)
class Window:
    """The in-window token-carrying chunks of a cell, found in one scan and
    shared by the decode metrics and the drill-down (both need them)."""

    output_tokens: int  # tokens of every chunk inside the window
    pos: np.ndarray  # chunk indices of the in-window chunks with tokens > 0
    chunk_ns: np.ndarray  # their arrival times
    tokens: np.ndarray  # their token counts
    lo: np.ndarray  # per request: its first entry in pos (lo == hi: it has none)
    hi: np.ndarray


def window_scan(chunks: Chunks, start_ns: int, end_ns: int) -> Window:
    """The chunks inside [start_ns, end_ns], grouped by request (memoised per window)."""

    def compute() -> Window:
        chunk_ns, tok = chunks.chunk_ns, chunks.tokens
        inwin = np.greater_equal(chunk_ns, start_ns)
        inwin &= np.less_equal(chunk_ns, end_ns)
        has_tok = np.greater(tok, 0)
        has_tok &= inwin
        pos = np.flatnonzero(has_tok)
        tokens = np.take(tok, pos)  # (take: faster than indexing with pos, same values)
        # Chunks without tokens add nothing to the window's output, unless some
        # count fell (a negative increment): then every in-window chunk is summed.
        output = int(tok.sum(where=inwin)) if has_negative_tokens(chunks) else int(tokens.sum())
        off = chunks.starts()
        return Window(output, pos, np.take(chunk_ns, pos), tokens, np.searchsorted(pos, off[:-1]),
                      np.searchsorted(pos, off[1:]))

    return chunks._memoised((_WINDOW, int(start_ns), int(end_ns)), compute)


@dataclass(frozen=True)
class StreamRates:
    """Per request with a token after its first in-window token over a positive
    span: its row, its tok/s and time between tokens (tokens after the first
    in-window token-carrying chunk / the time from it to the last one); and
    every request's tokens inside the window (token-carrying chunks)."""

    rows: np.ndarray
    tok_s: np.ndarray
    tbt_ms: np.ndarray
    window_tokens: np.ndarray
    pooled_tok_s: float | None = None  # all their tokens after the first / all their spans



def stream_rates(chunks: Chunks, start_ns: int, end_ns: int) -> StreamRates:
    """The per-request rates behind the Per request tok/s and Time between
    tokens medians (and every other rank of them: rundir/tails.py); memoised
    per window, since the medians and the tails both need them."""

    def compute() -> StreamRates:
        w = window_scan(chunks, start_ns, end_ns)
        tokens = np.zeros(chunks.n_requests, dtype=np.int64)
        has = w.hi > w.lo
        if not has.any():
            z = np.zeros(0)
            return StreamRates(np.zeros(0, dtype=np.int64), z, z, tokens)
        first, last = w.lo[has], w.hi[has] - 1
        sums = np.add.reduceat(w.tokens, first)
        after_first = sums - w.tokens[first]
        span = (w.chunk_ns[last] - w.chunk_ns[first]).astype(np.float64)
        ok = (span > 0) & (after_first > 0)
        rows = np.flatnonzero(has)
        tokens[rows] = sums
        pooled = float(after_first[ok].sum() / (span[ok].sum() / 1e9)) if ok.any() else None
        return StreamRates(rows[ok], after_first[ok] / (span[ok] / 1e9),
                           (span[ok] / 1e6) / after_first[ok], tokens, pooled)

    return chunks._memoised((_RATES, int(start_ns), int(end_ns)), compute)


@dataclass(frozen=True)
class DecodeMetrics:
    output_tokens: int
    duration_s: float
    total_tok_s: float
    per_request_tok_s: float | None
    tbt_ms: float | None
    ttft_ms: float | None
    completed: int
    avg_active_client: float
    # The streams' rate weighted by how long each was timed (rundir/decode_checks.py's
    # consistency check; the page's per-request figure is the median above).
    pooled_tok_s: float | None = None


def decode_metrics(chunks: Chunks, start_ns: int, end_ns: int, completed_mask: np.ndarray) -> DecodeMetrics:
    """Metrics of one decode cell over its window [start_ns, end_ns].

    completed_mask marks requests that finished normally (not cancelled,
    no error); those whose end falls inside the window count as completed.
    """
    duration_ns = end_ns - start_ns
    if duration_ns <= 0:
        raise ValueError("measurement window must have a positive duration")
    w = window_scan(chunks, start_ns, end_ns)
    stream = stream_rates(chunks, start_ns, end_ns)
    rates, gaps_ms = stream.tok_s, stream.tbt_ms
    ttfts = ttft_ms(chunks)
    ended_in = (chunks.end_ns >= start_ns) & (chunks.end_ns <= end_ns) & completed_mask
    return DecodeMetrics(
        output_tokens=w.output_tokens,
        duration_s=duration_ns / 1e9,
        total_tok_s=w.output_tokens / (duration_ns / 1e9),
        per_request_tok_s=_median(rates),
        tbt_ms=_median(gaps_ms),
        ttft_ms=_median(ttfts),
        completed=int(ended_in.sum()),
        avg_active_client=client_active(chunks, start_ns, end_ns),
        pooled_tok_s=stream.pooled_tok_s,
    )


def client_active(chunks: Chunks, start_ns: int, end_ns: int) -> float:
    """Time-weighted mean over the window of streams that have received a
    first token and not yet ended (the fallback for a server gauge)."""
    first = _first_token(chunks)
    ok = first >= 0
    if not ok.any():
        return 0.0
    stop = np.where(chunks.end_ns >= 0, chunks.end_ns, last_chunk_ns(chunks))
    lo = np.maximum(first[ok], start_ns)
    hi = np.minimum(stop[ok], end_ns)
    overlap = np.clip(hi - lo, 0, None).sum()
    return float(overlap) / float(end_ns - start_ns)


@dataclass(frozen=True)
class PrefillMetrics:
    prompt_tok_s: float | None
    ttft_ms: float | None
    samples: int


def timed_samples(chunks: Chunks, prompt_tokens: np.ndarray) -> np.ndarray:
    """Per request, whether it can be a prefill sample: a first token after its
    send and a known prompt length (the drill-down marks the others)."""
    first = first_token_ns(chunks)
    return (first >= 0) & (prompt_tokens > 0) & (first - chunks.send_ns > 0)


def prefill_metrics(chunks: Chunks, prompt_tokens: np.ndarray) -> PrefillMetrics:
    """Prompt tokens / TTFT of each cold sample; medians of the repeats."""
    ok = timed_samples(chunks, prompt_tokens)
    ttft_ns = (first_token_ns(chunks) - chunks.send_ns)[ok].astype(np.float64)
    rates = prompt_tokens[ok] / (ttft_ns / 1e9)
    return PrefillMetrics(
        prompt_tok_s=_median(rates),
        ttft_ms=_median(ttft_ns / 1e6),
        samples=int(ok.sum()),
    )


def prefill_used(requests: pa.Table, chunks: Chunks, prompt: np.ndarray) -> np.ndarray:
    """The prefill samples the figure uses, on the pages and in the terminal: no
    error (samples rejected as prefix-cache hits, or failed, carry one) and timed.
    The drill-down marks every other sample with this same mask."""
    if not len(requests):
        return np.zeros(0, dtype=bool)
    ok = np.asarray(pc.is_null(requests.column("error")).to_numpy(zero_copy_only=False),
                    dtype=bool)
    return ok & timed_samples(chunks, prompt)
