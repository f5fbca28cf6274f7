"""The cell runner's event-loop manners and its drain between cells, each
seen wrong on a real engine on a GPU: a finished stream parsed in one piece
stalled every other stream's reads, and a llama-server whose loop stalled
for 33 s was taken for gone, so the next cell started on a busy server."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from bench.core.plan import Cell
from bench.measure.cells import CellRunner, Settings
from bench.measure.chunks import parse_events
from bench.measure.liveparse import LiveParser
from bench.measure.stream import StreamResult
from bench.server.engines import ServerInfo
from bench.server.sampler import MetricsSampler
from bench.workload.prompts import Prompt
from rundir.contract import (
    DECODE,
    ERROR,
    METRIC_RUNNING,
    METRIC_WAITING,
    OVER_CAPACITY,
    PENDING,
    PURPOSE_MEASURE,
    PURPOSE_PREFIX_FILL,
)
from tests.refserver.harness import refserver_fixture  # noqa: F401


def runner(sampler=None, **settings) -> CellRunner:
    info = ServerInfo(base_url="http://127.0.0.1:9", engine="vllm", model="m", has_metrics=True)
    return CellRunner(info, None, None, sampler, Settings(**settings), lambda text: text)


def long_stream(n: int) -> StreamResult:
    events = [(1000 + i, json.dumps({"choices": [{"delta": {"content": f"w{i} "}}],
                                     "usage": {"completion_tokens": i + 1}}).encode())
              for i in range(n)]
    events.append((1000 + n, json.dumps({"choices": [], "usage": {
        "completion_tokens": n, "prompt_tokens": 7}}).encode()))
    return StreamResult(status=200, send_ns=1, end_ns=2000 + n, chunks=events, done=True)


def test_a_finished_stream_is_parsed_without_holding_the_loop() -> None:
    result = long_stream(4096)
    cell = Cell(DECODE, 1024, 8)
    ticks_while_parsing = 0
    parsing = False

    async def ticker() -> None:
        nonlocal ticks_while_parsing
        for _ in range(10_000):
            ticks_while_parsing += parsing
            await asyncio.sleep(0)

    async def main():
        nonlocal parsing
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        parsing = True
        rec = await runner()._record(cell, "r1", PURPOSE_MEASURE, 0, result, LiveParser(4096))
        parsing = False
        tick.cancel()
        return rec

    rec = asyncio.run(main())
    whole = parse_events(result.chunks)
    assert rec.chunk_tokens.tolist() == whole.chunk_tokens.tolist()
    assert rec.chunk_ns.tolist() == whole.chunk_ns.tolist()
    assert rec.tokens == 4096 and rec.prompt_tokens == 7 and rec.error is None
    assert ticks_while_parsing >= 4096 // 128 - 1  # the loop ran between slices


def test_an_error_inside_the_stream_is_found_when_sliced() -> None:
    result = long_stream(1000)
    result.chunks[700] = (5000, b'{"error": {"message": "engine died"}}')
    rec = asyncio.run(runner()._record(Cell(DECODE, 1024, 8), "r1", PURPOSE_MEASURE, 0, result,
                                      LiveParser(4096)))
    assert rec.error == "server error mid-stream: engine died"
    assert rec.tokens == 700


class ScriptedSampler:
    """Answers drain_state from a script, then keeps giving its last answer."""

    def __init__(self, *states: str) -> None:
        self.states = list(states)
        self.asked = 0

    def drain_state(self) -> str:
        self.asked += 1
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    @property
    def enabled(self) -> bool:
        return True


def test_drain_waits_through_a_busy_server() -> None:
    sampler = ScriptedSampler("busy", "busy", "busy", "busy", "idle")
    assert asyncio.run(runner(sampler, drain_timeout_s=30)._drain()) is True
    assert sampler.asked == 5


def test_drain_gives_up_on_a_server_that_is_gone() -> None:
    sampler = ScriptedSampler("busy", "gone", "gone", "gone", "idle")
    assert asyncio.run(runner(sampler, drain_timeout_s=30)._drain()) is True
    assert sampler.asked == 4  # three in a row, then nothing to drain


def test_drain_reports_a_server_still_busy_at_its_timeout() -> None:
    sampler = ScriptedSampler("busy")
    assert asyncio.run(runner(sampler, drain_timeout_s=1)._drain()) is False


@pytest.fixture
def silent_server():
    """Accepts connections and never answers, like a server whose metrics
    wait behind a stalled engine loop."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except TimeoutError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


def sampler_for(base_url: str) -> MetricsSampler:
    info = ServerInfo(base_url=base_url, engine="vllm", model="m", has_metrics=True,
                      gauges={METRIC_RUNNING: "vllm:num_requests_running",
                              METRIC_WAITING: "vllm:num_requests_waiting"})
    return MetricsSampler(info, None, timeout_s=0.5)


def test_drain_state_of_real_servers(refserver, silent_server) -> None:
    assert sampler_for(silent_server).drain_state() == "busy"
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert sampler_for(f"http://127.0.0.1:{port}").drain_state() == "gone"
    srv = refserver(tokens_per_s=200)
    assert sampler_for(srv.base_url).drain_state() == "idle"


class ScriptedClient:
    """A server in miniature for whole decode cells: prefix fills answer at
    once, a measured stream produces tokens until the runner cancels it (or
    fails, when `fail_stream` names its slot). Every request is logged."""

    def __init__(self, fill_error: str | None = None, fail_stream: int | None = None) -> None:
        self.fill_error = fill_error
        self.fail_stream = fail_stream
        self.sent: list[tuple[str, str, int]] = []  # (request id, prompt text, max_tokens)

    async def post_stream(self, path, payload, rid, cancel=None, on_start=None, spill=None,
                          at_ns=None) -> StreamResult:
        text, max_tokens = payload["messages"][-1]["content"], payload["max_tokens"]
        self.sent.append((rid, text, max_tokens))
        if max_tokens == 1:  # a prefix fill
            if self.fill_error:
                return StreamResult(status=400, send_ns=1, end_ns=2, error=self.fill_error)
            return long_stream(1)
        if on_start is not None:
            on_start(Producing())
        if self.fail_stream is not None and text.endswith(f"s{self.fail_stream}"):
            return StreamResult(status=200, send_ns=1, end_ns=2, error="connection reset")
        sent_ns = time.monotonic_ns()
        await cancel.wait()
        # tokens spread evenly from the send to the cancel, so the window holds most of them
        step = (time.monotonic_ns() - sent_ns) // 100
        events = [(sent_ns + (i + 1) * step,
                   json.dumps({"choices": [{"delta": {"content": f"w{i} "}}],
                               "usage": {"completion_tokens": i + 1}}).encode()) for i in range(99)]
        return StreamResult(status=200, send_ns=sent_ns, end_ns=time.monotonic_ns(), chunks=events,
                            cancelled=True)

    def client_bound_reason(self, start_ns, end_ns, tbt_ms, table) -> None:
        return None


class Producing:
    producing = True


class ScriptedPrompts:
    run_tag = "t"
    can_tokenize = False

    def build(self, context: int, tag: str) -> Prompt:
        return Prompt(f"prompt {tag}", context)

    def variant(self, base: Prompt, base_tag: str, tag: str) -> Prompt:
        return Prompt(f"prompt {tag}", base.tokens)


class NoSampler:
    enabled = False


def decode_cell(client: ScriptedClient, interrupted: asyncio.Event | None = None):
    info = ServerInfo(base_url="http://127.0.0.1:9", engine="vllm", model="m")
    cells = CellRunner(info, client, ScriptedPrompts(), NoSampler(),
                       Settings(duration_s=0.05, stable_s=0.0, max_output=4096), lambda text: text)
    return asyncio.run(cells.decode(Cell(DECODE, 1024, 3), interrupted or asyncio.Event()))


def test_a_decode_cell_warms_each_prefix_then_starts_one_stream_per_slot() -> None:
    client = ScriptedClient()
    outcome = decode_cell(client)
    fills = [("t-0", "prompt d1024-c3-s0", 1), ("t-1", "prompt d1024-c3-s1", 1),
             ("t-2", "prompt d1024-c3-s2", 1)]
    streams = [("t-3", "prompt d1024-c3-s0", 4096), ("t-4", "prompt d1024-c3-s1", 4096),
               ("t-5", "prompt d1024-c3-s2", 4096)]
    assert client.sent == fills + streams  # nothing restarts: every stream ran into the window's end
    assert [r.purpose for r in outcome.records] == [PURPOSE_PREFIX_FILL] * 3 + [PURPOSE_MEASURE] * 3
    assert sorted(r.stream_index for r in outcome.records[3:]) == [0, 1, 2]
    assert outcome.table.num_rows == 6
    start, end = outcome.window
    assert end - start == 50_000_000 and outcome.warmup_s >= 0


def test_a_refused_prefix_ends_the_cell_before_any_stream() -> None:
    client = ScriptedClient(fill_error="HTTP 400: maximum context length is 512 tokens")
    outcome = decode_cell(client)
    assert [max_tokens for _, _, max_tokens in client.sent] == [1, 1, 1]
    assert outcome.status == OVER_CAPACITY and outcome.window is None
    assert outcome.reason.startswith("server refused the context: HTTP 400")


def test_a_failed_prefix_fill_is_an_error_of_the_warm_up() -> None:
    outcome = decode_cell(ScriptedClient(fill_error="connection reset"))
    assert outcome.status == ERROR and outcome.reason == "prefix warm-up failed: connection reset"


def test_an_interrupt_during_the_warm_up_leaves_the_cell_pending() -> None:
    interrupted = asyncio.Event()
    interrupted.set()
    client = ScriptedClient()
    outcome = decode_cell(client, interrupted)
    assert len(client.sent) == 3 and outcome.status == PENDING and outcome.window is None


def test_a_stream_that_fails_ends_the_window_and_is_not_restarted() -> None:
    client = ScriptedClient(fail_stream=2)
    outcome = decode_cell(client)
    assert [rid for rid, _, _ in client.sent] == [f"t-{i}" for i in range(6)]
    assert outcome.status == ERROR and "connection reset" in outcome.reason
    start, end = outcome.window
    assert start < end <= start + 50_000_000
