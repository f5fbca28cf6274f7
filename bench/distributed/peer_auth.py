"""Who may join a run of `bench run --shard i/N`: both ends prove they hold one secret.

Why: the coordinator's port takes records that become published figures,
and a shard drives its server with its own API key at whatever the
coordinator says. Without proof, any process that reached the port could
join as shard k and hand in fabricated records (published Valid), and
whatever answered at a shard's `--coordinator` address could make it send
prompts and read the answers. So every host of a run holds the same
secret, `BENCH_SHARD_SECRET` (at least 16 characters; in Kubernetes from
the same Secret as the API key, deploy/kubernetes/), and neither end sends
anything that matters before the other has proved it holds it.

Why a shared secret and not mutual TLS: TLS would need a certificate
authority, a certificate and key per pod, their rotation and a hostname
to check for pods whose names are made at start; the Job already holds a
Secret for the API key, and one more key in it is all this needs. The
threat is a peer that is not part of the run; integrity and authenticity
are what matter (a shard's records are its measurements, and the prompts
are synthetic), so the frames are authenticated, not encrypted: someone
who can read the pod network sees the prompts and the records, but
cannot change, forge, replay, reorder or reflect a frame. The API key and
the server's URL never cross the connection either way.

The handshake, before which no message is decoded and no frame may hold
more than HELLO_MAX_FRAME bytes (each a JSON object):

  shard -> coordinator  hello: {bench, protocol, shard, of, host, nonce: Ns}
  coordinator -> shard  challenge: {nonce: Nc, proof: HMAC(K, "coordinator" | hello | Nc)}
                        (or {refused: why}: another version, a shard index out of range,
                        or one that has joined)
  shard -> coordinator  {proof: HMAC(K, "shard" | hello | challenge)}

Ns and Nc are 32 fresh random bytes each (`secrets`), so neither proof can
be replayed from another connection, and the labels differ, so neither can
be reflected as the other. The shard sends its proof only after checking
the coordinator's (hmac.compare_digest): a coordinator that is not
authentic gets nothing more, and never the shard's prompts or answers.
Both ends then derive the connection's key HMAC(K, "session" | hello |
challenge), and every later frame, either way, is

  8-byte length | HMAC(session key, direction | sequence number | payload) | payload

with the direction ("S": shard to coordinator, "C": back) and a count of
the frames sent that way, neither sent: a frame from another connection,
one sent again, out of order or the other way does not verify. The MAC is
checked over the raw bytes before anything is decoded (bench/distributed/remote.py),
and a frame may hold at most AUTH_MAX_FRAME bytes (1 GiB: a shard's records
of one long cell at its full event rate are a few hundred MB).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import struct

SECRET_ENV = "BENCH_SHARD_SECRET"
MIN_SECRET_CHARS = 16
NONCE_BYTES = 32
MAC_BYTES = 32  # HMAC-SHA256
HELLO_MAX_FRAME = 1024  # bytes of a handshake frame, before either end is authenticated
AUTH_MAX_FRAME = 1 << 30  # bytes of a frame once both are (a shard's records of a cell)
TO_COORDINATOR, TO_SHARD = b"S", b"C"  # a frame's direction, in its MAC


class AuthError(ValueError):
    """A peer's handshake or frame that does not verify, or does not parse: one line."""


def secret_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why $BENCH_SHARD_SECRET cannot authenticate the shards (missing, too short), or None."""
    value = (os.environ if environ is None else environ).get(SECRET_ENV, "")
    if not value:
        return (f"${SECRET_ENV} is not set: with --shard every host of the run needs the same "
                f"secret of at least {MIN_SECRET_CHARS} characters (e.g. from "
                "`openssl rand -hex 32`; deploy/kubernetes/README.md)")
    if len(value) < MIN_SECRET_CHARS:
        return (f"${SECRET_ENV} has {len(value)} characters; at least {MIN_SECRET_CHARS} "
                "(e.g. from `openssl rand -hex 32`)")
    return None


def shard_secret() -> bytes:
    """The run's shared secret, from the environment; AuthError when unusable."""
    problem = secret_problem()
    if problem:
        raise AuthError(problem)
    return os.environ[SECRET_ENV].encode()


def _mac(key: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 over `parts`, each length-prefixed so that no two splits read alike."""
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        h.update(struct.pack("!I", len(part)))
        h.update(part)
    return h.digest()


def coordinator_proof(secret: bytes, hello: bytes, nonce_c: bytes) -> bytes:
    return _mac(secret, b"bench-shard coordinator", hello, nonce_c)


def shard_proof(secret: bytes, hello: bytes, challenge: bytes) -> bytes:
    return _mac(secret, b"bench-shard shard", hello, challenge)


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


# -- the handshake's frames (JSON, small, checked field by field) ----------------


def _dump(obj: dict) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    assert len(data) <= HELLO_MAX_FRAME, len(data)
    return data


def _load(data: bytes, what: str, keys: dict[str, type]) -> dict:
    """A handshake frame as a dict with exactly `keys` (name -> type); AuthError if not."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        raise AuthError(f"not a {what} (not JSON: an older bench, or not bench)") from None
    if not isinstance(obj, dict) or set(obj) != set(keys):
        shown = sorted(map(str, obj))[:8] if isinstance(obj, dict) else type(obj).__name__
        raise AuthError(f"not a {what} (it holds {shown})")
    for name, kind in keys.items():
        if type(obj[name]) is not kind:
            raise AuthError(f"not a {what} ({name} is a {type(obj[name]).__name__}, "
                            f"not a {kind.__name__})")
    return obj


def _nonce(text: str, what: str) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != NONCE_BYTES and len(raw) != MAC_BYTES:
        raise AuthError(f"not a {what} (a nonce or proof of the wrong form)")
    return raw


_HELLO = {"bench": str, "protocol": int, "shard": int, "of": int, "host": str, "nonce": str}


def hello_frame(version: str, protocol: int, index: int, n: int, host: str,
                nonce_s: bytes) -> bytes:
    return _dump({"bench": version[:40], "protocol": protocol, "shard": index, "of": n,
                  "host": host[:100], "nonce": nonce_s.hex()})


def read_hello(data: bytes) -> dict:
    """The shard's hello, every field of its type; AuthError if it is none."""
    hello = _load(data, "shard's hello", _HELLO)
    _nonce(hello["nonce"], "shard's hello")
    return hello


def challenge_frame(secret: bytes, hello: bytes) -> bytes:
    """The coordinator's answer to `hello`: a fresh nonce and its proof over both."""
    nonce_c = new_nonce()
    return _dump({"nonce": nonce_c.hex(), "proof": coordinator_proof(secret, hello, nonce_c).hex()})


def refusal_frame(why: str) -> bytes:
    return _dump({"refused": why[:400]})


def check_challenge(secret: bytes, hello: bytes, data: bytes) -> None:
    """On the shard: the coordinator's challenge, or its refusal (AuthError either way
    when it is not a proof that verifies)."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict) and set(obj) == {"refused"} and isinstance(obj["refused"], str):
        raise AuthError(f"refused: {printable(obj['refused'])}")
    got = _load(data, "coordinator's challenge", {"nonce": str, "proof": str})
    nonce_c = _nonce(got["nonce"], "coordinator's challenge")
    proof = _nonce(got["proof"], "coordinator's challenge")
    if not hmac.compare_digest(proof, coordinator_proof(secret, hello, nonce_c)):
        raise AuthError(f"it did not prove it holds ${SECRET_ENV} (another secret, or not "
                        "shard 0 of this run)")


def proof_frame(secret: bytes, hello: bytes, challenge: bytes) -> bytes:
    return _dump({"proof": shard_proof(secret, hello, challenge).hex()})


def check_proof(secret: bytes, hello: bytes, challenge: bytes, data: bytes) -> None:
    """On the coordinator: the shard's proof; AuthError unless it verifies."""
    got = _load(data, "shard's proof", {"proof": str})
    if not hmac.compare_digest(_nonce(got["proof"], "shard's proof"),
                               shard_proof(secret, hello, challenge)):
        raise AuthError(f"it did not prove it holds ${SECRET_ENV} (another secret, or not a "
                        "shard of this run)")


def printable(text: str, limit: int = 200) -> str:
    """A peer's words, fit for one line of our output."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return clean + ("…" if len(text) > limit else "")


# -- the frames after it ----------------------------------------------------------


class Session:
    """One connection's frame authentication, after the handshake: every frame
    sent carries the MAC of (direction, its number, payload) under the
    connection's key; every frame read must carry the one expected next."""

    def __init__(self, secret: bytes, hello: bytes, challenge: bytes, sends: bytes) -> None:
        self._key = _mac(secret, b"bench-shard session", hello, challenge)
        self._sends, self._reads = sends, (TO_SHARD if sends == TO_COORDINATOR else TO_COORDINATOR)
        self._sent = 0
        self._read = 0

    @property
    def sends(self) -> bytes:
        """Which way this end's frames go: TO_COORDINATOR (a shard's) or TO_SHARD."""
        return self._sends

    def _tag(self, direction: bytes, seq: int, payload: bytes | memoryview) -> bytes:
        h = hmac.new(self._key, direction + struct.pack("!Q", seq), hashlib.sha256)
        h.update(payload)
        return h.digest()

    def seal(self, payload: bytes) -> bytes:
        """The frame body for `payload`: its MAC, then it."""
        tag = self._tag(self._sends, self._sent, payload)
        self._sent += 1
        return tag + payload

    def open(self, body: bytes | bytearray) -> memoryview:
        """The payload of a frame body read; AuthError unless its MAC is the next expected."""
        view = memoryview(body)
        if len(view) < MAC_BYTES:
            raise AuthError("a frame too short to carry its MAC")
        payload = view[MAC_BYTES:]
        if not hmac.compare_digest(view[:MAC_BYTES], self._tag(self._reads, self._read, payload)):
            raise AuthError("a frame whose MAC does not verify (forged, replayed, reordered, "
                            "sent back, or damaged)")
        self._read += 1
        return payload
