"""Turning a stream's raw SSE payloads into chunk records (pure).

A chunk's token count is the increase of the server's cumulative
`usage.completion_tokens` (continuous usage stats). Where the server does
not send it per chunk, each chunk that carries text counts one token: the
method used is returned so the cell can record it, and the server's final
usage total is kept so a mismatch is visible, never hidden. Such a stream
also keeps its whole text, so that the cell can have the server tokenize it
once the window is over (bench.measure.cells) when no usage confirms the count.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass

import numpy as np

from rundir.contract import COUNT_CHUNKS, COUNT_USAGE_CONTINUOUS

TAIL_CHARS = 2048


@dataclass(eq=False)
class ParsedStream:
    chunk_ns: np.ndarray  # int64; a list where a caller built one by hand
    chunk_tokens: np.ndarray  # int64, cumulative
    counting: str
    content: str
    reasoning: str
    finish_reason: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    final_usage_tokens: int | None  # completion_tokens of the last usage seen
    error: str | None
    # reasoning + content in full, only for streams counted by chunks (to be tokenized)
    text: str | None = None
    max_tokens: int | None = None  # as the request asked
    # llama.cpp's `timings` (its final event): prompt tokens it took from its cache
    # (cache_n) and the ones it computed (prompt_n); None where the server sends none
    engine_cached_tokens: int | None = None
    engine_computed_tokens: int | None = None
    # llama.cpp's `timings.draft_n` / `draft_n_accepted` (speculative decoding): draft
    # tokens it proposed and the ones it accepted; None where the server sends none
    engine_draft_tokens: int | None = None
    engine_draft_accepted: int | None = None


INCONSISTENT_COUNTS = "the server reported inconsistent token counts"


class StreamParser:
    """Parses a stream's events a slice at a time, so a caller on the event
    loop can yield between slices (a 4,096-event stream takes 10-30 ms).

    The server's cumulative completion count is checked as it comes: it must
    be a whole number that never decreases and never exceeds the request's
    `max_tokens`. A count that goes backwards or jumps would turn straight
    into a wrong published rate, so it fails the stream like a malformed event.
    """

    def __init__(self, max_tokens: int | None = None) -> None:
        self.max_tokens = max_tokens
        self.last_cum = 0
        # Compact while the stream runs (bench/measure/liveparse.py parses long ones as
        # they come), and after as int64 arrays: 17 and 16 bytes an event,
        # where lists of ints held about 110 and 76.
        self.chunk_ns = array("q")
        self.usage_cum = array("q")  # -1: the event carried no usage count
        self.has_text = bytearray()
        self.content = _Text()
        self.reasoning = _Text()
        self.finish: str | None = None
        self.prompt: int | None = None
        self.cached: int | None = None
        self.final_usage: int | None = None
        self.timings: tuple[int, int] | None = None  # llama.cpp's (cache_n, prompt_n)
        self.drafts: tuple[int, int] | None = None  # llama.cpp's (draft_n, draft_n_accepted)
        self.error: str | None = None

    def feed(self, chunks: list[tuple[int, bytes]]) -> bool:
        """Parse the next (chunk_ns, data) events; False once an error has ended the stream."""
        if self.error is not None:
            return False
        for chunk_ns, payload in chunks:
            try:
                obj = json.loads(payload)
            except ValueError:
                self.error = f"malformed SSE event: {payload[:80].decode('utf-8', 'replace')!r}"
                return False
            if not isinstance(obj, dict):
                self.error = "malformed SSE event: not a JSON object"
                return False
            try:
                problem, cum, text = self._event(obj)
            except (AttributeError, TypeError):  # a field of the wrong type: .get on a str, ...
                shown = payload[:80].decode("utf-8", "replace")
                problem = f"malformed SSE event: unexpected shape {shown!r}"
            if problem:
                self.error = problem
                return False
            self.chunk_ns.append(chunk_ns)
            self.usage_cum.append(-1 if cum is None else cum)
            self.has_text.append(text)
        return True

    def _event(self, obj: dict) -> tuple[str | None, int | None, bool]:
        """(problem, cumulative count, carries text) of one parsed event. A field
        of the wrong type raises AttributeError or TypeError (checked where it is
        read, so a well-formed stream pays for one pass, not two)."""
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            return f"server error mid-stream: {msg}", None, False
        usage = obj.get("usage") or None
        if "timings" in obj:  # llama-server: its own count of the prompt it found cached
            problem = self._timings(obj["timings"])
            if problem:
                return problem, None, False
        text = False
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if piece is None and "text" in choice:  # /v1/completions
                piece = choice.get("text")
            think = delta.get("reasoning_content") or delta.get("reasoning")
            if piece:
                if piece.__class__ is not str:
                    raise TypeError("content")
                self.content.append(piece)
                text = True
            if think:
                if think.__class__ is not str:
                    raise TypeError("reasoning")
                self.reasoning.append(think)
                text = True
            finish = choice.get("finish_reason")
            if finish:
                if finish.__class__ is not str:
                    raise TypeError("finish_reason")
                self.finish = finish
        if not usage:
            return None, None, text
        cum = usage.get("completion_tokens")
        if cum is not None:
            if (cum.__class__ is not int or cum < self.last_cum or cum >= 2**63
                    or (self.max_tokens is not None and cum > self.max_tokens)):
                return self._count_problem(cum), None, text
            self.last_cum = cum
        self.final_usage = cum
        prompt = usage.get("prompt_tokens")
        if prompt is not None and prompt != self.prompt:  # the same in every chunk, usually
            if not _is_count(prompt):
                return f"{INCONSISTENT_COUNTS}: prompt_tokens {prompt!r} is not a count", None, text
            self.prompt = prompt
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None and cached != self.cached:
            if not _is_count(cached):
                return f"{INCONSISTENT_COUNTS}: cached_tokens {cached!r} is not a count", None, text
            self.cached = cached
        return None, cum, text

    def _timings(self, timings: object) -> str | None:
        """Read llama.cpp's `timings.cache_n` / `prompt_n` (both, or neither: a
        server that sends only timing figures)."""
        if isinstance(timings, dict) and "draft_n" in timings and "draft_n_accepted" in timings:
            draft_n, accepted = timings["draft_n"], timings["draft_n_accepted"]
            if not _is_count(draft_n) or not _is_count(accepted):
                return (f"{INCONSISTENT_COUNTS}: timings.draft_n {draft_n!r} / draft_n_accepted "
                        f"{accepted!r} are not counts")
            self.drafts = (draft_n, accepted)
        if not isinstance(timings, dict) or "cache_n" not in timings or "prompt_n" not in timings:
            return None
        cache_n, prompt_n = timings["cache_n"], timings["prompt_n"]
        if not _is_count(cache_n) or not _is_count(prompt_n):
            return (f"{INCONSISTENT_COUNTS}: timings.cache_n {cache_n!r} / prompt_n {prompt_n!r} "
                    "are not counts")
        self.timings = (cache_n, prompt_n)
        return None

    def _count_problem(self, cum: object) -> str | None:
        if not _is_count(cum):
            return f"{INCONSISTENT_COUNTS}: completion_tokens {cum!r} is not a count"
        if cum < self.last_cum:
            return f"{INCONSISTENT_COUNTS}: completion_tokens fell from {self.last_cum} to {cum}"
        if self.max_tokens is not None and cum > self.max_tokens:
            return (f"{INCONSISTENT_COUNTS}: completion_tokens {cum} exceeds "
                    f"max_tokens {self.max_tokens}")
        return None

    def result(self) -> ParsedStream:
        usage = np.frombuffer(self.usage_cum, dtype=np.int64)
        text = np.frombuffer(self.has_text, dtype=np.uint8).astype(bool)
        continuous = bool(text.any()) and bool((usage[text] >= 0).all())
        if continuous:
            # counts never fall (checked as they come): the last one seen so far
            cumulative = np.maximum.accumulate(np.maximum(usage, 0))
            counting = COUNT_USAGE_CONTINUOUS
        else:
            cumulative = np.cumsum(text, dtype=np.int64)
            counting = COUNT_CHUNKS
        content, reasoning = self.content.text(), self.reasoning.text()
        return ParsedStream(
            chunk_ns=np.array(self.chunk_ns, dtype=np.int64),
            chunk_tokens=cumulative,
            counting=counting,
            content=content[-TAIL_CHARS:],
            reasoning=reasoning[-TAIL_CHARS:],
            finish_reason=self.finish,
            prompt_tokens=self.prompt,
            cached_tokens=self.cached,
            final_usage_tokens=self.final_usage,
            error=self.error,
            text=None if continuous else reasoning + content,
            max_tokens=self.max_tokens,
            engine_cached_tokens=self.timings[0] if self.timings else None,
            engine_computed_tokens=self.timings[1] if self.timings else None,
            engine_draft_tokens=self.drafts[0] if self.drafts else None,
            engine_draft_accepted=self.drafts[1] if self.drafts else None,
        )


class _Text:
    """A stream's text pieces, joined in blocks as they come (a piece held as
    its own str costs about 55 bytes for a 5-character token)."""

    BLOCK = 512

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.pieces: list[str] = []

    def append(self, piece: str) -> None:
        self.pieces.append(piece)
        if len(self.pieces) >= self.BLOCK:
            self.blocks.append("".join(self.pieces))
            self.pieces.clear()

    def text(self) -> str:
        return "".join(self.blocks) + "".join(self.pieces)


def _is_count(value: object) -> bool:
    """A whole, non-negative number that fits the contract's int64 columns."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def parse_events(chunks: list[tuple[int, bytes]], max_tokens: int | None = None) -> ParsedStream:
    """A whole stream's events at once into cumulative counts (the collector
    feeds a `StreamParser` in slices instead, and hands its result on)."""
    parser = StreamParser(max_tokens)
    parser.feed(chunks)
    return parser.result()
