"""The shard protocol's messages on the wire: a typed schema, checked as each frame is decoded.

Why: a shard's records become published figures, and a coordinator once
used a message's parts as they came (a `done` whose records were a list
of ints killed the whole run with a 62-line traceback). Each message is
one MessagePack array, `[kind, part, ...]`, decoded by msgspec against the
schema below for the side that reads it: an unknown kind, a missing or
extra part, or a part of the wrong type (a bool where a count belongs, a
record without a field) is refused in one line (BadMessage) before
anything uses it. The protocol itself is in bench/distributed/shard_worker.py.

Why msgspec, not pickle or Arrow IPC: pickle builds whatever a frame names,
so it needed an allow-list unpickler and then a check of every part by hand
(both gone); msgspec decodes only what the schema says, in C, and a record's
two stamp arrays cross as raw little-endian int64 bytes. Arrow IPC would
suit the records alone, but most messages are a few integers (clock
exchanges, slots that began producing) where an IPC stream's schema
would outweigh the message, and the records stay Python objects on both
ends. benchmarks/wire_format.py measures this format against pickle.

In a process, a message is still a tuple, `(kind, part, ...)`: `encode`
takes one and `Side.decode` gives one back, its records and delays as the
collector's own types.
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass

import msgspec
import numpy as np

from bench.distributed.peer_auth import printable
from bench.measure.cells import Settings
from bench.measure.monitor import WindowDelays
from bench.measure.records import RequestRecord
from bench.server.server_info import ServerInfo
from bench.workload.prompts import Prompt

STAMPS = np.dtype("<i8")  # a record's chunk_ns and chunk_tokens on the wire, whatever the host's order


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


class WireRecord(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A RequestRecord on the wire: its fields in order (a test holds them to
    the dataclass's), the stamps as int64 bytes."""

    phase: str
    context: int
    concurrency: int
    request_id: str
    purpose: str
    stream_index: int
    send_ns: int
    end_ns: int | None
    prompt_tokens: int | None
    cached_tokens: int | None
    finish_reason: str | None
    error: str | None
    cancelled: bool
    chunk_ns: bytes
    chunk_tokens: bytes
    content_tail: str | None
    reasoning_tail: str | None
    prefix_reuse_target: int | None
    turn: int | None
    prefix_group: int | None
    conversation_id: int | None
    conversation_turn: int | None
    engine_cached_tokens: int | None
    rate_target: float | None
    scheduled_ns: int | None
    engine_draft_tokens: int | None
    engine_draft_accepted: int | None
    counting: str
    final_usage_tokens: int | None
    status: int
    max_tokens: int | None
    ignore_eos: bool
    text: str | None
    engine_computed_tokens: int | None
    prompt_index: int | None
    output_target: int | None
    input_target: int | None


RECORD_FIELDS = WireRecord.__struct_fields__
_ARRAYS = {RECORD_FIELDS.index("chunk_ns"), RECORD_FIELDS.index("chunk_tokens")}


class _Message(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A message: `[kind, part, ...]`, its kind the tag."""


# Shard -> coordinator (or parent)
class Ready(_Message, tag="ready"):
    pid: int


class Warmed(_Message, tag="warmed"):
    records: list[WireRecord]


class Producing(_Message, tag="producing"):
    slots: list[int]


class Failed(_Message, tag="failed"):
    pass


class Done(_Message, tag="done"):
    records: list[WireRecord]
    delays: WindowDelays
    window: tuple[int, int]


class Armed(_Message, tag="armed"):
    pass


class Crashed(_Message, tag="crashed"):
    text: str


class ClockAnswer(_Message, tag="clock"):
    t0: int
    t1: int
    t2: int


# Coordinator (or parent) -> shard
class Setup(_Message, tag="setup"):
    setup: ShardSetup


class Refused(_Message, tag="refused"):
    why: str


class Warm(_Message, tag="warm"):
    cell: tuple[str, int, int]
    base: Prompt
    base_tag: str
    run_tag: str
    slots: list[int]


class Rate(_Message, tag="rate"):
    cell: tuple[str, int, int, float]  # phase, context, the cell's cap, offered requests/s
    base: Prompt
    base_tag: str
    run_tag: str
    output: int  # max_tokens of every request
    cap: int  # this shard's share of the cap (0: none)
    first: int  # its requests are first, first + step, ...
    step: int
    offsets: list[int]  # theirs, ns from the window's start


class Start(_Message, tag="start"):
    pass


class Window(_Message, tag="window"):
    start_ns: int
    end_ns: int


class Cancel(_Message, tag="cancel"):
    pass


class Stop(_Message, tag="stop"):
    pass


class Clock(_Message, tag="clock"):
    t0: int


class Offset(_Message, tag="offset"):
    offset_ns: int


# -- encoding ------------------------------------------------------------------------------


def _stamps(values: object) -> bytes:
    return np.asarray(values, dtype=STAMPS).tobytes()


def _row(record: RequestRecord) -> tuple:
    """A record as WireRecord's array (no Struct built: the tuple encodes alike)."""
    state = record.__dict__
    return tuple(_stamps(state[name]) if i in _ARRAYS else state[name]
                 for i, name in enumerate(RECORD_FIELDS))


def _part(value: object) -> object:
    if isinstance(value, list):
        return [_row(v) if type(v) is RequestRecord else v for v in value]
    return value


def _hook(value: object) -> object:
    """numpy scalars as the numbers they are; anything else is a bug of the sender."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.floating):
        return float(value)
    raise NotImplementedError(f"a {type(value).__name__} cannot cross the shard protocol")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_hook)


def encode(message: tuple) -> bytes:
    """A message's frame body: `(kind, part, ...)` as one MessagePack array. Nothing is
    checked here: what a peer sends is checked where it is read (`Side.decode`)."""
    return _ENCODER.encode(tuple(_part(p) for p in message))


# -- decoding ------------------------------------------------------------------------------


def _record(wire: WireRecord, kind: str, i: int) -> RequestRecord:
    if len(wire.chunk_ns) % STAMPS.itemsize or len(wire.chunk_tokens) % STAMPS.itemsize:
        raise BadMessage(f"a {kind!r} message whose records[{i}] has stamps that are not "
                         "whole int64s")
    if len(wire.chunk_ns) != len(wire.chunk_tokens):
        raise BadMessage(f"a {kind!r} message whose records[{i}] has "
                         f"{len(wire.chunk_ns) // 8} chunk times for "
                         f"{len(wire.chunk_tokens) // 8} token counts")
    values = list(msgspec.structs.astuple(wire))
    for j in _ARRAYS:
        values[j] = np.frombuffer(values[j], dtype=STAMPS)
    return RequestRecord(*values)


_WORDS = {"object": "a map", "array": "a list", "int": "an int", "str": "a str",
          "bool": "a bool", "float": "a float", "null": "nothing", "bytes": "bytes",
          "ext": "an extension value"}
_TYPE_ERROR = re.compile(r"Expected `([^`]+)`, got `([^`]+)`")


def _word(name: str) -> str:
    base = name.split(" ")[0]
    return _WORDS.get(base, f"a {base}")


class Side:
    """What one end reads: the messages the other end sends, and who that is."""

    def __init__(self, sender: str, kinds: tuple[type[_Message], ...]) -> None:
        self.sender = sender
        self._decoder = msgspec.msgpack.Decoder(type=_union(kinds))
        self._parts = {k.__struct_config__.tag: k.__struct_fields__ for k in kinds}

    def decode(self, body: bytes | memoryview) -> tuple:
        """The message in `body`, whole and typed; BadMessage (one line) if not."""
        try:
            message = self._decoder.decode(body)
        except msgspec.ValidationError as exc:
            raise BadMessage(self._why(body, str(exc))) from None
        except (msgspec.DecodeError, RecursionError) as exc:
            raise BadMessage(f"a frame that is not MessagePack ({type(exc).__name__}: "
                             f"{printable(str(exc), 120)})") from None
        kind = message.__struct_config__.tag
        parts = [getattr(message, name) for name in message.__struct_fields__]
        if kind in ("warmed", "done"):
            parts[0] = [_record(w, kind, i) for i, w in enumerate(parts[0])]
        return (kind, *parts)

    def _why(self, body: bytes | memoryview, error: str) -> str:
        """msgspec's complaint as the protocol's words: which message, which part."""
        if error.startswith("Expected `str`") and error.endswith(" - at `$[0]`"):
            return "a message that does not start with its kind"
        try:
            head = msgspec.msgpack.decode(body, type=list[msgspec.Raw])
        except RecursionError:  # msgspec skips a nested part by recursing
            return "a message nested too deep to read"
        except (msgspec.ValidationError, msgspec.DecodeError):
            got = _TYPE_ERROR.match(error)
            what = _word(got[2]) if got else "something"
            return f"{what} where a message of the shard protocol belongs"
        try:
            kind = msgspec.msgpack.decode(head[0], type=str) if head else None
        except (msgspec.ValidationError, msgspec.DecodeError):
            kind = None
        if kind is None:
            return "a message that does not start with its kind"
        if kind not in self._parts:
            return f"a message {printable(kind, 40)!r}, which {self.sender} does not send"
        names = self._parts[kind]
        if len(head) != 1 + len(names):
            return f"a {kind!r} message of {len(head) - 1} parts, not {len(names)}"
        text, _, at = error.partition(" - at `$")
        where = re.match(r"\[(\d+)\](.*)`$", at)
        if where is None or not 1 <= int(where[1]) <= len(names):
            return f"a {kind!r} message that does not parse ({printable(error, 120)})"
        part = names[int(where[1]) - 1] + where[2]
        got = _TYPE_ERROR.match(text)
        if got is None:
            return f"a {kind!r} message whose {part}: {printable(text, 120)}"
        wanted = _word(got[1])
        if re.fullmatch(r"records\[\d+\]", part):
            wanted = "a RequestRecord"
        return f"a {kind!r} message whose {part} is {_word(got[2])}, not {wanted}"


def _union(kinds: tuple[type[_Message], ...]) -> object:
    """Ready | Warmed | …: the type msgspec decodes a frame of one side into."""
    return functools.reduce(operator.or_, kinds)


FROM_SHARD = Side("a shard", (Ready, Warmed, Producing, Failed, Armed, Done, Crashed, ClockAnswer))
TO_SHARD = Side("a coordinator", (Setup, Refused, Warm, Rate, Start, Window, Cancel, Stop, Clock,
                                  Offset))
