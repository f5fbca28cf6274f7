"""Prompt sources (issue 35, item 1): a user's prompt file and the two built-in corpora.

Parsing is pure (every format, every error names the file and the line or item); whole
runs go through the real `bench run` against the reference server, which counts one
token a word and logs each prompt's first words (`prompt_head`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench.workload.prompt_files import PromptFileError, parse_prompts, read_prompt_file
from bench.workload.prompts import tolerance
from bench.workload.sources import ADVERSARIAL, NATURAL, PromptSource, adversarial_prompt, natural_prompt
from rundir.arrivals import seed_from_text
from rundir.contract import DECODE, ERROR, PENDING, PREFILL, RATE
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "1k", "--concurrency", "1,2",
        "--max-output", "16", "--duration", "1", "--prefill-repeats", "1"]


# -- parsing (pure) ------------------------------------------------------------------


def test_sharegpt_json_reads_human_and_system_turns_not_answers() -> None:
    data = json.dumps([
        {"conversations": [{"from": "system", "value": "Be brief."},
                           {"from": "human", "value": "Why is the sky blue?"},
                           {"from": "gpt", "value": "Rayleigh scattering."}]},
        {"messages": [{"role": "user", "content": "Name a river."}]},
    ]).encode()
    assert parse_prompts(data, "sg.json") == ("sharegpt", ["Be brief.\n\nWhy is the sky blue?",
                                                           "Name a river."])


def test_jsonl_prompts_and_chat_messages_mix() -> None:
    data = (b'{"prompt": "Tell me about tides."}\n\n'
            b'{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},'
            b' {"role": "assistant", "content": "A"}]}\n')
    assert parse_prompts(data, "p.jsonl") == ("jsonl", ["Tell me about tides.", "S\n\nU"])


@pytest.mark.parametrize(("data", "message"), [
    (b'{"prompt": "a"}\n[1, 2]\n',
     'p.jsonl line 2: expected an object with "prompt" (a string) or "messages" (a list), got a list'),
    (b'{"prompt": "a"}\n{"prompt": 3}\n', 'p.jsonl line 2: field "prompt": expected a non-empty string, '
     "got a number"),
    (b'{"prompt": "a"}\n{"prompt": "  "}\n', 'p.jsonl line 2: field "prompt": expected a non-empty '
     "string, got an empty string"),
    (b'{"prompt": "a"}\n{"prompt": "secret text", \n', "p.jsonl line 2: expected one JSON object per line"),
    (b'{"text": "secret text"}\n', 'p.jsonl line 1: expected an object with "prompt" (a string) or '
     '"messages" (a list), got an object without them'),
    (b'{"messages": [{"role": "assistant", "content": "secret text"}]}\n',
     'p.jsonl line 1: field "messages": expected at least one human/user turn with text, got none'),
    (b'{"messages": [{"role": "user", "content": 5}]}\n',
     'p.jsonl line 1: field "messages"[0]: field "content": expected a string, got a number'),
    (b'{"messages": []}\n', 'p.jsonl line 1: field "messages": expected a non-empty list of turns, '
     "got an empty list"),
    (b'[{"conversations": [{"from": "human", "value": "x"}]}, "secret text"]',
     'p.jsonl item 1: expected an object with "conversations" (a list of turns), got a string'),
    (b'[{"conversations": [{"from": "narrator", "value": "x"}]}]',
     "p.jsonl item 0: field \"conversations\"[0]: field \"from\": expected one of human, gpt, system"),
    (b'[\n{"conversations": [}\n]', "p.jsonl line 2: not JSON"),
    (b"[]", "p.jsonl: expected a list of conversations, got an empty list"),
    (b"  \n", "p.jsonl: empty"),
    (b"secret text\n", "p.jsonl line 1: expected a JSON list (ShareGPT"),
    (b'{"prompt": "\xff"}\n', "p.jsonl line 1: not UTF-8 text"),
])
def test_bad_files_get_one_line_naming_file_and_line(data: bytes, message: str) -> None:
    with pytest.raises(PromptFileError) as exc:
        parse_prompts(data, "p.jsonl")
    text = str(exc.value)
    assert text.startswith(message), text
    assert "\n" not in text and "secret" not in text  # one line; never the prompt's text


def test_read_prompt_file_hashes_the_bytes(tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_bytes(b'{"prompt": "one two"}\n')
    pf = read_prompt_file(f)
    assert (pf.name, pf.prompts, pf.format) == ("mine.jsonl", ("one two",), "jsonl")
    assert pf.sha256 == hashlib.sha256(b'{"prompt": "one two"}\n').hexdigest()


# -- sources (pure) ------------------------------------------------------------------


def test_built_in_sources_are_seeded_and_unlike_each_other() -> None:
    assert natural_prompt(1, 5) == natural_prompt(1, 5) != natural_prompt(2, 5)
    assert adversarial_prompt(1, 5) == adversarial_prompt(1, 5) != adversarial_prompt(1, 6)
    words = natural_prompt(3, 0).split()
    assert len(set(words)) < len(words) / 3  # prose repeats its words: predictable
    rand = adversarial_prompt(3, 0).split()[12:]
    assert len(set(rand)) > 0.95 * len(rand)  # random strings hardly ever repeat


def test_a_tags_text_is_the_source_padded_with_more_of_it_and_cut_at_words() -> None:
    src = PromptSource("file:p.jsonl", 7, ["alpha beta gamma", "delta\nepsilon"])
    start = src.index_for("d1024-c1-s0")
    text, index = src.text(4, "d1024-c1-s0")
    assert index == start
    order = ["alpha beta gamma", "delta\nepsilon"]
    flat = (order[start] + "\n\n" + order[1 - start]).split()
    assert text.split() == flat[:4]  # prompt `start`, then the next: never filler
    assert src.text(12, "d1024-c1-s0")[0].split()[:4] == text.split()  # longer: the same start
    assert {PromptSource(NATURAL, 1).index_for(f"t{i}") for i in range(50)} != {0}
    with pytest.raises(ValueError, match="--prompt-source: expected one of"):
        PromptSource("noise", 1)
    assert PromptSource(ADVERSARIAL, 1).text(30, "t")[0].startswith("Continue this sequence")


# -- whole runs against the reference server -------------------------------------------


def _rows(run: Path):
    cells = pq.read_table(run / "cells.parquet").to_pylist()
    requests = pq.read_table(run / "requests.parquet").to_pylist()
    info = yaml.safe_load((run / "run.yaml").read_text())
    return info, cells, requests


def test_a_jsonl_file_run_keeps_exact_contexts_and_sends_the_files_text(refserver, tmp_path: Path) -> None:
    srv = refserver()
    f = tmp_path / "mine.jsonl"
    lines = [json.dumps({"prompt": f"zebra{i} " + "quartz river lantern " * 20}) for i in range(5)]
    f.write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--prompts", str(f),
                  "--prompt-seed", "11", "--workers", "2", "--out", str(run))
    assert res.returncode == 0, res.stderr
    info, cells, requests = _rows(run)
    p = info["parameters"]
    assert (p["prompt_source"], p["prompt_seed"]) == ("file:mine.jsonl", 11)
    assert p["prompt_file_sha256"] == read_prompt_file(f).sha256
    assert {(c["phase"], c["context"], c["concurrency"]) for c in cells} == {
        (PREFILL, 1024, 1), (DECODE, 1024, 1), (DECODE, 1024, 2)}
    assert all(c["status"] not in (ERROR, PENDING) and c["prompt_source"] == "file:mine.jsonl"
               and c["prompt_seed"] == 11 for c in cells), cells
    src = PromptSource("file:mine.jsonl", 11, read_prompt_file(f).prompts)
    assert all(0 <= r["prompt_index"] < 5 for r in requests)
    # the matrix's sizing, as for filler: within half the tolerance of the context (a stream
    # cut at the window's end has no usage)
    counted = [r["prompt_tokens"] for r in requests if r["prompt_tokens"] is not None]
    assert len(counted) >= 4 and all(abs(n - 1024) <= tolerance(1024) // 2 for n in counted)
    decode = [r for r in requests if r["phase"] == DECODE and r["concurrency"] == 2]
    assert {r["processes"] for r in cells if r["phase"] == DECODE and r["concurrency"] == 2} == {2}
    # one text for the cell's streams, measured in two processes: the index crossed the wire
    assert {r["prompt_index"] for r in decode} == {src.index_for("d1024-c2-s0")}
    heads = [t["prompt_head"] for t in srv.truth()]
    assert heads and all("quartz river lantern" in h and "zebra" in h for h in heads)
    # the built site: every cell row says the source; the run page says source, seed, hash
    cells_json, page = _built(run, tmp_path / "site")
    assert cells_json["cells"] and all(c["prompt_source"] == "file:mine.jsonl" for c in cells_json["cells"])
    assert cells_json["run"]["info"]["parameters"]["prompt_seed"] == 11
    assert f"from the file mine.jsonl (SHA-256 {read_prompt_file(f).sha256}), seed 11" in page


def _built(run: Path, site: Path) -> tuple[dict, str]:
    data = site.parent / f"data-{run.name}"
    data.mkdir()
    shutil.copytree(run, data / run.name)
    res = run_cli("build-site", "--data", str(data), "--out", str(site), "-q")
    assert res.returncode == 0, res.stderr
    (cells_json,) = site.glob("runs/*/cells.json")
    (page,) = site.glob("runs/*/index.html")
    return json.loads(cells_json.read_text()), page.read_text()


def test_natural_and_adversarial_runs_record_their_source(refserver, tmp_path: Path) -> None:
    srv = refserver()
    for name, marker in ((NATURAL, "Continue this story."), (ADVERSARIAL, "Continue this sequence")):
        run = tmp_path / name
        res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--concurrency", "1",
                      "--prompt-source", name, "--rate", "4", "--rate-output", "8", "--out", str(run))
        assert res.returncode == 0, res.stderr
        info, cells, requests = _rows(run)
        seed = seed_from_text(info["run_id"])
        assert (info["parameters"]["prompt_source"], info["parameters"]["prompt_seed"]) == (name, seed)
        assert "prompt_file_sha256" not in info["parameters"]
        assert all(c["prompt_source"] == name and c["prompt_seed"] == seed for c in cells)
        assert {c["phase"] for c in cells} == {PREFILL, DECODE, RATE}  # rate cells use the source too
        assert all(r["prompt_index"] is not None for r in requests)
        counted = [r["prompt_tokens"] for r in requests if r["prompt_tokens"] is not None]  # not cut off
        assert counted and all(abs(n - 1024) <= tolerance(1024) // 2 for n in counted)
        assert any(marker in t["prompt_head"] for t in srv.truth())


def test_a_filler_run_records_no_source(refserver, tmp_path: Path) -> None:
    srv = refserver()
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--concurrency", "1",
                  "--out", str(run))
    assert res.returncode == 0, res.stderr
    info, _, _ = _rows(run)
    assert not {"prompt_source", "prompt_seed", "prompt_file_sha256"} & set(info["parameters"])
    assert "prompt_source" not in pq.read_schema(run / "cells.parquet").names
    assert "prompt_index" not in pq.read_schema(run / "requests.parquet").names
    cells_json, page = _built(run, tmp_path / "site")
    assert not any("prompt_source" in c for c in cells_json["cells"]) and "Prompts" not in page


def test_resume_with_another_source_or_file_is_refused(refserver, tmp_path: Path) -> None:
    srv = refserver()
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--concurrency", "1",
                  "--prompt-source", NATURAL, "--out", str(run))
    assert res.returncode == 0, res.stderr
    other = tmp_path / "other.jsonl"
    other.write_text('{"prompt": "x y z"}\n')
    for extra, want in (
        (["--prompt-source", ADVERSARIAL], f"--prompt-source: {run} was measured with prompt source "
                                           "natural; got adversarial (start a new run with --out)"),
        (["--prompts", str(other)], f"--prompts: {run} was measured with prompt source natural; "
                                    "got file:other.jsonl"),
        (["--prompt-seed", "1"], f"--prompt-seed: {run} was measured with prompt seed"),
    ):
        res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run), *extra)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines()[-1].startswith(f"error: {want}"), res.stderr
    # a file run: resumed only with the same file's bytes
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"prompt": "a b c"}\n')
    frun = tmp_path / "frun"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--concurrency", "1", "--no-prefill",
                  "--prompts", str(mine), "--out", str(frun))
    assert res.returncode == 0, res.stderr
    mine.write_text('{"prompt": "a b d"}\n')
    for extra, want in (
        ([], f"--resume: {frun} was measured with prompts from mine.jsonl; give that file again "
             "with --prompts"),
        (["--prompts", str(mine)], f"--prompts: mine.jsonl is not the file {frun} was measured with"),
    ):
        res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(frun), *extra)
        assert res.returncode == 2 and res.stderr.startswith(f"error: {want}"), res.stderr
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run),
                  "--prompt-source", NATURAL, "--concurrency", "2")
    assert res.returncode == 0, res.stderr  # the same source again: it goes on
    _, cells, _ = _rows(run)
    assert {c["concurrency"] for c in cells if c["phase"] == DECODE} == {1, 2}
    assert all(c["prompt_source"] == NATURAL for c in cells)


@pytest.mark.parametrize(("args", "want"), [
    (["--prompt-source", NATURAL, "--prompts", "x.jsonl"], "--prompt-source natural and --prompts: give one"),
    (["--prompts", "only.jsonl", "--turns", "2"], "--prompts only.jsonl with --turns: the file has no "
     "assistant (gpt) turns to replay as a conversation's replies; expected ShareGPT or chat messages"),
    (["--prompt-seed", "3"], "--prompt-seed: only with --prompt-source natural|adversarial or --prompts"),
    (["--prompts", "missing.jsonl"], "--prompts: cannot read missing.jsonl"),
])
def test_flag_errors_are_one_line(args: list[str], want: str, tmp_path: Path) -> None:
    only = '{"prompt": "a b c"}\n{"messages": [{"role": "user", "content": "d"}]}\n'
    (tmp_path / "only.jsonl").write_text(only)
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"error: {want}") and res.stderr.count("\n") == 1, res.stderr


def test_a_bad_file_is_refused_before_the_server_is_asked(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "fine"}\n' * 6 + '["not", "an", "object"]\n')
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", "--prompts", str(f))
    assert res.returncode == 2
    assert res.stderr.strip() == ('error: --prompts: bad.jsonl line 7: expected an object with "prompt" '
                                  '(a string) or "messages" (a list), got a list'), res.stderr
