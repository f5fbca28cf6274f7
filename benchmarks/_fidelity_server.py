"""The scripted SSE server of benchmarks/client_fidelity.py (its own process).

It stamps every chunk with time.monotonic_ns() right before its send()
syscall (the truth) and right after it (how sure the truth is). Paced: one
`text_completion` event per stream every `interval_ns`, all streams in the
same instant like an engine's decode step.
Flood: writes as fast as the client reads.
"""

from __future__ import annotations

import gc
import json
import os
import queue
import re
import selectors
import socket
import ssl
import threading
import time

INTERVAL_NS = 5_000_000  # 200 tok/s per stream
mono = time.monotonic_ns
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
EVENT = ('{"id":"cmpl-%d","object":"text_completion","created":1700000000,"model":"tiny",'
         '"choices":[{"index":0,"text":" s%dk%d","logprobs":null,"finish_reason":null,'
         '"stop_reason":null}],"usage":null}')
TOKEN = re.compile(rb" s(\d+)k(\d+)")


def frame(sid: int, k: int) -> bytes:
    """One SSE event as one HTTP chunk (~230 bytes, like vLLM's)."""
    p = b"data: " + (EVENT % (sid, sid, k)).encode() + b"\n\n"
    return b"%x\r\n%b\r\n" % (len(p), p)


def tail(sid: int, n: int) -> bytes:
    usage = json.dumps({"id": f"cmpl-{sid}", "object": "text_completion", "choices": [],
                        "usage": {"prompt_tokens": 16, "completion_tokens": n}}).encode()
    out = b""
    for p in (b"data: " + usage + b"\n\n", b"data: [DONE]\n\n"):
        out += b"%x\r\n%b\r\n" % (len(p), p)
    return out + b"0\r\n\r\n"


def pin(cpu: int) -> bool:
    try:
        if len(os.sched_getaffinity(0)) >= 2:
            os.sched_setaffinity(0, {cpu})
            return True
    except (AttributeError, OSError):
        pass
    return False


def _read_request(s: socket.socket) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        if not data:
            return b""
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    while m and len(body) < int(m.group(1)):
        body += s.recv(65536)
    return head


def _acceptor(ls: socket.socket, tls: ssl.SSLContext, use_tls: list[bool],
              streams: queue.Queue) -> None:
    """Always accepting (a thread): completion requests are queued for the
    trial, anything else (vLLM asks for /tokenize and /metrics) gets a 404."""
    while True:
        s, _ = ls.accept()
        try:
            s.settimeout(30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if use_tls[0]:
                s = tls.wrap_socket(s, server_side=True)
            head = _read_request(s)
            if b"/completions" in head.split(b"\r\n", 1)[0]:
                streams.put(s)
                continue
            s.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except (OSError, ValueError):
            pass
        s.close()


def _paced(socks: list[socket.socket], n: int, interval_ns: int) -> list[list[list[int]]]:
    """Per stream and event: [before, after] its send() syscall. A send that
    took long (the server was preempted inside it) leaves the moment the
    bytes reached the kernel uncertain by that much."""
    truth = [[[0, 0] for _ in range(n)] for _ in socks]
    t0 = mono() + 50_000_000
    for k in range(n):
        frames = [frame(sid, k) for sid in range(len(socks))]
        due = t0 + k * interval_ns
        rem = due - mono()
        if rem > 300_000:
            time.sleep((rem - 200_000) / 1e9)
        while mono() < due:
            pass
        for sid, s in enumerate(socks):
            t = mono()
            s.sendall(frames[sid])
            truth[sid][k] = [t, mono()]
    for sid, s in enumerate(socks):
        s.sendall(tail(sid, n))
    return truth


def _flood(socks: list[socket.socket], n: int, batch: int = 64) -> None:
    sel = selectors.DefaultSelector()
    state = {}
    for sid, s in enumerate(socks):
        s.setblocking(False)
        state[sid] = [s, n, memoryview(b""), 0, False, frame(sid, 0) * batch]
        sel.register(s, selectors.EVENT_WRITE, sid)
    while state:
        ready = sel.select(30)
        if not ready:
            raise TimeoutError("flood: no client read for 30 s")
        for key, _ in ready:
            st = state[key.data]
            s, left, buf, off, tailed, full = st
            if off == len(buf):
                if left:
                    m = min(batch, left)
                    part = full if m == batch else full[: len(full) // batch * m]
                    buf, off, left = memoryview(part), 0, left - m
                elif not tailed:
                    buf, off, tailed = memoryview(tail(key.data, n)), 0, True
                else:
                    sel.unregister(s)
                    del state[key.data]
                    continue
            try:
                off += s.send(buf[off:])
            except (BlockingIOError, ssl.SSLWantWriteError):
                pass
            st[1:5] = [left, buf, off, tailed]


def serve(conn, cert: str, key: str) -> None:
    """Trial by trial: a config in through the pipe, the truth out."""
    pin(0)
    ls = socket.create_server(("127.0.0.1", 0), backlog=1024)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    use_tls, streams = [False], queue.Queue()
    threading.Thread(target=_acceptor, args=(ls, tls, use_tls, streams), daemon=True).start()
    conn.send(ls.getsockname()[1])
    gc.freeze()
    while (cfg := conn.recv()) is not None:
        use_tls[0] = cfg["tls"]
        cpu0 = time.process_time()
        conn.send("ready")  # clients connect only now: none is wrapped for the last trial's TLS
        socks: list[socket.socket] = []
        try:
            for _ in range(cfg["c"]):
                socks.append(streams.get(timeout=cfg["timeout"]))
                socks[-1].sendall(HEAD)
            if cfg["mode"] == "paced":
                out = {"truth": _paced(socks, cfg["n"], cfg.get("interval_ns", INTERVAL_NS))}
            else:
                out = {"truth": _flood(socks, cfg["n"])}
        except Exception as exc:  # reported by the trial, not fatal
            out = {"error": f"server: {exc!r}"}
        for s in socks:  # before the (large) reply: clients may wait for the close
            s.close()
        out["cpu_s"] = time.process_time() - cpu0  # for the others' share of this core
        conn.send(out)
