"""Run cards: read once into typed sections, each field checked by the contract's own
rules (one line naming the file and the field), laid over what the collector detected."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from bench.run.runcard import RunCard, read_run_card
from bench.server.provenance import detect_hardware
from rundir.contract import RUN_YAML, ContractError, Engine, Hardware, Model
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

SECRET = "sk-live-0123456789abcdefABCDEF"

BAD_CARDS = [
    # (id, file bytes, what the message says after "<file>: ")
    ("hardware-a-number", b"hardware: 5\n", "field hardware: expected a mapping, got 5"),
    ("hardware-a-string", b"hardware: H200\n", "field hardware: expected a mapping, got 'H200'"),
    ("model-a-list", b"model: []\n", "field model: expected a mapping, got a list of 0 items"),
    ("engine-a-string", b"engine: vllm\n", "field engine: expected a mapping"),
    ("gpu-count-words", b"hardware:\n  gpu_count: eight\n",
     "field hardware.gpu_count: expected an integer, got 'eight'"),
    ("gpu-count-float", b"hardware:\n  gpu_count: 8.5\n",
     "field hardware.gpu_count: expected an integer, got 8.5"),
    ("gpu-count-negative", b"hardware:\n  gpu_count: -2\n",
     "field hardware.gpu_count: expected a number >= 0"),
    ("gpu-count-overflow", b"hardware:\n  gpu_count: 99999999999999999999\n",
     "field hardware.gpu_count: expected an integer that fits in 64 bits"),
    ("gpu-name-number", b"hardware:\n  gpu_name: 5\n",
     "field hardware.gpu_name: expected a string, got 5"),
    ("vram-nan", b"hardware:\n  vram_gb_per_gpu: .nan\n",
     "field hardware.vram_gb_per_gpu: expected a finite number, got nan"),
    ("vram-inf", b"hardware:\n  vram_gb_per_gpu: .inf\n",
     "field hardware.vram_gb_per_gpu: expected a finite number, got inf"),
    ("vram-minus-inf", b"hardware:\n  vram_gb_per_gpu: -.inf\n",
     "field hardware.vram_gb_per_gpu: expected a finite number"),
    ("max-model-len-float", b"model:\n  max_model_len: 1.5\n",
     "field model.max_model_len: expected an integer"),
    ("nested-typo-hardware", b"hardware:\n  gpu_cout: 8\n", "field hardware.gpu_cout: unknown field"),
    ("nested-typo-engine", b"engine:\n  nmae: vllm\n", "field engine.nmae: unknown field"),
    ("nested-typo-model", b"model:\n  repo: x/y\n", "field model.repo: unknown field"),
    ("top-level-typo", b"gpu_count: 8\n", "field gpu_count: unknown field (expected one of"),
    ("run-yaml-field-not-in-cards", b"parameters:\n  duration_s: 30\n",
     "field parameters: unknown field"),
    ("numeric-top-level-key", b"1: x\n", "field 1: unknown field"),
    ("notes-a-number", b"notes: 5\n", "field notes: expected a string, got 5"),
    ("submitter-a-list", b"submitter: [a, b]\n",
     "field submitter: expected a string, got a list of 2 items"),
    ("launch-command-a-map", b"launch_command: {a: 1}\n",
     "field launch_command: expected a string, got a mapping of 1 entry"),
    ("top-level-list", b"- hardware\n- engine\n", "expected a mapping of hardware"),
    ("top-level-string", b"just some text\n", "expected a mapping of hardware"),
    ("bad-yaml", b"notes: [1\n", "line 2: not valid YAML"),
    ("bad-indent", b"hardware:\n  gpu_count: 8\n gpu_name: x\n", "not valid YAML"),
    ("not-utf8", b"notes: caf\xe9\n", "line 1: not UTF-8 text (byte 0xe9)"),
    ("utf16-bom", "notes: x\n".encode("utf-16"), "line 1: not UTF-8 text"),
    ("duplicate-key", b"notes: a\nnotes: b\n", "key 'notes' appears twice"),
    ("nested-duplicate-key", b"hardware:\n  gpu_count: 8\n  gpu_count: 1\n",
     "key 'gpu_count' appears twice"),
    ("python-tag", b"notes: !!python/object/apply:os.system [id]\n", "not valid YAML"),
    ("5000-digit-integer", b"hardware:\n  gpu_count: " + b"9" * 5000 + b"\n", "not valid YAML"),
    ("secret-in-wrong-field", f"hardware:\n  gpu_count: {SECRET}\n".encode(),
     "field hardware.gpu_count: expected an integer, got a string of 30 characters"),
    ("secret-as-key", f"{SECRET}: 1\n".encode(), "field a string of 30 characters: unknown"),
]


@pytest.mark.parametrize("raw,says", [c[1:] for c in BAD_CARDS], ids=[c[0] for c in BAD_CARDS])
def test_bad_run_card(tmp_path: Path, raw: bytes, says: str) -> None:
    card = tmp_path / "card.yaml"
    card.write_bytes(raw)
    with pytest.raises(ContractError) as err:
        read_run_card(card)
    msg = str(err.value)
    assert msg.startswith(f"{card}: "), msg
    assert says in msg, msg
    assert "\n" not in msg and SECRET not in msg and "9" * 50 not in msg


def test_unreadable_card(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ContractError, match=r"nope\.yaml: cannot read \(No such file"):
        read_run_card(missing)
    with pytest.raises(ContractError, match=r": cannot read \(Is a directory\)"):
        read_run_card(tmp_path)


GOOD = b"""\
submitter: someone
hardware:
  gpu_name: H200 SXM
  gpu_count: 8
  vram_gb_per_gpu: 141
engine:
  name: vllm
  build: docker vllm/vllm-openai:v0.11.0
model:
  repository_id: Qwen/Qwen3-8B
  max_model_len: 32768
launch_command: vllm serve Qwen/Qwen3-8B
notes: |
  Two lines
  of **Markdown**.
"""


def test_good_card_reads_into_typed_sections(tmp_path: Path) -> None:
    card = tmp_path / "card.yaml"
    card.write_bytes(GOOD)
    got = read_run_card(card)
    assert got.submitter == "someone"
    assert got.hardware.fields() == {"gpu_name": "H200 SXM", "gpu_count": 8, "vram_gb_per_gpu": 141}
    assert isinstance(got.hardware.values.vram_gb_per_gpu, float)  # as the contract types it
    assert got.engine.fields() == {"name": "vllm", "build": "docker vllm/vllm-openai:v0.11.0"}
    assert got.model.fields() == {"repository_id": "Qwen/Qwen3-8B", "max_model_len": 32768}
    assert got.launch_command == "vllm serve Qwen/Qwen3-8B"
    assert got.notes == "Two lines\nof **Markdown**.\n"
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.notes = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.hardware.given = frozenset()  # type: ignore[misc]


@pytest.mark.parametrize("raw,given", [
    (b"", {}),
    (b"# only a comment\n", {}),
    (b"hardware:\nnotes:\n", {}),
    (b"hardware: {gpu_name: null}\n", {"gpu_name": None}),
])
def test_empty_parts_are_fine(tmp_path: Path, raw: bytes, given: dict) -> None:
    card = tmp_path / "card.yaml"
    card.write_bytes(raw)
    got = read_run_card(card)
    assert got.hardware.fields() == given
    assert got.notes is None and got.engine == RunCard().engine and got.model == RunCard().model


def test_a_section_lays_over_what_was_detected(tmp_path: Path) -> None:
    """A field the card gives replaces the detected one, even as null; one it leaves
    out keeps it; the detected object itself is not changed (a copy, no setattr)."""
    card = tmp_path / "card.yaml"
    card.write_bytes(b"hardware:\n  gpu_name: H200 SXM\n  cpu: null\n"
                     b"engine:\n  build: docker\n")
    got = read_run_card(card)
    detected = Hardware(gpu_name="NVIDIA H200", gpu_count=8, cpu="EPYC", os="Linux")
    merged = got.hardware.over(detected)
    assert merged == Hardware(gpu_name="H200 SXM", gpu_count=8, cpu=None, os="Linux")
    assert detected == Hardware(gpu_name="NVIDIA H200", gpu_count=8, cpu="EPYC", os="Linux")
    engine = got.engine.over(Engine(name="vllm", version="0.11"))
    assert engine == Engine(name="vllm", version="0.11", build="docker")
    assert RunCard().model.over(Model(served_name="m")) == Model(served_name="m")


def test_bad_card_on_the_command_line_is_one_line_before_any_request(tmp_path: Path) -> None:
    """Exit status 2 and the reader's line; no server is asked (none listens there)."""
    card = tmp_path / "card.yaml"
    card.write_bytes(b"hardware:\n  gpu_count: eight\n")
    res = run_cli("bench", "run", "--base-url", "http://127.0.0.1:1", "--run-card", str(card),
                  "--out", str(tmp_path / "run"), "--server-wait", "0")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: {card}: field hardware.gpu_count: expected an integer, got 'eight'"]
    assert not (tmp_path / "run").exists()


FAST = ["--duration", "1", "--warmup-stable", "0.3", "--no-prefill", "--server-wait", "2",
        "--max-output", "200", "--contexts", "128", "--concurrency", "1"]


def test_card_reaches_run_yaml_over_the_detected_values(refserver, tmp_path: Path) -> None:
    """`bench run --run-card`: the card's fields in run.yaml as the contract types
    them, a null clearing a detected value, the rest as detected."""
    srv = refserver(tokens_per_s=200)
    card = tmp_path / "card.yaml"
    card.write_bytes(GOOD.replace(b"  vram_gb_per_gpu: 141\n", b"  vram_gb_per_gpu: 141\n  os: null\n"))
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out),
                  "--run-card", str(card), *FAST)
    assert res.returncode == 0, res.stderr[-2000:]
    raw = yaml.safe_load((out / RUN_YAML).read_text(encoding="utf-8"))
    hardware, engine, model = raw["hardware"], raw["engine"], raw["model"]
    assert (hardware["gpu_name"], hardware["gpu_count"], hardware["os"]) == ("H200 SXM", 8, None)
    assert hardware["vram_gb_per_gpu"] == 141.0 and isinstance(hardware["vram_gb_per_gpu"], float)
    assert hardware["cpu"] == detect_hardware().cpu  # left out: as detected
    assert engine["name"] == "vllm" and engine["build"] == "docker vllm/vllm-openai:v0.11.0"
    assert model["repository_id"] == "Qwen/Qwen3-8B" and model["max_model_len"] == 32768
    assert model["served_name"]  # detected from the server
    assert raw["submitter"] == "someone" and raw["notes"] == "Two lines\nof **Markdown**.\n"
    assert raw["launch_command"] == "vllm serve Qwen/Qwen3-8B"
