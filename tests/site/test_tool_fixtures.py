"""Each tool's published figures against its own rows, on the real tools' files: imported
(sniff + write_peer_run), read back (rundir.io.read_run) and recomputed under the tool's own
definition (site_builder/tooldefs.py), so the comparison page's "Same definition" and
"Definition" lines are earned. Files without the load in them (AIPerf's raw and records
exports, inference-perf) are imported with it given here; AIPerf's figures are those of its
summary export from the same run (the other helper's companion-file handling reads them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from importer.peers import sniff_format
from importer.peers.aiperf import read_summary
from importer.peers.model import PeerRun
from importer.peers.write import write_peer_run
from rundir import contract, io
from site_builder import toolcompare as tc
from site_builder import tooldefs

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
# Measured on these files: the largest relative difference is 2e-8 (guidellm's float-second
# stamps rounded to ns); AIPerf's t-digest percentiles are exact at this many samples.
BOUND = 1e-6
FIXTURES = (
    *(f"aiperf/{d}/{f}" for d in ("refserver", "llama-server", "refserver-errors")
      for f in ("profile_export_raw.jsonl", "profile_export.jsonl")),
    "vllm/ref-detailed.json", "vllm/ref-chat-detailed.json", "vllm/llama-detailed.json",
    "sglang/ref-details.jsonl", "sglang/llama-details.jsonl",
    "guidellm/refserver-c4.benchmarks.json", "guidellm/llama-c4.benchmarks.json",
    "inference-perf/refserver-c4.per_request_lifecycle_metrics.json",
    "inference-perf/llama-c4.per_request_lifecycle_metrics.json",
)
CONCURRENCY = 4  # inference-perf's runs here (its config.yaml is not beside the file)


def _run(rel: str) -> PeerRun:
    path = DATA / rel
    found = sniff_format(path)
    assert found, rel
    run = found[1](path)
    if run.tool == "aiperf":
        summary = read_summary(path.parent / "profile_export_aiperf.json")
        run = dataclasses.replace(run, published=summary.published, definitions=summary.definitions,
                                  concurrency=summary.concurrency)
    if run.concurrency is None and run.rate is None:
        run = dataclasses.replace(run, concurrency=CONCURRENCY)
    return run


def _point(run: PeerRun, tmp_path: Path) -> tc.LoadPoint:
    result = write_peer_run(run, tmp_path)
    data = io.read_run(tmp_path / result.run_id)
    (point,) = tc.load_points(data.cells, data.requests, data.info.imported.tier, measured=False)
    return point


@pytest.mark.parametrize("rel", FIXTURES)
def test_its_rows_give_its_figures_under_its_own_definitions(rel: str, tmp_path: Path) -> None:
    run = _run(rel)
    p = _point(run, tmp_path)
    checked = 0
    for metric, _ in tc.METRICS:
        rule = tc.tool_rule(run.tool, metric)
        for stat in ("mean", *tc.STATS):
            published = run.published.get(f"{metric}.{stat}")
            if published is None:
                continue
            own = tc.tool_rank(tc.tool_samples(p.whole, run.tool, metric, p.counting), stat, rule.ranking)
            common = tc.rank(tc.samples(p.whole, metric), metric, stat, minimum=False)
            line = tc.why(metric, run.tool, common, own, published, counting=p.counting)
            if rule.rule is None:  # its end or its count is not in the file
                assert own is None and line.startswith("Its definition cannot be recomputed"), line
            elif rule.needs_chunk_counts and p.counting != contract.COUNT_PEER_CHUNKS:
                assert own is None and line.startswith("Counting:"), line
            else:
                assert own == pytest.approx(published, rel=BOUND), f"{metric}.{stat}"
                assert line.startswith(("Same definition", "Definition:")), line
                checked += 1
    assert checked >= 8  # TTFT and one more figure at least, at four stats


@pytest.mark.parametrize("rel", FIXTURES)
def test_its_totals_over_its_own_span(rel: str, tmp_path: Path) -> None:
    run = _run(rel)
    p = _point(run, tmp_path)
    pub = run.published
    assert pub["completed"] == p.whole_totals.completed
    assert pub["output_tokens"] == p.whole_totals.output_tokens or run.tool == "inference-perf"
    own = p.whole_totals.output_tokens / pub["duration_s"]
    line = tc.total_why(pub["total_tok_s"], p.whole_totals.output_tokens, p.whole_totals.span_s,
                        pub["duration_s"], None, run.tool)
    if run.tool == "aiperf":  # over its profiling phase's span, not its duration
        assert own != pytest.approx(pub["total_tok_s"], rel=1e-3)
        assert line.startswith("Its definition cannot be recomputed") and "profiling phase's span" in line
    elif run.tool == "inference-perf" and p.counting != contract.COUNT_PEER_CHUNKS:
        assert own != pytest.approx(pub["total_tok_s"], rel=1e-3)  # its re-tokenized count
        assert "re-tokenized" in line
    else:
        assert own == pytest.approx(pub["total_tok_s"], rel=BOUND)
        assert line.startswith("Span:")
    if run.tool == "sglang-bench-serving":  # no send times: no span of ours, no window
        assert not p.clock and p.whole_totals.span_s is None and p.window_totals is None
        assert "share no clock" in line
    else:
        assert p.clock and p.whole_totals.span_s


def test_a_tools_own_definition_is_not_ours(tmp_path: Path) -> None:
    """Where the definitions differ, its figure and ours differ on its own rows (so a match
    above is the tool's definition, not a coincidence of ours)."""
    p = _point(_run("vllm/ref-detailed.json"), tmp_path / "v")
    run = _run("vllm/ref-detailed.json")
    per_chunk = tc.tool_rank(tc.tool_samples(p.whole, run.tool, "itl_ms"), "mean")
    per_token = tc.rank(tc.samples(p.whole, "itl_ms"), "itl_ms", "mean")
    assert per_chunk == pytest.approx(run.published["itl_ms.mean"], rel=BOUND)
    g = _run("guidellm/refserver-c4.benchmarks.json")
    q = _point(g, tmp_path / "g")
    with_ttft = tc.tool_rank(tc.tool_samples(q.whole, g.tool, "tpot_ms"), "p50", tooldefs.FIRST_REACHING)
    ours = tc.rank(tc.samples(q.whole, "tpot_ms"), "tpot_ms", "p50")
    assert with_ttft == pytest.approx(g.published["tpot_ms.p50"], rel=BOUND)
    assert abs(with_ttft - ours) / ours > 0.02
    assert per_chunk is not None and per_token is not None
