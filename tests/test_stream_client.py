"""Behaviour of the collector's stream client (bench/stream.py) against the
reference server and small in-test servers. No timing thresholds: these
check what the client does, benchmarks/client_fidelity.py how well."""

from __future__ import annotations

import asyncio
import random
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from bench.monitor import LoopLagMonitor
from bench.stream import StreamClient, StreamResult, _SseStream
from tests.refserver.harness import refserver_fixture  # noqa: F401  (the `refserver` fixture)

LINUX = sys.platform == "linux"
CHAT = "/v1/chat/completions"


def run(coro: Awaitable[Any]) -> Any:
    """On uvloop when installed, as the collector runs."""
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def payload(max_tokens: int = 20) -> dict:
    return {"model": "ref", "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


# ---- the parser, split at every byte --------------------------------------

SSE_EVENTS = [
    (b'data: {"a":1}\n\n', b'{"a":1}'),
    (b": keep-alive comment\n\n", None),
    (b"data: line one\ndata: line two\n\n", b"line one\nline two"),
    (b'data: {"crlf":true}\r\n\r\n', b'{"crlf":true}'),
    (b'data:{"nospace":2}\n\n', b'{"nospace":2}'),
    (b"data: [DONE]\n\n", None),
]


def _response() -> tuple[bytes, list[tuple[bytes, int]]]:
    """A chunked SSE response (one event split over two chunks, two events in
    one chunk) and, per expected payload, the offset of its last byte."""
    body, ends = b"", []
    for raw, expect in SSE_EVENTS:
        body += raw
        if expect is not None:
            ends.append((expect, len(body) - 1))
    cuts = [5, len(SSE_EVENTS[0][0]) + len(SSE_EVENTS[1][0]) + len(SSE_EVENTS[2][0]), len(body) - 3]
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    raw, where = bytearray(head), {}
    edges = [0, *cuts, len(body)]
    for a, b in zip(edges, edges[1:], strict=False):
        raw += b"%x;ext=1\r\n" % (b - a) if a == 0 else b"%x\r\n" % (b - a)
        for i in range(a, b):
            where[i] = len(raw) + i - a
        raw += body[a:b] + b"\r\n"
    raw += b"0\r\n\r\n"
    return bytes(raw), [(p, where[end]) for p, end in ends]


def _feed(parts: list[bytes]) -> tuple[StreamResult, bool]:
    loop = asyncio.new_event_loop()
    try:
        result, finished = StreamResult(), loop.create_future()
        stream = _SseStream(result, finished)
        for stamp, part in enumerate(parts, start=1):
            stream.feed(part, stamp)
        return result, finished.done()
    finally:
        loop.close()


def test_parser_any_two_way_split() -> None:
    full, expected = _response()
    for cut in range(len(full) + 1):
        result, finished = _feed([full[:cut], full[cut:]])
        assert finished and result.error is None and result.done and result.status == 200
        assert [p for _, p in result.events] == [p for p, _ in expected]
        # each event has the stamp of the part holding its last byte
        assert [s for s, _ in result.events] == [1 if end < cut else 2 for _, end in expected]


def test_parser_random_splits_keep_order() -> None:
    full, expected = _response()
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(full)), rng.randint(2, 40)))
        parts = [full[a:b] for a, b in zip([0, *cuts], [*cuts, len(full)], strict=True)]
        result, finished = _feed(parts)
        assert finished and [p for _, p in result.events] == [p for p, _ in expected]
        stamps = [s for s, _ in result.events]
        assert stamps == sorted(stamps)
        starts = [0, *cuts]
        assert stamps == [max(i for i, s in enumerate(starts, 1) if s <= end) for _, end in expected]


def test_parser_bad_chunk_size_is_an_error() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    result, finished = _feed([head + b"zz\r\ndata: x\n\n\r\n"])
    assert finished and result.error == "malformed HTTP chunk size"


# ---- against a socket server that dribbles bytes --------------------------


def test_socket_stream_split_at_arbitrary_boundaries() -> None:
    full, expected = _response()

    async def main() -> StreamResult:
        rng = random.Random(3)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            pos = 0
            while pos < len(full):
                step = rng.randint(1, 9)
                writer.write(full[pos : pos + step])
                await writer.drain()
                await asyncio.sleep(0.002)
                pos += step
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await StreamClient(f"http://127.0.0.1:{port}").post_stream("/x", {}, "r1")

    result = run(main())
    assert result.error is None and result.done
    assert [p for _, p in result.events] == [p for p, _ in expected]
    stamps = [s for s, _ in result.events]
    assert stamps == sorted(stamps) and result.send_ns <= stamps[0] <= stamps[-1] <= result.end_ns


# ---- against the reference server ------------------------------------------


def _streams(url: str, n: int, client: StreamClient | None = None, **kw: Any) -> list[StreamResult]:
    async def main() -> list[StreamResult]:
        c = client or StreamClient(url, **kw)
        return await asyncio.gather(*(c.post_stream(CHAT, payload(), f"r{i}") for i in range(n)))
    return run(main())


def test_events_in_order_with_kernel_stamps(refserver) -> None:
    srv = refserver(tokens_per_s=400, tokens_per_chunk=[1, 2, 3])
    results = _streams(srv.base_url, 4)
    truth = srv.truth_by_id(4)
    for i, r in enumerate(results):
        assert r.error is None and r.done and r.status == 200
        chunks = truth[f"r{i}"]["chunks"]
        assert len(r.events) == len(chunks) + 2  # role chunk, tokens, final usage
        stamps = [s for s, _ in r.events]
        assert stamps == sorted(stamps)
        assert r.send_ns <= stamps[0] and stamps[-1] <= r.end_ns <= time.monotonic_ns()
        if LINUX:
            assert r.stamps == "kernel"
        if r.stamps == "kernel":  # monotonic-clock values, never before the server sent
            for (stamp, _), (sent, _n, _cum) in zip(r.events[1:], chunks, strict=False):
                assert stamp >= sent - 1_000_000


def test_loop_stamps_when_kernel_stamps_are_off(refserver) -> None:
    srv = refserver(tokens_per_s=400)
    (r,) = _streams(srv.base_url, 1, kernel_stamps=False)
    assert r.error is None and r.done and r.stamps == "loop" and len(r.events) == 22


def test_plain_asyncio_loop_works(refserver) -> None:
    srv = refserver(tokens_per_s=400)
    client = StreamClient(srv.base_url)
    r = asyncio.run(client.post_stream(CHAT, payload(5), "a1"))
    assert r.error is None and r.done and len(r.events) == 7


def test_cancel_aborts_the_request(refserver) -> None:
    srv = refserver(tokens_per_s=100)

    async def main() -> StreamResult:
        client, cancel, live = StreamClient(srv.base_url), asyncio.Event(), []

        async def canceller() -> None:
            while not live or live[0].n_events < 3:
                if live and live[0].finished.done():
                    return  # failed: the asserts below say why
                await asyncio.sleep(0.005)
            assert live[0].last_rx_ns > 0
            cancel.set()

        task = asyncio.create_task(canceller())
        r = await client.post_stream(CHAT, payload(10000), "c1", cancel, on_start=live.append)
        await task
        return r

    r = run(main())
    assert r.cancelled and r.error is None and not r.done and len(r.events) >= 3
    (rec,) = srv.truth(min_records=1)
    assert rec["cancelled"] and rec["finish_reason"] is None  # the server saw the close


def test_stall_timeout(refserver) -> None:
    srv = refserver(tokens_per_s=200, stall_after_tokens=2, stall_s=30.0)
    (r,) = _streams(srv.base_url, 1, stall_timeout_s=0.3)
    assert r.error is not None and r.error.startswith("stream stalled")
    assert len(r.events) >= 2 and not r.done


@pytest.mark.parametrize("role_chunk", ["start", "first_token"])
def test_waiting_for_the_first_token_is_not_a_stall(refserver, role_chunk) -> None:
    """Servers send nothing (or only the role chunk) while a prompt is queued
    or prefilled; that wait answers to the TTFT limit, not the stall limit."""
    srv = refserver(tokens_per_s=200, ttft_ms=1200, role_chunk=role_chunk, default_max_tokens=5)
    (r,) = _streams(srv.base_url, 1, stall_timeout_s=0.3)
    assert r.error is None and r.done
    (r,) = _streams(srv.base_url, 1, stall_timeout_s=0.3, ttft_timeout_s=0.4)
    assert r.error is not None and r.error.startswith("no first token after 0.")
    assert "--ttft-timeout 0.4" in r.error and not r.done


def test_connection_reset_is_an_error(refserver) -> None:
    srv = refserver(tokens_per_s=400, reset_after_tokens=3)
    (r,) = _streams(srv.base_url, 1)
    assert r.error is not None and "connection lost mid-stream" in r.error and not r.done


def test_http_429_body_becomes_the_error(refserver) -> None:
    srv = refserver(status_every={"n": 1, "code": 429})
    (r,) = _streams(srv.base_url, 1)
    assert r.status == 429 and r.error == "HTTP 429: injected HTTP 429 (refserver)"
    assert r.events == []


def test_nothing_listening_is_an_error() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    (r,) = _streams(f"http://127.0.0.1:{port}", 1)
    assert r.error is not None and r.error.startswith(f"cannot connect to 127.0.0.1:{port}")


# ---- TLS -----------------------------------------------------------------------


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI to make a certificate")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_tls_stream_with_self_signed_server(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    full, expected = _response()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)

    async def main() -> tuple[StreamResult, StreamResult]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                writer.close()
                return
            for i in range(0, len(full), 37):  # several TLS records, some events split
                writer.write(full[i : i + 37])
                await writer.drain()
                await asyncio.sleep(0.002)
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server:
            trusted = StreamClient(url, ssl_context=ssl.create_default_context(cafile=str(cert)))
            ok = await trusted.post_stream("/x", {}, "t1")
            bad = await StreamClient(url, stall_timeout_s=5).post_stream("/x", {}, "t2")
            return ok, bad

    ok, bad = run(main())
    assert ok.error is None and ok.done and [p for _, p in ok.events] == [p for p, _ in expected]
    stamps = [s for s, _ in ok.events]
    assert stamps == sorted(stamps) and ok.send_ns <= stamps[0] <= stamps[-1] <= ok.end_ns
    if LINUX:
        assert ok.stamps == "kernel"
    assert bad.error is not None and bad.error.startswith("TLS handshake with 127.0.0.1")


# ---- client-bound detection ---------------------------------------------------

MS = 1_000_000


def test_client_bound_on_synthetic_read_delays() -> None:
    mon = LoopLagMonitor()
    t0 = 10**12
    for i in range(1000):  # 1 s of reads that waited 1 ms: keeping up
        mon.read(t0 + i * MS, 1 * MS, 2)
    assert not mon.client_bound(t0, t0 + 1000 * MS)
    t1 = t0 + 2000 * MS
    for i in range(1000):  # 5% of the events waited 12 ms in the kernel
        mon.read(t1 + i * MS, 12 * MS if i % 20 == 0 else 1 * MS, 2)
    load = mon.load(t1, t1 + 1000 * MS)
    assert load.client_bound and "waited" in (load.reason or "")
    assert load.late_event_fraction == pytest.approx(0.05) and load.read_delay_max_ms == 12
    assert not mon.client_bound(t0, t0 + 1000 * MS)  # the first window is unchanged
    for i in range(1000):  # reads without kernel stamps carry no delay
        mon.read(t1 + 5000 * MS + i * MS, -1, 1)
    assert not mon.client_bound(t1 + 5000 * MS, t1 + 6000 * MS)


def test_client_bound_on_synthetic_loop_stalls() -> None:
    mon = LoopLagMonitor()
    t0 = 10**12
    for i in range(500):  # a 2 ms timer, 1 ms late: normal
        mon.tick(t0 + i * 2 * MS, 1 * MS)
    assert not mon.client_bound(t0, t0 + 1000 * MS)
    mon.tick(t0 + 1500 * MS, 40 * MS)  # one 40 ms stall in a second: 4%
    load = mon.load(t0 + 1000 * MS, t0 + 2000 * MS)
    assert load.client_bound and "stalled" in (load.reason or "")
    assert load.loop_lag_max_ms == 40


def test_client_bound_sees_a_blocked_loop() -> None:
    async def main() -> tuple[bool, str | None]:
        client = StreamClient("http://127.0.0.1:9")
        client.monitor.ensure_running(asyncio.get_running_loop())
        start = time.monotonic_ns()
        for _ in range(5):
            time.sleep(0.05)  # the loop cannot run its timer meanwhile
            await asyncio.sleep(0.01)
        end = time.monotonic_ns()
        client.monitor.stop()
        return client.client_bound(start, end), client.load(start, end).reason

    bound, reason = run(main())
    assert bound and "stalled" in (reason or "")
