"""The comparison's table of each tool's own definitions (site_builder/tooldefs.py) against
what each reader declares: the tool names it sets, and the definition text it writes into
run.yaml, read from the real fixtures. A reader whose definition changes fails here until
the table follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from importer.peers import sniff_format
from importer.peers.model import PeerRun
from site_builder import toolcompare, tooldefs

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
# One file per reader that declares its definitions (AIPerf's are in its summary export).
DECLARING = (
    "aiperf/refserver/profile_export_aiperf.json",
    "vllm/ref-detailed.json",
    "sglang/ref-details.jsonl",
    "guidellm/refserver-c4.benchmarks.json",
    "inference-perf/refserver-c4.per_request_lifecycle_metrics.json",
    "mlperf-endpoints/handmade-events.jsonl",
)
METRICS = [m for m, _ in toolcompare.METRICS]


def _read(rel: str) -> PeerRun:
    found = sniff_format(DATA / rel)
    assert found, rel
    return found[1](DATA / rel)


RUNS = {rel: _read(rel) for rel in DECLARING}


def test_the_table_names_each_tool_exactly_as_its_reader_does() -> None:
    tools = {run.tool for run in RUNS.values()}
    assert {tool for tool, _ in tooldefs.TOOL_DEFINITIONS} == tools
    assert set(tooldefs.TOTAL_DEFINITIONS) <= tools


@pytest.mark.parametrize("rel", DECLARING)
def test_every_figure_a_reader_defines_has_a_rule_resting_on_its_text(rel: str) -> None:
    run = RUNS[rel]
    published = {key.split(".")[0] for key in run.published if "." in key}
    defined = {m for m in run.definitions if m in METRICS}
    assert published <= defined  # a reader defines what it publishes
    for metric in defined:
        rule = tooldefs.TOOL_DEFINITIONS.get((run.tool, metric))
        assert rule is not None, f"{run.tool} {metric}: no rule"
        assert rule.source in run.definitions[metric], f"{run.tool} {metric}: {rule.source!r}"
        assert rule.rule is None or rule.rule in tooldefs.RULES
    guidellm_rank = "smallest value whose cumulative weight share" in run.definitions.get("percentiles", "")
    assert all((r.ranking == tooldefs.FIRST_REACHING) == guidellm_rank
               for (tool, _), r in tooldefs.TOOL_DEFINITIONS.items() if tool == run.tool)


def test_no_rule_is_claimed_for_a_figure_no_reader_defines() -> None:
    defined = {(run.tool, m) for run in RUNS.values() for m in run.definitions}
    assert set(tooldefs.TOOL_DEFINITIONS) <= defined
