"""The reference server: OpenAI-compatible streaming driven by a `Scenario`,
logging the true send time of every chunk (scenario.py: the toy model;
harness.py: how tests start it).

    python -m tests.refserver.server --scenario S.json --port 0 \
        --truth T.jsonl --port-file P

A raw asyncio HTTP/1.1 server (uvloop when installed; keep-alive; chunked SSE).
All but the step clock are synchronous callbacks, and every chunk is stamped
with time.monotonic_ns() right before transport.write(): CLOCK_MONOTONIC is
shared by all processes, so client stamps compare directly. A step's last
stretch is slept with a precise blocking sleep and spun, not left to the event
loop's millisecond timers. One truth record per parsed completion request is
appended to the truth JSONL (flushed) when the request ends; requests refused
with 401 or for bad JSON are not logged.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import socket
import struct
import time
import uuid
from collections import deque
from http import HTTPStatus

from tests.refserver.answers import override
from tests.refserver.dialects import JSON, dialect_for, error_body
from tests.refserver.inject import Injector
from tests.refserver.prefix_cache import ServerCache
from tests.refserver.scenario import Scenario, message_heads, message_words, prompt_words
from tests.refserver.speculative import Drafts, SpecLogs
from tests.refserver.variation import every_steps, first_token_extra_ms

mono = time.monotonic_ns
WAITING, PREFILL, DECODE, DONE = "waiting", "prefill", "decode", "done"
COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else dumps(obj)) + b"\n\n"


class Req:
    """One completion request, its stream state and its truth record."""

    def __init__(self, conn: Conn, index: int, rid: str, chat: bool, body: dict, words):
        self.conn, self.rid, self.chat = conn, rid, chat
        self.stream = bool(body.get("stream"))
        opts = body.get("stream_options") or {}
        self.cont_usage = bool(opts.get("continuous_usage_stats"))
        self.final_usage = bool(opts.get("include_usage"))
        self.prompt_tokens, self.words = len(words), words  # the words: what the cache keys on
        self.cached_tokens = 0  # what the prefix cache truly reused (prefix_cache.py)
        mt = body.get("max_completion_tokens") or body.get("max_tokens")
        self.max_tokens = int(mt) if mt is not None else 0
        self.end_tokens, self.end_reason = 0, "length"  # when and how it finishes (App.completion)
        self.cid = ("chatcmpl-" if chat else "cmpl-") + rid
        self.created = int(time.time())
        self.state, self.generated, self.step_i, self.ready_ns = WAITING, 0, 0, 0
        self.faulty = self.malformed_sent = self.stalled = self.skewed = False
        self.bad_size_sent = self.bad_size_now = False
        self.late_fault: dict | None = None  # inject.py: a trigger waiting for its token count
        self.forced_hit, self.report_cached, self.cached_extra, self.details = False, True, 0, True
        self.forced_miss = False
        self.first_extra_ns, self.every_steps, self.steps_waited = 0, 1, 0  # variation.py
        self.text = ["", ""]  # non-stream body: reasoning, content
        self.drafts: Drafts | None = None  # speculative decoding's steps (speculative.py)
        self.rec = {"request_id": rid, "index": index,
                    "endpoint": "chat" if chat else "completions", "stream": self.stream,
                    "recv_ns": 0, "slot_ns": None,
                    "prompt_tokens": self.prompt_tokens, "max_tokens": None, "cached": False,
                    "cached_tokens": 0,
                    "chunks": [], "steps": [], "due_ns": [], "backlogged": 0, "role_chunk_ns": None,
                    "finish_ns": None,
                    "finish_reason": None, "cancelled": False, "fault": None, "fault_ns": None,
                    "status": 200, "accepted": False}

    def takes_step(self) -> bool:
        """Whether this step of the clock is one at which the decoding request
        emits (every `every_steps`-th since its last chunk: variation.py)."""
        self.steps_waited += 1
        if self.steps_waited < self.every_steps:
            return False
        self.steps_waited = 0
        return True

    def usage(self) -> dict:
        u: dict = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.generated,
                   "total_tokens": self.prompt_tokens + self.generated}
        if self.details:
            cached = self.cached_tokens + self.cached_extra if (
                self.cached_tokens and self.report_cached) else 0
            u["prompt_tokens_details"] = {"cached_tokens": cached}
        return u

    def chunk(self, model: str, delta: dict | None, finish=None, usage=None,
              extra: dict | None = None) -> bytes:
        """One SSE event; delta None: the final `choices: []` usage chunk."""
        choices = []
        if delta is not None and self.chat:
            choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        elif delta is not None:
            text = delta.get("reasoning_content", "") + delta.get("content", "")
            choices = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
        obj = {"id": self.cid, "object": "chat.completion.chunk" if self.chat else
               "text_completion", "created": self.created, "model": model, "choices": choices}
        if usage is not None:
            obj["usage"] = usage
        return sse({**obj, **(extra or {})})

    def body(self, model: str, extra: dict | None = None) -> dict:
        """The whole response of a non-streaming request."""
        reasoning, content = self.text
        if self.chat:
            msg = {"role": "assistant", "content": content}
            if reasoning:
                msg["reasoning_content"] = reasoning
            choice = {"index": 0, "message": msg, "logprobs": None,
                      "finish_reason": self.end_reason}
        else:
            choice = {"index": 0, "text": reasoning + content, "logprobs": None,
                      "finish_reason": self.end_reason}
        return {"id": self.cid, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": model, "choices": [choice],
                "usage": self.usage(), **(extra or {})}


class Engine:
    """Slots, the FIFO queue, the global step clock, the counters, the truth log."""

    def __init__(self, sc: Scenario, truth_path: str):
        self.sc, self.slots, self.pattern = sc, sc.effective_slots, sc.chunk_pattern
        self.role_delta: dict = {"role": "assistant"}  # the App sets its dialect's
        self.final_fields = lambda r: {}  # the dialect's fields in a request's last chunk
        self.truth = open(truth_path, "a", encoding="utf-8")
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.cache = ServerCache(sc)  # the prefix cache and its true hits (prefix_cache.py)
        self.n_requests = self.prompt_total = self.gen_total = 0
        self.next_tick: int | None = None  # the step clock; None while nothing decodes
        self.frozen = False  # the one whole-server freeze has happened
        self.steps = 0  # steps of the clock so far; each streamed chunk logs its own
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted = 0  # speculative.py, true
        self.spec_logs = SpecLogs()  # SGLang's spec gauges: a window of logged steps (speculative.py)
        self._waiter: asyncio.Future | None = None

    def start(self, r: Req) -> None:
        """An accepted request: response headers (and role chunk) now, then a slot."""
        if r.stream:
            r.conn.start_stream(r.rid)
            if r.chat and self.sc.role_chunk == "start":
                r.rec["role_chunk_ns"] = r.conn.send(self._role(r))
        self.waiting.append(r)
        self._admit()

    def _admit(self) -> None:
        sc = self.sc
        while self.waiting and (self.slots is None or len(self.running) < self.slots):
            r = self.waiting.popleft()
            now = mono()
            r.cached_tokens = cached = self.cache.lookup(r.words, r.prompt_tokens, r.forced_hit,
                                                         r.forced_miss)
            prefill = 0 if not sc.prefill_tok_per_s else (
                (r.prompt_tokens - cached) / sc.prefill_tok_per_s)
            r.rec.update(slot_ns=now, cached=cached > 0, cached_tokens=cached)
            r.state, r.ready_ns = PREFILL, now + int(sc.ttft_ms * 1e6 + prefill * 1e9
                                                     ) + r.first_extra_ns
            self.prompt_total += r.prompt_tokens
            self.running.append(r)
        self._wake()

    def kv_used(self, reserved: bool = False) -> int:
        return sum(r.prompt_tokens + (r.max_tokens if reserved else r.generated)
                   for r in self.running)

    def cancel(self, r: Req) -> None:
        if r.state != DONE:
            r.rec["cancelled"] = True
            self.finish(r, None)

    def finish(self, r: Req, reason) -> None:
        if r.state == DONE:
            return
        if r in self.running:
            self.running.remove(r)
        elif r in self.waiting:  # a held request (inject.py) is in neither
            self.waiting.remove(r)
        r.state = DONE
        r.rec.update(finish_ns=mono(), finish_reason=reason)
        self.log(r.rec)
        self._admit()

    def log(self, rec: dict) -> None:
        self.truth.write(json.dumps(rec) + "\n")
        self.truth.flush()

    # ---- the step clock ------------------------------------------------

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(False)

    async def _nap(self, seconds: float | None) -> bool:
        """Sleep `seconds` (None: until woken). True if the time ran out."""
        loop = asyncio.get_running_loop()
        fut = self._waiter = loop.create_future()
        handle = seconds is not None and loop.call_later(
            seconds, lambda: fut.done() or fut.set_result(True))
        try:
            return await fut
        finally:
            if handle:
                handle.cancel()
            self._waiter = None

    async def run(self) -> None:
        precise = self.sc.precise_us * 1000
        while True:
            if any(r.state == DECODE for r in self.running):
                due = self.next_tick
            else:  # idle clock: the next first token starts it
                due = min((r.ready_ns for r in self.running if r.state == PREFILL), default=None)
            if due is None:
                await self._nap(None)
                continue
            rem = due - mono()
            if rem > precise and not await self._nap((rem - precise) / 1e9):
                continue  # woken by an arrival or a finish: plan again
            rem = due - mono()
            if rem > 200_000:
                time.sleep((rem - 150_000) / 1e9)  # ~60 µs late at worst (timer slack)
            while mono() < due:
                pass
            self._tick()
            await asyncio.sleep(0)  # let I/O in between steps, however fast they come

    def _tick(self) -> None:
        now = mono()
        ticking = self.next_tick is not None and now >= self.next_tick
        step_due = self.next_tick if ticking else now  # when this step's chunks were due
        self.steps += ticking
        batch = [r for r in self.running if r.ready_ns <= now
                 and (r.state == PREFILL or (r.state == DECODE and ticking and r.takes_step()))]
        # frames are built first, then stamped and written in one tight burst
        writes = [w for w in (self._step(r, now) for r in batch) if w is not None]
        for r, role, pre, frame, n in writes:
            if role:
                r.rec["role_chunk_ns"] = r.conn.send(role)
            if pre:
                r.conn.send(pre)
            size = None
            if r.bad_size_now:  # this one frame announces a malformed chunk size
                r.bad_size_now, size = False, self.sc.bad_chunk_size.encode()
            r.rec["chunks"].append([r.conn.send(frame, r.rec, size), n, r.generated])
            r.rec["steps"].append(self.steps)
            # a first token is due when its prefill is done, a decode chunk at its step
            r.rec["due_ns"].append(r.ready_ns if n == r.generated else step_due)
        for r in batch:
            if r.state != DONE and r.generated >= r.end_tokens:
                self._complete(r)
        if ticking:
            self.spec_logs.tick(self.steps, self.spec_drafts, self.spec_accepted)
        if not any(r.state == DECODE for r in self.running):
            self.next_tick = None
            return
        interval = self.sc.step_interval_ns(len(self.running))
        if self.next_tick is None:
            self.next_tick = now + interval
        elif ticking:
            self.next_tick += interval  # absolute schedule: no drift
            if self.next_tick <= now:  # fell a whole step behind: resync, no burst
                self.next_tick = now + interval

    def _step(self, r: Req, now: int):
        """Advance r by one step; returns what to write, or None."""
        sc, g, pre = self.sc, r.generated, b""
        if r.late_fault is not None and g >= r.late_fault["after_tokens"]:
            hit, r.late_fault = r.late_fault, None
            r.rec.update(fault=hit["do"], fault_ns=now)
            Injector.act(hit)  # exit, stop or freeze mid-stream
        if r.faulty and r.stream:
            if sc.reset_after_tokens is not None and g >= sc.reset_after_tokens:
                r.rec.update(fault="reset", fault_ns=now)
                r.conn.abort()
                return self.finish(r, None)
            if sc.fail_after_tokens is not None and g >= sc.fail_after_tokens:
                r.rec.update(fault="fail", fault_ns=now)
                err = error_body("injected failure mid-stream (refserver)",
                                 "InternalServerError", 500)
                r.conn.send(sse(err) + sse(b"[DONE]"))
                r.conn.end_stream(close=True)
                return self.finish(r, "error")
            if sc.stall_after_tokens is not None and g >= sc.stall_after_tokens and not r.stalled:
                r.stalled, r.ready_ns = True, now + int(sc.stall_s * 1e9)
                r.rec.update(fault="stall", fault_ns=now)
                return None
            if (sc.malformed_after_tokens is not None and g >= sc.malformed_after_tokens
                    and not r.malformed_sent):
                r.malformed_sent, pre = True, b"data: {not json\n\n"
                r.rec.update(fault="malformed", fault_ns=now)
            if (sc.bad_chunk_size_after_tokens is not None and g >= sc.bad_chunk_size_after_tokens
                    and not r.bad_size_sent):
                r.bad_size_sent = r.bad_size_now = True
                r.rec.update(fault="bad_chunk_size", fault_ns=now)
            if sc.freeze_after_tokens is not None and g >= sc.freeze_after_tokens and not self.frozen:
                self.frozen = True
                r.rec.update(fault="freeze", fault_ns=now)
                time.sleep(sc.freeze_s)  # blocks the loop: nothing is sent or answered
        role, first = b"", r.state == PREFILL
        if first:
            r.state = DECODE
            self.cache.store(r.words)
            if r.stream and r.chat and sc.role_chunk == "first_token":
                role = self._role(r)
        if r.drafts is not None:  # speculative decoding (speculative.py): the prefill's token first
            n = 1 if first else self._verify(r.drafts, r.end_tokens - g)
        else:
            n = min(self.pattern[r.step_i % len(self.pattern)], r.end_tokens - g)
        r.step_i += 1
        delta = {}
        for k in range(g, g + n):
            key = "reasoning_content" if sc.is_reasoning(k) else "content"
            delta[key] = delta.get(key, "") + sc.token_text(k)
        r.generated += n
        self.gen_total += n
        if not r.stream:
            r.text[0] += delta.get("reasoning_content", "")
            r.text[1] += delta.get("content", "")
            return None
        finish = r.end_reason if r.generated >= r.end_tokens else None
        usage = r.usage() if self._continuous(r) else None
        last = finish is not None and not self._final_usage(r)  # the stream's last chunk
        if (usage and r.faulty and sc.usage_skew_after_tokens is not None and not r.skewed
                and r.generated >= sc.usage_skew_after_tokens):
            r.skewed = True
            usage["completion_tokens"] += sc.usage_skew
            r.rec.update(fault="usage_skew", fault_ns=now)
        extra = self.final_fields(r) if last else None
        return r, role, pre, r.chunk(sc.model, delta, finish, usage, extra), n

    def _verify(self, d: Drafts, left: int) -> int:
        """One chunk's verification steps; the engine's spec counters count them."""
        steps, drafted, accepted = d.steps, d.drafted, d.accepted
        n = d.chunk(left)
        self.spec_drafts += d.steps - steps
        self.spec_draft_tokens += d.drafted - drafted
        self.spec_accepted += d.accepted - accepted
        return n

    def _continuous(self, r: Req) -> bool:
        return self.sc.usage_mode == "continuous" and r.cont_usage

    def _final_usage(self, r: Req) -> bool:
        return self.sc.usage_mode != "none" and r.final_usage

    def _role(self, r: Req) -> bytes:
        delta = dict(self.role_delta)
        return r.chunk(self.sc.model, delta, usage=r.usage() if self._continuous(r) else None)

    def _complete(self, r: Req) -> None:
        if r.stream:
            tail = sse(b"[DONE]")
            if self._final_usage(r):
                tail = r.chunk(self.sc.model, None, usage=r.usage(), extra=self.final_fields(r)) + tail
            r.conn.send(tail)
            r.conn.end_stream()
        else:
            t = r.conn.respond(200, r.body(self.sc.model, self.final_fields(r)), rid=r.rid)
            r.rec["chunks"].append([t, r.generated, r.generated])
        self.finish(r, r.end_reason)


class Conn(asyncio.Protocol):
    """One HTTP/1.1 connection: parses requests, writes responses."""

    def __init__(self, app: App):
        self.app, self.buf, self.transport = app, bytearray(), None
        self.busy = self.closed = self.continued = False
        self.keep_alive = True
        self.req: Req | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._sockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _sockopt(self, *opt) -> None:
        try:
            self.transport.get_extra_info("socket").setsockopt(*opt)
        except (OSError, AttributeError):
            pass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._parse()

    def _parse(self) -> None:
        i = self.buf.find(b"\r\n\r\n")
        if self.busy or self.closed or i < 0:
            return
        lines = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
        method, target, version = (lines[0].split(" ", 2) + ["", ""])[:3]
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length") or 0)
        if len(self.buf) < i + 4 + n:
            if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                self.continued = bool(self.write(b"HTTP/1.1 100 Continue\r\n\r\n"))  # curl
            return
        self.continued = False
        body = bytes(self.buf[i + 4 : i + 4 + n])
        del self.buf[: i + 4 + n]
        recv_ns = mono()
        self.busy = True
        self.keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        self.app.dispatch(self, method, target.split("?", 1)[0], headers, body, recv_ns)

    def _head(self, status: int, ctype: str, extra: list[str]) -> bytes:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        lines = [f"HTTP/1.1 {status} {phrase}", f"Content-Type: {ctype}",
                 "Connection: " + ("keep-alive" if self.keep_alive else "close"), *extra]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(self, status: int, body, ctype=JSON, rid=None) -> int:
        data = body if isinstance(body, bytes) else dumps(body)
        extra = [f"Content-Length: {len(data)}"] + ([f"X-Request-Id: {rid}"] if rid else [])
        t = self.write(self._head(status, ctype, extra) + data)
        self._done()
        return t

    def start_stream(self, rid: str) -> None:
        self.write(self._head(200, "text/event-stream; charset=utf-8", [
            "Cache-Control: no-cache", "Transfer-Encoding: chunked", f"X-Request-Id: {rid}"]))

    def write(self, data: bytes, rec: dict | None = None) -> int:
        """Stamp, then write; returns the stamp. `rec`: count a write that has to
        queue behind unsent bytes (its stamp is then earlier than the wire)."""
        if rec is not None and self.transport.get_write_buffer_size():
            rec["backlogged"] += 1
        t = mono()
        if not self.closed:
            self.transport.write(data)
        return t

    def send(self, event: bytes, rec: dict | None = None, size: bytes | None = None) -> int:
        """One event as one chunked-encoding frame (`size`: the size line to
        announce instead of the true one, a fault)."""
        head = b"%x" % len(event) if size is None else size
        return self.write(b"%b\r\n%b\r\n" % (head, event), rec)

    def end_stream(self, close: bool = False) -> None:
        self.write(b"0\r\n\r\n")
        self.keep_alive = self.keep_alive and not close
        self._done()

    def _done(self) -> None:
        self.busy, self.req = False, None
        if not self.keep_alive:
            self.transport.close()
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._parse)

    def abort(self) -> None:
        """Reset the TCP connection (RST, not FIN)."""
        self._sockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.req = None
        self.transport.abort()

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.req is not None:
            self.app.engine.cancel(self.req)


class App:
    """Routing, admission of completion requests, and the per-engine endpoints."""

    def __init__(self, sc: Scenario, truth_path: str, arrivals_path: str | None = None):
        self.sc, self.engine = sc, Engine(sc, truth_path)
        self.loading_left = sc.loading_answers
        self.faults, self.held = Injector(sc.inject, arrivals_path), []
        self.dialect = dialect_for(sc, self.engine)  # the engine's endpoints (dialects.py)
        self.routes = self.dialect.routes()
        self.engine.role_delta = self.dialect.role_delta()
        self.engine.final_fields = self.dialect.final_fields

    def dispatch(self, conn: Conn, method, path, headers, body: bytes, recv_ns: int) -> None:
        if (method, path) == ("POST", "/_ref/release"):  # the test's control, never refused
            return conn.respond(200, self.release())
        if self.loading_left > 0:  # lifecycle: still loading the model (llama-server's answer)
            self.loading_left -= 1
            return conn.respond(503, error_body("Loading model", "unavailable_error", 503))
        key = self.sc.api_key
        checked = self.sc.api_key_scope == "all" or path in COMPLETION_PATHS
        if key and checked and path != "/health" and headers.get("authorization") != f"Bearer {key}":
            return conn.respond(401, error_body("Incorrect API key provided.",
                                                "invalid_request_error", "invalid_api_key"))
        # faults: endpoint answers (answers.py): a scripted answer, or a delayed /metrics
        real = self.routes.get((method, path))
        if override(conn, path, self.sc.endpoint_answers, self.sc.metrics_delay_s,
                    (lambda: real({})) if real else None):
            return None
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            return conn.respond(400, error_body("body is not JSON", "BadRequestError", 400))
        dies = self.sc.exit_on_tokenize_after
        if path == "/tokenize" and dies is not None and self.engine.n_requests >= dies:
            os._exit(3)  # lifecycle: the server dies between cells, mid-connection
        if method == "POST" and path in COMPLETION_PATHS:
            return self.completion(conn, path, headers, data, recv_ns)
        route = self.routes.get((method, path))
        if route is None:
            return conn.respond(404, error_body(f"no route {method} {path}", "NotFoundError", 404))
        answer, ctype, *status = route(data)  # a handler may add a status: a refusal
        conn.respond(status[0] if status else 200, answer, ctype)

    # ---- completions ---------------------------------------------------

    def completion(self, conn: Conn, path, headers, data, recv_ns) -> None:
        sc, e = self.sc, self.engine
        e.n_requests += 1
        chat = path.endswith("chat/completions")
        words = message_words(data.get("messages")) if chat else prompt_words(data.get("prompt"))
        rid = headers.get("x-request-id") or f"ref-{e.n_requests}-{uuid.uuid4().hex[:8]}"
        r = Req(conn, e.n_requests, rid, chat, data, words)
        if chat:  # the chat template's own tokens (0 by default: none)
            r.prompt_tokens += sc.chat_template_tokens
            r.rec["prompt_tokens"] = r.prompt_tokens
        r.faulty = e.n_requests % sc.fault_every == 0
        r.forced_hit = bool(sc.cache_hit_every) and e.n_requests % sc.cache_hit_every == 0
        r.forced_miss = bool(chat and sc.prefix_cache_miss_marker) and sc.prefix_cache_miss_marker in str(
            ((data.get("messages") or [{}])[-1] or {}).get("content"))
        r.report_cached, r.cached_extra = sc.report_cached_tokens, sc.cached_tokens_extra
        r.details = sc.prompt_tokens_details
        extra_ms, r.every_steps = first_token_extra_ms(sc, e.n_requests), every_steps(sc, e.n_requests)
        r.first_extra_ns = int(extra_ms * 1e6)
        r.rec.update(first_extra_ms=extra_ms, every_steps=r.every_steps)
        if sc.spec_draft_tokens:
            r.drafts = Drafts(sc, e.n_requests, r.rec)
        r.max_tokens = r.max_tokens or sc.default_max_tokens or max(
            1, sc.max_model_len - r.prompt_tokens)
        # the prompt's first words, so a test sees which text was sent (a prompt source's)
        r.rec.update(recv_ns=recv_ns, max_tokens=r.max_tokens, prompt_head=" ".join(words[:40]))
        sampling = {k: data[k] for k in ("temperature", "top_p") if k in data}
        ignore_eos = data.get("ignore_eos") is True
        if chat:  # each message's role and first words: a conversation's history, in order
            r.rec["message_heads"] = message_heads(data.get("messages"))
        cell, n, hit = self.faults.arrive(words, {
            "request_id": rid, "max_tokens": r.max_tokens, "prompt_tokens": r.prompt_tokens,
            "recv_ns": recv_ns, "ignore_eos": ignore_eos, **sampling})
        r.rec.update(cell=list(cell) if cell else None, cell_n=n)
        if hit and "after_tokens" in hit:  # fires once it has sent that many tokens
            r.late_fault, hit = self.faults.delayed(hit, cell, n, rid), None
        then = self.faults.act(hit) if hit else None  # exit, stop, freeze: done by now
        r.end_tokens = r.max_tokens
        eos = (sc.eos_after_tokens if not ignore_eos and e.n_requests % sc.eos_every == 0
               else None)
        for reason, after in (("stop", sc.finish_stop_after_tokens), ("stop", eos),
                              ("length", sc.finish_length_after_tokens)):
            if after is not None and after < r.end_tokens:
                r.end_tokens, r.end_reason = after, reason
        if then == "hold":  # no answer until released or the client goes away
            conn.req, r.rec["accepted"] = r, True
            r.rec.update(fault="hold", fault_ns=mono())
            return self.held.append(r)
        error, need = None, r.prompt_tokens + r.max_tokens
        if then == "refuse":
            code = hit.get("status", 503)
            error = code, error_body(f"injected HTTP {code} (refserver)", "injected", code)
            r.rec["fault"] = "inject"
        elif sc.status_every and e.n_requests % sc.status_every["n"] == 0:
            code = sc.status_every["code"]
            error = code, error_body(f"injected HTTP {code} (refserver)", "injected", code)
            r.rec["fault"] = "status"
        elif need > sc.max_model_len:
            error = self.dialect.too_long(r.prompt_tokens, r.max_tokens)
        elif sc.refuse_over_kv and sc.kv_budget_tokens is not None and (
                e.kv_used(reserved=True) + need > sc.kv_budget_tokens):
            error = 400, error_body("not enough KV cache for this request (refserver)",
                                    "BadRequestError", 400)
        if error:
            r.state = DONE
            r.rec.update(status=error[0], finish_ns=conn.respond(*error, rid=rid))
            return e.log(r.rec)
        conn.req, r.rec["accepted"] = r, True
        e.start(r)

    def release(self) -> dict:
        """Start every held request whose client is still there."""
        held, self.held = self.held, []
        for r in held:
            if r.state == WAITING and not r.conn.closed:
                self.engine.start(r)
        return {"released": len(held)}


async def serve(args) -> None:
    app = App(Scenario.load(args.scenario), args.truth, args.arrivals)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Conn(app), args.host, args.port,
                                      reuse_address=True, backlog=1024)
    if args.port_file:  # atomically, once listening
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(server.sockets[0].getsockname()[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    gc.freeze()  # fewer long GC pauses in the step clock
    clock, stopping = asyncio.ensure_future(app.engine.run()), asyncio.ensure_future(stop.wait())
    await asyncio.wait({clock, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server.close()
    app.engine.truth.close()
    if clock.done():
        clock.result()  # the step clock crashed: exit loudly, traceback in the log
    clock.cancel()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="refserver: OpenAI-compatible reference server")
    p.add_argument("--scenario", required=True, help="scenario JSON (tests.refserver.scenario)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--truth", required=True, help="truth JSONL, appended to")
    p.add_argument("--port-file", help="written with the bound port once listening")
    p.add_argument("--arrivals", help="arrivals JSONL (inject.py), appended to and read back")
    p.add_argument("--no-uvloop", action="store_true")
    args = p.parse_args(argv)
    factory = None
    if not args.no_uvloop:
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:
            pass
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args))


if __name__ == "__main__":
    main()
