"""Speculative decoding against the reference server's draft model (issue 35, items 3-4).

The server's draft model has a known acceptance per request and step
(tests/refserver/speculative.py) and logs every verification step's tokens.
Through `bench run`, the published tokens per step (site_builder/spec.py, what
the run page and cells.json show) must equal the server's Σ tokens ÷ Σ steps
over the cell's measured requests exactly, and every way the figure can
mislead ends said: counters that lie are published as disagreeing, a server
that sends several steps per chunk as not measurable, a run without drafts
publishes no acceptance at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rundir.contract import DECODE, PURPOSE_MEASURE
from rundir.io import read_run
from rundir.speculative import SOURCE_LLAMACPP, SOURCE_VLLM
from site_builder.spec import spec_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

# --max-output 49: 48 tokens after the first, whole steps of 3 (16) or 4 (12)
FAST = ["--contexts", "128", "--concurrency", "2", "--no-prefill", "--duration", "1",
        "--warmup-stable", "0.2", "--server-wait", "3", "--max-output", "49"]
SPEC = dict(tokens_per_s=300, ttft_ms=1, spec_draft_tokens=3)


def collect(srv, out: Path, *extra: str):
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST, *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    return read_run(out)


def published(run):
    (cell,) = spec_cells(run.cells, run.requests, run.info.engine.name)
    return cell


def truth_steps(srv, run) -> tuple[int, int]:
    """Σ tokens and Σ steps the server logged for the cell's measured requests, each
    up to the tokens its client received (a cancelled stream's last sends may not arrive)."""
    truth = srv.truth_by_id()
    tokens = steps = 0
    for r in run.requests.to_pylist():
        if r["phase"] != DECODE or r["purpose"] != PURPOSE_MEASURE:
            continue
        got, cum = (r["chunk_tokens"] or [0])[-1], 1  # the first token is the prefill's
        for n in truth[r["request_id"]]["spec_steps"]:
            if cum + n > got:
                break
            cum, tokens, steps = cum + n, tokens + n, steps + 1
    return tokens, steps


@pytest.mark.parametrize("accept", [[0, 3, 1, 2, 3], None])  # a fixed list; seeded draws (p 0.7)
def test_the_published_acceptance_is_the_servers_own(refserver, tmp_path, accept) -> None:
    srv = refserver(**SPEC, spec_accept=accept)
    run = collect(srv, tmp_path / "run")
    cell = published(run)
    tokens, steps = truth_steps(srv, run)
    assert steps > 50
    assert cell.client == pytest.approx(tokens / steps, abs=1e-9)
    assert cell.source == SOURCE_VLLM and cell.server is not None
    assert cell.server == pytest.approx(cell.client, rel=0.02)  # the counters agree
    assert not cell.disagrees and cell.note is None
    (row,) = run.cells.to_pylist()
    assert row["spec_draft_length"] == 3.0


def test_the_terminal_says_what_the_engine_accepted(refserver, tmp_path) -> None:
    """The cell's line ends with the engine's tokens per step, as measured and as a
    resumed run reads it back (bench/run/summary.py)."""
    srv = refserver(**SPEC, spec_accept=[3])  # every draft accepted: 4 tokens a step
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    (row,) = read_run(out).cells.to_pylist()
    shown = f"{row['spec_tokens_per_step_server']:.2f} tokens/step (engine)"
    assert row["spec_tokens_per_step_server"] == pytest.approx(4.0, rel=0.02)
    line = next(x for x in res.stderr.splitlines() if x.startswith("decode 128×2"))  # progress
    assert line.endswith(shown), line
    # a resumed run adds a cell and reads the first back from the run directory
    again = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                    "--concurrency", "1,2")
    assert again.returncode == 0, again.stderr[-3000:]
    told = again.stdout + again.stderr
    assert any(x.startswith("decode 128×2") and x.endswith(shown) for x in told.splitlines()), told


def test_counters_that_lie_are_published_as_disagreeing(refserver, tmp_path) -> None:
    srv = refserver(**SPEC, spec_accept=[2], spec_counters_lie=0.5)
    run = collect(srv, tmp_path / "run")
    cell = published(run)
    tokens, steps = truth_steps(srv, run)
    assert cell.client == pytest.approx(tokens / steps, abs=1e-9) == pytest.approx(3.0, abs=1e-9)
    assert cell.server == pytest.approx(2.0, rel=0.01)  # claims 1 of the 2 accepted per step
    assert cell.disagrees and cell.note.startswith("acceptance disagrees: the client saw 3.000")


def test_two_steps_a_chunk_is_not_measurable(refserver, tmp_path) -> None:
    srv = refserver(**SPEC, spec_accept=[3], spec_steps_per_chunk=2)
    cell = published(collect(srv, tmp_path / "run"))
    assert cell.client is None and cell.server == pytest.approx(4.0, rel=0.01)
    assert "a chunk carried 8 tokens, more than the draft length 3 + 1" in cell.note


def test_without_counters_nothing_is_published(refserver, tmp_path) -> None:
    """Chunks of several tokens alone do not prove drafting: no counters, no acceptance."""
    srv = refserver(**SPEC, spec_accept=[1, 2], spec_counters=False)
    run = collect(srv, tmp_path / "run")
    assert max(max(r["chunk_tokens"][i + 1] - r["chunk_tokens"][i] for i in range(
        len(r["chunk_tokens"]) - 1)) for r in run.requests.to_pylist()
        if r["purpose"] == PURPOSE_MEASURE and len(r["chunk_tokens"]) > 2) == 3
    assert spec_cells(run.cells, run.requests, run.info.engine.name) == []
    assert run.cells.column("spec_tokens_per_step_server").null_count == 1


def test_llamacpp_timings_give_the_server_figure_only(refserver, tmp_path) -> None:
    """llama-server is not known to stream once per step: its timings give the figure."""
    srv = refserver(**SPEC, engine="llamacpp", slots=2, spec_accept=[2, 0, 3])
    run = collect(srv, tmp_path / "run")
    cell = published(run)
    assert cell.client is None and "llama.cpp is not known to stream once" in cell.note
    assert cell.source == SOURCE_LLAMACPP
    truth = srv.truth_by_id()
    told = [r for r in run.requests.to_pylist() if r["purpose"] == PURPOSE_MEASURE
            and r["engine_draft_accepted"] is not None]
    assert told
    tokens = sum(sum(truth[r["request_id"]]["spec_steps"]) for r in told)
    steps = sum(len(truth[r["request_id"]]["spec_steps"]) for r in told)
    assert cell.server == pytest.approx(tokens / steps, abs=1e-9)


def test_sglang_tells_no_count_and_its_run_publishes_no_acceptance(refserver, tmp_path) -> None:
    """SGLang's acceptance is a gauge over its last 40 decode batches and /server_info's an
    average without counts, and a streamed request carries none: no cell figure can be
    taken, so a run with drafts on publishes none (docs/engines.md, "Speculative decoding
    (SGLang)"), though the gauges it could misread are there."""
    srv = refserver(**SPEC, engine="sglang", spec_accept=[2])  # every step 3 tokens
    run = collect(srv, tmp_path / "run")
    gauge = [line for line in httpx.get(srv.base_url + "/metrics").text.splitlines()
             if line.startswith("sglang:spec_accept_length{")]
    assert len(gauge) == 1 and float(gauge[0].rsplit(" ", 1)[1]) == 3.0  # a window was logged
    (state,) = httpx.get(srv.base_url + "/server_info").json()["internal_states"]
    assert state["avg_spec_accept_length"] == 3.0
    assert spec_cells(run.cells, run.requests, run.info.engine.name) == []
    import pyarrow.parquet as pq
    written = set(pq.read_schema(tmp_path / "run" / "cells.parquet").names)
    assert not {"spec_tokens_per_step_server", "spec_source", "spec_draft_length"} & written
    assert {r["engine_draft_accepted"] for r in run.requests.to_pylist()} == {None}


def test_a_run_without_drafts_publishes_no_acceptance(refserver, tmp_path) -> None:
    run = collect(refserver(tokens_per_s=300, ttft_ms=1), tmp_path / "run")
    assert spec_cells(run.cells, run.requests, run.info.engine.name) == []
    names = set(run.cells.schema.names) | set(run.requests.schema.names)
    raw = set(json.loads(json.dumps(sorted(names))))
    assert "spec_source" in raw  # read back as empty: the file itself left them out
    import pyarrow.parquet as pq
    written = set(pq.read_schema(tmp_path / "run" / "cells.parquet").names)
    assert not {"spec_tokens_per_step_server", "spec_source", "spec_draft_length"} & written


def test_streams_spread_over_worker_processes_publish_the_same(refserver, tmp_path) -> None:
    """--workers 2: the streams run in shard processes; the counters are read around them alike."""
    srv = refserver(**SPEC, spec_accept=[1, 3, 0])
    run = collect(srv, tmp_path / "run", "--workers", "2")
    assert run.cells.column("processes").to_pylist() == [2]
    cell = published(run)
    tokens, steps = truth_steps(srv, run)
    assert cell.client == pytest.approx(tokens / steps, abs=1e-9)
    assert cell.source == SOURCE_VLLM and not cell.disagrees
