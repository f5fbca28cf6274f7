"""Waking the event loop at a due time to within tens of microseconds, without spinning.

Why: a rate cell sends each request at its scheduled time (bench/measure/rate_cells.py),
and its send lag is published and judged (p99 ≤ max(1 ms, 1% of the mean gap)). The
loops' own timers wake up to a millisecond late (asyncio's epoll and libuv's timers
count whole milliseconds), so the sender used to sleep to 2 ms short of the due time
and then yield to the loop until it passed: on time, but each request's last 2 ms
were spent polling, which at tens of requests a second doubled the client's CPU per
event. On Linux a timerfd armed at the due time (CLOCK_MONOTONIC, absolute, the clock
time.monotonic_ns reads) makes the loop's own poll return on time instead: one timer
per loop, armed at the earliest pending due time, its expiry read by the loop like
any socket. Elsewhere (no timerfd) the sleep-then-yield wait is kept.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import heapq
import itertools
import os
import time
import weakref

SPIN_NS = 2_000_000  # without a timerfd: the last stretch before a due time, spent yielding
# With one: the timer is armed this much early and the rest spent yielding, for an idle
# CPU's wake-up (tens to a hundred microseconds) happens before the due time, not after.
EARLY_NS = 200_000

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc():
    """libc's timerfd functions, or None where there are none (not Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError, TypeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD = _libc() if os.name == "posix" else None


class DueTimer:
    """One loop's timerfd and the due times waiting on it (earliest first).

    The fd is opened when the first wait starts and closed when none is left, so
    a loop that stops waiting (a cell that ended) holds no fd; one closed with a
    wait pending (an interrupted run) closes it when the loop is collected. The
    timer keeps no reference to its loop (the loop's reader keeps the timer)."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self._close = None
        self.armed_ns: int | None = None
        self.waiting: list[tuple[int, int, asyncio.Future]] = []
        self._order = itertools.count()

    async def until(self, due_ns: int) -> None:
        wake = due_ns - EARLY_NS
        if wake > time.monotonic_ns():
            future = asyncio.get_running_loop().create_future()
            heapq.heappush(self.waiting, (wake, next(self._order), future))
            if self.fd is None:
                self._open()
            if self.armed_ns is None or wake < self.armed_ns:
                self._arm(wake)
            await future
        while time.monotonic_ns() < due_ns:
            await asyncio.sleep(0)

    def _open(self) -> None:
        assert _TIMERFD is not None
        fd = _TIMERFD[0](_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)
        asyncio.get_running_loop().add_reader(fd, self._expired)

    def _arm(self, due_ns: int) -> None:
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(due_ns, 1_000_000_000)
        if _TIMERFD[1](self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self.armed_ns = due_ns

    def _expired(self) -> None:
        """The fd is readable (the armed time passed): wake every wait now due, arm
        the next, or close the fd when none is left."""
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass  # re-armed since it became readable
        self.armed_ns = None
        now = time.monotonic_ns()
        while self.waiting and (self.waiting[0][0] <= now or self.waiting[0][2].done()):
            future = heapq.heappop(self.waiting)[2]
            if not future.done():
                future.set_result(None)
        if self.waiting:
            self._arm(self.waiting[0][0])
        else:
            asyncio.get_running_loop().remove_reader(self.fd)
            self._close()
            self.fd = None


_timers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def until_ns(due_ns: int) -> None:
    """Return at `due_ns` (CLOCK_MONOTONIC), not before and barely after; other
    tasks run meanwhile. With a timerfd (Linux) the loop sleeps until then; without,
    it sleeps to SPIN_NS short of it and then yields to the loop until it passes."""
    if _TIMERFD is not None:
        loop = asyncio.get_running_loop()
        timer = _timers.get(loop)
        if timer is None:
            timer = _timers[loop] = DueTimer()
        await timer.until(due_ns)
        return
    while (left := due_ns - time.monotonic_ns()) > 0:
        await asyncio.sleep((left - SPIN_NS) / 1e9 if left > SPIN_NS else 0)
