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


def parse_events(events: list[tuple[int, bytes]]) -> ParsedStream:
    """Decode OpenAI chat/completions stream chunks into cumulative counts."""
    stamps: list[int] = []
    usage_cum: list[int | None] = []
    has_text: list[bool] = []
    content: list[str] = []
    reasoning: list[str] = []
    finish = prompt = cached = final_usage = None
    error = None
    for ns, payload in events:
        try:
            obj = json.loads(payload)
        except ValueError:
            error = f"malformed SSE event: {payload[:80].decode('utf-8', 'replace')!r}"
            break
        if not isinstance(obj, dict):
            error = "malformed SSE event: not a JSON object"
            break
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            error = f"server error mid-stream: {msg}"
            break
        usage = obj.get("usage") or None
        text = False
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if piece is None and "text" in choice:  # /v1/completions
                piece = choice.get("text")
            think = delta.get("reasoning_content") or delta.get("reasoning")
            if piece:
                content.append(piece)
                text = True
            if think:
                reasoning.append(think)
                text = True
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
        cum = None
        if usage:
            cum = usage.get("completion_tokens")
            final_usage = cum
            if usage.get("prompt_tokens") is not None:
                prompt = usage["prompt_tokens"]
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                cached = details["cached_tokens"]
        stamps.append(ns)
        usage_cum.append(cum)
        has_text.append(text)
    text_chunks = [u for u, t in zip(usage_cum, has_text, strict=True) if t]
    continuous = bool(text_chunks) and all(u is not None for u in text_chunks)
    cumulative: list[int] = []
    if continuous:
        running = 0
        for u in usage_cum:
            running = u if u is not None else running
            cumulative.append(running)
        counting = COUNT_USAGE_CONTINUOUS
    else:
        running = 0
        for t in has_text:
            running += 1 if t else 0
            cumulative.append(running)
        counting = COUNT_CHUNKS
    return ParsedStream(
        chunk_ns=stamps,
        chunk_tokens=cumulative,
        counting=counting,
        content="".join(content)[-TAIL_CHARS:],
        reasoning="".join(reasoning)[-TAIL_CHARS:],
        finish_reason=finish,
        prompt_tokens=prompt,
        cached_tokens=cached,
        final_usage_tokens=final_usage,
        error=error,
    )
