"""Tests of the reference server's faults by request count and cell
(tests/refserver/inject.py): the fault and lifecycle tests land in a phase
through them, so each must fire exactly where it says, and the cell it reads
from a prompt must be the collector's own."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from rundir.io import read_run
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401  (the `refserver` fixture)
from tests.refserver.inject import cell_of

HTTP = httpx.Client(timeout=30)
D2 = ("decode", 128, 2)


def body(tag: str, max_tokens: int = 3, stream: bool = True) -> dict:
    """A chat request whose prompt carries a collector-style tag."""
    return {"model": "ref", "messages": [{"role": "user", "content": f"{tag} some words here"}],
            "max_tokens": max_tokens, "stream": stream}


def post(srv, tag: str, **kw) -> httpx.Response:
    return HTTP.post(srv.base_url + "/v1/chat/completions", json=body(tag, **kw))


def in_background(srv, tag: str) -> tuple[threading.Thread, dict]:
    """Send one request from a thread; its answer (or error) lands in the dict."""
    got: dict = {}

    def go() -> None:
        try:
            got["response"] = post(srv, tag)
        except httpx.HTTPError as exc:
            got["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, got


def test_cell_of_reads_the_collectors_tags() -> None:
    assert cell_of("[run1 d128-c2-s0] word".split()) == ("decode", 128, 2)
    assert cell_of("[run1.r1 d1024-c16-s15] w".split()) == ("decode", 1024, 16)
    assert cell_of("[run1 p4096-a2] w".split()) == ("prefill", 4096, 1)
    assert cell_of("[run1 a128-q0-r0.5-n17] w".split()) == ("rate", 128, 0)
    assert cell_of("[run1 a2048-q8-r50-n0] w".split()) == ("rate", 2048, 8)
    for words in ("[run1 count-check-d128-c2] w", "[run1-calibration] w", "d128-c2-s0] x", ""):
        assert cell_of(words.split()) is None, words


def test_requests_are_numbered_per_cell_and_logged_on_arrival(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0)
    for tag in ("[r d128-c2-s0]", "[r d128-c1-s0]", "[r d128-c2-s1]", "no tag", "[r p128-a0]"):
        assert post(srv, tag).status_code == 200
    got = [(a["cell"], a["n"], a["do"]) for a in srv.arrivals()]
    assert got == [(["decode", 128, 2], 1, None), (["decode", 128, 1], 1, None),
                   (["decode", 128, 2], 2, None), (None, None, None), (["prefill", 128, 1], 1, None)]
    truth = {tuple(r["cell"] or ()) + (r["cell_n"],) for r in srv.truth(5)}
    assert ("decode", 128, 2, 2) in truth and (None,) in truth
    # numbers go on across a restart: a fault fires once per server
    srv.restart()
    assert post(srv, "[r d128-c2-s0]").status_code == 200
    assert srv.wait_arrival(D2, 3)["cell"] == list(D2)


def test_hold_answers_nothing_until_released(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0, inject=[{"cell": list(D2), "at": 2, "do": "hold"}])
    assert post(srv, "[r d128-c2-s0]").status_code == 200  # request 1 runs
    thread, got = in_background(srv, "[r d128-c2-s1]")
    assert srv.wait_arrival(D2, 2)["do"] == "hold"
    assert post(srv, "[r d128-c2-s0]").status_code == 200  # the rest of the server runs on
    assert not got and thread.is_alive()
    assert [r["cell_n"] for r in srv.truth(2)] == [1, 3]  # the held one has not ended
    assert srv.release() == 1
    thread.join(30)
    assert got["response"].status_code == 200
    held = next(r for r in srv.truth(3) if r["cell_n"] == 2)
    assert held["fault"] == "hold" and held["finish_reason"] == "length" and held["slot_ns"]


def test_a_held_request_whose_client_leaves_is_cancelled(refserver) -> None:
    srv = refserver(inject=[{"cell": list(D2), "at": 1, "do": "hold"}])
    with httpx.Client(timeout=30) as client:
        got: dict = {}

        def go() -> None:
            try:
                got["r"] = client.post(srv.base_url + "/v1/chat/completions",
                                       json=body("[r d128-c2-s0]"))
            except httpx.HTTPError as exc:
                got["error"] = exc

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        srv.wait_arrival(D2, 1)
        client.close()  # the client goes away: its connection closes
        thread.join(30)
    (rec,) = srv.truth(1, timeout=30)
    assert rec["cancelled"] and rec["fault"] == "hold" and rec["slot_ns"] is None
    assert srv.release() == 1 and srv.alive  # nothing left to start


def test_exit_dies_before_answering_and_fires_once(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0,
                    inject=[{"cell": list(D2), "at": 2, "do": "exit", "code": 7}])
    assert post(srv, "[r d128-c2-s0]").status_code == 200
    with pytest.raises(httpx.HTTPError):
        post(srv, "[r d128-c2-s1]")
    assert srv.proc.wait(30) == 7
    assert srv.arrivals()[-1]["do"] == "exit"
    srv.restart()  # requests 3 and 4: no second crash (numbers go on across the restart)
    assert [post(srv, "[r d128-c2-s1]").status_code for _ in range(2)] == [200, 200]
    assert srv.alive and [a["n"] for a in srv.arrivals()] == [1, 2, 3, 4]


def test_after_tokens_waits_until_the_request_is_streaming(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0, inject=[
        {"cell": list(D2), "at": 1, "do": "exit", "after_tokens": 5}])
    seen = []
    with pytest.raises(httpx.HTTPError):
        with HTTP.stream("POST", srv.base_url + "/v1/chat/completions",
                         json=body("[r d128-c2-s0]", max_tokens=50)) as r:
            for line in r.iter_lines():
                seen += [line] if '"content"' in line else []
    assert srv.proc.wait(30) == 3
    assert len(seen) == 5  # five tokens, one a chunk, then the crash


def test_a_delayed_mark_logs_once_the_request_has_sent_its_tokens(refserver) -> None:
    """A mark with after_tokens acts on nothing but its line in marks.jsonl,
    written at the step at which the request has sent that many tokens: a
    test acts on the collector while a stream is known to be that far along."""
    srv = refserver(tokens_per_s=1000, ttft_ms=0, inject=[
        {"cell": list(D2), "at": 2, "do": "mark", "after_tokens": 5}])
    for tag in ("[r d128-c2-s0]", "[r d128-c2-s1]"):
        assert post(srv, tag, max_tokens=20).status_code == 200
    mark = srv.wait_mark(D2, 2)
    assert mark["after_tokens"] == 5 and mark["request_id"] == srv.arrivals()[1]["request_id"]
    (rec,) = [r for r in srv.truth(min_records=2) if r["request_id"] == mark["request_id"]]
    sent = [t for t, n, _ in rec["chunks"] if n > 0]
    assert sent[4] <= mark["fired_ns"] <= sent[5]  # after its 5th token, before its 6th
    assert len(srv.marks_path.read_text().splitlines()) == 1  # request 1 hit nothing


def test_bad_triggers_are_refused() -> None:
    from tests.refserver.scenario import Scenario

    for bad, said in [
        ({"cell": ["decode", 128], "at": 1, "do": "hold"}, "cell"),
        ({"cell": ["decode", 128, 2], "at": 0, "do": "hold"}, "at"),
        ({"cell": ["decode", 128, 2], "at": 1, "do": "crash"}, "do"),
        ({"cell": ["decode", 128, 2], "at": 1, "do": "hold", "after_tokens": 3}, "after_tokens"),
        ({"cell": ["decode", 128, 2], "at": 1, "do": "exit", "when": 3}, "when"),
    ]:
        with pytest.raises(ValueError, match=said):
            Scenario(inject=[bad])


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_stop_sigstops_the_server_until_continued(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0, inject=[{"cell": list(D2), "at": 1, "do": "stop"}])
    thread, got = in_background(srv, "[r d128-c2-s0]")
    assert srv.wait_arrival(D2, 1)["do"] == "stop"
    deadline = time.monotonic() + 60
    while _state(srv.proc.pid) != "T":  # stopped (its log line was written just before)
        assert time.monotonic() < deadline, "the server never stopped"
        time.sleep(0.01)
    assert not got
    srv.cont()
    thread.join(30)
    assert got["response"].status_code == 200


def test_freeze_blocks_the_whole_server_before_answering(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0,
                    inject=[{"cell": list(D2), "at": 1, "do": "freeze", "seconds": 0.5}])
    assert post(srv, "[r d128-c2-s0]").status_code == 200
    (rec,) = srv.truth(1)
    assert rec["chunks"][0][0] - rec["recv_ns"] >= 500_000_000  # a lower bound holds on any host


def test_refuse_answers_the_kth_request_of_the_cell_only(refserver) -> None:
    srv = refserver(tokens_per_s=1000, ttft_ms=0,
                    inject=[{"cell": list(D2), "at": 2, "do": "refuse", "status": 429}])
    codes = [post(srv, tag).status_code
             for tag in ("[r d128-c2-s0]", "[r d128-c1-s0]", "[r d128-c2-s1]", "[r d128-c2-s0]")]
    assert codes == [200, 200, 429, 200]


def test_the_cell_read_from_a_prompt_is_the_collectors_cell(refserver, tmp_path) -> None:
    """Through a real run: every request the collector stores is numbered in
    the cell it stored it under, so a test naming a cell hits that cell."""
    srv = refserver(tokens_per_s=200)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), "--duration", "1",
                  "--warmup-stable", "0.5", "--max-output", "100", "--contexts", "128",
                  "--concurrency", "1,2", "--prefill-contexts", "128", "--prefill-repeats", "1")
    assert res.returncode == 0, res.stderr
    truth = srv.truth_by_id()
    rows = read_run(out).requests.to_pylist()
    assert {r["phase"] for r in rows} == {"decode", "prefill"}
    for row in rows:
        assert truth[row["request_id"]]["cell"] == [row["phase"], row["context"], row["concurrency"]]
    # a decode cell's first C requests are its one-token prefix warm-ups
    for c in (1, 2):
        mine = sorted((r for r in truth.values() if r["cell"] == ["decode", 128, c]),
                      key=lambda r: r["cell_n"])
        assert [r["cell_n"] for r in mine] == list(range(1, len(mine) + 1))
        assert [r["max_tokens"] for r in mine[:c]] == [1] * c and mine[c]["max_tokens"] == 100
