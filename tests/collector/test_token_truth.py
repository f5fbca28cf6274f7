"""A token count or a finish that cannot be true is never published Valid
(issue 18, items 1 and 3), by the collector nor by the builder.

Without per-chunk usage the collector counts one token per text chunk; after
the window the server's /tokenize (or, without one, a short request's final
usage) confirms that or refutes it, and a count nothing can confirm is an
Error. A 'length' finish before max_tokens, or streams that never carry a
second token, leave no decode figure; a 'stop' while ignore_eos was asked is
named. The builder reaches the same verdict from the stored run directory:
each test stores the cell as Valid again (as an older collector, or a hand,
would) and checks what `site_builder` publishes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from rundir.contract import (
    CELLS_FILE,
    COUNT_CHUNKS,
    COUNT_CHUNKS_TOKENIZED,
    COUNT_CHUNKS_UNVERIFIED,
    COUNT_USAGE_CONTINUOUS,
)
from rundir.decode_checks import length_problem, stop_note
from rundir.io import read_run, write_table
from site_builder.aggregate import CellResult, measured_cells
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "2", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "2",
        "--contexts", "128", "--concurrency", "2"]
# Long enough that no measured stream completes inside the window: nothing but
# the after-window check can confirm a chunk count.
LONG = ["--max-output", "4000"]


def bench(srv, out: Path, *extra: str):
    return run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST, *extra)


def decode_cell(out: Path) -> dict:
    (cell,) = [c for c in read_run(out).cells.to_pylist() if c["phase"] == "decode"]
    return cell


def published_as_valid(out: Path) -> CellResult:
    """What the builder publishes for the run's decode cell once cells.parquet
    says Valid with no reason (the counting value as the collector wrote it)."""
    cells = read_run(out).cells
    cells = cells.set_column(cells.schema.get_field_index("status"), "status",
                             pa.array(["valid"] * len(cells)))
    cells = cells.set_column(cells.schema.get_field_index("reason"), "reason",
                             pa.nulls(len(cells), pa.string()))
    write_table(out, CELLS_FILE, cells)
    published, _ = measured_cells(read_run(out))
    (cell,) = [c for c in published if c.phase == "decode"]
    return cell


def test_three_tokens_per_chunk_without_usage_are_found_by_tokenize(refserver, tmp_path) -> None:
    """(a) The audit's server: 3 tokens per chunk, no usage at all. Published
    Valid at a third of its rate before; /tokenize of the streamed text now
    shows 3 tokens per chunk and the cell is an Error saying so."""
    srv = refserver(tokens_per_s=200, tokens_per_chunk=3, usage_mode="none")
    res = bench(srv, tmp_path / "r", *LONG)
    assert res.returncode == 3, res.stderr  # finished, with an Error cell
    cell = decode_cell(tmp_path / "r")
    assert cell["status"] == "error", cell
    assert "/tokenize counts" in cell["reason"] and "3.00 per chunk" in cell["reason"], cell
    assert cell["token_counting"] == COUNT_CHUNKS_UNVERIFIED
    pub = published_as_valid(tmp_path / "r")
    assert pub.status == "error" and "token count not verified" in pub.reason
    assert pub.total_tok_s is None


def test_one_token_per_chunk_without_usage_is_confirmed_by_tokenize(refserver, tmp_path) -> None:
    """(b) The same server sending one token per chunk: Valid, and the cell
    records that /tokenize confirmed the count."""
    srv = refserver(tokens_per_s=200, usage_mode="none")
    res = bench(srv, tmp_path / "r", *LONG)
    assert res.returncode == 0, res.stderr
    cell = decode_cell(tmp_path / "r")
    assert cell["status"] == "valid" and cell["token_counting"] == COUNT_CHUNKS_TOKENIZED, cell
    pub = published_as_valid(tmp_path / "r")
    assert pub.status == "valid" and pub.total_tok_s is not None


def test_a_count_nothing_can_verify_is_not_published(refserver, tmp_path) -> None:
    """(c) A server with no usage and no /tokenize: one token per chunk is a
    guess. The cell is an Error saying why, and the built site ranks nothing
    from it."""
    srv = refserver(engine="generic", tokens_per_s=200, usage_mode="none")
    res = bench(srv, tmp_path / "data" / "r", *LONG)
    assert res.returncode == 3, res.stderr
    cell = decode_cell(tmp_path / "data" / "r")
    assert cell["status"] == "error" and "cannot be verified" in cell["reason"], cell
    assert cell["token_counting"] == COUNT_CHUNKS_UNVERIFIED
    site = tmp_path / "site"
    res = run_cli("build-site", "--data", str(tmp_path / "data"), "--out", str(site))
    assert res.returncode == 0, res.stderr
    (cells_json,) = site.glob("runs/*/cells.json")
    (built,) = [c for c in json.loads(cells_json.read_text())["cells"] if c["phase"] == "decode"]
    assert built["status"] == "error" and "cannot be verified" in built["reason"], built
    assert built["total_tok_s"] is None and built["per_request_tok_s"] is None
    pub = published_as_valid(tmp_path / "data" / "r")
    assert pub.status == "error" and "token count not verified" in pub.reason


def test_final_usage_confirms_a_chunk_count_without_tokenize(refserver, tmp_path) -> None:
    """A server with final usage only and no /tokenize, every stream cut by
    the window (none brings its usage): a short request after the window
    confirms one token per chunk, or finds three."""
    srv = refserver(engine="generic", tokens_per_s=200, usage_mode="final")
    assert bench(srv, tmp_path / "one", *LONG).returncode == 0
    assert decode_cell(tmp_path / "one")["token_counting"] == "chunks_usage"
    srv = refserver(engine="generic", tokens_per_s=200, usage_mode="final", tokens_per_chunk=3)
    assert bench(srv, tmp_path / "three", *LONG).returncode == 3
    cell = decode_cell(tmp_path / "three")
    assert cell["status"] == "error", cell
    assert "several tokens per chunk" in cell["reason"] and "check request" in cell["reason"]


def test_length_after_one_token_has_no_decode_figure(refserver, tmp_path) -> None:
    """(d) Every request ends 'length' after 1 token of max_tokens 1000:
    before, Valid at 46.4 tok/s 'sustained decode'. Now an Error naming the
    impossible finish with its counts, and no decode figure."""
    srv = refserver(tokens_per_s=200, finish_length_after_tokens=1)
    res = bench(srv, tmp_path / "r", "--max-output", "1000")
    assert res.returncode == 3, res.stderr
    cell = decode_cell(tmp_path / "r")
    assert cell["status"] == "error", cell
    assert cell["token_counting"] == COUNT_USAGE_CONTINUOUS
    reason = cell["reason"]
    assert "completed requests ended 'length' after 1 of max_tokens 1000 tokens" in reason, reason
    assert "no stream received a second token" in reason, reason
    pub = published_as_valid(tmp_path / "r")
    assert pub.status == "error" and "after 1 of max_tokens 1000 tokens" in pub.reason
    assert "no stream received a second token" in pub.reason
    assert pub.total_tok_s is None and pub.per_request_tok_s is None and pub.tbt_ms is None


def test_length_before_max_tokens_is_refused_by_the_builder_alone(refserver, tmp_path) -> None:
    """Streams end 'length' after 50 of 1,000 tokens: each still has a
    decode rate, so only the finish check refutes the cell, on both sides."""
    srv = refserver(tokens_per_s=200, finish_length_after_tokens=50)
    assert bench(srv, tmp_path / "r", "--max-output", "1000").returncode == 3
    assert "ended 'length' after 50 of max_tokens 1000" in decode_cell(tmp_path / "r")["reason"]
    pub = published_as_valid(tmp_path / "r")
    assert pub.status == "error" and "after 50 of max_tokens 1000 tokens" in pub.reason
    assert "second token" not in pub.reason


def test_stop_while_ignore_eos_was_asked_is_named(refserver, tmp_path) -> None:
    """(e) ignore_eos was asked (a vLLM server), yet every request ends
    'stop' after 50 tokens: the tokens are real, the reason says what happened."""
    srv = refserver(tokens_per_s=200, finish_stop_after_tokens=50)
    res = bench(srv, tmp_path / "r", "--max-output", "1000")
    assert res.returncode == 0, res.stderr
    cell = decode_cell(tmp_path / "r")
    assert cell["status"] == "valid", cell
    assert "completed requests ended 'stop' after 50 tokens although ignore_eos was asked" \
        in (cell["reason"] or ""), cell


def test_finish_checks_count_only_completed_requests() -> None:
    finish = ["length", "length", None, "stop", "length"]
    tokens = np.array([1000, 7, 3, 40, 9])
    completed = np.array([True, True, False, True, True])
    assert length_problem(finish, tokens, completed, 1000) == (
        "2 of 4 completed requests ended 'length' after 7 to 9 of max_tokens 1000 tokens: "
        "short of max_tokens (a full context per slot, or a wrong count or finish)")
    assert length_problem(finish, tokens, completed, None) is None  # max_tokens unknown
    assert length_problem(["length"], np.array([996]), np.array([True]), 1000) is None
    assert stop_note(finish, tokens, completed) == (
        "1 of 4 completed requests ended 'stop' after 40 tokens although ignore_eos was asked")


def test_an_older_chunks_value_still_publishes(tmp_path) -> None:
    """`chunks`, written before the count was confirmed, is read as written:
    the builder refuses only what the stored data refutes."""
    from tests.support.synthetic_runs import make_measured_run

    run = tmp_path / "old"
    make_measured_run(run, run_id="old", contexts=[1024], concurrency=[1], duration_s=0.5)
    cells = read_run(run).cells
    column = cells.schema.get_field_index("token_counting")
    write_table(run, CELLS_FILE, cells.set_column(column, "token_counting",
                                                  pa.array([COUNT_CHUNKS] * len(cells))))
    published, _ = measured_cells(read_run(run))
    (cell,) = [c for c in published if c.phase == "decode"]
    assert cell.status == "valid" and cell.token_counting == COUNT_CHUNKS
