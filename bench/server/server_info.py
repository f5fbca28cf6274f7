"""What the collector knows about the server at the URL, and how it asks.

`ServerInfo` is the one record the rest of the collector reads, whichever
engine answered; `Probe` is the probe's HTTP client with the rule for
optional facts (a missing or malformed one is left unknown with a note,
never guessed). Both sit below `bench.server.engines` (the probe's order) and
`bench.server.engine_profiles` (what each engine is asked), so neither imports
the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.server.answers import ABSENT, BadAnswer, json_body, transport
from rundir.redact import redact


class ServerError(RuntimeError):
    """The server cannot be benchmarked; the message is one line for the user."""


class ServerNotReady(ServerError):
    """Nothing answers yet, or the server says it is not ready (HTTP 502/503/504:
    llama-server answers 503 "Loading model" until its model is loaded; a proxy
    in front of a starting server answers 502 or 504). Worth waiting for;
    `waiting_for` says what, in a few words."""

    def __init__(self, message: str, waiting_for: str) -> None:
        super().__init__(message)
        self.waiting_for = waiting_for


NOT_READY_STATUSES = (502, 503, 504)


@dataclass
class ServerInfo:
    base_url: str
    engine: str  # an EngineProfile name: "vllm", "sglang", "llama.cpp" or "openai"
    model: str
    version: str | None = None
    commit: str | None = None
    max_model_len: int | None = None
    kv_budget: int | None = None
    kv_budget_source: str | None = None
    slots: int | None = None
    has_metrics: bool = False
    gauges: dict[str, str] = field(default_factory=dict)
    # The engine's speculative-decoding counters its /metrics had when probed (canonical ->
    # its name; EngineProfile.spec_counters): read around each decode cell; empty: none.
    spec_counters: dict[str, str] = field(default_factory=dict)
    tokenize: str | None = None  # a TokenizeDialect name ("vllm", "sglang", "llama.cpp"), if any
    backend: str | None = None
    # The prefix cache's block in tokens, where the engine tells it (vLLM's block_size,
    # SGLang's page_size); see engine_profiles.cache_block for the value a cell uses.
    cache_block_size: int | None = None
    # Optional facts the server answered malformed, each "endpoint: problem; X unknown".
    notes: list[str] = field(default_factory=list)


def key_refused(path: str, status: int) -> ServerError:
    return ServerError(
        f"{path} answered HTTP {status}: the API key is wrong or missing "
        "(pass --api-key or set OPENAI_API_KEY)"
    )


def public_url(url: str) -> str:
    """The URL without user:password, for messages."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "the --base-url"
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url


class Probe:
    """The probe's HTTP client plus the notes it gathers on optional facts."""

    def __init__(self, client: httpx.Client, info: ServerInfo, api_key: str | None) -> None:
        self.client, self.info = client, info
        self.secrets = [api_key] if api_key else []

    def note(self, text: str) -> None:
        self.info.notes.append(redact(text, self.secrets))  # it may quote the server

    def get(self, path: str, unknown: str) -> httpx.Response | None:
        """An optional endpoint's 200 answer, or None: absent (404) silently,
        anything else with a note saying what is therefore unknown."""
        try:
            resp = self.client.get(path)
        except httpx.HTTPError as exc:
            self.note(f"{path}: no answer ({transport(exc)}); {unknown} unknown")
            return None
        if resp.status_code == 401:  # a 403 may be a gateway hiding /metrics: noted below
            raise key_refused(path, resp.status_code)
        if resp.status_code == 200:
            return resp
        if resp.status_code not in ABSENT:
            self.note(f"{path}: answered HTTP {resp.status_code}; {unknown} unknown")
        return None

    def json(self, path: str, unknown: str, kind: type = dict) -> Any:
        resp = self.get(path, unknown)
        if resp is None:
            return None
        try:
            return json_body(resp, path, kind)
        except BadAnswer as exc:
            self.note(f"{exc}; {unknown} unknown")
            return None

    def optional(self, check: Callable[[], Any], unknown: str) -> Any:
        """The checked value of an optional fact, or None with a note."""
        try:
            return check()
        except BadAnswer as exc:
            self.note(f"{exc}; {unknown} unknown")
            return None
