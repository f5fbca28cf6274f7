"""Input length mixes of rate cells (`--input-lengths`; issue 35, items 1-2).

The grammar and the draw are pure; whole runs go through the real `bench run` against
the reference server, whose arrivals log holds the prompt tokens each request arrived
with."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench.workload.prompts import tolerance
from rundir.arrivals import seed_from_text
from rundir.contract import ERROR, OVER_CAPACITY, PURPOSE_ARRIVAL, RATE, REQUESTS_QUEUED, VALID
from rundir.lengths import parse_input_mix
from tests.collector.test_prompt_sources import _built
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "1k", "--concurrency", "1",
        "--duration", "2", "--prefill-repeats", "1", "--no-prefill", "--max-output", "16"]


def test_input_specs_read_back_and_draw_within_the_context() -> None:
    assert parse_input_mix("fixed").fixed and parse_input_mix("file").kind == "file"
    assert str(parse_input_mix(" uniform:0.25-1 ")) == "uniform:0.25-1"
    assert str(parse_input_mix("normal:0.5,0.2,0.1,1.0")) == "normal:0.5,0.2,0.1,1"
    key = (RATE, 1024, 0, None, None, 4.0)
    mix = parse_input_mix("uniform:0.25-1")
    draws = [mix.draw(3, key, 1024, n) for n in range(300)]
    assert 256 <= min(draws) < 270 and 1010 < max(draws) <= 1024 and len(set(draws)) > 150
    assert draws == [mix.draw(3, key, 1024, n) for n in range(300)]
    # keyed apart from the output draw of the same request
    from rundir.lengths import parse_mix
    out = parse_mix("uniform:256-1024")
    assert draws != [out.draw(3, key, 0, n) for n in range(300)]
    norm = [parse_input_mix("normal:0.5,0.2,0.1,0.9").draw(3, key, 1000, n) for n in range(300)]
    assert 100 <= min(norm) and max(norm) <= 900


@pytest.mark.parametrize(("spec", "want"), [
    ("uniform:0-1", "--input-lengths uniform:0-1: expected fractions 0 < A ≤ B ≤ 1 of the context"),
    ("uniform:0.5-2", "--input-lengths uniform:0.5-2: expected fractions 0 < A ≤ B ≤ 1"),
    ("uniform:100-200", "--input-lengths uniform:100-200: expected fractions 0 < A ≤ B ≤ 1"),
    ("normal:0.5,0,0.1,1", "--input-lengths normal:0.5,0,0.1,1: expected SD > 0 and 0 < MIN ≤ MEAN"),
    ("zipf", "--input-lengths: expected fixed, uniform:A-B or normal:MEAN,SD,MIN,MAX (fractions"),
])
def test_bad_input_specs_say_what_was_expected(spec: str, want: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_input_mix(spec)
    assert str(exc.value).startswith(want), exc.value


@pytest.mark.parametrize(("flags", "want"), [
    (["--input-lengths", "uniform:0.25-1"], "--input-lengths uniform:0.25-1: only with --rate"),
    (["--input-lengths", "file", "--rate", "4"], "--input-lengths file: only with --prompts FILE"),
    (["--input-lengths", "uniform:0.5-1", "--rate", "4", "--rate-reuse", "50"],
     "--input-lengths uniform:0.5-1 with --rate-reuse: give one"),
    (["--input-lengths", "uniform:2-3", "--rate", "4"], "--input-lengths uniform:2-3: expected fractions"),
])
def test_input_mix_refusals_are_one_line(flags: list[str], want: str, tmp_path: Path) -> None:
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", *FAST, *flags,
                  "--out", str(tmp_path / "run"))
    assert res.returncode != 0
    assert want in res.stderr, res.stderr
    assert not (tmp_path / "run").exists()


def _rated(run: Path) -> tuple[dict, list[dict], list[dict]]:
    info = yaml.safe_load((run / "run.yaml").read_text())
    cells = [c for c in pq.read_table(run / "cells.parquet").to_pylist() if c["phase"] == RATE]
    requests = [r for r in pq.read_table(run / "requests.parquet").to_pylist()
                if r["phase"] == RATE and r["purpose"] == PURPOSE_ARRIVAL]
    return info, cells, requests


def _fine(cells: list[dict]) -> None:
    assert cells and all(c["status"] in (VALID, REQUESTS_QUEUED) or
                         (c["status"] not in (ERROR, OVER_CAPACITY) and c["reason"]) for c in cells), cells


def test_uniform_input_lengths_are_the_seeded_draws_the_server_saw(refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=4000)
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--rate", "4",
                  "--input-lengths", "uniform:0.25-1", "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert "Input lengths: uniform:0.25-1 of each rate cell's context" in res.stderr
    info, cells, requests = _rated(run)
    p = info["parameters"]
    seed = seed_from_text("lengths:" + info["run_id"])
    assert (p["input_lengths"], p["length_seed"]) == ("uniform:0.25-1", seed)
    assert "output_lengths" not in p
    _fine(cells)
    mix, seen = parse_input_mix("uniform:0.25-1"), {a["request_id"]: a for a in srv.arrivals()}
    assert len(requests) >= 3
    for r in requests:
        key = (r["phase"], r["context"], r["concurrency"], None, None, r["rate_target"])
        want = mix.draw(seed, key, r["context"], r["stream_index"])
        assert r["input_target"] == want
        assert abs(r["prompt_tokens"] - want) <= tolerance(want) and r["prompt_tokens"] <= 1024 + 16
        assert seen[r["request_id"]]["prompt_tokens"] == r["prompt_tokens"]
    assert len({r["input_target"] for r in requests}) > 1
    page = _built(run, tmp_path / "site")[1]
    assert f"rate cells: uniform:0.25-1 of the cell&#39;s context, seed {seed}" in page
    # --resume with another mix is refused in one line
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run),
                  "--input-lengths", "uniform:0.5-1")
    assert res.returncode != 0
    assert "--input-lengths: " in res.stderr and "was measured with uniform:0.25-1; got uniform:0.5-1" \
        in res.stderr, res.stderr


def test_file_input_lengths_follow_the_file_items(refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=4000)
    words = [40, 120, 300, 2000]  # the last is longer than the context: cut to it
    items = [" ".join(f"w{i}x{j}" for j in range(n)) for i, n in enumerate(words)]
    pfile = tmp_path / "p.jsonl"
    pfile.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in items))
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--rate", "4",
                  "--prompts", str(pfile), "--input-lengths", "file", "--out", str(run))
    assert res.returncode == 0, res.stderr
    info, cells, requests = _rated(run)
    assert info["parameters"]["input_lengths"] == "file"
    assert "length_seed" not in info["parameters"]
    _fine(cells)
    assert len(requests) >= 3
    seen = {a["request_id"]: a for a in srv.arrivals()}
    for r in requests:
        item = r["prompt_index"]
        assert r["input_target"] <= 1024
        assert abs(r["prompt_tokens"] - r["input_target"]) <= tolerance(r["input_target"])
        assert seen[r["request_id"]]["prompt_tokens"] == r["prompt_tokens"]
        if words[item] < 500:  # the item's own length (its words and the tag's)
            assert r["input_target"] < 1024 and r["input_target"] >= words[item]
        else:
            assert r["input_target"] == 1024
    assert len({r["prompt_index"] for r in requests}) > 1
