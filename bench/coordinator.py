"""Many hosts as one run: shard 0 of `bench run --shard i/N --coordinator HOST:PORT`.

Shard 0 is the run: it probes, plans, writes the one run directory and
judges every cell, exactly as `--workers` does (bench/shards.py), with the
cell's streams dealt round-robin over N shards: its own local shard
process (`w0`) and one shard process on each other host, joined over TCP
(bench/remote.py). Before the first cell it listens on HOST:PORT and waits
until every shard 1..N-1 has joined (the start barrier, up to
--join-timeout). Before each decode cell it measures each remote shard's
clock against its own (bench/clocksync.py: 16 round trips, the shortest
kept) and tells the shard its offset; the window's edges go out on the
coordinator's clock, each shard converts them to its own and sends its
records back on the coordinator's. After the cell it measures again: the
cell's rows in clock_offsets.parquet give each shard's offset, its bound
(drift included) and round trip, and the cell's reason states the largest
bound. A shard that dies fails its cell, named; a shard that joins again
(a restarted pod) takes its place for the next cell, else the run stops.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import time
from collections.abc import Callable

from bench import __version__
from bench.cells import CellOutcome, CellRunner
from bench.clocksync import CellClock, ClockOffset, Exchange, estimate, over_cell
from bench.errors import RunError
from bench.plan import Cell
from bench.remote import HELLO_MAX_FRAME, PROTOCOL, SocketChannel
from bench.shard_worker import FrameTooLarge, ShardSetup
from bench.shards import Shard, ShardDied, ShardedCellRunner, ShardPool
from rundir.contract import PENDING

_now = time.monotonic_ns
CLOCK_ROUNDS = 16  # round trips per measurement; the shortest is kept
CLOCK_TIMEOUT_S = 10.0  # an idle shard answers in microseconds
HELLO_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 600.0


class RemoteShard(Shard):
    """A shard on another host: a connection, no process of ours."""

    def __init__(self, index: int, conn: SocketChannel, host: str, peer: str) -> None:
        self.index, self.conn, self.proc, self.pid = index, conn, None, None
        self.host, self.peer = host, peer
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.died: str | None = None
        self.on_producing: Callable[[list[int]], None] = lambda _slots: None
        self.on_failed: Callable[[], None] = lambda: None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: asyncio.Future | None = None

    def _readable(self) -> None:
        arrived = _now()
        try:
            messages = self.conn.read()
        except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
            self._gone(f"sent what a shard does not send: {type(exc).__name__}")
            return
        if messages is None:
            self._gone()
            return
        for message in messages:
            if message[0] != "clock":
                self._handle(message)
            elif self._clock is not None and not self._clock.done():
                self._clock.set_result(Exchange(message[1], message[2], message[3], arrived))

    def _gone(self, how: str | None = None) -> None:
        if self.died is not None:
            return
        if self._loop is not None:
            self._loop.remove_reader(self.conn.rfd)
        self.conn.close()
        self.died = f"shard {self.index} ({self.host} at {self.peer}) died ({how or 'its connection closed'})"
        self.inbox.put_nowait(("died",))
        if self._clock is not None and not self._clock.done():
            self._clock.set_exception(ShardDied(self.died))
        self.on_failed()

    def kill(self, why: str) -> None:
        self._gone(why)  # closing the connection ends the shard

    def close(self) -> None:
        if self.died is None:
            self.send(("stop",))
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
            self.send(("clock", _now()))
            try:
                exchanges.append(await asyncio.wait_for(self._clock, CLOCK_TIMEOUT_S))
            except TimeoutError:
                self.kill(f"no clock answer in {CLOCK_TIMEOUT_S:.0f} s")
                raise ShardDied(self.died) from None
        return estimate(exchanges)


class Coordinator:
    """The listening end and the hosts' shards: `take(n)` is what
    ShardedCellRunner asks a pool for (here: shard 0, local, plus 1..N-1)."""

    def __init__(self, address: tuple[str, int], n: int, setup: Callable[[int, str], ShardSetup],
                 id_tag: str, note: Callable[[str], None], join_timeout_s: float = JOIN_TIMEOUT_S
                 ) -> None:
        self.address, self.n, self._setup, self.id_tag = address, n, setup, id_tag
        self.note, self.join_timeout_s = note, join_timeout_s
        self.local = ShardPool(setup, id_tag, first=0)
        self.remote: dict[int, RemoteShard] = {}
        self._joins: dict[int, int] = {}  # index -> connections accepted for it
        self.before: dict[int, ClockOffset] = {}  # each shard's offset as the cell began
        self.taken: list[RemoteShard] = []  # the remote shards of the last cell
        self._changed = asyncio.Event()
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- joining ------------------------------------------------------------
    async def open(self) -> None:
        """Listen, then wait until every shard 1..N-1 joined (the start barrier)."""
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
        await self._all_joined()
        self.note(f"coordinator: all {self.n} shards joined")

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, peer = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn = SocketChannel(sock, max_frame=HELLO_MAX_FRAME)  # lifted once it said hello
        task = asyncio.create_task(self._handshake(conn, f"{peer[0]}:{peer[1]}"))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handshake(self, conn: SocketChannel, peer: str) -> None:
        try:
            hello = await _recv_one(conn, HELLO_TIMEOUT_S)
        except FrameTooLarge as exc:
            self.note(f"coordinator: refused a connection from {peer}: {exc} before its hello")
            conn.close()
            return
        except (ConnectionError, TimeoutError, OSError, pickle.UnpicklingError, EOFError):
            conn.close()
            return
        why, index, host = self._refusal(hello)
        if why is not None:
            self.note(f"coordinator: refused a connection from {peer}: {why}")
            conn.send(("refused", why))
            conn.close()
            return
        conn.max_frame = None  # a shard's records of a cell can be large
        g = self._joins[index] = self._joins.get(index, 0) + 1
        prefix = f"{self.id_tag}-w{index}" + (f"g{g}" if g > 1 else "")
        setup = self._setup(index, prefix)
        conn.send(("setup", setup))
        shard = RemoteShard(index, conn, host, peer)
        shard.listen(asyncio.get_running_loop())
        try:
            await asyncio.wait_for(shard.expect("ready"), HELLO_TIMEOUT_S)
            offset = await shard.sync()
        except (ShardDied, TimeoutError):
            shard.kill("did not start")
            return
        self.remote[index] = shard
        self.note(f"coordinator: shard {index} joined ({host} at {peer}): clock offset "
                  f"{offset.line()}")
        self._changed.set()

    def _refusal(self, hello: object) -> tuple[str | None, int, str]:
        if not (isinstance(hello, tuple) and len(hello) == 6 and hello[0] == "hello"):
            return "not a shard's hello", 0, ""
        _, protocol, index, n, version, host = hello
        if protocol != PROTOCOL or version != __version__:
            return (f"shard runs bench {version} (protocol {protocol}); this coordinator "
                    f"{__version__} (protocol {PROTOCOL})"), 0, ""
        if n != self.n or not isinstance(index, int) or not 1 <= index < self.n:
            return f"shard {index}/{n} is not one of shards 1..{self.n - 1} of {self.n}", 0, ""
        if index in self.remote and self.remote[index].alive:
            return f"shard {index} already joined", 0, ""
        return None, index, str(host)[:100]

    async def _all_joined(self) -> None:
        deadline = time.monotonic() + self.join_timeout_s
        while True:
            missing = [k for k in range(1, self.n)
                       if k not in self.remote or not self.remote[k].alive]
            if not missing:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunError(f"shard(s) {', '.join(map(str, missing))} of {self.n} did not "
                               f"join within {self.join_timeout_s:.0f} s (--join-timeout)")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass

    # -- the pool a cell takes -----------------------------------------------
    async def take(self, n: int) -> list[Shard]:
        """Shard 0 and every remote shard, each alive, with its offset just measured and sent."""
        local = await self.local.take(1)
        gone = [k for k in range(1, self.n) if k not in self.remote or not self.remote[k].alive]
        if gone:  # e.g. a pod that Kubernetes restarts: it joins again
            self.note(f"coordinator: waiting for shard(s) {', '.join(map(str, gone))} of "
                      f"{self.n} to join again (up to {self.join_timeout_s:.0f} s, "
                      f"--join-timeout)")
        await self._all_joined()
        remotes = self.taken = [self.remote[k] for k in range(1, self.n)]
        self.before = {}
        for shard in remotes:
            try:
                self.before[shard.index] = offset = await shard.sync()
            except ShardDied:
                continue  # the cell fails, naming it
            shard.send(("offset", offset.offset_ns))
        return [*local, *remotes]

    async def after_cell(self) -> list[tuple[RemoteShard, CellClock]]:
        """Each remote shard of the last cell taken: its offset again, and the cell's bound."""
        out = []
        for shard in self.taken:
            if shard.index not in self.before:
                continue
            try:
                after = await shard.sync() if shard.alive else None
            except ShardDied:
                after = None
            out.append((shard, over_cell(self.before[shard.index], after)))
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


async def _recv_one(conn: SocketChannel, timeout_s: float) -> tuple:
    """The next message on `conn`, read by the event loop."""
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


class MultiHostCellRunner(ShardedCellRunner):
    """ShardedCellRunner over the hosts' shards; each cell also states its
    shards' clock offsets (CellOutcome.clocks) and their largest bound."""

    def __init__(self, base: CellRunner, coordinator: Coordinator) -> None:
        super().__init__(base, coordinator, coordinator.n)  # type: ignore[arg-type]
        self.coordinator = coordinator

    async def decode(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        outcome = await super().decode(cell, interrupted)
        if outcome.status == PENDING:
            return outcome
        clocks = await self.coordinator.after_cell()
        outcome.clocks = [dict(shard=s.index, host=s.host, offset_ns=c.offset_ns,
                               uncertainty_ns=c.uncertainty_ns, rtt_ns=c.rtt_ns,
                               drift_ns=c.drift_ns) for s, c in clocks]
        if clocks:
            worst = max(c.uncertainty_ns for _, c in clocks)
            note = (f"{self.coordinator.n} hosts: every time is on shard 0's clock, each "
                    f"shard's offset within ±{worst / 1e3:.0f} µs (clock_offsets.parquet)")
            outcome.reason = "; ".join(filter(None, [outcome.reason, note]))
        return outcome
