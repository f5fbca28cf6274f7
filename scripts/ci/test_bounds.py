"""Say when the test tools' bounded versions fall behind, so CI notices a new major release.

The test extra bounds each tool below its next major release
(pyproject.toml): a fresh install cannot pick up a release that changes
what a test means (pytest 9's `approx` refused what pytest 8 compared
exactly). This script, run by `.ci/run` after the install, prints one
line per requirement:

- `ok`: the installed version is the newest the bound admits;
- `notice`: a release above the bound is out (try it, then lift the bound);
- `stale`: an older version than the newest admitted is installed — a
  machine with old packages cached would test what a fresh clone does not.
  This one fails the script (exit 1): CI must test what users install.

An index that cannot be reached leaves a requirement `unknown`, never
failed: the check is about what is installed, not about the network.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
EXTRAS = ("test", "bench")


def bounded_requirements(pyproject: Path = PYPROJECT,
                         extras: tuple[str, ...] = EXTRAS) -> list[Requirement]:
    """The extras' requirements, each once (the first extra naming it wins)."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    seen: dict[str, Requirement] = {}
    for extra in extras:
        for text in data["project"]["optional-dependencies"].get(extra, []):
            req = Requirement(text)
            seen.setdefault(req.name.lower(), req)
    return list(seen.values())


def upper_bound(req: Requirement) -> Version | None:
    """The version a `<X` clause stops below, or None without one."""
    bounds = [Version(s.version) for s in req.specifier if s.operator == "<"]
    return min(bounds) if bounds else None


def verdict(req: Requirement, installed: Version | None, released: list[Version]) -> tuple[str, str]:
    """(kind, line) for one requirement: kind is ok, notice, stale or unknown."""
    final = [v for v in released if not v.is_prerelease]
    admitted = [v for v in final if req.specifier.contains(v)]
    newest_admitted = max(admitted) if admitted else None
    newest = max(final) if final else None
    name = req.name
    if installed is None:
        return "stale", f"stale: {name} is not installed ({req} in pyproject.toml)"
    if newest is None:
        return "unknown", f"unknown: {name} {installed} installed; the index did not answer"
    if newest_admitted is not None and installed < newest_admitted:
        return "stale", (f"stale: {name} {installed} installed, {newest_admitted} is the newest "
                         f"{req} admits: run pip install --upgrade --upgrade-strategy eager")
    if not req.specifier.contains(newest):
        return "notice", (f"notice: {name} {newest} is out; pyproject.toml admits {req} "
                          f"({installed} installed): try the suite with it, then lift the bound")
    return "ok", f"ok: {name} {installed}"


_VERSIONS = re.compile(r"Available versions:\s*(.+)")


def released_versions(name: str) -> list[Version]:
    """What the package index offers (`pip index versions`); [] if it cannot say."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    match = _VERSIONS.search(out)
    if not match:
        return []
    versions = []
    for text in match.group(1).split(","):
        try:
            versions.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return versions


def installed_version(name: str) -> Version | None:
    try:
        return Version(metadata.version(name))
    except metadata.PackageNotFoundError:
        return None


def main() -> int:
    kinds = []
    for req in bounded_requirements():
        kind, line = verdict(req, installed_version(req.name), released_versions(req.name))
        kinds.append(kind)
        print(f"test_bounds: {line}")
    return 1 if "stale" in kinds else 0


if __name__ == "__main__":
    sys.exit(main())
