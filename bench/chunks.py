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


class StreamParser:
    """Parses a stream's events a slice at a time, so a caller on the event
    loop can yield between slices (a 4,096-event stream takes 10-30 ms)."""

    def __init__(self) -> None:
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
                self.final_usage = cum
                if usage.get("prompt_tokens") is not None:
                    self.prompt = usage["prompt_tokens"]
                details = usage.get("prompt_tokens_details") or {}
                if details.get("cached_tokens") is not None:
                    self.cached = details["cached_tokens"]
            self.stamps.append(ns)
            self.usage_cum.append(cum)
            self.has_text.append(text)
        return True

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


def parse_events(events: list[tuple[int, bytes]]) -> ParsedStream:
    """Decode OpenAI chat/completions stream chunks into cumulative counts."""
    parser = StreamParser()
    parser.feed(events)
    return parser.result()
