"""A multi-process OpenAI-compatible stub that can send as fast as the collector reads.

Why: the reference server (tests/refserver) is one asyncio process and
sends a few tens of thousands of events a second; the scale-out benchmark
(benchmarks/scale_out.py) needs a server that outpaces several collector
processes. Here N processes each bind the same port with SO_REUSEPORT (the
kernel spreads connections over them) and run a bare epoll loop; every
token event is a pre-built frame (`data: {...}\\n\\n`, usage carrying the
cumulative completion_tokens, so the collector counts tokens exactly).

It answers what the collector asks a generic server: GET /v1/models, and
POST /v1/chat/completions, streaming (each stream runs to max_tokens at
`tok_per_s` a stream, first frame at once, frames that fell due while the
process was busy sent together) or not (the prompt-size calibration: usage
prompt_tokens = the prompt's words). Anything else is 404.

The send log: when a stream ends, its process appends the request id
(X-Request-Id), the client's address and the CLOCK_MONOTONIC ns at which
each frame was handed to the kernel (the `send` that took its last byte,
read just before that call) to `<log_dir>/send-<k>.bin`; `read_log`
reads them back. The collector's stamps are on the same host clock.

    python benchmarks/_stub_server.py --procs 2 --tok-per-s 200 --log-dir /tmp/stub
"""

from __future__ import annotations

import argparse
import heapq
import json
import multiprocessing
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from array import array
from collections import deque
from dataclasses import dataclass
from pathlib import Path

MODEL = "stub"
MAX_MODEL_LEN = 1 << 20
MAX_BATCH = 64  # frames written at once by a stream that fell behind
_HEAD = struct.Struct("<HHI")
_mono = time.monotonic_ns
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Connection: close\r\n\r\n")
_FRAMES: list[bytes] = [b""]  # _FRAMES[k]: the event carrying token k


def frame(k: int, prompt_tokens: int | None = None, last: bool = False) -> bytes:
    """The SSE event of token k (usage: cumulative completion tokens)."""
    usage: dict = {"completion_tokens": k}
    if prompt_tokens is not None:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": k,
                 "total_tokens": prompt_tokens + k}
    obj = {"id": "stub", "object": "chat.completion.chunk", "model": MODEL,
           "choices": [{"index": 0, "delta": {"content": f" w{k}"},
                        "finish_reason": "length" if last else None}], "usage": usage}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def frames_upto(n: int) -> list[bytes]:
    while len(_FRAMES) <= n:
        _FRAMES.append(frame(len(_FRAMES)))
    return _FRAMES


def _response(status: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
            f"\r\nConnection: close\r\n\r\n").encode() + data


def _prompt_words(body: dict) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or ()) or 1


class Conn:
    """One client connection: its request, then (streaming) its frames."""

    __slots__ = ("sock", "fd", "peer", "inbuf", "rid", "start", "max_tokens", "prompt",
                 "sent", "times", "out", "ends", "base", "waiting", "closed", "streaming")

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock, self.fd, self.peer = sock, sock.fileno(), peer
        self.inbuf = b""
        self.rid = ""
        self.start = self.max_tokens = self.prompt = self.sent = 0
        self.times = array("q")
        self.out = bytearray()
        self.ends: deque[int] = deque()  # absolute end offset of each frame not yet taken
        self.base = 0  # absolute offset of out[0]
        self.waiting = self.closed = self.streaming = False


class Worker:
    """One process's epoll loop."""

    def __init__(self, lsock: socket.socket, tok_per_s: float, log_path: Path) -> None:
        self.lsock, self.interval = lsock, int(1e9 / tok_per_s)
        self.ep = select.epoll()
        self.ep.register(lsock.fileno(), select.EPOLLIN)
        self.conns: dict[int, Conn] = {}
        self.heap: list[tuple[int, int, Conn]] = []
        self.seq = 0
        self.log = open(log_path, "ab", buffering=1 << 20)  # noqa: SIM115 - closed in run()
        self.running = True

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "running", False))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        heap, poll = self.heap, self.ep.poll
        try:
            while self.running:
                timeout = 0.1
                if heap:
                    timeout = min(timeout, max(0.0, (heap[0][0] - _mono()) / 1e9))
                for fd, ev in poll(timeout, 1024):
                    if fd == self.lsock.fileno():
                        self.accept()
                        continue
                    c = self.conns.get(fd)
                    if c is None:
                        continue
                    if ev & select.EPOLLOUT:
                        self.writable(c)
                    if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and not c.closed:
                        self.readable(c)
                now = _mono()
                for _ in range(len(heap)):  # what is rescheduled waits for the next pass
                    if heap[0][0] > now:
                        break
                    c = heapq.heappop(heap)[2]
                    if not c.closed:
                        self.tick(c, now)
        finally:
            for c in list(self.conns.values()):
                self.close(c)
            self.log.close()

    def accept(self) -> None:
        while True:
            try:
                sock, addr = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = Conn(sock, str(addr[0]))
            self.conns[c.fd] = c
            self.ep.register(c.fd, select.EPOLLIN)

    def readable(self, c: Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed (a cancelled stream)
            self.close(c)
            return
        if c.streaming:
            return
        c.inbuf += data
        sep = c.inbuf.find(b"\r\n\r\n")
        if sep < 0:
            return
        head = c.inbuf[:sep].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        length = int(headers.get("content-length") or 0)
        if len(c.inbuf) < sep + 4 + length:
            return
        c.rid = headers.get("x-request-id", "")
        method, path = (head[0].split() + ["", ""])[:2]
        self.answer(c, method, path, c.inbuf[sep + 4:sep + 4 + length])

    def answer(self, c: Conn, method: str, path: str, raw: bytes) -> None:
        if method == "GET" and path.endswith("/v1/models"):
            return self.reply(c, _response("200 OK", {"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "stub",
                 "max_model_len": MAX_MODEL_LEN}]}))
        if method != "POST" or not path.endswith("/v1/chat/completions"):
            return self.reply(c, _response("404 Not Found", {"error": {"message": "not here"}}))
        body = json.loads(raw or b"{}")
        c.prompt = _prompt_words(body)
        if not body.get("stream"):
            return self.reply(c, _response("200 OK", {
                "id": "stub", "object": "chat.completion", "model": MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": " t"},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": c.prompt, "completion_tokens": 1,
                          "total_tokens": c.prompt + 1}}))
        c.max_tokens = max(1, int(body.get("max_tokens") or 16))
        c.streaming, c.start = True, _mono()
        c.out += _SSE_HEAD
        self.tick(c, c.start)

    def reply(self, c: Conn, data: bytes) -> None:
        try:
            c.sock.sendall(data)  # small; a full buffer here is not worth handling
        except OSError:
            pass
        self.close(c, log=False)

    def tick(self, c: Conn, now: int) -> None:
        """Queue the frames due by `now` (at most MAX_BATCH), then write."""
        if c.waiting:
            return  # flushed when writable, then rescheduled
        due = min(c.max_tokens, (now - c.start) // self.interval + 1, c.sent + MAX_BATCH)
        frames = _FRAMES if len(_FRAMES) > due else frames_upto(due)
        offset = c.base + len(c.out)
        for k in range(c.sent + 1, due + 1):
            f = frames[k] if k < c.max_tokens else frame(k, c.prompt, last=True) + b"data: [DONE]\n\n"
            c.out += f
            offset += len(f)
            c.ends.append(offset)
        c.sent = max(c.sent, due)
        self.flush(c)

    def flush(self, c: Conn) -> None:
        t = _mono()
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self.close(c)
            return
        if n:
            del c.out[:n]
            c.base += n
            while c.ends and c.ends[0] <= c.base:
                c.ends.popleft()
                c.times.append(t)
        if c.out:
            if not c.waiting:
                c.waiting = True
                self.ep.modify(c.fd, select.EPOLLIN | select.EPOLLOUT)
            return
        if c.sent >= c.max_tokens:
            self.close(c)
            return
        self.seq += 1
        heapq.heappush(self.heap, (c.start + c.sent * self.interval, self.seq, c))

    def writable(self, c: Conn) -> None:
        c.waiting = False
        self.ep.modify(c.fd, select.EPOLLIN)
        self.flush(c)

    def close(self, c: Conn, log: bool = True) -> None:
        if c.closed:
            return
        c.closed = True
        self.conns.pop(c.fd, None)
        try:
            self.ep.unregister(c.fd)
        except OSError:
            pass
        c.sock.close()
        if log and c.streaming:
            rid, peer = c.rid.encode(), c.peer.encode()
            self.log.write(_HEAD.pack(len(rid), len(peer), len(c.times)) + rid + peer
                           + c.times.tobytes())


def _listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _worker_main(host: str, port: int, tok_per_s: float, log_path: str) -> None:
    lsock = _listener(host, port)
    lsock.listen(4096)
    lsock.setblocking(False)
    Worker(lsock, tok_per_s, Path(log_path)).run()


def serve(host: str, port: int, procs: int, tok_per_s: float, log_dir: Path) -> None:
    """Run `procs` processes on one port until SIGTERM or SIGINT; prints the URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    hold = _listener(host, port)  # bound, never listening: reserves the port
    port = hold.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_worker_main, daemon=True,
                           args=(host, port, tok_per_s, str(log_dir / f"send-{k}.bin")))
               for k in range(procs)]
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    for w in workers:
        w.start()
    deadline = time.monotonic() + 30
    while not _answers(host, port) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"listening on http://{host}:{port}", flush=True)
    while not stop[0] and all(w.is_alive() for w in workers):
        time.sleep(0.1)
    for w in workers:
        if w.pid is not None and w.is_alive():
            os.kill(w.pid, signal.SIGTERM)
    for w in workers:
        w.join(10)
    hold.close()


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


@dataclass
class Sent:
    """One stream as the stub sent it: the client's address, each frame's send ns."""

    peer: str
    times: array


def read_log(log_dir: Path) -> dict[str, Sent]:
    """Request id -> what the stub sent it, from every process's log."""
    out: dict[str, Sent] = {}
    for path in sorted(log_dir.glob("send-*.bin")):
        data, pos = path.read_bytes(), 0
        while pos + _HEAD.size <= len(data):
            nr, np_, n = _HEAD.unpack_from(data, pos)
            pos += _HEAD.size
            rid = data[pos:pos + nr].decode()
            peer = data[pos + nr:pos + nr + np_].decode()
            pos += nr + np_
            times = array("q")
            times.frombytes(data[pos:pos + 8 * n])
            pos += 8 * n
            out[rid] = Sent(peer, times)
    return out


class StubServer:
    """The stub in a subprocess: `with StubServer(...) as stub: stub.base_url`;
    `stop()` ends it and returns its send log."""

    def __init__(self, log_dir: Path, procs: int = 2, tok_per_s: float = 200.0,
                 host: str = "127.0.0.1") -> None:
        self.log_dir, self.procs, self.tok_per_s, self.host = log_dir, procs, tok_per_s, host
        self.proc: subprocess.Popen | None = None
        self.base_url = ""

    def __enter__(self) -> StubServer:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--host", self.host, "--procs",
             str(self.procs), "--tok-per-s", str(self.tok_per_s), "--log-dir", str(self.log_dir)],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"the stub did not start ({line!r})")
        self.base_url = line.split()[-1]
        return self

    def stop(self) -> dict[str, Sent]:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return read_log(self.log_dir)

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--tok-per-s", type=float, default=200.0, help="per stream")
    ap.add_argument("--log-dir", type=Path, required=True)
    a = ap.parse_args()
    serve(a.host, a.port, a.procs, a.tok_per_s, a.log_dir)


if __name__ == "__main__":
    main()
