"""Speculative decoding against the real llama-server (issue 35, item 4).

`bench run` against llama-server drafting with the target itself (every draft
accepted) and with make_tiny_models.py's disagreeing draft (none accepted),
both greedy (docs/engines.md, "Speculative decoding (llama.cpp)"). The truth
is llama.cpp's own arithmetic, checked here against its /metrics counters: a
request of n tokens gets its first from the prompt's pass, then steps that each
draft min(n_max, tokens still owed - 1) and add one token of the target's.

llama-server streams one event per token, not per verification step, and on
these hosts chunk timing cannot tell the steps apart (measured: docs/engines.md),
so the client-side figure must read "not measurable" there; the server's figure
is the one that must order the two drafts and match the truth within 2%.
The second test reads what the run page publishes (site_builder.spec over the
run's files): the `engine_draft_*` request columns, the engine's figure, and no
client figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

import httpx
import pyarrow as pa
import pytest

from bench.cli import EXIT_ERROR_CELLS
from rundir.contract import PURPOSE_MEASURE
from rundir.io import read_run
from rundir.speculative import request_steps
from site_builder.spec import spec_cells
from tests.conftest import run_cli
from tests.support.real_engines import DRAFT_MAX, OTHER_DRAFT, SELF_DRAFT, llama_server_with_draft

MAX_OUTPUT = 64  # short enough that a loaded host still finishes some inside the window
COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total")


@dataclass
class SpecRun:
    cells: list[dict]
    requests: list[dict]
    counters: dict[str, float]  # /metrics over the run (deltas)
    engine: str | None  # run.yaml's server engine


class Drafts(NamedTuple):
    drafted: int  # timings.draft_n
    accepted: int  # timings.draft_n_accepted
    steps: int  # the target's passes after the prompt's, one token added by each
    drafting: int  # those that drafted anything: what spec_decode_num_drafts_total counts


def expected_drafts(tokens: int, accepted_all: bool, n_max: int = DRAFT_MAX) -> Drafts:
    """What llama-server reports for a request of `tokens` output tokens whose
    drafts are all accepted, or none (the two tiny drafts)."""
    drafted = accepted = steps = drafting = 0
    left = tokens - 1  # the first token comes from the prompt's pass
    while left > 0:
        draft = min(n_max, left - 1)
        got = draft if accepted_all else 0
        drafted, accepted, left = drafted + draft, accepted + got, left - got - 1
        steps, drafting = steps + 1, drafting + (draft > 0)
    return Drafts(drafted, accepted, steps, drafting)


def test_expected_drafts_matches_what_llama_server_reported() -> None:
    """Seen in llama-server's timings and counters (docs/engines.md): 48 tokens all
    accepted: 35 drafted over 12 steps; 128: 95 over 32; none accepted: 375 over
    127 steps of which 126 drafted; 5: 6 over 4 steps, 3 drafting; 2: no draft."""
    assert expected_drafts(48, True) == (35, 35, 12, 12)
    assert expected_drafts(128, True) == (95, 95, 32, 32)
    assert expected_drafts(128, False) == (375, 0, 127, 126)
    assert expected_drafts(5, False) == (6, 0, 4, 3)
    assert expected_drafts(2, False) == (0, 0, 1, 0)
    assert expected_drafts(1, True) == (0, 0, 0, 0)


def spec_counters(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics", timeout=10.0).text
    found = {m.group(1): float(m.group(2))
             for m in re.finditer(r"^llamacpp:(\w+)\s+(\S+)$", text, re.MULTILINE)}
    missing = [c for c in COUNTERS if c not in found]
    assert not missing, f"llama-server /metrics lacks {missing}"
    return {c: found[c] for c in COUNTERS}


@pytest.fixture(scope="module")
def spec_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SpecRun]:
    """One 1K decode cell (one stream) per draft, servers one after the other."""
    runs = {}
    for which in (SELF_DRAFT, OTHER_DRAFT):
        out = tmp_path_factory.mktemp(f"spec-{which}") / "run"
        with llama_server_with_draft(which) as engine:
            before = spec_counters(engine.base_url)
            res = run_cli("bench", "run", "--base-url", engine.base_url, "--out", str(out),
                          "--contexts", "1k", "--concurrency", "1", "--no-prefill", "--duration", "4",
                          "--warmup-stable", "0.5", "--max-output", str(MAX_OUTPUT),
                          "--server-wait", "5", timeout=900)
            after = spec_counters(engine.base_url)
        # a cell may still be judged Error on a loaded host (a stall): the rows are what is checked
        assert res.returncode in (0, EXIT_ERROR_CELLS), res.stderr[-3000:]
        run = read_run(out)
        runs[which] = SpecRun(run.cells.to_pylist(), run.requests.to_pylist(),
                              {c: after[c] - before[c] for c in COUNTERS}, run.info.engine.name)
    return runs


def measured(run: SpecRun) -> list[dict]:
    rows = [r for r in run.requests if r["purpose"] == PURPOSE_MEASURE and r["error"] is None]
    assert rows, "no measured request"
    return rows


def finished(run: SpecRun) -> list[dict]:
    """Measured requests that ran to max_tokens (the window clips the last ones)."""
    rows = [r for r in measured(run) if r["chunk_tokens"] and r["chunk_tokens"][-1] == MAX_OUTPUT]
    assert rows, "no measured request reached max_tokens"
    return rows


def true_tokens_per_step(run: SpecRun, accepted_all: bool) -> float:
    steps = [expected_drafts(r["chunk_tokens"][-1], accepted_all).steps for r in finished(run)]
    return sum(r["chunk_tokens"][-1] - 1 for r in finished(run)) / sum(steps)


@pytest.mark.engine_llama
def test_llama_server_drafts_per_step_but_streams_per_token(spec_runs: dict[str, SpecRun]) -> None:
    """What the collector will be checked against: the counters show the
    expected acceptance, and every chunk of every stream carries one token."""
    for which, run in spec_runs.items():
        for row in measured(run):
            cum = row["chunk_tokens"]
            rises = [b - a for a, b in zip([0, *cum], cum, strict=False) if b != a]
            assert rises and set(rises) == {1}, (which, rises[:20])
    own, other = spec_runs[SELF_DRAFT].counters, spec_runs[OTHER_DRAFT].counters
    assert own["spec_decode_num_draft_tokens_total"] > 0
    assert own["spec_decode_num_accepted_tokens_total"] == own["spec_decode_num_draft_tokens_total"]
    assert other["spec_decode_num_draft_tokens_total"] > 0
    assert other["spec_decode_num_accepted_tokens_total"] == 0
    # tokens per step from the counters alone: n_max + 1 at most, near it when all are accepted
    per_step = 1 + own["spec_decode_num_accepted_tokens_total"] / own["spec_decode_num_drafts_total"]
    assert DRAFT_MAX + 1 - 0.2 < per_step <= DRAFT_MAX + 1, own
    # every finished request's drafts are in the counters (which also hold those of
    # the requests the window clipped and of the collector's own short probes)
    for which, accepted_all in ((SELF_DRAFT, True), (OTHER_DRAFT, False)):
        run = spec_runs[which]
        sums = [expected_drafts(r["chunk_tokens"][-1], accepted_all) for r in finished(run)]
        assert sum(d.drafting for d in sums) <= run.counters["spec_decode_num_drafts_total"], which
        assert sum(d.drafted for d in sums) <= run.counters["spec_decode_num_draft_tokens_total"], which


@pytest.mark.engine_llama
def test_published_acceptance_matches_llama_server(spec_runs: dict[str, SpecRun]) -> None:
    """What the run page publishes (site_builder.spec, from the run's own files):
    no client figure (one token a chunk hides the steps), the engine's figure
    within 2% of the truth, the self-draft above the disagreeing one."""
    server = {}
    for which, accepted_all in ((SELF_DRAFT, True), (OTHER_DRAFT, False)):
        run = spec_runs[which]
        # (a) each request's draft stats are llama-server's own `timings` for it
        for row in finished(run):
            drafted, accepted, _, _ = expected_drafts(row["chunk_tokens"][-1], accepted_all)
            assert (row["engine_draft_tokens"], row["engine_draft_accepted"]) == (drafted, accepted), row
        reported = [r for r in run.requests if r["engine_draft_tokens"] is not None]
        assert sum(r["engine_draft_accepted"] for r in reported) <= \
            run.counters["spec_decode_num_accepted_tokens_total"]
        # one token per chunk: no step is visible in the stream
        assert all(request_steps(r["chunk_tokens"]).most == 1 for r in finished(run))
        cell = next(c for c in spec_cells(pa.Table.from_pylist(run.cells),
                                          pa.Table.from_pylist(run.requests), run.engine)
                    if c.context == 1024)
        assert cell.client is None and "not measurable" in (cell.note or ""), cell
        # (b) the published server figure is the truth within 2%
        server[which] = cell.server
        assert server[which] == pytest.approx(true_tokens_per_step(run, accepted_all), rel=0.02)
    assert server[SELF_DRAFT] > server[OTHER_DRAFT]
    assert server[OTHER_DRAFT] == pytest.approx(1.0, rel=0.02)
