"""Many hosts as one run: shard 0 of `bench run --shard i/N --coordinator HOST:PORT`.

Shard 0 is the run: it probes, plans, writes the one run directory and
judges every cell, exactly as `--workers` does (bench/distributed/shards.py), with the
cell's streams dealt round-robin over N shards: its own local shard
process (`w0`) and one shard process on each other host, joined over TCP
(bench/distributed/remote.py). Before the first cell it listens on HOST:PORT and waits
until every shard 1..N-1 has joined (the start barrier, up to
--join-timeout). Before each decode cell it measures each remote shard's
clock against its own (bench/distributed/clocksync.py: 16 round trips, the shortest
kept) and tells the shard its offset; the window's edges go out on the
coordinator's clock, each shard converts them to its own and sends its
records back on the coordinator's. After the cell it measures again: the
cell's rows in clock_offsets.parquet give each shard's offset, its bound
(drift included) and round trip, and the cell's reason states the largest
bound; a bound large enough to move a published figure past its displayed
step flags the cell client-bound (bench/distributed/clock_bounds.py). A shard that
dies, or sends what a shard does not send (bench/distributed/shard_messages.py), fails
its cell, named; a shard that joins again (a restarted pod) takes its place
for the next cell, else the run stops.

Joining: a peer proves it holds $BENCH_SHARD_SECRET, and this end proves
it too, before anything of the run crosses (bench/distributed/peer_auth.py); a shard
index is reserved by the first peer that proved it, so a second one
claiming it meanwhile is refused. Ctrl-C while waiting for shards (the
barrier, or a lost shard before a cell) stops the wait at once.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

from bench import __version__
from bench.core.errors import RunError
from bench.distributed.clocksync import ClockOffset, Exchange, estimate, over_cell
from bench.distributed.peer_auth import (
    TO_SHARD,
    AuthError,
    Session,
    challenge_frame,
    check_proof,
    printable,
    read_hello,
    refusal_frame,
    shard_secret,
)
from bench.distributed.remote import PROTOCOL, SocketChannel
from bench.distributed.shard_messages import ShardSetup
from bench.distributed.shard_worker import FrameTooLarge
from bench.distributed.shards import Shard, ShardClock, ShardDied, ShardPool, WaitInterrupted

_now = time.monotonic_ns
CLOCK_ROUNDS = 16  # round trips per measurement; the shortest is kept
CLOCK_TIMEOUT_S = 10.0  # an idle shard answers in microseconds
HELLO_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 600.0


class RemoteShard(Shard):
    """A shard on another host: a connection, no process of ours."""

    def __init__(self, index: int, conn: SocketChannel, host: str, peer: str,
                 prefix: str = "") -> None:
        self.index, self.conn, self.proc, self.pid = index, conn, None, None
        self.host, self.peer, self.prefix = host, peer, prefix
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.died: str | None = None
        self.on_producing: Callable[[list[int]], None] = lambda _slots: None
        self.on_failed: Callable[[], None] = lambda: None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: asyncio.Future | None = None
        self._clock_t0: int | None = None

    @property
    def name(self) -> str:
        return f"shard {self.index} ({self.host} at {self.peer})"

    def _readable(self) -> None:
        arrived = _now()
        messages = self._read()
        if messages is None:
            return
        for message in messages:
            if message[0] != "clock":
                self._handle(message)
            elif message[1] != self._clock_t0 or self._clock is None or self._clock.done():
                self.kill_for("a clock answer to no exchange of ours")
                return
            else:
                self._clock.set_result(Exchange(message[1], message[2], message[3], arrived))

    def _gone(self, how: str | None = None, text: str | None = None) -> None:
        if self.died is not None:
            return
        if self._loop is not None:
            self._loop.remove_reader(self.conn.rfd)
        self.conn.close()
        self.died = text or f"{self.name} died ({how or 'its connection closed'})"
        self.inbox.put_nowait(("died",))
        if self._clock is not None and not self._clock.done():
            self._clock.set_exception(ShardDied(self.died))
        self.on_failed()

    def kill(self, why: str) -> None:
        self._gone(why)  # closing the connection ends the shard

    def kill_for(self, sent: str) -> None:
        self._gone(text=f"{self.name} was dropped: it sent {sent}")

    def close(self) -> None:
        if self.died is None:
            try:
                self.send(("stop",))
            except OSError:
                pass
            if self._loop is not None:
                self._loop.remove_reader(self.conn.rfd)
            self.died = "stopped"
        self.conn.close()

    async def sync(self, rounds: int = CLOCK_ROUNDS) -> ClockOffset:
        """This shard's clock − ours, from `rounds` round trips; ShardDied if it is gone."""
        loop = asyncio.get_running_loop()
        exchanges = []
        for _ in range(rounds):
            if self.died is not None:
                raise ShardDied(self.died)
            self._clock = loop.create_future()
            self._clock_t0 = _now()
            self.send(("clock", self._clock_t0))
            try:
                exchanges.append(await asyncio.wait_for(self._clock, CLOCK_TIMEOUT_S))
            except TimeoutError:
                self.kill(f"no clock answer in {CLOCK_TIMEOUT_S:.0f} s")
                raise ShardDied(self.died) from None
        return estimate(exchanges)


class _Refused(Exception):
    """A connection this end will not take: why, in one line (the peer may be told)."""

    def __init__(self, why: str, tell: bool = True) -> None:
        super().__init__(why)
        self.tell = tell


class Coordinator:
    """The listening end and the hosts' shards: a ShardSource
    (bench/distributed/shards.py) whose `take` gives shard 0, local, plus 1..N-1."""

    def __init__(self, address: tuple[str, int], n: int, setup: Callable[[int, str], ShardSetup],
                 id_tag: str, note: Callable[[str], None], join_timeout_s: float = JOIN_TIMEOUT_S
                 ) -> None:
        self.address, self.n, self._setup, self.id_tag = address, n, setup, id_tag
        self.note, self.join_timeout_s = note, join_timeout_s
        try:
            self._secret = shard_secret()
        except AuthError as exc:
            raise RunError(str(exc)) from None
        self.local = ShardPool(setup, id_tag, first=0)
        self.remote: dict[int, RemoteShard] = {}
        self._claims: dict[int, str] = {}  # index -> the peer that proved it and is joining
        self._joins: dict[int, int] = {}  # index -> connections accepted for it
        self.before: dict[int, ClockOffset] = {}  # each shard's offset as the cell began
        self.taken: list[RemoteShard] = []  # the remote shards of the last cell
        self.interrupted: asyncio.Event | None = None  # Ctrl-C: stop waiting for shards
        self._changed = asyncio.Event()
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- joining ------------------------------------------------------------
    async def open(self, interrupted: asyncio.Event | None = None) -> None:
        """Listen, then wait until every shard 1..N-1 joined (the start
        barrier); return early, without them, once `interrupted` is set."""
        self.interrupted = interrupted
        host, port = self.address
        deadline = time.monotonic() + self.join_timeout_s
        while True:
            try:
                self._listener = socket.create_server((host, port), backlog=max(16, self.n))
                break
            except OSError as exc:  # a pod's own name may not be in DNS yet
                if time.monotonic() > deadline:
                    raise RunError(f"--coordinator {host}:{port}: cannot listen there "
                                   f"({exc.strerror or exc})") from None
                await asyncio.sleep(0.5)
        self._listener.setblocking(False)
        asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept)
        self.note(f"coordinator: waiting for shards 1..{self.n - 1} of {self.n} at {host}:{port} "
                  f"(up to {self.join_timeout_s:.0f} s, --join-timeout)")
        try:
            await self._all_joined()
        except WaitInterrupted:
            return
        self.note(f"coordinator: all {self.n} shards joined")

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, peer = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn = SocketChannel(sock)  # handshake frames only, 1 KiB each, until authenticated
        task = asyncio.create_task(self._handshake(conn, f"{peer[0]}:{peer[1]}"))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handshake(self, conn: SocketChannel, peer: str) -> None:
        """One connection's join; a refusal is one line here (and told to the peer)."""
        try:
            await self._join(conn, peer)
        except _Refused as exc:
            self.note(f"coordinator: refused a connection from {peer}: {exc}")
            if exc.tell:
                try:
                    if conn.session is None:
                        conn.send_raw(refusal_frame(str(exc)))
                    else:
                        conn.send(("refused", str(exc)))
                except OSError:
                    pass
            conn.close()
        except (ConnectionError, TimeoutError, OSError):
            conn.close()
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not end the run unseen
            self.note(f"coordinator: dropped the connection from {peer} on "
                      f"{type(exc).__name__}: {printable(str(exc))}")
            conn.close()

    async def _frame(self, conn: SocketChannel, what: str) -> bytes:
        try:
            got = await _recv_one(conn, HELLO_TIMEOUT_S)
        except FrameTooLarge as exc:
            raise _Refused(f"{exc} before {what}", tell=False) from None
        assert isinstance(got, bytes)
        return got

    async def _join(self, conn: SocketChannel, peer: str) -> None:
        hello_bytes = await self._frame(conn, "its hello")
        try:
            hello = read_hello(hello_bytes)
        except AuthError as exc:
            raise _Refused(str(exc)) from None
        index, host = hello["shard"], printable(hello["host"], 100)
        why = self._refusal(hello)
        if why is not None:
            raise _Refused(why)
        challenge = challenge_frame(self._secret, hello_bytes)
        conn.send_raw(challenge)
        proof = await self._frame(conn, "its proof")
        try:
            check_proof(self._secret, hello_bytes, challenge, proof)
        except AuthError as exc:
            raise _Refused(str(exc)) from None
        conn.authenticated(Session(self._secret, hello_bytes, challenge, TO_SHARD))
        holder = self._holder(index)
        if holder is not None:  # checked and claimed with no wait between: one claimant wins
            raise _Refused(f"shard {index} {holder}")
        self._claims[index] = peer
        try:
            await self._setup_shard(conn, index, host, peer)
        finally:
            self._claims.pop(index, None)

    async def _setup_shard(self, conn: SocketChannel, index: int, host: str, peer: str) -> None:
        g = self._joins[index] = self._joins.get(index, 0) + 1
        prefix = f"{self.id_tag}-w{index}" + (f"g{g}" if g > 1 else "")
        conn.send(("setup", self._setup(index, prefix)))
        shard = RemoteShard(index, conn, host, peer, prefix)
        shard.listen(asyncio.get_running_loop())
        try:
            await asyncio.wait_for(shard.expect("ready"), HELLO_TIMEOUT_S)
            offset = await shard.sync()
        except (ShardDied, TimeoutError):
            shard.kill("did not start")
            if shard.died and "was dropped" in shard.died:
                self.note(f"coordinator: {shard.died}")
            return
        self.remote[index] = shard
        self.note(f"coordinator: shard {index} joined ({host} at {peer}): clock offset "
                  f"{offset.line()}")
        self._changed.set()

    def _holder(self, index: int) -> str | None:
        """Who holds shard `index` now ("has joined from …", "is joining from …"), or None."""
        if index in self.remote and self.remote[index].alive:
            return f"has joined from {self.remote[index].peer}"
        if index in self._claims:
            return f"is joining from {self._claims[index]}"
        return None

    def _refusal(self, hello: dict) -> str | None:
        """Why a hello (its fields typed: bench/distributed/peer_auth.py) is not one of this run's shards."""
        protocol, index, n = hello["protocol"], hello["shard"], hello["of"]
        version = printable(hello["bench"], 40)
        if protocol != PROTOCOL or version != __version__:
            return (f"shard runs bench {version} (protocol {protocol}); this coordinator "
                    f"{__version__} (protocol {PROTOCOL})")
        if n != self.n or not 1 <= index < self.n:
            return f"shard {index}/{n} is not one of shards 1..{self.n - 1} of {self.n}"
        if self._holder(index) is not None:  # who holds it is told only to a peer that proved
            return f"shard {index} has joined, or is joining"
        return None

    async def _all_joined(self) -> None:
        """Every shard 1..N-1 alive; RunError past the join timeout,
        WaitInterrupted at once on Ctrl-C."""
        deadline = time.monotonic() + self.join_timeout_s
        while True:
            missing = [k for k in range(1, self.n)
                       if k not in self.remote or not self.remote[k].alive]
            if not missing:
                return
            if self.interrupted is not None and self.interrupted.is_set():
                raise WaitInterrupted
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunError(f"shard(s) {', '.join(map(str, missing))} of {self.n} did not "
                               f"join within {self.join_timeout_s:.0f} s (--join-timeout)")
            self._changed.clear()
            waits = [asyncio.ensure_future(self._changed.wait())]
            if self.interrupted is not None:
                waits.append(asyncio.ensure_future(self.interrupted.wait()))
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    # -- the pool a cell takes -----------------------------------------------
    async def take(self, n: int, interrupted: asyncio.Event | None = None) -> list[Shard]:
        """Shard 0 and every remote shard (all N: `n` is this run's), each alive, with
        its offset just measured and sent; a wait for a lost one ends on `interrupted`."""
        self.interrupted = interrupted  # Ctrl-C while waiting for a shard
        self.taken, self.before = [], {}
        local = await self.local.take(1)
        gone = [k for k in range(1, self.n) if k not in self.remote or not self.remote[k].alive]
        if gone:  # e.g. a pod that Kubernetes restarts: it joins again
            self.note(f"coordinator: waiting for shard(s) {', '.join(map(str, gone))} of "
                      f"{self.n} to join again (up to {self.join_timeout_s:.0f} s, "
                      f"--join-timeout)")
        await self._all_joined()
        remotes = self.taken = [self.remote[k] for k in range(1, self.n)]
        for shard in remotes:
            try:
                self.before[shard.index] = offset = await shard.sync()
            except ShardDied:
                continue  # the cell fails, naming it
            shard.send(("offset", offset.offset_ns))
        return [*local, *remotes]

    async def after_cell(self) -> list[ShardClock]:
        """Each remote shard of the last cell taken: its offset again, and the cell's bound."""
        out = []
        for shard in self.taken:
            if shard.index not in self.before:
                continue
            try:
                after = await shard.sync() if shard.alive else None
            except ShardDied:
                after = None
            out.append(ShardClock(shard.index, shard.host, shard.prefix,
                                  over_cell(self.before[shard.index], after)))
        return out

    def close(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
        for task in self._tasks:
            task.cancel()
        for shard in self.remote.values():
            shard.close()
        self.local.close()


async def _recv_one(conn: SocketChannel, timeout_s: float) -> object:
    """The next frame on `conn` (one per read before authentication), read by the event loop."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future = loop.create_future()

    def readable() -> None:
        try:
            messages = conn.read()
        except Exception as exc:  # noqa: BLE001 - a bad peer: ends the handshake
            messages = exc
        if got.done():
            return
        if messages is None:
            got.set_exception(ConnectionError("closed"))
        elif isinstance(messages, Exception):
            got.set_exception(messages)
        elif messages:
            got.set_result(messages[0])

    loop.add_reader(conn.rfd, readable)
    try:
        return await asyncio.wait_for(got, timeout_s)
    finally:
        loop.remove_reader(conn.rfd)
