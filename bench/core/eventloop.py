"""How every collector process runs its event loop: uvloop when it is
installed (its socket reads cost less per event, docs/performance.md),
asyncio's own loop otherwise. One home, so that the run's parent and its
shard processes (local or on other hosts) run the same loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def asyncio_run(coro: Coroutine[Any, Any, Any]) -> None:
    """Run `coro` to its end on a fresh loop (uvloop's when installed)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    uvloop.run(coro)
