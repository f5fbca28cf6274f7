"""A decode cell's streams spread over several processes (`bench run --workers N`).

The parent keeps every decision of the cell: it builds the base prompt,
waits until every stream of every shard produces (and the server's gauges
agree), opens the window at one instant, `start_ns`, and hands every shard
the same (start_ns, end_ns); each shard cancels its streams at end_ns on the
host's CLOCK_MONOTONIC, which every process reads alike. The parent then
merges the shards' records (request ids `<tag>-w<k>-<n>`, unique across
shards), drains the server and judges the cell exactly as in one process
(bench/measure/cells.py): the figures come from the merged records, and the cell is
client-bound if any shard's reads could have moved a figure
(`bench.measure.monitor.shards_bound_reason`).

A shard that dies (killed, crashed), or does not start (killed, stopped or
hung before it said ready), fails its cell: Error, with a reason naming
the shard, its pid and how it ended; the other shards' streams are
cancelled and their records kept with the cell's; every cell stored before
is untouched. The next sharded cell starts a fresh process in its place.
Every message a shard sends is decoded against the protocol's schema
before it is used (bench/distributed/shard_messages.py), and its records must be its
own (its request-id prefix, the cell, its slots): a shard that sends
anything else is stopped and fails its cell the same way. The protocol:
bench/distributed/shard_worker.py.

Where the shards come from is a `ShardSource`: this module's ShardPool (local
processes, `--workers`) or the hosts of `--shard i/N`
(bench/distributed/coordinator.py). One ShardedCellRunner runs a cell over either.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from bench.core.plan import Cell
from bench.core.workers import shard_slots
from bench.distributed.clock_bounds import clock_reason
from bench.distributed.clocksync import CellClock
from bench.distributed.peer_auth import printable
from bench.distributed.shard_messages import FROM_SHARD, ShardSetup
from bench.distributed.shard_worker import Channel, main
from bench.measure.cells import CellOutcome, CellRunner, DecodeRun, slot_tag
from bench.measure.monitor import WindowDelays, gc_paused, shards_bound_reason
from bench.measure.records import RequestRecord
from bench.measure.spec_cells import spec_columns
from bench.measure.stamp_bounds import table_bounds
from rundir.contract import ERROR, PENDING

_now = time.monotonic_ns
START_TIMEOUT_S = 120.0  # a spawned shard imports the collector: seconds on a busy host


class ShardDied(Exception):
    pass


class ShardsDidNotStart(Exception):
    """Shard processes that did not say ready: the cell fails, naming each."""


class WaitInterrupted(Exception):
    """Ctrl-C while a pool waited for its shards: the cell stays pending."""


class Shard:
    """The parent's handle on one shard process: its pipe, read by the
    parent's event loop; messages wait in `inbox` but for "producing" and
    "failed", which go straight to the cell (`on_producing`, `on_failed`)."""

    def __init__(self, index: int, proc: multiprocessing.process.BaseProcess,
                 conn: Channel, prefix: str = "") -> None:
        self.index, self.proc, self.conn, self.prefix = index, proc, conn, prefix
        self.pid = proc.pid
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.died: str | None = None  # why it is gone
        self.on_producing: Callable[[list[int]], None] = lambda _slots: None
        self.on_failed: Callable[[], None] = lambda: None
        self._loop: asyncio.AbstractEventLoop | None = None

    def listen(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.conn.rfd, self._readable)

    @property
    def name(self) -> str:
        """How the cell's reason names it."""
        return f"shard {self.index} (pid {self.pid})"

    def _readable(self) -> None:
        messages = self._read()
        if messages is None:
            return
        for message in messages:
            self._handle(message)

    def _read(self) -> list[tuple] | None:
        """The messages that came, each checked; None once the shard is gone
        or was stopped for what it sent (a bad frame or message)."""
        try:
            messages = self.conn.read()  # each decoded against the schema, or BadMessage
        except OSError:
            messages = None
        except ValueError as exc:  # a frame too long or not authentic, a bad message
            self.kill_for(str(exc))
            return None
        if messages is None:
            self._gone()
        return messages

    def _handle(self, message: tuple) -> None:
        """One message of the shard protocol (bench/distributed/shard_worker.py): to the cell or the inbox."""
        kind = message[0]
        if kind == "producing":
            self.on_producing(message[1])
        elif kind == "failed":
            self.on_failed()
        elif kind == "crashed":
            self._gone(f"crashed: {printable(message[1], 300)}")
        else:
            self.inbox.put_nowait(message)

    def _gone(self, how: str | None = None, text: str | None = None) -> None:
        """It is gone: `how` it died, or `text` says all (then it is ended here)."""
        if self.died is not None:
            return
        if self._loop is not None:
            self._loop.remove_reader(self.conn.rfd)
        if text is not None and self.proc.is_alive():
            self.proc.kill()
        self.proc.join(2.0)
        self.died = text or f"{self.name} died ({how or _how(self.proc.exitcode)})"
        self.inbox.put_nowait(("died",))
        self.on_failed()

    @property
    def alive(self) -> bool:
        return self.died is None

    def send(self, message: tuple) -> None:
        if self.died is not None:
            return
        try:
            self.conn.send(message)
        except OSError:
            self._gone()

    async def expect(self, kind: str) -> tuple:
        """The next message, which must be `kind`; ShardDied if the shard is gone."""
        message = await self.inbox.get()
        if message[0] == "died":
            self.inbox.put_nowait(message)  # for whoever asks next
            raise ShardDied(self.died)
        if message[0] != kind:  # out of turn: the shard is stopped, its cell fails
            self.kill_for(f"a {message[0]!r} message where {kind!r} belongs")
            raise ShardDied(self.died)
        return message

    def kill(self, why: str) -> None:
        """End a shard that does not answer; its death names `why`."""
        if self.proc.is_alive():
            self.proc.kill()
        self._gone(why)

    def kill_for(self, sent: str) -> None:
        """End a shard for what it sent: the cell's reason says it."""
        self._gone(text=f"{self.name} was stopped: it sent {sent}")

    def close(self) -> None:
        if self.died is None and self._loop is not None:
            self._loop.remove_reader(self.conn.rfd)
        self.send(("stop",))
        self.died = self.died or "stopped"
        self.proc.join(5.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)
        self.conn.close()


def _stopped(pid: int | None) -> bool:
    """Whether the process is stopped (state T: SIGSTOP, a debugger), on Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] in (["T"], ["t"])


def _how(code: int | None) -> str:
    if code is None:
        return "its pipe closed"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


@dataclass(frozen=True)
class ShardClock:
    """A shard on another host over one cell: its clock offset to shard 0's and
    the offset's bound (bench/distributed/clocksync.py)."""

    index: int
    host: str
    prefix: str  # its request ids' prefix (the clock bound names its records by it)
    clock: CellClock


def state_clocks(outcome: CellOutcome, clocks: list[ShardClock] | None, n: int,
                 rows: bool = True) -> None:
    """Put the other hosts' clocks over the cell in its outcome (rows, for
    clock_offsets.parquet, which holds decode cells only, and a note in its
    reason); None: one host, nothing to say."""
    if clocks is not None and rows:
        outcome.clocks = [dict(shard=c.index, host=c.host, offset_ns=c.clock.offset_ns,
                               uncertainty_ns=c.clock.uncertainty_ns, rtt_ns=c.clock.rtt_ns,
                               drift_ns=c.clock.drift_ns) for c in clocks]
    if clocks:
        worst = max(c.clock.uncertainty_ns for c in clocks)
        note = (f"{n} hosts: every time is on shard 0's clock, each "
                f"shard's offset within ±{worst / 1e3:.0f} µs (clock_offsets.parquet)")
        outcome.reason = "; ".join(filter(None, [outcome.reason, note]))


async def answer(shard: Shard, kind: str, timeout: float | None = None,
                 when: str = "after the window") -> tuple | None:
    """The shard's next message, which must be `kind`, or None once it died (or
    was killed for not answering within `timeout` seconds `when`)."""
    try:
        return await asyncio.wait_for(shard.expect(kind), timeout)
    except ShardDied:
        return None
    except TimeoutError:
        shard.kill(f"no answer {timeout:.0f} s {when}")
        return None


class ShardSource(Protocol):
    """Where a sharded decode cell's streams run: local processes (ShardPool) or
    the hosts of `--shard i/N` (bench/distributed/coordinator.py's Coordinator)."""

    async def take(self, n: int, interrupted: asyncio.Event | None = None) -> list[Shard]:
        """n shards, each alive and ready for a cell; ShardsDidNotStart naming
        those that are not, WaitInterrupted on `interrupted` while waiting."""
        ...

    async def after_cell(self) -> list[ShardClock] | None:
        """Each other host's clock over the cell just taken; None: one host, one clock."""
        ...

    def close(self) -> None:
        """End every shard."""
        ...


class ShardPool:
    """Shard processes first..first+n-1 (1..n; a coordinator's own: 0),
    started when first needed and kept for the run; a dead one is replaced
    (a new pid, a new request-id prefix) when next needed."""

    def __init__(self, setup: Callable[[int, str], ShardSetup], id_tag: str,
                 first: int = 1) -> None:
        self._setup = setup  # (index, id prefix) -> the shard's setup
        self.id_tag = id_tag
        self.first = first
        self.shards: dict[int, Shard] = {}
        self._started: dict[int, int] = {}  # index -> processes started there
        self._ctx = multiprocessing.get_context("spawn")

    async def take(self, n: int, interrupted: asyncio.Event | None = None) -> list[Shard]:
        """Shards first..first+n-1, each alive (started at once: `interrupted` is not waited on)."""
        loop = asyncio.get_running_loop()
        ks = range(self.first, self.first + n)
        new = [k for k in ks if k not in self.shards or not self.shards[k].alive]
        for k in new:
            if k in self.shards:
                self.shards.pop(k).close()
            self.shards[k] = self._spawn(k, loop)
        failed = []
        for k in new:  # started together: each waited for in turn
            shard = self.shards[k]
            try:
                await asyncio.wait_for(shard.expect("ready"), START_TIMEOUT_S)
            except ShardDied:
                sent = shard.died is not None and " was stopped: " in shard.died
                failed.append(shard.died if sent else f"{shard.name} did not start: "
                              f"{_how(shard.proc.exitcode)} before it was ready")
            except TimeoutError:
                stopped = _stopped(shard.pid)
                shard.kill("did not start")
                failed.append(f"{shard.name} did not start: "
                              + ("stopped (SIGSTOP?) and " if stopped else "")
                              + f"not ready in {START_TIMEOUT_S:.0f} s, so ended")
        if failed:
            raise ShardsDidNotStart("; ".join(failed) + " (a fresh one starts with the next cell)")
        return [self.shards[k] for k in ks]

    def _spawn(self, k: int, loop: asyncio.AbstractEventLoop) -> Shard:
        g = self._started[k] = self._started.get(k, 0) + 1
        prefix = f"{self.id_tag}-w{k}" + (f"g{g}" if g > 1 else "")
        down_r, down_w = self._ctx.Pipe(duplex=False)  # parent -> shard
        up_r, up_w = self._ctx.Pipe(duplex=False)  # shard -> parent
        proc = self._ctx.Process(target=main, args=(down_r, up_w, self._setup(k, prefix)),
                                 name=f"bench-shard-{k}", daemon=True)
        proc.start()
        down_r.close()
        up_w.close()
        shard = Shard(k, proc, Channel(up_r, down_w, FROM_SHARD), prefix)
        shard.listen(loop)
        return shard

    async def after_cell(self) -> list[ShardClock] | None:
        """None: every shard is on this host, its stamps on this host's clock."""
        return None

    def close(self) -> None:
        for shard in self.shards.values():
            shard.close()
        self.shards.clear()


class _Produced:
    """A slot of another process that has received tokens (for the readiness wait)."""

    producing = True


_PRODUCED = _Produced()


@dataclass
class ShardedRun(DecodeRun):
    """A decode run whose streams run in shards: what the runner keeps of them."""

    shards: list[Shard] = field(default_factory=list)
    slots: list[list[int]] = field(default_factory=list)  # per shard, its stream slots
    base: tuple = ()  # (base prompt, its tag)
    delays: list[tuple[int, WindowDelays]] = field(default_factory=list)
    clocks: list[ShardClock] | None = None  # other hosts' clocks over the cell (None: one host)
    faults: list[str] = field(default_factory=list)  # what else fails the cell

    @property
    def died(self) -> list[str]:
        """Why the cell failed for its shards: the dead ones, and any fault."""
        return [s.died for s in self.shards if s.died is not None] + self.faults


class ShardedCellRunner:
    """A decode cell whose streams run in `n` shards from `source`; everything
    else (prompts, readiness, window, drain, judge, count check) runs here,
    in `base`'s phases (bench/measure/cells.py), as for one process. With
    shards on other hosts each cell also states their clock offsets
    (CellOutcome.clocks) and is client-bound when a bound could move a
    published figure. A prefill cell is `base`'s alone."""

    def __init__(self, base: CellRunner, source: ShardSource, n: int) -> None:
        self.base, self.source, self.n = base, source, n

    async def prefill(self, cell: Cell) -> CellOutcome:
        return await self.base.prefill(cell)

    async def decode(self, cell: Cell, interrupted: asyncio.Event) -> CellOutcome:
        run: ShardedRun | None = None
        try:
            shards = await self.source.take(self.n, interrupted)
        except ShardsDidNotStart as exc:
            outcome = CellOutcome([], ERROR, str(exc))
        except WaitInterrupted:
            return CellOutcome([], PENDING, "interrupted")
        else:
            base_tag = slot_tag(cell, 0)
            base = await asyncio.to_thread(self.base.prompts.build, cell.context, base_tag)
            run = ShardedRun(cell, [], interrupted, shards=shards,
                             slots=shard_slots(cell.concurrency, self.n), base=(base, base_tag))
            outcome = await self._decode(run)
        if outcome.status == PENDING:
            return outcome
        clocks = run.clocks if run is not None and run.clocks is not None else (
            await self.source.after_cell())
        state_clocks(outcome, clocks, self.n)
        return outcome

    async def _decode(self, run: ShardedRun) -> CellOutcome:
        """The cell's phases over its shards; a dead shard or a fault fails it."""
        for shard in run.shards:
            shard.on_producing = lambda slots: [run.live.__setitem__(i, _PRODUCED) for i in slots]
            shard.on_failed = run.failure.set
        try:
            outcome = await self.base.warm_up(run, await self._fills(run))
            if outcome is None and run.died:  # the other shards' warm-ups are kept
                outcome = CellOutcome(run.records, ERROR, "prefix warm-up failed")
            if outcome is None:
                before = await asyncio.to_thread(self.base.spec_counters)  # speculative decoding
                await self.base.start(run, self._launch)
                await self._measure(run)
                if run.interrupted.is_set():
                    return CellOutcome(run.records, PENDING, "interrupted",
                                       (run.start_ns, run.end_ns), run.warmup_s)
                # The other hosts' offsets after the window first: the judge weighs their bounds.
                run.clocks = await self.source.after_cell()
                outcome = await self.base.judge(run, self._bound_reason)
                after = await asyncio.to_thread(self.base.spec_counters) if before else None
                outcome.server = spec_columns(before, after, run.records)
        finally:
            for shard in run.shards:
                shard.on_producing, shard.on_failed = (lambda _slots: None), (lambda: None)
        if run.died and outcome.status != PENDING:
            outcome.status = ERROR
            outcome.reason = "; ".join(filter(None, [*run.died, outcome.reason]))
        return outcome

    async def _fills(self, run: ShardedRun) -> list[RequestRecord]:
        """Each shard warms its slots' prefixes: their records, in slot order."""
        base, base_tag = run.base
        for shard, slots in zip(run.shards, run.slots, strict=True):
            shard.send(("warm", run.cell.key[:3], base, base_tag, self.base.prompts.run_tag, slots))
        relay = asyncio.create_task(self._cancel_on(run, run.interrupted))
        try:
            got = await asyncio.gather(*(self._answer(s, "warmed") for s in run.shards))
        finally:
            relay.cancel()
        fills = []
        for shard, slots, message in zip(run.shards, run.slots, got, strict=True):
            if message is not None and self._own(shard, message[1], run, slots):
                fills.extend(message[1])
        return sorted(fills, key=lambda r: r.stream_index)

    @staticmethod
    def _own(shard: Shard, records: list[RequestRecord], run: DecodeRun, slots: list[int]) -> bool:
        """Whether every record is the shard's own, of this cell and its slots;
        if not, the shard is stopped and the cell fails naming it."""
        mine = set(slots)
        for r in records:
            if (r.phase, r.context, r.concurrency) != run.cell.key[:3]:
                why = f"a record of another cell ({printable(r.phase, 20)} {r.context}×{r.concurrency})"
            elif not r.request_id.startswith(f"{shard.prefix}-"):
                why = f"a record {printable(r.request_id, 60)!r} not under its own prefix"
            elif r.stream_index not in mine:
                why = f"a record of stream {r.stream_index}, not one of its slots"
            else:
                continue
            shard.kill_for(why)
            return False
        return True

    async def _cancel_on(self, run: ShardedRun, event: asyncio.Event) -> None:
        await event.wait()
        for shard in run.shards:
            shard.send(("cancel",))

    async def _answer(self, shard: Shard, kind: str, timeout: float | None = None) -> tuple | None:
        return await answer(shard, kind, timeout)

    def _launch(self, run: DecodeRun) -> None:
        assert isinstance(run, ShardedRun)
        for shard in run.shards:
            shard.send(("start",))

    async def _measure(self, run: ShardedRun) -> None:
        """The window: opened here, at one instant for every shard, and
        closed by each at the same end_ns; ended early for all when a stream
        of any shard fails, a shard dies, or the run is interrupted."""
        s = self.base.settings
        run.start_ns = _now()
        run.end_ns = run.start_ns + s.repeats * self.base.window_ns
        for shard in run.shards:
            shard.send(("window", run.start_ns, run.end_ns))
        with gc_paused():
            if not run.failure.is_set() and not run.interrupted.is_set():
                await self.base.sleep_until(run.end_ns, run.failure, run.interrupted)
            if _now() < run.end_ns:
                for shard in run.shards:
                    shard.send(("cancel",))
            grace = s.drain_timeout_s + s.stall_timeout_s
            got = await asyncio.gather(*(self._answer(sh, "done", grace) for sh in run.shards))
        measured: list[RequestRecord] = []
        for shard, slots, message in zip(run.shards, run.slots, got, strict=True):
            if message is None:
                continue
            _, records, delays, window = message
            if not self._own(shard, records, run, slots):
                continue
            if tuple(window) != (run.start_ns, run.end_ns):  # a bug of ours: fail the cell
                run.faults.append(f"shard {shard.index} applied the window {tuple(window)}, "
                                  f"not ({run.start_ns}, {run.end_ns})")
            measured.extend(records)
            run.delays.append((shard.index, delays))
        measured.sort(key=lambda r: (r.send_ns, r.stream_index))
        run.records.extend(measured)

    def _bound_reason(self, run: DecodeRun, start_ns: int, end_ns: int, tbt_ms: float | None,
                      table: pa.Table) -> str | None:
        """Any shard's reads that could have moved a figure, or another host's clock bound."""
        assert isinstance(run, ShardedRun)
        own = shards_bound_reason(run.delays, tbt_ms, table_bounds(table, start_ns, end_ns))
        shards = [(c.index, c.prefix, c.clock.uncertainty_ns) for c in run.clocks or ()]
        clock = clock_reason(table, start_ns, end_ns, shards) if shards else None
        return "; ".join(filter(None, [own, clock])) or None
