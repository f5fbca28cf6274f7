"""One row per engine dialect: everything the engine tests expect of it.

The engine tests (tests/engines/) run the same checks on every engine: the probe
picks its profile and reads its facts, its gauges add up over label sets, a
streaming request asks for its extras, its tokenize dialect sizes prompts, and a
whole `bench run` works against it. What differs by engine is written here and
nowhere else in those tests: they iterate ROWS and never branch on an engine's
name. Adding an engine dialect is one row here, its profile in
bench/server/engine_profiles.py and its start recipe: the reference server's
emulation (tests/refserver/dialects.py) and, where a real engine can run here,
a fixture in tests/support/real_engines.py with its marker.

The row states what the tests expect, not what the profile says: a profile that
drifts from its row fails the tests instead of carrying them along.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.server.engine_profiles import GENERIC, LLAMACPP, SGLANG, VLLM, EngineProfile
from rundir.contract import COUNT_CHUNKS_USAGE, COUNT_USAGE_CONTINUOUS

# The reference server's max model length unless a scenario sets another.
REF_MAX_MODEL_LEN = 32768

# How an engine tells its KV budget: its own figure ("reported", what the reference
# server is given as kv_budget_tokens), or not at all (None). llama-server tells only
# each slot's context, which is neither its cache's size nor, summed, an upper bound
# (docs/engines.md): its budget is unknown unless --kv-budget gives it.
REPORTED = "reported"


@dataclass(frozen=True)
class EngineRow:
    """What the tests expect of one engine dialect."""

    dialect: str  # the reference server's `engine` (tests/refserver/dialects.py DIALECTS)
    profile: EngineProfile  # the profile the probe must pick
    tokenize: str | None  # the tokenize dialect the probe reports (None: sized by a ratio)
    run_to_max: bool  # asks ignore_eos and usage on every chunk (continuous_usage_stats)
    token_counting: str  # how a cell's tokens are counted (rundir.contract COUNT_*)
    kv_budget: str | None  # REPORTED or None (unknown)
    server_facts: bool  # tells its max model length and version
    gauges: bool  # serves Prometheus gauges the sampler reads
    label_set_per_rank: bool = False  # one label set per data-parallel rank on its gauges
    # A real engine runnable here: its session fixture (tests/support/real_engines.py) and
    # the pytest marker its tests carry (pyproject.toml). None: the reference server only.
    real_fixture: str | None = None
    real_marker: str | None = None

    def expected_kv_budget(self, given: int) -> int | None:
        """The budget the probe must read when the reference server is given `given` tokens."""
        return given if self.kv_budget == REPORTED else None


ROWS: tuple[EngineRow, ...] = (
    EngineRow("vllm", VLLM, tokenize="vllm", run_to_max=True,
              token_counting=COUNT_USAGE_CONTINUOUS, kv_budget=REPORTED, server_facts=True,
              gauges=True, label_set_per_rank=True,
              real_fixture="vllm_server", real_marker="engine_vllm"),
    EngineRow("sglang", SGLANG, tokenize="sglang", run_to_max=True,
              token_counting=COUNT_USAGE_CONTINUOUS, kv_budget=REPORTED, server_facts=True,
              gauges=True, label_set_per_rank=True),
    EngineRow("llamacpp", LLAMACPP, tokenize="llama.cpp", run_to_max=True,
              token_counting=COUNT_USAGE_CONTINUOUS, kv_budget=None, server_facts=True,
              gauges=True, real_fixture="llama_server", real_marker="engine_llama"),
    EngineRow("generic", GENERIC, tokenize=None, run_to_max=False,
              token_counting=COUNT_CHUNKS_USAGE, kv_budget=None, server_facts=False,
              gauges=False),
)
BY_DIALECT: dict[str, EngineRow] = {r.dialect: r for r in ROWS}
WITH_GAUGES: tuple[EngineRow, ...] = tuple(r for r in ROWS if r.gauges)
REAL: tuple[EngineRow, ...] = tuple(r for r in ROWS if r.real_fixture)


def ids(rows: tuple[EngineRow, ...]) -> list[str]:
    """Test ids: the reference server's engine names."""
    return [r.dialect for r in rows]
