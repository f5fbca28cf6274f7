"""Regenerate tests/data/import/mlperf-endpoints/ (not run by CI).

Why a hand-made file: MLPerf Endpoints (github mlcommons/endpoints, Python
package `inference-endpoint`) is not on the package registry this project can
reach (`pip download inference-endpoint`: no matching distribution; only its
companions `endpoints-submission-cli` and `mlperf-viz` are), so the tool itself
cannot be run here. This script plays its part instead, and says so in the
file name (handmade-events.jsonl): it starts the reference server
(tests/refserver) with a known schedule, sends streaming chat requests at a
fixed concurrency from threads, and writes one JSON line per event in the
shape the tool's JSONL event writer gives (as read in its source; see
docs/import-mlperf-endpoints.md):

- session.started, session.start_performance_tracking, then per request
  sample.issued (just before the request is sent), sample.recv_first (the
  first content chunk), sample.recv_non_first (each later content chunk),
  sample.complete (stream end, with the output text per chunk), and
  session.stop_performance_tracking, session.ended;
- every stamp is time.monotonic_ns() in this process (CLOCK_MONOTONIC, the
  refserver truth log's clock too).

Usage (from the repository root, PYTHONPATH=$PWD):
    python scripts/peers/mlperf_endpoints.py [--out tests/data/import/mlperf-endpoints]
It writes handmade-events.jsonl and refserver-truth.jsonl (the server's
own record of the same run; its request_id is the event's sample_uuid,
sent as X-Request-Id) into --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from tests.refserver.harness import start_refserver
from tests.refserver.scenario import Scenario

REQUESTS = 12
CONCURRENCY = 3
PROMPT_WORDS = 64
MAX_TOKENS = 32


class EventLog:
    """Events in arrival order, written one compact JSON object per line."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[dict] = []

    def add(self, event_type: str, sample: str = "", data: object = None,
            ts: int | None = None) -> None:
        row = {"event_type": event_type, "timestamp_ns": ts if ts is not None else time.monotonic_ns(),
               "sample_uuid": sample, "conversation_id": "", "turn": None, "data": data}
        with self.lock:
            self.rows.append(row)


def one_request(url: str, model: str, k: int, log: EventLog) -> None:
    sample = uuid.uuid4().hex
    prompt = " ".join(f"p{k}x{i}" for i in range(PROMPT_WORDS))
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": MAX_TOKENS, "stream": True}).encode()
    req = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json",
                                                                      "X-Request-Id": sample})
    log.add("sample.issued", sample, ["PromptData", prompt])
    chunks: list[str] = []
    with urllib.request.urlopen(req, timeout=60) as resp:
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            ts = time.monotonic_ns()
            obj = json.loads(line[5:])
            choices = obj.get("choices") or []
            text = (choices[0].get("delta") or {}).get("content") if choices else None
            if not text:
                continue
            log.add("sample.recv_first" if not chunks else "sample.recv_non_first", sample,
                    ["TextModelOutput", text] if not chunks else None, ts=ts)
            chunks.append(text)
    log.add("sample.complete", sample, ["TextModelOutput", chunks])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/import/mlperf-endpoints")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mlperf-endpoints-"))
    sc = Scenario(tokens_per_s=200, slots=2, ttft_ms=20)
    srv = start_refserver(sc, work)
    log = EventLog()
    try:
        todo = list(range(1, REQUESTS + 1))
        todo_lock = threading.Lock()

        def worker() -> None:
            while True:
                with todo_lock:
                    if not todo:
                        return
                    k = todo.pop(0)
                one_request(srv.openai_url, sc.model, k, log)

        log.add("session.started")
        log.add("session.start_performance_tracking")
        threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log.add("session.stop_performance_tracking")
        log.add("session.ended")
        srv.truth(min_records=REQUESTS)
    finally:
        srv.stop()
    rows = sorted(log.rows, key=lambda r: r["timestamp_ns"])
    with open(out / "handmade-events.jsonl", "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    truth = sorted(work.glob("*truth*.jsonl"))
    shutil.copyfile(truth[0], out / "refserver-truth.jsonl")
    print(f"wrote {len(rows)} events, truth from {truth[0].name}")


if __name__ == "__main__":
    main()
