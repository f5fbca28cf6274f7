"""HTTP/1.1 response and SSE reading for the stream client (bench/measure/stream.py).

Why a module of its own: the parser is pure (bytes and their arrival stamps
in, events out) and is tested split at every byte without a network; the
socket side, kernel stamps and TLS stay in bench/measure/stream.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

_MAX_ERROR_BODY = 2000
_MAX_HEAD = 65536
_mono = time.monotonic_ns


_HEX = frozenset(b"0123456789abcdefABCDEF")
_MAX_SIZE_DIGITS = 15  # 2**60 bytes: a larger size is a broken server, not a big chunk


def chunk_size(line: bytes) -> int | None:
    """The size of a chunked-body chunk from its size line, or None when it is
    malformed. HTTP allows hex digits only (RFC 9112 `chunk-size = 1*HEXDIG`),
    then optional extensions after `;`; Python's int(x, 16) would also take
    `-5`, `+5`, `0x5` and `1_0`, and a negative size would make the parser
    drop one event and repeat the next."""
    size = line.split(b";", 1)[0].rstrip(b" \t")
    if not size or len(size) > _MAX_SIZE_DIGITS or not _HEX.issuperset(size):
        return None
    return int(size, 16)


@dataclass
class StreamResult:
    status: int = 0
    send_ns: int = 0
    end_ns: int = 0
    chunks: list[tuple[int, bytes]] = field(default_factory=list)  # (chunk_ns, data) per SSE data event
    body: bytes = b""  # non-streaming or error body
    error: str | None = None  # transport-level failure or HTTP error summary
    done: bool = False  # saw `data: [DONE]`
    cancelled: bool = False
    stamps: str = "read"  # "kernel": arrival = the kernel's receive time; "read": when read
    # (most events held, taker): `chunks` reaching that many is handed over and
    # restarted, so a long stream holds a bounded number of raw events
    spill: tuple[int, Callable[[list[tuple[int, bytes]]], None]] | None = None


class SseStream:
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
            size = chunk_size(buf[pos:eol])
            if size is None:
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
        append = self.r.chunks.append
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
        spill = self.r.spill
        if spill is not None and len(self.r.chunks) >= spill[0]:
            held, self.r.chunks = self.r.chunks, []
            spill[1](held)

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
