"""Rate cells at a prefix-reuse level (`--rate-reuse`, issue 34: "a rate cell may use
a reuse level"): the plan and the verdict order (pure), and whole runs through the
real `bench run` against the reference server's block cache, whose log holds the
tokens it really reused per request (tests/refserver/prefix_cache.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from bench.core.plan import make_plan
from bench.measure.rate_cells import Bodies, rate_reuse_verdict, rate_tag
from bench.workload.prompts import Prompt, messages, retag
from bench.workload.shared_prefix import PrefixWorkload
from rundir.contract import (
    ERROR,
    LOAD_NOT_DELIVERED,
    OVER_CAPACITY,
    PURPOSE_ARRIVAL,
    PURPOSE_PRIME,
    RATE,
    REQUESTS_QUEUED,
    REUSE_OFF_TARGET,
    REUSE_UNVERIFIED,
    VALID,
)
from rundir.io import read_run
from site_builder.publish import build_site
from site_builder.rate import rate_cells
from site_builder.trafficpage import percent
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

BLOCK = 16
CACHE = dict(tokens_per_s=2000, ttft_ms=2, prefill_tok_per_s=200_000, prefix_cache_block=BLOCK)
# 2 req/s, constant gaps: a mean gap of 500 ms allows 5 ms of send lag, which a loaded
# CI host keeps, so the reuse verdict is what these tests see.
FAST = ["--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "2k", "--concurrency", "1",
        "--max-output", "16", "--no-prefill", "--duration", "3", "--rate", "2",
        "--arrivals", "constant"]


# -- the plan and the verdict (pure) ----------------------------------------------


def test_a_rate_cell_per_context_reuse_level_and_rate() -> None:
    plan = make_plan(contexts=[2048], concurrency=[1], max_output=16, max_model_len=None,
                     kv_budget=None, prefill=False, rates=[1.0, 2.0], rate_reuse=[90, 0])
    keys = [c.key for c in plan.cells if c.phase == RATE]
    assert keys == [(RATE, 2048, 0, 0, None, 1.0), (RATE, 2048, 0, 0, None, 2.0),
                    (RATE, 2048, 0, 90, None, 1.0), (RATE, 2048, 0, 90, None, 2.0)]
    line = plan.traffic_lines(plan.cells)[-1]
    assert line.endswith("at 0, 90% prefix reuse, each group's shared prefix primed first")
    plain = make_plan(contexts=[2048], concurrency=[1], max_output=16, max_model_len=None,
                      kv_budget=None, prefill=False, rates=[1.0])
    assert [c.reuse for c in plain.cells if c.phase == RATE] == [None]
    # prompt tags: a reuse cell's differ from the plain cell's at the same rate
    cells = {c.reuse: c for c in plan.cells + plain.cells if c.phase == RATE and c.rate == 1.0}
    assert rate_tag(cells[None], 3) == "a2048-q0-r1-n3"
    assert rate_tag(cells[90], 3) == "a2048-q0-r1-p90-n3"


@pytest.mark.parametrize(("load", "reuse", "want"), [
    ((ERROR, "HTTP 500"), (REUSE_OFF_TARGET, "reuse off target: x"), (ERROR, "HTTP 500")),
    ((OVER_CAPACITY, "refused"), (REUSE_UNVERIFIED, "r"), (OVER_CAPACITY, "refused")),
    ((LOAD_NOT_DELIVERED, "Sent 3 of 8"), (REUSE_OFF_TARGET, "reuse off target: x"),
     (LOAD_NOT_DELIVERED, "Sent 3 of 8")),
    ((REQUESTS_QUEUED, "cap 8"), (REUSE_OFF_TARGET, "reuse off target: x"),
     (REUSE_OFF_TARGET, "reuse off target: x; cap 8")),
    ((VALID, None), (REUSE_UNVERIFIED, "reuse not verifiable"),
     (REUSE_UNVERIFIED, "reuse not verifiable")),
    ((VALID, "too few gaps"), (VALID, "reuse checked once: y"),
     (VALID, "too few gaps; reuse checked once: y")),
    ((REQUESTS_QUEUED, "cap 8"), (VALID, None), (REQUESTS_QUEUED, "cap 8")),
])
def test_the_reuse_verdict_yields_to_errors_and_an_undelivered_load_only(load, reuse, want) -> None:
    assert rate_reuse_verdict(load, reuse) == want


def test_a_groups_bodies_are_its_prefix_and_each_requests_own_suffix_encoded_once() -> None:
    """Bodies over a reuse cell's prompts: one encoding per group, and per request the
    bytes json.dumps gives that group's prefix with the request's own suffix."""
    made: list[Prompt] = []

    def payload(prompt: Prompt) -> dict:
        made.append(prompt)
        return {"model": "m", "messages": prompt.messages or messages(prompt.text), "max_tokens": 4}

    factory = SimpleNamespace(variant=lambda p, old, new: retag(p, "run1", old, new), run_tag="run1")
    cell = "a2048-q0-r2-p90"
    suffix = Prompt(f"[run1 {cell}-u] " + 'own "words" é\n ' * 50, 200)
    work = PrefixWorkload([f"[run1 {cell}-g0] shared zero " * 90, f"[run1 {cell}-g1] shared one " * 90],
                          [suffix], [f"{cell}-u"], 1800, "run1")
    groups = [Bodies("run1", payload, work.request(factory, g, f"{cell}-n0"), f"{cell}-n0",
                     lambda tag, g=g: work.request(factory, g, tag)) for g in range(2)]
    assert len(made) == 2
    for i in range(6):
        g, tag = i % 2, f"{cell}-n{i}"
        body = groups[g].body(tag)
        want = work.request(factory, g, tag)
        assert body == json.dumps(payload(want)).encode()
        sent = json.loads(body)["messages"]
        assert sent[0] == {"role": "system", "content": work.prefixes[g]}
        assert sent[1]["content"].startswith(f"[run1 {tag}] own")
    assert len(made) == 2 + 6  # the 6 made only for comparing here


# -- through `bench run` against the reference server --------------------------------


def collect(srv, out: Path, *extra: str, code: int = 0):
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST, *extra)
    assert res.returncode == code, res.stderr[-3000:]
    return read_run(out), res


def truth_ratio(srv, rows: list[dict]) -> float:
    """Σ tokens the server really reused ÷ Σ prompt tokens, from its own log."""
    truth = srv.truth_by_id()
    logged = [truth[r["request_id"]] for r in rows]
    return 100 * sum(t["cached_tokens"] for t in logged) / sum(t["prompt_tokens"] for t in logged)


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_a_90_percent_reuse_rate_cell_publishes_the_servers_reuse(refserver, tmp_path, engine) -> None:
    srv = refserver(engine=engine, **CACHE, **({"slots": 4} if engine == "llamacpp" else {}))
    run, res = collect(srv, tmp_path / "data" / "run", "--rate-reuse", "90")
    assert run.info.parameters.rate_reuse == [90]
    (cell,) = rate_cells(run.cells, run.requests)
    assert cell.reuse_target == 90
    rows = [r for r in run.requests.to_pylist() if r["phase"] == RATE]
    arrivals = [r for r in rows if r["purpose"] == PURPOSE_ARRIVAL]
    primes = [r for r in rows if r["purpose"] == PURPOSE_PRIME]
    assert len(arrivals) == 6 and all(r["prefix_reuse_target"] == 90 for r in rows)
    groups = {r["prefix_group"] for r in primes}
    assert len(groups) == 3 and {r["prefix_group"] for r in arrivals} == groups  # 6 requests, 2 each
    assert cell.reuse_achieved == pytest.approx(truth_ratio(srv, arrivals), abs=1e-9)
    assert cell.reuse_achieved == pytest.approx(90, abs=2)
    assert cell.reuse_server == pytest.approx(cell.reuse_achieved, abs=1e-9)  # counted twice, alike
    assert cell.status == VALID, cell.reason
    assert cell.rate_achieved == pytest.approx(2.0)  # and still on its schedule
    stored = next(c for c in run.cells.to_pylist() if c["phase"] == RATE)
    # the tolerance's block: vLLM's from its cache config; llama.cpp reuses token by token
    assert stored["reuse_block"] == (BLOCK if engine == "vllm" else 1)
    assert stored["server_source"] == ("counters" if engine == "vllm" else "timings")
    assert "reuse 90%" in res.stderr, res.stderr
    # the run page: the curve's table gains the reuse column (a run without keeps its table)
    assert build_site(tmp_path / "data", tmp_path / "site", jobs=1).errors == []
    html = (tmp_path / "site" / "runs" / "run" / "index.html").read_text(encoding="utf-8")
    section = re.search(r'<section id="request-rate".*?</section>', html, re.S).group(0)
    assert "2K context, no cap on requests in flight, 90% prefix reuse" in section
    assert '<th scope="col">Prefix reuse</th>' in section
    assert f">{percent(cell.reuse_achieved)}</td>" in section


def test_a_silent_cache_puts_a_reuse_rate_cell_off_target(refserver, tmp_path) -> None:
    srv = refserver(**CACHE, prefix_cache_silent_off=True)
    run, _ = collect(srv, tmp_path / "run", "--rate-reuse", "90")
    (cell,) = rate_cells(run.cells, run.requests)
    assert cell.status == REUSE_OFF_TARGET, cell.reason
    assert cell.reuse_achieved == 0 and cell.reuse_server == 0
    assert cell.reason.startswith("reuse off target: asked 90.0%, requests report 0.0% cached, "
                                  "server counters 0.0%")


def test_resume_with_another_rate_reuse_is_refused_naming_the_flag(refserver, tmp_path) -> None:
    srv = refserver(**CACHE)
    out = tmp_path / "run"
    collect(srv, out, "--rate-reuse", "90")
    yaml_before = (out / "run.yaml").read_bytes()
    for given, had in ((["--rate-reuse", "50"], "90"), (["--rate-reuse", "0,90"], "90")):
        res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out), *given)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert lines[0].startswith(f"error: --rate-reuse: {out} measured its rate cells with {had}; "
                                   f"got {given[1]}")
    same = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                   "--rate-reuse", "90")
    assert same.returncode == 0 and "nothing left to measure" in same.stderr, same.stderr
    assert yaml.safe_load(yaml_before)["parameters"]["rate_reuse"] == [90]


def test_a_run_without_rate_reuse_refuses_it_on_resume_and_writes_nothing_new(refserver,
                                                                              tmp_path) -> None:
    srv = refserver(**CACHE)
    out = tmp_path / "run"
    run, _ = collect(srv, out)
    params = yaml.safe_load((out / "run.yaml").read_text(encoding="utf-8"))["parameters"]
    assert "rate_reuse" not in params
    (cell,) = rate_cells(run.cells, run.requests)
    assert cell.reuse_target is None and cell.reuse_achieved is None
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(out),
                  "--rate-reuse", "90")
    assert res.returncode == 2, res.stderr
    assert "error: --rate-reuse: " in res.stderr and "no --rate-reuse (unique prompts)" in res.stderr


def test_rate_reuse_without_rate_is_refused(tmp_path) -> None:
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", "--rate-reuse", "90",
                  "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and "--rate-reuse: only with --rate" in res.stderr, res.stderr
