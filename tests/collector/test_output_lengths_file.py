"""`--output-lengths file` (issue 35, item 2): each decode and rate request asks the length
of the reply that follows its prompt's item in the --prompts file.

The reply parsing and the item pool are pure; a whole run goes through the real `bench run`
against the reference server (one token per word; its arrivals log holds each request's
max_tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench.workload.prompt_files import PromptFileError, read_prompt_file, replied_items
from bench.workload.sources import PromptSource
from rundir.contract import DECODE, ERROR, PURPOSE_ARRIVAL, PURPOSE_MEASURE, RATE
from rundir.lengths import parse_mix
from tests.collector.test_prompt_sources import _built
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--warmup-stable", "0.2", "--server-wait", "3", "--contexts", "1k", "--concurrency", "1,2",
        "--duration", "1", "--prefill-repeats", "1", "--no-prefill", "--max-output", "64"]


def _turns(*pairs: tuple[str, str]) -> list[dict]:
    return [{"from": who, "value": text} for who, text in pairs]


def _words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{j}" for j in range(n))


# reply lengths (words = the reference server's tokens) per item; None: no reply
REPLIES = [7, None, 30, 500, 12]


def _sharegpt(path: Path) -> Path:
    items = []
    for i, n in enumerate(REPLIES):
        turns = [("system", "be brief"), ("human", _words(f"q{i}x", 20 + 5 * i))]
        if n is not None:
            # the first reply after the first question is the item's; later turns are not
            turns += [("gpt", _words(f"r{i}x", n)), ("human", "more"), ("gpt", _words("later", 3))]
        items.append({"conversations": _turns(*turns)})
    path.write_text(json.dumps(items))
    return path


def test_replies_are_read_per_format_and_checked(tmp_path: Path) -> None:
    pf = read_prompt_file(_sharegpt(tmp_path / "c.json"))
    assert [None if r is None else len(r.split()) for r in pf.replies] == REPLIES
    assert replied_items(pf) == (0, 2, 3, 4)
    lines = tmp_path / "p.jsonl"
    lines.write_text(json.dumps({"prompt": "a b", "completion": "x y z"}) + "\n"
                     + json.dumps({"prompt": "c", "output_tokens": 9}) + "\n"
                     + json.dumps({"prompt": "d"}) + "\n"
                     + json.dumps({"messages": [{"role": "user", "content": "u"},
                                                {"role": "assistant", "content": "v w"}]}) + "\n")
    assert read_prompt_file(lines).replies == ("x y z", 9, None, "v w")
    for bad, want in (
        ({"prompt": "a", "output_tokens": 0}, 'line 1: field "output_tokens": expected a whole number ≥ 1, '
                                              "got 0"),
        ({"prompt": "a", "output_tokens": "5"}, 'field "output_tokens": expected a whole number ≥ 1, '
                                                "got a string"),
        ({"prompt": "a", "completion": " "}, 'field "completion": expected a non-empty string, got an empty'),
        ({"prompt": "a", "completion": "x", "output_tokens": 2}, 'fields "completion" and "output_tokens": '
                                                                 "expected one of them"),
    ):
        lines.write_text(json.dumps(bad) + "\n")
        with pytest.raises(PromptFileError) as exc:
            read_prompt_file(lines)
        assert want in str(exc.value) and "\n" not in str(exc.value)
    lines.write_text(json.dumps({"prompt": "a"}) + "\n")
    with pytest.raises(PromptFileError, match="p.jsonl: no item has a reply to take its output length"):
        replied_items(read_prompt_file(lines))


def test_a_tag_starts_only_at_an_item_with_a_reply() -> None:
    prompts = [f"p{i}" for i in range(6)]
    replies = ["r", None, None, "r", None, 4]
    src = PromptSource("file:x", 3, prompts, None, replies)
    starts = {src.index_for(f"t{k}") for k in range(200)}
    assert starts == {0, 3, 5}  # file indexes kept (prompt_index is the item in the file)
    assert src.reply(3) == "r" and src.reply(5) == 4 and src.reply(1) is None
    assert len({PromptSource("file:x", 3, prompts).index_for(f"t{k}") for k in range(200)}) == 6
    mix = parse_mix("file")
    assert mix.kind == "file" and not mix.drawn and not mix.fixed and str(mix) == "file"


def test_each_request_asks_its_items_reply_length(refserver, tmp_path: Path) -> None:
    # a chat template of 5 tokens: a reply is counted bare (as the model generates it), not
    # as a templated prompt, so an item's max_tokens is its reply's words exactly
    srv = refserver(tokens_per_s=1000, chat_template_tokens=5)
    pfile = _sharegpt(tmp_path / "conv.json")
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--rate", "4", "--workers", "2",
                  "--prompts", str(pfile), "--output-lengths", "file", "--input-lengths", "file",
                  "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert "--prompts conv.json: 4 of 5 items have a reply" in res.stderr
    assert "the 1 without one skipped" in res.stderr
    assert "Output lengths: each decode and rate request asks its --prompts item's reply length, " \
           "at most 64 tokens" in res.stderr
    info = yaml.safe_load((run / "run.yaml").read_text())
    p = info["parameters"]
    assert p["output_lengths"] == "file" and "length_seed" not in p and p["rate_output_tokens"] == 64
    cells = pq.read_table(run / "cells.parquet").to_pylist()
    # requests ending 'length' at their own max_tokens are no fault (a busy host may still
    # find a cell client-bound: that verdict is not this test's)
    assert all(c["status"] != ERROR and "completed requests ended" not in (c["reason"] or "")
               for c in cells), cells
    requests = pq.read_table(run / "requests.parquet").to_pylist()
    asked = {a["request_id"]: a["max_tokens"] for a in srv.arrivals()}
    sent = [r for r in requests if r["purpose"] in (PURPOSE_MEASURE, PURPOSE_ARRIVAL)]
    assert {r["phase"] for r in sent} == {DECODE, RATE}
    # the 2-stream decode cell ran in two processes: the prompt's reply length crossed the wire
    assert {c["processes"] for c in cells if c["phase"] == DECODE and c["concurrency"] == 2} == {2}
    want = {i: min(64, n) for i, n in enumerate(REPLIES) if n is not None}
    for r in sent:
        assert r["prompt_index"] in want, r["prompt_index"]  # never the item without a reply
        assert r["output_target"] == want[r["prompt_index"]] == asked[r["request_id"]], r
    assert len({r["prompt_index"] for r in sent if r["phase"] == RATE}) > 1  # each rate request its own
    done = [r for r in sent if r["finish_reason"] == "length"]
    assert done and all(r["chunk_tokens"][-1] == r["output_target"] for r in done)
    cells_json, page = _built(run, tmp_path / "site")
    # the builder's re-check holds each request to its own output_target (EOS ignored)
    assert [(c["status"], c["reason"]) for c in cells_json["cells"]] == [(c["status"], c["reason"])
                                                                          for c in cells]
    assert "each request&#39;s max_tokens its prompt item&#39;s reply length" in page
    # the lengths the requests asked, read back from requests.parquet alone
    decode_asked = sorted(r["output_target"] for r in sent if r["phase"] == DECODE)
    low, high = decode_asked[0], decode_asked[-1]
    assert f"<dt>Decode request lengths</dt><dd>max_tokens asked {low}" in page
    assert f"{high} (min / median / max, {len(decode_asked)} requests)" in page or low == high
    assert "<dt>Rate request lengths</dt><dd>max_tokens asked" in page and "prompts " in page


def test_rate_requests_split_over_workers_and_a_resumed_run_ask_the_reply_lengths(
        refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=1000)
    pfile = tmp_path / "p.jsonl"
    pfile.write_text("".join(json.dumps(item) + "\n" for item in (
        {"prompt": _words("a", 40), "completion": _words("c", 9)},
        {"prompt": _words("b", 30)},  # no reply: no prompt starts here
        {"prompt": _words("d", 50), "output_tokens": 17},
        {"messages": [{"role": "user", "content": _words("e", 20)},
                      {"role": "assistant", "content": _words("f", 5)}]})))
    want = {0: 9, 2: 17, 3: 5}
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, *FAST, "--concurrency", "1", "--rate", "4",
                  "--workers", "2", "--prompts", str(pfile), "--output-lengths", "file", "--out", str(run))
    assert res.returncode == 0, res.stderr
    assert "--prompts p.jsonl: 3 of 4 items have a reply" in res.stderr
    cells = pq.read_table(run / "cells.parquet").to_pylist()
    assert {c["processes"] for c in cells if c["phase"] == RATE} == {2}  # the base prompt crossed the wire
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run), "--concurrency", "1,2",
                  "--prompts", str(pfile))
    assert res.returncode == 0, res.stderr
    requests = pq.read_table(run / "requests.parquet").to_pylist()
    asked = {a["request_id"]: a["max_tokens"] for a in srv.arrivals()}
    sent = [r for r in requests if r["purpose"] in (PURPOSE_MEASURE, PURPOSE_ARRIVAL)]
    assert {(r["phase"], r["concurrency"]) for r in sent} == {(DECODE, 1), (DECODE, 2), (RATE, 0)}
    assert all(r["output_target"] == want[r["prompt_index"]] == asked[r["request_id"]] for r in sent)


@pytest.mark.parametrize(("args", "want"), [
    (["--output-lengths", "file"], "--output-lengths file: only with --prompts FILE"),
    (["--output-lengths", "file", "--prompts", "{f}", "--length-seed", "3"],
     "--length-seed: only with --output-lengths uniform:… or normal:…"),
    (["--output-lengths", "file", "--prompts", "{f}", "--rate", "2", "--rate-output", "8"],
     "--rate-output with --output-lengths file: give one"),
    (["--output-lengths", "file", "--prompts", "{f}", "--rate", "2", "--rate-reuse", "50"],
     "--output-lengths file with --rate-reuse: give one"),
    (["--output-lengths", "file", "--prompts", "{none}"],
     "--prompts with --output-lengths file: none.jsonl: no item has a reply to take its output length "
     'from; expected an assistant message after a user message, or "completion"/"output_tokens"'),
])
def test_flag_errors_are_one_line(args: list[str], want: str, tmp_path: Path) -> None:
    good, none = tmp_path / "good.jsonl", tmp_path / "none.jsonl"
    good.write_text(json.dumps({"prompt": "a b c", "output_tokens": 4}) + "\n")
    none.write_text(json.dumps({"prompt": "a b c"}) + "\n")
    args = [a.format(f=good, none=none) for a in args]
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"error: {want}") and res.stderr.count("\n") == 1, res.stderr
