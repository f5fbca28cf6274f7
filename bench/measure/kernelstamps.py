"""Kernel receive stamps on the collector's clock: what a socket asks for
(SO_TIMESTAMPNS), how the ancillary data is read, and the offset that moves
the kernel's realtime stamps onto the monotonic clock every figure uses.

One offset a process (`CLOCK`), kept by `RealtimeOffset`; bench/measure/stream.py
applies it to each read and keeps a stamp only when it can be that data's
arrival (between the request's send and the read, give or take SANE_NS).
"""

from __future__ import annotations

import socket
import struct
import sys
import time

# SO_TIMESTAMPNS (== SCM_TIMESTAMPNS) is 35 in Linux's generic ABI; Python 3.11
# does not export it. A wrong value only means that no stamps come back.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35) if sys.platform == "linux" else None
TIMESPEC = struct.Struct("@ll")
ANC_SIZE = socket.CMSG_SPACE(TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# A kernel stamp may lie this far outside [request sent, data read]: the realtime
# offset's error. One further out is not this data's arrival (or the offset is stale).
SANE_NS = 1_000_000
_mono = time.monotonic_ns


class RealtimeOffset:
    """CLOCK_REALTIME − CLOCK_MONOTONIC, since the kernel stamps packets on the
    realtime clock: the narrowest of a few bracketed reads, re-measured every
    second in case the system clock is stepped, and at once when a stamp
    falls outside the time it must lie in (a step since the last measure:
    NTP, a VM resumed), so that a step does not cost the next second's
    stamps."""

    RETRY_NS = 10_000_000  # re-measure on a bad stamp at most this often

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

    def retry(self, sec: int, nsec: int, sent_ns: int, now: int) -> int:
        """A stamp `to_mono` put outside [sent_ns, now] (give or take SANE_NS),
        converted again with the offset measured afresh; -1 when it still
        cannot be the arrival of data sent for at `sent_ns` and read at `now`."""
        if now - self.at < self.RETRY_NS:
            return -1
        self.measure()
        k = sec * 1_000_000_000 + nsec - self.offset
        return k if sent_ns - SANE_NS <= k <= now + SANE_NS else -1


CLOCK = RealtimeOffset()
