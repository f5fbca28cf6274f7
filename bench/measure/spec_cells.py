"""The engine's side of speculative decoding around a decode cell (issue 35).

The engine's spec-decode counters (EngineProfile.spec_counters: vLLM's) are
read once the cell's prefix warm-ups are done, before its streams start, and
again after the drain, so their rise holds the cell's measured streams alone
(a warm-up asks one token: no verification step). An engine without them may
tell its drafts per request instead (llama.cpp's timings), summed over the
measured requests that finished. rundir/speculative.py turns either into tokens
per step; the client's own figure is the builder's, from the stored chunks.
"""

from __future__ import annotations

from bench.measure.records import RequestRecord
from bench.server.engine_profiles import SPEC_ACCEPTED, SPEC_DRAFT_TOKENS, SPEC_DRAFTS
from rundir.contract import PURPOSE_MEASURE
from rundir.speculative import SOURCE_LLAMACPP, SOURCE_VLLM, counters_figure, timings_figure


def spec_columns(before: dict[str, float] | None, after: dict[str, float] | None,
                 records: list[RequestRecord]) -> dict | None:
    """A decode cell's spec_* columns of cells.parquet, or None where the engine told nothing."""
    if before and after and SPEC_DRAFTS in after and SPEC_ACCEPTED in after:
        def rise(name: str) -> float | None:
            return after[name] - before.get(name, 0.0) if name in after else None

        value, k = counters_figure(rise(SPEC_DRAFTS), rise(SPEC_DRAFT_TOKENS), rise(SPEC_ACCEPTED))
        if value is not None:
            return {"spec_tokens_per_step_server": value, "spec_source": SOURCE_VLLM,
                    "spec_draft_length": k}
    told = [r for r in records if r.purpose == PURPOSE_MEASURE and r.engine_draft_accepted is not None]
    value = timings_figure([r.tokens for r in told], [r.engine_draft_accepted for r in told])
    if value is None:
        return None
    return {"spec_tokens_per_step_server": value, "spec_source": SOURCE_LLAMACPP,
            "spec_draft_length": None}
