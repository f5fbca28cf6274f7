"""`bench run --shard i/N`: only peers holding $BENCH_SHARD_SECRET take part.

Through the real command line and the real socket protocol (bench/distributed/peer_auth.py,
bench/distributed/remote.py): a peer without the secret is refused before it gets
anything of the run, and a real shard then joins and the run is Valid; a
shard whose coordinator cannot prove the secret sends it nothing but its
hello (its server gets no request); two peers proving the secret for one
shard index at once: the second is refused; a frame cannot be forged,
replayed, reordered or sent back; every refusal is one line. Every step of
a fake peer is a message the test sends or waits for, never a time.
"""

from __future__ import annotations

import pickle
import re
import socket
import struct
from contextlib import suppress

import pytest

from bench import __version__
from bench.distributed.peer_auth import (
    HELLO_MAX_FRAME,
    TO_COORDINATOR,
    TO_SHARD,
    AuthError,
    Session,
    challenge_frame,
    check_challenge,
    hello_frame,
    new_nonce,
    shard_proof,
)
from bench.distributed.remote import PROTOCOL, SocketChannel
from bench.distributed.shard_messages import BadMessage
from rundir.io import read_run
from tests.collector.shard_peers import FakeCoordinator, FakeShard, raw_frame
from tests.collector.test_multihost import (
    SECRET,
    SKEW_NS,
    Bench,
    free_port,
    hosts,
    kill_running,
)
from tests.refserver.harness import refserver_fixture  # noqa: F401

KEY = SECRET.encode()
REFUSED = "refused a connection from"  # the start of the line (long lines wrap)
NOT_A_SHARD = "another secret, or not a shard of this run"


def said(bench: Bench) -> str:
    return re.sub(r"\s+", " ", bench.stderr)  # lines wrap at the terminal's width


# -- the frames ------------------------------------------------------------------


def _pair() -> tuple[SocketChannel, SocketChannel, socket.socket, socket.socket]:
    """A shard's and a coordinator's channel over a socket pair, authenticated
    as the handshake leaves them (the same hello and challenge on both ends)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:  # TCP, as between hosts
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
    hello = hello_frame("x", PROTOCOL, 1, 2, "h", new_nonce())
    challenge = challenge_frame(KEY, hello)
    shard, coord = SocketChannel(a), SocketChannel(b)
    shard.authenticated(Session(KEY, hello, challenge, TO_COORDINATOR))
    coord.authenticated(Session(KEY, hello, challenge, TO_SHARD))
    return shard, coord, a, b


def _wire(channel: SocketChannel, peer: socket.socket, message: tuple) -> bytes:
    """The bytes `channel` puts on the wire for `message` (taken off it)."""
    channel.send(message)
    peer.setblocking(True)
    head = peer.recv(8, socket.MSG_WAITALL)
    body = peer.recv(struct.unpack("!Q", head)[0], socket.MSG_WAITALL)
    peer.setblocking(False)
    return head + body


def _deliver(to: socket.socket, channel: SocketChannel, data: bytes) -> list:
    to.sendall(data)
    got: list = []
    while not got:
        got = channel.read() or []
    return got


def test_frames_cannot_be_forged_replayed_reordered_or_sent_back() -> None:
    shard, coord, a, b = _pair()
    # an honest frame each way verifies and decodes
    coord.send(("window", 1, 2))
    assert shard.read() == [("window", 1, 2)]
    first = _wire(shard, b, ("producing", [0]))
    assert _deliver(a, coord, first) == [("producing", [0])]
    # replayed: the same frame again
    with pytest.raises(AuthError, match="does not verify"):
        _deliver(a, coord, first)

    shard, coord, a, b = _pair()
    first = _wire(shard, b, ("producing", [0]))
    second = _wire(shard, b, ("producing", [1]))
    with pytest.raises(AuthError, match="does not verify"):  # reordered
        _deliver(a, coord, second)

    shard, coord, a, b = _pair()
    frame = bytearray(_wire(shard, b, ("done", [], None, (0, 1))))
    frame[-3] ^= 1  # one bit of the payload changed
    with pytest.raises(AuthError, match="does not verify"):
        _deliver(a, coord, bytes(frame))

    shard, coord, a, b = _pair()
    back = _wire(shard, b, ("clock", 1, 2, 3))
    with pytest.raises(AuthError, match="does not verify"):  # sent back to the shard
        _deliver(b, shard, back)

    shard, coord, a, b = _pair()
    other, _, _, b2 = _pair()  # another connection's session
    with pytest.raises(AuthError, match="does not verify"):
        _deliver(a, coord, _wire(other, b2, ("producing", [0])))

    shard, coord, a, b = _pair()
    with pytest.raises(AuthError, match="too short"):  # no room for a MAC
        _deliver(a, coord, raw_frame(b"x"))


def test_a_frame_that_verifies_is_still_checked_before_use() -> None:
    """An authentic frame that is not MessagePack, or not a message of the
    schema, is a one-line refusal, not a traceback; so is a message of the
    wrong shape, through the channel's own decoding."""
    import msgspec

    pickled = pickle.dumps(("ready", 1))  # the format of protocol 2: refused, not unpickled
    for payload, text in ((b"\xc1 not msgpack", "not MessagePack"),
                          (pickled, "where a message of the shard protocol belongs"),
                          (msgspec.msgpack.encode({"ready": 1}), "a map where a message"),
                          (b"\x91" * 100_000 + b"\xc0", "does not start with its kind")):
        shard, coord, a, b = _pair()
        sealed = shard.session.seal(payload)  # type: ignore[union-attr]
        with pytest.raises(BadMessage, match=text) as got:
            _deliver(a, coord, raw_frame(sealed))
        assert "\n" not in str(got.value)
    for bad, text in ((("done", [1, 2, 3], None, (0, 1)), "a 'done' message whose "
                       "records\\[0\\] is an int, not a RequestRecord"),
                      (("warmed",), "a 'warmed' message of 0 parts, not 1"),
                      (("ready", 1, 2), "a 'ready' message of 2 parts, not 1"),
                      (("sing", 1), "a message 'sing', which a shard does not send"),
                      ([("ready", 1)], "does not start with its kind"),
                      (("clock", 1, "2", 3), "a 'clock' message whose t1 is a str, not an int"),
                      (("ready", True), "pid is a bool, not an int"),
                      (("done", [], {"start_ns": 1}, (0, 1)),
                       "a 'done' message whose delays: Object missing required field `end_ns`"),
                      (("warm", ("decode", 1, 1), None, "t", "r", [0]),
                       "a message 'warm', which a shard does not send")):
        shard, coord, a, b = _pair()
        sealed = shard.session.seal(msgspec.msgpack.encode(bad))  # type: ignore[union-attr]
        with pytest.raises(BadMessage, match=text):
            _deliver(a, coord, raw_frame(sealed))


def test_a_record_crosses_whole_and_its_stamps_must_pair() -> None:
    """A parsed record (int64 stamp arrays) comes back equal, its stamps
    int64 again; a record whose stamps do not pair is refused in one line."""
    import dataclasses

    import numpy as np

    from bench.distributed.shard_messages import FROM_SHARD, encode
    from bench.measure.chunks import parse_events
    from bench.measure.records import RequestRecord
    from bench.measure.sse import StreamResult

    events = [(10 + i, b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":%d}}'
               % (i + 1)) for i in range(3)]
    rec = RequestRecord.from_stream(("decode", 256, 2), "r-w1-0", "measure", 0,
                                    StreamResult(status=200, send_ns=1, end_ns=20, done=True),
                                    parse_events(events), str)
    kind, (back,) = FROM_SHARD.decode(encode(("warmed", [rec])))
    assert kind == "warmed" and back.chunk_ns.dtype == np.int64
    assert back.chunk_ns.tolist() == [10, 11, 12] and back.chunk_tokens.tolist() == [1, 2, 3]
    assert {f.name: getattr(back, f.name) for f in dataclasses.fields(rec)
            if f.name not in ("chunk_ns", "chunk_tokens")} == {
        f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)
        if f.name not in ("chunk_ns", "chunk_tokens")}
    odd = dataclasses.replace(rec, chunk_tokens=[1, 2])
    with pytest.raises(BadMessage, match=r"records\[0\] has 3 chunk times for 2 token counts"):
        FROM_SHARD.decode(encode(("warmed", [odd])))


def test_every_record_field_is_checked() -> None:
    """A new RequestRecord field cannot cross unchecked, nor out of order
    (bench/distributed/shard_messages.py: the wire record lists them by position)."""
    import dataclasses

    from bench.distributed.shard_messages import RECORD_FIELDS, WireRecord
    from bench.measure.records import RequestRecord

    assert RECORD_FIELDS == tuple(f.name for f in dataclasses.fields(RequestRecord))
    assert WireRecord.__struct_config__.forbid_unknown_fields


# -- joining through the real command line ------------------------------------------


def test_peers_without_the_secret_are_refused_and_the_run_goes_on(refserver, tmp_path) -> None:
    """Before a real shard joins: a peer proving another secret, one replaying
    the proof of an earlier connection, one speaking the old (pickled)
    protocol, one announcing a 1 GB message, one sending a 40 KB nested
    hello, one of another version. Each is one line; none gets a setup;
    the run then goes on and is Valid."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    port = free_port()
    coord, shard_args = hosts(srv, out, port)
    shard = None
    try:
        coord.wait_line("waiting for shards 1..1 of 2")
        wrong = FakeShard(port, b"not-the-secret-of-this-run")
        challenge = wrong.say_hello()
        assert b"proof" in challenge  # the coordinator proves itself first
        wrong.prove()  # a proof made with the wrong secret
        coord.wait_line(REFUSED)
        assert wrong.closed()

        replay = FakeShard(port, KEY)
        replay.say_hello()  # a fresh challenge: an earlier connection's proof does not fit
        earlier = shard_proof(KEY, wrong.hello, wrong.challenge)  # right secret, old challenge
        replay.prove(b'{"proof":"%s"}' % earlier.hex().encode())
        coord.wait_line(REFUSED)
        assert replay.closed()

        with socket.create_connection(("127.0.0.1", port)) as old:
            hello = pickle.dumps(("hello", 1, 1, 2, "0.0.1", "old-host"))
            old.sendall(raw_frame(hello))
            coord.wait_line(REFUSED)
        with socket.create_connection(("127.0.0.1", port)) as rogue:
            with suppress(OSError):  # the coordinator may close it while it still sends
                rogue.sendall(struct.pack("!Q", 10**9) + b"x" * 65536)
            coord.wait_line(REFUSED)
        with socket.create_connection(("127.0.0.1", port)) as nested:
            with suppress(OSError):
                nested.sendall(raw_frame(b"[" * 20_000 + b"]" * 20_000))
            coord.wait_line(REFUSED)
        with socket.create_connection(("127.0.0.1", port)) as deep:
            deep.sendall(raw_frame(b"[" * 500 + b"]" * 500))
            coord.wait_line(REFUSED)
        other = FakeShard(port, KEY)
        other.hello = hello_frame("0.0.1", 1, 1, 2, "old-host", new_nonce())
        assert b"refused" in other.say_hello()
        coord.wait_line(REFUSED)

        shard = Bench(shard_args, SKEW_NS)
        assert coord.wait() == 0, coord.stderr
        assert shard.wait() == 0, shard.stderr
    finally:
        kill_running(coord, shard)
    text = said(coord)
    assert text.count("refused a connection from 127.0.0.1:") == 7, text
    reasons = [line.split(": ", 1)[1] for line in re.findall(
        r"refused a connection from .*?(?= coordinator:|$)", text)]
    assert reasons == [
        f"it did not prove it holds $BENCH_SHARD_SECRET ({NOT_A_SHARD})",
        f"it did not prove it holds $BENCH_SHARD_SECRET ({NOT_A_SHARD})",
        "not a shard's hello (not JSON: an older bench, or not bench)",
        "a message of 1,000,000,000 bytes (at most 1,024 here) before its hello",
        "a message of 40,000 bytes (at most 1,024 here) before its hello",
        "not a shard's hello (it holds list)",
        f"shard runs bench 0.0.1 (protocol 1); this coordinator {__version__} (protocol {PROTOCOL})",
    ], text
    assert "Traceback" not in coord.stderr and SECRET not in coord.stderr
    assert {c["status"] for c in read_run(out).cells.to_pylist()} == {"valid"}
    assert {r["request_id"].split("-")[-2] for r in read_run(out).requests.to_pylist()} == {
        "w0", "w1"}  # the real shard's prefix: no refused peer was counted as a join


def test_a_shard_sends_nothing_to_a_coordinator_without_the_secret(refserver, tmp_path) -> None:
    """Whoever answers at a shard's --coordinator address without the secret
    gets the shard's hello and nothing else, and cannot make it send a prompt."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    fake = FakeCoordinator(b"a-secret-that-is-not-the-runs")
    shard = Bench(["--base-url", srv.base_url, "--shard", "1/2", "--coordinator",
                   f"127.0.0.1:{fake.port}", "--join-timeout", "300"])
    try:
        hello, rest = fake.answer()
        assert shard.wait() == 1, shard.stderr
    finally:
        fake.close()
        kill_running(shard)
    assert b'"shard":1' in hello and SECRET.encode() not in hello
    assert rest == b"", rest  # not even its proof
    lines = shard.stderr.strip().splitlines()
    assert len(lines) == 1, shard.stderr
    assert re.search(r"shard 1/2 cannot join the coordinator at 127\.0\.0\.1:\d+: it did not "
                     r"prove it holds \$BENCH_SHARD_SECRET", said(shard)), shard.stderr
    assert not srv.arrivals()  # its server saw nothing


def test_an_old_coordinator_that_sends_a_setup_gets_nothing(refserver, tmp_path) -> None:
    """A peer at the address that skips the proof and sends a setup, as the
    unauthenticated protocol did, is not obeyed."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    listener = socket.create_server(("127.0.0.1", 0))
    shard = Bench(["--base-url", srv.base_url, "--shard", "1/2", "--coordinator",
                   f"127.0.0.1:{listener.getsockname()[1]}", "--join-timeout", "300"])
    try:
        listener.settimeout(120)
        conn, _ = listener.accept()
        with conn:
            conn.recv(8 + HELLO_MAX_FRAME)
            conn.sendall(raw_frame(pickle.dumps(("setup", None))))
            assert shard.wait() == 1, shard.stderr
    finally:
        listener.close()
        kill_running(shard)
    assert "not a coordinator's challenge (not JSON" in said(shard), shard.stderr
    assert len(shard.stderr.strip().splitlines()) == 1, shard.stderr
    assert not srv.arrivals()


def test_two_peers_proving_one_index_at_once_one_is_refused(refserver, tmp_path) -> None:
    """Both say hello as shard 1 before either proves the secret; the first
    to prove it holds the index, the second is refused (before: both got a
    setup). The first then leaves without starting, and a real shard joins."""
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    out = tmp_path / "run"
    port = free_port()
    coord, shard_args = hosts(srv, out, port)
    shard = None
    try:
        coord.wait_line("waiting for shards 1..1 of 2")
        first, second = FakeShard(port, KEY), FakeShard(port, KEY)
        first.say_hello()
        second.say_hello()  # neither has proved anything yet: both get a challenge
        check_challenge(KEY, first.hello, first.challenge)
        first.prove()
        assert first.recv()[0] == "setup"
        check_challenge(KEY, second.hello, second.challenge)
        second.prove()
        refused = second.recv()
        assert refused[0] == "refused" and "shard 1 is joining from 127.0.0.1:" in refused[1]
        coord.wait_line("refused a connection from")
        first.close()  # it never said ready: the index is free again
        shard = Bench(shard_args, SKEW_NS)
        assert coord.wait() == 0, coord.stderr
        assert shard.wait() == 0, shard.stderr
    finally:
        kill_running(coord, shard)
    assert {c["status"] for c in read_run(out).cells.to_pylist()} == {"valid"}


def test_the_secret_is_required_with_shard(tmp_path) -> None:
    """Missing or shorter than 16 characters: one usage line naming the
    variable, never its value, on every host."""
    for secret, text in ((None, "$BENCH_SHARD_SECRET is not set"),
                         ("short-secret-15", "$BENCH_SHARD_SECRET has 15 characters; at least 16")):
        for index in ("0/2", "1/2"):
            b = Bench(["--base-url", "http://127.0.0.1:9", "--shard", index, "--coordinator",
                       "127.0.0.1:9", "--out", str(tmp_path / "x")], secret=secret)
            assert b.wait(60) == 2, b.stderr
            lines = b.stderr.strip().splitlines()
            assert len(lines) == 1 and text in lines[0], b.stderr
            assert lines[0].startswith("error: --shard: $BENCH_SHARD_SECRET")
            assert secret is None or secret not in b.stderr
            assert not (tmp_path / "x").exists()
