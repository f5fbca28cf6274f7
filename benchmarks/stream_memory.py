"""What the collector's streams hold in memory, and what parsing costs, with
long streams parsed as they run (bench/measure/liveparse.py) against parsing after
the stream ended (how the collector worked before; `--baseline REV` runs a
git revision of it).

    python benchmarks/stream_memory.py                   # 1,024 streams × 2,000 events
    python benchmarks/stream_memory.py --streams 4096 --events 500 --baseline HEAD~3

Each mode runs in a fresh process: S streams receive E events each, one event
a stream a loop pass (as decode steps arrive), every event a 250-byte vLLM
chunk with a running usage count, fed through the stream reader
(bench/measure/sse.py) with its stamps; then every stream is parsed to the end, as
the cell does, and the parsed streams are kept, as the cell keeps its
records until it stores them. Printed per mode: peak resident memory, bytes
an event, CPU seconds per million events; then the ratios, measured side by
side in this one run, and last one JSON line.

Modes: `live` (this tree: a stream hands its raw events over at its share
of the process budget), `held` (this tree, no budget: every raw event held
until the end), and with --baseline, `baseline` (that tree's own path).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks._revisions import export_tree  # noqa: E402

DRIVER = r"""
import asyncio, json, resource, sys, time
from bench.measure.sse import SseStream, StreamResult
streams, events, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"

def frame(i):
    return (b'data: {"id":"chatcmpl-0123456789abcdef0123","object":"chat.completion.chunk",'
            b'"created":1733300000,"model":"Qwen/Qwen3-30B-A3B-Instruct","choices":[{"index":0,'
            b'"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":'
            b'{"prompt_tokens":8192,"total_tokens":%d,"completion_tokens":%d}}\n\n'
            % (8192 + i + 1, i + 1))

async def main():
    loop = asyncio.get_running_loop()
    parsers, results, readers = [], [], []
    for _ in range(streams):
        if mode == "baseline":
            from bench.measure.chunks import StreamParser
            parser, spill = StreamParser(events), None
        else:
            from bench.measure.liveparse import LiveParser
            parser = LiveParser(events)
            spill = parser.hook(streams) if mode == "live" else None
        r = StreamResult(spill=spill) if spill else StreamResult()
        s = SseStream(r, loop.create_future())
        s.feed(HEAD, 0)
        parsers.append(parser); results.append(r); readers.append(s)
    cpu = time.process_time()
    stamp = 1
    for i in range(events):
        data = frame(i)
        for s in readers:
            s.feed(data, stamp)
            stamp += 1
        await asyncio.sleep(0)
    parsed = []
    for parser, r in zip(parsers, results):
        if mode == "baseline":  # bench/measure/cells.py then: 128-event slices after the stream
            for k in range(0, len(r.chunks), 128):
                parser.feed(r.chunks[k:k + 128])
                await asyncio.sleep(0)
            parsed.append(parser.result())
        else:
            parsed.append(await parser.finish(r.chunks))
        r.chunks = []
    cpu = time.process_time() - cpu
    assert all(p.error is None and p.chunk_tokens[-1] == events for p in parsed)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_bytes": peak, "cpu_s": cpu}))

asyncio.run(main())
"""


def measure(tree: Path, mode: str, streams: int, events: int) -> dict:
    """One mode in a fresh process, importing `tree`; and its empty footprint."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = {}
    for label, n in (("run", events), ("empty", 1)):
        res = subprocess.run([sys.executable, "-c", DRIVER, str(streams), str(n), mode],
                             env=env, cwd=tree, capture_output=True, text=True)
        if res.returncode:
            sys.exit(f"{mode} failed: {res.stderr.strip().splitlines()[-1:]}")
        out[label] = json.loads(res.stdout)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=1024)
    ap.add_argument("--events", type=int, default=2000, help="per stream")
    ap.add_argument("--baseline", help="also a git revision (or folder) of the collector")
    a = ap.parse_args()
    total = a.streams * a.events
    print(f"{a.streams:,} streams × {a.events:,} events = {total:,} events of 250 bytes")
    modes = [("live", REPO), ("held", REPO)]
    with tempfile.TemporaryDirectory(prefix="stream-memory-") as tmp:
        if a.baseline:
            modes.append(("baseline", export_tree(a.baseline, Path(tmp) / "baseline")))
        got = {}
        for mode, tree in modes:
            m = measure(tree, mode, a.streams, a.events)
            held = m["run"]["peak_bytes"] - m["empty"]["peak_bytes"]
            got[mode] = {"peak_mb": round(m["run"]["peak_bytes"] / 2**20, 1),
                         "bytes_per_event": round(held / total, 1),
                         "cpu_s_per_m_events": round(m["run"]["cpu_s"] / total * 1e6, 3)}
            print(f"{mode:>8}: peak {got[mode]['peak_mb']:,} MB, "
                  f"{got[mode]['bytes_per_event']} bytes an event held, "
                  f"{got[mode]['cpu_s_per_m_events']} CPU s per million events")
    ratios = {}
    for other in ("held", "baseline"):
        if other in got:
            ratios[f"memory_{other}_over_live"] = round(
                got[other]["bytes_per_event"] / max(got["live"]["bytes_per_event"], 1e-9), 2)
            ratios[f"cpu_live_over_{other}"] = round(
                got["live"]["cpu_s_per_m_events"] / got[other]["cpu_s_per_m_events"], 3)
    for k, v in ratios.items():
        print(f"{k}: {v}")
    print(json.dumps({"streams": a.streams, "events": a.events, **got, **ratios}))


if __name__ == "__main__":
    main()
