"""Shared fixtures: real engines (tests/support/real_engines.py), the CLI runner, the browser."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.chromium import launch, require_chromium
from tests.support.real_engines import llama_server, vllm_server  # noqa: F401  (fixtures)

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, one per test module (closed with the module, so a module
    that drives Playwright itself never meets a second live instance)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


# Property tests (tests/site/test_site_properties.py): the same examples on every run and
# machine (derandomized, no example database), no per-example deadline on a busy CI
# box. HYPOTHESIS_PROFILE=explore draws fresh random examples instead.
from hypothesis import HealthCheck as _HealthCheck  # noqa: E402
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, database=None,
                                      print_blob=True, suppress_health_check=[_HealthCheck.too_slow])
_hypothesis_settings.register_profile("explore", deadline=None)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
