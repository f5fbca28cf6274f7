"""GPU provenance: what the hardware block says about the cards.

No GPU is attached to CI machines, so NVML is replaced by a stand-in module
and `nvidia-smi` by a script printing the real tool's CSV query format and
banner. The H200's 143,771 MiB and its banner were read from `nvidia-smi` on
an H200 machine; the other MiB figures are typical of those cards, not
readings.
"""

from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path

import pytest

from bench.server import provenance
from bench.server.provenance import vram_gb

MIB = 1 << 20


@pytest.mark.parametrize(("name", "mib", "label"), [
    ("NVIDIA H200", 143771, 141),  # as nvidia-smi reported it on an H200
    ("NVIDIA H100 80GB HBM3", 81559, 80),
    ("NVIDIA A100-SXM4-40GB", 40960, 40),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 96),
    ("NVIDIA L40S", 46068, 48),
    ("NVIDIA GeForce RTX 4090", 24564, 24),
])
def test_vram_is_the_capacity_readers_know(name, mib, label) -> None:
    assert vram_gb(name, mib * MIB) == label


def test_table_does_not_catch_longer_names() -> None:
    assert vram_gb("NVIDIA A100 80GB PCIe", 81920 * MIB) == 80  # not the A10 entry
    assert vram_gb("NVIDIA L4", 23034 * MIB) == 24
    assert vram_gb("NVIDIA A10G", 22731 * MIB) == 24
    assert vram_gb("NVIDIA RTX PRO 6000D Blackwell Workstation Edition", 86016 * MIB) == 84


# The banner's first lines as `nvidia-smi` printed them on an H200.
BANNER = [
    "Sun Nov 29 22:37:58 2026",
    "+" + "-" * 89 + "+",
    "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0"
    "     |",
]


def _fake_nvidia_smi(tmp_path: Path, monkeypatch, lines: list[str]) -> None:
    """`nvidia-smi` prints the banner; with a query, the CSV lines."""
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nif [ $# -eq 0 ]; then cat <<'EOF'\n" + "\n".join(BANNER)
                      + "\nEOF\nelse cat <<'EOF'\n" + "\n".join(lines) + "\nEOF\nfi\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: the CLI is the fallback


def test_nvidia_smi_fallback(tmp_path, monkeypatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, ["NVIDIA H200, 143771, 580.159.03"] * 8)
    hw = provenance.detect_hardware()
    assert (hw.type, hw.gpu_name, hw.gpu_count, hw.vram_gb_per_gpu, hw.driver, hw.cuda) == (
        "Discrete GPU", "H200", 8, 141, "580.159.03", "13.0")
    assert hw.cpu and hw.os


def test_nvml(monkeypatch) -> None:
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=81559 * MIB),
        nvmlSystemGetDriverVersion=lambda: "580.159.03",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    hw = provenance.gpu_hardware()
    assert (hw.gpu_name, hw.gpu_count, hw.vram_gb_per_gpu, hw.cuda) == ("H100 80GB HBM3", 2, 80, "13.0")


def test_no_gpu_is_a_cpu_machine(tmp_path, monkeypatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert provenance.detect_hardware().type == "CPU"


# -- the launch command from the local process table ---------------------------

LISTENER = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "s.bind(('127.0.0.1', 0))\n"
    "s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "time.sleep(60)\n"
)


def test_local_launch_command_is_redacted() -> None:
    """A server's command line is visible to every user of the host and is
    published with the run: the key in it must not be, whatever its shape."""
    import subprocess

    key = "local-Key-4242-abcdef"
    args = ["--api-key", key, "-k", "short-k-9876", "--hf-token=hf_" + "a1" * 15,
            "-H", "x-api-key: hdr-5555-zz", "--max-num-batched-tokens", "16384"]
    proc = subprocess.Popen([sys.executable, "-c", LISTENER, *args], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        command = provenance.local_launch_command(f"http://127.0.0.1:{port}/v1")
        literal = provenance.local_launch_command(f"http://127.0.0.1:{port}/v1", ["--max-num"])
    finally:
        proc.kill()
        proc.wait()
    assert command is not None and "--max-num-batched-tokens 16384" in command
    for secret in (key, "short-k-9876", "hf_a1a1", "hdr-5555-zz"):
        assert secret not in command, command
    assert command.count("<redacted>") == 4
    assert "--max-num" not in literal  # the run's own secrets are passed through too


def test_local_launch_command_of_a_remote_or_odd_url_is_none() -> None:
    assert provenance.local_launch_command("https://api.example.com/v1") is None
    assert provenance.local_launch_command("http://127.0.0.1:notaport/v1") is None
