"""A prompt source in traffic cells (issue 35: "a prompt source must work with
conversations, reuse and rate cells").

Prefix cells and rate cells at a reuse level take each group's shared prefix and the
requests' suffixes from the source, still cut on the cache block, so the reuse the
reference server logs stays on target; a conversation from a chat file sends the
file's user turns and replays its assistant turns, in order. Runs go through
`bench run` against the reference server with its block prefix cache
(tests/refserver/prefix_cache.py), which logs each chat message's first words.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.workload.prompt_files import parse_items
from bench.workload.sources import NATURAL, PromptSource
from rundir import contract
from rundir.io import read_run
from site_builder.rate import rate_cells
from site_builder.traffic import traffic_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

BLOCK = 16
CACHE = dict(tokens_per_s=400, ttft_ms=2, prefill_tok_per_s=200_000, prefix_cache_block=BLOCK)
FAST = ["--duration", "1", "--warmup-stable", "0.2", "--server-wait", "3", "--concurrency", "1",
        "--max-output", "16"]


def _chat_file(path: Path, items: int = 4, turns: int = 3, user_words: int = 300,
               reply_words: int = 120) -> Path:
    """A ShareGPT file whose every turn opens with a marker: ask{item}x{turn}, ans{item}x{turn}."""
    data = [{"conversations": [t for j in range(turns) for t in (
        {"from": "human", "value": f"ask{i}x{j} " + "quartz river lantern " * (user_words // 3)},
        {"from": "gpt", "value": f"ans{i}x{j} " + "amber field " * (reply_words // 2)})]}
        for i in range(items)]
    path.write_text(json.dumps(data))
    return path


def _truth_ratio(srv, rows: list[dict]) -> float:
    truth = srv.truth_by_id()
    logged = [truth[r["request_id"]] for r in rows]
    return 100 * sum(t["cached_tokens"] for t in logged) / sum(t["prompt_tokens"] for t in logged)


# -- the turns a source gives (pure) -----------------------------------------------------


def test_a_chat_files_turns_go_in_order_and_continue_with_the_next_item() -> None:
    data = json.dumps([
        {"conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "a0 q"},
                           {"from": "gpt", "value": "r0 x"}, {"from": "human", "value": "a1 q"},
                           {"from": "gpt", "value": "r1 x"}]},
        {"conversations": [{"from": "human", "value": "b0 q q q q"}]},  # no reply: padded with the next
        {"conversations": [{"from": "human", "value": "c0"}, {"from": "gpt", "value": "s0 y y"}]},
    ]).encode()
    _, items = parse_items(data, "c.json")
    assert [d for _, d in items][0] == (("user", "a0 q"), ("assistant", "r0 x"), ("user", "a1 q"),
                                        ("assistant", "r1 x"))  # the system turn is prompt text only
    src = PromptSource("file:c.json", 5, [t for t, _ in items], [d for _, d in items])
    start = src.index_for("t1024-c1-v0")
    got = src.turns("t1024-c1-v0", 5, 3, 2)
    order = {0: ["a0", "a1", "b0", "c0"], 1: ["b0", "c0", "a0", "a1"], 2: ["c0", "a0", "a1", "b0"]}[start]
    assert [u.split()[0] for u in got.users] == order + [order[0]]  # wraps round past the last item
    assert all(len(u.split()) == 3 for u in got.users)  # cut, or padded with the next user turns
    replies = {"a0": "r0", "a1": "r1", "b0": "s0", "c0": "s0"}  # b0 has none: the next reply's text
    assert [r.split()[0] for r in got.replies] == [replies[w] for w in order + [order[0]]]
    assert got.indexes == tuple({"a": 0, "b": 1, "c": 2}[w[0]] for w in order + [order[0]])
    assert got == src.turns("t1024-c1-v0", 5, 3, 2)  # the seed and the tag decide it
    assert not PromptSource("file:p", 1, ["x"], [(("user", "x"),)]).has_replies
    natural = PromptSource(NATURAL, 3).turns("t", 3, 40, 10)
    assert len(set(natural.users)) == 3 and all(len(r.split()) == 10 for r in natural.replies)


# -- through `bench run` against the reference server ------------------------------------


def test_a_sharegpt_conversation_sends_the_files_turns_and_replays_its_replies(refserver, tmp_path) -> None:
    srv = refserver(**CACHE)
    f = _chat_file(tmp_path / "chats.json")
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(run), *FAST, "--no-prefill",
                  "--contexts", "1k", "--turns", "1,4", "--traffic-concurrency", "2", "--prompts", str(f),
                  "--prompt-seed", "9")
    assert res.returncode == 0, res.stderr[-3000:]
    got = read_run(run)
    cells = {c.turn: c for c in traffic_cells(got.cells, got.requests) if c.phase == contract.CONVERSATION}
    assert set(cells) == {1, 4} and all(c.status == contract.VALID for c in cells.values()), cells
    stored = [c for c in got.cells.to_pylist() if c["phase"] == contract.CONVERSATION]
    assert all((c["prompt_source"], c["prompt_seed"]) == ("file:chats.json", 9) for c in stored)
    rows = [r for r in got.requests.to_pylist() if r["phase"] == contract.CONVERSATION]
    truth = srv.truth_by_id()
    src = PromptSource("file:chats.json", 9, ["-"] * 4)  # only its index_for: the file has 4 items
    for conv in (0, 1):
        mine = sorted((r for r in rows if r["conversation_id"] == conv), key=lambda r: r["conversation_turn"])
        assert [r["conversation_turn"] for r in mine] == [1, 2, 3, 4]
        first = src.index_for(f"t1024-c2-v{conv}")
        # three turns from the first item, the fourth from the next one
        want = [(first, 0), (first, 1), (first, 2), ((first + 1) % 4, 0)]
        assert [r["prompt_index"] for r in mine] == [i for i, _ in want]
        heads = truth[mine[-1]["request_id"]]["message_heads"]  # turn 4: the whole history
        assert [role for role, _ in heads] == ["system"] + ["user", "assistant"] * 3 + ["user"]
        users, replies = heads[1::2], heads[2::2]
        assert [f"ask{i}x{j}" in h for (_, h), (i, j) in zip(users, want, strict=True)] == [True] * 4
        assert [h.split()[0] for _, h in replies] == [f"ans{i}x{j}" for i, j in want[:3]]
        # every turn reused the one before it, less at most a block
        for before, after in zip(mine, mine[1:], strict=False):
            assert after["cached_tokens"] >= before["prompt_tokens"] - BLOCK
        sizes = [r["prompt_tokens"] for r in mine]
        assert sizes == sorted(sizes) and abs(sizes[-1] - 1024) <= 64, sizes  # grows to about L


def test_a_prefix_cell_from_natural_text_keeps_its_reuse_exact(refserver, tmp_path) -> None:
    srv = refserver(**CACHE)
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(run), *FAST, "--contexts", "2k",
                  "--prefix-reuse", "90", "--prompt-source", NATURAL, "--prompt-seed", "4")
    assert res.returncode == 0, res.stderr[-3000:]
    got = read_run(run)
    (cell,) = [c for c in traffic_cells(got.cells, got.requests) if c.phase == contract.PREFIX]
    rows = [r for r in got.requests.to_pylist() if r["phase"] == contract.PREFIX]
    measured = [r for r in rows if r["purpose"] == contract.PURPOSE_REUSE]
    primes = [r for r in rows if r["purpose"] == contract.PURPOSE_PRIME]
    assert cell.achieved == pytest.approx(_truth_ratio(srv, measured), abs=1e-9)
    assert cell.achieved == pytest.approx(90, abs=2) and cell.server == pytest.approx(cell.achieved)
    assert cell.status == contract.VALID, cell.reason
    stored = next(c for c in got.cells.to_pylist() if c["phase"] == contract.PREFIX)
    assert (stored["prompt_source"], stored["prompt_seed"]) == (NATURAL, 4)
    truth = srv.truth_by_id()
    # the groups' prefixes and the requests' suffixes are the source's prose, not filler
    src = PromptSource(NATURAL, 4)
    for r in primes:
        (_, system), _ = truth[r["request_id"]]["message_heads"]
        assert "Continue this story." in system
        assert r["prompt_index"] == src.index_for(f"x2048-c1-r90-g{r['prefix_group']}")
    suffixes = {src.index_for("x2048-c1-r90-u")} | {src.index_for(f"x2048-c1-r90-u{k}") for k in range(1, 8)}
    used = {r["prompt_index"] for r in measured}
    assert used <= suffixes and len(used) > 4
    assert all("Continue this story." in truth[r["request_id"]]["message_heads"][1][1] for r in measured)


def test_a_reuse_rate_cell_from_natural_text_keeps_its_reuse_exact(refserver, tmp_path) -> None:
    srv = refserver(**CACHE)
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(run), *FAST, "--contexts", "2k",
                  "--no-prefill", "--duration", "3", "--rate", "2", "--arrivals", "constant",
                  "--rate-reuse", "90", "--prompt-source", NATURAL)
    assert res.returncode == 0, res.stderr[-3000:]
    got = read_run(run)
    (cell,) = rate_cells(got.cells, got.requests)
    rows = [r for r in got.requests.to_pylist() if r["phase"] == contract.RATE]
    arrivals = [r for r in rows if r["purpose"] == contract.PURPOSE_ARRIVAL]
    assert len(arrivals) == 6
    assert cell.reuse_achieved == pytest.approx(_truth_ratio(srv, arrivals), abs=1e-9)
    assert cell.reuse_achieved == pytest.approx(90, abs=2)
    assert cell.reuse_server == pytest.approx(cell.reuse_achieved, abs=1e-9)
    assert cell.status == contract.VALID, cell.reason
    groups = {r["prefix_group"] for r in rows if r["purpose"] == contract.PURPOSE_PRIME}
    assert len(groups) == 3 and all(r["prefix_group"] == r["stream_index"] % 3 for r in arrivals)
    assert len({r["prompt_index"] for r in arrivals}) == 6  # each request its own text past its tag
    stored = next(c for c in got.cells.to_pylist() if c["phase"] == contract.RATE)
    assert stored["prompt_source"] == NATURAL and stored["prompt_seed"] == got.info.parameters.prompt_seed
    truth = srv.truth_by_id()
    assert all("Continue this story." in truth[r["request_id"]]["message_heads"][0][1] for r in arrivals)
