"""`.ci/run` checks what the project declares: ruff runs, the pages' scripts parse,
extras install once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[2] / ".ci" / "run"
CHECK_JS = CI.parents[1] / "scripts" / "ci" / "check_js.sh"


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


def test_the_pages_scripts_are_checked_before_the_tests() -> None:
    cmds = _commands()
    check = [i for i, ln in enumerate(cmds) if ln == "bash scripts/ci/check_js.sh"]
    tests = [i for i, ln in enumerate(cmds) if re.search(r"\bpytest\b", ln)]
    assert check and tests and check[0] < tests[0]
    assert re.search(r"apt-get install .*\bnodejs\b", CI.read_text(encoding="utf-8"))


def _node() -> None:
    if shutil.which("node") is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed (.ci/run installs nodejs)")
        pytest.skip("node is not installed (.ci/run installs nodejs)")


def test_the_js_check_fails_on_a_broken_file_and_names_it(tmp_path: Path) -> None:
    _node()
    (tmp_path / "good.js").write_text("(function () { var a = 1; })();\n", encoding="utf-8")
    ok = subprocess.run(["bash", str(CHECK_JS), str(tmp_path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (tmp_path / "broken.js").write_text("(function () { var a = ; })();\n", encoding="utf-8")
    bad = subprocess.run(["bash", str(CHECK_JS), str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode != 0
    assert f"{tmp_path}/broken.js: JavaScript syntax error" in bad.stderr
    assert "good.js: JavaScript" not in bad.stderr


def test_the_js_check_passes_on_the_pages_scripts() -> None:
    _node()
    done = subprocess.run(["bash", str(CHECK_JS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
