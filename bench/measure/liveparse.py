"""Parsing long streams' events while they run, so that one process holds a
bounded number of raw events whatever the number of streams or the window.

Why: a stream keeps each SSE event as it came (stamp and payload, about 480
bytes held for a 250-byte chunk) until it is parsed into a stamp and a count
(int64 arrays, bench/measure/chunks.py). Parsing only after the stream keeps JSON
(~3 µs an event) out of the window, but one process at 16,384 streams ×
64 tok/s grew to 23 GB and was killed before its window opened.

So a stream hands its raw events over in lists (its share of the budget,
at least `MIN_SPILL`), and the loop's `_ParseQueue` parses them in the
background: `PASS_QUOTA` events a loop pass, so reads keep their pace (a
callback a stream parsed every stream's list in one pass: 16,384 streams
blocked the loop for 5 s), plus, past `RAW_EVENT_BUDGET`, what came beyond
it: there parsing keeps pace with the reads at their cost, which a client
already behind pays in stamps its client-bound check reports (memory before
pace: the alternative is the OOM killer). The budget is high enough that a
window of the default matrix, or 16,384 streams × 16 tok/s for 10 s, never
reaches it. What is left when a stream ends is parsed by its cell.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from bench.measure.chunks import ParsedStream, StreamParser

RAW_EVENT_BUDGET = 4_000_000  # raw events a process may hold unparsed (~2 GB)
MIN_SPILL = 64  # a stream hands over no fewer than this at a time
PARSE_SLICE = 128  # events parsed between yields to the loop (about 0.4 ms)
PASS_QUOTA = 512  # events parsed a loop pass while under the budget

Events = list[tuple[int, bytes]]


def spill_at(streams: int) -> int:
    """How many raw events one of `streams` streams of this process holds
    before it hands them over."""
    return max(MIN_SPILL, RAW_EVENT_BUDGET // (2 * max(1, streams)))


class _ParseQueue:
    """The loop's parsers with events waiting: one callback a loop pass, a
    slice of one parser at a time, round robin."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready: deque[LiveParser] = deque()
        self.held = 0  # raw events handed over and not yet parsed
        self.handle: asyncio.Handle | None = None

    def add(self, parser: LiveParser) -> None:
        if not parser.queued:
            parser.queued = True
            self.ready.append(parser)
        if self.handle is None:
            self.handle = self.loop.call_soon(self.step)

    def step(self) -> None:
        self.handle = None
        # past the budget, what came beyond it too: parsing keeps pace with the
        # reads there, at their cost, rather than parse a backlog in one block
        quota = PASS_QUOTA + max(0, self.held - RAW_EVENT_BUDGET)
        while quota > 0 and self.ready:
            parser = self.ready[0]
            quota -= parser.parse_some(min(quota, PARSE_SLICE))
            if parser.pending:
                self.ready.rotate(-1)
            else:
                parser.queued = False
                self.ready.popleft()
        if self.ready:
            self.handle = self.loop.call_soon(self.step)
        else:
            _QUEUES.pop(id(self.loop), None)


_QUEUES: dict[int, _ParseQueue] = {}


def _queue(loop: asyncio.AbstractEventLoop) -> _ParseQueue:
    q = _QUEUES.get(id(loop))
    if q is None or q.loop is not loop:  # none yet, or a closed loop's under a reused id
        q = _QUEUES[id(loop)] = _ParseQueue(loop)
    return q


class LiveParser:
    """One stream's parser, fed in order: events handed over while the stream
    runs (`take`, from the reader), then the rest once it ends (`finish`)."""

    def __init__(self, max_tokens: int | None) -> None:
        self.parser = StreamParser(max_tokens)
        self.pending: deque[Events] = deque()
        self.pos = 0  # events of pending[0] already parsed
        self.queued = False  # in its loop's queue
        self.failed = False
        self.queue: _ParseQueue | None = None

    def take(self, events: Events) -> None:
        """Events the stream hands over (it starts a new list): parsed soon."""
        if self.failed:
            return  # the stream already failed on an event; the rest is moot
        self.pending.append(events)
        self.queue = _queue(asyncio.get_running_loop())
        self.queue.held += len(events)
        self.queue.add(self)

    def parse_some(self, limit: int) -> int:
        """Parse up to `limit` waiting events, in order; how many it took."""
        if not self.pending:
            return 0
        head = self.pending[0]
        end = min(len(head), self.pos + limit)
        ok = self.parser.feed(head[self.pos:end] if self.pos or end < len(head) else head)
        taken = end - self.pos
        self.pos = end
        if not ok:  # what is left is dropped: the stream has failed
            taken += len(head) - end + sum(len(e) for e in list(self.pending)[1:])
            self.failed = True
            self.pending.clear()
            self.pos = 0
        elif self.pos >= len(head):
            self.pending.popleft()
            self.pos = 0
        if self.queue is not None:
            self.queue.held -= taken
        return taken

    async def finish(self, rest: Events) -> ParsedStream:
        """The stream's parse once it has ended, `rest` being the events it
        still held; yields to the loop between slices (a 4,096-event stream
        in one piece blocked every other stream's reads for 10-30 ms). Its
        lists still in the loop's queue are parsed here, in order."""
        while self.pending:
            self.parse_some(PARSE_SLICE)
            await asyncio.sleep(0)
        for i in range(0, len(rest), PARSE_SLICE):
            if self.failed or not self.parser.feed(rest[i:i + PARSE_SLICE]):
                break
            await asyncio.sleep(0)
        return self.parser.result()

    def hook(self, streams: int) -> tuple[int, Callable[[Events], None]]:
        """What the stream client takes as `spill`: (events held at most, taker)."""
        return spill_at(streams), self.take
