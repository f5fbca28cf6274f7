"""importer/peers: validate -> write -> read_run -> aggregate, on synthetic runs with exact stamps.

The run: a closed loop at concurrency 2. Every request is sent, gets its first
token 10 ms later, then 29 more one-token chunks 10 ms apart (end: its last
chunk, 300 ms after the send), and its slot sends the next at once. Slot 0
starts at 0 ms, slot 1 at 50 ms; each sends 4 requests. So the in-flight
count reaches 2 at 50 ms and falls for good at 1200 ms (slot 0's last end
after the last send, 950 ms): the window is [50, 1200] ms. Over it, by hand:

* TTFT: 10 ms every request; time between tokens 10 ms; per-request 100 tok/s;
* tokens in the window: slot 0's 120 less its first request's 4 chunks before
  50 ms, slot 1's first three requests' 90 and its last request's chunks
  960..1200 ms (25): 231 over 1.15 s;
* completed in the window: slot 0's 4 (the last ends at 1200 ms) + slot 1's 3.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import importer.write
from importer.peers.model import (
    TIER_AGGREGATE,
    TIER_CHUNK,
    TIER_GAP,
    TIER_REQUEST,
    PeerFormatError,
    PeerRequest,
    PeerRun,
)
from importer.peers.validate import validate
from importer.peers.write import chunk_stamps, cumulative_tokens, write_peer_run
from rundir import contract
from rundir.io import read_run
from rundir.validate import checked_run, rechecked_cells, validate_run
from site_builder.aggregate import aggregate_run

MS = 1_000_000
BASE = 10**12  # a monotonic clock's stamp: 1,000 s after boot
WINDOW = (BASE + 50 * MS, BASE + 1200 * MS)
N = 30  # chunks a request


def _request(send_ms: int, line: int) -> PeerRequest:
    send = BASE + send_ms * MS
    chunks = tuple(send + (10 + 10 * k) * MS for k in range(N))
    return PeerRequest(send_ns=send, end_ns=chunks[-1], chunk_ns=chunks,
                       chunk_tokens=tuple(range(1, N + 1)), prompt_tokens=128, output_tokens=N,
                       line=line)


def chunk_run(source: Path, **changes) -> PeerRun:
    sends = [0, 300, 600, 900, 50, 350, 650, 950]
    run = PeerRun(
        tool="synthtool", tool_version="1.2.3", format="synthtool/raw.jsonl", tier=TIER_CHUNK,
        source_file=source, clock="time.perf_counter_ns (CLOCK_MONOTONIC)",
        requests=tuple(_request(s, i + 1) for i, s in enumerate(sends)),
        published={"ttft_ms.p50": 10.0, "itl_ms.p50": 10.0, "completed": 8, "output_tokens": 240},
        definitions={"itl_ms": "mean gap between chunks of a request"},
        lost=("the server's finish reasons",), concurrency=2, input_tokens=128, output_tokens=N,
        model="tiny-model", engine="llama.cpp", measured_at="2026-12-01T10:00:00Z")
    return dataclasses.replace(run, **changes)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "raw.jsonl"
    path.write_text('{"synthetic": 1}\n')
    return path


def _cell(out: Path, result) -> tuple:
    data, _, found = checked_run(result.path)  # as site_builder.load.load_run reads it
    data.cells = rechecked_cells(data, found)
    agg = aggregate_run(data)
    (cell,) = agg.cells
    return data, cell


def test_chunk_tier_our_figures_over_the_plateau(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "data"
    result = write_peer_run(chunk_run(source), out)
    assert result.created
    data, cell = _cell(out, result)
    row = data.cells.to_pylist()[0]
    assert (row["window_start_ns"], row["window_end_ns"]) == WINDOW
    assert row["token_counting"] == contract.COUNT_PEER_CHUNKS
    assert cell.status == contract.VALID, cell.reason
    assert (cell.phase, cell.context, cell.concurrency) == (contract.DECODE, 128, 2)
    assert cell.ttft_ms == pytest.approx(10.0)
    assert cell.tbt_ms == pytest.approx(10.0)
    assert cell.per_request_tok_s == pytest.approx(100.0)
    assert cell.total_tok_s == pytest.approx(231 / 1.15)
    assert cell.completed == 7 and cell.output_tokens == 231
    imp = data.info.imported
    assert (imp.tool, imp.tool_version, imp.tier, imp.source_file) == ("synthtool", "1.2.3", "chunk",
                                                                       "raw.jsonl")
    assert {f.name: f.value for f in imp.published}["itl_ms.p50"] == 10.0
    assert imp.definitions[0].name == "itl_ms"
    assert data.info.parameters.contexts == [128] and data.info.parameters.concurrency == [2]
    assert "configured input length" in data.info.notes
    assert row["pub_ttft_ms"] == 10.0 and row["pub_completed"] == 8 and row["pub_tbt_ms"] is None


def test_gap_tier_rebuilds_the_original_stamps(source: Path, tmp_path: Path) -> None:
    original = chunk_run(source)
    rebuilt = []
    for req in original.requests:
        gaps = [b - a for a, b in zip(req.chunk_ns, req.chunk_ns[1:], strict=False)]
        stamps = chunk_stamps(req.send_ns, req.chunk_ns[0] - req.send_ns, gaps)
        assert stamps == req.chunk_ns
        rebuilt.append(dataclasses.replace(req, chunk_ns=stamps, chunk_tokens=None))
    run = dataclasses.replace(original, tier=TIER_GAP, requests=tuple(rebuilt))
    data, cell = _cell(tmp_path / "data", write_peer_run(run, tmp_path / "data"))
    assert data.cells.column("token_counting")[0].as_py() == contract.COUNT_PEER_CHUNKS_TOTAL
    stored = sorted(data.requests.column("chunk_ns").to_pylist())
    assert stored == sorted(list(r.chunk_ns) for r in original.requests)
    assert cell.status == contract.VALID
    assert cell.tbt_ms == pytest.approx(10.0) and cell.total_tok_s == pytest.approx(231 / 1.15)


def test_total_unlike_the_chunks_is_spread_by_rule_and_never_valid(source: Path, tmp_path: Path) -> None:
    reqs = tuple(dataclasses.replace(r, chunk_tokens=None, output_tokens=75)
                 for r in chunk_run(source).requests)
    tokens, how = cumulative_tokens(reqs[0], TIER_GAP)
    assert how == contract.COUNT_PEER_SPREAD
    assert tokens[:6] == (3, 5, 8, 10, 13, 15) and tokens[-1] == 75  # ceil(75 k / 30): never 1 a chunk
    run = dataclasses.replace(chunk_run(source), tier=TIER_GAP, requests=reqs)
    data, cell = _cell(tmp_path / "data", write_peer_run(run, tmp_path / "data"))
    assert data.requests.column("chunk_tokens").to_pylist()[0][-1] == 75
    assert cell.status == contract.ERROR and "not verified" in cell.reason
    assert cell.total_tok_s is None and cell.tbt_ms is None


def test_no_total_at_all_is_one_a_chunk_unverified(source: Path, tmp_path: Path) -> None:
    reqs = tuple(dataclasses.replace(r, chunk_tokens=None, output_tokens=None)
                 for r in chunk_run(source).requests)
    run = dataclasses.replace(chunk_run(source), tier=TIER_GAP, requests=reqs)
    data, cell = _cell(tmp_path / "data", write_peer_run(run, tmp_path / "data"))
    assert data.cells.column("token_counting")[0].as_py() == contract.COUNT_CHUNKS_UNVERIFIED
    assert cell.status == contract.ERROR and cell.total_tok_s is None


def test_request_tier_publishes_no_time_between_tokens(source: Path, tmp_path: Path) -> None:
    reqs = tuple(dataclasses.replace(r, chunk_ns=(r.chunk_ns[0], r.chunk_ns[-1]), chunk_tokens=None)
                 for r in chunk_run(source).requests)
    run = dataclasses.replace(chunk_run(source), tier=TIER_REQUEST, requests=reqs)
    data, cell = _cell(tmp_path / "data", write_peer_run(run, tmp_path / "data"))
    assert data.requests.column("chunk_tokens").to_pylist()[0] == [1, N]
    assert cell.token_counting == contract.COUNT_PEER_REQUEST
    assert cell.status == contract.VALID, cell.reason
    assert cell.ttft_ms == pytest.approx(10.0) and cell.completed == 7
    assert cell.tbt_ms is None and cell.per_request_tok_s is None and cell.total_tok_s is None
    assert not any(k.startswith(("tbt_ms", "per_request")) for k in cell.tails)
    assert cell.tails["e2e_ms_p50"] == pytest.approx(300.0)
    assert not cell.has_detail


def test_never_reaching_the_concurrency_is_an_error_without_a_window(source: Path, tmp_path: Path) -> None:
    run = chunk_run(source, concurrency=3)
    data, cell = _cell(tmp_path / "data", write_peer_run(run, tmp_path / "data"))
    row = data.cells.to_pylist()[0]
    assert row["window_start_ns"] is None and cell.status == contract.ERROR
    assert "never reached the configured concurrency 3" in cell.reason and cell.ttft_ms is None


def test_failed_request_makes_the_cell_an_error(source: Path, tmp_path: Path) -> None:
    reqs = list(chunk_run(source).requests)
    reqs[2] = dataclasses.replace(reqs[2], error="HTTP 500 key=sk-abcdefabcdefabcdef123456")
    run = chunk_run(source, requests=tuple(reqs))
    result = write_peer_run(run, tmp_path / "data")
    stored = read_run(result.path).cells.to_pylist()[0]  # as written, before the builder's re-check
    assert stored["status"] == contract.ERROR and stored["reason"].startswith("HTTP 500")
    data, cell = _cell(tmp_path / "data", result)
    assert cell.status == contract.ERROR
    errors = [e for e in data.requests.column("error").to_pylist() if e]
    assert errors and "sk-abcdef" not in errors[0]


def test_rate_run_is_a_rate_cell_over_first_end_to_last_send(source: Path, tmp_path: Path) -> None:
    reqs = tuple(_request(s, i + 1) for i, s in enumerate([0, 100, 200, 300, 400, 500]))
    run = chunk_run(source, requests=reqs, concurrency=None, rate=10.0)
    result = write_peer_run(run, tmp_path / "data")
    data = read_run(result.path)
    row = data.cells.to_pylist()[0]
    assert row["phase"] == contract.RATE and row["rate_target"] == 10.0 and row["concurrency"] == 0
    assert (row["window_start_ns"], row["window_end_ns"]) == (BASE + 300 * MS, BASE + 500 * MS)
    assert set(data.requests.column("purpose").to_pylist()) == {contract.PURPOSE_ARRIVAL}
    agg = aggregate_run(data)
    (rate,) = agg.rate
    assert rate.completed == 2  # sent at 300 and 400 ms: inside [300, 500)
    assert rate.tails["ttft_ms_p50"] == pytest.approx(10.0)


def test_aggregate_tier_keeps_the_published_figures(source: Path, tmp_path: Path) -> None:
    run = chunk_run(source, tier=TIER_AGGREGATE, requests=())
    data = read_run(write_peer_run(run, tmp_path / "data").path)
    assert len(data.requests) == 0
    (cell,) = aggregate_run(data).cells
    assert cell.ttft_ms == 10.0 and cell.token_counting == contract.COUNT_PEER_AGGREGATE
    assert "not checked" in cell.reason


def test_reimport_names_the_run_already_there(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "data"
    first = write_peer_run(chunk_run(source), out)
    again = write_peer_run(chunk_run(source), out)
    assert not again.created and again.path == first.path and again.message()
    other = tmp_path / "other.jsonl"
    other.write_text('{"synthetic": 2}\n')  # another file, the same figures: another run
    third = write_peer_run(chunk_run(other), out)
    assert third.created and third.path != first.path


def test_failure_mid_write_leaves_nothing(source: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "data"

    def broken(_path):
        raise OSError("disk full")

    monkeypatch.setattr(importer.write, "seal", broken)
    with pytest.raises(OSError):
        write_peer_run(chunk_run(source), out)
    assert list(out.iterdir()) == []


def _bad(source: Path, index: int, **changes) -> PeerRun:
    reqs = list(chunk_run(source).requests)
    reqs[index] = dataclasses.replace(reqs[index], **changes)
    return chunk_run(source, requests=tuple(reqs))


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"end_ns": float("nan")}, "end_ns", "not a finite number"),
    ({"chunk_ns": (BASE + 320 * MS, BASE + 315 * MS)}, "chunk_ns", "negative gap"),
    ({"chunk_ns": (BASE + 280 * MS,), "chunk_tokens": (1,)}, "chunk_ns", "before the request was sent"),
    ({"end_ns": BASE + 400 * MS}, "end_ns", "before its last chunk"),
    ({"chunk_tokens": (1, 2, 3, 2, *range(5, N + 1))}, "chunk_tokens", "falls at chunk 4"),
    ({"chunk_tokens": (1, 2, 3)}, "chunk_tokens", "3 counts for 30 chunks"),
    ({"chunk_tokens": (float("inf"),) * N}, "chunk_tokens", "not a finite number"),
    ({"send_ns": BASE + 300.5 * MS}, "send_ns", "expected a whole number"),
])
def test_validate_refuses_naming_request_line_and_field(source: Path, tmp_path: Path, changes, field,
                                                        words) -> None:
    run = _bad(source, 1, **changes)
    with pytest.raises(PeerFormatError) as got:
        write_peer_run(run, tmp_path / "data")
    err = got.value
    assert err.field == field and err.line == 2 and words in err.message
    assert err.located(source).startswith(f"{source}:2: {field}: request 2 (line 2)")
    assert not (tmp_path / "data").exists()


def test_validate_refuses_mixed_clocks(source: Path) -> None:
    now = 1_780_000_000 * 10**9
    wall = now - 3600 * 10**9
    send = wall
    req = PeerRequest(send, send + 200 * MS, (send + 100 * MS,), (1,), 1, 1, line=9)
    run = chunk_run(source, requests=(*chunk_run(source).requests, req))
    with pytest.raises(PeerFormatError, match="mixed clocks: .*wall-clock") as got:
        validate(run, now_ns=now)
    assert got.value.line is not None
    far = dataclasses.replace(req, send_ns=BASE + 2 * 86400 * 10**9, end_ns=BASE + 2 * 86400 * 10**9 + 1,
                              chunk_ns=(BASE + 2 * 86400 * 10**9 + 1,))
    run = chunk_run(source, requests=(*chunk_run(source).requests, far))
    with pytest.raises(PeerFormatError, match="mixed clocks: stamps 48.0 h apart") as got:
        validate(run, now_ns=now)
    assert got.value.line == 9
    validate(chunk_run(source), now_ns=now)  # one clock: fine


@pytest.mark.parametrize(("changes", "words"), [
    ({"tier": TIER_AGGREGATE}, "tier aggregate holds 8 requests"),
    ({"requests": ()}, "tier chunk with no request at all"),
    ({"requests": (), "tier": TIER_AGGREGATE, "published": {}}, "nothing to import"),
    ({"tier": "bogus"}, "unknown tier"),
    ({"published": {"ttft_ms.p50": float("nan")}}, "ttft_ms.p50 is nan"),
])
def test_validate_refuses_tier_mismatch(source: Path, changes, words) -> None:
    with pytest.raises(PeerFormatError, match=words):
        validate(chunk_run(source, **changes))


def test_request_tier_with_every_chunk_is_refused(source: Path) -> None:
    with pytest.raises(PeerFormatError, match="30 chunk stamps at tier request"):
        validate(chunk_run(source, tier=TIER_REQUEST))


def test_bench_import_reads_a_sniffed_peer_file(source: Path, tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    import importer.cli
    from importer.cli import import_cmd

    out = tmp_path / "data"
    monkeypatch.setattr(importer.cli, "sniff_format", lambda p: ("synth", lambda q: chunk_run(q)))
    res = CliRunner().invoke(import_cmd, [str(source), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert read_run(Path(res.output.strip().splitlines()[0])).info.imported.tool == "synthtool"


def test_bench_import_peer_error_is_one_line_and_writes_nothing(source: Path, tmp_path: Path,
                                                                monkeypatch) -> None:
    from click.testing import CliRunner

    import importer.cli
    from importer.cli import import_cmd

    def read(_path: Path) -> PeerRun:
        raise PeerFormatError("negative gap", line=7, field="itl")

    out = tmp_path / "data"
    monkeypatch.setattr(importer.cli, "sniff_format", lambda p: ("synth", read))
    res = CliRunner().invoke(import_cmd, [str(source), "--out", str(out)])
    assert res.exit_code != 0
    assert res.output.strip() == f"error: {source}:7: itl: negative gap"
    assert not out.exists()
    # a run the reader reads but validate refuses: the same one line, nothing written
    bad = _bad(source, 1, end_ns=BASE + 400 * MS)
    monkeypatch.setattr(importer.cli, "sniff_format", lambda p: ("synth", lambda q: bad))
    res = CliRunner().invoke(import_cmd, [str(source), "--out", str(out)])
    assert res.exit_code != 0 and len(res.output.strip().splitlines()) == 1
    assert res.output.startswith(f"error: {source}:2: end_ns: request 2 (line 2)")
    assert not out.exists()


def test_request_tier_gap_is_no_stall_for_validate_or_the_builder(source: Path, tmp_path: Path) -> None:
    """At tier request a row holds the first and the last token only: the time between
    them is not a silence. `bench validate` must not call it a stall when the builder
    publishes the cell as stored (found on a real guidellm file: a 5.4 s "stall")."""
    reqs = []
    for k in range(3):  # stream k: 3 requests of 3.0 / 3.2 / 3.4 s, first token 10 ms after the send
        send, length = BASE + k * MS, (3_000 + 200 * k) * MS
        for _ in range(3):
            reqs.append(PeerRequest(send_ns=send, end_ns=send + length,
                                    chunk_ns=(send + 10 * MS, send + length), chunk_tokens=None,
                                    prompt_tokens=64, output_tokens=2, line=len(reqs) + 1))
            send += length
    reqs = tuple(reqs)  # ~3 s between a request's first and last token: no stamp, not a silence
    run = dataclasses.replace(chunk_run(source), tier=TIER_REQUEST, requests=reqs, concurrency=3)
    result = write_peer_run(run, tmp_path / "data")
    data, cell = _cell(tmp_path / "data", result)
    assert cell.status == contract.VALID
    report = validate_run(result.path)
    assert [p.line for p in report.problems] == []


def test_rows_without_a_shared_clock_get_no_window(source: Path, tmp_path: Path) -> None:
    """SGLang keeps each request's stamps relative to its own send (every send_ns 0):
    no in-flight count, window or slot exists, and the cell says so instead of
    measuring a 'plateau' of every request at once."""
    reqs = tuple(dataclasses.replace(r, send_ns=0, end_ns=r.end_ns - r.send_ns,
                                     chunk_ns=tuple(c - r.send_ns for c in r.chunk_ns))
                 for r in chunk_run(source).requests)
    result = write_peer_run(dataclasses.replace(chunk_run(source), requests=reqs), tmp_path / "data")
    row = read_run(result.path).cells.to_pylist()[0]
    assert row["window_start_ns"] is None and row["status"] == contract.ERROR
    assert row["reason"].startswith("no window: the file's stamps share no clock")
