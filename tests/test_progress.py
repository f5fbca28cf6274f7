"""The sweep's ETA: prompt processing dominates large cells, so the estimate
learns the server's prompt speed from the prefill cells, which run first."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from bench.cells import Settings
from bench.plan import Cell
from bench.progress import PREFILL_TOK_S_GUESS, Eta, Progress, estimate_s
from rundir.contract import DECODE, PENDING, PREFILL, VALID

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
