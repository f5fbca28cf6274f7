"""A shard on another host (`bench run --shard i/N --coordinator HOST:PORT`, i ≥ 1).

The shard process protocol of `--workers` (bench/distributed/shard_worker.py) over one
TCP connection instead of two pipes: the same messages, the same
`ShardWorker` running the same stream code. Only the start differs: the shard connects
(retrying until the coordinator listens, up to --join-timeout), and both
ends prove they hold the run's secret, $BENCH_SHARD_SECRET
(bench/distributed/peer_auth.py: why a shared secret and not TLS, the handshake, the
frames' MACs); only then does the shard say who it is for the run and get
its setup (server facts, settings, its request-id prefix). Its own command
line gives the server's URL and the API key: neither ever crosses the
connection. It then answers the coordinator's clock exchanges and runs its
share of every decode cell, with the window's edges converted from the
coordinator's clock to its own and its records converted back
(bench/distributed/clocksync.py).

Every frame after the handshake carries a MAC checked over its raw bytes
before it is decoded, and is decoded against the protocol's typed schema
(bench/distributed/shard_messages.py): nothing but the message types it names is
built. Before the handshake no frame may exceed 1 KiB and nothing but the
handshake's JSON is parsed; after it, 1 GiB.
"""

from __future__ import annotations

import dataclasses
import select
import socket
import time
from collections.abc import Callable

from bench import __version__
from bench.core.errors import RunError
from bench.core.eventloop import asyncio_run
from bench.distributed.peer_auth import (
    AUTH_MAX_FRAME,
    HELLO_MAX_FRAME,
    TO_COORDINATOR,
    AuthError,
    Session,
    check_challenge,
    hello_frame,
    new_nonce,
    printable,
    proof_frame,
    shard_secret,
)
from bench.distributed.shard_messages import FROM_SHARD, TO_SHARD, BadMessage, ShardSetup
from bench.distributed.shard_worker import Channel, ShardWorker
from rundir.redact import redact

# The handshake's version: a mismatch is refused in one line (1: no secret; 2: pickled
# messages; 3: typed MessagePack, bench/distributed/shard_messages.py; 4: request records
# carry the traffic cells' fields, so a protocol-3 peer would decode them shifted).
PROTOCOL = 5  # 5: rate cells' messages ("rate", "armed")
CONNECT_RETRY_S = 0.5


class SocketChannel(Channel):
    """A Channel over one non-blocking TCP socket (read and written alike).

    Until `authenticated()` it carries the handshake's raw frames, one per
    read, each at most HELLO_MAX_FRAME bytes; after it, messages whose
    frames carry the session's MAC, checked before they are decoded. Which
    side's messages it reads follows from the session: a coordinator's
    session sends to a shard, so it reads a shard's messages, and back."""

    def __init__(self, sock: socket.socket, max_frame: int | None = HELLO_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.reads = TO_SHARD  # set again by `authenticated`
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.rfd = self.wfd = sock.fileno()
        self._buf = bytearray()
        self.session: Session | None = None
        self.stopped = False  # the peer said stop (else a lost connection)

    @property
    def one_at_a_time(self) -> bool:  # type: ignore[override]
        return self.session is None

    def authenticated(self, session: Session) -> None:
        """From now on every frame either way carries `session`'s MAC."""
        self.session = session
        self.reads = TO_SHARD if session.sends == TO_COORDINATOR else FROM_SHARD
        self.max_frame = AUTH_MAX_FRAME

    def send_raw(self, data: bytes) -> None:
        """A handshake frame (before the session)."""
        assert self.session is None
        self._write(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(len(data).to_bytes(8, "big") + data)
        while view:
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                select.select([], [self.wfd], [])

    def send(self, message: tuple) -> None:
        self._write(self._encode(message))

    def _encode(self, message: tuple) -> bytes:
        if self.session is None:
            raise AuthError("no message before the handshake")
        return self.session.seal(super()._encode(message))

    def _decode(self, body: bytes) -> object:
        if self.session is None:
            return body  # a handshake frame: read by bench/distributed/peer_auth.py alone
        payload = self.session.open(body)  # AuthError unless authentic: nothing decoded
        return self.reads.decode(payload)  # BadMessage unless a message of the schema

    def read(self) -> list[tuple] | None:
        messages = super().read()
        if messages and any(m[0] == "stop" for m in messages if isinstance(m, tuple) and m):
            self.stopped = True
        return messages

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def recv_one(channel: SocketChannel, timeout_s: float) -> object:
    """The next frame or message, blocking up to timeout_s (the handshake, before any loop)."""
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


def join(channel: SocketChannel, secret: bytes, index: int, n: int, timeout_s: float,
         where: str) -> ShardSetup:
    """The shard's end of the handshake (bench/distributed/peer_auth.py), then its setup.
    Nothing but the hello and, once the coordinator proved it holds the
    secret, the shard's own proof is sent before the setup comes."""
    me = f"shard {index}/{n}"
    hello = hello_frame(__version__, PROTOCOL, index, n, socket.gethostname(), new_nonce())
    channel.send_raw(hello)
    try:
        challenge = recv_one(channel, timeout_s)
        assert isinstance(challenge, bytes)
        check_challenge(secret, hello, challenge)
        channel.send_raw(proof_frame(secret, hello, challenge))
        channel.authenticated(Session(secret, hello, challenge, TO_COORDINATOR))
        reply = recv_one(channel, timeout_s)  # decoded against the schema, or BadMessage
    except AuthError as exc:
        raise RunError(f"{me} cannot join {where}: {exc}; nothing but the handshake "
                       "was sent to it") from None
    except BadMessage as exc:
        raise RunError(f"{where} sent {me} {exc}") from None
    except (ConnectionError, TimeoutError, OSError, ValueError) as exc:
        raise RunError(f"{where} did not answer {me} ({exc or 'timed out'})") from None
    assert isinstance(reply, tuple)
    if reply[0] == "refused":
        raise RunError(f"{where} refused {me}: {printable(reply[1])}")
    if reply[0] != "setup":
        raise RunError(f"{where} sent {me} a {reply[0]!r} message before its setup")
    return reply[1]


def serve_shard(index: int, n: int, address: tuple[str, int], base_url: str,
                api_key: str | None, secrets: list[str], join_timeout_s: float,
                note: Callable[[str], None], source_addresses: tuple[str, ...] = ()) -> None:
    """Join the coordinator as shard `index` of `n`, serve it until it says
    stop; RunError when it cannot join or the coordinator goes away. The
    URL, the key and the source addresses are this host's own (its command
    line's), never the coordinator's."""

    try:
        secret = shard_secret()
    except AuthError as exc:
        raise RunError(str(exc)) from None
    host, port = address
    where = f"the coordinator at {host}:{port}"
    sock = _connect(host, port, time.monotonic() + join_timeout_s)
    channel = SocketChannel(sock)
    me = f"shard {index}/{n}"
    try:
        setup = join(channel, secret, index, n, join_timeout_s, where)
        setup = dataclasses.replace(
            setup, info=dataclasses.replace(setup.info, base_url=base_url), api_key=api_key,
            secrets=tuple(secrets), source_addresses=tuple(source_addresses))
        note(f"{me}: joined {where}; measuring {setup.info.model} as it says")
        if source_addresses:
            note(f"{me}: source addresses {', '.join(source_addresses)} (--source-address)")
        shard = ShardWorker(channel, setup)
        shard.exit_on_bug = False
        try:
            asyncio_run(shard.serve())
        except KeyboardInterrupt:
            raise RunError(f"{me}: interrupted") from None
        except Exception as exc:  # noqa: BLE001 - a bug of ours: one line, the key kept out
            raise RunError(redact(f"{me}: stopped on {type(exc).__name__}: {exc}",
                                  secrets)) from None
        kept = ("this shard has no run directory: shard 0's keeps every cell it stored, and "
                "the cell in progress fails there")
        if shard.fault is not None:
            raise RunError(f"{me}: gave up {where}: it sent {shard.fault}; {kept}")
        if not channel.stopped:
            raise RunError(f"{me}: lost {where}; {kept}")
        note(f"{me}: {where} ended the run")
    finally:
        channel.close()
