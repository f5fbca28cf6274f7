"""Start the reference server in its own process and read its ground truth.

    from tests.refserver.harness import start_refserver
    from tests.refserver.scenario import Scenario

    srv = start_refserver(Scenario(tokens_per_s=200, slots=4), tmp_path)
    try:
        ...  # point the collector at srv.base_url (".../v1" is srv.openai_url)
        records = srv.truth(min_records=8)
    finally:
        srv.stop()

or, in pytest, the `refserver` fixture (import `refserver_fixture` into the
test module or a conftest): `srv = refserver(tokens_per_s=200)`; its servers
are killed at teardown.

A fault or lifecycle test lands in a phase by request count and cell, never
by sleeping (inject.py): `refserver(inject=[{"cell": ["decode", 128, 2],
"at": 3, "do": "hold"}])`, then `srv.wait_arrival(("decode", 128, 2), 3)`
returns once the server has seen that request, and `srv.release()` lets it go.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.refserver.scenario import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RefServer:
    scenario: Scenario
    workdir: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    starts: int = 0
    _extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def truth_path(self) -> Path:
        return self.workdir / "truth.jsonl"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def arrivals_path(self) -> Path:
        """Every completion request at arrival, with its cell and number there (inject.py)."""
        return self.workdir / "arrivals.jsonl"

    # ---- lifecycle -----------------------------------------------------

    def _start(self, port: int, timeout: float) -> None:
        port_file = self.workdir / "port"
        port_file.unlink(missing_ok=True)
        env = {**os.environ, **self._extra_env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                          env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "tests.refserver.server",
               "--scenario", str(self.workdir / "scenario.json"), "--port", str(port),
               "--truth", str(self.truth_path), "--port-file", str(port_file),
               "--arrivals", str(self.arrivals_path)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"refserver exited with {self.proc.returncode}:\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"refserver did not listen within {timeout} s")
            time.sleep(0.01)
        self.port = int(port_file.read_text())

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM and wait (SIGKILL if it does not exit in time)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int | None:
        """SIGKILL: open connections die with the process, as in a crash."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait()

    def restart(self, timeout: float = 30.0, kill: bool = True) -> None:
        """A new process on the same port (state such as the prefix cache is lost;
        the truth log is appended to). Kills the old one first if it runs."""
        self.kill() if kill else self.stop()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._start(self.port, timeout)
                return
            except RuntimeError:  # the port may linger a moment after a kill
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> RefServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- ground truth --------------------------------------------------

    def truth(self, min_records: int = 0, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Truth records written so far (waits up to `timeout` for `min_records`).
        A record is written when its request ends, a moment after the client
        may have seen the end of its stream."""
        deadline = time.monotonic() + timeout
        while True:
            records = []
            if self.truth_path.exists():
                for line in self.truth_path.read_text().splitlines():
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass  # a line being written
            if len(records) >= min_records or time.monotonic() > deadline:
                return records
            time.sleep(0.01)

    def truth_by_id(self, min_records: int = 0) -> dict[str, dict[str, Any]]:
        return {r["request_id"]: r for r in self.truth(min_records)}

    # ---- faults by request count and cell (inject.py) ------------------

    def arrivals(self) -> list[dict[str, Any]]:
        """The arrivals log so far (restarts included)."""
        return read_arrivals(self.arrivals_path)

    def wait_arrival(self, cell: tuple[str, int, int], n: int = 1,
                     timeout: float = 120.0) -> dict[str, Any]:
        """The arrival of request `n` of `cell`, once the server has logged it."""
        return wait_arrival(self.arrivals_path, cell, n, timeout, lambda: self.alive)

    @property
    def marks_path(self) -> Path:
        """Delayed marks as they fire (inject.py)."""
        return self.workdir / "marks.jsonl"

    def wait_mark(self, cell: tuple[str, int, int], n: int, timeout: float = 120.0) -> dict[str, Any]:
        """The line of the mark on request `n` of `cell`, once it has fired
        (the request has sent its `after_tokens`)."""
        return wait_arrival(self.marks_path, cell, n, timeout, lambda: self.alive)

    def release(self) -> int:
        """Let every held request go on (POST /_ref/release); how many were held."""
        return release(self.base_url)

    def cont(self) -> None:
        """SIGCONT a server that stopped itself (a "stop" trigger)."""
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)


def read_arrivals(path: Path | str) -> list[dict[str, Any]]:
    path = Path(path)
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def wait_arrival(path: Path | str, cell: tuple[str, int, int], n: int = 1, timeout: float = 120.0,
                 alive=None) -> dict[str, Any]:
    """Poll the arrivals log at `path` until request `n` of `cell` is in it. The
    deadline is generous (it only bounds a broken test); a server that died
    without logging it fails at once. `alive`: whether the server still runs."""
    want = [cell[0], int(cell[1]), int(cell[2])]
    deadline = time.monotonic() + timeout
    while True:
        gone = alive is not None and not alive()  # asked first: it may log, then exit
        seen = read_arrivals(path)
        for a in seen:
            if a["cell"] == want and a["n"] == n:
                return a
        if gone or time.monotonic() > deadline:
            last = [(a["cell"], a["n"]) for a in seen[-5:]]
            raise AssertionError(f"request {n} of cell {tuple(want)} never reached the server"
                                 f"{' (it exited)' if gone else f' in {timeout:g} s'}; "
                                 f"last arrivals: {last}")
        time.sleep(0.02)


def release(base_url: str) -> int:
    """POST /_ref/release: held requests go on; returns how many were held."""
    req = urllib.request.Request(base_url + "/_ref/release", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["released"]


def start_refserver(scenario: Scenario, tmp_path: Path | str, timeout: float = 30.0,
                    env: dict[str, str] | None = None) -> RefServer:
    """Start a server process for `scenario`, files under `tmp_path`; returns
    once it listens."""
    workdir = Path(tmp_path)
    workdir.mkdir(parents=True, exist_ok=True)
    scenario.save(workdir / "scenario.json")
    srv = RefServer(scenario, workdir, _extra_env=dict(env or {}))
    srv._start(0, timeout)
    return srv


# ---- true gauges from the records --------------------------------------


def true_running(records: list[dict], t_ns: int) -> int:
    """Requests holding a slot at t (slot assigned, not yet finished)."""
    return sum(1 for r in records if r["slot_ns"] is not None
               and r["slot_ns"] <= t_ns < r["finish_ns"])


def true_waiting(records: list[dict], t_ns: int) -> int:
    """Requests accepted and queued for a slot at t."""
    return sum(1 for r in records if r["accepted"] and r["recv_ns"] <= t_ns
               and t_ns < (r["slot_ns"] if r["slot_ns"] is not None else r["finish_ns"]))


def completion_tokens(record: dict, start_ns: int | None = None,
                      end_ns: int | None = None) -> int:
    """Tokens sent in chunks whose send time is in [start, end]."""
    return sum(n for t, n, _ in record["chunks"]
               if (start_ns is None or t >= start_ns) and (end_ns is None or t <= end_ns))


@pytest.fixture(name="refserver")
def refserver_fixture(tmp_path):
    """The `refserver` fixture, a factory: `refserver(scenario=None, **fields) -> RefServer`.
    Import `refserver_fixture` into a test module or conftest to use it."""
    servers: list[RefServer] = []

    def factory(scenario: Scenario | None = None, **fields: Any) -> RefServer:
        sc = scenario if scenario is not None else Scenario(**fields)
        srv = start_refserver(sc, tmp_path / f"refserver{len(servers)}")
        servers.append(srv)
        return srv

    yield factory
    for srv in servers:
        srv.kill()


# ---- true per-request figures (tests/collector/test_tail_truth.py) ------


@dataclass(frozen=True)
class TrueFigure:
    """One figure of each of a cell's requests (NaN where it has none): its true
    value from the server's sends, and the interval from that value to the
    value moved by the request's own transport (`lo` ≤ `hi`), which the host
    may make as long as it likes but the two logs measure."""

    truth: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


FIGURE_KEYS = ("ttft_ms", "tbt_ms", "per_request_tok_s", "e2e_ms")


def true_request_figures(records: list[dict], rows: list[dict], start_ns: int,
                         end_ns: int) -> dict[str, TrueFigure]:
    """Per request of a cell (`rows`: its requests.parquet rows, in order), by
    the keys of rundir.tails: the true TTFT (first token's send − arrival),
    time between tokens and tok/s (tokens after the first in-window token ÷
    the span between the first and last in-window token chunks' sends) and
    end-to-end latency (arrival → the stream's last write, `finish_ns`).

    The samples are the collector's: the same requests and, for the window,
    the chunks whose client stamps lie in [start_ns, end_ns] (where a chunk
    near an edge falls is the window's rule, not a tail's), each matched to
    its send by its cumulative token count; a request whose in-window chunks
    were all read at one stamp has no span to time, on either side.

    Transport moves a figure by what the logs measure: TTFT by the request's
    way up (client send → server arrival) plus its first token's way down, a
    span by its last chunk's transit less its first's, end-to-end by the way
    up plus the client's read of the end after the server's last write. A
    rank over the collector's figures lies between the same rank of `lo` and
    of `hi` (a rank is monotone in every sample)."""
    by_id = {r["request_id"]: r for r in records}
    out = {key: np.full((3, len(rows)), np.nan) for key in FIGURE_KEYS}
    for i, row in enumerate(rows):
        rec = by_id.get(row["request_id"])
        if rec is not None:
            for key, values in _request_truth(rec, row, start_ns, end_ns).items():
                out[key][:, i] = values
    return {key: TrueFigure(*arr) for key, arr in out.items()}


def _moved(truth: float, moved: float) -> tuple[float, float, float]:
    return truth, min(truth, moved), max(truth, moved)


def _request_truth(rec: dict, row: dict, s: int, e: int) -> dict[str, tuple[float, float, float]]:
    sends = {cum: t for t, n, cum in rec["chunks"] if n > 0}
    tok, prev = [], 0  # (client stamp, server send, tokens) of each token chunk
    for stamp, cum in zip(row["chunk_ns"] or [], row["chunk_tokens"] or [], strict=True):
        if cum > prev:
            tok.append((stamp, sends[cum], cum - prev))
        prev = cum
    if not tok:
        return {}
    ms, up = 1e6, rec["recv_ns"] - row["send_ns"]
    ttft = (tok[0][1] - rec["recv_ns"]) / ms
    out = {"ttft_ms": _moved(ttft, ttft + (up + tok[0][0] - tok[0][1]) / ms)}
    inwin = [c for c in tok if s <= c[0] <= e]
    after = sum(n for _, _, n in inwin[1:])
    if after > 0 and inwin[-1][1] > inwin[0][1] and inwin[-1][0] > inwin[0][0]:
        span, seen = inwin[-1][1] - inwin[0][1], inwin[-1][0] - inwin[0][0]
        out["tbt_ms"] = _moved(span / ms / after, seen / ms / after)
        out["per_request_tok_s"] = _moved(after / (span / 1e9), after / (seen / 1e9))
    end = row["end_ns"]
    done = (row["finish_reason"] is not None and row["error"] is None
            and not row["cancelled"])
    if done and end is not None and s <= end <= e:
        e2e = (rec["finish_ns"] - rec["recv_ns"]) / ms
        out["e2e_ms"] = _moved(e2e, e2e + (up + end - rec["finish_ns"]) / ms)
    return out
