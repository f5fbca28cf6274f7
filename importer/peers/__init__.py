"""Readers of other benchmark tools' output files, told apart by content.

Each reader module exposes ``FORMATS``: a tuple of ``(name, sniff, read)``,
where ``sniff(head: bytes) -> bool`` looks at the file's first 64 KiB and
``read(path) -> PeerRun`` reads it whole (raising PeerFormatError). The
order of READERS is the order they are tried; the first sniff that says yes
reads the file, so a sniff must be specific to its format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from importer.peers.model import PeerFormatError, PeerRun

Sniff = Callable[[bytes], bool]
Read = Callable[[Path], PeerRun]
SNIFF_BYTES = 64 * 1024

READER_MODULES: tuple[str, ...] = (
    # one line per reader module, e.g. "importer.peers.aiperf",
    "importer.peers.mlperf_endpoints",
    "importer.peers.aiperf",
    "importer.peers.guidellm",
    "importer.peers.inference_perf",
    "importer.peers.vllm",
    "importer.peers.sglang",
)


def formats() -> list[tuple[str, Sniff, Read]]:
    import importlib

    out: list[tuple[str, Sniff, Read]] = []
    for name in READER_MODULES:
        out.extend(importlib.import_module(name).FORMATS)
    return out


def sniff_format(path: Path) -> tuple[str, Read] | None:
    """(format name, reader) of the first format whose sniff recognises the file."""
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    for name, sniff, read in formats():
        if sniff(head):
            return name, read
    return None


__all__ = ["PeerFormatError", "PeerRun", "formats", "sniff_format"]
