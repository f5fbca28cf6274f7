"""Latency limits (site_builder/slo.py): reading them, judging cells at the boundary,
goodput from per-request figures, the best cell under them, the runs ranked by it
(site_builder/oppoint.slo_rank), and their place in a built site."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rundir import contract, tails
from site_builder import oppoint, rankings, slo
from site_builder.aggregate import CellResult, RunAggregate
from site_builder.publish import build_site
from site_builder.views import RunView
from tests.support.synthetic_runs import make_measured_run, run_info

K = 1024


def _cell(ctx: int, n: int, total: float | None, *, ttft99: float | None = 100.0,
          tbt99: float | None = 20.0, status: str = contract.VALID,
          intervals: dict | None = None) -> CellResult:
    cell = CellResult(phase=contract.DECODE, context=ctx, concurrency=n, status=status,
                      total_tok_s=total, per_request_tok_s=total / n if total else None,
                      ttft_ms=50.0, tbt_ms=10.0, measured_s=10.0,
                      intervals=intervals or {})
    cell.tails = {tails.TTFT.column("p99"): ttft99, tails.TBT.column("p99"): tbt99,
                  tails.TTFT.count_column(): 150 if ttft99 is not None else 40,
                  tails.TBT.count_column(): 150 if tbt99 is not None else 40}
    return cell


def _run(run_id: str, cells: list[CellResult], gpus: int | None = 1) -> RunView:
    info = run_info(run_id, info={"hardware": {"gpu_name": "H200 SXM" if gpus else None,
                                               "gpu_count": gpus}})
    return RunView(info, RunAggregate(run_id, contract.SOURCE_MEASURED, "d-" + run_id, cells),
                   run_id)


LIMITS = slo.parse("ttft_p99=2000,tbt_p99=50")


# ---- reading the limits ------------------------------------------------------
def test_parse_reads_both_spellings_of_a_dotted_level_and_round_trips() -> None:
    got = slo.parse("ttft_p99.9=2000, TBT_p99_9=12.5")
    assert got.limits == (slo.Limit("ttft", "p99.9", 2000.0), slo.Limit("tbt", "p99.9", 12.5))
    assert got.spec == "ttft_p99_9=2000,tbt_p99_9=12.5"
    assert slo.parse(got.spec) == got
    assert slo.parse(slo.DEFAULT_SPEC) == slo.DEFAULT
    assert slo.DEFAULT.text == "TTFT p90 ≤ 2,000 ms and Time between tokens p90 ≤ 50.0 ms"


@pytest.mark.parametrize("text, words", [
    ("", "got nothing"), ("ttft_p99=0", "positive"), ("ttft_p99=-5", "positive"),
    ("ttft_p99=nan", "positive"), ("ttft_p99=inf", "positive"),
    ("ttft_p98=100", "unknown level 'p98'"), ("e2e_p99=100", "METRIC ttft or tbt"),
    ("ttft=100", "METRIC ttft or tbt"), ("ttft_p99", "METRIC_LEVEL=MS"),
    ("ttft_p99=2s", "not a number"), ("ttft_p99=1,ttft_p90=2", "limited twice"),
    ("ttft_p99=1,,tbt_p99=2", "METRIC_LEVEL=MS"),
])
def test_parse_errors_are_one_line_and_say_what_was_expected(text: str, words: str) -> None:
    with pytest.raises(slo.SloError) as err:
        slo.parse(text)
    assert words in str(err.value) and "\n" not in str(err.value)


# ---- judging a cell ------------------------------------------------------------
def test_a_percentile_equal_to_its_limit_meets_and_one_above_misses() -> None:
    assert slo.judge(_cell(K, 1, 100.0, ttft99=2000.0, tbt99=50.0), LIMITS).meets
    above = slo.judge(_cell(K, 1, 100.0, ttft99=2000.0001, tbt99=50.0), LIMITS)
    assert not above.meets
    assert above.reasons == ("TTFT p99 2,000 ms > 2,000 ms",)  # rounded text, exact test


def test_a_missing_percentile_is_too_few_requests_not_a_miss() -> None:
    """Issue 32, item 5: a cell with too few requests for the percentile cannot be
    shown to meet the limit, and it has not missed it either."""
    verdict = slo.judge(_cell(K, 1, 100.0, tbt99=None), LIMITS)
    assert not verdict.meets and verdict.reasons == ()
    assert verdict.too_few_text == "too few requests (40 of 100 needed)"
    both = _cell(K, 1, 100.0, ttft99=None, tbt99=None)
    assert slo.judge(both, LIMITS).too_few_text == "too few requests (40 of 100 needed)"
    both.tails[tails.TBT.count_column()] = 39  # one request with a single token
    assert slo.judge(both, LIMITS).too_few_text == (
        "too few requests (TTFT p99: 40 of 100 needed; Time between tokens p99: 39 of 100 needed)")
    mixed = _cell(K, 1, 100.0, ttft99=9000.0, tbt99=None)
    assert slo.judge(mixed, LIMITS).reasons == ("TTFT p99 9,000 ms > 2,000 ms",)
    (row,) = slo.RunSlo(LIMITS).rows([mixed])  # a miss, naming the limit it could not judge
    assert (row["state"], row["why"]) == ("misses", "TTFT p99 9,000 ms > 2,000 ms; Time between "
                                                    "tokens p99: too few requests (40 of 100 needed)")


def test_more_requests_says_what_would_fill_the_unjudged_cells() -> None:
    few = _cell(K, 1, 100.0, tbt99=None)  # 40 TBT samples of the 100 p99 needs, 10 s window
    assert slo.more_requests([_cell(K, 2, 100.0)], LIMITS) is None
    assert slo.more_requests([few, _cell(K, 2, 100.0)], LIMITS) == (
        "1 cell has too few requests for a limited percentile: about 3× the requests "
        "would fill them, e.g. bench run --duration 25 or --repeats 3 (the percentiles "
        "pool a cell's windows).")


def test_p50_limits_judge_the_published_median() -> None:
    cell = _cell(K, 1, 100.0, ttft99=None, tbt99=None)  # medians 50 ms and 10 ms
    assert slo.judge(cell, slo.parse("ttft_p50=50,tbt_p50=10")).meets
    assert not slo.judge(cell, slo.parse("ttft_p50=49.9")).meets


def test_a_cell_without_numbers_never_meets() -> None:
    cell = _cell(K, 1, None, status=contract.OVER_CAPACITY)
    assert slo.judge(cell, LIMITS) == slo.Verdict(False, ("Over capacity",))


# ---- goodput ---------------------------------------------------------------------
def test_goodput_counts_the_window_tokens_of_requests_meeting_both_limits() -> None:
    per_request = {
        "ttft_ms":       [100.0, 2000.0, 2500.0, 300.0, 400.0, None, 10.0],
        "tbt_ms":        [20.0,  50.0,   10.0,   60.0,  None,  None, 50.01],
        "window_tokens": [500,   300,    700,    900,   1,     0,    40],
    }
    # meets: #0 (both in), #1 (both at the limit), #4 (one token: TTFT alone);
    # misses: #2 (TTFT), #3 (TBT), #5 (no token), #6 (TBT just over)
    got = slo.goodput(per_request, 4.0, LIMITS)
    assert (got.met, got.requests) == (3, 7)
    assert got.share == pytest.approx(3 / 7)
    assert got.tok_s == pytest.approx((500 + 300 + 1) / 4.0)
    ttft_only = slo.goodput(per_request, 4.0, slo.parse("ttft_p90=2000"))
    assert ttft_only.met == 5 and ttft_only.tok_s == pytest.approx((500 + 300 + 900 + 1 + 40) / 4)


def test_goodput_without_requests_or_window_is_missing() -> None:
    empty = slo.goodput({"ttft_ms": [], "tbt_ms": [], "window_tokens": []}, 4.0, LIMITS)
    assert empty.share is None and empty.tok_s == 0.0
    assert slo.goodput({"ttft_ms": [1.0], "tbt_ms": [1.0], "window_tokens": [5]}, 0,
                       LIMITS).tok_s is None


# ---- the best cell and the ranking --------------------------------------------
def test_best_cell_is_the_fastest_meeting_cell() -> None:
    cells = [_cell(K, 1, 100.0), _cell(K, 8, 900.0, ttft99=2100.0),  # fastest, misses
             _cell(K, 4, 400.0), _cell(4 * K, 4, 400.0)]              # tie: smaller context
    best = slo.best_cell(cells, LIMITS, lambda x: x.total_tok_s)
    assert (best.context, best.concurrency) == (K, 4)
    assert slo.best_cell(cells[1:2], LIMITS, lambda x: x.total_tok_s) is None


def test_slo_rank_orders_runs_by_their_best_meeting_cell_per_gpu() -> None:
    one = _run("one-gpu", [_cell(K, 8, 900.0), _cell(K, 16, 5000.0, ttft99=9000.0)], gpus=1)
    eight = _run("eight-gpus", [_cell(K, 8, 4000.0)], gpus=8)
    none = _run("misses", [_cell(K, 1, 9000.0, tbt99=80.0)], gpus=1)
    no_count = _run("no-gpu-count", [_cell(K, 1, 50.0)], gpus=None)
    ranked = oppoint.slo_rank([none, no_count, eight, one], LIMITS, "per_gpu")
    assert [e.run.run_id for e in ranked] == ["one-gpu", "eight-gpus", "no-gpu-count", "misses"]
    assert ranked[0].values["per_gpu"] == pytest.approx(900.0)
    assert ranked[1].values["per_gpu"] == pytest.approx(500.0)  # 4,000 over 8 GPUs
    assert ranked[2].cell is not None and ranked[2].values["per_gpu"] is None  # listed after
    assert ranked[3].cell is None  # no cell meets: last
    by_total = oppoint.slo_rank([one, eight], LIMITS, "total")
    assert [e.run.run_id for e in by_total] == ["eight-gpus", "one-gpu"]


def test_ties_within_noise_need_overlapping_intervals_on_both_sides() -> None:
    a = _run("a", [_cell(K, 8, 1000.0, intervals={"total_tok_s": [950.0, 1050.0]})])
    b = _run("b", [_cell(K, 8, 990.0, intervals={"total_tok_s": [960.0, 1020.0]})])
    c = _run("c", [_cell(K, 8, 800.0, intervals={"total_tok_s": [780.0, 820.0]})])
    d = _run("d", [_cell(K, 8, 790.0)])  # one window: no claim either way
    ranked = oppoint.slo_rank([d, c, b, a], LIMITS, "total")
    assert [(e.run.run_id, e.tied) for e in ranked] == [
        ("a", False), ("b", True), ("c", False), ("d", False)]
    per_gpu = oppoint.interval(b, b.agg.cells[0], "per_gpu")
    assert per_gpu == [960.0, 1020.0]


def test_client_data_carries_every_level_of_the_judged_figures() -> None:
    run = _run("one", [_cell(K, 8, 900.0, ttft99=1500.0, tbt99=None)])
    cell = rankings.client_data([run])["runs"][0]["cells"][0]
    assert cell["lv"]["ttft"] == [50.0, None, None, 1500.0, None]
    assert cell["lv"]["tbt"] == [10.0, None, None, None, None]
    assert cell["lt"]["ttft"][3] == "1,500 ms"
    assert "ci" not in cell


def test_latency_ranking_is_within_the_family_and_its_default_measure_follows_it() -> None:
    # A fast run of another model is not in the family's ranking under the limits.
    one = _run("one", [_cell(K, 8, 900.0)], gpus=1)
    eight = _run("eight", [_cell(K, 8, 4000.0)], gpus=8)
    other = run_info("tiny", info={"hardware": {"gpu_name": None, "gpu_count": None},
                                   "model": {"name": "tiny-random-llama"}})
    tiny = RunView(other, RunAggregate("tiny", contract.SOURCE_MEASURED, "d-tiny",
                                       [_cell(K, 8, 99_000.0)]), "tiny")
    from site_builder.views import family_groups

    runs = [one, eight, tiny]
    ctx = rankings.page_context(runs, index=True, models=family_groups(runs))
    ranked = ctx["slo"]
    assert [r["entry"].run.run_id for r in ranked["rows"]] == ["one", "eight"]
    assert ranked["by"] == "per_gpu" and ranked["total"] == 2
    tiny.slo = slo.RunSlo(LIMITS)  # limits its p99 figures keep
    alone = rankings.slo_context([tiny])  # a CPU family: no GPU count, ranked by total
    assert alone["by"] == "total" and alone["rows"][0]["place"] == 1


# ---- in a built site -------------------------------------------------------------
def test_built_site_judges_the_measured_run_and_caches_its_goodput(tmp_path: Path) -> None:
    make_measured_run(tmp_path / "data" / "run-a", run_id="run-a", contexts=[1024],
                      concurrency=[1, 4])
    cache = tmp_path / "cache"
    report = build_site(tmp_path / "data", tmp_path / "site", cache_dir=cache, jobs=1,
                        slo=slo.parse("ttft_p50=100000,tbt_p50=100000"))
    assert report.published and not report.errors
    slug = next((tmp_path / "site" / "runs").iterdir()).name
    cells = json.loads((tmp_path / "site" / "runs" / slug / "cells.json").read_text())["cells"]
    decode = [c for c in cells if c["phase"] == contract.DECODE and c["total_tok_s"]]
    assert decode
    for c in decode:  # limits every request keeps: all of them meet, goodput is the total
        assert c["slo_met_share"] == pytest.approx(1.0)
        assert c["goodput_tok_s"] == pytest.approx(c["total_tok_s"])
    assert list(cache.rglob("*.slo-*.json")), "the figures are cached for the next build"
    page = (tmp_path / "site" / "runs" / slug / "index.html").read_text()
    assert 'id="slo"' in page and "this build&#39;s limits" in page
    index = (tmp_path / "site" / "index.html").read_text()
    assert 'id="slo-rank"' in index and "TTFT p50 ≤ 100,000 ms" in index


def test_a_run_with_no_meeting_cell_says_why() -> None:
    """Issue 30: every imported run read "no cell meets the limits" though it was never
    judged (published medians: no p90 exists). Its row says it has medians only and
    that limits at p50 rank it; a measured run whose every cell has too few requests
    for the level says that; one whose cells were judged and missed keeps the words."""
    imported = [CellResult(contract.DECODE, 8 * K, n, contract.VALID, total_tok_s=100.0 * n,
                           ttft_ms=50.0, tbt_ms=10.0) for n in (1, 8)]
    assert slo.medians_only(imported)
    assert slo.none_meets(imported, slo.DEFAULT) == (
        "no p90 published (medians only): set the limits at p50 to rank it")
    assert slo.none_meets(imported, LIMITS).startswith("no p99 published (medians only)")
    few = [_cell(8 * K, n, 100.0 * n, ttft99=None) for n in (1, 8)]
    assert not slo.medians_only(few)
    assert slo.none_meets(few, LIMITS) == (
        "too few requests for p99 in every cell: a lower level ranks it "
        "(a longer --duration or --repeats fills it)")
    slow = [_cell(8 * K, n, 100.0 * n, ttft99=9000.0) for n in (1, 8)]
    assert slo.none_meets(slow, LIMITS) == slo.NONE_MEET == "no cell meets the limits"
    # the ranking's rows and its data carry it (slo.js says the same from `medians`)
    runs = [_run("imp", imported), _run("slow", slow)]
    for r in runs:
        r.slo = slo.RunSlo(LIMITS)
    rows = {row["entry"].run.run_id: row["label"] for row in rankings.slo_context(runs)["rows"]}
    assert rows == {"imp": "no p99 published (medians only): set the limits at p50 to rank it",
                    "slow": "no cell meets the limits"}
    data = {r["slug"]: r for r in rankings.client_data(runs)["runs"]}
    assert data["imp"].get("medians") is True and "medians" not in data["slow"]


def test_a_short_run_page_says_too_few_requests_and_what_fills_them(tmp_path: Path) -> None:
    """Issue 32, item 5, through `build-site`: a short run (a few requests per cell, p90
    needs 10) read "misses" in every row beside "Requests meeting 100.0%", and nothing
    said a longer --duration or --repeats would fill the section."""
    from click.testing import CliRunner

    from site_builder.cli import main as build_site_cli

    make_measured_run(tmp_path / "data" / "short", run_id="short", contexts=[1024],
                      concurrency=[1], duration_s=2.0)
    res = CliRunner().invoke(build_site_cli, ["-q", "--data", str(tmp_path / "data"),
                                              "--out", str(tmp_path / "site"),
                                              "--slo", "ttft_p90=100000,tbt_p90=100000"])
    assert res.exit_code == 0, res.output
    page = next((tmp_path / "site" / "runs").glob("*/index.html")).read_text()
    section = page[page.index('id="slo"'):page.index("</section>", page.index('id="slo"'))]
    assert "misses" not in section.split("<tbody>")[1].split("</tbody>")[0]
    assert 'class="slo-too-few"' in section
    assert "too few requests (" in section and " of 10 needed)" in section
    assert "100.0% (" in section  # the share says over how few requests
    assert "bench run --duration " in section and "or --repeats " in section
