"""Long streams parsed while they run (bench/measure/liveparse.py): the same record as
parsing once the stream ended, whatever the hand-over size and wherever the
reads split the bytes, and a bounded number of raw events held."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from dataclasses import fields

import numpy as np
import pytest

from bench.measure import liveparse
from bench.measure.chunks import ParsedStream, parse_events
from bench.measure.liveparse import LiveParser, spill_at
from bench.measure.sse import SseStream, StreamResult
from tests.collector.test_ground_truth import FAST, check_against_truth
from tests.conftest import REPO
from tests.refserver.harness import refserver_fixture  # noqa: F401  (the `refserver` fixture)

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"


def sse_body(rng: random.Random, n: int, usage: bool, bad_at: int | None) -> bytes:
    """n chat chunks (a running usage count, or none), reasoning now and
    then, a finish reason at the end; a malformed event at `bad_at`."""
    out = []
    for i in range(n):
        delta = {"reasoning_content": f"r{i}"} if rng.random() < 0.1 else {"content": f" w{i}"}
        obj: dict = {"choices": [{"delta": delta, "finish_reason": "length" if i == n - 1 else None}]}
        if usage:
            obj["usage"] = {"completion_tokens": i + 1, "prompt_tokens": 9}
        out.append(b"data: " + (b"{oops" if i == bad_at else json.dumps(obj).encode()) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def reads_of(rng: random.Random, data: bytes) -> list[bytes]:
    """The bytes as a socket might return them: split anywhere."""
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, len(data) // 300)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


async def feed_all(reads: list[bytes], spill: tuple | None, seen: list[int]) -> StreamResult:
    """Feed the reads one loop pass apart (stamps 1000, 1001, ...), noting how
    many raw events the result held after each."""
    result = StreamResult(spill=spill)
    stream = SseStream(result, asyncio.get_running_loop().create_future())
    for k, data in enumerate(reads):
        stream.feed(data, 1000 + k)
        seen.append(len(result.chunks))
        await asyncio.sleep(0)
    return result


def same(a: ParsedStream, b: ParsedStream) -> bool:
    """Field by field, arrays by value."""
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
               for x, y in ((getattr(a, f.name), getattr(b, f.name)) for f in fields(a)))


@pytest.mark.parametrize("seed", range(12))
def test_parsed_as_it_runs_or_once_ended_the_record_is_the_same(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 5, 300, 2000])
    bad_at = rng.randrange(n) if seed % 4 == 3 else None
    reads = reads_of(rng, HEAD + sse_body(rng, n, usage=seed % 2 == 0, bad_at=bad_at))
    every = rng.choice([1, 7, 64, 500])

    async def main():
        whole = await feed_all(reads, None, [])
        live = LiveParser(n)
        spilled = await feed_all(reads, (every, live.take), [])
        return whole, spilled, await live.finish(spilled.chunks)

    whole, spilled, parsed = asyncio.run(main())
    assert same(parsed, parse_events(whole.chunks, n))
    assert spilled.done and whole.done
    if bad_at is None:
        assert parsed.error is None and len(parsed.chunk_ns) == n
    else:  # the events before the malformed one, and the error
        assert parsed.error is not None and parsed.error.startswith("malformed SSE event")
        assert len(parsed.chunk_ns) == bad_at


def test_a_long_stream_holds_at_most_its_share_of_raw_events() -> None:
    """20,000 events: the stream never holds as many raw events as its share,
    and they are parsed while it runs (loop callbacks), not all at its end."""
    rng = random.Random(1)
    n, share = 20_000, 256
    reads = reads_of(rng, HEAD + sse_body(rng, n, usage=True, bad_at=None))
    held: list[int] = []
    parsed_midway: list[int] = []

    problems: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx))
        live = LiveParser(n)
        result_task = asyncio.ensure_future(feed_all(reads, (share, live.take), held))
        while not result_task.done():
            parsed_midway.append(len(live.parser.chunk_ns))
            assert len(live.pending) <= 3  # the parser keeps up (two lists behind at most)
            await asyncio.sleep(0)
        result = result_task.result()
        live.take(result.chunks[:3])  # handed over just before the end: a step is due
        parsed = await live.finish(result.chunks[3:])
        for _ in range(3):
            await asyncio.sleep(0)  # no step left to run on an empty parser
        return parsed

    parsed = asyncio.run(main())
    assert problems == []
    assert max(held) < share
    assert parsed.chunk_tokens.tolist() == list(range(1, n + 1)) and parsed.error is None
    assert max(parsed_midway) >= n - 2 * share  # parsed as it came


def test_a_process_share_is_its_budget_over_its_streams() -> None:
    assert spill_at(128) * 128 <= liveparse.RAW_EVENT_BUDGET // 2
    assert spill_at(128) >= 7_500  # the default matrix's streams parse once ended
    assert spill_at(16_384) * 16_384 <= liveparse.RAW_EVENT_BUDGET // 2
    assert spill_at(10**6) == liveparse.MIN_SPILL
    assert spill_at(0) == spill_at(1) == liveparse.RAW_EVENT_BUDGET // 2


def _events(n: int) -> list[tuple[int, bytes]]:
    return [(i + 1, b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":%d}}'
             % (i + 1)) for i in range(n)]


def test_many_streams_handing_over_at_once_do_not_stall_the_loop(monkeypatch) -> None:
    """4,096 streams hand over 64 events each in one pass: a loop pass then
    parses at most PASS_QUOTA of them (one callback a stream parsed all
    262,144 at once: 16,384 streams blocked the loop for 5 s); past the
    budget it also parses what came beyond it, no more."""
    monkeypatch.setattr(liveparse, "RAW_EVENT_BUDGET", 200_000)
    per_pass: list[int] = []

    async def main() -> list:
        parsers = [LiveParser(None) for _ in range(4096)]
        for p in parsers:
            p.take(_events(64))
        queue = parsers[0].queue
        assert queue is not None and queue.held == 4096 * 64
        while queue.held:
            before = queue.held
            await asyncio.sleep(0)
            per_pass.append(before - queue.held)
        return [await p.finish([]) for p in parsers]

    parsed = asyncio.run(main())
    assert per_pass[0] == 4096 * 64 - 200_000 + liveparse.PASS_QUOTA  # what passed the budget
    assert max(per_pass[1:]) <= liveparse.PASS_QUOTA  # then at quota
    assert all(p.chunk_tokens.tolist() == list(range(1, 65)) for p in parsed)


PATCHED_CLI = """
import atexit, sys
import bench.measure.liveparse as lp
lp.RAW_EVENT_BUDGET, lp.MIN_SPILL = 32, 8
taken = [0]
take = lp.LiveParser.take
def counted(self, events):
    taken[0] += len(events)
    take(self, events)
lp.LiveParser.take = counted
atexit.register(lambda: print(f"HANDED OVER {taken[0]}", file=sys.stderr))
from bench.cli import main
sys.exit(main())
"""


def test_a_run_parsed_as_it_runs_matches_the_server_log(refserver, tmp_path) -> None:
    """`bench run` with a budget of 32 raw events (8 a stream at most): the
    cells' figures still match the reference server's send log exactly."""
    srv = refserver(tokens_per_s=200, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-c", PATCHED_CLI, "run", "--base-url", srv.base_url, "--out", str(out),
         *FAST, "--contexts", "256", "--concurrency", "1,4", "--max-output", "300"],
        env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    handed = int(res.stderr.rsplit("HANDED OVER ", 1)[1].split()[0])
    assert handed > 1000  # most events went through the live parser
    pages = check_against_truth(srv, out)
    assert {p["cell"]["status"] for p in pages.values()} == {"valid"}
