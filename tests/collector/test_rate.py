"""Rate cells (issue 34, items 1-2), collector side: the plan (pure), the flags'
errors, the verdict (pure), and whole runs through the real `bench run` against
the reference server, whose arrivals log keeps each request's arrival."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from bench.core.plan import PlanError, make_plan, parse_rates
from bench.measure.rate_cells import Bodies, judge_rate
from bench.measure.records import RequestRecord
from bench.workload.prompts import Prompt, messages, retag
from rundir.arrivals import cell_seed, check_load, parse_process, schedule, seed_from_text
from rundir.contract import (
    DECODE,
    ERROR,
    LOAD_NOT_DELIVERED,
    OVER_CAPACITY,
    PREFILL,
    PURPOSE_ARRIVAL,
    RATE,
    REQUESTS_QUEUED,
    VALID,
)
from rundir.io import read_run
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "2k", "--concurrency", "1",
        "--max-output", "64", "--no-prefill"]


# -- the plan (pure) ---------------------------------------------------------------


def _plan(**kw):
    base = dict(contexts=[2048, 4096], concurrency=[1], max_output=64, max_model_len=None,
                kv_budget=None)
    return make_plan(**{**base, **kw})


def test_rate_cells_come_last_per_decode_context_and_rate() -> None:
    plan = _plan(rates=[4.0, 0.5], rate_cap=8)
    assert [c.phase for c in plan.cells] == [PREFILL] * 2 + [DECODE] * 2 + [RATE] * 4
    keys = [c.key for c in plan.cells if c.phase == RATE]
    assert keys == [(RATE, 2048, 8, None, None, 0.5), (RATE, 2048, 8, None, None, 4.0),
                    (RATE, 4096, 8, None, None, 0.5), (RATE, 4096, 8, None, None, 4.0)]
    assert plan.rate_output == 64  # min(--max-output, 256)
    line = plan.traffic_lines(plan.to_run)[0]
    assert line.startswith("Rates: 4 cells at 0.5, 4 requests/s (poisson arrivals), contexts 2K, 4K; "
                           "at most 8 requests in flight"), line
    assert _plan().traffic_lines(_plan().cells) == []  # no --rate: no rate cells, no line


def test_no_cap_plans_concurrency_zero_and_says_the_kv_need_is_unknown() -> None:
    plan = _plan(rates=[1.0], kv_budget=10, rate_output_tokens=300)
    rate = [c for c in plan.cells if c.phase == RATE]
    assert [c.concurrency for c in rate] == [0, 0] and all(c.status == "pending" for c in rate)
    assert plan.rate_output == 300
    assert "no cap on requests in flight (the KV cache they need is unknown" in \
        plan.traffic_lines(plan.to_run)[0]


def test_a_cap_over_the_kv_budget_is_planned_over_capacity() -> None:
    plan = _plan(rates=[1.0], rate_cap=4, kv_budget=4 * (2048 + 64))
    over = {c.context: c for c in plan.cells if c.phase == RATE}
    assert over[2048].status == "pending"
    assert over[4096].status == OVER_CAPACITY
    assert over[4096].reason == ("needs 16,640 KV tokens (4 × (4,096 + 64): 4 requests in flight "
                                 "at most), server budget is 8,448")
    # with fewer slots than the cap, only the slots' requests hold KV cache
    slotted = _plan(rates=[1.0], rate_cap=4, kv_budget=4 * (2048 + 64), slots=1)
    assert all(c.status == "pending" for c in slotted.cells if c.phase == RATE)


@pytest.mark.parametrize("text, said", [("0", "above 0"), ("x", "above 0"), ("nan", "above 0"),
                                        ("inf", "above 0"), ("-1", "above 0"), (",", "at least one")])
def test_bad_rates_say_the_flag_and_what_was_expected(text, said) -> None:
    with pytest.raises(PlanError) as err:
        parse_rates(text)
    assert str(err.value).startswith("--rate: expected") and said in str(err.value)


def test_bad_flag_values_fail_at_parse_time_naming_the_flag(tmp_path: Path) -> None:
    for flag, value, said in (("--rate", "2,0", "--rate: expected requests per second"),
                              ("--arrivals", "gamma:0", "--arrivals: expected poisson, constant"),
                              ("--arrivals", "weibull", "--arrivals: expected poisson, constant"),
                              ("--rate-cap", "0", "--rate-cap"),
                              ("--arrival-seed", "-3", "--arrival-seed"),
                              ("--rate-output", "0", "--rate-output: expected")):
        res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", flag, value,
                      "--out", str(tmp_path / "run"))
        assert res.returncode == 2, res.stderr
        assert said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not (tmp_path / "run").exists()
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", "--rate-cap", "4",
                  "--dry-run")
    assert res.returncode == 2 and "--rate-cap: only with --rate" in res.stderr, res.stderr


# -- the verdict (pure) ------------------------------------------------------------


def _rec(**kw) -> RequestRecord:
    base = dict(phase=RATE, context=2048, concurrency=0, request_id="r-0", purpose=PURPOSE_ARRIVAL,
                stream_index=0, send_ns=0, error=None, cancelled=False, status=200)
    rec = RequestRecord.__new__(RequestRecord)
    for name, value in base.items():
        setattr(rec, name, value)
    for name, value in kw.items():
        setattr(rec, name, value)
    return rec


def _load(sent_fraction: float = 1.0):
    p = parse_process("poisson")
    offsets = schedule(p, 20.0, 3.0, 11)
    send = offsets.copy()
    send[int(len(send) * sent_fraction):] = -1
    return check_load(p, 20.0, 3.0, offsets, send, 0)


def test_verdict_order_error_then_open_then_load_then_queued() -> None:
    from bench.core.plan import Cell

    cell, capped = Cell(RATE, 2048, 0, rate=20.0), Cell(RATE, 2048, 8, rate=20.0)
    refused = _rec(error="HTTP 400: maximum context length is 2048 tokens", status=400)
    assert judge_rate(cell, [refused], _load(), None, 60)[0] == OVER_CAPACITY
    assert judge_rate(cell, [_rec(error="HTTP 500: boom", status=500)], _load(), None, 60) == \
        (ERROR, "HTTP 500: boom")
    status, reason = judge_rate(cell, [_rec(), _rec(cancelled=True)], _load(), None, 60)
    assert status == ERROR and reason.startswith("1 of 2 requests were still running 60 s after")
    status, reason = judge_rate(cell, [_rec()], _load(0.5), None, 60)
    assert status == LOAD_NOT_DELIVERED and "requests scheduled in the 3 s window" in reason
    assert judge_rate(cell, [_rec()], _load(), 4, 60)[0] == VALID  # no cap: the curve's own queue
    status, reason = judge_rate(capped, [_rec()], _load(), 4, 60)
    assert status == REQUESTS_QUEUED and reason.startswith("cap 8 requests in flight, 4 server slots")


# -- through `bench run` against the reference server -------------------------------


def _rate_rows(run: Path):
    data = read_run(run)
    cells = [c for c in data.cells.to_pylist() if c["phase"] == RATE]
    requests = [r for r in data.requests.to_pylist() if r["phase"] == RATE]
    return data, cells, requests


def test_a_poisson_cell_sends_on_its_seeded_schedule(refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=1000)
    runs = []
    for k in range(2):
        run = tmp_path / f"run{k}"
        res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--duration", "3",
                      "--rate", "20", "--arrival-seed", "7", "--rate-output", "16", "--out", str(run))
        assert res.returncode == 0, res.stderr
        runs.append((run, res))
    offsets = []
    for run, res in runs:
        data, cells, requests = _rate_rows(run)
        p = data.info.parameters
        assert (p.rate, p.arrivals, p.arrival_seed, p.rate_cap, p.rate_output_tokens) == \
            ([20.0], "poisson", 7, None, 16)
        (cell,) = cells
        assert (cell["rate_target"], cell["concurrency"], cell["arrivals"], cell["arrival_seed"],
                cell["rate_output_tokens"]) == (20.0, 0, "poisson", 7, 16)
        start, end = cell["window_start_ns"], cell["window_end_ns"]
        assert end - start == 3_000_000_000
        want = schedule(parse_process("poisson"), 20.0, 3.0,
                        cell_seed(7, (RATE, 2048, 0, None, None, 20.0)))
        got = np.array(sorted(r["scheduled_ns"] for r in requests)) - start
        assert np.array_equal(got, want)  # every request, at the time the seed gives
        assert all(r["purpose"] == PURPOSE_ARRIVAL and r["rate_target"] == 20.0 and r["error"] is None
                   and r["chunk_tokens"][-1] == 16 and r["finish_reason"] == "length" for r in requests)
        lag_ms = np.array([r["send_ns"] - r["scheduled_ns"] for r in requests]) / 1e6
        assert (lag_ms >= 0).all() and np.median(lag_ms) < 0.5
        # the verdict follows the figures: Valid when p99 lag is within 1 ms (a loaded host's
        # stall is reported, not hidden)
        p99 = float(np.percentile(lag_ms, 99))
        if p99 <= 1.0:
            assert cell["status"] == VALID, cell
        else:
            assert cell["status"] == LOAD_NOT_DELIVERED and "Send lag p99" in cell["reason"], cell
        # the server saw each request arrive after its send and its scheduled time
        arrived = {a["request_id"]: a["recv_ns"] for a in srv.arrivals()}
        assert all(arrived[r["request_id"]] >= r["send_ns"] for r in requests)
        assert "req/s sent of" in res.stderr and "lag p99" in res.stderr
        offsets.append(got)
    assert np.array_equal(offsets[0], offsets[1])  # the same seed, the same schedule


def test_a_cap_below_the_load_is_load_not_delivered(refserver, tmp_path: Path) -> None:
    """64 tokens at 100 tok/s hold a request 0.64 s: a cap of 2 sends ~3 req/s of 20."""
    srv = refserver()
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--duration", "2",
                  "--rate", "20", "--rate-cap", "2", "--out", str(run))
    assert res.returncode == 0, res.stderr
    data, (cell,), requests = _rate_rows(run)
    assert cell["status"] == LOAD_NOT_DELIVERED and cell["concurrency"] == 2
    assert re.search(r"Sent \d+ of the \d+ requests scheduled in the 2 s window", cell["reason"])
    assert "Send lag p99 was" in cell["reason"]
    assert data.info.parameters.arrival_seed == seed_from_text(data.info.run_id)  # derived, recorded
    assert cell["arrival_seed"] == data.info.parameters.arrival_seed
    assert len(requests) < 20 * 2 * 0.5  # the client queued the rest and never sent them
    assert "Load not delivered" in res.stderr


def test_a_run_without_rate_writes_nothing_new(refserver, tmp_path: Path) -> None:
    srv = refserver()
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--duration", "1",
                  "--out", str(tmp_path / "run"))
    assert res.returncode == 0, res.stderr
    for name in ("cells.parquet", "requests.parquet"):
        names = pq.read_schema(tmp_path / "run" / name).names
        assert not {"rate_target", "scheduled_ns", "arrivals", "arrival_seed",
                    "rate_output_tokens"} & set(names), names
    params = yaml.safe_load((tmp_path / "run" / "run.yaml").read_text(encoding="utf-8"))["parameters"]
    assert not {"rate", "arrivals", "arrival_seed", "rate_cap", "rate_output_tokens"} & set(params)
    assert "Rates:" not in res.stderr


def test_a_rate_cells_bodies_are_encoded_once_and_are_what_json_dumps_gives_each_variant() -> None:
    made: list[Prompt] = []

    def payload(prompt: Prompt, model: str = "m") -> dict:
        made.append(prompt)
        return {"model": model, "messages": messages(prompt.text), "max_tokens": 4, "stream": True}

    text = 'quotes " and \\ back\nslash, é, ☃, 🙂, </script> ' * 200
    base = Prompt(f"[run1 a128-q0-r5-n0] {text}", 900)
    bodies = Bodies("run1", payload, base, "a128-q0-r5-n0")
    tags = ["a128-q0-r5-n0", "a128-q0-r5-n1", "a128-q0-r5-n12345", 'odd "tag\\', "ü"]
    got = [bodies.body(tag) for tag in tags]
    assert len(made) == 1  # the base's payload, encoded once for the whole cell
    for tag, body in zip(tags, got, strict=True):
        assert body == json.dumps(payload(retag(base, "run1", "a128-q0-r5-n0", tag))).encode()
    # the encoded tag found twice (here the model's name holds it): each variant encoded alone
    model = "[run1 a128-q0-r5-n0] "
    named = Bodies("run1", lambda p: payload(p, model=model), base, "a128-q0-r5-n0")
    made.clear()
    body = named.body("a128-q0-r5-n7")
    assert len(made) == 1
    assert body == json.dumps(payload(retag(base, "run1", "a128-q0-r5-n0", "a128-q0-r5-n7"),
                                      model=model)).encode()
