"""inference-perf per_request_lifecycle_metrics.json reader: checked against the truth log.

The fixtures are inference-perf 0.7.0's own output (scripts/peers/inference_perf.sh), one
against tests/refserver (with its truth JSONL) and one against llama-server; each has the
tool's summary_lifecycle_metrics.json beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from importer.peers import formats, sniff_format
from importer.peers.inference_perf import FORMAT, read, sniff
from importer.peers.model import TIER_CHUNK, PeerFormatError

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
HERE = DATA / "inference-perf"
REF = HERE / "refserver-c4.per_request_lifecycle_metrics.json"
LLAMA = HERE / "llama-c4.per_request_lifecycle_metrics.json"
TRUTH = HERE / "refserver-c4.truth.jsonl"
FIXTURES = (REF, LLAMA)

# inference-perf stamps with time.perf_counter(), the server with CLOCK_MONOTONIC: one clock, no
# offset. A chunk reaches the client after the server sent it: 0.03-5.05 ms in the fixture
# (loopback, plus the tool's event loop on a 2-core host shared with other jobs); 20 ms bound.
BOUND_NS = 20_000_000


def _truth() -> list[dict]:
    return [json.loads(line) for line in TRUTH.read_text().splitlines()]


def test_reads_both_fixtures_as_chunk_tier():
    for path in FIXTURES:
        run = read(path)
        assert (run.tool, run.tool_version, run.format) == ("inference-perf", None, FORMAT)
        assert run.tier == TIER_CHUNK
        assert "perf_counter" in run.clock
        assert len(run.requests) == 18
        assert run.extra["summary_file"] == path.name.replace("per_request", "summary")
    ref, llama = read(REF), read(LLAMA)
    assert all(r.error is None and len(r.chunk_ns) == 32 for r in ref.requests)
    # the tool's tokenizer (tiny-hf) splits the refserver's words into several tokens: not kept
    assert all(r.chunk_tokens is None for r in ref.requests)
    assert "18 request(s)" in ref.extra["tokens_per_chunk"]
    failed = [r for r in llama.requests if r.error]
    assert [r.error for r in failed] == ["ServerDisconnectedError: Server disconnected"]
    assert failed[0].chunk_ns == () and failed[0].chunk_tokens is None
    ok = [r for r in llama.requests if r.error is None]
    assert all(r.chunk_tokens == tuple(range(1, 33)) and r.output_tokens == 32 for r in ok)


def test_every_chunk_stamp_matches_the_truth_log_within_the_bound():
    run = read(REF)
    truth = sorted(_truth(), key=lambda t: t["chunks"][0][0])
    rows = sorted(run.requests, key=lambda r: r.chunk_ns[0])
    assert len(rows) == len(truth) == 18
    worst = 0
    for req, t in zip(rows, truth, strict=True):
        assert len(req.chunk_ns) == len(t["chunks"])
        for got, (sent, _n, _cum) in zip(req.chunk_ns, t["chunks"], strict=True):
            assert 0 <= got - sent <= BOUND_NS
            worst = max(worst, got - sent)
        # the tool stamps its start before the request leaves; the server reads it after
        assert 0 <= t["recv_ns"] - req.send_ns <= BOUND_NS
        assert req.end_ns >= req.chunk_ns[-1]
        assert req.output_tokens == t["chunks"][-1][2]
        assert req.prompt_tokens == t["prompt_tokens"]
    assert worst > 0


def _stats(values):
    """inference-perf 0.7.0's summarize(): numpy mean and linearly interpolated percentiles."""
    return {"mean": float(np.mean(values)), "p50": float(np.percentile(values, 50)),
            "p90": float(np.percentile(values, 90)), "p99": float(np.percentile(values, 99))}


def _check(published, metric, values):
    for stat, value in _stats(values).items():
        assert published[f"{metric}.{stat}"] == pytest.approx(value, abs=1e-5), f"{metric}.{stat}"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_published_figures_equal_ours_under_its_definitions(path):
    run = read(path)
    pub = run.published
    ok = [r for r in run.requests if r.error is None]
    _check(pub, "ttft_ms", [(r.chunk_ns[0] - r.send_ns) / 1e6 for r in ok])
    _check(pub, "e2e_ms", [(r.end_ns - r.send_ns) / 1e6 for r in ok])
    duration = (max(r.end_ns for r in run.requests) - min(r.send_ns for r in run.requests)) / 1e9
    assert pub["duration_s"] == pytest.approx(duration, rel=1e-7)
    assert pub["completed"] == len(ok)
    assert pub["request_rate"] == pytest.approx(len(ok) / duration, rel=1e-7)
    assert pub["output_tokens"] == sum(r.output_tokens for r in ok)
    # TPOT, ITL and tok/s use the tool's per-token stamps and its own re-tokenized count
    raw = [e for e in json.loads(path.read_text()) if e["error"] is None]
    client = [e["info"]["response_metrics"]["output_tokens"] for e in raw]
    times = [e["info"]["response_metrics"]["output_token_times"] for e in raw]
    _check(pub, "tpot_ms", [(t[-1] - t[0]) * 1e3 / (n - 1) for t, n in zip(times, client, strict=True)])
    _check(pub, "itl_ms", [(b - a) * 1e3 for t in times for a, b in zip(t, t[1:], strict=False)])
    assert pub["total_tok_s"] == pytest.approx(sum(client) / duration, rel=1e-7)


def test_itl_rebuilt_from_chunks_and_tokens_per_chunk_equals_the_published():
    """Where tokens per chunk are kept, our rows alone give the tool's pooled ITL."""
    run = read(LLAMA)
    deltas = []
    for r in (r for r in run.requests if r.error is None):
        per_token = []
        prev = 0
        for stamp, cum in zip(r.chunk_ns, r.chunk_tokens, strict=True):
            per_token += [stamp] * (cum - prev)
            prev = cum
        deltas += [(b - a) / 1e6 for a, b in zip(per_token, per_token[1:], strict=False)]
    _check(run.published, "itl_ms", deltas)


def test_each_fixture_is_claimed_by_exactly_one_format_and_no_other_fixture_by_this_one():
    for path in FIXTURES:
        head = path.read_bytes()[:65536]
        assert [name for name, s, _ in formats() if s(head)] == [FORMAT]
        assert sniff_format(path)[0] == FORMAT
    others = [p for p in DATA.rglob("*") if p.is_file() and p.parent != HERE]
    assert others
    for path in others + [TRUTH, *HERE.glob("*summary*")]:
        assert not sniff(path.read_bytes()[:65536]), path


def test_without_a_summary_beside_it_nothing_is_published(tmp_path):
    path = tmp_path / "per_request_lifecycle_metrics.json"
    path.write_bytes(REF.read_bytes())
    run = read(path)
    assert run.published == {} and "none beside it" in run.extra["summary_file"]


def _one_line_error(path: Path) -> str:
    with pytest.raises(PeerFormatError) as info:
        read(path)
    text = info.value.located(path)
    assert "\n" not in text and str(path) in text
    return text


def _broken(tmp_path, change, name="x.per_request_lifecycle_metrics.json") -> Path:
    doc = json.loads(REF.read_text())
    change(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


RM0 = "[0].info.response_metrics"


def test_negative_gap_names_the_item(tmp_path):
    def swap(d):
        t = d[0]["info"]["response_metrics"]["chunk_times"]
        t[3], t[4] = t[4], t[3]
    msg = _one_line_error(_broken(tmp_path, swap))
    assert f"{RM0}.chunk_times: item 4: a negative gap" in msg


def test_nan_latency_names_the_field(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(REF.read_text().replace('"end_time": ', '"end_time": NaN, "x": ', 1))
    assert "not valid JSON (NaN is not a number JSON allows)" in _one_line_error(path)

    def text_stamp(d):
        d[0]["info"]["response_metrics"]["chunk_times"][2] = "NaN"
    msg = _one_line_error(_broken(tmp_path, text_stamp))
    assert f"{RM0}.chunk_times: item 2: expected a finite number, found a string" in msg


def test_truncated_wrong_format_and_changed_schema(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_bytes(REF.read_bytes()[:4000])
    assert sniff(cut.read_bytes())
    assert "not valid JSON" in _one_line_error(cut)
    guidellm = DATA / "guidellm" / "refserver-c4.benchmarks.json"
    assert not sniff(guidellm.read_bytes()[:65536])
    # the file has no version field: a later layout is refused by the first field it changed
    moved = _broken(tmp_path, lambda d: d[0].update(info=[1]), name="y.json")
    assert sniff(moved.read_bytes()[:65536])
    assert "[0].info: missing or not an object" in _one_line_error(moved)


def test_bad_summary_names_its_file_and_field(tmp_path):
    path = tmp_path / "per_request_lifecycle_metrics.json"
    path.write_bytes(REF.read_bytes())
    summary = json.loads((HERE / "refserver-c4.summary_lifecycle_metrics.json").read_text())
    summary["successes"]["throughput"]["output_tokens_per_sec"] = -1
    (tmp_path / "summary_lifecycle_metrics.json").write_text(json.dumps(summary))
    msg = _one_line_error(path)
    field = "summary_lifecycle_metrics.json.successes.throughput.output_tokens_per_sec"
    assert f"{field}: expected at least 0" in msg


def test_errors_never_quote_response_text(tmp_path):
    def text_count(d):
        d[0]["info"]["response_metrics"]["output_tokens"] = "secret words"
    msg = _one_line_error(_broken(tmp_path, text_count))
    assert f"{RM0}.output_tokens: expected a finite number, found a string" in msg and "secret" not in msg


def test_default_fields_with_long_request_text_are_still_recognised(tmp_path):
    """By default the tool writes each request body first: 'info' may lie past the sniffed head."""
    body = json.dumps({"prompt": "word " * 20_000})
    reordered = []
    for e in json.loads(REF.read_text()):
        rest = {k: v for k, v in e.items() if k not in ("start_time", "end_time")}
        reordered.append({"start_time": e["start_time"], "end_time": e["end_time"], "request": body,
                          "response": "data: {}", **rest})
    path = tmp_path / "per_request_lifecycle_metrics.json"
    path.write_text(json.dumps(reordered, indent=2))
    head = path.read_bytes()[:65536]
    assert b'"info"' not in head and sniff(head)
    assert len(read(path).requests) == 18
