"""Turning a stream's raw SSE payloads into chunk records (pure).

A chunk's token count is the increase of the server's cumulative
`usage.completion_tokens` (continuous usage stats). Where the server does
not send it per chunk, each chunk that carries text counts one token: the
method used is returned so the cell can record it, and the server's final
usage total is kept so a mismatch is visible, never hidden.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rundir.contract import COUNT_CHUNKS, COUNT_USAGE_CONTINUOUS

TAIL_CHARS = 2048


@dataclass
class ParsedStream:
    chunk_ns: list[int]
    chunk_tokens: list[int]  # cumulative
    counting: str
    content: str
    reasoning: str
    finish_reason: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    final_usage_tokens: int | None  # completion_tokens of the last usage seen
    error: str | None


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
        self.stamps: list[int] = []
        self.usage_cum: list[int | None] = []
        self.has_text: list[bool] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.finish: str | None = None
        self.prompt: int | None = None
        self.cached: int | None = None
        self.final_usage: int | None = None
        self.error: str | None = None

    def feed(self, events: list[tuple[int, bytes]]) -> bool:
        """Parse the next events; False once an error has ended the stream."""
        if self.error is not None:
            return False
        for ns, payload in events:
            try:
                obj = json.loads(payload)
            except ValueError:
                self.error = f"malformed SSE event: {payload[:80].decode('utf-8', 'replace')!r}"
                return False
            if not isinstance(obj, dict):
                self.error = "malformed SSE event: not a JSON object"
                return False
            if not self._shape_ok(obj):
                shown = payload[:80].decode("utf-8", "replace")
                self.error = f"malformed SSE event: unexpected shape {shown!r}"
                return False
            if "error" in obj and not obj.get("choices"):
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                self.error = f"server error mid-stream: {msg}"
                return False
            usage = obj.get("usage") or None
            text = False
            for choice in obj.get("choices") or ():
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                if piece is None and "text" in choice:  # /v1/completions
                    piece = choice.get("text")
                think = delta.get("reasoning_content") or delta.get("reasoning")
                if piece:
                    self.content.append(piece)
                    text = True
                if think:
                    self.reasoning.append(think)
                    text = True
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]
            cum = None
            if usage:
                cum = usage.get("completion_tokens")
                if cum is not None:
                    self.error = self._count_problem(cum)
                    if self.error:
                        return False
                    self.last_cum = cum
                self.final_usage = cum
                details = usage.get("prompt_tokens_details") or {}
                for name, value in (("prompt_tokens", usage.get("prompt_tokens")),
                                    ("cached_tokens", details.get("cached_tokens"))):
                    if value is not None and not _is_count(value):
                        self.error = f"{INCONSISTENT_COUNTS}: {name} {value!r} is not a count"
                        return False
                if usage.get("prompt_tokens") is not None:
                    self.prompt = usage["prompt_tokens"]
                if details.get("cached_tokens") is not None:
                    self.cached = details["cached_tokens"]
            self.stamps.append(ns)
            self.usage_cum.append(cum)
            self.has_text.append(text)
        return True

    @staticmethod
    def _shape_ok(obj: dict) -> bool:
        """The fields we read have the types the OpenAI stream format gives them."""
        usage, choices = obj.get("usage"), obj.get("choices")
        if usage is not None and not isinstance(usage, dict):
            return False
        if usage and not isinstance(usage.get("prompt_tokens_details") or {}, dict):
            return False
        if choices is None:
            return True
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            return False
        text_ok = (str, type(None))
        for c in choices:
            delta = c.get("delta")
            if delta is not None and not isinstance(delta, dict):
                return False
            delta = delta or {}
            if not all(isinstance(v, text_ok) for v in (
                    delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning"),
                    c.get("text"), c.get("finish_reason"))):
                return False
        return True

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
        text_chunks = [u for u, t in zip(self.usage_cum, self.has_text, strict=True) if t]
        continuous = bool(text_chunks) and all(u is not None for u in text_chunks)
        cumulative: list[int] = []
        running = 0
        if continuous:
            for u in self.usage_cum:
                running = u if u is not None else running
                cumulative.append(running)
            counting = COUNT_USAGE_CONTINUOUS
        else:
            for t in self.has_text:
                running += 1 if t else 0
                cumulative.append(running)
            counting = COUNT_CHUNKS
        return ParsedStream(
            chunk_ns=self.stamps,
            chunk_tokens=cumulative,
            counting=counting,
            content="".join(self.content)[-TAIL_CHARS:],
            reasoning="".join(self.reasoning)[-TAIL_CHARS:],
            finish_reason=self.finish,
            prompt_tokens=self.prompt,
            cached_tokens=self.cached,
            final_usage_tokens=self.final_usage,
            error=self.error,
        )


def _is_count(value: object) -> bool:
    """A whole, non-negative number that fits the contract's int64 columns."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def parse_events(events: list[tuple[int, bytes]], max_tokens: int | None = None) -> ParsedStream:
    """Decode OpenAI chat/completions stream chunks into cumulative counts."""
    parser = StreamParser(max_tokens)
    parser.feed(events)
    return parser.result()
