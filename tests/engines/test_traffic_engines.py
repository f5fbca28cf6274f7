"""Prefix reuse and conversations against the real engines (issue 33, item 7).

`bench run --prefix-reuse 90 --turns 1,8` on llama-server (token-granular
cache, reuse told per request twice: usage and its own timings) and vLLM's
CPU build (block 128, prefix caching on, cached tokens in usage with
--enable-prompt-tokens-details, prefix-cache counters): the 90% cell reads
90 ± 2 from the requests, the engine agrees, and a conversation's cached
tokens grow turn by turn, each turn reusing the history the turn before sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rundir.contract import (
    CONVERSATION,
    PREFIX,
    PURPOSE_REUSE,
    PURPOSE_TURN,
    PURPOSE_TURN_FILL,
    VALID,
)
from rundir.io import read_run
from rundir.reuse import requests_ratio
from tests.conftest import run_cli

TURNS = 8


def traffic_run(base_url: str, out: Path) -> tuple[list[dict], list[dict]]:
    """One 8K prefix cell at 90% and an 8-turn conversation at 8K (one stream
    each), with the shortest matrix beside them; (cells, requests) as rows."""
    res = run_cli("bench", "run", "--base-url", base_url, "--out", str(out), "--contexts", "8k",
                  "--concurrency", "1", "--duration", "1", "--warmup-stable", "0.5",
                  "--max-output", "32", "--server-wait", "5", "--prefix-reuse", "90",
                  "--turns", f"1,{TURNS}", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    run = read_run(out)
    return run.cells.to_pylist(), run.requests.to_pylist()


def check_traffic(cells: list[dict], requests: list[dict], block: int, source: str) -> None:
    prefix = next(c for c in cells if c["phase"] == PREFIX)
    assert prefix["prefix_reuse_target"] == 90 and prefix["reuse_block"] == block
    assert prefix["status"] == VALID, prefix["reason"]
    sampled = [r for r in requests if r["phase"] == PREFIX and r["purpose"] == PURPOSE_REUSE]
    assert len(sampled) >= 8 and all(r["error"] is None for r in sampled)
    achieved = requests_ratio([r["prompt_tokens"] for r in sampled],
                              [r["cached_tokens"] for r in sampled])
    assert achieved == pytest.approx(90, abs=2), achieved
    assert prefix["server_source"] == source
    server = 100 * prefix["server_cached_tokens"] / prefix["server_prompt_tokens"]
    assert server == pytest.approx(achieved, abs=2), (server, achieved)

    turns = {c["turn"]: c for c in cells if c["phase"] == CONVERSATION}
    assert sorted(turns) == [1, TURNS]
    assert all(c["status"] == VALID for c in turns.values()), [c["reason"] for c in turns.values()]
    talk = sorted((r for r in requests if r["phase"] == CONVERSATION
                   and r["purpose"] in (PURPOSE_TURN, PURPOSE_TURN_FILL)),
                  key=lambda r: r["conversation_turn"])
    assert [r["conversation_turn"] for r in talk] == list(range(1, TURNS + 1))
    cached = [r["cached_tokens"] for r in talk]
    assert all(b > a for a, b in zip(cached[1:], cached[2:], strict=False)), cached
    for before, now in zip(talk, talk[1:], strict=False):
        assert now["cached_tokens"] >= before["prompt_tokens"] - block, (before, now)


@pytest.mark.engine_llama
def test_llama_server_delivers_the_reuse_asked(llama_server, tmp_path: Path) -> None:
    cells, requests = traffic_run(llama_server.base_url, tmp_path / "run")
    check_traffic(cells, requests, block=1, source="timings")
    # llama.cpp's own count is per request: every measured request carries it
    sampled = [r for r in requests if r["purpose"] == PURPOSE_REUSE]
    assert all(r["engine_cached_tokens"] == r["cached_tokens"] for r in sampled)


@pytest.mark.engine_vllm
def test_vllm_delivers_the_reuse_asked(vllm_server, tmp_path: Path) -> None:
    cells, requests = traffic_run(vllm_server.base_url, tmp_path / "run")
    check_traffic(cells, requests, block=128, source="counters")
    assert all(r["cached_tokens"] % 128 == 0 for r in requests if r["cached_tokens"])


@pytest.mark.engine_llama
def test_llama_server_rate_cells_publish_the_load_it_received(llama_server, tmp_path: Path) -> None:
    """`bench run --rate 2,8` on llama-server: every offered request that was sent
    ran to its fixed output, the page states the load the server received, and
    each cell's status follows the load check the builder makes from the raw rows."""
    from rundir.contract import LOAD_NOT_DELIVERED, PURPOSE_ARRIVAL, RATE
    from site_builder.rate import rate_cells

    out = tmp_path / "data" / "run"
    res = run_cli("bench", "run", "--base-url", llama_server.base_url, "--out", str(out),
                  "--contexts", "1k", "--concurrency", "1", "--no-prefill", "--duration", "3",
                  "--warmup-stable", "0.5", "--max-output", "32", "--server-wait", "5",
                  "--rate", "2,8", "--rate-output", "16", "--arrival-seed", "3", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    run = read_run(out)
    rows = [r for r in run.requests.to_pylist() if r["phase"] == RATE]
    assert rows and all(r["purpose"] == PURPOSE_ARRIVAL and r["error"] is None for r in rows)
    assert all(r["finish_reason"] == "length" and r["chunk_tokens"][-1] == 16 for r in rows)
    cells = {c.rate_target: c for c in rate_cells(run.cells, run.requests)}
    assert sorted(cells) == [2.0, 8.0]
    for cell in cells.values():
        assert cell.sent == len([r for r in rows if r["rate_target"] == cell.rate_target])
        assert cell.status == (LOAD_NOT_DELIVERED if cell.load_problems else VALID), cell.reason
    site = tmp_path / "site"
    built = run_cli("build-site", "--data", str(tmp_path / "data"), "--out", str(site))
    assert built.returncode == 0, built.stderr[-2000:]
    page = next(site.rglob("runs/*/index.html")).read_text(encoding="utf-8")
    assert "Request rate" in page and "send lag" in page.lower()


@pytest.mark.engine_llama
def test_llama_server_rate_cell_at_90_percent_reuse(llama_server, tmp_path: Path) -> None:
    """`bench run --rate 2 --rate-reuse 90` on llama-server: the requests arrive on
    their schedule sharing primed group prefixes, and the reuse the engine told per
    request (usage and its own timings) is 90 ± 2, so the cell is Valid (or Load not
    delivered when this host made the client late, with the figures)."""
    from rundir.contract import LOAD_NOT_DELIVERED, PURPOSE_ARRIVAL, PURPOSE_PRIME, RATE
    from site_builder.rate import rate_cells

    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", llama_server.base_url, "--out", str(out),
                  "--contexts", "2k", "--concurrency", "1", "--no-prefill", "--duration", "4",
                  "--warmup-stable", "0.5", "--max-output", "32", "--server-wait", "5",
                  "--rate", "2", "--rate-reuse", "90", "--rate-output", "16",
                  "--arrivals", "constant", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    run = read_run(out)
    rows = [r for r in run.requests.to_pylist() if r["phase"] == RATE]
    arrivals = [r for r in rows if r["purpose"] == PURPOSE_ARRIVAL]
    assert len(arrivals) == 8 and all(r["error"] is None for r in rows)
    assert {r["prefix_group"] for r in rows if r["purpose"] == PURPOSE_PRIME} == \
        {r["prefix_group"] for r in arrivals}
    (cell,) = rate_cells(run.cells, run.requests)
    assert cell.reuse_target == 90
    assert cell.reuse_achieved == pytest.approx(90, abs=2), cell.reason
    assert cell.reuse_server == pytest.approx(cell.reuse_achieved, abs=2)
    assert all(r["engine_cached_tokens"] == r["cached_tokens"] for r in arrivals)
    assert cell.status == (LOAD_NOT_DELIVERED if cell.load_problems else VALID), cell.reason
