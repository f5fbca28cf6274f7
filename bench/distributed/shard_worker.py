"""One shard of a decode cell's streams, or of a rate cell's schedule: a process
of its own (`--workers N`; a host's, `--shard i/N`).

The parent (bench/distributed/shards.py) starts it with `multiprocessing`'s spawn and
talks to it over a pipe, one typed MessagePack frame a message
(bench/distributed/shard_messages.py). A shard has its own
event loop, sockets and stream client, and runs the same stream code as the
in-process path (`bench.measure.cells.CellRunner`), on its share of the cell's
stream slots. Every stamp is CLOCK_MONOTONIC, host-wide, so the parent
merges the shards' records as they are.

Parent -> shard:
  ("warm", key, base, base_tag, run_tag, slots)  prefix warm-ups of `slots`
                                                 (their prompts: `base` retagged)
  ("rate", (phase, context, cap, rate), base,    a rate cell: this shard's requests
   base_tag, run_tag, output, cap, first, step,  first, first + step, ... at their
   offsets)                                      offsets from the window's start, at
                                                 most `cap` in flight (0: no cap);
                                                 answered ("armed",) once their bodies
                                                 are made; the next "window" sends
                                                 them (bench/measure/rate_cells.py's
                                                 RateSender) and drains them
  ("start",)                                     start the slots' stream loops
  ("window", start_ns, end_ns)                   the window, as the parent opened it:
                                                 no stream starts past end_ns, every
                                                 stream is cancelled at end_ns
  ("cancel",)                                    end now (a failure elsewhere, Ctrl-C)
  ("stop",)                                      exit
  ("clock", t0)                                  answered at once: ("clock", t0, t1, t2),
                                                 t1 its arrival, t2 the answer, on
                                                 this shard's clock (bench/distributed/clocksync.py)
  ("offset", ns)                                 this shard's clock − the parent's: the
                                                 window's edges come on the parent's
                                                 clock, and every record goes back on it
                                                 (0 for a local shard; a host of
                                                 `--shard i/N`: bench/distributed/coordinator.py)
Shard -> parent:
  ("ready", pid), ("warmed", records), ("producing", [slot, ...]) as slots
  first receive tokens, ("failed",) once a stream failed, ("armed",) for a
  rate cell, ("done", records, delays, (start_ns, end_ns)) after the window
  (a rate cell's: after its drain, each record with its scheduled_ns), ("crashed", text) before
  exiting on a bug of ours. A shard whose parent goes away exits.

Each end decodes every message it reads against the protocol's schema
before using it (bench/distributed/shard_messages.py). A shard on another host gets its setup over the
same connection, ("setup", ShardSetup) or ("refused", why), once both ends
proved the run's secret (bench/distributed/remote.py, bench/distributed/peer_auth.py).
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import signal
import struct
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from bench.core.eventloop import asyncio_run
from bench.core.plan import Cell
from bench.distributed.clocksync import shift_delays, shift_record
from bench.distributed.shard_messages import TO_SHARD, ShardSetup, Side, encode
from bench.measure.cells import CellRunner, DecodeRun, slot_tag
from bench.measure.monitor import gc_paused
from bench.measure.rate_cells import Bodies, RateSender
from bench.measure.records import RequestRecord
from bench.measure.stream import StreamClient
from bench.workload.prompts import Prompt, retag
from rundir.contract import PURPOSE_MEASURE, PURPOSE_PREFIX_FILL
from rundir.redact import redact

REPORT_S = 0.05  # how often a shard tells which slots began producing
_HEAD = struct.Struct("!Q")


@dataclass
class RateShare:
    """A shard's part of a rate cell, armed before its window."""

    cell: Cell
    sender: RateSender
    bodies: Bodies  # its base prompt's (Bodies.base: what each record keeps of it)
    due: list[tuple[int, int]]  # (request index, offset from the window's start)
    cap: int


class Channel:
    """Messages one way each over two pipes: `reader` is read by the event
    loop, which makes its fd non-blocking (libuv does), so reads are
    framed here and may arrive in pieces; `writer` stays blocking, and a
    message is written whole. `reads`: the side whose messages come in
    (a parent reads a shard's, FROM_SHARD; a shard its parent's, TO_SHARD)."""

    max_frame: int | None = None  # the largest message accepted (None: any)

    def __init__(self, reader: Connection, writer: Connection, reads: Side) -> None:
        self.reader, self.writer, self.reads = reader, writer, reads
        self.rfd, self.wfd = reader.fileno(), writer.fileno()
        self._buf = bytearray()

    def send(self, message: tuple) -> None:
        data = self._encode(message)
        view = memoryview(_HEAD.pack(len(data)) + data)
        while view:
            try:
                view = view[os.write(self.wfd, view):]
            except BlockingIOError:  # pragma: no cover - the writer is blocking
                select.select([], [self.wfd], [])

    def _encode(self, message: tuple) -> bytes:
        """A message's frame body (a remote channel adds its MAC: bench/distributed/remote.py)."""
        return encode(message)

    def _decode(self, body: bytes) -> object:
        """A frame body's message, typed (a remote channel checks its MAC first);
        BadMessage if it is not one the other side sends."""
        return self.reads.decode(body)

    one_at_a_time = False  # return after each frame (a handshake's, before a MAC key is known)

    def read(self) -> list[tuple] | None:
        """Every whole message that has come; None once the other end closed.
        Frames are taken as the bytes come, so every frame's length is
        checked against max_frame before its body is held."""
        out: list = []
        eof = False
        self._take(out)
        while not (out and self.one_at_a_time):
            try:
                data = os.read(self.rfd, 1 << 20)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                eof = True
                break
            self._buf += data
            self._take(out)
        return None if eof and not out else out

    def _take(self, out: list) -> None:
        """Move every whole frame of the buffer to `out` (one only, one_at_a_time);
        refuse a frame longer than max_frame as soon as its length is read,
        before buffering it: a peer cannot make this end hold gigabytes."""
        while len(self._buf) >= _HEAD.size:
            (n,) = _HEAD.unpack_from(self._buf)
            if self.max_frame is not None and n > self.max_frame:
                raise FrameTooLarge(f"a message of {n:,} bytes (at most {self.max_frame:,} here)")
            if len(self._buf) < _HEAD.size + n:
                return
            body = bytes(self._buf[_HEAD.size:_HEAD.size + n])
            del self._buf[:_HEAD.size + n]
            out.append(self._decode(body))
            if self.one_at_a_time:
                return

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class FrameTooLarge(ValueError):
    """A peer announced a message longer than its channel accepts."""


def main(reader: Connection, writer: Connection, setup: ShardSetup) -> None:
    """The process's entry point (multiprocessing spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle

    asyncio_run(ShardWorker(Channel(reader, writer, TO_SHARD), setup).serve())


class ShardWorker:
    """A shard's end of the protocol: its share of each decode cell's stream
    slots, run by a CellRunner of its own (`stream_loop`, `sleep_until`)."""

    def __init__(self, conn: Channel, setup: ShardSetup) -> None:
        s = setup.settings
        self.conn = conn
        client = StreamClient(setup.info.base_url, setup.api_key, s.stall_timeout_s,
                              ttft_timeout_s=s.ttft_timeout_s,
                              source_addresses=setup.source_addresses)
        secrets = setup.secrets
        self.runner = CellRunner(setup.info, client, None, None, s,
                                 lambda text: redact(text, secrets))
        self.runner.id_prefix = setup.id_prefix
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.abort = asyncio.Event()
        self.run: DecodeRun | None = None
        self.rate: RateShare | None = None
        self.slots: list[int] = []
        self.offset_ns = 0  # this shard's clock − the parent's
        self.fault: str | None = None  # why the parent's connection was given up (a bad frame)
        self.exit_on_bug = True  # our process exits; a remote shard raises (distributed/remote.py)

    def send(self, message: tuple) -> None:
        self.conn.send(message)

    def _on_message(self) -> None:
        arrived = time.monotonic_ns()
        try:
            messages = self.conn.read()  # each decoded against the schema, or BadMessage
        except OSError:
            messages = None
        except ValueError as exc:  # a frame too long, or not authentic, or a bad message
            self.fault = str(exc)
            messages = None
        if messages is None:  # the parent is gone, or no longer heard
            asyncio.get_running_loop().remove_reader(self.conn.rfd)
            self.abort.set()
            messages = [("stop",)]
        for message in messages:
            if message[0] == "cancel":
                self.abort.set()
            elif message[0] == "clock":
                self.send(("clock", message[1], arrived, time.monotonic_ns()))
            else:
                self.inbox.put_nowait(message)

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.conn.rfd, self._on_message)
        self.send(("ready", os.getpid()))
        try:
            while True:
                message = await self.inbox.get()
                if message[0] == "stop":
                    return
                await self._do(message)
        except Exception as exc:  # a bug of ours: say what, then exit
            try:
                self.send(("crashed", repr(exc)[:2000]))
            finally:
                if self.exit_on_bug:
                    os._exit(1)
            raise
        finally:
            loop.remove_reader(self.conn.rfd)

    async def _do(self, message: tuple) -> None:
        kind = message[0]
        if kind == "warm":
            await self._warm(*message[1:])
        elif kind == "rate":
            await self._arm(*message[1:])
        elif kind == "start":
            self._start()
        elif kind == "window":
            await self._window(*message[1:])
        elif kind == "offset":
            self.offset_ns = int(message[1])
        else:
            raise ValueError(f"unknown message {kind!r}")

    async def _warm(self, key: tuple, base: Prompt, base_tag: str, run_tag: str,
                    slots: list[int]) -> None:
        """A new cell: make this shard's prompts, warm their prefixes."""
        cell = Cell(*key)
        self.abort = asyncio.Event()
        self.rate = None
        prompts: list[Prompt | None] = [None] * cell.concurrency
        for i in slots:
            prompts[i] = base if i == 0 else retag(base, run_tag, base_tag, slot_tag(cell, i))
        self.run = DecodeRun(cell, prompts, self.abort)  # type: ignore[arg-type]
        self.slots = list(slots)
        fills = await asyncio.gather(
            *(self.runner.send(cell, prompts[i], 1, PURPOSE_PREFIX_FILL, i, self.abort)
              for i in slots))
        self.send(("warmed", [shift_record(r, -self.offset_ns) for r in fills]))

    def _start(self) -> None:
        run = self.run
        assert run is not None
        run.tasks = [asyncio.create_task(self.runner.stream_loop(run, i)) for i in self.slots]
        self._reporter = asyncio.create_task(self._report(run))

    async def _report(self, run: DecodeRun) -> None:
        """Tell the parent which slots began producing, and a failure, as they happen."""
        told: set[int] = set()
        failed = False
        while True:
            new = [i for i in self.slots if i not in told
                   and run.live[i] is not None and run.live[i].producing]
            if new:
                told.update(new)
                self.send(("producing", new))
            if run.failure.is_set() and not failed:
                failed = True
                self.send(("failed",))
            if run.cancel.is_set():
                return
            await asyncio.sleep(REPORT_S)

    async def _arm(self, key: tuple, base: Prompt, base_tag: str, run_tag: str, output: int,
                   cap: int, first: int, step: int, offsets: list[int]) -> None:
        """A rate cell: its bodies made now, so the window finds them ready."""
        phase, context, concurrency, rate = key
        self.abort = asyncio.Event()
        self.run = None
        sender = RateSender(self.runner, output)
        bodies = await asyncio.to_thread(sender.bodies, base, base_tag, run_tag)
        due = [(first + j * step, offset) for j, offset in enumerate(offsets)]
        self.rate = RateShare(Cell(phase, context, concurrency, rate=rate), sender, bodies, due, cap)
        self.send(("armed",))

    async def _rate_window(self, share: RateShare, start_ns: int, end_ns: int) -> None:
        """Send this shard's requests in the parent's window (on this clock), drain
        them, and hand every record back on the parent's clock."""
        window = (start_ns + self.offset_ns, end_ns + self.offset_ns)
        records = await share.sender.send(share.cell, [share.bodies], share.due, window, share.cap,
                                          self.abort)
        self._hand_back(records, window)

    def _hand_back(self, records: list[RequestRecord], window: tuple[int, int]) -> None:
        """("done", ...) with the records, delays and window on the parent's clock."""
        delays = self.runner.client.monitor.delays(*window)
        back = -self.offset_ns
        self.send(("done", [shift_record(r, back) for r in records], shift_delays(delays, back),
                   (window[0] + back, window[1] + back)))
        gc.collect()
        gc.freeze()

    async def _window(self, start_ns: int, end_ns: int) -> None:
        """The parent's window: run the streams to end_ns (or a failure, or
        the parent's cancel), then cancel, parse and hand every record back.
        The edges come on the parent's clock; the streams run on this one."""
        if self.rate is not None:
            share, self.rate = self.rate, None
            await self._rate_window(share, start_ns, end_ns)
            return
        run = self.run
        assert run is not None
        start_ns, end_ns = start_ns + self.offset_ns, end_ns + self.offset_ns
        run.start_ns, run.end_ns = start_ns, end_ns
        with gc_paused():
            if not run.failure.is_set() and not self.abort.is_set():
                await self.runner.sleep_until(end_ns, run.failure, self.abort)
            run.cancel.set()
            await asyncio.gather(*run.tasks)
            await asyncio.gather(*run.parsing)
        await self._reporter
        self.run = None
        self._hand_back([r for r in run.records if r.purpose == PURPOSE_MEASURE], (start_ns, end_ns))
