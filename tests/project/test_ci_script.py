"""`.ci/run` checks what the project declares: ruff runs, extras install once."""

from __future__ import annotations

import re
from pathlib import Path

CI = Path(__file__).resolve().parents[2] / ".ci" / "run"


def _commands() -> list[str]:
    """The script's command lines: comments, blank lines and `step` titles left out."""
    lines = (ln.split("#", 1)[0].strip() for ln in CI.read_text(encoding="utf-8").splitlines())
    return [ln for ln in lines if ln and not ln.startswith(("step ", "echo "))]


def test_ruff_check_runs_before_the_tests() -> None:
    cmds = _commands()
    ruff = [i for i, ln in enumerate(cmds) if re.search(r"\bruff check\b", ln)]
    tests = [i for i, ln in enumerate(cmds) if re.search(r"\bpytest\b", ln)]
    assert ruff and tests and ruff[0] < tests[0]


def test_the_extras_are_installed_once() -> None:
    installs = [ln for ln in _commands() if re.search(r"pip install .*-e ", ln)]
    assert len(installs) == 1, installs
    assert "test" in installs[0] and "bench" in installs[0]
