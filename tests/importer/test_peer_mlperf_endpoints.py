"""MLPerf Endpoints events.jsonl reader, checked against the reference server's truth log.

The fixture is HAND-MADE (handmade-events.jsonl): the tool is not on the
package registry reachable here, so scripts/peers/mlperf_endpoints.py played
its part against the reference server, writing events in the tool's shape
(docs/import-mlperf-endpoints.md). refserver-truth.jsonl is the server's own
record of that run; its request_id is each event's sample_uuid.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from importer.peers import formats, sniff_format
from importer.peers.mlperf_endpoints import FORMAT, read, sniff
from importer.peers.model import (
    PUBLISHED_METRICS,
    PUBLISHED_TOTALS,
    TIER_CHUNK,
    PeerFormatError,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
FIXTURE = DATA / "mlperf-endpoints" / "handmade-events.jsonl"
TRUTH = DATA / "mlperf-endpoints" / "refserver-truth.jsonl"
# Client stamp minus the server's send stamp of the same chunk: loopback plus one
# Python thread reading the socket. Found 0.02-0.87 ms in the fixture's run on this
# 2-core host shared with other jobs; 2 ms allows that and nothing more.
CHUNK_BOUND_NS = 2_000_000
# sample.issued is taken just before the request is written; the server stamps its
# parsed arrival (recv_ns): found 0.3-1.8 ms.
SEND_BOUND_NS = 3_000_000


def _events() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def _truth() -> dict[str, dict]:
    return {r["request_id"]: r for r in map(json.loads, TRUTH.read_text().splitlines())}


def _uuid_by_send() -> dict[int, str]:
    return {e["timestamp_ns"]: e["sample_uuid"] for e in _events() if e["event_type"] == "sample.issued"}


def test_fixture_reads_at_chunk_tier_on_one_clock():
    run = read(FIXTURE)
    assert (run.tool, run.format, run.tier) == ("mlperf-endpoints", FORMAT, TIER_CHUNK)
    assert run.tool_version is None
    assert "CLOCK_MONOTONIC" in run.clock
    assert len(run.requests) == 12 and all(r.error is None for r in run.requests)
    assert all(r.chunk_tokens is None and r.output_tokens is None for r in run.requests)
    assert any("tokens per chunk" in lost for lost in run.lost)
    assert run.published == {}  # events.jsonl holds no summary figures
    assert set(run.definitions) <= set(PUBLISHED_METRICS) | set(PUBLISHED_TOTALS)


def test_every_stamp_matches_the_truth_log():
    run, truth, uid = read(FIXTURE), _truth(), _uuid_by_send()
    assert len(run.requests) == len(truth)
    for req in run.requests:
        t = truth[uid[req.send_ns]]
        assert len(req.chunk_ns) == len(t["chunks"]) == t["max_tokens"]
        for got, (sent, _, _) in zip(req.chunk_ns, t["chunks"], strict=True):
            assert 0 < got - sent <= CHUNK_BOUND_NS
        assert 0 < t["recv_ns"] - req.send_ns <= SEND_BOUND_NS
        assert req.end_ns is not None and abs(req.end_ns - t["finish_ns"]) <= CHUNK_BOUND_NS
        assert req.end_ns >= t["chunks"][-1][0]


def test_tool_definitions_recomputed_from_rows_agree_with_the_truth():
    """TTFT and TPOT under the tool's definitions (source: metrics_table.py), from our rows."""
    run, truth, uid = read(FIXTURE), _truth(), _uuid_by_send()
    ttft, true_ttft, tpot = [], [], []
    for req in run.requests:
        t = truth[uid[req.send_ns]]
        ttft.append(req.chunk_ns[0] - req.send_ns)
        true_ttft.append(t["chunks"][0][0] - t["recv_ns"])
        after_first = sum(n for _, n, _ in t["chunks"][1:])  # the toy tokenizer: one word, one token
        tpot.append((req.end_ns - req.chunk_ns[0]) / after_first)
    diff = np.array(ttft) - np.array(true_ttft)
    assert np.all(diff > 0) and np.all(diff <= SEND_BOUND_NS + CHUNK_BOUND_NS)
    step_ns = 1e9 / 200  # the scenario's tokens_per_s
    assert abs(float(np.percentile(tpot, 90)) - step_ns) <= 0.05 * step_ns
    tps_per_user = 1000 / (float(np.percentile(tpot, 90)) / 1e6)  # 1000 / tpot_p90_ms
    assert 190 <= tps_per_user <= 210


def test_sniff_claims_its_fixture_once_and_nothing_else():
    assert [name for name, s, _ in formats() if s(FIXTURE.read_bytes()[:65536])] == [FORMAT]
    assert sniff_format(FIXTURE)[0] == FORMAT
    others = [p for p in DATA.rglob("*") if p.is_file() and p.parent.name != "mlperf-endpoints"]
    others.append(TRUTH)
    assert others
    for p in others:
        assert not sniff(p.read_bytes()[:65536]), p


def _write(tmp_path: Path, rows: list[dict | str], name: str = "events.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def _ev(kind: str, ts: int, uid: str = "", data=None) -> dict:
    return {"event_type": kind, "timestamp_ns": ts, "sample_uuid": uid, "conversation_id": "",
            "turn": None, "data": data}


def _sample(uid: str, t0: int, gaps=(10, 5, 5)) -> list[dict]:
    rows, t = [_ev("sample.issued", t0, uid)], t0
    for i, g in enumerate(gaps):
        t += g
        rows.append(_ev("sample.recv_first" if i == 0 else "sample.recv_non_first", t, uid))
    rows.append(_ev("sample.complete", t + 1, uid))
    return rows


def _located(path: Path, exc: pytest.ExceptionInfo) -> str:
    msg = exc.value.located(path)
    assert "\n" not in msg
    return msg


def test_truncated_file_names_the_last_line(tmp_path):
    text = "".join(json.dumps(r) + "\n" for r in _sample("a", 100))
    p = tmp_path / "events.jsonl"
    p.write_text(text[:-9])
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert _located(p, exc) == f"{p}:5: the last line is cut off (the file was truncated)"


def test_another_tools_file_is_refused_naming_the_field():
    with pytest.raises(PeerFormatError) as exc:
        read(TRUTH)
    assert exc.value.line == 1 and exc.value.field == "event_type"


def test_newer_schema_event_is_refused_but_still_sniffed_as_ours(tmp_path):
    p = _write(tmp_path, [_ev("session.started", 1), _ev("sample.recv_tokens", 5, "a")])
    assert sniff(p.read_bytes())
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    msg = _located(p, exc)
    assert msg.startswith(f"{p}:2: event_type: unknown event type 'sample.recv_tokens'")


def test_nan_stamp_names_line_and_field(tmp_path):
    p = _write(tmp_path, [_ev("session.started", 1),
                          '{"event_type": "sample.issued", "timestamp_ns": NaN, "sample_uuid": "a"}'])
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert _located(p, exc).startswith(f"{p}:2: not valid JSON (NaN is not a number JSON allows")
    p = _write(tmp_path, ['{"event_type": "sample.issued", "timestamp_ns": 1e999, "sample_uuid": "a"}'])
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert _located(p, exc) == f"{p}:1: timestamp_ns: expected a finite number, found inf"


def test_fractional_stamp_is_refused(tmp_path):
    p = _write(tmp_path, [_ev("sample.issued", 1.5, "a")])
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert exc.value.field == "timestamp_ns" and exc.value.line == 1


@pytest.mark.parametrize("gaps, line, before", [((10, -3, 5), 3, "its previous chunk"),
                                               ((-4, 5), 2, "its sample.issued")])
def test_negative_gap_names_line_and_field(tmp_path, gaps, line, before):
    p = _write(tmp_path, _sample("a", 100, gaps))
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert _located(p, exc).startswith(f"{p}:{line}: timestamp_ns: negative gap:")
    assert before in str(exc.value)


def test_out_of_order_events_are_refused(tmp_path):
    rows = _sample("a", 100)
    rows.insert(3, _ev("sample.recv_first", 116, "a"))
    p = _write(tmp_path, rows)
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert exc.value.line == 4 and "second sample.recv_first" in str(exc.value)
    p = _write(tmp_path, [_ev("sample.recv_first", 5, "ghost")])
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert exc.value.field == "sample_uuid" and exc.value.line == 1


def test_errors_warmup_and_prompt_ids(tmp_path):
    rows = [_ev("session.started", 1)] + _sample("warm", 10)
    rows += [_ev("session.start_performance_tracking", 50)]
    rows += [_ev("sample.issued", 100, "ok", ["PromptData", None, [5, 6, 7]])] + _sample("ok", 100)[1:]
    rows += [_ev("sample.issued", 200, "bad"),
             _ev("error.client", 210, "bad", ["ErrorData", "HTTPError", "status 500"]),
             _ev("sample.complete", 211, "bad")]
    rows += [_ev("sample.issued", 300, "cut"), _ev("sample.recv_first", 305, "cut")]
    run = read(_write(tmp_path, rows))
    assert [r.send_ns for r in run.requests] == [100, 200, 300]
    ok, bad, cut = run.requests
    assert ok.prompt_tokens == 3 and ok.chunk_ns == (110, 115, 120) and ok.end_ns == 121 and ok.error is None
    assert bad.error == "HTTPError: status 500"
    assert cut.end_ns is None and cut.error.startswith("no sample.complete event")
    assert run.extra == {"untracked_samples": "1"}


def test_error_messages_never_quote_prompt_text(tmp_path):
    secret = "p-secret-prompt-words"
    rows = [_ev("sample.issued", 100, "a", ["PromptData", secret]), _ev("sample.recv_first", 90, "a")]
    p = _write(tmp_path, rows)
    with pytest.raises(PeerFormatError) as exc:
        read(p)
    assert secret not in _located(p, exc)


def test_a_file_without_tracking_events_measures_every_sample(tmp_path):
    run = read(_write(tmp_path, [_ev("session.started", 1)] + _sample("a", 10) + _sample("b", 40)))
    assert [r.send_ns for r in run.requests] == [10, 40] and run.extra == {}
    with pytest.raises(PeerFormatError, match="no tracked sample.issued"):
        read(_write(tmp_path, [_ev("session.start_performance_tracking", 1),
                               _ev("session.stop_performance_tracking", 2)] + _sample("a", 10)))
