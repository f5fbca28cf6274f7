"""What kind of server is at the URL, and what it can tell us.

Each engine names the same facts differently (max model length, KV budget,
running/waiting gauges, version, tokenizer); its `EngineProfile`
(bench.server.engine_profiles) says how. `probe_server` asks, in a few GET
requests, and returns one `ServerInfo` the rest of the collector uses
without caring which engine it was. Every answer is checked (bench.server.answers):
a required fact (the model id) that is missing or malformed is a one-line
`ServerError`; an optional one (max model length, KV budget, version) is
left unknown with a note in `ServerInfo.notes`, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from bench.core.auth import bearer_header
from bench.server.answers import BadAnswer, integer, json_body, show, status_detail, text, transport
from bench.server.engine_profiles import detect, owned_profile
from bench.server.prometheus_text import parse_metrics
from bench.server.server_info import (
    NOT_READY_STATUSES,
    Probe,
    ServerError,
    ServerInfo,
    ServerNotReady,
    key_refused,
    public_url,
)
from rundir.contract import METRIC_RUNNING

__all__ = ["NOT_READY_STATUSES", "ServerError", "ServerInfo", "ServerNotReady", "probe_server",
           "public_url"]


def _models(client: httpx.Client, root: str) -> list[dict]:
    """/v1/models: the required list of served models, each with an id."""
    path = "/v1/models"
    try:
        resp = client.get(path)
    except httpx.HTTPError as exc:
        raise ServerNotReady(
            f"no server answers at {public_url(root)}{path} ({transport(exc)}); "
            "is it running, and is --base-url right?", transport(exc),
        ) from None
    if resp.status_code in (401, 403):
        raise key_refused(path, resp.status_code)
    if resp.status_code in NOT_READY_STATUSES:
        said = f"HTTP {resp.status_code}{status_detail(resp)}"
        raise ServerNotReady(f"{path}: answered {said}: the server is not ready", said)
    if resp.status_code != 200:
        raise ServerError(
            f"{path}: answered HTTP {resp.status_code}{status_detail(resp)}, expected 200 with "
            "a model list: not an OpenAI-compatible server, or not ready yet?"
        )
    try:
        body = json_body(resp, path)
        entries = body.get("data")
        if not isinstance(entries, list) or not entries:
            raise BadAnswer(f"{path}: field data: expected a non-empty list of models, "
                            f"got {show(entries)}")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise BadAnswer(f"{path}: field data[{i}]: expected a model object with an id, "
                                f"got {show(entry)}")
            text(entry.get("id"), path, f"data[{i}].id", limit=1000)
    except BadAnswer as exc:
        raise ServerError(str(exc)) from None
    return entries


def _served(entries: list[dict], model: str | None) -> dict:
    """The /v1/models entry to benchmark: `model`'s, else the first."""
    if not model:
        return entries[0]
    matches = [e for e in entries if e["id"] == model]
    if not matches:
        ids = ", ".join(show(e["id"], 80) for e in entries[:20])
        raise ServerError(f"--model: {model!r} is not served here (served: {ids})")
    return matches[0]


def probe_server(base_url: str, api_key: str | None, model: str | None = None,
                 timeout_s: float = 10.0) -> ServerInfo:
    """Detect the engine and read what it reports about itself. Raises only
    ServerError (one line) for a server that cannot be benchmarked; optional
    facts it answers malformed are left unknown with a note in `notes`."""
    base_url = base_url.rstrip("/")
    root = base_url[:-3] if base_url.endswith("/v1") else base_url
    with httpx.Client(base_url=root, headers=bearer_header(api_key), timeout=timeout_s) as client:
        entry = _served(_models(client, root), model)
        owner = entry.get("owned_by")
        owner = owner.lower() if isinstance(owner, str) else ""
        info = ServerInfo(base_url=root, engine="openai", model=entry["id"])
        probe = Probe(client, info, api_key)
        if entry.get("max_model_len") is not None:
            info.max_model_len = probe.optional(lambda: integer(
                entry["max_model_len"], "/v1/models", "max_model_len", 1), "max model length")
        metrics_text = None
        metrics_resp = probe.get("/metrics", "server gauges")
        if metrics_resp is not None:
            metrics_text = metrics_resp.text
        named = owned_profile(owner)
        props = None  # /props names llama-server; not asked where owned_by names another engine
        if named is None or named.props_key:
            props = probe.json("/props", "llama.cpp settings")
        profile = detect(owner, metrics_text, props)
        info.engine = profile.name
        info.tokenize = profile.tokenize.name if profile.tokenize else None
        if profile.facts is not None:
            profile.facts(probe, metrics_text, props or {})
        if metrics_text:
            _read_gauges(probe, metrics_text, profile.gauges)
            present = {s.name for s in parse_metrics(metrics_text, wanted=profile.spec_counters.values())}
            info.spec_counters = {k: v for k, v in profile.spec_counters.items() if v in present}
    return info


def _read_gauges(probe: Probe, metrics_text: str, known: Mapping[str, str]) -> None:
    """Which of the engine's gauges this /metrics page has (the sampler reads those)."""
    info = probe.info
    present = {s.name for s in parse_metrics(metrics_text)}
    info.gauges = {k: v for k, v in known.items() if v in present}
    info.has_metrics = bool(info.gauges)
    if known and not info.gauges:
        probe.note(f"/metrics: answered without any {info.engine} gauge "
                   f"(expected e.g. {known[METRIC_RUNNING]}); server gauges unknown")
