"""One server, several tools (site_builder/toolcompare.py): the one definition's figures
on hand-made requests with exact answers, each tool's own definition, and the why rules."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rundir import contract
from site_builder import toolcompare as tc
from site_builder import tooldefs

MS = 1_000_000


def _row(send: float, chunks: list[tuple[float, int]], end: float | None, **kw: object) -> dict:
    """A requests row: times in ms, chunk tokens cumulative."""
    row = {"send_ns": int(send * MS), "end_ns": None if end is None else int(end * MS),
           "chunk_ns": [int(t * MS) for t, _ in chunks], "chunk_tokens": [c for _, c in chunks],
           "error": None, "cancelled": False}
    row.update(kw)
    return row


# A role chunk (0 tokens) at 10, then 1 token at 20, 3 at 30, 4 at 50; end at 55.
A = _row(0, [(10, 0), (20, 1), (30, 3), (50, 4)], 55)
# One token per chunk: first at 105, then 110, 120; ended at 121.
B = _row(100, [(105, 1), (110, 2), (120, 3)], 121)


def test_request_stamps_skip_the_role_chunk_and_keep_gaps_with_their_tokens() -> None:
    (a,) = tc.requests_of([A], chunked=True)
    assert (a.send, a.first, a.last, a.end, a.tokens) == (0, 20 * MS, 50 * MS, 55 * MS, 4)
    assert a.gaps == ((10 * MS, 2), (20 * MS, 1))


def test_failed_cancelled_and_tokenless_requests_are_not_finished() -> None:
    rows = [A, {**B, "error": "HTTP 500"}, {**B, "cancelled": True}, _row(0, [(5, 0)], 6)]
    assert len(tc.requests_of(rows, chunked=True)) == 1


def test_end_falls_back_to_the_last_chunk() -> None:
    (a,) = tc.requests_of([{**A, "end_ns": None}], chunked=True)
    assert a.end == 50 * MS


def test_common_definition_samples_exact() -> None:
    reqs = tc.requests_of([A, B], chunked=True)
    assert tc.samples(reqs, "ttft_ms").tolist() == [20.0, 5.0]
    assert tc.samples(reqs, "e2e_ms").tolist() == [55.0, 21.0]
    assert tc.samples(reqs, "tpot_ms").tolist() == pytest.approx([10.0, 7.5])  # 30/3, 15/2
    assert tc.samples(reqs, "per_request_tok_s").tolist() == pytest.approx([100.0, 1000 / 7.5])
    # A's 2-token chunk after 10 ms counts two 5 ms gaps; then 20; B: 5, 10
    assert sorted(tc.samples(reqs, "itl_ms").tolist()) == [5.0, 5.0, 5.0, 10.0, 20.0]


def _own(reqs: list, tool: str, metric: str, counting: str | None = None) -> list | None:
    got = tc.tool_samples(reqs, tool, metric, counting)
    return None if got is None else got[0].tolist()


def test_request_tier_has_no_gaps_so_no_itl() -> None:
    reqs = tc.requests_of([_row(0, [(20, 1), (50, 4)], 55)], chunked=False)
    assert tc.samples(reqs, "itl_ms").size == 0
    assert tc.tool_samples(reqs, "vllm-bench-serve", "itl_ms") is None
    assert _own(reqs, "guidellm", "itl_ms") == [10.0]  # first to last: kept
    assert tc.samples(reqs, "tpot_ms").tolist() == [10.0]  # first and last are kept


def test_tools_own_definitions_exact() -> None:
    reqs = tc.requests_of([A, B], chunked=True)
    # per chunk: every chunk gap from the first token's chunk, whatever its tokens
    assert sorted(_own(reqs, "vllm-bench-serve", "itl_ms")) == [5, 10, 10, 20]
    assert sorted(_own(reqs, "aiperf", "itl_ms")) == [5, 10, 10, 20]
    assert sorted(_own(reqs, "sglang-bench-serving", "itl_ms")) == [5, 10, 10, 20]
    assert _own(reqs, "guidellm", "tpot_ms") == [12.5, 20 / 3]  # 50/4, 20/3
    assert _own(reqs, "aiperf", "tpot_ms") == pytest.approx([10.0, 7.5])  # to the last content chunk
    assert _own(reqs, "aiperf", "e2e_ms") == [50.0, 20.0]  # to the last content chunk, not the end
    assert _own(reqs, "guidellm", "e2e_ms") == [55.0, 21.0]  # to the response's end
    assert _own(reqs, "aiperf", "per_request_tok_s") == pytest.approx([100.0, 1000 / 7.5])
    assert _own(reqs, "guidellm", "ttft_ms") == [20.0, 5.0]
    assert _own(reqs, "guidellm", "itl_ms") == pytest.approx([10.0, 7.5])
    assert tc.tool_samples(reqs, "guidellm", "per_request_tok_s") is None  # not known: not claimed
    # SGLang's latency runs to [DONE], which its file does not keep
    assert tc.tool_samples(reqs, "sglang-bench-serving", "tpot_ms") is None
    assert tc.tool_samples(reqs, "sglang-bench-serving", "e2e_ms") is None
    # inference-perf: per-token stamps (A: 1 token, then a 2-token chunk after 10 ms, one after 20)
    assert _own(reqs, "inference-perf", "itl_ms") is None  # its own counts not in the rows
    assert sorted(_own(reqs, "inference-perf", "itl_ms", contract.COUNT_PEER_CHUNKS)) == [0, 5, 10, 10, 20]
    assert tc.tool_samples(reqs, "mlperf-endpoints", "tpot_ms") is None  # its tokenizer's count


def test_last_chunk_without_tokens_still_ends_a_per_request_rule() -> None:
    # the spread rule can leave the last chunk without a new token: the tool's latency still ends there
    (q,) = tc.requests_of([_row(0, [(10, 1), (20, 2), (30, 2)], 30)], chunked=True)
    assert q.last == 20 * MS and q.last_chunk == 30 * MS
    assert _own([q], "vllm-bench-serve", "tpot_ms") == [20.0]  # (30 − 10) / (2 − 1)
    assert tc.samples([q], "tpot_ms").tolist() == [10.0]  # ours: to the last token's chunk


def test_tool_rank_weights_and_guidellms_percentile() -> None:
    v, w = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 1.0, 1.0, 7.0])
    first = tooldefs.FIRST_REACHING
    assert tc.tool_rank((v, w), "mean", first) == pytest.approx(3.4)  # (1 + 2 + 3 + 28) / 10
    assert tc.tool_rank((v, w), "p50", first) == 4.0  # 0.1, 0.2, 0.3 < 0.5: the fourth
    assert tc.tool_rank((v, w), "p50") == 2.5  # linear, weights not used by numpy
    assert tc.tool_rank((v, np.ones(4)), "p50", first) == 2.0  # reaches 0.5 exactly at the second
    assert tc.tool_rank((v, np.ones(4)), "p90") == pytest.approx(3.7)
    assert tc.tool_rank(None, "p50") is None


def test_rows_without_a_shared_clock_have_no_span() -> None:
    rows = [_row(0, [(20, 1), (30, 2)], 30), _row(0, [(25, 1), (40, 3)], 40)]
    assert not tc.shared_clock(rows) and tc.shared_clock(rows[:1]) and tc.shared_clock([A, B])
    t = tc.totals_whole(tc.requests_of(rows, chunked=True), clock=False)
    assert (t.completed, t.output_tokens, t.span_s, t.total_tok_s) == (2, 5, None, None)
    key = {"phase": contract.DECODE, "context": 512, "concurrency": 2, "rate_target": None}
    cells = pa.table({"phase": [contract.DECODE], "context": [512], "concurrency": [2],
                      "window_start_ns": [0], "window_end_ns": [40 * MS],
                      "rate_target": pa.array([None], pa.float64())})
    (p,) = tc.load_points(cells, pa.Table.from_pylist([{**r, **key} for r in rows]), "gap", measured=False)
    assert not p.clock and not p.has_window and p.window_totals is None and p.whole_totals.span_s is None


def test_rank_uses_the_projects_percentile_and_minimum_counts() -> None:
    v = np.arange(1.0, 10.0)  # 9 samples
    assert tc.rank(v, "ttft_ms", "p50") == 5.0
    assert tc.rank(v, "ttft_ms", "p90") is None  # p90 needs 10
    assert tc.rank(v, "ttft_ms", "p90", minimum=False) == pytest.approx(8.2)
    assert tc.rank(v, "per_request_tok_s", "p90", minimum=False) == pytest.approx(1.8)  # slow side
    assert tc.rank(v, "ttft_ms", "mean") == 5.0
    assert tc.rank(np.array([]), "ttft_ms", "p50") is None


def test_totals_whole_and_window() -> None:
    reqs = tc.requests_of([A, B], chunked=True)
    t = tc.totals_whole(reqs)
    assert (t.completed, t.output_tokens, t.span_s) == (2, 7, 0.121)
    assert t.total_tok_s == pytest.approx(7 / 0.121)
    w = tc.totals_window([A, B], 25 * MS, 115 * MS)  # A's 30 (2) and 50 (1); B's 105, 110
    assert (w.output_tokens, w.completed, w.span_s) == (5, 1, 0.09)


def test_load_points_take_our_measure_rows_and_window() -> None:
    key = {"phase": contract.DECODE, "context": 512, "concurrency": 2, "rate_target": None}
    rows = [{**A, **key, "purpose": contract.PURPOSE_MEASURE},
            {**B, **key, "purpose": contract.PURPOSE_MEASURE},
            {**B, **key, "purpose": contract.PURPOSE_PREFIX_FILL}]
    cells = pa.table({"phase": [contract.DECODE], "context": [512], "concurrency": [2],
                      "window_start_ns": [90 * MS], "window_end_ns": [130 * MS],
                      "rate_target": pa.array([None], pa.float64())})
    (p,) = tc.load_points(cells, pa.Table.from_pylist(rows), None, measured=True)
    assert (p.phase, p.context, p.level, len(p.whole), len(p.window)) == (contract.DECODE, 512, 2.0, 2, 1)
    assert p.window[0].send == 100 * MS
    (q,) = tc.load_points(cells, pa.Table.from_pylist(rows), None, measured=False)
    assert len(q.whole) == 3  # an imported run's rows are all its tool's


def test_why_names_the_definition_when_its_rows_give_its_figure() -> None:
    line = tc.why("itl_ms", "vllm-bench-serve", common=5.0, own=15.0, published=15.01)
    assert line.startswith("Definition:") and "per chunk" in line and "-66.7%" in line
    # 0.7% off its figure is not its figure
    assert tc.why("itl_ms", "vllm-bench-serve", 5.0, 15.0, 15.1).startswith("Not explained")


def test_why_same_definition_and_unexplained_and_window() -> None:
    assert tc.why("ttft_ms", "aiperf", 20.0, 20.0, 20.01).startswith("Same definition")
    assert "its own tokenizer's count" in tc.why("tpot_ms", "aiperf", 20.0, 20.0, 22.0)
    line = tc.why("e2e_ms", "sglang-bench-serving", 20.0, None, 22.0)
    assert line.startswith("Its definition cannot be recomputed from its rows: send to [DONE]")
    line = tc.why("tpot_ms", "inference-perf", 20.0, None, 22.0, counting=contract.COUNT_PEER_SPREAD)
    assert line.startswith("Counting: its definition (per request")
    line = tc.why("ttft_ms", "aiperf", 20.0, 20.0, 30.0)
    assert line.startswith("Not explained") and "-33.3%" in line
    line = tc.why("total_tok_s", "aiperf", 100.0, 100.0, 100.0, window=120.0)
    assert "Window:" in line and "+20.0%" in line
    assert "Window" not in tc.why("total_tok_s", "aiperf", 100.0, 100.0, 100.0, window=101.0)
    assert tc.why("ttft_ms", "aiperf", 1.0, 1.0, None) == "The tool published no such figure."
    assert tc.why("itl_ms", "guidellm", None, None, 3.0).startswith("Its definition cannot")


def test_count_why() -> None:
    assert tc.count_why(12.0, 12) == "Its rows hold the same count."
    assert tc.count_why(13.0, 12) == "Counting: it published 13, its rows hold 12."


def test_total_why_checks_the_tools_own_span() -> None:
    line = tc.total_why(200.0, 100, 0.474, 0.5, window=200.0)
    assert line.startswith("Span: its rows' 100 tokens over its own span (0.5 s) give its figure")
    assert "+5.5%" in line and "Window: over the steady window ours reads -5.2%" in line
    assert tc.total_why(250.0, 100, 0.474, 0.5, None).startswith("Not explained by its rows: over its own "
                                                                  "span (0.5 s) they read -20.0%")
    assert tc.total_why(211.0, 100, 0.474, None, None).startswith("Same definition")
    assert tc.total_why(None, 100, 0.474, 0.5, None) == "The tool published no such figure."


def test_queueing_is_named_only_when_the_scheduled_sends_give_its_ttft() -> None:
    reqs = tc.requests_of([{**A, "scheduled_ns": -10 * MS}, {**B, "scheduled_ns": 90 * MS}], chunked=True)
    assert tc.queued_ttft(reqs).tolist() == [30.0, 15.0]
    assert tc.queued_ttft(tc.requests_of([A], chunked=True)) is None  # no schedule kept
    line = tc.why("ttft_ms", "aiperf", common=12.5, own=12.5, published=22.5, queued=22.5)
    assert line.startswith("Queueing:") and "-44.4%" in line
    assert tc.why("ttft_ms", "aiperf", 22.5, 22.5, 22.5, queued=22.5).startswith("Same definition")
    assert tc.why("ttft_ms", "aiperf", 12.5, 12.5, 40.0, queued=22.5).startswith("Not explained")


def test_total_why_names_a_span_its_rows_cannot_give() -> None:
    line = tc.total_why(311.4, 384, 1.2166, 1.2165, None, "aiperf")
    assert line.startswith("Its definition cannot be recomputed from its rows") and "profiling phase" in line
    line = tc.total_why(2744.5, 576, 1.22, 1.22, None, "inference-perf")  # its re-tokenized count
    assert line.startswith("Not explained") and "re-tokenized" in line
    assert tc.total_why(200.0, 100, None, 0.5, None, "sglang-bench-serving").endswith(
        "its rows share no clock, so they have no span of ours.")
