"""SGLang bench_serving --output-file JSONL, read against the reference server's truth log.

The fixtures were made by scripts/peers/sglang.sh (SGLang 0.5.23's benchmark
client against the reference server and llama-server). The file keeps no
send times, so each request's rebuilt stamps are relative to its own send:
a request is checked against the truth record it fits up to one unknown send
time, and every request must fit a different record.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from importer.peers import formats, sniff_format
from importer.peers.model import TIER_AGGREGATE, TIER_GAP, PeerFormatError, PeerRequest, PeerRun
from importer.peers.sglang import FORMAT, read

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
HERE = DATA / "sglang"
DETAILED = ("ref-details.jsonl", "llama-details.jsonl")
AGGREGATE = ("ref-aggregate.jsonl", "llama-aggregate.jsonl")
# As for vLLM (test_peer_vllm.py): a client stamp is at or after the server's send of that chunk,
# at most a few ms later on this shared host; 10 ms, one decode step, bounds it.
LOOPBACK_BOUND_NS = 10_000_000


def _fits(req: PeerRequest, rec: dict) -> bool:
    """Is there one send time s with every s + chunk stamp within [server send, + bound], s before
    the server received the request and at most the bound before it?"""
    sent = [c[0] for c in rec["chunks"]]
    if len(sent) != len(req.chunk_ns):
        return False
    lo = max(t - c for t, c in zip(sent, req.chunk_ns, strict=True))
    hi = min(t - c for t, c in zip(sent, req.chunk_ns, strict=True)) + LOOPBACK_BOUND_NS
    lo, hi = max(lo, rec["recv_ns"] - LOOPBACK_BOUND_NS), min(hi, rec["recv_ns"])
    return lo <= hi


def _match(requests: tuple[PeerRequest, ...], records: list[dict]) -> dict[int, int]:
    """A perfect matching of requests to records they fit (augmenting paths), else {}."""
    fits = [[j for j, rec in enumerate(records) if _fits(req, rec)] for req in requests]
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j in fits[i]:
            if j not in seen:
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return owner if all(place(i, set()) for i in range(len(requests))) else {}


def test_reference_run_fits_the_truth_log():
    run = read(HERE / "ref-details.jsonl")
    records = [json.loads(line) for line in (HERE / "ref-truth.jsonl").read_text().splitlines()]
    records = records[1:]  # the tool's warm-up request, which the result file does not keep
    assert run.tier == TIER_GAP and len(run.requests) == len(records) == 12
    assert all(r.send_ns == 0 and r.error is None for r in run.requests)
    owner = _match(run.requests, records)
    assert len(owner) == 12
    for j, i in owner.items():
        assert run.requests[i].output_tokens == records[j]["chunks"][-1][2]


def test_a_stamp_one_step_off_no_longer_fits():
    """The fit is tight enough to see one chunk's stamp moved by one decode step."""
    run = read(HERE / "ref-details.jsonl")
    records = [json.loads(line) for line in (HERE / "ref-truth.jsonl").read_text().splitlines()][1:]
    first = run.requests[0]
    stamps = list(first.chunk_ns)
    stamps[5] += 10_000_000
    moved = PeerRequest(0, stamps[-1], tuple(stamps), None, first.prompt_tokens, first.output_tokens)
    assert not any(_fits(moved, rec) for rec in records)


def _stats(values: list[float], name: str) -> dict[str, float]:
    out = {f"{name}.mean": float(np.mean(values)), f"{name}.p50": float(np.median(values))}
    out.update({f"{name}.p{p}": float(np.percentile(values, p)) for p in (90, 99)})
    return out


def _own_figures(run: PeerRun) -> dict[str, float]:
    ok = [r for r in run.requests if r.error is None]
    ttft = [r.chunk_ns[0] / 1e6 for r in ok]
    itl = [(b - a) / 1e6 for r in ok for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
    tokens = sum(r.output_tokens for r in ok)
    duration = run.published["duration_s"]
    return {**_stats(ttft, "ttft_ms"), **_stats(itl, "itl_ms"), "completed": len(ok),
            "output_tokens": tokens, "total_tok_s": tokens / duration, "request_rate": len(ok) / duration}


@pytest.mark.parametrize("name", DETAILED)
def test_published_figures_are_what_its_own_rows_give(name):
    run = read(HERE / name)
    for key, value in _own_figures(run).items():
        assert run.published[key] == pytest.approx(value, abs=1e-5), key
    # SGLang's E2E runs to the last SSE line ([DONE]), not the last token: ours, to the last
    # chunk, is shorter, by the stream's tail (0.01 ms on the reference server, 0.3 ms on llama).
    ours = float(np.mean([r.end_ns / 1e6 for r in run.requests if r.error is None]))
    assert 0 <= run.published["e2e_ms.mean"] - ours < 1.0
    assert set(run.definitions) == {k.split(".")[0] for k in run.published}


@pytest.mark.parametrize("name", AGGREGATE)
def test_aggregate_line_has_figures_but_no_requests(name):
    run = read(HERE / name)
    assert run.tier == TIER_AGGREGATE and run.requests == ()
    assert run.published["completed"] == 12 and run.concurrency == 3 and run.rate is None
    assert run.input_tokens == 64 and run.output_tokens == 32


@pytest.mark.parametrize("name", DETAILED + AGGREGATE)
def test_each_fixture_is_claimed_by_exactly_one_format(name):
    head = (HERE / name).read_bytes()[:65536]
    assert [fmt for fmt, sniff, _ in formats() if sniff(head)] == [FORMAT]
    assert sniff_format(HERE / name)[0] == FORMAT


def test_other_import_fixtures_are_not_claimed():
    others = [p for p in DATA.rglob("*") if p.is_file() and HERE not in p.parents]
    assert any(p.parent.name == "vllm" for p in others)
    for path in others:
        assert not [f for f, sniff, _ in formats() if f == FORMAT and sniff(path.read_bytes()[:65536])], path


def _edited(tmp_path: Path, edit, name: str = "ref-details.jsonl") -> Path:
    doc = json.loads((HERE / name).read_text())
    edit(doc)
    path = tmp_path / "edited.jsonl"
    path.write_text(json.dumps(doc) + "\n")  # NaN and Infinity as the tool's json.dumps writes them
    return path


def _error(path: Path) -> str:
    with pytest.raises(PeerFormatError) as info:
        read(path)
    line = info.value.located(path)
    assert "\n" not in line and str(path) in line
    return line


def test_nan_ttft_names_line_and_field(tmp_path):
    line = _error(_edited(tmp_path, lambda d: d["ttfts"].__setitem__(3, float("nan"))))
    assert ":1: ttfts: item 3: expected a finite number, found nan" in line


def test_negative_gap(tmp_path):
    line = _error(_edited(tmp_path, lambda d: d["itls"][7].__setitem__(0, -0.002)))
    assert "itls[7]: item 0: expected at least 0" in line


def test_truncated_line(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_bytes((HERE / "ref-details.jsonl").read_bytes()[:4000])
    assert sniff_format(path)[0] == FORMAT
    assert ":1: the last line is cut off" in _error(path)


def test_appended_runs_are_refused_naming_the_second_line(tmp_path):
    path = tmp_path / "two.jsonl"
    text = (HERE / "ref-aggregate.jsonl").read_text()
    path.write_text(text + text)
    assert ":2: a second run" in _error(path)


def test_unknown_newer_layout_is_claimed_then_refused(tmp_path):
    """No schema version in the file: a changed layout is recognised by its leading keys and
    refused naming the field it no longer understands."""
    path = _edited(tmp_path, lambda d: d.__setitem__("itls", [{"gaps": g} for g in d["itls"]]))
    assert sniff_format(path)[0] == FORMAT
    assert "itls[0]: expected a list of gaps per request" in _error(path)


def test_vllm_result_is_not_claimed():
    head = (DATA / "vllm" / "ref-detailed.json").read_bytes()[:65536]
    assert not any(sniff(head) for f, sniff, _ in formats() if f == FORMAT)
    assert sniff_format(DATA / "vllm" / "ref-detailed.json")[0].startswith("vllm-bench-serve/")
