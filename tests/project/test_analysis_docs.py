"""The analysis examples in docs/data-format.md run, and agree with the builder.

Each example (pandas, polars, DuckDB) is read out of the document itself, run
from the repository's root over the sample run it names, and its
`throughput` table compared with `aggregate_run`'s total tok/s to 1e-9 for
every decode cell the site publishes numbers for. pandas comes with the test
extras; polars and DuckDB with the `bench` extra (.ci/run installs both), so
with CI set a missing one fails here instead of skipping.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
from pathlib import Path

import pytest

from rundir import contract
from rundir.io import read_run
from site_builder.aggregate import aggregate_run

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "data-format.md"
SAMPLE = "data/llama-cpp-tiny-cpu"


def examples() -> dict[str, str]:
    """The Python block under each `### NAME` heading of the analysis section."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Reading a run with pandas, polars or DuckDB", 1)[1]
    found = re.findall(r"^### (\w+)\n+```python\n(.*?)^```", section, re.S | re.M)
    return {name: code for name, code in found}


def rows(table: object) -> dict[tuple[int, int], float]:
    """{(context, concurrency): total_tok_s} from a pandas or polars frame."""
    if hasattr(table, "to_dicts"):  # polars
        records = table.to_dicts()
    else:
        records = table.to_dict("records")
    return {(int(r["context"]), int(r["concurrency"])): float(r["total_tok_s"]) for r in records}


@pytest.fixture(scope="module")
def published() -> dict[tuple[int, int], float]:
    agg = aggregate_run(read_run(REPO / SAMPLE))
    return {(x.context, x.concurrency): x.total_tok_s for x in agg.cells
            if x.phase == contract.DECODE and x.has_numbers}


def test_the_section_has_the_three_examples_over_the_sample_run() -> None:
    found = examples()
    assert sorted(found) == ["DuckDB", "pandas", "polars"]
    for code in found.values():
        assert f'run = "{SAMPLE}"' in code


@pytest.mark.parametrize("name, module", [("pandas", "pandas"), ("polars", "polars"),
                                          ("DuckDB", "duckdb")])
def test_example_runs_and_matches_the_builder(name: str, module: str, published,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is not installed (pip install -e '.[bench]')")
        pytest.skip(f"{module} is not installed (pip install -e '.[bench]')")
    monkeypatch.chdir(REPO)
    scope: dict[str, object] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(examples()[name], f"docs/data-format.md ({name})", "exec"), scope)  # noqa: S102
    got = rows(scope["throughput"])
    assert published and set(published) <= set(got)
    for key, want in published.items():
        assert abs(got[key] - want) <= 1e-9 * max(1.0, abs(want)), (key, got[key], want)
