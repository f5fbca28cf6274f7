"""benchmarks/_baselines.py: pandas, polars and DuckDB give the builder's cell metrics.

builder_scale.py measures the aggregation against these; a baseline that
drifted from the builder's definitions would make that comparison
meaningless, so each is checked here on a small real-shaped run (cells
with and without numbers, cancelled streams, the waiting gauge).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from benchmarks._baselines import BASELINES
from benchmarks._synthetic import make_large_run
from benchmarks.builder_scale import mismatches, ours
from rundir.io import RunData, read_run

NEEDS = {"pandas": "pandas", "polars": "polars", "duckdb": "duckdb"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    path: Path = tmp_path_factory.mktemp("baselines") / "run"
    make_large_run(path, run_id="run", seed=3, contexts=[8192, 32768, 65536],
                   concurrency=[1, 4, 16], duration_s=3.0)
    return read_run(path)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baseline_gives_the_builders_cell_metrics(name: str, run: RunData) -> None:
    if importlib.util.find_spec(NEEDS[name]) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{NEEDS[name]} is not installed (pip install -e '.[bench]')")
        pytest.skip(f"{NEEDS[name]} is not installed (pip install -e '.[bench]')")
    want = ours(run)
    got = BASELINES[name](run)
    assert len(want) >= 8
    assert mismatches(want, got) == []
