"""The streaming HTTP client: one non-blocking socket per request.

Why: httpx and the OpenAI SDK stamp events tens of ms late at 128 streams,
and even an asyncio Protocol stamps when the loop gets round to the socket,
1-2 ms late when 128 streams receive a decode step at once (shared/notes/
streaming-clients.md). So on Linux each read carries the kernel's receive
timestamp (SO_TIMESTAMPNS via `recvmsg`) moved to the monotonic clock; TLS is
decrypted with `ssl.MemoryBIO` and keeps those stamps. Elsewhere events are
stamped when read. Loops without add_reader (Windows' proactor) are not
supported, like the collector's signal handling there. SSE is split on
arrival; JSON is parsed after the stream, off the hot path. Public:
`StreamClient.post_stream()` -> `StreamResult`, and
`StreamClient.client_bound()` / `.load()` (see `LoopLagMonitor`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bench.monitor import ClientLoad, LoopLagMonitor

_MAX_ERROR_BODY = 2000
_MAX_HEAD = 65536
_RECV_SIZE = 262144
# SO_TIMESTAMPNS (== SCM_TIMESTAMPNS) is 35 in Linux's generic ABI; Python 3.11
# does not export it. A wrong value only means that no stamps come back.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35) if sys.platform == "linux" else None
_TIMESPEC = struct.Struct("@ll")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_mono = time.monotonic_ns


@dataclass
class StreamResult:
    status: int = 0
    send_ns: int = 0
    end_ns: int = 0
    events: list[tuple[int, bytes]] = field(default_factory=list)  # (arrival ns, data)
    body: bytes = b""  # non-streaming or error body
    error: str | None = None  # transport-level failure or HTTP error summary
    done: bool = False  # saw `data: [DONE]`
    cancelled: bool = False
    stamps: str = "loop"  # "kernel": arrival = the kernel's receive time; "loop": read time


class _RealtimeOffset:
    """CLOCK_REALTIME − CLOCK_MONOTONIC, since the kernel stamps packets on the
    realtime clock: the narrowest of a few bracketed reads, re-measured every
    second in case the system clock is stepped."""

    def __init__(self) -> None:
        self.offset = self.at = 0
        self.measure()

    def measure(self) -> None:
        best = (1 << 62, 0)
        for _ in range(5):
            a, r, b = _mono(), time.time_ns(), _mono()
            best = min(best, (b - a, r - (a + b) // 2))
        self.offset, self.at = best[1], _mono()

    def to_mono(self, sec: int, nsec: int, now: int) -> int:
        if now - self.at > 1_000_000_000:
            self.measure()
        return sec * 1_000_000_000 + nsec - self.offset


_clock = _RealtimeOffset()


# ---- did the client keep up? ---------------------------------------------


class _SseStream:
    """HTTP/1.1 response reader: status line, headers, chunked, sized or
    close-delimited body, SSE events. `feed(data, stamp)` gets bytes with the
    arrival time of their last byte; an event gets the stamp of the bytes
    completing it, so chunks are passed on as soon as any of them arrives."""

    def __init__(self, result: StreamResult, finished: asyncio.Future) -> None:
        self.r, self.finished = result, finished
        self.head = self.body_buf = self.sse_buf = b""
        self.headers_done = self.chunked = self.is_sse = False
        self.length: int | None = None
        self.received = self.data_left = self.crlf_left = 0  # body bytes; of the chunk
        self.last_rx_ns = self.n_events = self.last_stamp = 0

    @property
    def producing(self) -> bool:
        """Tokens are flowing. A role-only chunk may precede the first token,
        so that is certain only from the second event on."""
        return self.n_events >= 2

    def feed(self, data: bytes, stamp: int) -> None:
        if self.finished.done():
            return  # e.g. the trailer after the last chunk
        if not self.headers_done:
            self.head += data
            sep = self.head.find(b"\r\n\r\n")
            if sep < 0:
                if len(self.head) > _MAX_HEAD:
                    self._fail("HTTP response head too large")
                return
            data = self.head[sep + 4 :]
            self._parse_head(self.head[:sep])
            self.head = b""
            if self.finished.done():
                return
        if self.chunked:
            self._dechunk(data, stamp)
            return
        self.received += len(data)
        self._body(data, stamp)
        if self.length is not None and self.received >= self.length:
            self._complete()

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        try:
            self.r.status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            return self._fail("malformed HTTP status line")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self.chunked = True
            elif name == b"content-type" and b"text/event-stream" in value:
                self.is_sse = True
            elif name == b"content-length" and value.isdigit():
                self.length = int(value)
        self.headers_done = True
        if self.chunked:
            self.length = None
        elif self.length == 0:
            self._complete()

    def _dechunk(self, data: bytes, stamp: int) -> None:
        buf = self.body_buf + data if self.body_buf else data
        pos, n, parts, ended = 0, len(buf), [], False
        while pos < n:
            if self.data_left:  # inside a chunk: pass on what came
                take = min(self.data_left, n - pos)
                parts.append(buf[pos : pos + take])
                pos += take
                self.data_left -= take
                if self.data_left:
                    break
                self.crlf_left = 2
            if self.crlf_left:
                take = min(self.crlf_left, n - pos)
                pos += take
                self.crlf_left -= take
                if self.crlf_left:
                    break
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            try:
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                return self._fail("malformed HTTP chunk size")
            pos = eol + 2
            if size == 0:
                ended = True
                break
            self.data_left = size
        self.body_buf = b"" if ended else buf[pos:]
        if parts:
            self._body(parts[0] if len(parts) == 1 else b"".join(parts), stamp)
        if ended:
            self._complete()

    def _body(self, data: bytes, stamp: int) -> None:
        if not self.is_sse or self.r.status != 200:
            if len(self.r.body) < _MAX_ERROR_BODY:
                self.r.body += data
            return
        buf = self.sse_buf + data if self.sse_buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self.sse_buf = events.pop()
        if not events:
            return
        stamp = self.last_stamp = max(stamp, self.last_stamp)  # in order, whatever the offset
        append = self.r.events.append
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                payload = event[6:]  # the common case: one `data: ` line
            else:
                payload = b"\n".join(
                    line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if payload == b"[DONE]":
                self.r.done = True
            elif payload:
                append((stamp, payload))
                self.n_events += 1

    def close_transport(self) -> None:
        """Drop the connection (idempotent; the transport overrides it)."""

    def _complete(self) -> None:
        self.r.end_ns = self.r.end_ns or _mono()
        self.close_transport()
        if not self.finished.done():
            self.finished.set_result(None)

    def _fail(self, reason: str) -> None:
        self.r.error = self.r.error or reason
        self._complete()

    def lost(self, exc: BaseException | None) -> None:
        """The peer closed or reset the connection."""
        if self.finished.done():
            return
        if self.headers_done and not self.chunked and self.length is None and exc is None:
            self._complete()  # body delimited by close
        elif not self.r.done and not self.r.cancelled:
            self._fail(f"connection lost mid-stream ({exc or 'closed by server'})")
        else:
            self._complete()


class _SocketStream(_SseStream):
    """Reads its socket from the loop's reader callback with `recvmsg_into`;
    a read's stamp is the kernel's receive time of the last packet it returns.
    TLS records are decrypted in memory, so they keep those stamps."""

    def __init__(self, result: StreamResult, finished: asyncio.Future, sock: socket.socket,
                 loop: asyncio.AbstractEventLoop, buf: bytearray, monitor: LoopLagMonitor,
                 tls: tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO] | None = None) -> None:
        super().__init__(result, finished)
        self.sock, self.loop, self.monitor, self.tls = sock, loop, monitor, tls
        self.buf, self.view = buf, memoryview(buf)
        self.reading = False
        self.kernel_stamps = 0

    def start(self) -> None:
        self.loop.add_reader(self.sock.fileno(), self.on_readable)
        self.reading = True
        if self.tls is not None and self.tls[1].pending:
            self._decrypt(b"", _mono())  # records that came with the handshake

    def on_readable(self) -> None:
        while not self.finished.done():
            try:
                n, anc, _flags, _addr = self.sock.recvmsg_into([self.view], _ANC_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                return self.lost(exc)
            self.last_rx_ns = now = _mono()
            if n == 0:
                return self.lost(None)
            stamp, delay = now, -1
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
                    k = _clock.to_mono(*_TIMESPEC.unpack_from(cdata), now)
                    # a sane stamp lies between the request and now, give or take
                    # the offset's error; anything else keeps the read time
                    if self.r.send_ns - 1_000_000 <= k <= now + 1_000_000:
                        stamp = max(self.r.send_ns, min(k, now))
                        delay = now - stamp
                        self.kernel_stamps += 1
            before = self.n_events
            if self.tls is None:
                self.feed(bytes(self.view[:n]), stamp)
            else:
                self._decrypt(bytes(self.view[:n]), stamp)
            self.monitor.read(now, delay, self.n_events - before)
            if n < len(self.buf):
                return

    def _decrypt(self, data: bytes, stamp: int) -> None:
        assert self.tls is not None
        tls, inbio, outbio = self.tls
        inbio.write(data)
        parts: list[bytes] = []
        try:
            while chunk := tls.read(_RECV_SIZE):
                parts.append(chunk)
            eof = True  # b"": the peer closed
        except ssl.SSLWantReadError:
            eof = False
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

    def close_transport(self) -> None:
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


class StreamClient:
    """Posts JSON to one OpenAI-compatible server and reads SSE streams.

    `ssl_context` replaces the default (verifying) one for https;
    `kernel_stamps=False` stamps events when read (for comparisons).
    A stream fails when no bytes come for `stall_timeout_s` once tokens
    flow, or when its first token has not come `ttft_timeout_s` after the
    request: a long prompt queued behind others can take minutes to prefill,
    and servers send nothing meanwhile."""

    def __init__(self, base_url: str, api_key: str | None = None, stall_timeout_s: float = 60.0,
                 ssl_context: ssl.SSLContext | None = None, kernel_stamps: bool = True,
                 ttft_timeout_s: float = 900.0) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--base-url: expected http(s)://host[:port][/path], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        https = parts.scheme == "https"
        self.ssl = (ssl_context or ssl.create_default_context()) if https else None
        self._auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.stall_timeout_s = stall_timeout_s
        self.ttft_timeout_s = ttft_timeout_s
        self.kernel_stamps = kernel_stamps and SO_TIMESTAMPNS is not None and _ANC_SIZE > 0
        self.monitor = LoopLagMonitor()
        self._buf = bytearray(_RECV_SIZE)  # one loop thread: shared by every read
        self._addrs: list | None = None
        self._active = 0

    def client_bound(self, start_ns: int, end_ns: int) -> bool:
        """True when this client could not keep up during [start_ns, end_ns]
        (monotonic ns); figures and thresholds: `load()`, `LoopLagMonitor`."""
        return self.monitor.client_bound(start_ns, end_ns)

    def load(self, start_ns: int, end_ns: int) -> ClientLoad:
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
                    finished: asyncio.Future, data: bytes) -> _SocketStream:
        """Connect (and shake hands), send the request, start reading."""
        sock = await self._connect(loop)
        try:
            tls = None
            if self.ssl is not None:
                tls = await self._handshake(loop, sock)
                tls[0].write(data)
                data = tls[2].read()
            stream = _SocketStream(result, finished, sock, loop, self._buf, self.monitor, tls)
            result.send_ns = stream.last_rx_ns = _mono()
            await loop.sock_sendall(sock, data)
            stream.start()
            return stream
        except BaseException:
            sock.close()
            raise

    async def post_stream(
        self, path: str, payload: dict, request_id: str, cancel: asyncio.Event | None = None,
        on_start: Callable[[_SocketStream], object] | None = None,
    ) -> StreamResult:
        """Send one streaming request and read it to the end, a failure, a
        stall longer than stall_timeout_s, or until `cancel` is set."""
        loop = asyncio.get_running_loop()
        self._active += 1
        self.monitor.ensure_running(loop)  # ticks while streams are open
        try:
            return await self._post(loop, path, payload, request_id, cancel, on_start)
        finally:
            self._active -= 1
            if not self._active:
                self.monitor.stop()

    async def _post(self, loop: asyncio.AbstractEventLoop, path: str, payload: dict,
                    request_id: str, cancel: asyncio.Event | None,
                    on_start: Callable[[_SocketStream], object] | None) -> StreamResult:
        result = StreamResult()
        finished: asyncio.Future = loop.create_future()
        data = self._request(path, json.dumps(payload).encode(), request_id)
        where = f"{self.host}:{self.port}"
        try:
            stream = await asyncio.wait_for(self._open(loop, result, finished, data),
                                            self.stall_timeout_s)
        except ssl.SSLError as exc:
            result.error = f"TLS handshake with {where} failed ({exc.reason or exc})"
        except TimeoutError:
            result.error = f"cannot connect to {where} (timed out)"
        except OSError as exc:
            result.error = f"cannot connect to {where} ({exc.strerror or exc})"
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
