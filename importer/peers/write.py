"""PeerRun -> run directory, at the tier its format allows (issue 36).

Why one writer for every peer format: what a run directory holds, the window
our figures are computed over (rundir/plateau.py), how tokens are counted
where the format kept no per-chunk counts, and which checks can run are
decided once, from the tier, so every tool's import means the same thing.
The run is written through importer/write.py's ``write_run_dir``: whole or
not at all, and a file imported again names the run already there.

Decisions (docs/methodology.md, "Imported runs from other tools"):

* One cell: phase decode at the tool's fixed concurrency, or phase rate at
  its offered rate (cap: its concurrency, 0 none). Its context is the
  configured input length, else the median prompt tokens (notes say which).
* Tokens where the format has no per-chunk counts: ONE rule. A request whose
  tool total equals its chunk count is one token per chunk (the total
  confirms it); otherwise the total is spread over its chunks, the k-th of n
  chunks ending at ceil(total * k / n), and the cell is marked
  ``peer_total_spread`` (never Valid). No total at all: one per chunk,
  ``chunks_unverified`` (never Valid).
* Tier request: each row holds two stamps, the first token (count 1) and the
  last (the total), and the cell ``peer_request_totals``: the builder
  publishes TTFT, completions and latency from them, never a time between
  tokens or a windowed rate.
* ``pub_*``: only figures that mean what ours mean whatever the tool
  (median TTFT, completed requests, output tokens); everything the tool
  published is kept in run.yaml's ``imported.published``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from importer.peers.model import (
    TIER_AGGREGATE,
    TIER_CHUNK,
    TIER_GAP,
    TIER_REQUEST,
    PeerFormatError,
    PeerRequest,
    PeerRun,
)
from importer.peers.setup import DeclaredSetup
from importer.peers.validate import validate
from importer.write import ImportResult, write_run_dir
from rundir import contract, crosscheck
from rundir.contract import (
    CELLS_SCHEMA,
    REQUESTS_FILE,
    REQUESTS_SCHEMA,
    SCHEMA_VERSION,
    SOURCE_IMPORTED,
    Definition,
    Engine,
    Hardware,
    Imported,
    Model,
    Parameters,
    PublishedFigure,
    RunInfo,
)
from rundir.decode_checks import counting_problem, decode_problems
from rundir.metrics import Chunks, decode_metrics
from rundir.plateau import Plateau, plateau
from rundir.redact import redact, redact_tree
from rundir.slugs import slugify

# Every request sent at one stamp: the format keeps each request's stamps relative to its
# own send (SGLang's bench_serving), so no in-flight count, window, slot or rate exists.
NO_SHARED_CLOCK = ("no window: the file's stamps share no clock (each request's are relative to its "
                   "own send), so in-flight counts, the steady window and rates cannot be computed; "
                   "its per-request figures are on the comparison page")
# The held share under which the notes say the plateau dipped.
HELD_NOTE_SHARE = 0.9
_COUNT_RANK = (contract.COUNT_PEER_CHUNKS, contract.COUNT_PEER_CHUNKS_TOTAL,
               contract.COUNT_CHUNKS_UNVERIFIED, contract.COUNT_PEER_SPREAD)


def chunk_stamps(send_ns: int, ttft_ns: int, gaps_ns: Sequence[int]) -> tuple[int, ...]:
    """A gap-tier request's chunk arrivals rebuilt: send + TTFT, then each gap added.

    For readers of formats that keep only TTFT and the gaps between chunks
    (integers in, integers out: the sums are exact)."""
    out = [int(send_ns) + int(ttft_ns)]
    for gap in gaps_ns:
        out.append(out[-1] + int(gap))
    return tuple(out)


def cumulative_tokens(req: PeerRequest, tier: str) -> tuple[tuple[int, ...], str]:
    """(cumulative tokens per chunk, how they were counted): the module's one rule."""
    n, total = len(req.chunk_ns), req.output_tokens
    if tier == TIER_REQUEST:
        if n == 0:
            return (), contract.COUNT_PEER_REQUEST
        if total is None:
            raise PeerFormatError("a request-tier request without its output token count",
                                  line=req.line, field="output_tokens")
        if n == 1:
            return (int(total),), contract.COUNT_PEER_REQUEST
        return (1, max(int(total), 1)), contract.COUNT_PEER_REQUEST
    if req.chunk_tokens is not None:
        return tuple(int(t) for t in req.chunk_tokens), contract.COUNT_PEER_CHUNKS
    if total is None:
        return tuple(range(1, n + 1)), contract.COUNT_CHUNKS_UNVERIFIED
    if total == n:
        return tuple(range(1, n + 1)), contract.COUNT_PEER_CHUNKS_TOTAL
    return tuple(-(-int(total) * k // n) for k in range(1, n + 1)), contract.COUNT_PEER_SPREAD


def _context(run: PeerRun) -> tuple[int, str]:
    if run.input_tokens:
        return int(run.input_tokens), "the tool's configured input length"
    prompts = [r.prompt_tokens for r in run.requests if r.prompt_tokens]
    if prompts:
        return max(1, int(np.median(prompts))), f"the median prompt tokens of its {len(prompts)} requests"
    raise PeerFormatError("neither a configured input length nor any request's prompt tokens: "
                          "no context to file the run under (pass --input-tokens N)", field="prompt_tokens")


def _slots(sends: list[int], ends: list[int]) -> list[int]:
    """Each request's slot: the lowest one free when it was sent (a closed loop's stream)."""
    order = sorted(range(len(sends)), key=lambda i: sends[i])
    busy: dict[int, int] = {}  # slot -> end
    out = [0] * len(sends)
    for i in order:
        free = [s for s, e in busy.items() if e <= sends[i]]
        slot = min(free) if free else len(busy)
        busy[slot] = ends[i]
        out[i] = slot
    return out


def _phase(run: PeerRun) -> str:
    if run.rate is None and run.concurrency:
        return contract.DECODE
    if run.rate is not None:
        return contract.RATE
    raise PeerFormatError("neither a fixed concurrency nor a request rate: no load to file the run "
                          "under", field="concurrency")


def _load_slug(run: PeerRun) -> str:
    return f"r{run.rate:g}" if run.rate is not None else f"c{run.concurrency}"


def run_id_for(run: PeerRun, sha256: str) -> str:
    """``aiperf-tiny-c4-1a2b3c4d``: the tool, the model and load, then the file's sha256."""
    slug = slugify("-".join(p for p in (run.tool, run.model, _load_slug(run)) if p), "peer", max_len=72)
    return f"{slug}-{sha256[:8]}"


def requests_table(run: PeerRun, key: dict, phase: str) -> tuple[pa.Table, str]:
    """requests.parquet rows (send order) and the cell's token counting."""
    reqs = sorted(run.requests, key=lambda r: r.send_ns)
    ends = [r.end_ns if r.end_ns is not None else (r.chunk_ns[-1] if r.chunk_ns else r.send_ns)
            for r in reqs]
    slots = _slots([r.send_ns for r in reqs], ends) if phase == contract.DECODE else range(len(reqs))
    rows, methods = [], set()
    for i, (req, slot) in enumerate(zip(reqs, slots, strict=True)):
        tokens, method = cumulative_tokens(req, run.tier)
        if req.chunk_ns and req.error is None:
            methods.add(method)
        rows.append({
            **key,
            "request_id": f"peer-{i:06d}",
            "purpose": contract.PURPOSE_MEASURE if phase == contract.DECODE else contract.PURPOSE_ARRIVAL,
            "stream_index": slot, "send_ns": req.send_ns, "end_ns": req.end_ns,
            "prompt_tokens": req.prompt_tokens, "cached_tokens": None,
            "finish_reason": contract.FINISH_NOT_RECORDED if req.error is None else None,
            "error": None if req.error is None else redact(req.error)[:500],
            "cancelled": False, "chunk_ns": list(req.chunk_ns), "chunk_tokens": list(tokens),
            "content_tail": None, "reasoning_tail": None,
            "scheduled_ns": req.send_ns if phase == contract.RATE else None,
        })
    if run.tier == TIER_REQUEST:
        counting = contract.COUNT_PEER_REQUEST
    else:
        counting = max(methods, key=_COUNT_RANK.index) if methods else contract.COUNT_PEER_CHUNKS
    return pa.Table.from_pylist(rows, schema=REQUESTS_SCHEMA), counting


def _status(table: pa.Table, window: Plateau, counting: str, phase: str) -> tuple[str, str | None]:
    """The cell's status from the checks our own runs get, where the tier allows them."""
    if not window.found:
        return contract.ERROR, window.reason
    if counting == contract.COUNT_PEER_REQUEST or phase != contract.DECODE:
        return contract.VALID, None
    problem = counting_problem(counting)
    if problem:
        return contract.ERROR, problem
    done = np.asarray([e is None for e in table.column("error").to_pylist()], dtype=bool)
    chunks = Chunks.from_table(table)
    m = decode_metrics(chunks, window.start_ns, window.end_ns, done)
    problems = decode_problems(chunks, window.start_ns, window.end_ns, m, client_bound=None)
    return (contract.ERROR, "; ".join(problems)) if problems else (contract.VALID, None)


def _pub(run: PeerRun) -> dict[str, float | int | None]:
    got = run.published
    as_int = {k: (None if got.get(k) is None else int(got[k])) for k in ("completed", "output_tokens")}
    return {"pub_ttft_ms": got.get("ttft_ms.p50"), "pub_completed": as_int["completed"],
            "pub_output_tokens": as_int["output_tokens"]}


def cells_table(run: PeerRun, key: dict, status: str, reason: str | None, window: Plateau | None,
                counting: str) -> pa.Table:
    row = {**key, "status": status, "reason": reason,
           "window_start_ns": window.start_ns if window else None,
           "window_end_ns": window.end_ns if window else None,
           "token_counting": counting, **_pub(run)}
    return pa.Table.from_pylist([row], schema=CELLS_SCHEMA)


def _notes(run: PeerRun, context_from: str, counting: str, window: Plateau | None) -> str:
    lines = [f"Imported from {run.tool} {run.tool_version or '(version not in the file)'} "
             f"output ({run.format}), tier **{run.tier}**. Stamps: {run.clock}."]
    tier_text = {
        TIER_CHUNK: "Every chunk's arrival is the tool's own stamp.",
        TIER_GAP: "Chunk arrivals are rebuilt from the send, the TTFT and each gap the tool kept.",
        TIER_REQUEST: ("Only the first and last token and the token count are kept: time between "
                       "tokens and windowed rates cannot be computed and are not published."),
        TIER_AGGREGATE: "Only the tool's summary figures exist: nothing here was recomputed or checked.",
    }
    lines.append(tier_text[run.tier])
    counted = {
        contract.COUNT_PEER_CHUNKS: "Tokens per chunk: the format's own counts.",
        contract.COUNT_PEER_CHUNKS_TOTAL: ("Tokens per chunk: one each, equal to the tool's "
                                           "per-request total."),
        contract.COUNT_PEER_SPREAD: ("Tokens per chunk: the tool kept only each request's total, which "
                                     "differs from its chunks; spread over them by rule (not verified)."),
        contract.COUNT_CHUNKS_UNVERIFIED: "Tokens per chunk: one each, confirmed by nothing (not verified).",
    }
    if counting in counted:
        lines.append(counted[counting])
    if run.tier != TIER_AGGREGATE:
        lines.append(f"Context: {context_from}.")
        if window is not None and window.found:
            held = "" if window.held_share is None else f", at the target {window.held_share:.0%} of it"
            lines.append(f"Our figures are over the steady span the in-flight count shows "
                         f"({(window.end_ns - window.start_ns) / 1e9:.3f} s{held}); the tool's own "
                         "figures are over its whole run.")
            if window.held_share is not None and window.held_share < HELD_NOTE_SHARE:
                lines.append("The in-flight count dipped below the target for a notable part of the span.")
        lines.append("Not checked: finish reasons (the format keeps none), the server's own counters.")
    if run.lost:
        lines.append("What the format does not keep: " + "; ".join(run.lost) + ".")
    if run.extra:
        lines.append("\n".join(f"- {k}: {v}" for k, v in sorted(run.extra.items())))
    return "\n\n".join(line for line in lines if line)


def _setup_facts(run: PeerRun, setup: DeclaredSetup | None) -> tuple[Hardware, Engine, Model, str]:
    """run.yaml's hardware, engine and model, and the notes line saying what was declared."""
    if setup is None:
        return Hardware(), Engine(name=run.engine), Model(name=run.model), ""
    hw = setup.hardware or Hardware()
    engine = setup.engine or Engine(name=run.engine)
    if setup.model is not None:  # our display name; the name the tool sent stays the served name
        model = Model(name=setup.model.name, served_name=run.model,
                      repository_id=setup.model.repository_id, revision=setup.model.revision,
                      family=setup.model.family)
    else:
        model = Model(name=run.model)
    what = [w for w, got in (("hardware", setup.hardware), ("engine", setup.engine),
                              ("model", setup.model)) if got is not None]
    line = (f"Setup declared at import, not measured by the tool: {', '.join(what)} from "
            f"{setup.source}." + (f" The tool sent the model name {run.model!r}." if run.model
                                  and setup.model is not None else ""))
    return hw, engine, model, line


def run_info(run: PeerRun, run_id: str, sha256: str, phase: str, context: int, context_from: str,
             counting: str, window: Plateau | None, setup: DeclaredSetup | None = None) -> RunInfo:
    params = Parameters(contexts=[context], max_output_tokens=run.output_tokens,
                        tool_name=run.tool, tool_version=run.tool_version)
    if phase == contract.DECODE:
        params.concurrency = [int(run.concurrency or 0)]
    else:
        params.rate = [float(run.rate or 0.0)]
        params.concurrency = [int(run.concurrency)] if run.concurrency else []
    hardware, engine, model, declared = _setup_facts(run, setup)
    notes = _notes(run, context_from, counting, window)
    return RunInfo(
        schema_version=SCHEMA_VERSION, run_id=run_id, source=SOURCE_IMPORTED,
        measured_at=run.measured_at, hardware=hardware, engine=engine, model=model,
        parameters=params, notes=f"{notes}\n\n{declared}" if declared else notes,
        imported=Imported(
            source_file=redact(Path(run.source_file).name), source_sha256=sha256, format=run.format,
            tool=run.tool, tool_version=run.tool_version, tier=run.tier, clock=run.clock,
            lost=list(run.lost),
            published=[PublishedFigure(k, float(v)) for k, v in sorted(run.published.items())],
            definitions=[Definition(k, v) for k, v in sorted(run.definitions.items())] or None))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_peer_run(run: PeerRun, out: Path, sha256: str | None = None,
                   setup: DeclaredSetup | None = None) -> ImportResult:
    """Validate the run, then write ``out/<run_id>/`` whole or not at all.

    ``sha256``: of the source file's bytes (read from ``run.source_file`` when not given);
    ``setup``: hardware, engine and model declared at import (importer/peers/setup.py)."""
    validate(run)
    run = redact_tree(run)
    sha = sha256 or file_sha256(run.source_file)
    run_id = run_id_for(run, sha)
    phase = _phase(run)
    if run.tier == TIER_AGGREGATE:
        context = int(run.input_tokens or 1)
        context_from = "the tool's configured input length" if run.input_tokens else "not known (1)"
    else:
        context, context_from = _context(run)
    key = {"phase": phase, "context": context,
           "concurrency": int(run.concurrency or 0) if phase == contract.RATE else int(run.concurrency),
           "rate_target": float(run.rate) if phase == contract.RATE else None}
    tables: dict[str, pa.Table] = {}
    if run.tier == TIER_AGGREGATE:
        counting, window = contract.COUNT_PEER_AGGREGATE, None
        status, reason = contract.VALID, "not checked: the tool's summary figures only"
    else:
        table, counting = requests_table(run, key, phase)
        sends = table.column("send_ns").to_pylist()
        ends = table.column("end_ns").to_pylist()
        shared = len(set(sends)) > 1 or len(sends) < 2
        window = (plateau(sends, ends, run.concurrency if phase == contract.DECODE else None, run.rate)
                  if shared else Plateau(None, None, None, None, 0, NO_SHARED_CLOCK))
        status, reason = _status(table, window, counting, phase)
        tables[REQUESTS_FILE] = table
    info = run_info(run, run_id, sha, phase, context, context_from, counting, window, setup)
    cells = cells_table(run, key, status, reason, window, counting)
    if REQUESTS_FILE in tables and window is not None and window.found:  # the rows' cross-checks
        found = crosscheck.run_findings(cells, tables[REQUESTS_FILE], None, peer=True)
        for hit in found.values():
            cells = cells_table(run, key, hit.status, hit.problem, window, counting)
    return write_run_dir(out, run_id, info, cells, tables=tables)


__all__ = ["chunk_stamps", "cumulative_tokens", "run_id_for", "write_peer_run"]
