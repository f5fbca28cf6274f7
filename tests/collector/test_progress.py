"""The sweep's ETA: prompt processing dominates large cells, so the estimate
learns the server's prompt speed from the prefill cells, which run first."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pyarrow as pa
import pytest
from rich.console import Console

from bench.core.plan import Cell, Plan, make_plan
from bench.measure.cells import CellOutcome, Settings
from bench.measure.records import RequestRecord
from bench.run.progress import PREFILL_TOK_S_GUESS, Eta, Progress, estimate_s
from bench.run.summary import cell_label, cell_line, header, row
from rundir.contract import (
    COUNT_USAGE_CONTINUOUS,
    DECODE,
    ERROR,
    OVER_CAPACITY,
    PENDING,
    PREFILL,
    PREFILL_REJECTED_PREFIX,
    PURPOSE_PREFILL,
    REQUESTS_QUEUED,
    VALID,
)
from rundir.words import tok_s

SETTINGS = Settings(duration_s=30, stable_s=3, prefill_repeats=3)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_prefix_warmups_grow_with_streams_and_context() -> None:
    small, big = Cell(DECODE, 8192, 1), Cell(DECODE, 8192, 64)
    window = 30 + 3 + 4
    assert estimate_s([small], SETTINGS) == pytest.approx(window + 8192 / PREFILL_TOK_S_GUESS)
    assert estimate_s([big], SETTINGS) == pytest.approx(window + 64 * 8192 / PREFILL_TOK_S_GUESS)


def test_eta_learns_the_prompt_speed_from_prefill_cells() -> None:
    clock = Clock()
    eta = Eta(SETTINGS, clock)
    decode = Cell(DECODE, 10_000, 8)
    assert eta.remaining_s([decode]) == pytest.approx(37 + 8 * 10_000 / PREFILL_TOK_S_GUESS)
    eta.begin()
    clock.now += 6.0  # three 10,000-token samples in 6 s: 5,000 tok/s
    eta.end(Cell(PREFILL, 10_000, 1))
    assert eta.prefill_tok_s == 5_000
    assert eta.remaining_s([decode]) == pytest.approx(37 + 16.0)
    eta.begin()
    clock.now += 500.0  # decode cells teach nothing about prompt speed
    eta.end(decode)
    assert eta.prefill_tok_s == 5_000


def test_an_interrupted_cell_does_not_teach_the_eta() -> None:
    clock = Clock()
    progress = Progress(Console(file=io.StringIO()))
    progress.eta = Eta(SETTINGS, clock)
    for status, seconds in ((PENDING, 0.01), (VALID, 6.0)):
        cell = Cell(PREFILL, 10_000, 1)
        progress.begin(cell)
        clock.now += seconds
        progress.end(cell, SimpleNamespace(status=status, window=None, records=[], reason=None))
    assert progress.eta.prefill_tok_s == 5_000


# -- the terminal summary and the GPU panel (issue 14 item 3) ---------------------

MS = 1_000_000
CONTEXTS = [1024 * 2**i for i in range(8)] + [1_043_456]  # nine, up to 1019K
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]


class FakeTelemetry:
    """The sampler's read side, with scripted samples (one list of rows per look)."""

    enabled = True

    def __init__(self, samples: list[list[dict]]) -> None:
        self.samples = samples
        self.looks = 0

    def latest(self) -> list[dict]:
        rows = self.samples[min(self.looks, len(self.samples) - 1)]
        self.looks += 1
        return rows


def _gpu(gpu: int, bits: int = 0) -> dict:
    return {"gpu": gpu, "gpu_name": "NVIDIA H200 NVL with a long name", "power_w": 699.6,
            "sm_clock_mhz": 1980, "temp_c": 83.0, "util_gpu_pct": 100.0, "throttle_reasons": bits}


def _prefill_outcome(context: int) -> CellOutcome:
    """Three cold samples: first token 100, 200, 400 ms after the send (median 200 ms);
    a fourth rejected as a prefix-cache hit counts for nothing."""
    recs = [RequestRecord(
        phase=PREFILL, context=context, concurrency=1, request_id=f"p{i}", purpose=PURPOSE_PREFILL,
        stream_index=0, send_ns=0, end_ns=ms * MS, prompt_tokens=context, cached_tokens=None,
        finish_reason="length", error=error, cancelled=False, chunk_ns=[ms * MS],
        chunk_tokens=[1], counting=COUNT_USAGE_CONTINUOUS)
        for i, (ms, error) in enumerate([(100, None), (200, None), (400, None),
                                         (1, f"{PREFILL_REJECTED_PREFIX} cache hit")])]
    return CellOutcome(recs, VALID, None)


def _decode_outcome(status: str, i: int) -> SimpleNamespace:
    fig = SimpleNamespace(total_tok_s=9_999.9 - i, per_request_tok_s=9_999.9, ttft_ms=123_456.0,
                          output_tokens=1000)
    return SimpleNamespace(status=status, window=(0, 10 * MS), figures=fig,
                           reason=None if status == VALID else "a reason the server gave " * 6)


def _whole_run(telemetry=None, gpu: pa.Table | None = None) -> tuple[str, Plan]:
    plan = make_plan(contexts=CONTEXTS, concurrency=LEVELS, max_output=4096,
                     max_model_len=1_100_000, kv_budget=10**9, prefill=True)
    out = io.StringIO()
    progress = Progress(Console(file=out, width=80))
    progress.start(plan, SimpleNamespace(rows={c.key: {"status": PENDING} for c in plan.cells}),
                   telemetry)
    for i, cell in enumerate(plan.cells):
        progress.begin(cell)
        if cell.phase == PREFILL:
            progress.end(cell, _prefill_outcome(cell.context), gpu)
        else:
            status = (VALID, REQUESTS_QUEUED, OVER_CAPACITY, ERROR)[i % 4]
            progress.end(cell, _decode_outcome(status, i), gpu)
    progress.stop()
    return out.getvalue(), plan


def _energy_table() -> pa.Table:
    """One GPU, 100 W for 10 ms by its energy counter: 1 J over the window."""
    return pa.table({"t_ns": [0, 10 * MS], "gpu": [0, 0], "power_w": [100.0, 100.0],
                     "energy_mj": [5_000, 6_000], "throttle_reasons": [0, 0]})


def test_every_line_fits_80_columns_and_every_cell_is_one_line() -> None:
    shown, plan = _whole_run(FakeTelemetry([[_gpu(g, 0x4) for g in range(8)]]), _energy_table())
    lines = shown.splitlines()
    assert len(plan.cells) == 9 + 9 * 8 and max(map(len, lines)) <= 80
    for cell in plan.cells:  # each cell's figures on one unbroken line, once on a log (issue 32)
        label = cell_label(cell)
        rows = [t for t in lines if t.startswith(label + " ")]
        assert len(rows) == 1, label
        if cell.phase == DECODE and rows[0].endswith(("Valid", "Requests queued")):
            assert all(x in rows[0] for x in ("9,", "123,456 ms", "0.001"))


def test_the_prefill_line_carries_prompt_tok_s_and_ttft() -> None:
    line = cell_line(Cell(PREFILL, 8192, 1), _prefill_outcome(8192))
    assert line.ttft_ms == 200.0  # the rejected sample is not used, as on the pages
    assert line.tok_s == pytest.approx(8192 / 0.2)
    text = row(line, energy=False)
    assert text.split() == ["prefill", "8K", tok_s(8192 / 0.2), "200", "ms", "Valid"]


def test_decode_lines_carry_the_four_figures_and_status() -> None:
    fig = SimpleNamespace(total_tok_s=6216.04, per_request_tok_s=48.64, ttft_ms=1064.4,
                          output_tokens=10)
    outcome = SimpleNamespace(status=REQUESTS_QUEUED, window=(0, 10 * MS), figures=fig)
    line = cell_line(Cell(DECODE, 8192, 64), outcome, _energy_table())
    assert line.j_per_token == pytest.approx(0.1)  # 1 J over 10 tokens
    assert row(line, energy=True).split() == [
        "decode", "8K×64", "6,216.0", "48.6", "1,064", "ms", "0.100", "Requests", "queued"]
    assert "J/tok" in header(True) and "J/tok" not in header(False)


def test_the_throttle_warning_appears_once_when_throttling_starts() -> None:
    cap = 0x4  # NVML software power cap
    looks = [[_gpu(0), _gpu(1)], [_gpu(0, cap), _gpu(1)], [_gpu(0, cap), _gpu(1)],
             [_gpu(0, 0x1), _gpu(1)], [_gpu(0, cap), _gpu(1)]]  # idle is not throttling
    out = io.StringIO()
    progress = Progress(Console(file=out, width=80))
    progress.telemetry = FakeTelemetry(looks)
    progress.current = Cell(DECODE, 8192, 64)
    panels = [progress._look() for _ in looks]
    warnings = [t for t in out.getvalue().splitlines() if "throttling:" in t]
    assert warnings == ["GPU 0 throttling: power-capped in decode 8K×64 (SM 1,980 MHz, 700 W, 83 °C)"]
    assert "throttled" in panels[1][0] and "throttled" not in panels[1][1]
    assert panels[0][0] == "GPU 0 NVIDIA H200 NVL    700 W  SM 1,980 MHz   83 °C  util 100%"


def test_nothing_gpu_related_without_telemetry() -> None:
    shown, _ = _whole_run(None, _energy_table())  # a table handed in, but no sampler: ignored
    assert not re.search(r"GPU|J/tok|throttl|\bW\b|MHz|°C", shown)
    progress = Progress(Console(file=io.StringIO()))
    progress.start(make_plan(contexts=[1024], concurrency=[1], max_output=64, max_model_len=4096,
                             kv_budget=None, prefill=False),
                   SimpleNamespace(rows={}), SimpleNamespace(enabled=False))
    assert progress.telemetry is None and progress._look() == []


def test_a_valid_client_bound_cell_is_marked_and_its_reason_printed() -> None:
    """Issue 32: `*` meant "not Valid" here and "client-bound" on the page, and a
    Valid client-bound cell's reason was never printed."""
    plan = make_plan(contexts=[1024], concurrency=[1, 2], max_output=256, max_model_len=8192,
                     kv_budget=10**6, prefill=False)
    out = io.StringIO()
    progress = Progress(Console(file=out, width=80))
    progress.start(plan, SimpleNamespace(rows={c.key: {"status": PENDING} for c in plan.cells}))
    bound, queued = (SimpleNamespace(**vars(_decode_outcome(s, i)))
                     for i, s in enumerate((VALID, REQUESTS_QUEUED)))
    bound.client_bound, bound.reason = True, "client-bound: the collector could not keep up"
    for cell, outcome in zip(plan.cells, (bound, queued), strict=True):
        progress.begin(cell)
        progress.end(cell, outcome)
    progress.stop()
    shown = out.getvalue()
    first, second = (cell_label(c) for c in plan.cells)
    assert [t for t in shown.splitlines() if t.startswith(first + " ")][0].endswith("Valid*")
    assert f"  {first}: client-bound: the collector could not keep up" in shown
    assert [t for t in shown.splitlines() if t.startswith(second + " ")][0].endswith("Requests queued")
    grid = [t for t in shown.splitlines() if "│" in t]
    assert any("9,999.9*" in t for t in grid)  # the client-bound cell, marked
    assert any("9,998.9" in t for t in grid) and "9,998.9*" not in shown  # not Valid: no star
    assert "Requests queued" in shown.split("decode total tok/s")[1]  # its word, not a star
    assert "* client-bound" in shown
