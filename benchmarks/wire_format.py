"""The shard protocol's wire format: pickle (protocol 2, before) against typed
MessagePack (protocol 3, bench/distributed/shard_messages.py), on one decode
cell's worth of messages.

The cell: --streams stream slots (16,384 by default) over --shards shard
processes, each measured stream one record of --events token events (its
chunk_ns and chunk_tokens int64 arrays, a 1,200-character content tail of
its own: a string shared by records would be pickled once), every
slot's prefix warm-up one record of one event, the slots reported
producing in four batches per shard, 16 clock exchanges each way per shard
before and after the cell, the warm, start, window and offset messages and
each shard's window delays. Both formats encode and decode the same
messages, built by each tree's own types:

  pickle   the tree at --baseline (3c72720 by default; git archive,
           benchmarks/_revisions.py): pickle.dumps, then the allow-list
           unpickler of a remote channel and the part-by-part message check
  msgpack  this tree: shard_messages.encode, then Side.decode (the schema's
           check is the decode)

The MAC over each frame is the same in both and left out. Each format runs
in a subprocess of its own tree; CPU time (process_time) is the best of
--repeats passes, the garbage collector off during each (as in the window).
Prints a table with the ratios, then one JSON line, last.

    python benchmarks/wire_format.py                  # 16,384 streams × 300 events
    python benchmarks/wire_format.py --streams 1024   # quicker
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAIL = ("the quick brown fox jumps over the lazy dog; " * 30)[:1200]


def _cell(streams: int, shards: int, events: int) -> tuple[list[tuple], list[tuple]]:
    """(messages to the shards, messages from them) of one decode cell, built
    with whichever tree's types come first on sys.path."""
    import numpy as np

    from bench.measure.monitor import WindowDelays
    from bench.measure.records import RequestRecord
    from bench.workload.prompts import Prompt

    rng = np.random.default_rng(7)
    key = ("decode", 8192, streams)
    base = Prompt(f"[run s-d8192-c{streams}-s0] " + "lorem ipsum " * 2700, 8192)
    slots = [list(range(k, streams, shards)) for k in range(shards)]
    to_shard: list[tuple] = []
    from_shard: list[tuple] = []
    start, end = 10**12, 10**12 + 30 * 10**9
    for k, mine in enumerate(slots):
        for t in range(32):  # 16 clock exchanges before the cell, 16 after
            to_shard.append(("clock", start + t))
            from_shard.append(("clock", start + t, start + t + 900, start + t + 1_000))
        to_shard += [("offset", 5_000_000_000 + k), ("warm", key, base, "s-d8192-c1-s0", "run", mine),
                     ("start",), ("window", start, end), ("stop",)]
        prefix = f"run-w{k}"
        fills = [RequestRecord("decode", 8192, streams, f"{prefix}-{i}", "prefix_fill", i,
                               start - 10**9, start - 10**8, 8192, 8180, "length", None, False,
                               np.array([start - 2 * 10**8], np.int64), np.array([1], np.int64),
                               "x", None, "usage_continuous", 1, 200, 1, False, None)
                 for i in mine]
        from_shard += [("ready", 1000 + k), ("warmed", fills)]
        for batch in np.array_split(np.array(mine), 4):
            from_shard.append(("producing", [int(i) for i in batch]))
        measured = []
        for n, i in enumerate(mine):
            ns = start + np.cumsum(rng.integers(50_000_000, 150_000_000, events)).astype(np.int64)
            measured.append(RequestRecord(
                "decode", 8192, streams, f"{prefix}-{len(mine) + n}", "measure", i, start - 10**9,
                None, 8192, 8180, None, None, True, ns, np.arange(1, events + 1, dtype=np.int64),
                f"{TAIL[:-9]} {i:08d}", None, "usage_continuous", None, 200, 4096, False, None))
        delays = WindowDelays(start, end, events * len(mine), events * len(mine), 120_000,
                              {b: 1000 + b for b in range(30)},
                              {b: [b + 1, (b + 1) * 1000] for b in range(20)},
                              [(start + j * 10**6, 2_000_000) for j in range(40)], 31 * 10**9)
        from_shard.append(("done", measured, delays, (start, end)))
    return to_shard, from_shard


def _codec(fmt: str):
    """(encode, decode to a shard, decode from a shard) of the tree on sys.path."""
    if fmt == "pickle":
        import pickle

        from bench.distributed.remote import restricted_loads
        from bench.distributed.shard_messages import check_from_shard, check_to_shard

        def encode(m: tuple) -> bytes:
            return pickle.dumps(m, pickle.HIGHEST_PROTOCOL)

        return (encode, lambda b: check_to_shard(restricted_loads(b)),
                lambda b: check_from_shard(restricted_loads(b)))
    from bench.distributed.shard_messages import FROM_SHARD, TO_SHARD, encode
    return encode, TO_SHARD.decode, FROM_SHARD.decode


def _timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
        gc.enable()
    return best


def measure(fmt: str, streams: int, shards: int, events: int, repeats: int) -> dict:
    """One format's figures, in this process (its tree first on sys.path)."""
    to_shard, from_shard = _cell(streams, shards, events)
    encode, dec_to, dec_from = _codec(fmt)
    out: dict = {"format": fmt}
    for name, messages, decode in (("to_shard", to_shard, dec_to), ("from_shard", from_shard, dec_from)):
        frames = [encode(m) for m in messages]
        back = [decode(f) for f in frames]
        assert [m[0] for m in back] == [m[0] for m in messages]
        out[name] = {"messages": len(messages), "bytes": sum(map(len, frames)),
                     "encode_s": _timed(lambda ms=messages: [encode(m) for m in ms], repeats),
                     "decode_s": _timed(lambda fs=frames, d=decode: [d(f) for f in fs], repeats)}
    done = [f for f, m in zip([encode(m) for m in from_shard], from_shard, strict=True)
            if m[0] == "done"]
    out["done_bytes"] = sum(map(len, done))
    return out


def _run(fmt: str, tree: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure", fmt, "--streams",
           str(args.streams), "--shards", str(args.shards), "--events", str(args.events),
           "--repeats", str(args.repeats)]
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    if got.returncode:
        sys.exit(f"{fmt} in {tree} failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="3c72720", help="the pickle format's tree (a rev or a folder)")
    ap.add_argument("--streams", type=int, default=16_384)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--events", type=int, default=300, help="token events per measured record")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--measure", choices=("pickle", "msgpack"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.streams, args.shards, args.events, args.repeats)))
        return
    sys.path.insert(0, str(REPO))
    from benchmarks._revisions import export_tree

    with tempfile.TemporaryDirectory(prefix="wire-format-") as tmp:
        old_tree = export_tree(args.baseline, Path(tmp) / "baseline")
        old = _run("pickle", old_tree, args)
    new = _run("msgpack", REPO, args)
    print(f"one decode cell: {args.streams:,} streams over {args.shards} shards, "
          f"{args.events} events a measured record (best of {args.repeats}, CPU s)")
    print(f"{'':28}{'pickle':>12}{'msgpack':>12}{'new/old':>9}")
    rows = []
    for side in ("to_shard", "from_shard"):
        for what in ("bytes", "encode_s", "decode_s"):
            a, b = old[side][what], new[side][what]
            rows.append((f"{side} {what}", a, b))
    a_total = sum(old[s][w] for s in ("to_shard", "from_shard") for w in ("encode_s", "decode_s"))
    b_total = sum(new[s][w] for s in ("to_shard", "from_shard") for w in ("encode_s", "decode_s"))
    rows.append(("all encode+decode s", a_total, b_total))
    rows.append(("'done' messages bytes", old["done_bytes"], new["done_bytes"]))
    for name, a, b in rows:
        fa = f"{a:,}" if isinstance(a, int) else f"{a:.3f}"
        fb = f"{b:,}" if isinstance(b, int) else f"{b:.3f}"
        print(f"{name:28}{fa:>12}{fb:>12}{b / a:>9.2f}")
    print(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "measure"},
                      "pickle": old, "msgpack": new}))


if __name__ == "__main__":
    main()
