"""Per-request variation of the reference server: some requests' first token
comes later, some decode slower, chosen by request number (never by the
clock), so a test knows each request's delay before it is sent and a tail
test has tails whose every rank it can predict.

The rules (the scenario's toy model, scenario.py, repeats them):

- **A slower first token**: request k with k % `slow_first_every` == 0 has its
  first token due `slow_first_extra_ms` later than it would be (after its
  slot, TTFT and prefill). A list of delays is cycled over those requests:
  the j-th of them (k = j × slow_first_every) waits the ((j − 1) mod len)-th.
- **Half speed**: request k with k % `half_speed_every` == 0 emits a chunk
  only at every `half_speed_steps`-th step of the global step clock, counted
  from its first token (2: half speed; its chunks are two steps apart). A
  list is cycled over those requests as the delays are. The step clock and
  every other stream are untouched; a chunk still carries the scenario's
  `tokens_per_chunk`.

Requests are numbered as for `fault_every` (scenario.py); each truth record
carries the request's `first_extra_ms` and `every_steps`, and per streamed
chunk its step of the clock (`steps`), which a test counts instead of time.
"""

from __future__ import annotations

from typing import Any


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _cycled(every: int | None, values: Any, k: int, default: Any) -> Any:
    """The value of request k (1-based) under 'every k-th, values cycled'."""
    if not every or k % every:
        return default
    values = _as_list(values)
    return values[(k // every - 1) % len(values)]


def first_token_extra_ms(sc: Any, k: int) -> float:
    """How much later than otherwise request k's first token is due (ms)."""
    return float(_cycled(sc.slow_first_every, sc.slow_first_extra_ms, k, 0.0))


def every_steps(sc: Any, k: int) -> int:
    """At every how many steps of the clock request k emits a chunk (1: each)."""
    return int(_cycled(sc.half_speed_every, sc.half_speed_steps, k, 1))


def check(sc: Any) -> str | None:
    """The variation fields' problem, or None when they are valid."""
    for name in ("slow_first_every", "half_speed_every"):
        every = getattr(sc, name)
        if every is not None and (not isinstance(every, int) or every < 1):
            return f"{name} must be an int >= 1"
    delays = _as_list(sc.slow_first_extra_ms)
    if not delays or not all(isinstance(x, int | float) and x >= 0 for x in delays):
        return "slow_first_extra_ms must be a number >= 0 or a non-empty list of them"
    steps = _as_list(sc.half_speed_steps)
    if not steps or not all(isinstance(m, int) and m >= 1 for m in steps):
        return "half_speed_steps must be an int >= 1 or a non-empty list of them"
    return None
