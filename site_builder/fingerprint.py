"""The one rule by which the build's caches know their code changed.

Two caches outlive a build: the per-run aggregates (aggregate.AggregateCache,
keyed by the run's digest salted with `code_salt`) and the rendered pages
(keyed by publish's page fingerprint). Both must miss when anything their
output is computed from changes. Why one rule: a hand-kept list of files
drifts (it missed rundir/io.py, whose reader decides what a cached run holds),
while "every module of the packages the build runs" cannot. So both caches
hash `code_files()`: every module of rundir/ (the contract, its reader, the
metrics, words and slugs) and of site_builder/. Pages also depend on the
templates and static files, the methodology text, the prices and the asset
names: publish hashes those beside the code, through `fingerprint` too.
Aggregates do not read templates, so a CSS edit keeps them cached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import rundir
import site_builder

# The packages whose every module the site's output may depend on.
CODE_PACKAGES: tuple[Path, ...] = (Path(rundir.__file__).parent, Path(site_builder.__file__).parent)


def code_files() -> list[Path]:
    """Every module of CODE_PACKAGES, in a fixed order."""
    return [p for root in CODE_PACKAGES for p in sorted(root.rglob("*.py"))]


def fingerprint(files: Iterable[Path], *texts: str) -> str:
    """sha256 (hex) over each file's name (with its folder) and bytes, then the texts;
    every part is length-prefixed, so no two different inputs run together."""
    h = hashlib.sha256()

    def part(data: bytes) -> None:
        h.update(len(data).to_bytes(8, "big") + data)

    for path in files:
        part(f"{path.parent.name}/{path.name}".encode())
        part(path.read_bytes())
    for text in texts:
        part(text.encode())
    return h.hexdigest()
