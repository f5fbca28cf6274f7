"""AIPerf 0.13.0's exports (importer/peers/aiperf.py) against the reference server's truth.

The fixtures under tests/data/import/aiperf/ are the real tool's output
(scripts/peers/aiperf.sh): `refserver` (a known schedule, chunks of 1 and 2
tokens, --per-chunk-usage --use-server-token-count), `refserver-errors` (the
same with every 4th request answered 500 and every 5th reset after 10 tokens)
and `llama-server` (the tiny GGUF, AIPerf's defaults). Each reference run's
truth.jsonl has every chunk's send stamp on the server's CLOCK_MONOTONIC.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from importer.peers import formats, sniff_format
from importer.peers.aiperf import read_raw, read_records, read_summary
from importer.peers.model import TIER_AGGREGATE, TIER_CHUNK, TIER_GAP, PeerFormatError

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
AIPERF = DATA / "aiperf"
REF_RUNS = ("refserver", "refserver-errors")
ALL_RUNS = (*REF_RUNS, "llama-server")
RAW, RECORDS, SUMMARY = "profile_export_raw.jsonl", "profile_export.jsonl", "profile_export_aiperf.json"
FORMAT_OF = {RAW: "aiperf/profile_export_raw.jsonl", RECORDS: "aiperf/profile_export.jsonl",
             SUMMARY: "aiperf/profile_export_aiperf.json"}
# A chunk reaches AIPerf's worker after the server sent it, on the same clock. Measured over
# both reference runs: median 0.2-0.35 ms, p99 4.6-9.3 ms, worst 36.5 ms (the first chunks,
# while AIPerf's ~10 service processes share this host's 2 cores). The bound is that worst
# case with a little room: what the client path adds here, not what the tool gets wrong.
CHUNK_BOUND_NS = 40_000_000


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["metadata"]["x_request_id"] for line in path.open()]


def _truth(run: str) -> dict[str, dict]:
    return {t["request_id"]: t for t in map(json.loads, (AIPERF / run / "truth.jsonl").open())}


# ---- every per-request figure against the truth log -------------------------------


@pytest.mark.parametrize("run", REF_RUNS)
def test_raw_chunk_stamps_and_tokens_match_the_servers_sends(run: str) -> None:
    peer = read_raw(AIPERF / run / RAW)
    assert (peer.tier, peer.tool_version, peer.model, peer.output_tokens) == (TIER_CHUNK, "0.13.0", "ref", 32)
    truth = _truth(run)
    ids = _ids(AIPERF / run / RAW)
    assert len(peer.requests) == len(truth) == 12
    delays = []
    for req, rid in zip(peer.requests, ids, strict=True):
        t = truth[rid]
        sends = [c[0] for c in t["chunks"]]
        assert len(req.chunk_ns) == len(sends), rid
        delays += [got - sent for got, sent in zip(req.chunk_ns, sends, strict=True)]
        # Tokens per chunk: AIPerf kept the server's cumulative usage on every chunk.
        assert req.chunk_tokens == (tuple(c[2] for c in t["chunks"]) or None), rid
        assert req.send_ns <= t["recv_ns"]
        if t["status"] == 200 and not t["fault"]:
            assert (req.error, req.output_tokens, req.prompt_tokens) == (None, 32, t["prompt_tokens"])
        else:
            assert req.error is not None
    assert min(delays) >= 0, "a chunk arrived before the server sent it: not one clock"
    assert max(delays) <= CHUNK_BOUND_NS
    assert np.median(delays) < 1_000_000


@pytest.mark.parametrize("run", REF_RUNS)
def test_records_rebuilt_stamps_match_the_truth_and_the_raw_export(run: str) -> None:
    peer = read_records(AIPERF / run / RECORDS)
    # the records export names no version; the summary beside it does (issue 36 integration)
    assert (peer.tier, peer.tool_version) == (TIER_GAP, "0.13.0")
    truth = _truth(run)
    raw = dict(zip(_ids(AIPERF / run / RAW), read_raw(AIPERF / run / RAW).requests, strict=True))
    per_request = []
    for req, rid in zip(peer.requests, _ids(AIPERF / run / RECORDS), strict=True):
        t = truth[rid]
        if t["status"] != 200 or t["fault"]:
            # AIPerf keeps a failed request's error but none of its metrics here.
            assert req.error is not None and req.chunk_ns == ()
            continue
        assert (req.output_tokens, req.prompt_tokens, req.chunk_tokens) == (32, t["prompt_tokens"], None)
        # Start + TTFT + summed gaps gives back the raw export's offsets to the nanosecond.
        mine = [c - req.send_ns for c in req.chunk_ns]
        assert mine == [c - raw[rid].send_ns for c in raw[rid].chunk_ns]
        per_request.append([c - s[0] for c, s in zip(req.chunk_ns, t["chunks"], strict=True)])
        # request_end_ns is the stream's last message (the usage chunk), after the last content.
        assert req.end_ns - req.send_ns == raw[rid].end_ns - raw[rid].send_ns
        assert req.end_ns >= req.chunk_ns[-1]
    # The records' start is wall clock: one offset per run maps it onto the server's clock.
    offset = min(min(d) for d in per_request)
    for diffs in per_request:
        assert all(0 <= d - offset <= CHUNK_BOUND_NS for d in diffs)


def test_llama_server_exports_agree_with_each_other() -> None:
    raw = read_raw(AIPERF / "llama-server" / RAW)
    records = read_records(AIPERF / "llama-server" / RECORDS)
    assert raw.model == "tiny" and len(raw.requests) == len(records.requests) == 12
    assert any("tokens per chunk" in lost for lost in raw.lost)  # llama-server: usage at the end only
    for a, b in zip(raw.requests, records.requests, strict=True):
        assert a.error is None and a.chunk_tokens is None
        assert [c - a.send_ns for c in a.chunk_ns] == [c - b.send_ns for c in b.chunk_ns]
        assert a.output_tokens == 32  # the server's usage; AIPerf's own count is the records'
        assert b.output_tokens is not None and b.output_tokens > 0


# ---- AIPerf's own figures, recomputed from its own rows under its definitions ------


def _column(rows: list[dict], tag: str) -> np.ndarray:
    return np.array([r["metrics"][tag]["value"] for r in rows if tag in r["metrics"]], dtype=float)


@pytest.mark.parametrize("run", ALL_RUNS)
def test_summary_figures_equal_ours_from_its_records(run: str) -> None:
    rows = [json.loads(line) for line in (AIPERF / run / RECORDS).open()]
    doc = json.loads((AIPERF / run / SUMMARY).read_text())
    peer = read_summary(AIPERF / run / SUMMARY)
    assert (peer.tier, peer.tool_version, peer.concurrency, peer.input_tokens, peer.output_tokens) == (
        TIER_AGGREGATE, "0.13.0", 3, 64, 32)
    ok = [r for r in rows if not r.get("error")]
    columns = {"ttft_ms": _column(ok, "time_to_first_token"), "tpot_ms": _column(ok, "inter_token_latency"),
               "e2e_ms": _column(ok, "request_latency"),
               "per_request_tok_s": _column(ok, "output_token_throughput_per_user"),
               # pooled gaps; AIPerf's t-digest is exact at this many samples
               "itl_ms": np.concatenate([r["metrics"]["inter_chunk_latency"]["value"] for r in ok])}
    for metric, values in columns.items():
        assert peer.published[f"{metric}.mean"] == pytest.approx(values.mean(), rel=1e-9)
        for p in (50, 90, 99):  # numpy's default (linear) percentile
            assert peer.published[f"{metric}.p{p}"] == pytest.approx(np.percentile(values, p), rel=1e-9)
        assert peer.definitions[metric]
    starts = [r["metadata"]["request_start_ns"] for r in ok]
    ends = [start + round(r["metrics"]["request_latency"]["value"] * 1e6)
            for start, r in zip(starts, ok, strict=True)]
    duration = (max(ends) - min(starts)) / 1e9
    # AIPerf holds the epoch starts as float64 (256 ns steps): its duration is good to ~1 us.
    assert peer.published["duration_s"] == pytest.approx(duration, abs=1e-6)
    osl = _column(ok, "output_sequence_length").sum()
    assert (peer.published["completed"], peer.published["output_tokens"]) == (len(ok), osl)
    # The rates divide by the phase's span, not by benchmark_duration (to start_time's microsecond).
    span = (datetime.fromisoformat(doc["end_time"])
            - datetime.fromisoformat(doc["start_time"])).total_seconds()
    assert peer.published["total_tok_s"] == pytest.approx(osl / span, rel=1e-5)
    assert peer.published["request_rate"] == pytest.approx(len(ok) / span, rel=1e-5)
    assert not math.isclose(peer.published["total_tok_s"], osl / duration, rel_tol=1e-5)


# ---- sniffing: content decides, and only one format claims a file -----------------


@pytest.mark.parametrize("run", ALL_RUNS)
@pytest.mark.parametrize("name", (RAW, RECORDS, SUMMARY))
def test_each_fixture_is_claimed_by_exactly_one_format(run: str, name: str) -> None:
    head = (AIPERF / run / name).read_bytes()[:64 * 1024]
    claims = [fmt for fmt, sniff, _ in formats() if sniff(head)]
    assert claims == [FORMAT_OF[name]]
    found = sniff_format(AIPERF / run / name)
    assert found is not None and found[1](AIPERF / run / name).format == FORMAT_OF[name]


def test_other_files_are_not_claimed_by_aiperf() -> None:
    ours = {fmt for fmt in FORMAT_OF.values()}
    others = [p for p in DATA.rglob("*") if p.is_file()
              and not (p.is_relative_to(AIPERF) and p.name in FORMAT_OF)]
    assert any(p.name == "truth.jsonl" for p in others) and len(others) > 5
    for path in others:
        head = path.read_bytes()[:64 * 1024]
        assert [f for f, sniff, _ in formats() if f in ours and sniff(head)] == [], path


def test_a_renamed_file_is_still_recognised(tmp_path: Path) -> None:
    copy = tmp_path / "results.txt"
    copy.write_bytes((AIPERF / "refserver" / RECORDS).read_bytes())
    assert sniff_format(copy)[0] == FORMAT_OF[RECORDS]


# ---- bad files: one line naming the line and the field ----------------------------


def _lines(run: str, name: str) -> list[str]:
    return (AIPERF / run / name).read_text().splitlines(keepends=True)


def _error(read, path: Path) -> PeerFormatError:
    with pytest.raises(PeerFormatError) as info:
        read(path)
    located = info.value.located(path)
    assert "\n" not in located and str(path) in located
    return info.value


def test_truncated_jsonl_names_the_cut_line(tmp_path: Path) -> None:
    lines = _lines("refserver", RAW)
    bad = tmp_path / "cut.jsonl"
    bad.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    err = _error(read_raw, bad)
    assert err.line == len(lines) and "cut off" in err.message


def test_another_aiperf_export_given_to_the_wrong_reader(tmp_path: Path) -> None:
    err = _error(read_raw, AIPERF / "refserver" / RECORDS)
    assert (err.line, err.field) == (1, "start_perf_ns")
    err = _error(read_summary, AIPERF / "refserver" / RAW)
    assert err.line is None and "JSON" in err.message


def test_a_newer_summary_schema_is_recognised_then_refused(tmp_path: Path) -> None:
    doc = json.loads((AIPERF / "refserver" / SUMMARY).read_text())
    doc["schema_version"] = "2.0"
    bad = tmp_path / "newer.json"
    bad.write_text(json.dumps(doc))
    assert sniff_format(bad)[0] == FORMAT_OF[SUMMARY]
    err = _error(read_summary, bad)
    assert err.field == "schema_version" and "2.0" in err.message


def test_a_newer_aiperf_major_in_the_raw_export_is_refused(tmp_path: Path) -> None:
    lines = _lines("refserver", RAW)
    lines[3] = lines[3].replace('"User-Agent":"aiperf/0.13.0"', '"User-Agent":"aiperf/1.0.0"')
    bad = tmp_path / "newer.jsonl"
    bad.write_text("".join(lines))
    assert sniff_format(bad)[0] == FORMAT_OF[RAW]
    err = _error(read_raw, bad)
    assert (err.line, err.field) == (4, "request_headers.User-Agent")


def test_nan_latency_names_its_line(tmp_path: Path) -> None:
    lines = _lines("refserver", RECORDS)
    row = json.loads(lines[2])
    row["metrics"]["time_to_first_token"]["value"] = float("nan")
    lines[2] = json.dumps(row) + "\n"  # json.dumps writes NaN, as a careless tool would
    bad = tmp_path / "nan.jsonl"
    bad.write_text("".join(lines))
    err = _error(read_records, bad)
    assert err.line == 3 and "NaN" in err.message


def test_negative_gap_names_line_and_field(tmp_path: Path) -> None:
    lines = _lines("refserver", RECORDS)
    row = json.loads(lines[4])
    row["metrics"]["inter_chunk_latency"]["value"][5] = -0.5
    lines[4] = json.dumps(row) + "\n"
    bad = tmp_path / "negative.jsonl"
    bad.write_text("".join(lines))
    err = _error(read_records, bad)
    assert (err.line, err.field) == (5, "metrics.inter_chunk_latency") and "item 5" in err.message


def test_gaps_that_do_not_add_up_to_the_latency_are_refused(tmp_path: Path) -> None:
    lines = _lines("refserver", RECORDS)
    row = json.loads(lines[0])
    row["metrics"]["inter_chunk_latency"]["value"].pop()  # one chunk's gap lost
    lines[0] = json.dumps(row) + "\n"
    bad = tmp_path / "short.jsonl"
    bad.write_text("".join(lines))
    err = _error(read_records, bad)
    assert (err.line, err.field) == (1, "metrics.inter_chunk_latency")


def test_raw_stamps_going_back_are_refused_without_quoting_the_prompt(tmp_path: Path) -> None:
    lines = _lines("refserver", RAW)
    row = json.loads(lines[1])
    row["responses"][3]["perf_ns"] = row["responses"][2]["perf_ns"] - 1
    prompt = row["payload"]["messages"][0]["content"]
    lines[1] = json.dumps(row) + "\n"
    bad = tmp_path / "backwards.jsonl"
    bad.write_text("".join(lines))
    err = _error(read_raw, bad)
    assert (err.line, err.field) == (2, "responses") and "item 3" in err.message
    assert prompt[:20] not in err.located(bad)


def test_a_summary_past_the_size_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import importer.peers.files as files

    monkeypatch.setattr(files, "MAX_JSON_BYTES", 1024)  # as a 2 GB file would be, without one
    err = _error(read_summary, AIPERF / "refserver" / SUMMARY)
    assert "MiB" in err.message and err.line is None


def test_a_wrong_unit_is_refused(tmp_path: Path) -> None:
    lines = _lines("refserver", RECORDS)
    row = json.loads(lines[0])
    row["metrics"]["time_to_first_token"]["unit"] = "s"
    lines[0] = json.dumps(row) + "\n"
    bad = tmp_path / "unit.jsonl"
    bad.write_text("".join(lines))
    err = _error(read_records, bad)
    assert (err.line, err.field) == (1, "metrics.time_to_first_token.unit")


def test_mixed_perf_clocks_in_the_raw_export_are_refused(tmp_path: Path) -> None:
    lines = _lines("refserver", RAW)
    row = json.loads(lines[6])  # as if its worker ran on another host, booted an hour later
    row["start_perf_ns"] -= 3600 * 10**9
    for resp in row["responses"]:
        resp["perf_ns"] -= 3600 * 10**9
    lines[6] = json.dumps(row) + "\n"
    bad = tmp_path / "mixed.jsonl"
    bad.write_text("".join(lines))
    err = _error(read_raw, bad)
    assert (err.line, err.field) == (7, "start_perf_ns") and "more than one clock" in err.message


def test_a_non_streaming_answer_is_one_chunk(tmp_path: Path) -> None:
    row = json.loads(_lines("refserver", RAW)[0])
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "w1 w2 w3"}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    stamp = row["responses"][-1]["perf_ns"]
    row["responses"] = [{"perf_ns": stamp, "text": json.dumps(body), "content_type": "application/json"}]
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (req,) = read_raw(path).requests
    assert (req.chunk_ns, req.end_ns, req.chunk_tokens, req.output_tokens, req.prompt_tokens) == (
        (stamp,), stamp, None, 3, 7)
