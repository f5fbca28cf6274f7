"""Checking what a server answers before the collector believes it.

A server's informational endpoints (/v1/models, /tokenize, /props, ...)
are read once and trusted for the whole run: a malformed answer must end
in one line naming the endpoint and the field, or, for an optional fact,
in "unknown" with a note, never in a traceback or a silently wrong number.
Every check here raises `BadAnswer`; the caller decides whether the fact
was required (a `ServerError`) or optional (a note).
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx

from rundir.redact import redact

# Larger integers lose exactness as floats (the metrics code divides them)
# and no server has a context or KV cache anywhere near this.
MAX_INT = 2**53
# Statuses that say "this endpoint does not exist here", not "it is broken".
ABSENT = frozenset({404, 405, 501})


class BadAnswer(ValueError):
    """An endpoint answered something the collector cannot use; one line."""


def show(value: Any, limit: int = 60) -> str:
    """A short, one-line rendering of a received value for a message (a
    server may echo what looks like a credential: redacted)."""
    text = redact(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def transport(exc: BaseException) -> str:
    """One line for a transport failure (timeout, refused, reset), with no
    URL credentials in it."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    detail = redact(detail[:120])
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def body_kind(resp: httpx.Response) -> str:
    """What a non-JSON body looks like, for "expected JSON, got ..."."""
    text = resp.text.strip()
    if not text:
        return "an empty body"
    head = text[:200].lower()
    if head.startswith(("<!doctype html", "<html")) or "<body" in head:
        return "an HTML page"
    return f"non-JSON text {show(text, 40)}"


def status_detail(resp: httpx.Response) -> str:
    """The server's own error message, if its body carries one (short)."""
    try:
        data = resp.json()
    except (ValueError, RecursionError):
        return ""
    err = data.get("error") if isinstance(data, dict) else None
    msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
    if not isinstance(msg, str) or not msg.strip():
        return ""
    return f" ({show(msg.strip(), 100)})"


def json_body(resp: httpx.Response, endpoint: str, kind: type = dict) -> Any:
    """The body as JSON of the expected kind (an object or a list)."""
    want = "a JSON object" if kind is dict else "a JSON list"
    try:
        data = json.loads(resp.content)
    except RecursionError:
        raise BadAnswer(f"{endpoint}: expected {want}, got JSON nested too deeply") from None
    except ValueError:
        raise BadAnswer(f"{endpoint}: expected {want}, got {body_kind(resp)}") from None
    if not isinstance(data, kind):
        raise BadAnswer(f"{endpoint}: expected {want}, got {show(data)}")
    return data


def integer(value: Any, endpoint: str, field: str, minimum: int = 0) -> int:
    """A whole number >= minimum: not a bool, a string, a fraction, NaN,
    infinity or something absurdly large."""
    want = "a positive integer" if minimum == 1 else "a non-negative integer" if minimum == 0 \
        else f"an integer >= {minimum}"
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        ok, value = True, int(value)
    if not ok or not minimum <= value <= MAX_INT:
        raise BadAnswer(f"{endpoint}: field {field}: expected {want}, got {show(value)}")
    return value


def digits(value: Any, endpoint: str, field: str, minimum: int = 1) -> int:
    """A whole number written as ASCII digits (a Prometheus label value)."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        raise BadAnswer(f"{endpoint}: field {field}: expected a positive integer, got {show(value)}")
    return integer(int(value), endpoint, field, minimum)


def text(value: Any, endpoint: str, field: str, limit: int = 200) -> str:
    """A short, printable, non-empty string (a version, an id)."""
    if not isinstance(value, str) or not value.strip() or len(value) > limit \
            or not value.isprintable():
        raise BadAnswer(f"{endpoint}: field {field}: expected a non-empty printable string "
                        f"of at most {limit} characters, got {show(value)}")
    return value
