"""guidellm benchmarks.json reader: checked against the reference server's truth log.

The fixtures are guidellm 0.8.1's own output (scripts/peers/guidellm.sh), one
against tests/refserver (with its truth JSONL) and one against llama-server.
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from importer.peers import formats, sniff_format
from importer.peers.guidellm import FORMAT, read, read_all, sniff
from importer.peers.model import TIER_REQUEST, PeerFormatError

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
HERE = DATA / "guidellm"
REF = HERE / "refserver-c4.benchmarks.json"
LLAMA = HERE / "llama-c4.benchmarks.json"
TRUTH = HERE / "refserver-c4.truth.jsonl"
FIXTURES = (REF, LLAMA)

# Client receive delay after the one clock offset is removed (guidellm's wall clock vs the
# server's CLOCK_MONOTONIC; offset = the smallest first-token delay): the largest seen in the
# fixture was 6.2 ms for a first token and 10.6 ms for a last one (guidellm's four worker
# processes on a 2-core host shared with other jobs); 20 ms leaves room, and is far below the
# 5 ms x 31 tokens a wrong stamp (first vs last) would move. A last token can sit up to the
# offset's own error early (seen: 0.03 ms): SLACK_NS.
BOUND_NS = 20_000_000
SLACK_NS = 1_000_000


def _truth() -> dict[str, dict]:
    out = {}
    for line in TRUTH.read_text().splitlines():
        rec = json.loads(line)
        out[rec["request_id"]] = rec
    return out


def _paired():
    """(PeerRequest, truth record) for each request of the reference run, via the response id."""
    doc = json.loads(REF.read_text())
    truth = _truth()
    run = read(REF)
    by_start = {r.send_ns: r for r in run.requests}
    pairs = []
    for item in doc["benchmarks"][0]["requests"]["successful"]:
        req = by_start[round(Fraction(item["info"]["timings"]["request_start"]) * 10**9)]
        pairs.append((req, truth[item["response_id"].removeprefix("chatcmpl-")]))
    return pairs


def test_reads_both_fixtures_as_request_tier():
    for path in FIXTURES:
        run = read(path)
        assert (run.tool, run.tool_version, run.format) == ("guidellm", "0.8.1", FORMAT)
        assert run.tier == TIER_REQUEST
        assert "time.time()" in run.clock
        assert (run.concurrency, run.input_tokens, run.output_tokens) == (4, 64, 32)
        assert len(run.requests) == 20 and all(r.error is None for r in run.requests)
        assert run.measured_at.startswith("20") and run.measured_at.endswith("Z")
        assert run.published["completed"] == 20
        assert set(run.definitions) >= {k.split(".")[0] for k in run.published}
        for r in run.requests:
            assert r.chunk_tokens is None and len(r.chunk_ns) == 2
            assert r.send_ns < r.chunk_ns[0] < r.chunk_ns[1] <= r.end_ns
    assert read(REF).model == "ref" and read(LLAMA).model == "tiny"


def test_every_request_matches_the_truth_log_within_the_bound():
    pairs = _paired()
    assert len(pairs) == 20
    # one offset between the two clocks: the smallest first-token delay
    offset = min(req.chunk_ns[0] - t["chunks"][0][0] for req, t in pairs)
    for req, t in pairs:
        first, last = req.chunk_ns[0] - offset, req.chunk_ns[-1] - offset
        assert 0 <= first - t["chunks"][0][0] <= BOUND_NS
        # the offset carries the fastest first token's own delay: a last token may land that early
        assert -SLACK_NS <= last - t["chunks"][-1][0] <= BOUND_NS
        assert abs((last - first) - (t["chunks"][-1][0] - t["chunks"][0][0])) <= BOUND_NS
        # the client stamps its start before the server reads the request
        assert -BOUND_NS <= t["recv_ns"] - (req.send_ns - offset) <= BOUND_NS
        assert req.output_tokens == t["chunks"][-1][2] == len(t["chunks"])
        assert req.prompt_tokens == t["prompt_tokens"]


def _dist(values, weights):
    """guidellm 0.8.1's mean and pN: weighted mean; smallest value whose cumulative share reaches N%."""
    v, w = np.asarray(values, float), np.asarray(weights, float)
    order = np.argsort(v)
    v, w = v[order], w[order] / w.sum()
    cdf = np.cumsum(w)
    out = {"mean": float(np.sum(v * w))}
    for stat, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        out[stat] = float(v[np.searchsorted(cdf, q, side="left")])
    return out


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_published_figures_equal_ours_under_guidellms_definitions(path):
    run = read(path)
    ok = [r for r in run.requests if r.error is None]
    out = [r.output_tokens for r in ok]
    ms = 1e-6
    recomputed = {
        "ttft_ms": _dist([(r.chunk_ns[0] - r.send_ns) * ms for r in ok], [1] * len(ok)),
        "itl_ms": _dist([(r.chunk_ns[-1] - r.chunk_ns[0]) * ms / (n - 1)
                         for r, n in zip(ok, out, strict=True)], [n - 1 for n in out]),
        "tpot_ms": _dist([(r.chunk_ns[-1] - r.send_ns) * ms / n for r, n in zip(ok, out, strict=True)], out),
        "e2e_ms": _dist([(r.end_ns - r.send_ns) * ms for r in ok], [1] * len(ok)),
    }
    for metric, stats in recomputed.items():
        for stat, value in stats.items():
            # stamps rounded to ns: a few ns per figure
            assert run.published[f"{metric}.{stat}"] == pytest.approx(value, abs=1e-4), f"{metric}.{stat}"
    assert run.published["output_tokens"] == sum(out)
    assert run.published["total_tok_s"] == pytest.approx(sum(out) / run.published["duration_s"], rel=1e-9)
    assert run.published["request_rate"] == pytest.approx(len(ok) / run.published["duration_s"], rel=1e-9)


def test_each_fixture_is_claimed_by_exactly_one_format_and_no_other_fixture_by_this_one():
    for path in FIXTURES:
        head = path.read_bytes()[:65536]
        assert [name for name, s, _ in formats() if s(head)] == [FORMAT]
        assert sniff_format(path)[0] == FORMAT
    others = [p for p in DATA.rglob("*") if p.is_file() and p.parent != HERE]
    assert others
    for path in others + [TRUTH]:
        assert not sniff(path.read_bytes()[:65536]), path


def test_read_all_gives_one_run_per_benchmark(tmp_path):
    doc = json.loads(REF.read_text())
    second = copy.deepcopy(doc["benchmarks"][0])
    second["config"]["strategy"]["streams"] = 8
    doc["benchmarks"].append(second)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    runs = read_all(path)
    assert [r.concurrency for r in runs] == [4, 8]
    assert runs[1].extra["benchmark"] == "2 of 2 in the file"
    assert read(path).concurrency == 4


def _broken(tmp_path, change) -> Path:
    doc = json.loads(REF.read_text())
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    return path


def _one_line_error(path: Path) -> str:
    with pytest.raises(PeerFormatError) as info:
        read(path)
    text = info.value.located(path)
    assert "\n" not in text and str(path) in text
    return text


REQ0 = "benchmarks[0].requests.successful[0]"


def test_newer_schema_version_is_recognised_and_refused(tmp_path):
    path = _broken(tmp_path, lambda d: d["metadata"].update(version=3))
    assert sniff(path.read_bytes()[:65536])
    assert "metadata.version: schema version 3" in _one_line_error(path)


def test_nan_latency_names_the_field(tmp_path):
    text = REF.read_text().replace('"first_token_iteration": ', '"first_token_iteration": NaN, "x": ', 1)
    path = tmp_path / "nan.json"
    path.write_text(text)
    assert "not valid JSON" in _one_line_error(path)

    def nan_later(d):
        d["benchmarks"][0]["requests"]["successful"][0]["info"]["timings"]["first_token_iteration"] = "NaN"
    msg = _one_line_error(_broken(tmp_path, nan_later))
    assert f"{REQ0}.info.timings.first_token_iteration: expected a finite number" in msg


def test_negative_gap_names_the_field(tmp_path):
    def swap(d):
        t = d["benchmarks"][0]["requests"]["successful"][0]["info"]["timings"]
        first, last = t["first_token_iteration"], t["last_token_iteration"]
        t["first_token_iteration"], t["last_token_iteration"] = last, first
    msg = _one_line_error(_broken(tmp_path, swap))
    assert f"{REQ0}.info.timings.last_token_iteration: last token before the first" in msg


def test_truncated_and_wrong_format_files(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_bytes(REF.read_bytes()[:5000])
    assert sniff(cut.read_bytes())  # still recognisably guidellm's
    assert "not valid JSON" in _one_line_error(cut)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"metadata": {"version": 2}, "benchmarks": []}))
    assert not sniff(other.read_bytes())
    assert "benchmarks: expected a non-empty list" in _one_line_error(other)


def test_errors_never_quote_prompt_text(tmp_path):
    def text_as_count(d):
        d["benchmarks"][0]["requests"]["successful"][0]["prompt_tokens"] = "secret prompt words"
    msg = _one_line_error(_broken(tmp_path, text_as_count))
    assert f"{REQ0}.prompt_tokens: expected a finite number, found a string" in msg
    assert "secret" not in msg


def test_errored_and_incomplete_requests_keep_the_tools_error_text(tmp_path):
    def fail_two(d):
        reqs = d["benchmarks"][0]["requests"]
        first, second = reqs["successful"].pop(0), reqs["successful"].pop(0)
        first["info"].update(error="HTTPStatusError: 503", status="errored")
        second["info"].update(error=None, status="cancelled")
        second["info"]["timings"]["last_token_iteration"] = None
        reqs["errored"], reqs["incomplete"] = [first], [second]
    run = read(_broken(tmp_path, fail_two))
    errors = sorted(r.error for r in run.requests if r.error)
    assert errors == ["HTTPStatusError: 503", "incomplete (cancelled)"]
    cut = next(r for r in run.requests if r.error == "incomplete (cancelled)")
    assert len(cut.chunk_ns) == 1 and len(run.requests) == 20
