"""The due-time wait rate cells send by (bench/core/duetimer.py): never early,
the loop free meanwhile, no polling before the last EARLY_NS, no fd left behind."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from bench.core import duetimer
from bench.core.duetimer import EARLY_NS, until_ns

pytestmark = pytest.mark.skipif(duetimer._TIMERFD is None, reason="no timerfd (not Linux)")

LOOPS = ["asyncio", "uvloop"]


def _run(kind: str, coro):
    if kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run(coro)
    return asyncio.run(coro)


def _timerfds() -> int:
    """This process's open timerfds."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[timerfd]"
        except OSError:
            pass  # the listing's own fd, closed since
    return n


@pytest.mark.parametrize("kind", LOOPS)
def test_staggered_waits_each_return_at_or_after_their_due_time(kind):
    async def main():
        base = time.monotonic_ns() + 200_000_000  # far enough that a busy host still arms them
        dues = [base + k * 3_000_000 for k in (5, 0, 3, 1, 4, 2)]  # armed out of order
        woke: dict[int, int] = {}

        async def wait(due: int) -> None:
            await until_ns(due)
            woke[due] = time.monotonic_ns()

        waits = asyncio.gather(*(wait(d) for d in dues))
        await asyncio.sleep(0)  # one pass of the loop: every wait has armed the timer
        during = _timerfds()
        await waits
        return during, dues, woke, duetimer._timers[asyncio.get_running_loop()].fd

    before = _timerfds()
    during, dues, woke, fd = _run(kind, main())
    assert during == before + 1  # one timer for every wait
    assert all(woke[d] >= d for d in dues)
    assert sorted(dues, key=woke.__getitem__) == sorted(dues)  # woken in due order
    assert fd is None  # closed once nothing waits
    assert _timerfds() == before


@pytest.mark.parametrize("kind", LOOPS)
def test_a_cancelled_wait_neither_wakes_early_nor_stops_the_next(kind):
    async def main():
        now = time.monotonic_ns()
        first = asyncio.create_task(until_ns(now + 15_000_000))
        second_due = now + 30_000_000
        second = asyncio.create_task(until_ns(second_due))
        await asyncio.sleep(0)  # both waits armed: no clock involved
        first.cancel()
        await second
        return second_due, time.monotonic_ns()

    due, done = _run(kind, main())
    assert done >= due


def test_the_loop_is_not_polled_before_the_last_stretch(monkeypatch):
    """Until EARLY_NS before its due time a wait sleeps in the loop's poll (the
    timerfd wakes it); the old wait yielded to the loop for its last 2 ms, which
    at tens of requests a second doubled the client's CPU per event."""
    yields: list[int] = []
    real_sleep = asyncio.sleep

    async def counted(delay, *args):
        yields.append(time.monotonic_ns())
        return await real_sleep(delay, *args)

    monkeypatch.setattr(duetimer.asyncio, "sleep", counted)

    async def main():
        due = time.monotonic_ns() + 30_000_000
        await until_ns(due)
        return due

    due = asyncio.run(main())
    assert all(t >= due - EARLY_NS for t in yields), [(due - t) / 1e6 for t in yields][:5]


def test_without_a_timerfd_the_wait_still_never_returns_early(monkeypatch):
    monkeypatch.setattr(duetimer, "_TIMERFD", None)

    async def main():
        due = time.monotonic_ns() + 10_000_000
        await until_ns(due)
        return due, time.monotonic_ns()

    due, done = asyncio.run(main())
    assert done >= due
