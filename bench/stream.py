"""The streaming HTTP client: one raw asyncio protocol per request.

Why not httpx or the OpenAI SDK: measured here (shared/notes/streaming-
clients.md), they cannot keep up with 128 streams and stamp events tens of
milliseconds late. This protocol stamps `time.monotonic_ns()` the moment
bytes arrive in `data_received`, splits them into SSE events and keeps the
raw payloads; JSON parsing happens after the stream, off the hot path.

The public surface is `StreamClient.post_stream()`, returning a
`StreamResult`; nothing else in the collector knows how bytes move.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_MAX_ERROR_BODY = 2000


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


class _SseProtocol(asyncio.Protocol):
    """HTTP/1.1 response reader: status line, headers, chunked or plain body,
    SSE events. Every event gets the arrival time of the bytes completing it."""

    def __init__(self, result: StreamResult, finished: asyncio.Future) -> None:
        self.r = result
        self.finished = finished
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.headers_done = False
        self.chunked = False
        self.is_sse = False
        self.body_buf = b""  # undecoded chunked bytes
        self.sse_buf = b""  # decoded body bytes not yet forming a whole event
        self.last_rx_ns = 0
        self.n_events = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        self.last_rx_ns = now
        if not self.headers_done:
            self.head += data
            sep = self.head.find(b"\r\n\r\n")
            if sep < 0:
                return
            data = self.head[sep + 4 :]
            self._parse_head(self.head[:sep])
            self.head = b""
        if self.chunked:
            self.body_buf += data
            self._dechunk(now)
        else:
            self._body(data, now)

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        try:
            self.r.status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            self._fail("malformed HTTP status line")
            return
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self.chunked = True
            elif name == b"content-type" and b"text/event-stream" in value:
                self.is_sse = True
        self.headers_done = True

    def _dechunk(self, now: int) -> None:
        buf = self.body_buf
        pos = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            try:
                size = int(buf[pos:eol].split(b";")[0], 16)
            except ValueError:
                self._fail("malformed HTTP chunk size")
                return
            if size == 0:
                self.body_buf = b""
                self._complete()
                return
            start = eol + 2
            if len(buf) < start + size + 2:
                break
            self._body(buf[start : start + size], now)
            pos = start + size + 2
        self.body_buf = buf[pos:]

    def _body(self, data: bytes, now: int) -> None:
        if not self.is_sse or self.r.status != 200:
            if len(self.r.body) < _MAX_ERROR_BODY:
                self.r.body += data
            return
        buf = self.sse_buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self.sse_buf = events.pop()
        for event in events:
            payload = b"\n".join(
                line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")
            )
            if not payload:
                continue
            if payload == b"[DONE]":
                self.r.done = True
                continue
            self.r.events.append((now, payload))
            self.n_events += 1

    def _complete(self) -> None:
        self.r.end_ns = time.monotonic_ns()
        if self.transport is not None:
            self.transport.close()
        if not self.finished.done():
            self.finished.set_result(None)

    def _fail(self, reason: str) -> None:
        if self.r.error is None:
            self.r.error = reason
        self._complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            if self.headers_done and not self.chunked and exc is None:
                self._complete()  # body delimited by close
            elif not self.r.done and not self.r.cancelled:
                self._fail(f"connection lost mid-stream ({exc or 'closed by server'})")
            else:
                self._complete()


class StreamClient:
    """Posts JSON to one OpenAI-compatible server and reads SSE streams."""

    def __init__(self, base_url: str, api_key: str | None = None, stall_timeout_s: float = 60.0):
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--base-url: expected http(s)://host[:port][/path], got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.stall_timeout_s = stall_timeout_s

    def _request(self, path: str, body: bytes, request_id: str) -> bytes:
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-Id: {request_id}\r\n"
            f"{self._auth}Connection: close\r\n\r\n"
        )
        return head.encode() + body

    async def post_stream(
        self,
        path: str,
        payload: dict,
        request_id: str,
        cancel: asyncio.Event | None = None,
        on_start=None,
    ) -> StreamResult:
        """Send one streaming request and read it to the end, a failure, a
        stall longer than stall_timeout_s, or until `cancel` is set."""
        loop = asyncio.get_running_loop()
        result = StreamResult()
        finished: asyncio.Future = loop.create_future()
        try:
            transport, proto = await loop.create_connection(
                lambda: _SseProtocol(result, finished), self.host, self.port, ssl=self.ssl
            )
        except OSError as exc:
            result.error = f"cannot connect to {self.host}:{self.port} ({exc.strerror or exc})"
            result.send_ns = result.end_ns = time.monotonic_ns()
            return result
        data = self._request(path, json.dumps(payload).encode(), request_id)
        result.send_ns = time.monotonic_ns()
        proto.last_rx_ns = result.send_ns
        transport.write(data)
        if on_start is not None:
            on_start(proto)
        cancel_wait = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
        try:
            while not finished.done():
                waiters = [finished] + ([cancel_wait] if cancel_wait else [])
                await asyncio.wait(waiters, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                if finished.done():
                    break
                if cancel is not None and cancel.is_set():
                    result.cancelled = True
                    result.end_ns = time.monotonic_ns()
                    transport.abort()  # closing the connection aborts the request server-side
                    break
                idle = (time.monotonic_ns() - proto.last_rx_ns) / 1e9
                if idle > self.stall_timeout_s:
                    result.error = f"stream stalled: no bytes for {idle:.0f} s"
                    result.end_ns = time.monotonic_ns()
                    transport.abort()
                    break
        finally:
            if cancel_wait is not None:
                cancel_wait.cancel()
            if not transport.is_closing():
                transport.abort()
        if result.error is None and result.status != 200 and not result.cancelled:
            result.error = f"HTTP {result.status}: {_error_text(result.body)}"
        return result


def _error_text(body: bytes) -> str:
    """The server's error message, one line, from an OpenAI-style error body."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            text = str(err.get("message") or err)
        else:
            text = str(err)
    except ValueError:
        pass
    return " ".join(text.split())[:300] or "(empty body)"
