"""The streaming HTTP client: one non-blocking socket per request.

Why: httpx and the OpenAI SDK stamp events tens of ms late at 128 streams,
and even an asyncio Protocol stamps when the loop gets round to the socket,
1-2 ms late when 128 streams receive a decode step at once
(docs/performance.md, "Client fidelity"). So on Linux each read carries the kernel's receive
timestamp (SO_TIMESTAMPNS via `recvmsg`) moved to the monotonic clock; TLS is
decrypted with `ssl.MemoryBIO` and keeps those stamps. Elsewhere events are
stamped when read. Loops without add_reader (Windows' proactor) are not
supported, like the collector's signal handling there.

A kernel stamp stays exact only while a packet is read before the stream's
next one arrives (TCP merges waiting packets and keeps the newest stamp), so
every socket the loop reports ready is read first, and the bytes are decrypted
and split into SSE events (bench/measure/sse.py) once all of them have been read;
JSON is parsed after the stream, off the hot path. Public:
`StreamClient.post_stream()` -> `StreamResult`, and
`StreamClient.client_bound_reason()` (see bench/measure/monitor.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pyarrow as pa

from bench.core.auth import bearer_header_line
from bench.core.duetimer import until_ns
from bench.core.sources import IP_BIND_ADDRESS_NO_PORT, OUT_OF_PORTS, out_of_ports, port_range
from bench.measure.kernelstamps import ANC_SIZE as _ANC_SIZE
from bench.measure.kernelstamps import CLOCK as _clock
from bench.measure.kernelstamps import SANE_NS as _SANE_NS
from bench.measure.kernelstamps import SO_TIMESTAMPNS
from bench.measure.kernelstamps import TIMESPEC as _TIMESPEC
from bench.measure.monitor import ClientLoad, LoopLagMonitor
from bench.measure.sse import SseStream, StreamResult
from bench.measure.stamp_bounds import table_bounds

__all__ = ["SO_TIMESTAMPNS", "StreamClient", "StreamResult"]

_RECV_SIZE = 262144
_TLS_READ = 16384  # a TLS record's plaintext is at most 16 KiB
# Reads this large mean the client is behind anyway (a flood): decoding them at
# once keeps them in cache, which deferring megabytes over 128 sockets did not.
_DECODE_NOW = 32768
_mono = time.monotonic_ns


class _Decoder:
    """The reads of one loop pass, decoded after every ready socket was read.

    Why: a burst of 128 streams receiving at once took 1.4 ms (plain) to 2.4
    ms (TLS) to read *and* decode socket by socket, so the last sockets were
    read that much later; on a shared core, after a wake-up delay of a few
    ms, that pushed them past the next token (5 ms at 200 tok/s), and TCP
    merged their packets under the newer stamp. Reading all first takes
    ~5 µs a socket. `call_soon` runs after the loop's current pass over
    ready sockets (asyncio and uvloop alike)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.streams: list[_SocketStream] = []

    def add(self, stream: _SocketStream) -> None:
        if not self.streams:
            self.loop.call_soon(self.run)
        self.streams.append(stream)

    def run(self) -> None:
        streams, self.streams = self.streams, []
        for stream in streams:
            stream.decode()


class _SocketStream(SseStream):
    """Reads its socket from the loop's reader callback with `recvmsg_into`;
    a read's stamp is the kernel's receive time of the last packet it returns.
    The bytes are decoded (TLS decrypted in memory, SSE split) by `decode()`,
    right after the loop's pass over ready sockets, with the read's stamp."""

    def __init__(self, result: StreamResult, finished: asyncio.Future, sock: socket.socket,
                 loop: asyncio.AbstractEventLoop, buf: bytearray, monitor: LoopLagMonitor,
                 decoder: _Decoder,
                 tls: tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO] | None = None) -> None:
        super().__init__(result, finished)
        self.sock, self.loop, self.monitor, self.tls = sock, loop, monitor, tls
        self.buf, self.view, self.decoder = buf, memoryview(buf), decoder
        self.reading = False
        self.kernel_stamps = 0
        # undecoded reads: (bytes, stamp, read time, kernel delay); data None:
        # the connection ended there (`self.end`: the error, or None: closed)
        self.reads: list[tuple[bytes | None, int, int, int]] = []
        self.end: OSError | None = None

    def start(self) -> None:
        self.loop.add_reader(self.sock.fileno(), self.on_readable)
        self.reading = True
        if self.tls is not None and self.tls[1].pending:
            self._decrypt(b"", _mono())  # records that came with the handshake

    def on_readable(self) -> None:
        queued, got = bool(self.reads), 0
        while True:
            try:
                n, anc, _flags, _addr = self.sock.recvmsg_into([self.view], _ANC_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._stop_reading()
                self.end = exc
                self.reads.append((None, 0, 0, 0))
                break
            self.last_rx_ns = now = _mono()
            if n == 0:
                self._stop_reading()  # a closed socket stays readable
                self.reads.append((None, 0, 0, 0))
                break
            stamp, delay = now, -1
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
                    # a sane stamp lies between the request and now, give or take
                    # the offset's error; anything else keeps the read time
                    sec, nsec = _TIMESPEC.unpack_from(cdata)
                    k = _clock.to_mono(sec, nsec, now)
                    if not self.r.send_ns - _SANE_NS <= k <= now + _SANE_NS:
                        k = _clock.retry(sec, nsec, self.r.send_ns, now)  # -1: still not
                    if k >= 0:
                        stamp = max(self.r.send_ns, min(k, now))
                        delay = now - stamp
                        self.kernel_stamps += 1
            self.reads.append((bytes(self.view[:n]), stamp, now, delay))
            got += n
            if n < len(self.buf):
                break
        if got >= _DECODE_NOW:
            self.decode()
        elif self.reads and not queued:
            self.decoder.add(self)

    def decode(self) -> None:
        """Pass the queued reads on, in order, each with its own stamp. Runs
        for many sockets in one callback: a bug of ours fails its stream with
        one line, not the other streams."""
        try:
            self._decode()
        except Exception as exc:
            self.reads.clear()
            self._fail(f"client error while decoding the response ({exc!r})")

    def _decode(self) -> None:
        reads, self.reads = self.reads, []
        for data, stamp, now, delay in reads:
            if data is None:
                self.lost(self.end)
                continue
            if self.finished.done():
                continue  # e.g. the trailer after the last chunk
            before = self.n_events
            if self.tls is None:
                self.feed(data, stamp)
            else:
                self._decrypt(data, stamp)
            self.monitor.read(now, delay, self.n_events - before)

    def _decrypt(self, data: bytes, stamp: int) -> None:
        """Decrypt what came and pass it on. Stops as soon as the memory BIO is
        empty and nothing is buffered: the extra read that would only raise
        SSLWantReadError (an exception whose message the ssl module builds)
        cost as much as decrypting the record, on every read."""
        assert self.tls is not None
        tls, inbio, outbio = self.tls
        if data:
            inbio.write(data)
        parts: list[bytes] = []
        eof = False
        try:
            while True:
                chunk = tls.read(_TLS_READ)
                if not chunk:
                    eof = True  # b"": the peer closed
                    break
                parts.append(chunk)
                if not inbio.pending and not tls.pending():
                    break
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            eof = True
        except ssl.SSLError as exc:
            return self.lost(exc)
        if outbio.pending:  # e.g. a key update; best effort
            try:
                self.sock.send(outbio.read())
            except OSError:
                pass
        if parts:
            self.feed(parts[0] if len(parts) == 1 else b"".join(parts), stamp)
        if eof:
            self.lost(None)

    def _stop_reading(self) -> None:
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.sock.fileno())

    def close_transport(self) -> None:
        self._stop_reading()
        self.sock.close()


class StreamClient:
    """Posts JSON to one OpenAI-compatible server and reads SSE streams.

    `ssl_context` replaces the default (verifying) one for https;
    `kernel_stamps=False` stamps events when read (for comparisons).
    A stream fails when no bytes come for `stall_timeout_s` once tokens
    flow, or when its first token has not come `ttft_timeout_s` after the
    request: a long prompt queued behind others can take minutes to prefill,
    and servers send nothing meanwhile. `source_addresses`: local addresses
    the connections are bound to in turn (bench/core/sources.py)."""

    def __init__(self, base_url: str, api_key: str | None = None, stall_timeout_s: float = 60.0,
                 ssl_context: ssl.SSLContext | None = None, kernel_stamps: bool = True,
                 ttft_timeout_s: float = 900.0, source_addresses: tuple[str, ...] = ()) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--base-url: expected http(s)://host[:port][/path], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        https = parts.scheme == "https"
        self.ssl = (ssl_context or ssl.create_default_context()) if https else None
        self._auth = bearer_header_line(api_key)
        self.stall_timeout_s = stall_timeout_s
        self.ttft_timeout_s = ttft_timeout_s
        self.kernel_stamps = kernel_stamps and SO_TIMESTAMPNS is not None and _ANC_SIZE > 0
        self.monitor = LoopLagMonitor()
        self._buf = bytearray(_RECV_SIZE)  # one loop thread: shared by every read
        self._decoder: _Decoder | None = None
        self._addrs: list | None = None
        self._active = 0
        self.sources = tuple(source_addresses)
        self._next_source = 0

    def client_bound_reason(self, start_ns: int, end_ns: int, tbt_ms: float | None,
                            requests: pa.Table | None = None) -> str | None:
        """Why this client could have moved a published figure of the cell
        measured over [start_ns, end_ns] (monotonic ns) by more than its
        displayed precision; None when it could not. `requests`: the cell's
        requests.parquet rows, whose stamps decide when every read carried a
        kernel stamp; `tbt_ms`: its median time between tokens (None: none
        measured), for the delay rule otherwise. The rule: bench/measure/monitor.py,
        `bound_reason`."""
        stamps = None if requests is None else table_bounds(requests, start_ns, end_ns)
        return self.monitor.client_bound_reason(start_ns, end_ns, tbt_ms, stamps)

    def client_bound(self, start_ns: int, end_ns: int) -> bool:
        """The old fixed-threshold flag (5 ms waits or stalls for 1% of the
        window). Cells are judged by `client_bound_reason`; this and `load()`
        remain for benchmarks/_fidelity_clients.py, which reports both."""
        return self.monitor.client_bound(start_ns, end_ns)

    def load(self, start_ns: int, end_ns: int) -> ClientLoad:
        """The figures behind `client_bound()`."""
        return self.monitor.load(start_ns, end_ns)

    def _request(self, path: str, body: bytes, request_id: str) -> bytes:
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-Id: {request_id}\r\n"
            f"{self._auth}Connection: close\r\n\r\n"
        )
        return head.encode() + body

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        if self._addrs is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._addrs = [(info[0], info[4]) for info in infos]
        last: OSError = OSError("no address")
        for family, addr in self._addrs:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                if self.sources:
                    self._bind_source(sock, family)
                await loop.sock_connect(sock, addr)
            except BaseException as exc:
                sock.close()
                if not isinstance(exc, OSError):
                    raise
                last = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.kernel_stamps:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # type: ignore[arg-type]
                except OSError:
                    self.kernel_stamps = False
            return sock
        self._addrs = None  # resolve again next time
        raise last

    def _bind_source(self, sock: socket.socket, family: int) -> None:
        """Bind to the next source address (the port is chosen at connect)."""
        source = self.sources[self._next_source % len(self.sources)]
        self._next_source += 1
        if (":" in source) != (family == socket.AF_INET6):
            return  # a source of the other family: the kernel chooses
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))

    async def _handshake(self, loop: asyncio.AbstractEventLoop, sock: socket.socket
                         ) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
        """TLS over memory BIOs, so that reads keep their kernel stamps."""
        assert self.ssl is not None
        inbio, outbio = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.ssl.wrap_bio(inbio, outbio, server_hostname=self.host)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outbio.pending:
                    await loop.sock_sendall(sock, outbio.read())
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    raise ConnectionError("closed during the TLS handshake") from None
                inbio.write(data)
        if outbio.pending:
            await loop.sock_sendall(sock, outbio.read())
        return tls, inbio, outbio

    async def _open(self, loop: asyncio.AbstractEventLoop, result: StreamResult,
                    finished: asyncio.Future, data: bytes, at_ns: int | None = None) -> _SocketStream:
        """Connect (and shake hands), send the request (at `at_ns` when given: a rate
        cell's scheduled time, the connection opened ahead of it), start reading."""
        sock = await self._connect(loop)
        try:
            tls = None
            if self.ssl is not None:
                tls = await self._handshake(loop, sock)
                tls[0].write(data)
                data = tls[2].read()
            if self._decoder is None or self._decoder.loop is not loop:
                self._decoder = _Decoder(loop)
            stream = _SocketStream(result, finished, sock, loop, self._buf, self.monitor,
                                   self._decoder, tls)
            if at_ns is not None:
                await until_ns(at_ns)
            result.send_ns = stream.last_rx_ns = _mono()
            await loop.sock_sendall(sock, data)
            stream.start()
            return stream
        except BaseException:
            sock.close()
            raise

    async def post_stream(
        self, path: str, payload: dict | bytes, request_id: str, cancel: asyncio.Event | None = None,
        on_start: Callable[[_SocketStream], object] | None = None,
        spill: tuple[int, Callable[[list[tuple[int, bytes]]], None]] | None = None,
        at_ns: int | None = None,
    ) -> StreamResult:
        """Send one streaming request and read it to the end, a failure, a
        stall longer than stall_timeout_s, or until `cancel` is set. With
        `spill` (n, taker) the events are handed to `taker` n at a time as
        they come (`StreamResult.spill`); the result keeps the rest. `payload`: the
        JSON body, or its bytes already encoded (a rate cell's, made ahead)."""
        loop = asyncio.get_running_loop()
        self._active += 1
        self.monitor.ensure_running(loop)  # ticks while streams are open
        try:
            return await self._post(loop, path, payload, request_id, cancel, on_start, spill, at_ns)
        finally:
            self._active -= 1
            if not self._active:
                self.monitor.stop()

    async def _post(self, loop: asyncio.AbstractEventLoop, path: str, payload: dict | bytes,
                    request_id: str, cancel: asyncio.Event | None,
                    on_start: Callable[[_SocketStream], object] | None,
                    spill: tuple[int, Callable[[list[tuple[int, bytes]]], None]] | None,
                    at_ns: int | None = None) -> StreamResult:
        result = StreamResult(spill=spill)
        finished: asyncio.Future = loop.create_future()
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        data = self._request(path, body, request_id)
        where = f"{self.host}:{self.port}"
        try:
            stream = await asyncio.wait_for(self._open(loop, result, finished, data, at_ns),
                                            self.stall_timeout_s)
        except ssl.SSLError as exc:
            result.error = f"TLS handshake with {where} failed ({exc.reason or exc})"
        except TimeoutError:
            result.error = f"cannot connect to {where} (timed out)"
        except OSError as exc:
            result.error = f"cannot connect to {where} ({exc.strerror or exc})"
            if exc.errno in OUT_OF_PORTS:
                result.error = out_of_ports(where, max(1, len(self.sources)), port_range())
        if result.error is not None:
            result.send_ns = result.send_ns or _mono()
            result.end_ns = _mono()
            return result
        if on_start is not None:
            on_start(stream)
        cancel_wait = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
        poll_s = max(0.01, min(1.0, self.stall_timeout_s / 4, self.ttft_timeout_s / 4))
        try:
            while not finished.done():
                waiters = [finished] + ([cancel_wait] if cancel_wait else [])
                await asyncio.wait(waiters, timeout=poll_s, return_when=asyncio.FIRST_COMPLETED)
                if finished.done():
                    break
                if cancel is not None and cancel.is_set():
                    result.cancelled = True  # closing the connection aborts it server-side
                    break
                now = _mono()
                if not stream.producing:
                    waited = (now - result.send_ns) / 1e9
                    if waited > self.ttft_timeout_s:
                        result.error = (f"no first token after {waited:.1f} s "
                                        f"(--ttft-timeout {self.ttft_timeout_s:g})")
                        break
                    continue
                idle = (now - stream.last_rx_ns) / 1e9
                if idle > self.stall_timeout_s:
                    result.error = f"stream stalled: no bytes for {idle:.1f} s"
                    break
        finally:
            if cancel_wait is not None:
                cancel_wait.cancel()
            if result.cancelled and stream.reading:
                # what already arrived is read, with its kernel stamps, before
                # the close drops it: a client behind at the window's end
                # would otherwise lose tokens that came inside the window
                stream.on_readable()
            if stream.reads:  # read before we stopped: their stamps count
                stream.decode()
            if result.cancelled and result.done and result.error is None:
                # its [DONE] was already there: it finished before the cancel and
                # was read late, so it counts as completed (read at end_ns), not
                # as cut; the stamp bounds then name the completions it may move
                result.cancelled = False
            result.end_ns = result.end_ns or _mono()
            stream.close_transport()
        if stream.kernel_stamps:
            result.stamps = "kernel"
        if result.error is None and result.status != 200 and not result.cancelled:
            result.error = f"HTTP {result.status}: {_error_text(result.body)}"
        return result


def _error_text(body: bytes) -> str:
    """The server's error message, one line, from an OpenAI-style error body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        text = str(err.get("message") or err) if isinstance(err, dict) else str(err)
    except ValueError:
        pass
    return " ".join(text.split())[:300] or "(empty body)"
