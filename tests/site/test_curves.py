"""The MLPerf-endpoint-style curve export (issue 20, item 5): per run, one point per
decode cell with numbers, tok/s per user = 1000 / time between tokens p90, TTFT p90,
None where a p90 has fewer than 10 samples (never the median in its place)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rundir import contract
from site_builder import curves
from site_builder.aggregate import CellResult
from site_builder.publish import build_site
from tests.support.chromium import parse_html
from tests.support.synthetic_runs import make_imported_run, make_measured_run


def _cell(ctx: int, conc: int, status: str = contract.VALID, phase: str = contract.DECODE,
          **kw: object) -> CellResult:
    return CellResult(phase=phase, context=ctx, concurrency=conc, status=status, **kw)


def _run(cells: list[CellResult]) -> SimpleNamespace:
    return SimpleNamespace(run_id="r", slug="r", title="R", agg=SimpleNamespace(cells=cells))


def test_tok_s_per_user_is_1000_over_the_p90_time_between_tokens() -> None:
    assert curves.tok_s_per_user(20.0) == 50.0
    assert curves.tok_s_per_user(None) is None and curves.tok_s_per_user(0.0) is None


def test_points_are_the_decode_cells_with_numbers_by_context_then_concurrency() -> None:
    tail = {"tbt_ms_p90": 25.0, "tbt_ms_n": 40, "ttft_ms_p90": 310.0, "ttft_ms_n": 48}
    cells = [_cell(8192, 1, total_tok_s=50.0, tbt_ms=20.0, tails=tail),
             _cell(1024, 8, contract.REQUESTS_QUEUED, total_tok_s=400.0, tails=tail),
             _cell(1024, 2, total_tok_s=110.0, tails=tail),
             _cell(1024, 16, contract.OVER_CAPACITY),
             _cell(1024, 4, contract.LOOPED, total_tok_s=None),
             _cell(1024, 1, phase=contract.PREFILL, total_tok_s=9000.0, tails=tail)]
    points = curves.curve_points(_run(cells))  # type: ignore[arg-type]
    assert [(p["context"], p["concurrency"]) for p in points] == [(1024, 2), (1024, 8), (8192, 1)]
    first = points[0]
    assert list(first) == curves.POINT_COLUMNS
    assert (first["system_tok_s"], first["tok_s_per_user"], first["ttft_ms_p90"]) == (
        110.0, 40.0, 310.0)
    assert (first["tbt_ms_n"], first["ttft_ms_n"], first["context_label"]) == (40, 48, "1K")
    assert points[1]["status"] == contract.REQUESTS_QUEUED


def test_a_p90_with_too_few_samples_stays_none_not_the_median() -> None:
    few = _cell(1024, 1, total_tok_s=60.0, tbt_ms=16.0, ttft_ms=30.0,
                tails={"tbt_ms_p50": 16.0, "tbt_ms_p90": None, "tbt_ms_n": 6,
                       "ttft_ms_p50": 30.0, "ttft_ms_p90": None, "ttft_ms_n": 7})
    (point,) = curves.curve_points(_run([few]))  # type: ignore[arg-type]
    assert point["tok_s_per_user"] is None and point["ttft_ms_p90"] is None
    assert (point["tbt_ms_n"], point["ttft_ms_n"]) == (6, 7)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("curve")
    data = root / "data"
    make_measured_run(data / "m", run_id="m", contexts=[1024, 4096], concurrency=[1, 8],
                      duration_s=1.0, max_output_tokens=16, tokens_per_chunk=1, seed=5)
    make_imported_run(data / "imp", run_id="imp", cells=[
        {"phase": contract.DECODE, "context": 1024, "concurrency": 2, "total_tok_s": 120.5,
         "tbt_ms": 16.6}])
    assert build_site(data, root / "site").errors == []
    return root / "site"


def test_each_run_publishes_its_curve_as_json_and_csv(site: Path) -> None:
    curve = json.loads((site / "runs/m/curve.json").read_text(encoding="utf-8"))
    cells = json.loads((site / "runs/m/cells.json").read_text(encoding="utf-8"))["cells"]
    assert (curve["run_id"], curve["percentile"]) == ("m", "p90")
    decode = [c for c in cells if c["phase"] == contract.DECODE]
    assert [(p["context"], p["concurrency"]) for p in curve["points"]] == [
        (c["context"], c["concurrency"]) for c in decode]
    for point, cell in zip(curve["points"], decode, strict=True):
        assert point["system_tok_s"] == cell["total_tok_s"]
        assert point["ttft_ms_p90"] == cell["ttft_ms_p90"] and point["tbt_ms_n"] == cell["tbt_ms_n"]
        if cell["tbt_ms_p90"] is None:
            assert point["tok_s_per_user"] is None
        else:
            assert point["tok_s_per_user"] == pytest.approx(1000 / cell["tbt_ms_p90"])
    assert any(p["tok_s_per_user"] for p in curve["points"])  # the 8-stream cells have a p90
    with (site / "runs/m/curve.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["system_tok_s"]) for r in rows] == [p["system_tok_s"] for p in curve["points"]]
    imported = json.loads((site / "runs/imp/curve.json").read_text(encoding="utf-8"))["points"]
    assert [(p["system_tok_s"], p["tok_s_per_user"]) for p in imported] == [(120.5, None)]


def test_the_downloads_and_run_pages_link_the_curve(site: Path) -> None:
    hrefs = [a.attrs["href"] for a in parse_html(
        (site / "downloads.html").read_text(encoding="utf-8")).find_all("a")]
    assert {"runs/m/curve.csv", "runs/m/curve.json", "runs/imp/curve.json"} <= set(hrefs)
    run_page = parse_html((site / "runs/m/index.html").read_text(encoding="utf-8"))
    links = [a.attrs["href"] for a in run_page.find("section", id="downloads").find_all("a")]
    assert "curve.csv" in links and "curve.json" in links
