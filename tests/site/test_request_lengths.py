"""The run page's request lengths (site_builder/lengths.py): per phase, the asked
max_tokens and the per-request prompt lengths, min / median / max, from requests.parquet
alone; nothing for a run whose requests all asked the cell's own."""

from __future__ import annotations

import pyarrow as pa

from rundir.contract import DECODE, PREFILL, PURPOSE_ARRIVAL, PURPOSE_MEASURE, PURPOSE_PREFIX_FILL, RATE
from site_builder.aggregate import RunAggregate
from site_builder.lengths import LengthStat, length_stats, request_length_rows


def _req(phase: str, purpose: str, out: int | None, inp: int | None = None,
         prompt: int | None = None, conc: int = 1) -> dict:
    return {"phase": phase, "context": 1024, "concurrency": conc, "purpose": purpose, "output_target": out,
            "input_target": inp, "prompt_tokens": prompt}


def test_lengths_per_phase_from_the_requests() -> None:
    rows = [_req(DECODE, PURPOSE_MEASURE, n, conc=c)
            for n, c in ((23, 1), (23, 1), (23, 1), (64, 2), (50, 2))]
    rows += [_req(DECODE, PURPOSE_PREFIX_FILL, None), _req(PREFILL, "prefill", None)]  # not counted
    rows += [_req(RATE, PURPOSE_ARRIVAL, 64, 74, 69), _req(RATE, PURPOSE_ARRIVAL, 23, 75, 75),
             _req(RATE, PURPOSE_ARRIVAL, 64, 128, None)]  # no server count: the target
    stats = length_stats(pa.Table.from_pylist(rows))
    assert stats == [LengthStat(DECODE, 5, [23, 23, 64], None, 0, [[1024, 1, 23, 23], [1024, 2, 50, 64]]),
                     LengthStat(RATE, 3, [23, 64, 64], [69, 75, 128], 3)]
    assert request_length_rows(stats) == [
        ("Decode request lengths", "max_tokens asked 23 / 23 / 64 (min / median / max, 5 requests); "
                                   "per cell: 1K×1 23, 1K×2 50–64"),
        ("Rate request lengths", "max_tokens asked 23 / 64 / 64; prompts 69 / 75 / 128 tokens (the "
                                 "server's count) (min / median / max, 3 requests)")]
    one = length_stats(pa.Table.from_pylist([_req(DECODE, PURPOSE_MEASURE, 7)]))
    assert request_length_rows(one) == [("Decode request lengths", "max_tokens asked 7 (1 request)")]


def test_a_run_without_own_lengths_has_none_and_its_cache_text_is_unchanged() -> None:
    plain = pa.Table.from_pylist([_req(DECODE, PURPOSE_MEASURE, None), _req(RATE, PURPOSE_ARRIVAL, None)])
    assert length_stats(plain) == [] and length_stats(plain.drop(["output_target", "input_target"])) == []
    agg = RunAggregate("r", "s", "d", [])
    assert '"lengths"' not in agg.to_json()
    agg.lengths = [LengthStat(DECODE, 2, [1, 1.5, 2], None, 0, [[1024, 1, 1, 2]])]
    assert RunAggregate.from_json(agg.to_json()).lengths == agg.lengths
    assert agg.head().lengths == agg.lengths
