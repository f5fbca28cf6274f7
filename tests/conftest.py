"""Shared fixtures: real engines (tests/engines.py) and the CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines import llama_server, vllm_server  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `bench` or `build-site` as a user would, in a fresh process."""
    module = {"bench": "bench.cli", "build-site": "site_builder.cli"}[args[0]]
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", f"import sys; from {module} import main; sys.exit(main())", *args[1:]],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli
