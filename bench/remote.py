"""A shard on another host (`bench run --shard i/N --coordinator HOST:PORT`, i ≥ 1).

The shard process protocol of `--workers` (bench/shard_worker.py) over one
TCP connection instead of two pipes: the same framed messages, the same
`_Shard` running the same stream code. Only the start differs: the shard
connects (retrying until the coordinator listens, up to --join-timeout),
says who it is, and gets its setup from the coordinator (server facts,
settings, its request-id prefix). Its own command line gives the server's
URL and the API key: neither ever crosses the connection. It then answers
the coordinator's clock exchanges and runs its share of every decode cell,
with the window's edges converted from the coordinator's clock to its own
and its records converted back (bench/clocksync.py).

A message is unpickled with an allow-list of the collector's own record
types, nothing else (a peer that is not a shard cannot make the other end
build arbitrary objects); still, the port belongs on a private network.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import select
import socket
import time
from collections.abc import Callable

from bench import __version__
from bench.errors import RunError
from bench.eventloop import asyncio_run
from bench.shard_worker import Channel, ShardSetup, _Shard

PROTOCOL = 1  # the handshake's version: a mismatch is refused in one line
HELLO_MAX_FRAME = 65536  # a peer that has not said hello yet sends no more in one message
CONNECT_RETRY_S = 0.5

_ALLOWED = {
    ("bench.records", "RequestRecord"),
    ("bench.monitor", "WindowDelays"),
    ("bench.prompts", "Prompt"),
    ("bench.server_info", "ServerInfo"),
    ("bench.cells", "Settings"),
    ("bench.shard_worker", "ShardSetup"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"a shard message may not hold {module}.{name}")
        return super().find_class(module, name)


def restricted_loads(data: bytes | bytearray) -> object:
    """pickle.loads building only tuples, lists, dicts, scalars and `_ALLOWED` types."""
    return _Unpickler(io.BytesIO(data)).load()


class SocketChannel(Channel):
    """A Channel over one non-blocking TCP socket (read and written alike)."""

    loads = staticmethod(restricted_loads)

    def __init__(self, sock: socket.socket, max_frame: int | None = None) -> None:
        self.max_frame = max_frame
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.rfd = self.wfd = sock.fileno()
        self._buf = bytearray()
        self.stopped = False  # the peer said stop (else a lost connection)

    def read(self) -> list[tuple] | None:
        messages = super().read()
        if messages and any(m[0] == "stop" for m in messages):
            self.stopped = True
        return messages

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def recv_one(channel: SocketChannel, timeout_s: float) -> tuple:
    """The next message, blocking up to timeout_s (the handshake, before any loop)."""
    deadline = time.monotonic() + timeout_s
    while True:
        messages = channel.read()
        if messages is None:
            raise ConnectionError("the connection closed")
        if messages:
            return messages[0]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        select.select([channel.rfd], [], [], left)


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) -> (host, port); ValueError if not."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, e.g. bench-0.bench:7700, got {text!r}")
    return host.strip("[]"), int(port)


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """Connect, retrying while nothing listens there yet (or the name is not
    yet in DNS, as a pod's name is not at first)."""
    while True:
        try:
            return socket.create_connection((host, port), timeout=10.0)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RunError(f"--coordinator {host}:{port}: cannot connect ({exc.strerror or exc}); "
                               "is shard 0 running there?") from None
            time.sleep(CONNECT_RETRY_S)


def serve_shard(index: int, n: int, address: tuple[str, int], base_url: str,
                api_key: str | None, secrets: list[str], join_timeout_s: float,
                note: Callable[[str], None], source_addresses: tuple[str, ...] = ()) -> None:
    """Join the coordinator as shard `index` of `n`, serve it until it says
    stop; RunError when it cannot join or the coordinator goes away. The
    URL, the key and the source addresses are this host's own (its command
    line's), never the coordinator's."""

    host, port = address
    where = f"the coordinator at {host}:{port}"
    sock = _connect(host, port, time.monotonic() + join_timeout_s)
    channel = SocketChannel(sock)
    try:
        channel.send(("hello", PROTOCOL, index, n, __version__, socket.gethostname()))
        try:
            reply = recv_one(channel, join_timeout_s)
        except (ConnectionError, TimeoutError, OSError, pickle.UnpicklingError) as exc:
            raise RunError(f"{where} did not answer shard {index}/{n} ({exc or 'timed out'})") from None
        if reply[0] != "setup":
            raise RunError(f"{where} refused shard {index}/{n}: {reply[1]}")
        setup: ShardSetup = reply[1]
        setup = dataclasses.replace(
            setup, info=dataclasses.replace(setup.info, base_url=base_url), api_key=api_key,
            secrets=tuple(secrets), source_addresses=tuple(source_addresses))
        note(f"shard {index}/{n}: joined {where}; measuring {setup.info.model} as it says")
        if source_addresses:
            note(f"shard {index}/{n}: source addresses {', '.join(source_addresses)} "
                 "(--source-address)")
        try:
            asyncio_run(_Shard(channel, setup).serve())
        except KeyboardInterrupt:
            raise RunError(f"shard {index}/{n}: interrupted") from None
        if not channel.stopped:
            raise RunError(f"shard {index}/{n}: lost {where}; its run directory keeps what it "
                           "measured (the cell running then ends Error)")
        note(f"shard {index}/{n}: {where} ended the run")
    finally:
        channel.close()
