"""Readers of other benchmark tools' output files, told apart by content.

Each reader module exposes ``FORMATS``: a tuple of ``(name, sniff, read)``,
where ``sniff(head: bytes) -> bool`` looks at the file's first 64 KiB and
``read(path) -> PeerRun`` reads it whole (raising PeerFormatError). The
order of READERS is the order they are tried; the first sniff that says yes
reads the file, so a sniff must be specific to its format.

A module whose files can hold several runs (guidellm's one benchmark per
load point) also exposes ``READ_ALL = {format name: read_all(path) ->
list[PeerRun]}``; ``read_runs`` uses it where there is one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from importer.peers.model import PeerFormatError, PeerRun

Sniff = Callable[[bytes], bool]
Read = Callable[[Path], PeerRun]
ReadAll = Callable[[Path], list[PeerRun]]
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


def read_all_for(name: str) -> ReadAll | None:
    """The module's reader of every run in a file of format ``name``, where it has one."""
    import importlib

    for module in READER_MODULES:
        got = getattr(importlib.import_module(module), "READ_ALL", {}).get(name)
        if got is not None:
            return got
    return None


def read_runs(path: Path) -> tuple[str, list[PeerRun]] | None:
    """(format name, every run the file holds), or None when no reader recognises it."""
    sniffed = sniff_format(path)
    if sniffed is None:
        return None
    name, read = sniffed
    many = read_all_for(name)
    return name, (many(path) if many is not None else [read(path)])


__all__ = ["PeerFormatError", "PeerRun", "formats", "read_all_for", "read_runs", "sniff_format"]
