"""Past one process and one source address (issue 22, items 2, 4, 5).

Against the multi-process stub (benchmarks/_stub_server.py), which logs
each frame it sent: through `--workers 2` the merged records hold every
event each stream received, in order, never stamped before it was sent,
and nothing is lost (benchmarks/scale_out.py's own analysis); with two
`--source-address`es the stub sees connections from both. Plus the source
address rules and their one-line refusals. Behaviour only, never timings.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from bench.core.sources import check_address, out_of_ports, plan_sources, port_range
from bench.measure.stream import StreamClient
from benchmarks._stub_server import StubServer
from benchmarks.scale_out import analyse
from rundir.contract import PURPOSE_MEASURE
from rundir.io import read_run
from tests.collector.test_workers import shard_of
from tests.conftest import run_cli

FAST = ["--duration", "2", "--warmup-stable", "0.5", "--no-prefill", "--server-wait", "5",
        "--contexts", "256", "--max-output", "300", "--gpu-telemetry", "off"]


def test_two_workers_record_every_frame_the_stub_sent_from_both_source_addresses(
        tmp_path: Path) -> None:
    out = tmp_path / "run"
    with StubServer(tmp_path / "stub", procs=2, tok_per_s=200) as stub:
        res = run_cli("bench", "run", "--base-url", stub.base_url, "--out", str(out), *FAST,
                      "--concurrency", "6", "--workers", "2",
                      "--source-address", "127.0.0.2", "--source-address", "127.0.0.3")
        sent = stub.stop()
    assert res.returncode == 0, res.stderr
    assert "Source addresses: 127.0.0.2, 127.0.0.3 (--source-address)" in res.stderr
    run = read_run(out)
    rows = run.requests.to_pylist()
    tag = run.info.run_id
    streamed = {rid: s for rid, s in sent.items() if rid.startswith(tag)}
    assert {r["request_id"] for r in rows} == set(streamed)  # each stream once, none missing
    assert {shard_of(r["request_id"]) for r in rows} == {"w1", "w2"}
    assert {s.peer for s in streamed.values()} == {"127.0.0.2", "127.0.0.3"}
    for r in rows:
        times = streamed[r["request_id"]].times
        tokens, stamps = r["chunk_tokens"], r["chunk_ns"]
        assert tokens == list(range(1, len(tokens) + 1))  # every frame up to the last read
        assert len(tokens) <= len(times) and stamps == sorted(stamps)
        # stamped after it was sent (1 ms: the kernel clock's offset is re-measured)
        assert all(s >= times[k - 1] - 1_000_000 for s, k in zip(stamps, tokens, strict=True))
        if not r["cancelled"]:  # ran to max_tokens (300, or 1 for a warm-up): all of it
            want = 300 if r["purpose"] == PURPOSE_MEASURE else 1
            assert len(tokens) == len(times) == want and r["finish_reason"] == "length"
    measured = [r for r in rows if r["purpose"] == PURPOSE_MEASURE]
    assert {r["stream_index"] for r in measured} == set(range(6))
    trial = analyse(out, sent, 2)
    assert trial.lost == 0 and trial.events > 0 and trial.p99_error_ms is not None


def test_an_address_this_host_cannot_bind_is_refused_in_one_line(tmp_path: Path) -> None:
    for bad, said in (("10.255.255.254", "is not an address of this host"),
                      ("not-an-ip", "expected an IP address")):
        res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:9", "--out",
                      str(tmp_path / "r"), "--source-address", bad)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "--source-address" in lines[0] and said in lines[0], lines[0]
    assert not (tmp_path / "r").exists()
    assert check_address(" 127.0.0.5 ") == "127.0.0.5"


def test_loopback_gets_more_addresses_only_past_one_address_s_ports(tmp_path: Path) -> None:
    assert plan_sources("127.0.0.1", (), 16_384, 28_232) == ((), None)
    chosen, why = plan_sources("127.0.0.1", (), 16_384, 10_000)
    assert chosen == ("127.0.0.1", "127.0.0.2") and why and "automatic" in why
    assert plan_sources("10.0.0.7", (), 16_384, 10_000) == ((), None)  # not ours to invent
    given, why = plan_sources("10.0.0.7", ("10.0.0.2",), 4, 28_232)
    assert given == ("10.0.0.2",) and why and "--source-address" in why
    ranges = tmp_path / "range"
    ranges.write_text("40000\t40999\n")
    assert port_range(ranges) == 1000
    assert port_range(tmp_path / "absent") == 60999 - 32768 + 1


def test_running_out_of_ports_fails_the_stream_with_the_limit_and_the_flag(monkeypatch) -> None:
    client = StreamClient("http://127.0.0.1:9", source_addresses=("127.0.0.1", "127.0.0.2"))

    async def no_port(self, sock, addr):  # what connect() says with every port taken
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")

    async def post() -> str | None:
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(type(loop), "sock_connect", no_port)
        result = await client.post_stream("/v1/chat/completions", {}, "r-1")
        return result.error

    error = asyncio.run(post())
    assert error == out_of_ports("127.0.0.1:9", 2, port_range())
    assert "2 source addresses × " in error and "--source-address" in error
    assert "ip_local_port_range" in error and "\n" not in error


@pytest.mark.parametrize("sources", [1, 3])
def test_the_out_of_ports_line_names_what_was_there(sources: int) -> None:
    line = out_of_ports("h:1", sources, 28_232)
    assert "28,232 ephemeral ports" in line
    assert ("3 source addresses" in line) == (sources == 3)
