"""Peers that speak the shard protocol for tests: a fake shard, a fake
coordinator, and spawn targets that make a `--workers` process fail to start.

The fakes use the product's own handshake and frames (bench/distributed/peer_auth.py,
bench/distributed/remote.py), each step driven by the test, so a fault lands at a
chosen message, never at a time. The spawn targets must live in an
importable module: a spawned process finds its target by name.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time

from bench import __version__
from bench.distributed.peer_auth import (
    TO_COORDINATOR,
    TO_SHARD,
    Session,
    challenge_frame,
    check_challenge,
    hello_frame,
    new_nonce,
    proof_frame,
)
from bench.distributed.remote import PROTOCOL, SocketChannel, recv_one
from bench.distributed.shard_worker import main

TIMEOUT_S = 120.0  # bounds a broken test only


def raw_frame(data: bytes) -> bytes:
    return struct.pack("!Q", len(data)) + data


class FakeShard:
    """A connection to a coordinator that says hello as shard `index` of `n`."""

    def __init__(self, port: int, secret: bytes, index: int = 1, n: int = 2) -> None:
        self.secret = secret
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.channel = SocketChannel(self.sock)
        self.hello = hello_frame(__version__, PROTOCOL, index, n, "fake-shard", new_nonce())
        self.challenge = b""

    def say_hello(self) -> bytes:
        """Send the hello; the coordinator's answer (its challenge, or a refusal)."""
        self.channel.send_raw(self.hello)
        got = recv_one(self.channel, TIMEOUT_S)
        assert isinstance(got, bytes)
        self.challenge = got
        return got

    def prove(self, proof: bytes | None = None) -> None:
        """Send the shard's proof (by default the right one for this secret)."""
        self.channel.send_raw(proof or proof_frame(self.secret, self.hello, self.challenge))
        self.channel.authenticated(Session(self.secret, self.hello, self.challenge,
                                           TO_COORDINATOR))

    def join(self) -> tuple:
        """The whole handshake with the right secret: the first message after it."""
        self.say_hello()
        check_challenge(self.secret, self.hello, self.challenge)
        self.prove()
        return self.recv()

    def recv(self) -> tuple:
        got = recv_one(self.channel, TIMEOUT_S)
        assert isinstance(got, tuple)
        return got

    def closed(self) -> bool:
        """Whether the coordinator closed the connection (reads EOF)."""
        self.sock.setblocking(True)
        self.sock.settimeout(TIMEOUT_S)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.channel.close()


class FakeCoordinator:
    """A listening socket that takes one shard's connection and answers its
    hello with a challenge made with `secret` (not the shard's)."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]

    def answer(self) -> tuple[bytes, bytes]:
        """(the shard's hello, every byte it sent after it until it closed)."""
        self.listener.settimeout(TIMEOUT_S)
        sock, _ = self.listener.accept()
        channel = SocketChannel(sock)
        hello = recv_one(channel, TIMEOUT_S)
        assert isinstance(hello, bytes)
        channel.send_raw(challenge_frame(self.secret, hello))
        sock.setblocking(True)
        sock.settimeout(TIMEOUT_S)
        rest = bytes(channel._buf)
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            rest += data
        sock.close()
        return hello, rest

    def close(self) -> None:
        self.listener.close()


def coordinator_session(secret: bytes, hello: bytes, challenge: bytes) -> Session:
    return Session(secret, hello, challenge, TO_SHARD)


# -- spawn targets: a --workers process that does not start ---------------------------


def _first_w1(setup) -> bool:
    return setup.id_prefix.endswith("-w1")  # the first process at slot 1, not its replacement


def killed_at_start(reader, writer, setup) -> None:
    """Worker 1 is killed (SIGKILL) before it says ready; any other starts."""
    if _first_w1(setup):
        os.kill(os.getpid(), signal.SIGKILL)
    main(reader, writer, setup)


def stopped_at_start(reader, writer, setup) -> None:
    """Worker 1 is stopped (SIGSTOP) before it says ready; any other starts."""
    if _first_w1(setup):
        os.kill(os.getpid(), signal.SIGSTOP)
    main(reader, writer, setup)


def hung_at_start(reader, writer, setup) -> None:
    """Worker 1 never says ready; any other starts."""
    while _first_w1(setup):
        time.sleep(3600)
    main(reader, writer, setup)
