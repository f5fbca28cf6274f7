"""The seed-fidelity check lets a new metric add a column to an imported page, and
nothing else (issue 31, item 5): every published column exact, in its order, and an
added column only a metric's and empty on every row. Each case below is a change
the check must refuse, then the same page built with a new metric column, which it
must accept, and with one published figure's format changed, which it must refuse.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rundir.words import MISSING
from site_builder import metrictable, pages
from site_builder.glossary import MEASUREMENT_HEADERS
from tests.site.test_site_seed import _build, assert_seed_columns, check_page_matches_seed
from tests.support.synthetic_runs import QWEN_SEED_TEXT

SEED = [["Phase", "Context", "TTFT"], ["Prefill", "8K", "250 ms"], ["Decode", "8K", "4.8 ms"]]
E2E = "End-to-end latency"  # a metric's header the seeds were published without


def _with_column(at: int, header: str, values: list[str]) -> list[list[str]]:
    return [[*r[:at], v, *r[at:]] for r, v in zip(SEED, [header, *values], strict=True)]


def test_the_published_table_itself_passes() -> None:
    assert_seed_columns([list(r) for r in SEED], SEED)


@pytest.mark.parametrize("at", [1, 3])
def test_an_empty_metric_column_may_be_added_anywhere(at: int) -> None:
    assert_seed_columns(_with_column(at, E2E, [MISSING, MISSING]), SEED)


@pytest.mark.parametrize("ours, why", [
    ([SEED[0], SEED[1], ["Decode", "8K", "4.9 ms"]], "a published value changed"),
    ([["Phase", "TTFT", "Context"], ["Prefill", "250 ms", "8K"], ["Decode", "4.8 ms", "8K"]],
     "published columns out of their order"),
    ([["Phase", "Context"], ["Prefill", "8K"], ["Decode", "8K"]], "a published column dropped"),
    (SEED[:2], "a row dropped"),
    (_with_column(3, E2E, [MISSING, "1,234 ms"]), "a new column with a figure"),
    (_with_column(3, "Notes", [MISSING, MISSING]), "a column that is no metric's"),
    (_with_column(3, "TTFT", [MISSING, MISSING]), "a published column twice"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_every_other_change_fails(ours: list[list[str]], why: str) -> None:
    with pytest.raises(AssertionError):
        assert_seed_columns(ours, SEED)


def _new_column_after_tbt(monkeypatch: pytest.MonkeyPatch, **change: object) -> None:
    """The page as built once a metric (End-to-end latency, standing in for any new one)
    has an All measurements column right after Time between tokens."""
    new = replace(next(m for m in metrictable.TABLE if m.header == E2E), column="measured")
    measured = list(metrictable.MEASURED)
    at = next(i for i, m in enumerate(measured) if m.key == "tbt_ms") + 1
    measured.insert(at, new)
    if change:  # a change to a published column's record
        measured = [replace(m, **change) if m.key == "ttft_ms" else m for m in measured]
    monkeypatch.setattr(metrictable, "MEASURED", measured)
    monkeypatch.setattr(pages, "MEASUREMENT_HEADERS",
                        [*MEASUREMENT_HEADERS[:4], *(m.header for m in measured)])


def test_a_new_metric_column_on_the_seed_page_passes(tmp_path: Path, monkeypatch) -> None:
    _new_column_after_tbt(monkeypatch)
    doc, lines = _build(tmp_path, QWEN_SEED_TEXT)
    header = doc.find("section", id="measurements").find("table", "measurements").rows()[0]
    assert E2E in header  # the column is there, and the check lets it be
    check_page_matches_seed(doc, lines)


def test_a_changed_published_figure_on_the_seed_page_fails(tmp_path: Path, monkeypatch) -> None:
    _new_column_after_tbt(monkeypatch, fmt=lambda v: "—" if v is None else f"{v:.2f} ms")
    doc, lines = _build(tmp_path, QWEN_SEED_TEXT)
    with pytest.raises(AssertionError):
        check_page_matches_seed(doc, lines)
