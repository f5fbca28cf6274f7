"""Another version of this repository to measure against (benchmarks that
take `--baseline REV|DIR`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def export_tree(rev: str, dest: Path) -> Path:
    """The builder to compare with: a folder as it is, or a git revision of this
    repository exported into dest (`git archive`: the repository is not touched)."""
    if Path(rev).is_dir():
        return Path(rev).resolve()
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    got = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True)
    if got.returncode:
        why = (got.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        sys.exit(f"--baseline {rev}: not a folder, and git archive failed: {why}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=got.stdout, check=True)
    return dest
