"""Faults injected by request count and cell (the scenario's `inject` field).

A test says where a fault lands in the collector's own terms: "the 3rd
completion request of decode cell 128×2", never "a second after the first
cell". The server reads a request's cell from its prompt: every prompt the
collector sends starts with a tag naming the run, the cell and the stream
(bench/workload/prompts.py), `[<run> d<context>-c<concurrency>-s<stream>]` for a
decode cell's prefix warm-ups and streams, `[<run> p<context>-a<attempt>]`
for a prefill sample, `[<run> a<context>-q<cap>-r<rate>-n<request>]` for a
rate cell's request (its cell here: ("rate", context, cap)). Other requests
(prompt calibration, count checks) belong to no cell.

Each cell's completion requests are numbered 1, 2, ... in arrival order
(those the API key lets through). A decode cell at concurrency C sends its C
prefix warm-ups first (one token each) and, once all have ended, its streams:
request C + 1 is the first measured stream. Numbers go on across a restart
of the server (the arrivals log is read back), so a fault fires once per
server, as a crash happens once: a resumed cell's requests are not hit again.

A trigger is {"cell": [phase, context, concurrency], "at": k, "do": action}:

- "mark": nothing; the arrival is logged, for a test to act on.
- "hold": request k gets no answer at all until the test releases it
  (POST /_ref/release, `RefServer.release`) or its client goes away; the
  rest of the server runs on. A decode cell with a held stream never reaches
  readiness, so the collector stays inside that cell until told otherwise.
- "exit": the process exits (status `code`, default 3) before answering:
  every open connection dies with it, as in a crash.
- "stop": the process SIGSTOPs itself before answering (SIGCONT resumes it,
  `RefServer.cont`): a hung engine that the kernel still accepts
  connections for.
- "freeze": the whole server blocks `seconds` (default 2) before answering.
- "refuse": request k is answered HTTP `status` (default 503) with an error.

With "after_tokens": N, an exit, stop, freeze or mark waits until request k
has sent N tokens (at the first step at which it has, like the scenario's other
mid-stream faults): "the server dies once the cell's first measured stream is
flowing", whatever the host's speed. A mark that fires appends one flushed
JSON line to the marks log (`marks.jsonl` beside the arrivals log):
{"cell", "n", "request_id", "after_tokens", "fired_ns"}, so a test can act on
the collector while a stream is known to be that far along
(`RefServer.wait_mark`).

Every completion request is logged, at arrival and before any fault acts, as
one flushed JSON line of the arrivals log: {"cell", "n", "request_id",
"max_tokens", "prompt_tokens", "recv_ns", "do"} ("do": the trigger the request
hit, which with "after_tokens" acts later, or null). A test waits on that line
(`RefServer.wait_arrival`), not on the clock: a frozen or stopped server
cannot answer a state endpoint, but its log line is already written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

ACTIONS = ("mark", "hold", "exit", "stop", "freeze", "refuse")
MID_STREAM = ("exit", "stop", "freeze", "mark")  # what `after_tokens` can delay
PHASES = ("decode", "prefill", "rate")
MARKS_LOG = "marks.jsonl"  # beside the arrivals log: delayed marks as they fire
_TAG = re.compile(r"^\[\S+ (?:d(\d+)-c(\d+)-s\d+|p(\d+)-a\d+|a(\d+)-q(\d+)-r[^-\s]+-n\d+)\]$")


def cell_of(words: list[str]) -> tuple[str, int, int] | None:
    """(phase, context, concurrency) named by a prompt's leading tag, or None."""
    m = _TAG.match(" ".join(words[:2]))
    if m is None:
        return None
    if m.group(1) is not None:
        return "decode", int(m.group(1)), int(m.group(2))
    if m.group(4) is not None:  # a rate cell's request: its cap (0: none) as its concurrency
        return "rate", int(m.group(4)), int(m.group(5))
    return "prefill", int(m.group(3)), 1


def check(triggers: Any) -> str | None:
    """What is wrong with an `inject` value, or None."""
    if triggers is None:
        return None
    if not isinstance(triggers, list):
        return "inject must be a list of triggers"
    for i, t in enumerate(triggers):
        where = f"inject[{i}]"
        if not isinstance(t, dict) or not {"cell", "at", "do"} <= set(t):
            return f'{where} must be {{"cell": [phase, context, concurrency], "at": k, "do": action}}'
        unknown = set(t) - {"cell", "at", "do", "code", "seconds", "status", "after_tokens"}
        if unknown:
            return f"{where}: unknown field(s) {', '.join(sorted(unknown))}"
        cell = t["cell"]
        if not (isinstance(cell, list | tuple) and len(cell) == 3 and cell[0] in PHASES
                and isinstance(cell[1], int) and cell[1] > 0 and isinstance(cell[2], int)
                and cell[2] >= (0 if cell[0] == "rate" else 1)):
            return (f"{where}.cell must be [\"decode\" or \"prefill\", context > 0, concurrency > 0] "
                    "or [\"rate\", context > 0, cap >= 0]")
        if not isinstance(t["at"], int) or t["at"] < 1:
            return f"{where}.at must be an int >= 1"
        if t["do"] not in ACTIONS:
            return f"{where}.do must be one of {ACTIONS}"
        later = t.get("after_tokens")
        if later is not None and (not isinstance(later, int) or later < 1
                                  or t["do"] not in MID_STREAM):
            return f"{where}.after_tokens must be an int >= 1, with do one of {MID_STREAM}"
    return None


class Injector:
    """Numbers each cell's requests, logs every arrival, says which fault fires."""

    def __init__(self, triggers: list[dict] | None, log_path: str | None):
        self.triggers = [dict(t, cell=tuple(t["cell"])) for t in triggers or []]
        self.counts: dict[tuple, int] = {}
        self.log = None
        if log_path:
            path = Path(log_path)
            for line in path.read_text().splitlines() if path.exists() else []:
                try:
                    cell = json.loads(line)["cell"]
                except (ValueError, KeyError):
                    continue  # a line cut by a crash
                if cell is not None:
                    self.counts[tuple(cell)] = self.counts.get(tuple(cell), 0) + 1
            self.log = open(path, "a", encoding="utf-8")
        self.marks_path = Path(log_path).with_name(MARKS_LOG) if log_path else None

    def arrive(self, words: list[str], info: dict[str, Any]) -> tuple[tuple | None, int | None,
                                                                      dict | None]:
        """Log one completion request; (its cell, its number there, the trigger hit)."""
        cell = cell_of(words)
        n = hit = None
        if cell is not None:
            n = self.counts[cell] = self.counts.get(cell, 0) + 1
            hit = next((t for t in self.triggers if t["cell"] == cell and t["at"] == n), None)
        if self.log is not None:
            line = {"cell": list(cell) if cell else None, "n": n, **info,
                    "do": hit["do"] if hit else None}
            self.log.write(json.dumps(line) + "\n")
            self.log.flush()
        return cell, n, hit

    def delayed(self, hit: dict, cell: tuple | None, n: int | None, request_id: str) -> dict:
        """The trigger a request keeps until it has sent `after_tokens` tokens,
        with what a mark logs when it fires."""
        marks = str(self.marks_path) if self.marks_path else None
        return dict(hit, request_id=request_id, n=n, cell_hit=list(cell) if cell else None,
                    marks=marks)

    @staticmethod
    def act(hit: dict) -> str | None:
        """Do what a fired trigger does to the process (exit, stop, freeze, a
        delayed mark's line); returns "hold" or "refuse" for the server to do
        to the request."""
        if hit["do"] == "mark" and hit.get("marks"):
            line = {"cell": hit.get("cell_hit"), "n": hit.get("n"),
                    "request_id": hit.get("request_id"), "after_tokens": hit.get("after_tokens"),
                    "fired_ns": time.monotonic_ns()}
            with open(hit["marks"], "a", encoding="utf-8") as log:
                log.write(json.dumps(line) + "\n")
        if hit["do"] == "exit":
            os._exit(hit.get("code", 3))
        if hit["do"] == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)  # returns once SIGCONTed
        if hit["do"] == "freeze":
            time.sleep(hit.get("seconds", 2.0))  # blocks the loop: nothing is sent or answered
        return hit["do"] if hit["do"] in ("hold", "refuse") else None
