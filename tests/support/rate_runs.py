"""Rate cells with known numbers, added to a run.

`add_rate` appends one curve of rate cells (a constant schedule, so every
figure is exact) and their requests to a run directory written by
synthetic_runs.make_measured_run, through rundir.io. Every request is sent
LAG_MS after its scheduled time, gets its first token TTFT later and 16 more
tokens TBT_SPAN_MS after that (time between tokens 10 ms), and ends 1 ms after.

* 1/s and 2/s: TTFT 100 ms, the server keeps up: Valid.
* 4/s: the server falls behind, request i's TTFT is 100 + 50 i ms: its
  completions stretch past the window and TTFT p90 passes the SLO (2 s).
* 8/s: the client sent every request 50 ms late (p99 send lag over the
  1.25 ms allowed at 8/s): Load not delivered, whatever else it did.

So the knee (the highest offered rate completing ≥ 95% of it per second,
meeting the SLO, its load delivered) is 2/s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from rundir import arrivals, contract
from rundir.io import read_table, write_table

MS = 1_000_000
CONTEXT = 1024
WINDOW_S = 20
OUTPUT_TOKENS = 17
TBT_SPAN_MS = 160  # 16 tokens after the first: 10 ms between tokens
LAG_REASON = ("Send lag p99 was 50 ms, over the 1.25 ms allowed (max of 1 ms and 1% of the "
              "mean gap 125 ms).")
# offered rate -> (send lag ms, TTFT ms of request i, status, reason)
CELLS = {
    1.0: (0.2, lambda i: 100.0, contract.VALID, None),
    2.0: (0.2, lambda i: 100.0, contract.VALID, None),
    4.0: (0.2, lambda i: 100.0 + 50.0 * i, contract.VALID, None),
    8.0: (50.0, lambda i: 100.0, contract.LOAD_NOT_DELIVERED, LAG_REASON),
}
KNEE = 2.0
# The last request of the 4/s cell: scheduled at 19.875 s (a constant schedule sits half
# a gap in: rundir.arrivals.schedule), TTFT 100 + 50 × 79 ms.
SPAN_4 = 19.875 + 0.0002 + 4.05 + TBT_SPAN_MS / 1000 + 0.001


def _request(n: int, rate: float, sched: int, lag_ms: float, ttft_ms: float) -> dict[str, Any]:
    send = sched + int(lag_ms * MS)
    first = send + int(ttft_ms * MS)
    ns, tok = [send + MS // 2, first, first + TBT_SPAN_MS * MS], [0, 1, OUTPUT_TOKENS]
    return {"phase": contract.RATE, "context": CONTEXT, "concurrency": 0,
            "request_id": f"rate-{n}", "purpose": contract.PURPOSE_ARRIVAL, "stream_index": 0,
            "send_ns": send, "end_ns": ns[-1] + MS, "prompt_tokens": CONTEXT, "cached_tokens": 0,
            "finish_reason": "length", "error": None, "cancelled": False, "chunk_ns": ns,
            "chunk_tokens": tok, "rate_target": rate, "scheduled_ns": sched}


def add_rate(path: Path) -> Path:
    """Append the rate cells above (and their requests) to a run."""
    path = Path(path)
    cells = read_table(path, contract.CELLS_FILE).to_pylist()
    requests = read_table(path, contract.REQUESTS_FILE).to_pylist()
    t = max(r["end_ns"] or r["send_ns"] for r in requests) + 1000 * MS
    n = 0
    for rate, (lag, ttft, status, reason) in CELLS.items():
        start = t
        # the schedule the seed makes (the builder makes it again from the recorded seed)
        for i, offset in enumerate(arrivals.schedule(arrivals.Process("constant"), rate, WINDOW_S, 7)):
            requests.append(_request(n, rate, start + int(offset), lag, ttft(i)))
            n += 1
        cells.append({"phase": contract.RATE, "context": CONTEXT, "concurrency": 0,
                      "status": status, "reason": reason, "window_start_ns": start,
                      "window_end_ns": start + WINDOW_S * 1_000_000_000,
                      "token_counting": contract.COUNT_USAGE_CONTINUOUS, "client_bound": False,
                      "rate_target": rate, "arrivals": "constant", "arrival_seed": 7,
                      "rate_output_tokens": OUTPUT_TOKENS})
        t = max(r["end_ns"] for r in requests) + 1000 * MS
    write_table(path, contract.CELLS_FILE, _table(cells, contract.CELLS_SCHEMA))
    write_table(path, contract.REQUESTS_FILE, _table(requests, contract.REQUESTS_SCHEMA))
    return path


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema)
