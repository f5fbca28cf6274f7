"""Traffic cells (prefix reuse, conversations) with known numbers, added to a run.

`add_traffic` appends prefix and conversation cells and their requests to a run
directory written by synthetic_runs.make_measured_run, through rundir.io, so
the site tests know every figure exactly (EXPECTED): each request's prompt and
cached tokens, its TTFT (send to first content chunk) and its output chunks
are chosen, and the engine's own counts are stored per cell as the collector
stores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from rundir import contract
from rundir.io import read_table, write_table

MS = 1_000_000

REUSE_REASON = ("reuse off target: asked 90%, requests report 10.0% cached, server counters "
                "10.0% (tolerance 2.0 points)")
UNVERIFIED_REASON = ("reuse not verifiable: the server reports no cached tokens and no "
                     "prefix-cache counters")

# Prefix cells at 4K × 1: (target, prompt, cached per request (None: not reported),
# TTFT ms, server prompt/cached tokens (None: no counters), status, reason).
PREFIX_CELLS = [
    (0, 4000, 0, 200, (32000, 0), contract.VALID, None),
    (50, 4000, 2000, 110, (32000, 16160), contract.VALID, None),
    (90, 4000, 400, 190, (32000, 3200), contract.REUSE_OFF_TARGET, REUSE_REASON),
    (99, 4000, None, 50, None, contract.REUSE_UNVERIFIED, UNVERIFIED_REASON),
]
PREFIX_CONTEXT = 4096
CONV_CONTEXT, CONV_CONCURRENCY, TURNS, LAST_TURN = 8192, 2, (1, 4), 4
TURN_PROMPT = 2048  # turn j sends j × this; it reuses turn j−1's prompt
TURN_TTFT_MS = {1: 100, 2: 90, 3: 85, 4: 80}
OUTPUT_TOKENS, OUTPUT_SPAN_MS = 64, 630  # 63 tokens after the first in 0.63 s: 100 tok/s

# What the pages and downloads must show, exactly (percent, ms, tok/s).
EXPECTED = {
    ("prefix", 0): {"achieved": 0.0, "server": 0.0, "ttft_ms": 200.0, "uncached": 20000.0},
    ("prefix", 50): {"achieved": 50.0, "server": 50.5, "ttft_ms": 110.0,
                     "uncached": 2000 / 0.11},
    ("prefix", 90): {"achieved": 10.0, "server": 10.0, "ttft_ms": 190.0, "uncached": 3600 / 0.19},
    ("prefix", 99): {"achieved": None, "server": None, "ttft_ms": 50.0, "uncached": None},
    ("turn", 1): {"achieved": 0.0, "server": None, "ttft_ms": 100.0, "uncached": 20480.0,
                  "per_request": 100.0, "prompt": 2048.0},
    ("turn", 4): {"achieved": 75.0, "server": 75.0, "ttft_ms": 80.0, "uncached": 25600.0,
                  "per_request": 100.0, "prompt": 8192.0},
}


def _request(t: int, n: int, phase: str, ctx: int, conc: int, purpose: str, stream: int,
             prompt: int, cached: int | None, ttft_ms: float, out_tokens: int,
             **keys: Any) -> dict[str, Any]:
    first = t + int(ttft_ms * MS)
    ns, tok = [t + MS // 2, first], [0, 1]
    if out_tokens > 1:
        ns.append(first + OUTPUT_SPAN_MS * MS)
        tok.append(out_tokens)
    return {"phase": phase, "context": ctx, "concurrency": conc, "request_id": f"traffic-{n}",
            "purpose": purpose, "stream_index": stream, "send_ns": t, "end_ns": ns[-1] + MS,
            "prompt_tokens": prompt, "cached_tokens": cached,
            "finish_reason": "length", "error": None,
            "cancelled": False, "chunk_ns": ns, "chunk_tokens": tok, **keys}


def add_traffic(path: Path, ttft_scale: float = 1.0) -> Path:
    """Append the prefix and conversation cells above (and their requests) to a run;
    `ttft_scale` multiplies every TTFT (a second run that differs from the first:
    EXPECTED holds for 1.0)."""
    path = Path(path)
    cells = read_table(path, contract.CELLS_FILE).to_pylist()
    requests = read_table(path, contract.REQUESTS_FILE).to_pylist()
    t = max(r["end_ns"] or r["send_ns"] for r in requests) + 1000 * MS
    n = 0
    for target, prompt, cached, ttft, server, status, reason in PREFIX_CELLS:
        keys = {"prefix_reuse_target": target}
        start = t
        for purpose, count in ((contract.PURPOSE_PRIME, 2), (contract.PURPOSE_REUSE, 8)):
            for i in range(count):
                prime = purpose == contract.PURPOSE_PRIME  # cold: nothing cached, slower
                got = 0 if prime and cached is not None else cached
                requests.append(_request(t, n, contract.PREFIX, PREFIX_CONTEXT, 1, purpose, 0,
                                         prompt, got, ttft * ttft_scale * (3 if prime else 1), 1,
                                         prefix_group=i % 2, **keys))
                n, t = n + 1, t + 300 * MS
        sp, sc = server if server else (None, None)
        cells.append({"phase": contract.PREFIX, "context": PREFIX_CONTEXT, "concurrency": 1,
                      "status": status, "reason": reason, "window_start_ns": start,
                      "window_end_ns": t, "token_counting": contract.COUNT_USAGE_CONTINUOUS,
                      "client_bound": False, "server_prompt_tokens": sp, "server_cached_tokens": sc,
                      "server_source": "counters" if server else None, "reuse_block": 16, **keys})
    start = t
    for turn in range(1, LAST_TURN + 1):
        key_turn = min(k for k in TURNS if k >= turn)
        purpose = contract.PURPOSE_TURN if turn in TURNS else contract.PURPOSE_TURN_FILL
        for conv in range(CONV_CONCURRENCY):
            requests.append(_request(t, n, contract.CONVERSATION, CONV_CONTEXT, CONV_CONCURRENCY,
                                     purpose, conv, TURN_PROMPT * turn, TURN_PROMPT * (turn - 1),
                                     TURN_TTFT_MS[turn] * ttft_scale, OUTPUT_TOKENS, turn=key_turn,
                                     conversation_id=conv, conversation_turn=turn,
                                     engine_cached_tokens=TURN_PROMPT * (turn - 1)))
            n, t = n + 1, t + 1000 * MS
    for turn in TURNS:
        server = turn == LAST_TURN  # the first turn: the engine said nothing
        cells.append({"phase": contract.CONVERSATION, "context": CONV_CONTEXT,
                      "concurrency": CONV_CONCURRENCY, "status": contract.VALID, "turn": turn,
                      "window_start_ns": start, "window_end_ns": t,
                      "token_counting": contract.COUNT_USAGE_CONTINUOUS, "client_bound": False,
                      "server_prompt_tokens": 2 * TURN_PROMPT * turn if server else None,
                      "server_cached_tokens": 2 * TURN_PROMPT * (turn - 1) if server else None,
                      "server_source": "timings" if server else None, "reuse_block": 1})
    write_table(path, contract.CELLS_FILE, _table(cells, contract.CELLS_SCHEMA))
    write_table(path, contract.REQUESTS_FILE, _table(requests, contract.REQUESTS_SCHEMA))
    return path


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema)
