"""The run's key encoded (hex, base64 in both alphabets, at every alignment)
is removed like the key itself.

Why its own probes: a launch command that writes the key to a file
(`echo <base64> | base64 -d > /run/k; vllm serve ... --api-key-file /run/k`)
carries only its encoding, and inside a longer encoded string the key's
base64 depends on where its bytes fall in a 3-byte group. The check is what
an attacker would do: decode every base64 or hex run left, at every shift,
and look for the key's bytes.
"""

from __future__ import annotations

import base64
import re

import pytest

from rundir.io import read_run
from rundir.redact import REDACTED, redact
from tests.collector.test_redact import PROSE, _run_and_site, _seed_launch_commands
from tests.refserver.harness import refserver_fixture  # noqa: F401

B64_KEY = "Sv131-b64?>~key-q7Zw3Rt9Xp?>~"  # its bytes give "+" and "/" at every alignment


def _recoverable(data: bytes, key: str, window: int = 6) -> list[str]:
    """What an attacker would try: every run of base64 or hex characters in
    data decoded at every shift, both alphabets; the key's `window`-byte
    slices found in what comes out (or in data itself)."""
    raw = key.encode()
    slices = {raw[i:i + window] for i in range(len(raw) - window + 1)}
    decoded = [data]
    for run in re.findall(rb"[A-Za-z0-9+/_-]{8,}", data):
        run = run.translate(bytes.maketrans(b"-_", b"+/"))
        for shift in range(4):
            part = run[shift:]
            decoded.append(base64.b64decode(part[: len(part) // 4 * 4]))
    for run in re.findall(rb"[0-9a-fA-F]{8,}", data):
        for shift in range(2):
            part = run[shift:]
            decoded.append(bytes.fromhex(part[: len(part) // 2 * 2].decode()))
    return sorted({repr(sl) for blob in decoded for sl in slices if sl in blob})


def _encodings(key: str) -> list[tuple[str, str]]:
    """(id, text): the key in every encoded form and byte alignment, inside
    the commands that carry one (`echo <b64> | base64 -d > /run/k`)."""
    out = []
    for prefix in ("", "B", "Be", "Bearer ", "x-api-key: "):  # offsets 0, 1, 2, 1, 2
        for suffix in ("", "\n", "!", "?!"):
            raw = (prefix + key + suffix).encode()
            std, url = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
            tag = f"{len(prefix) % 3}-{len(prefix)}-{len(suffix)}"
            out += [(f"b64-{tag}", std), (f"b64-nopad-{tag}", std.rstrip("=")),
                    (f"url-{tag}", url), (f"url-nopad-{tag}", url.rstrip("="))]
            if not prefix and not suffix:
                out += [("hex", raw.hex()), ("HEX", raw.hex().upper())]
    return out


@pytest.mark.parametrize(("form", "encoded"), _encodings(B64_KEY), ids=lambda v: str(v)[:24])
def test_the_runs_key_encoded_vanishes(form: str, encoded: str) -> None:
    text = f"echo {encoded} | base64 -d > /run/k; vllm serve m --api-key-file /run/k"
    assert _recoverable(text.encode(), B64_KEY), "the probe must hold the key"
    out = redact(text, [B64_KEY])
    assert _recoverable(out.encode(), B64_KEY) == [], out
    assert out.startswith("echo ") and out.endswith("| base64 -d > /run/k; vllm serve m "
                                                   "--api-key-file /run/k"), out


def test_encoded_probes_cover_both_alphabets_and_every_alignment() -> None:
    forms = dict(_encodings(B64_KEY))
    assert {f.split("-")[-3] for f in forms if f.startswith("b64-")} == {"0", "1", "2"}
    for name, text in forms.items():
        if name.startswith("url-"):
            assert text != forms["b64-" + name[4:]] and set(text) & set("-_"), name


def test_the_key_encoded_alone_is_replaced_whole() -> None:
    raw = B64_KEY.encode()
    for encoded in (base64.b64encode(raw).decode(), base64.b64encode(raw).decode().rstrip("="),
                    base64.urlsafe_b64encode(raw).decode(), raw.hex(), raw.hex().upper()):
        assert redact(f"KEY_B64={encoded} next", [B64_KEY]) == f"KEY_B64={REDACTED} next"


@pytest.mark.parametrize("text", PROSE + _seed_launch_commands())
def test_the_keys_encoded_forms_eat_no_prose(text: str) -> None:
    assert redact(text, [B64_KEY, "Sv132-k"]) == text


def test_encoded_key_in_the_launch_command_reaches_no_file(refserver, tmp_path) -> None:
    """The key as base64 (both alphabets, padded or not, every alignment) and
    hex in --launch-command: nothing that decodes to it in any file or page."""
    srv = refserver(api_key=B64_KEY, tokens_per_s=200)
    forms = _encodings(B64_KEY)
    launch = "; ".join(f"echo {text} | base64 -d > /run/k{i}" for i, (_, text) in enumerate(forms))
    launch += "; vllm serve m --api-key-file /run/k0 --port 8000"
    assert _recoverable(launch.encode(), B64_KEY)
    out, site, printed = _run_and_site(srv, B64_KEY, tmp_path, "--launch-command", launch)
    for path in [*out.rglob("*"), *site.rglob("*")]:
        if path.is_file():
            assert _recoverable(path.read_bytes(), B64_KEY) == [], path
    assert _recoverable(printed.encode(), B64_KEY) == []
    kept = read_run(out).info.launch_command
    assert kept.count(REDACTED) >= len(forms) and kept.endswith("--api-key-file /run/k0 --port 8000")
