"""Length mixes, --honor-eos and sampling settings (issue 35, item 2).

The spec grammar and the draw are pure; whole runs go through the real `bench run`
against the reference server, whose arrivals log holds each request's max_tokens, whether
it asked ignore_eos, and the temperature/top_p it was sent."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench.measure.rate_cells import with_max_tokens
from rundir.arrivals import seed_from_text
from rundir.contract import DECODE, ERROR, PURPOSE_MEASURE, RATE, VALID
from rundir.lengths import LengthMix, parse_mix
from tests.collector.test_prompt_sources import _built
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "1k", "--concurrency", "1,2",
        "--duration", "1", "--prefill-repeats", "1"]


# -- the grammar and the draw (pure) ---------------------------------------------------


def test_specs_read_back_as_written() -> None:
    assert parse_mix("fixed").fixed
    assert str(parse_mix(" uniform:100-200 ")) == "uniform:100-200"
    assert str(parse_mix("normal:300,100,50,1000")) == "normal:300,100,50,1000"
    assert str(parse_mix("normal:300.5,10.25,1,400")) == "normal:300.5,10.25,1,400"


@pytest.mark.parametrize(("spec", "want"), [
    ("uniform:200-100", "--output-lengths uniform:200-100: expected A-B with 1 ≤ A ≤ B"),
    ("uniform:0-5", "--output-lengths uniform:0-5: expected A-B with 1 ≤ A ≤ B"),
    ("uniform:100", "--output-lengths uniform:100: expected uniform:A-B with whole tokens"),
    ("normal:300,0,1,400", "--output-lengths normal:300,0,1,400: expected SD > 0 and 1 ≤ MIN ≤ MEAN ≤ MAX"),
    ("normal:30,10,50,100", "--output-lengths normal:30,10,50,100: expected SD > 0 and 1 ≤ MIN ≤ MEAN"),
    ("normal:1,2", "--output-lengths normal:1,2: expected normal:MEAN,SD,MIN,MAX"),
    ("zipf:3", "--output-lengths: expected fixed, uniform:A-B or normal:MEAN,SD,MIN,MAX"),
])
def test_bad_specs_say_what_was_expected(spec: str, want: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_mix(spec)
    assert str(exc.value).startswith(want), exc.value


def test_draws_are_seeded_per_request_and_bounded() -> None:
    key = (DECODE, 1024, 2, None, None, None)
    uni, norm = parse_mix("uniform:100-200"), parse_mix("normal:150,40,120,170")
    draws = [uni.draw(7, key, s, n) for s in range(2) for n in range(200)]
    assert draws == [uni.draw(7, key, s, n) for s in range(2) for n in range(200)]  # computed again
    assert min(draws) == 100 and max(draws) == 200 and len(set(draws)) > 80
    assert draws != [uni.draw(8, key, s, n) for s in range(2) for n in range(200)]  # the seed matters
    assert uni.draw(7, key, 0, 0) != uni.draw(7, (DECODE, 1024, 4, None, None, None), 0, 0) or \
        uni.draw(7, key, 0, 1) != uni.draw(7, (DECODE, 1024, 4, None, None, None), 0, 1)  # the cell too
    bounded = [norm.draw(1, key, 0, n) for n in range(500)]
    assert 120 <= min(bounded) and max(bounded) <= 170
    assert 140 < sum(bounded) / len(bounded) < 155  # mean 150, truncated both sides about alike
    with pytest.raises(ValueError, match="fixed length mix draws nothing"):
        LengthMix().draw(1, key, 0, 0)


def test_a_spliced_max_tokens_is_the_body_json_would_write() -> None:
    payload = {"model": 'm"max_tokens": 5', "messages": [{"role": "user",
                                                         "content": 'say "max_tokens": 9'}],
               "max_tokens": 256, "stream": True}
    spliced = with_max_tokens(json.dumps(payload).encode(), 1234)
    assert spliced == json.dumps({**payload, "max_tokens": 1234}).encode()


# -- whole runs --------------------------------------------------------------------------


def _rows(run: Path):
    cells = pq.read_table(run / "cells.parquet").to_pylist()
    requests = pq.read_table(run / "requests.parquet").to_pylist()
    return yaml.safe_load((run / "run.yaml").read_text()), cells, requests


def _key(r: dict) -> tuple:
    return (r["phase"], r["context"], r["concurrency"], r.get("prefix_reuse_target"), r.get("turn"),
            r.get("rate_target"))


def test_uniform_output_lengths_are_the_seeded_draws_the_server_saw(refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=2000)  # requests finish inside the window and restart
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--max-output", "256",
                  "--output-lengths", "uniform:100-200", "--rate", "4", "--workers", "2",
                  "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert "Output lengths: uniform:100-200, drawn per request" in res.stderr
    info, cells, requests = _rows(run)
    p = info["parameters"]
    seed = seed_from_text("lengths:" + info["run_id"])
    assert (p["output_lengths"], p["length_seed"]) == ("uniform:100-200", seed)
    assert p["rate_output_tokens"] == 200  # the rate cells' plan counts the longest
    assert not {"honor_eos", "temperature", "top_p"} & set(p)
    # requests ending 'length' at their own (shorter) max_tokens are no fault
    assert all(c["status"] == VALID for c in cells if c["phase"] != RATE), cells
    assert [c["status"] != ERROR for c in cells if c["phase"] == RATE] == [True], cells
    mix, asked = parse_mix("uniform:100-200"), {a["request_id"]: a for a in srv.arrivals()}
    loops: dict[tuple, list[dict]] = defaultdict(list)
    for r in requests:
        if r["purpose"] == PURPOSE_MEASURE:
            loops[(_key(r), r["stream_index"])].append(r)
    assert any(len(v) > 1 for v in loops.values())  # the closed loop restarted streams
    # the 2-stream cell ran in two processes: each request's target crossed the wire
    assert {c["processes"] for c in cells if c["phase"] == DECODE and c["concurrency"] == 2} == {2}
    for (key, slot), recs in loops.items():
        for n, r in enumerate(sorted(recs, key=lambda r: r["send_ns"])):
            assert r["output_target"] == mix.draw(seed, key, slot, n)
            assert asked[r["request_id"]]["max_tokens"] == r["output_target"]
    rated = [r for r in requests if r["phase"] == RATE]
    assert rated and all(r["output_target"] == mix.draw(seed, _key(r), r["stream_index"], 0)
                         == asked[r["request_id"]]["max_tokens"] for r in rated)
    done = [r for r in requests if r["output_target"] and r["finish_reason"] == "length"]
    assert done and all(r["chunk_tokens"][-1] == r["output_target"] for r in done)
    others = [r for r in requests if r["output_target"] is None]  # prefill, prefix warm-ups: 1 token
    assert others and all(asked[r["request_id"]]["max_tokens"] == 1 for r in others)
    cells_json, page = _built(run, tmp_path / "site")
    # the builder's re-check reads each request's output_target, not run.yaml's max_output
    assert {c["status"] for c in cells_json["cells"] if c["phase"] == DECODE} == {VALID}, cells_json["cells"]
    assert f"uniform:100-200, seed {seed}: max_tokens drawn per request" in page


def test_honor_eos_keeps_early_ends_and_says_so(refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=1000, eos_after_tokens=20, eos_every=2)
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--max-output", "64",
                  "--honor-eos", "--no-prefill", "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert "EOS honoured (--honor-eos)" in res.stderr
    info, cells, requests = _rows(run)
    assert info["parameters"]["honor_eos"] is True and "output_lengths" not in info["parameters"]
    assert all(c["status"] == VALID and "ignore_eos" not in (c["reason"] or "") for c in cells), cells
    measured = [r for r in requests if r["purpose"] == PURPOSE_MEASURE and not r["cancelled"]]
    ends = {(r["finish_reason"], r["chunk_tokens"][-1]) for r in measured}
    assert {("stop", 20), ("length", 64)} <= ends, ends  # per-request lengths kept
    assert not any(a["ignore_eos"] for a in srv.arrivals())
    _, page = _built(run, tmp_path / "site")
    assert "End of sequence" in page and "compare only runs that honoured EOS" in page
    # the same server without the flag: every request asked to ignore EOS, none ended early
    plain = tmp_path / "plain"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--max-output", "64",
                  "--no-prefill", "--concurrency", "1", "--out", str(plain))
    assert res.returncode == 0, res.stderr
    info, _, requests = _rows(plain)
    assert "honor_eos" not in info["parameters"] and "EOS honoured" not in res.stderr
    ids = {r["request_id"] for r in requests}
    assert all(a["ignore_eos"] for a in srv.arrivals() if a["request_id"] in ids)
    assert not any(r["finish_reason"] == "stop" for r in requests)


def test_temperature_reaches_every_request_and_resume_keeps_the_settings(refserver, tmp_path: Path) -> None:
    srv = refserver()
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--concurrency", "1",
                  "--max-output", "16", "--temperature", "0", "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert "Sampling: temperature 0, top_p server default" in res.stderr
    info, _, requests = _rows(run)
    assert info["parameters"]["temperature"] == 0 and "top_p" not in info["parameters"]
    ids = {r["request_id"] for r in requests}
    sent = [a for a in srv.arrivals() if a["request_id"] in ids]
    assert sent and all(a["temperature"] == 0 and "top_p" not in a for a in sent)
    _, page = _built(run, tmp_path / "site")
    assert "temperature 0, top_p server default" in page
    for extra, want in (
        (["--temperature", "1"], f"--temperature: {run} was measured with 0; got 1"),
        (["--top-p", "0.5"], f"--top-p: {run} was measured with server default; got 0.5"),
        (["--honor-eos"], f"--honor-eos: {run} was measured with EOS ignored (the engine profile's); "
                          "got True"),
        (["--output-lengths", "uniform:1-8"], f"--output-lengths: {run} was measured with fixed; "
                                              "got uniform:1-8"),
    ):
        res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run), *extra)
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"error: {want} (start a new run with --out)"), res.stderr
        assert res.stderr.count("\n") == 1, res.stderr
    before = len(srv.arrivals())
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run), "--concurrency", "2")
    assert res.returncode == 0, res.stderr  # run.yaml's temperature holds for the new cells
    assert all(a["temperature"] == 0 for a in srv.arrivals()[before:])


@pytest.mark.parametrize(("args", "want"), [
    (["--output-lengths", "uniform:200-100"],
     "--output-lengths uniform:200-100: expected A-B with 1 ≤ A ≤ B"),
    (["--output-lengths", "uniform:100-9000", "--max-output", "256"],
     "--output-lengths uniform:100-9000: its longest request (9000 tokens) exceeds --max-output 256"),
    (["--output-lengths", "uniform:1-8", "--rate", "2", "--rate-output", "8"],
     "--rate-output with --output-lengths uniform:1-8: give one"),
    (["--length-seed", "3"], "--length-seed: only with --output-lengths uniform:… or normal:…"),
    (["--temperature", "nan"], "--temperature: expected a number with 0 ≤ x ≤ 2, got 'nan'"),
    (["--top-p", "0"], "--top-p: expected a number with 0 < x ≤ 1, got '0'"),
])
def test_flag_errors_are_one_line(args: list[str], want: str, tmp_path: Path) -> None:
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"error: {want}") and res.stderr.count("\n") == 1, res.stderr
