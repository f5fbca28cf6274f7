"""Parsing a long stream's events while it runs, so that one process holds a
bounded number of raw events whatever the number of streams or the window.

Why: a stream keeps each SSE event as it came (stamp and payload, about 400
bytes held for a 250-byte chunk) until it is parsed into a stamp and a count
(about 20 bytes, bench/chunks.py). Parsing only after the stream keeps JSON
out of the window, but one process at 16,384 streams × 64 tok/s grew to
23 GB and was killed before its window opened. So a stream whose raw events
reach its share of `RAW_EVENT_BUDGET` hands them here, and they are parsed
`PARSE_SLICE` at a time from loop callbacks, between reads (a read's stamp is
the kernel's, taken before any of this runs). Streams that stay under their
share, as in the default matrix, are parsed exactly as before: once ended.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from bench.chunks import ParsedStream, StreamParser

RAW_EVENT_BUDGET = 1_000_000  # raw events a process may hold, over all its streams
MIN_SPILL = 64  # but a stream hands over no fewer than this at a time
PARSE_SLICE = 128  # events parsed between yields to the loop (about 1 ms)

Events = list[tuple[int, bytes]]


def spill_at(streams: int) -> int:
    """How many raw events one of `streams` streams of this process may hold."""
    return max(MIN_SPILL, RAW_EVENT_BUDGET // max(1, streams))


class LiveParser:
    """One stream's parser, fed in order: events handed over while the stream
    runs (`take`, from the reader), then the rest once it ends (`finish`)."""

    def __init__(self, max_tokens: int | None) -> None:
        self.parser = StreamParser(max_tokens)
        self.pending: deque[Events] = deque()
        self.pos = 0  # events of pending[0] already parsed
        self.scheduled: asyncio.Handle | None = None
        self.failed = False

    def take(self, events: Events) -> None:
        """Events the stream hands over (it starts a new list): parsed soon."""
        if self.failed:
            return  # the stream already failed on an event; the rest is moot
        self.pending.append(events)
        if self.scheduled is None:
            self.scheduled = asyncio.get_running_loop().call_soon(self._step)

    def _step(self) -> None:
        self.scheduled = None
        if not self.pending:  # finish() took the rest
            return
        # One slice a loop pass keeps reads flowing; a parser two lists behind
        # (the reads outpace it) catches up a whole list at a time instead, so
        # what it holds stays bounded.
        self._parse(whole=len(self.pending) > 2)
        if self.pending:
            self.scheduled = asyncio.get_running_loop().call_soon(self._step)

    def _parse(self, whole: bool = False) -> None:
        head = self.pending[0]
        end = len(head) if whole else min(len(head), self.pos + PARSE_SLICE)
        ok = self.parser.feed(head[self.pos:end] if self.pos or end < len(head) else head)
        self.pos = end
        if not ok:
            self.failed = True
            self.pending.clear()
            self.pos = 0
        elif self.pos >= len(head):
            self.pending.popleft()
            self.pos = 0

    async def finish(self, rest: Events) -> ParsedStream:
        """The stream's parse once it has ended, `rest` being the events it
        still held; yields to the loop between slices (a 4,096-event stream
        in one piece blocked every other stream's reads for 10-30 ms)."""
        if rest and not self.failed:
            self.pending.append(rest)
        while self.pending:
            self._parse()
            await asyncio.sleep(0)
        if self.scheduled is not None:
            self.scheduled.cancel()
            self.scheduled = None
        return self.parser.result()

    def hook(self, streams: int) -> tuple[int, Callable[[Events], None]]:
        """What the stream client takes as `spill`: (events held at most, taker)."""
        return spill_at(streams), self.take
