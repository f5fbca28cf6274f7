"""Every message of the shard protocol checked, field by field, before it is used.

Why: a shard's records become published figures, and the coordinator used
a message's parts as they came: a `done` whose records were a list of
ints killed the whole run with a 62-line traceback. The unpickler
(bench/distributed/remote.py) only limits which types can be built; this says which
messages exist, how many parts each has and what each part must be (a
request record with every field of its type, window delays, whole
numbers), and names what is wrong in one line (BadMessage). The
protocol itself is in bench/distributed/shard_worker.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.measure.cells import Settings
from bench.measure.monitor import WindowDelays
from bench.measure.records import RequestRecord
from bench.server.server_info import ServerInfo
from bench.workload.prompts import Prompt


@dataclass
class ShardSetup:
    """What a shard process needs, handed over once at its start."""

    index: int  # the shard's number, 1..N
    id_prefix: str  # its request ids are `<id_prefix>-<n>`
    info: ServerInfo
    api_key: str | None
    settings: Settings
    secrets: tuple[str, ...]
    source_addresses: tuple[str, ...] = ()  # bench/core/sources.py


class BadMessage(ValueError):
    """A message that is not one the protocol has, or holds a wrong part."""


Check = Callable[[object, str], None]


def _kind(value: object) -> str:
    """"an int", "a list": what a value is, for a message."""
    name = type(value).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _a(kind: type) -> str:
    name = kind.__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _int(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise BadMessage(f"{what} is {_kind(value)}, not a whole number")


def _opt(check: Check) -> Check:
    def checked(value: object, what: str) -> None:
        if value is not None:
            check(value, what)
    return checked


def _is(kind: type) -> Check:
    def checked(value: object, what: str) -> None:
        if not isinstance(value, kind):
            raise BadMessage(f"{what} is {_kind(value)}, not {_a(kind)}")
    return checked


def _bool(value: object, what: str) -> None:
    if not isinstance(value, bool | np.bool_):
        raise BadMessage(f"{what} is {_kind(value)}, not true or false")


def _stamps(value: object, what: str) -> None:
    if not (isinstance(value, np.ndarray) and value.dtype == np.int64 and value.ndim == 1):
        raise BadMessage(f"{what} is {_kind(value)}, not an int64 array")


def _list_of(check: Check, n: int | None = None) -> Check:
    def checked(value: object, what: str) -> None:
        if not isinstance(value, list | tuple) or (n is not None and len(value) != n):
            size = f"{n} " if n is not None else ""
            raise BadMessage(f"{what} is {_kind(value)}, not a list of {size}items")
        for i, item in enumerate(value):
            check(item, f"{what}[{i}]")
    return checked


def _dict_of(key: Check, item: Check) -> Check:
    def checked(value: object, what: str) -> None:
        if not isinstance(value, dict):
            raise BadMessage(f"{what} is {_kind(value)}, not a mapping")
        for k, v in value.items():
            key(k, f"a key of {what}")
            item(v, f"{what}[{k}]")
    return checked


_str, _ostr, _oint = _is(str), _opt(_is(str)), _opt(_int)

# Every field of a request record, and what it must be (tests check this
# against the dataclass, so a new field cannot go unchecked).
RECORD_FIELDS: dict[str, Check] = {
    "phase": _str, "context": _int, "concurrency": _int, "request_id": _str, "purpose": _str,
    "stream_index": _int, "send_ns": _int, "end_ns": _oint, "prompt_tokens": _oint,
    "cached_tokens": _oint, "finish_reason": _ostr, "error": _ostr, "cancelled": _bool,
    "chunk_ns": _stamps, "chunk_tokens": _stamps, "content_tail": _ostr,
    "reasoning_tail": _ostr, "counting": _str, "final_usage_tokens": _oint, "status": _int,
    "max_tokens": _oint, "ignore_eos": _bool, "text": _ostr,
}

DELAY_FIELDS: dict[str, Check] = {
    "start_ns": _int, "end_ns": _int, "events": _int, "kernel_events": _int, "ticks": _int,
    "read_delays": _dict_of(_int, _int), "stalls": _dict_of(_int, _list_of(_int, 2)),
    "long_stalls": _list_of(_list_of(_int, 2)), "span_ns": _int,
}


def _fields(kind: type, fields: dict[str, Check]) -> Check:
    """An instance of the dataclass `kind` holding exactly `fields`, each as checked."""
    def checked(value: object, what: str) -> None:
        if type(value) is not kind:
            raise BadMessage(f"{what} is {_kind(value)}, not {_a(kind)}")
        state = vars(value)
        if set(state) != set(fields):
            odd = sorted(set(state) ^ set(fields))[:3]
            raise BadMessage(f"{what} is a {kind.__name__} with other fields ({', '.join(odd)})")
        for name, check in fields.items():
            check(state[name], f"{what}.{name}")
    return checked


def _record(value: object, what: str) -> None:
    _fields(RequestRecord, RECORD_FIELDS)(value, what)
    assert isinstance(value, RequestRecord)
    if len(value.chunk_ns) != len(value.chunk_tokens):
        raise BadMessage(f"{what} has {len(value.chunk_ns)} chunk times for "
                         f"{len(value.chunk_tokens)} token counts")


def _cell_key(value: object, what: str) -> None:
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise BadMessage(f"{what} is {_kind(value)}, not a cell's (phase, context, concurrency)")
    _str(value[0], f"{what}[0]")
    _int(value[1], f"{what}[1]")
    _int(value[2], f"{what}[2]")


_records = _list_of(_record)
_delays = _fields(WindowDelays, DELAY_FIELDS)
_window = _list_of(_int, 2)
_slots = _list_of(_int)

# kind -> the checks of its parts after the kind (bench/distributed/shard_worker.py's protocol)
Parts = tuple[tuple[str, Check], ...]

# kind -> its parts after the kind, named (bench/distributed/shard_worker.py's protocol)
FROM_SHARD: dict[str, Parts] = {
    "ready": (("pid", _int),),
    "warmed": (("records", _records),),
    "producing": (("slots", _slots),),
    "failed": (),
    "done": (("records", _records), ("delays", _delays), ("window", _window)),
    "crashed": (("text", _str),),
    "clock": (("t0", _int), ("t1", _int), ("t2", _int)),
}

TO_SHARD: dict[str, Parts] = {
    "setup": (("setup", _is(object)),),  # checked in full by `check_setup`
    "refused": (("why", _str),),
    "warm": (("cell", _cell_key), ("base", _is(Prompt)), ("base_tag", _str),
             ("run_tag", _str), ("slots", _slots)),
    "start": (),
    "window": (("start_ns", _int), ("end_ns", _int)),
    "cancel": (),
    "stop": (),
    "clock": (("t0", _int),),
    "offset": (("offset_ns", _int),),
}


def _check(message: object, kinds: dict[str, Parts], side: str) -> tuple:
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise BadMessage(f"{_kind(message)} where a message of the shard protocol belongs")
    kind = message[0]
    if kind not in kinds:
        raise BadMessage(f"a message {kind[:40]!r}, which {side} does not send")
    parts = kinds[kind]
    if len(message) != 1 + len(parts):
        raise BadMessage(f"a {kind!r} message of {len(message) - 1} parts, not {len(parts)}")
    for (name, check), value in zip(parts, message[1:], strict=True):
        try:
            check(value, name)
        except BadMessage as exc:
            raise BadMessage(f"a {kind!r} message whose {exc}") from None
    return message


def check_from_shard(message: object) -> tuple:
    """`message` if it is one a shard sends, whole and typed; BadMessage (one line) if not."""
    return _check(message, FROM_SHARD, "a shard")


def check_to_shard(message: object) -> tuple:
    """`message` if it is one a coordinator (or a parent) sends; BadMessage if not."""
    return _check(message, TO_SHARD, "a coordinator")


def check_setup(value: object) -> None:
    """A remote shard's setup, before it is used (its settings and server facts typed)."""
    if type(value) is not ShardSetup:
        raise BadMessage(f"a setup that is a {_kind(value)}")
    _int(value.index, "the setup's index")
    _str(value.id_prefix, "the setup's request-id prefix")
    _is(ServerInfo)(value.info, "the setup's server facts")
    _is(Settings)(value.settings, "the setup's settings")
    for f in dataclasses.fields(Settings):
        v = getattr(value.settings, f.name)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise BadMessage(f"the setup's settings.{f.name} is a {_kind(v)}, not a number")
    _str(value.info.model, "the setup's model")
