"""Click parameter types for `bench run`: a bad value fails at parse time.

Why types and not checks in the command body: click names the flag in its
error, runs before anything touches the network or the disk, and one place
holds the rule for every flag that takes seconds or tokens. Non-finite
values (`nan`, `inf`, `1e400`, which Python reads as inf) are refused here:
a NaN window would be written into run.yaml and an infinite one never ends.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any
from urllib.parse import urlsplit

import click

from bench.core.plan import (
    PlanError,
    parse_concurrency,
    parse_contexts,
    parse_percents,
    parse_rates,
    parse_tokens,
    parse_turns,
    shown,
)
from bench.core.sources import check_address
from bench.core.workers import AUTO, MAX_WORKERS
from rundir.clierrors import flag_name
from rundir.redact import redact_url

WEEK_S = 7 * 86400.0  # the longest any wait or window may be


class Seconds(click.ParamType):
    """A finite number of seconds in (0, WEEK_S], or [0, WEEK_S] with zero_ok."""

    name = "seconds"

    def __init__(self, zero_ok: bool = False, most: float = WEEK_S) -> None:
        self.zero_ok = zero_ok
        self.most = most

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"expected a number of seconds, got {shown(value)}", param, ctx)
        low = "≥ 0" if self.zero_ok else "> 0"
        if not math.isfinite(number):
            self.fail(f"expected a finite number of seconds {low}, got {shown(value)}",
                      param, ctx)
        if number < 0 or (number == 0 and not self.zero_ok) or number > self.most:
            self.fail(f"expected seconds {low} and at most {self.most:,.0f}, "
                      f"got {shown(value)}", param, ctx)
        return number


class Tokens(click.ParamType):
    """A whole token count such as 8192, 8k or 1M (1K = 1024)."""

    name = "tokens"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_tokens(str(value), flag_name(param))
        except PlanError as exc:
            self.fail(str(exc), param, ctx)


class Contexts(click.ParamType):
    """Comma-separated contexts; `max` stands for the largest that fits."""

    name = "contexts"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list[int | str]:
        if isinstance(value, list):
            return value
        try:
            return parse_contexts(str(value), flag_name(param)) or []
        except PlanError as exc:
            self.fail(str(exc), param, ctx)


class Levels(click.ParamType):
    """Comma-separated concurrency levels: whole numbers ≥ 1."""

    name = "levels"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            return parse_concurrency(str(value), flag_name(param)) or []
        except PlanError as exc:
            self.fail(str(exc), param, ctx)


class Percents(click.ParamType):
    """Comma-separated whole percents 0..100 (`--prefix-reuse`)."""

    name = "percents"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            return parse_percents(str(value), flag_name(param)) or []
        except PlanError as exc:
            self.fail(str(exc), param, ctx)


class Turns(click.ParamType):
    """Comma-separated conversation turns, whole numbers ≥ 1 (`--turns`)."""

    name = "turns"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            return parse_turns(str(value), flag_name(param)) or []
        except PlanError as exc:
            self.fail(str(exc), param, ctx)


class Rates(click.ParamType):
    """Comma-separated offered rates, requests/s > 0 (`--rate`)."""

    name = "rates"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> list[float]:
        if isinstance(value, list):
            return value
        try:
            return parse_rates(str(value), flag_name(param)) or []
        except PlanError as exc:
            self.fail(str(exc), param, ctx)


class Arrivals(click.ParamType):
    """An arrival process: poisson, constant or gamma:K (`--arrivals`), kept as
    rundir.arrivals writes it back ("gamma:4")."""

    name = "process"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from rundir.arrivals import parse_process

        try:
            return str(parse_process(str(value)))
        except ValueError as exc:  # its message names --arrivals (one_line adds it only if not)
            self.fail(str(exc), param, ctx)


class Workers(click.ParamType):
    """`auto` or a whole number of processes, 1..MAX_WORKERS."""

    name = "workers"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value == AUTO:
            return value
        text = str(value).strip().lower()
        if text == AUTO:
            return AUTO
        if not re.fullmatch(r"[0-9]{1,4}", text) or not 1 <= int(text) <= MAX_WORKERS:
            self.fail(f"expected auto or a whole number from 1 to {MAX_WORKERS}, "
                      f"got {shown(value)}", param, ctx)
        return int(text)


class ShardSpec(click.ParamType):
    """`i/N`: this host is shard i of N (0 ≤ i < N, 2 ≤ N ≤ MAX_WORKERS)."""

    name = "i/N"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        m = re.fullmatch(r"\s*([0-9]{1,4})\s*/\s*([0-9]{1,4})\s*", str(value))
        if not m or not 0 <= int(m[1]) < int(m[2]) or not 2 <= int(m[2]) <= MAX_WORKERS:
            self.fail(f"expected i/N with 0 <= i < N and 2 <= N <= {MAX_WORKERS} "
                      f"(e.g. 0/2 on the coordinator), got {shown(value)}", param, ctx)
        return int(m[1]), int(m[2])


class Address(click.ParamType):
    """HOST:PORT (an IPv6 host in brackets)."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        from bench.distributed.remote import parse_address

        try:
            return parse_address(str(value))
        except ValueError:
            self.fail(f"expected HOST:PORT, e.g. bench-0.bench:7700, got {shown(value)}",
                      param, ctx)
class SourceAddress(click.ParamType):
    """A local IP address this host can bind (bench/core/sources.py)."""

    name = "address"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_address(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class BaseUrl(click.ParamType):
    """An http(s) URL with a host: the server to measure."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        try:
            parts = urlsplit(text)
            port_ok = parts.port is None or 0 < parts.port < 65536
        except ValueError:  # e.g. a port that is not a number
            parts, port_ok = None, False
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
                or not port_ok:
            safe = redact_url(text)  # a malformed URL may still carry a password
            self.fail(f"expected an http:// or https:// URL with a host, e.g. "
                      f"http://127.0.0.1:8000, got {shown(safe)}", param, ctx)
        return text


_CONTROL_NAMES = {"\r": "CR", "\n": "LF", "\t": "a tab", "\0": "NUL", "\x7f": "DEL"}


def api_key_problem(key: str) -> str | None:
    """What is wrong with an API key, never quoting it; None when usable.

    Why: the key travels in an HTTP header, which holds printable ASCII only.
    A key with CR or LF (pasted with its line end) made every request fail as
    if no server were there, and a non-ASCII one a traceback; said at the
    flag, the user learns the real cause."""
    bad = next((c for c in key if not " " <= c <= "~"), None)
    if bad is None:
        return None
    if unicodedata.category(bad) == "Cc":
        hint = "; a line end pasted with it?" if bad in "\r\n" else ""
        what = f"a control character ({_CONTROL_NAMES.get(bad, f'U+{ord(bad):04X}')}{hint})"
    else:
        what = "a character outside ASCII"
    return f"expected printable ASCII characters, got a key holding {what}; the key is not shown"


class ApiKey(click.ParamType):
    """An API key of printable ASCII characters (it travels in an HTTP header)."""

    name = "key"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        problem = api_key_problem(str(value))
        if problem:
            self.fail(problem, param, ctx)
        return str(value)


class LengthSpec(click.ParamType):
    """A length mix (`--output-lengths`): fixed, uniform:A-B, normal:MEAN,SD,MIN,MAX or file,
    kept as rundir.lengths writes it back."""

    name = "spec"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from rundir.lengths import parse_mix

        try:
            return str(parse_mix(str(value), flag_name(param)))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class InputLengthSpec(click.ParamType):
    """An input length mix (`--input-lengths`): fixed, uniform:A-B or normal:MEAN,SD,MIN,MAX
    as fractions of the context, or file; kept as rundir.lengths writes it back."""

    name = "spec"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from rundir.lengths import parse_input_mix

        try:
            return str(parse_input_mix(str(value), flag_name(param)))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Sampling(click.ParamType):
    """A finite sampling setting in [low, high] (`--temperature`, `--top-p`); `open_low`:
    low itself refused (a top-p of 0 keeps no token)."""

    name = "number"

    def __init__(self, low: float, high: float, open_low: bool = False) -> None:
        self.low, self.high, self.open_low = low, high, open_low

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(str(value).strip())
        except ValueError:
            self.fail(f"expected a number, got {shown(value)}", param, ctx)
        below = number <= self.low if self.open_low else number < self.low
        if not math.isfinite(number) or below or number > self.high:
            low = f"{self.low:g} <" if self.open_low else f"{self.low:g} ≤"
            self.fail(f"expected a number with {low} x ≤ {self.high:g}, got {shown(value)}", param, ctx)
        return number
