"""The test extra's bounds and the check that says when they fall behind (scripts/ci/test_bounds.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("test_bounds", ROOT / "scripts" / "ci" / "test_bounds.py")
assert _spec and _spec.loader
bounds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bounds)

RELEASED = [Version(v) for v in ("8.4.2", "9.0.3", "9.2.0", "10.0.0rc1")]


def test_every_test_and_bench_requirement_stops_below_a_next_release() -> None:
    reqs = bounds.bounded_requirements()
    assert {r.name for r in reqs} >= {"pytest", "ruff", "hypothesis", "playwright", "pandas"}
    for req in reqs:
        assert bounds.upper_bound(req) is not None, f"{req} has no upper bound"


def test_an_older_installed_version_than_admitted_is_stale() -> None:
    kind, line = bounds.verdict(Requirement("pytest>=9,<10"), Version("9.0.3"), RELEASED)
    assert kind == "stale"
    assert "9.0.3 installed, 9.2.0 is the newest" in line


def test_the_newest_admitted_is_ok_and_a_prerelease_above_is_no_notice() -> None:
    kind, _ = bounds.verdict(Requirement("pytest>=9,<10"), Version("9.2.0"), RELEASED)
    assert kind == "ok"


def test_a_release_above_the_bound_is_a_notice_not_a_failure() -> None:
    released = [*RELEASED, Version("10.0.0")]
    kind, line = bounds.verdict(Requirement("pytest>=9,<10"), Version("9.2.0"), released)
    assert kind == "notice"
    assert "pytest 10.0.0 is out" in line and "lift the bound" in line


def test_an_index_that_does_not_answer_is_unknown() -> None:
    kind, _ = bounds.verdict(Requirement("pytest>=9,<10"), Version("9.2.0"), [])
    assert kind == "unknown"


def test_ci_installs_the_newest_admitted_and_checks_them_before_the_tests() -> None:
    lines = [ln.split("#", 1)[0].strip()
             for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("step ", "echo "))]
    install = next(i for i, ln in enumerate(lines) if re.search(r"pip install .*-e ", ln))
    assert "--upgrade" in lines[install] and "--upgrade-strategy eager" in lines[install]
    check = next(i for i, ln in enumerate(lines) if "scripts/ci/test_bounds.py" in ln)
    tests = next(i for i, ln in enumerate(lines) if re.search(r"\bpytest\b", ln)
                 and "test_bounds" not in ln)
    assert install < check < tests
