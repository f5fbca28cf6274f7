"""Bad files, the ways every peer format can break: one line naming file, line and field.

Over importer/peers/files.py (shared by every reader) and the MLPerf Endpoints
events.jsonl reader. The 2 GB cases never write 2 GB to disk: a sparse file
(truncate) for "too large", a FIFO fed from a generator for "valid and huge".
"""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from importer.peers import files
from importer.peers.files import iter_jsonl, load_json, number
from importer.peers.mlperf_endpoints import read as read_events
from importer.peers.model import PeerFormatError

TWO_GB = 2 * 1024**3


def _one_line(path: Path, exc: pytest.ExceptionInfo) -> str:
    msg = exc.value.located(path)
    assert "\n" not in msg and str(path) in msg
    return msg


def _sparse(tmp_path: Path, name: str, size: int = TWO_GB) -> Path:
    p = tmp_path / name
    with open(p, "wb") as fh:
        fh.truncate(size)
    assert p.stat().st_size == size
    return p


def test_whole_document_json_is_refused_by_size_without_reading(tmp_path, monkeypatch):
    p = _sparse(tmp_path, "big.json")

    def no_open(*args, **kwargs):
        raise AssertionError("load_json opened a file it should refuse by size")

    monkeypatch.setattr(files, "open", no_open, raising=False)
    with pytest.raises(PeerFormatError) as exc:
        load_json(p)
    assert _one_line(p, exc) == (f"{p}: 2,048 MiB is larger than the 512 MiB a whole-document JSON "
                                 "import reads; split the run or export JSON Lines")


def test_jsonl_without_newlines_is_refused_after_one_line_cap(tmp_path, monkeypatch):
    """A 2 GB file with no newline must not be read whole to find its first line."""
    p = _sparse(tmp_path, "big.jsonl")
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(PeerFormatError) as exc:
            next(iter_jsonl(p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _one_line(p, exc) == f"{p}:1: line longer than 1 MiB"
    assert peak < 8 * 1024 * 1024


def _fifo_from(tmp_path: Path, lines: Iterator[bytes]) -> tuple[Path, threading.Thread]:
    """A named pipe a thread fills from `lines`: a 2 GB file that never touches the disk."""
    p = tmp_path / "stream.jsonl"
    os.mkfifo(p)

    def feed() -> None:
        try:
            with open(p, "wb") as fh:
                for line in lines:
                    fh.write(line)
        except BrokenPipeError:
            pass

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    return p, t


LINE_PAD = 4 * 1024 * 1024 - 64  # each line about 4 MiB: 512 lines make 2 GiB
LINE = LINE_PAD + 64


def _generic_lines(n: int) -> Iterator[bytes]:
    """Each line's head and its shared 4 MiB tail, yielded apart: the feeder allocates nothing."""
    tail = b'"pad": "' + b"x" * LINE_PAD + b'"}\n'
    for i in range(n):
        yield b'{"i": %d, ' % i
        yield tail


def _peak_generic(tmp_path: Path, n: int) -> int:
    p, feeder = _fifo_from(tmp_path, _generic_lines(n))
    tracemalloc.start()
    try:
        count, total = 0, 0
        for line, obj in iter_jsonl(p):
            assert obj["i"] == line - 1
            count, total = count + 1, total + len(obj["pad"])
            del obj
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    feeder.join(timeout=30)
    os.unlink(p)
    assert count == n and total == n * LINE_PAD
    return peak


def test_two_gb_of_valid_jsonl_is_streamed_in_constant_memory(tmp_path):
    """Peak memory reading 2 GiB is that of reading 16 MiB: a few copies of one line, never the file."""
    small = _peak_generic(tmp_path, 4)
    big = _peak_generic(tmp_path, TWO_GB // LINE)
    assert big <= small + LINE // 2 and big < 16 * LINE


def _event_lines(chunks: int) -> Iterator[bytes]:
    """One sample whose chunks each carry about 4 MiB of output text."""
    def ev(kind: str, ts: int, data=None) -> bytes:
        return json.dumps({"event_type": kind, "timestamp_ns": ts, "sample_uuid": "s1",
                           "conversation_id": "", "turn": None, "data": data}).encode() + b"\n"
    pad = "w " * (LINE_PAD // 2)
    yield ev("sample.issued", 1_000)
    for k in range(chunks):
        yield ev("sample.recv_first" if k == 0 else "sample.recv_non_first", 2_000 + k,
                 ["TextModelOutput", pad])
    yield ev("sample.complete", 9_000)


def _peak_events(tmp_path: Path, chunks: int) -> int:
    p, feeder = _fifo_from(tmp_path, _event_lines(chunks))
    tracemalloc.start()
    try:
        run = read_events(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    feeder.join(timeout=30)
    os.unlink(p)
    (req,) = run.requests
    assert len(req.chunk_ns) == chunks and req.end_ns == 9_000
    return peak


def test_events_reader_keeps_no_line(tmp_path):
    """256 MiB of events take about what 16 MiB do: the reader keeps stamps, not text.

    (Kept text would add 60 lines, 240 MiB; two lines' slack covers the feeder
    thread building its next line while the reader parses.)"""
    small = _peak_events(tmp_path, 4)
    big = _peak_events(tmp_path, 64)
    assert big <= small + 2 * LINE


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_naming_the_line(tmp_path, constant):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n{"latency": ' + constant + "}\n")
    with pytest.raises(PeerFormatError) as exc:
        list(iter_jsonl(p))
    assert _one_line(p, exc) == f"{p}:2: not valid JSON ({constant} is not a number JSON allows)"
    q = tmp_path / "x.json"
    q.write_text('{"latency": [1, ' + constant + "]}")
    with pytest.raises(PeerFormatError) as exc:
        load_json(q)
    assert _one_line(q, exc) == f"{q}: not valid JSON ({constant} is not a number JSON allows)"


def test_a_number_too_large_for_a_float_is_refused_by_field():
    """1e999 is valid JSON but parses to inf: the number check names the field."""
    obj = json.loads('{"ttft": 1e999, "gaps": [1, -1e999]}')
    with pytest.raises(PeerFormatError) as exc:
        number(obj, "ttft", 7)
    assert (exc.value.line, exc.value.field, exc.value.message) == (7, "ttft",
                                                                    "expected a finite number, found inf")
    with pytest.raises(PeerFormatError, match=r"item 1: expected a finite number, found -inf"):
        files.numbers(obj, "gaps", 7)


def test_a_truncated_last_line_is_said_so(tmp_path):
    p = tmp_path / "cut.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": 3, "b": [1, 2')
    got = []
    with pytest.raises(PeerFormatError) as exc:
        for _, obj in iter_jsonl(p):
            got.append(obj["a"])
    assert got == [1, 2]
    assert _one_line(p, exc) == f"{p}:3: the last line is cut off (the file was truncated)"
    p.write_bytes(b'{"a": 1}\n{"a": 2}')  # a whole last line without its newline is fine
    assert [o["a"] for _, o in iter_jsonl(p)] == [1, 2]
    p.write_bytes(b'{"a": 1}\n{"a": 2, oops}\n{"a": 3}\n')  # broken mid-file: not "cut off"
    with pytest.raises(PeerFormatError) as exc:
        list(iter_jsonl(p))
    assert _one_line(p, exc).startswith(f"{p}:2: not valid JSON (")


def test_bytes_that_are_not_utf8(tmp_path):
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b'{"a": 1}\n\n{"a": "\xff\xfe"}\n')
    with pytest.raises(PeerFormatError) as exc:
        list(iter_jsonl(p))
    assert _one_line(p, exc) == f"{p}:3: byte 7 of the line is not UTF-8"
    q = tmp_path / "bin.json"
    q.write_bytes(b'{"a": "ok", "b": "\xc3("}')
    with pytest.raises(PeerFormatError) as exc:
        load_json(q)
    assert _one_line(q, exc) == f"{q}: byte 18 is not UTF-8"
    e = tmp_path / "events.jsonl"
    e.write_bytes(b'{"event_type": "session.started", "timestamp_ns": 1, "sample_uuid": ""}\n\x80\n')
    with pytest.raises(PeerFormatError) as exc:
        read_events(e)
    assert _one_line(e, exc) == f"{e}:2: byte 0 of the line is not UTF-8"


@pytest.mark.parametrize("line, kind", [("[1, 2]", "list"), ('"text"', "str"), ("42", "int"),
                                        ("null", "NoneType")])
def test_a_line_that_is_not_an_object(tmp_path, line, kind):
    p = tmp_path / "events.jsonl"
    p.write_text('{"event_type": "session.started", "timestamp_ns": 1, "sample_uuid": ""}\n' + line + "\n")
    with pytest.raises(PeerFormatError) as exc:
        list(iter_jsonl(p))
    assert _one_line(p, exc) == f"{p}:2: expected a JSON object, found {kind}"
    with pytest.raises(PeerFormatError) as exc:
        read_events(p)
    assert exc.value.line == 2


def test_a_fractional_count_is_refused_not_truncated() -> None:
    """A token count of 31.7 is no count: truncating it to 31 would publish a number the
    file never held."""
    from importer.peers.files import count_at

    assert count_at({"output_tokens": 32.0}, "output_tokens", "[0]") == 32
    assert count_at({}, "output_tokens", "[0]") is None
    with pytest.raises(PeerFormatError, match="expected a whole number, found 31.7") as exc:
        count_at({"output_tokens": 31.7}, "output_tokens", "[0]")
    assert exc.value.field == "[0].output_tokens"
