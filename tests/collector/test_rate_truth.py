"""Rate cells against the reference server's own log of arrivals (issue 34, item 4).

The server logs when each request reached it (`recv_ns`, the host's monotonic
clock, the one the collector stamps with). Through `bench run --rate R`, the
published figures (site_builder/rate.py: what the run page and cells.json
show) must agree with that log at 1, 50 and 500 requests/s: every request the
cell counts reached the server, the achieved rate is the server's count over
the window, the client's send lag is never more than the server saw, and the
published TTFT percentiles are the server's first token less the send within
transport. A client that cannot send on time (here a cap on requests in
flight, so requests wait in the client) is said not to have delivered the load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rundir.contract import LOAD_NOT_DELIVERED, PURPOSE_ARRIVAL, RATE, VALID
from rundir.io import read_run
from site_builder.rate import rate_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

BASE = ["--contexts", "128", "--concurrency", "1", "--no-prefill", "--warmup-stable", "0.2",
        "--server-wait", "3", "--max-output", "16", "--rate-output", "4"]
TRANSPORT_MS = 5.0  # client send -> server parse on a loaded 2-core host, at most


def collect(srv, out: Path, *extra: str):
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *BASE, *extra,
                  timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return read_run(out)


@pytest.mark.parametrize("rate, duration", [(1, "6"), (50, "2"), (500, "1")])
def test_the_published_load_is_the_load_the_server_saw(refserver, tmp_path, rate, duration) -> None:
    srv = refserver(tokens_per_s=2000, ttft_ms=1)
    run = collect(srv, tmp_path / "run", "--rate", str(rate), "--duration", duration,
                  "--arrivals", "poisson", "--arrival-seed", "7")
    (cell,) = [c for c in rate_cells(run.cells, run.requests) if c.rate_target == rate]
    rows = [r for r in run.requests.to_pylist() if r["phase"] == RATE
            and r["purpose"] == PURPOSE_ARRIVAL]
    start = next(c for c in run.cells.to_pylist() if c["phase"] == RATE)["window_start_ns"]
    window_ns = float(duration) * 1e9
    counted = [r for r in rows if start <= r["scheduled_ns"] < start + window_ns]
    truth = srv.truth_by_id()
    arrived = [truth[r["request_id"]] for r in counted if r["request_id"] in truth]
    assert len(arrived) == len(counted) == cell.scheduled  # every counted request reached it
    assert cell.rate_achieved == pytest.approx(len(arrived) / float(duration), rel=1e-9)
    client_lag = np.array([r["send_ns"] - r["scheduled_ns"] for r in counted]) / 1e6
    server_lag = np.array([t["recv_ns"] - r["scheduled_ns"] for r, t in zip(counted, arrived,
                                                                              strict=True)]) / 1e6
    assert (server_lag >= client_lag).all()  # nothing arrives before it was sent
    assert cell.send_lag_ms_p50 == pytest.approx(float(np.percentile(client_lag, 50)), abs=1e-6)
    assert float(np.percentile(server_lag, 50)) - cell.send_lag_ms_p50 < TRANSPORT_MS
    # TTFT: the server's first token less our send, within transport
    true_ttft = sorted((t["chunks"][0][0] - r["send_ns"]) / 1e6
                       for r, t in zip(counted, arrived, strict=True))
    assert cell.tails["ttft_ms_p50"] >= float(np.percentile(true_ttft, 50)) - 1e-6
    assert cell.tails["ttft_ms_p50"] - float(np.percentile(true_ttft, 50)) < TRANSPORT_MS
    # Valid unless the client fell behind its schedule, as a loaded host can make it at
    # 500/s: then the cell says so with the figures the builder found in the raw rows
    assert cell.status == (LOAD_NOT_DELIVERED if cell.load_problems else VALID), cell.reason
    if cell.load_problems:
        assert cell.reason.startswith(" ".join(cell.load_problems))


def test_a_client_that_cannot_send_on_time_did_not_deliver_the_load(refserver, tmp_path) -> None:
    """One request in flight at a time, each taking ~0.25 s, at 20 requests/s:
    the requests wait in the client, their send lag grows, and the cell says so."""
    srv = refserver(tokens_per_s=200, ttft_ms=1)
    run = collect(srv, tmp_path / "run", "--rate", "20", "--duration", "2", "--rate-cap", "1",
                  "--rate-output", "50", "--arrivals", "constant")
    (cell,) = rate_cells(run.cells, run.requests)
    assert cell.status == LOAD_NOT_DELIVERED, cell.reason
    # about 8 of 40 sent (0.25 s or more each, one at a time; fewer on a slow host):
    # the rest waited in the client past the window, offered but never sent
    assert cell.scheduled == 40 and 1 <= cell.sent <= 9
    assert cell.reason.startswith(f"Sent {cell.sent} of the 40 requests scheduled in the 2 s "
                                  f"window ({100 * cell.sent / 40:.1f}%, needs 99%). Send lag p99 was ")
    assert cell.send_lag_ms_p99 > 1000
