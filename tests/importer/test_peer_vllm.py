"""`vllm bench serve` result JSON, read against the reference server's truth log.

The fixtures were made by scripts/peers/vllm.sh (vLLM 0.32.0 against the
reference server and llama-server); the truth log's chunk stamps are the
server's CLOCK_MONOTONIC send times, the clock the tool's perf_counter reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from importer.peers import formats, sniff_format
from importer.peers.files import MAX_JSON_BYTES
from importer.peers.model import TIER_AGGREGATE, TIER_GAP, PeerFormatError, PeerRun
from importer.peers.vllm import FORMAT_AGGREGATE, FORMAT_DETAILED, read_aggregate, read_detailed

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
HERE = DATA / "vllm"
DETAILED = ("ref-detailed.json", "llama-detailed.json", "ref-chat-detailed.json")
AGGREGATE = ("ref-aggregate.json", "llama-aggregate.json")
# A rebuilt chunk stamp is the client's receipt of a chunk the server sent on the same clock:
# never before the send, and after it by the loopback + asyncio delay. On this 2-core shared
# host the fixture's worst was 4.5 ms (chunks) and 1.9 ms (request send -> server receipt);
# 10 ms bounds both with room, and a stamp off by one gap (10 ms at 100 steps/s) fails it.
LOOPBACK_BOUND_NS = 10_000_000


def _truth(name: str = "ref-truth.jsonl") -> dict[int, dict]:
    """Truth records by the tool's request index (its x-request-id ends in -<index>)."""
    records = [json.loads(line) for line in (HERE / name).read_text().splitlines()]
    return {int(r["request_id"].rsplit("-", 1)[1]): r for r in records}


def test_reference_run_matches_truth_log_chunk_by_chunk():
    run = read_detailed(HERE / "ref-detailed.json")
    truth = _truth()
    assert run.tier == TIER_GAP and run.concurrency == 3 and run.rate is None and run.model == "tiny"
    assert len(run.requests) == len(truth) == 12
    for i, req in enumerate(run.requests):
        rec = truth[i]
        assert req.error is None
        sent = [c[0] for c in rec["chunks"]]
        assert len(req.chunk_ns) == len(sent), i
        for got, server in zip(req.chunk_ns, sent, strict=True):
            assert 0 <= got - server <= LOOPBACK_BOUND_NS, (i, got - server)
        assert 0 <= rec["recv_ns"] - req.send_ns <= LOOPBACK_BOUND_NS, i
        assert req.end_ns == pytest.approx(req.chunk_ns[-1], abs=1)
        assert req.prompt_tokens == rec["prompt_tokens"]
        assert req.output_tokens == rec["chunks"][-1][2]
        assert req.chunk_tokens is None


def test_chat_backend_first_stamp_is_the_role_chunk():
    """vLLM's openai-chat TTFT stops at the role-only first delta, not the first token: the file
    has one stamp more than the server sent content chunks, and the first is the role chunk's."""
    run = read_detailed(HERE / "ref-chat-detailed.json")
    truth = _truth("ref-chat-truth.jsonl")
    assert any(line.startswith("first token: with a chat backend") for line in run.lost)
    for i, req in enumerate(run.requests):
        rec = truth[i]
        assert len(req.chunk_ns) == len(rec["chunks"]) + 1
        assert 0 <= req.chunk_ns[0] - rec["role_chunk_ns"] <= LOOPBACK_BOUND_NS, i
        for got, chunk in zip(req.chunk_ns[1:], rec["chunks"], strict=True):
            assert 0 <= got - chunk[0] <= LOOPBACK_BOUND_NS, i
        # the first token came after the prefill (20 ms, 50 for every 5th request): vLLM's TTFT missed it
        assert rec["chunks"][0][0] - req.chunk_ns[0] > 15_000_000
    assert not any("chat backend" in line for line in read_detailed(HERE / "ref-detailed.json").lost)


def _own_figures(run: PeerRun) -> dict[str, float]:
    """vLLM's summary figures recomputed from the imported rows under vLLM's definitions."""
    ok = [r for r in run.requests if r.error is None]
    ttft = [(r.chunk_ns[0] - r.send_ns) / 1e6 for r in ok]
    e2e = [(r.end_ns - r.send_ns) / 1e6 for r in ok]
    # ITL per chunk, as vLLM pools it
    itl = [(b - a) / 1e6 for r in ok for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
    tpot = [(e - t) / (r.output_tokens - 1)
            for r, t, e in zip(ok, ttft, e2e, strict=True) if r.output_tokens > 1]
    out: dict[str, float] = {}
    for name, values in (("ttft_ms", ttft), ("e2e_ms", e2e), ("itl_ms", itl), ("tpot_ms", tpot)):
        out[f"{name}.mean"] = float(np.mean(values))
        for p in (50, 90, 99):
            out[f"{name}.p{p}"] = float(np.percentile(values, p))
    tokens = sum(r.output_tokens for r in ok)
    duration = run.published["duration_s"]
    out.update(completed=len(ok), output_tokens=tokens, total_tok_s=tokens / duration,
               request_rate=len(ok) / duration)
    return out


@pytest.mark.parametrize("name", DETAILED)
def test_published_figures_are_what_its_own_rows_give(name):
    run = read_detailed(HERE / name)
    ours = _own_figures(run)
    assert set(run.published) == set(ours) | {"duration_s"}
    for key, value in ours.items():
        # ns rounding of the rebuilt stamps moves a figure by well under a microsecond
        assert run.published[key] == pytest.approx(value, abs=1e-5), key
    assert set(run.definitions) == {k.split(".")[0] for k in run.published}


def test_itl_is_per_chunk_not_per_token():
    """Two-token chunks: vLLM's ITL (per chunk) is about twice its TPOT (per token)."""
    run = read_detailed(HERE / "ref-detailed.json")
    ratio = run.published["itl_ms.mean"] / run.published["tpot_ms.mean"]
    assert 1.4 < ratio < 1.6  # 32 tokens in 21 chunks of 1,2,1,2,...: 31 tokens over 20 gaps


def test_failed_request_keeps_the_exception_line():
    """One request of this real run failed in the tool's HTTP client (by chance: a regenerated
    fixture may have none, and this test then needs another failed run)."""
    run = read_detailed(HERE / "llama-detailed.json")
    failed = [r for r in run.requests if r.error is not None]
    assert len(failed) == 1 and run.published["completed"] == 11
    assert failed[0].error.startswith("aiohttp.client_exceptions.ClientOSError")
    assert failed[0].chunk_ns == () and failed[0].end_ns is None and failed[0].output_tokens is None


@pytest.mark.parametrize("name", AGGREGATE)
def test_aggregate_file_has_figures_but_no_requests(name):
    run = read_aggregate(HERE / name)
    assert run.tier == TIER_AGGREGATE and run.requests == ()
    assert run.published["completed"] == 12 and run.published["ttft_ms.p99"] > 0
    assert run.tool_version is None and any("tool version" in line for line in run.lost)


@pytest.mark.parametrize("name", DETAILED + AGGREGATE)
def test_each_fixture_is_claimed_by_exactly_one_format(name):
    head = (HERE / name).read_bytes()[:65536]
    claims = [fmt for fmt, sniff, _ in formats() if sniff(head)]
    assert claims == [FORMAT_DETAILED if "detailed" in name else FORMAT_AGGREGATE]
    assert sniff_format(HERE / name)[0] == claims[0]


def test_other_import_fixtures_are_not_claimed():
    others = [p for p in DATA.rglob("*") if p.is_file() and HERE not in p.parents]
    assert others
    mine = {FORMAT_DETAILED, FORMAT_AGGREGATE}
    for path in others:
        head = path.read_bytes()[:65536]
        assert not [f for f, sniff, _ in formats() if f in mine and sniff(head)], path


def _edited(tmp_path: Path, edit) -> Path:
    doc = json.loads((HERE / "ref-detailed.json").read_text())
    edit(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))  # json.dumps writes NaN as Python's json does
    return path


def _error(path: Path) -> str:
    with pytest.raises(PeerFormatError) as info:
        read_detailed(path)
    line = info.value.located(path)
    assert "\n" not in line and str(path) in line
    return line


def test_nan_latency_names_the_field(tmp_path):
    line = _error(_edited(tmp_path, lambda d: d["latencies"].__setitem__(4, float("nan"))))
    assert "latencies: item 4: expected a finite number, found nan" in line


def test_negative_gap_names_request_and_item(tmp_path):
    line = _error(_edited(tmp_path, lambda d: d["itls"][2].__setitem__(5, -0.001)))
    assert "itls[2]: item 5: expected at least 0" in line


def test_gaps_that_do_not_add_up_to_the_latency_are_refused(tmp_path):
    line = _error(_edited(tmp_path, lambda d: d["start_times"].__setitem__(3, 0.0) or
                          d["latencies"].__setitem__(3, d["latencies"][3] + 0.5)))
    assert "latencies[3]" in line and "mixed clocks" in line


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.json"
    path.write_bytes((HERE / "ref-detailed.json").read_bytes()[:5000])
    assert sniff_format(path)[0] == FORMAT_DETAILED
    assert "not valid JSON" in _error(path)


def test_unknown_newer_layout_is_claimed_then_refused(tmp_path):
    """The file has no schema version: a layout change (itls no longer a list per request) is
    recognised by its leading keys and refused naming the field."""
    path = _edited(tmp_path, lambda d: d.__setitem__("itls", [{"chunks": g} for g in d["itls"]]))
    assert sniff_format(path)[0] == FORMAT_DETAILED
    assert "itls[0]: expected a list of gaps per request" in _error(path)


def test_lists_of_different_lengths(tmp_path):
    assert "differ in length" in _error(_edited(tmp_path, lambda d: d["ttfts"].pop()))


def test_appended_results_are_refused_in_one_line(tmp_path):
    path = tmp_path / "appended.json"
    text = (HERE / "ref-aggregate.json").read_text()
    path.write_text(text + "\n" + text)
    with pytest.raises(PeerFormatError, match="--append-result"):
        read_aggregate(path)


def test_another_tools_json_is_not_claimed(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"backend": "sglang", "dataset_name": "random", "completed": 3,
                                "ttfts": [0.1], "input_lens": [4]}))
    assert sniff_format(path) is None


def test_file_over_the_size_cap(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:
        fh.write((HERE / "ref-aggregate.json").read_bytes()[:200])
        fh.truncate(MAX_JSON_BYTES + 1)
    with pytest.raises(PeerFormatError, match="larger than"):
        read_aggregate(path)
