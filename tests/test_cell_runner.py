"""The cell runner's event-loop manners and its drain between cells, each
seen wrong on a real engine on a GPU: a finished stream parsed in one piece
stalled every other stream's reads, and a llama-server whose loop stalled
for 33 s was taken for gone, so the next cell started on a busy server."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest

from bench.cells import CellRunner, Settings
from bench.chunks import parse_events
from bench.engines import ServerInfo
from bench.plan import Cell
from bench.sampler import MetricsSampler
from bench.stream import StreamResult
from rundir.contract import DECODE, METRIC_RUNNING, METRIC_WAITING, PURPOSE_MEASURE
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
        rec = await runner()._record(cell, "r1", PURPOSE_MEASURE, 0, result, 4096)
        parsing = False
        tick.cancel()
        return rec

    rec = asyncio.run(main())
    whole = parse_events(result.chunks)
    assert rec.chunk_tokens == whole.chunk_tokens and rec.chunk_ns == whole.chunk_ns
    assert rec.tokens == 4096 and rec.prompt_tokens == 7 and rec.error is None
    assert ticks_while_parsing >= 4096 // 128 - 1  # the loop ran between slices


def test_an_error_inside_the_stream_is_found_when_sliced() -> None:
    result = long_stream(1000)
    result.chunks[700] = (5000, b'{"error": {"message": "engine died"}}')
    rec = asyncio.run(runner()._record(Cell(DECODE, 1024, 8), "r1", PURPOSE_MEASURE, 0, result, 4096))
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
