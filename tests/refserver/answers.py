"""Adversarial answers of the reference server's non-streaming endpoints.

`Scenario.endpoint_answers` maps a path to what that path answers instead of
its real answer, whatever the method (so POST /tokenize too):

    {"/v1/models": {"status": 200, "body": "{\"data\":[\"x\"]}"}}

An answer's keys: `status` (default 200), `body` (raw text, default empty,
so non-JSON and HTML are possible), `content_type` (default JSON),
`delay_s` (answer this much later, without blocking the event loop),
`reset` (true: reset the connection instead of answering), `close` (true:
close it without a word). `Scenario.metrics_delay_s` delays the real
/metrics answer the same way (a slow exporter under load).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

ANSWER_KEYS = frozenset({"status", "body", "content_type", "delay_s", "reset", "close"})
JSON = "application/json"


def check(answers: dict[str, Any] | None, metrics_delay_s: float) -> str | None:
    """What is wrong with the scenario's fields, or None."""
    if metrics_delay_s < 0:
        return "metrics_delay_s must be >= 0"
    for path, answer in (answers or {}).items():
        if not path.startswith("/") or not isinstance(answer, dict):
            return f"endpoint_answers: {path!r} must be a path mapped to an object"
        if set(answer) - ANSWER_KEYS:
            return f"endpoint_answers[{path!r}]: keys must be among {sorted(ANSWER_KEYS)}"
        if not isinstance(answer.get("body", ""), str) or answer.get("delay_s", 0) < 0:
            return f"endpoint_answers[{path!r}]: body must be text and delay_s >= 0"
    return None


def override(conn: Any, path: str, answers: dict[str, Any] | None, metrics_delay_s: float,
             real: Callable[[], tuple[Any, str]] | None) -> bool:
    """Answer `path` on `conn` as the scenario says; False if it says nothing
    (the server answers normally). `real` gives the real answer, for a delay."""
    answer = (answers or {}).get(path)
    delay = float(answer.get("delay_s", 0)) if answer is not None else 0.0
    if answer is None and path == "/metrics" and metrics_delay_s > 0 and real is not None:
        delay = metrics_delay_s
    if answer is None and not delay:
        return False

    def respond() -> None:
        if conn.closed:
            return
        if answer is None:
            conn.respond(200, *real())  # the gauges as they are when it answers
        elif answer.get("reset"):
            conn.abort()
        elif answer.get("close"):
            conn.transport.close()
        else:
            conn.respond(int(answer.get("status", 200)), str(answer.get("body", "")).encode(),
                         answer.get("content_type", JSON))

    if delay > 0:
        asyncio.get_running_loop().call_later(delay, respond)
    else:
        respond()
    return True
