"""Operating point ranking (site_builder/oppoint.py), price tables and cost
(site_builder/prices.py), and the chooser's address state in a real browser."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rundir import contract
from site_builder import oppoint, prices
from site_builder.aggregate import CellResult, RunAggregate
from site_builder.views import RunView
from tests.support.synthetic_runs import run_info

K = 1024


def _cell(ctx: int, n: int, total: float | None, *, status: str = contract.VALID,
          per_request: float | None = None, ttft: float | None = 100.0) -> CellResult:
    has = status in (contract.VALID, contract.REQUESTS_QUEUED)
    return CellResult(phase=contract.DECODE, context=ctx, concurrency=n, status=status,
                      total_tok_s=total if has else None,
                      per_request_tok_s=(per_request or (total / n if total else None))
                      if has else None, ttft_ms=ttft if has else None)


def _run(run_id: str, cells: list[CellResult], *, gpus: int | None = 1,
         gpu: str | None = "H200 SXM", model: str = "Kimi-K2.6") -> RunView:
    info = run_info(run_id, info={"hardware": {"gpu_name": gpu, "gpu_count": gpus},
                                  "model": {"name": model}})
    agg = RunAggregate(run_id, contract.SOURCE_MEASURED, "d-" + run_id, cells)
    return RunView(info, agg, run_id)


# ---- ranking ---------------------------------------------------------------
def test_rank_exact_cells_by_total_and_per_gpu() -> None:
    one = _run("one-gpu", [_cell(32 * K, 8, 900.0)], gpus=1)
    eight = _run("eight-gpus", [_cell(32 * K, 8, 2000.0)], gpus=8)
    point = oppoint.Point(32 * K, 8)
    assert [e.run.run_id for e in oppoint.rank([one, eight], point, "total")] == [
        "eight-gpus", "one-gpu"]
    ranked = oppoint.rank([one, eight], point, "per_gpu")
    assert [e.run.run_id for e in ranked] == ["one-gpu", "eight-gpus"]
    assert ranked[1].values["per_gpu"] == pytest.approx(250.0)
    assert all(e.exact for e in ranked)


def test_ttft_ranks_lower_first() -> None:
    a = _run("slow", [_cell(8 * K, 1, 50.0, ttft=300.0)])
    b = _run("fast", [_cell(8 * K, 1, 40.0, ttft=90.0)])
    ranked = oppoint.rank([a, b], oppoint.Point(8 * K, 1), "ttft")
    assert [e.run.run_id for e in ranked] == ["fast", "slow"]


def test_nearest_cell_stands_in_marked_and_ranked_after_exact() -> None:
    exact = _run("exact", [_cell(32 * K, 8, 100.0)])
    # No 32K row: its nearest measured cell is 16K x 8 (one halving), not 64K x 16
    # (two doublings) nor 8K x 8 (two halvings); it is faster but comes second.
    near = _run("near", [_cell(8 * K, 8, 5000.0), _cell(16 * K, 8, 4000.0),
                         _cell(64 * K, 16, 6000.0)])
    ranked = oppoint.rank([near, exact], oppoint.Point(32 * K, 8), "total")
    assert [e.run.run_id for e in ranked] == ["exact", "near"]
    stand_in = ranked[1]
    assert not stand_in.exact
    assert (stand_in.cell.context, stand_in.cell.concurrency) == (16 * K, 8)


def test_nearest_tie_goes_to_the_smaller_point() -> None:
    run = _run("tie", [_cell(16 * K, 8, 1.0), _cell(64 * K, 8, 2.0)])
    cell, exact = oppoint.pick(run, oppoint.Point(32 * K, 8))
    assert not exact and cell.context == 16 * K


def test_a_point_the_run_could_not_serve_is_not_replaced() -> None:
    over = _run("over", [_cell(32 * K, 8, None, status=contract.OVER_CAPACITY),
                         _cell(32 * K, 4, 700.0)])
    ok = _run("ok", [_cell(32 * K, 8, 10.0)])
    ranked = oppoint.rank([over, ok], oppoint.Point(32 * K, 8), "total")
    assert [e.run.run_id for e in ranked] == ["ok", "over"]
    assert ranked[1].exact and ranked[1].cell.status == contract.OVER_CAPACITY
    assert ranked[1].values["total"] is None


def test_context_matches_by_label() -> None:
    # 32,000 tokens is labelled 31K: it is not the 32K point; 32,768 + 100 is.
    run = _run("label", [_cell(32 * K + 100, 8, 10.0)])
    cell, exact = oppoint.pick(run, oppoint.Point(32 * K, 8))
    assert exact and cell.context == 32 * K + 100
    other = _run("other", [_cell(32_000, 8, 10.0)])
    assert oppoint.pick(other, oppoint.Point(32 * K, 8))[1] is False


def test_no_gpu_count_means_no_per_gpu_value() -> None:
    run = _run("cpu", [_cell(8 * K, 1, 10.0)], gpus=None, gpu=None)
    assert oppoint.rank([run], oppoint.Point(8 * K, 1), "per_gpu")[0].values["per_gpu"] is None


def test_summary_points_use_shared_contexts() -> None:
    a = _run("a", [_cell(8 * K, 1, 1.0), _cell(32 * K, 8, 1.0), _cell(128 * K, 1, 1.0),
                   _cell(128 * K, 2, 1.0), _cell(251 * K, 1, 1.0)])
    b = _run("b", [_cell(16 * K, 1, 1.0), _cell(32 * K, 1, 1.0), _cell(128 * K, 1, 1.0),
                   _cell(128 * K, 2, 1.0)])
    points = oppoint.summary_points([a, b])
    assert [(t, p.key) for t, p in points] == [
        ("1 request", "32K-1"), ("8 requests at 32K", "32K-8"),
        ("Largest shared context", "128K-2")]


def test_client_data_encodes_exact_and_nearest_choices() -> None:
    a = _run("a", [_cell(8 * K, 1, 1.0), _cell(32 * K, 8, 2.0)])
    b = _run("b", [_cell(8 * K, 1, 3.0)])
    data = oppoint.client_data([a, b])
    assert data["choices"]["32K-8"] == [1, -(0 + 2)]  # a: its cell 1; b: nearest, cell 0
    assert data["choices"]["8K-1"] == [0, 0]
    assert "cost" not in [m["key"] for m in data["metrics"]]  # no prices, no cost
    assert data["runs"][0]["cells"][1]["texts"][:2] == ["2.0", "2.0"]


# ---- prices and cost ---------------------------------------------------------
def test_cost_per_million_arithmetic() -> None:
    # 8 GPUs at $2/GPU-hour = $16/hour; 1,000 tok/s = 3.6M tokens/hour -> $4.444 per 1M.
    assert prices.cost_per_million(2.0, 8, 1000.0) == pytest.approx(16 / 3.6)
    # Same as the per-GPU form: $2 / (125 tok/s per GPU x 3600) x 1e6.
    assert prices.cost_per_million(2.0, 8, 1000.0) == pytest.approx(2.0 / (125 * 3600) * 1e6)
    assert prices.cost_per_million(2.0, 1, 3600.0) == pytest.approx(2.0 / 3600 / 3600 * 1e6)
    assert prices.cost_per_million(None, 8, 1000.0) is None
    assert prices.cost_per_million(2.0, None, 1000.0) is None
    assert prices.cost_per_million(2.0, 8, 0.0) is None
    assert prices.dollars(16 / 3.6) == "$4.44"
    assert prices.dollars(0.04213) == "$0.0421"
    assert prices.dollars(1234.567) == "$1,234.57"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.yaml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """prices:
  - gpu: "H200  sxm"
    usd_per_gpu_hour: 3.5
    date: 2026-11-01
    source: example
"""


def test_price_table_matches_gpu_names_exactly_but_case_insensitively(tmp_path: Path) -> None:
    table = prices.load_prices(_write(tmp_path, GOOD))
    assert table.for_gpu("H200 SXM").usd_per_gpu_hour == 3.5
    assert table.for_gpu("H200") is None and table.for_gpu(None) is None
    assert table.for_gpu("H200 SXM").date == "2026-11-01"


def test_cost_reaches_ranking_only_with_a_price(tmp_path: Path) -> None:
    run = _run("priced", [_cell(32 * K, 8, 1000.0)], gpus=8)
    assert oppoint.summary([run])[0]["best"][-1]["by"] != "cost"
    run.price = prices.load_prices(_write(tmp_path, GOOD)).for_gpu("H200 SXM")
    entry = oppoint.rank([run], oppoint.Point(32 * K, 8), "cost")[0]
    assert entry.values["cost"] == pytest.approx(3.5 * 8 / (1000 * 3600) * 1e6)
    assert oppoint.cost_rows(run) == [("32K", ["$7.78"])]


@pytest.mark.parametrize(("text", "field"), [
    ("prices: []\n", "prices:"),
    ("prices: [1]\n", "prices[0]:"),
    ("prices:\n  - {gpu: A, date: 2026-01-01, source: s}\n", "prices[0].usd_per_gpu_hour: missing"),
    ("prices:\n  - {gpu: A, usd_per_gpu_hour: -1, date: 2026-01-01, source: s}\n",
     "prices[0].usd_per_gpu_hour: expected"),
    ("prices:\n  - {gpu: A, usd_per_gpu_hour: cheap, date: 2026-01-01, source: s}\n",
     "prices[0].usd_per_gpu_hour: expected"),
    ("prices:\n  - {gpu: A, usd_per_gpu_hour: 1, date: soon, source: s}\n",
     "prices[0].date: expected"),
    ("prices:\n  - {gpu: A, usd_per_gpu_hour: 1, date: 2026-01-01}\n", "prices[0].source: missing"),
    ("prices:\n  - {gpu: A, usd_per_gpu_hour: 1, date: 2026-01-01, source: s}\n"
     "  - {gpu: a, usd_per_gpu_hour: 2, date: 2026-01-01, source: s}\n", "prices[1].gpu:"),
    ("prices: [\n", "not valid YAML"),
])
def test_bad_price_table_is_one_line(tmp_path: Path, text: str, field: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(prices.PriceError) as exc:
        prices.load_prices(path)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(str(path)) and field in message


def test_cli_bad_prices_file_is_one_line(cli: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, "prices:\n  - {gpu: A, usd_per_gpu_hour: 0, date: 2026-01-01, "
                            "source: s}\n")
    result = cli("build-site", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "site"),
                 "--prices", str(path), cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1
    assert lines[0].startswith("error: --prices: ") and "usd_per_gpu_hour" in lines[0]
    assert "Traceback" not in result.stderr


def test_example_price_table_loads_and_says_example() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "prices.example.yaml"
    table = prices.load_prices(path)
    assert table.prices and all("EXAMPLE" in p.source for p in table.prices)


# ---- built site ---------------------------------------------------------------
@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from site_builder.publish import build_site
    from tests.support.synthetic_runs import make_sample_data

    root = tmp_path_factory.mktemp("oppoint-site")
    data = make_sample_data(root / "data")
    table_path = root / "prices.yaml"
    table_path.write_text("prices:\n  - gpu: H200 SXM\n    usd_per_gpu_hour: 3.5\n"
                          "    date: 2026-11-01\n    source: test table\n", encoding="utf-8")
    out = {"plain": root / "plain", "priced": root / "priced"}
    assert build_site(data, out["plain"]).errors == []
    assert build_site(data, out["priced"], prices=prices.load_prices(table_path)).errors == []
    return out


def test_no_price_table_no_cost_anywhere(sites: dict[str, Path]) -> None:
    for page in sites["plain"].rglob("*.html"):
        text = page.read_text("utf-8")
        assert "per 1M output tokens" not in text and 'id="cost"' not in text, page


def test_priced_site_shows_cost_with_date_and_source(sites: dict[str, Path]) -> None:
    index = (sites["priced"] / "index.html").read_text("utf-8")
    assert "$ per 1M output tokens" in index and "2026-11-01, source: test table" in index
    run_pages = [p.read_text("utf-8") for p in (sites["priced"] / "runs").glob("*/index.html")]
    with_cost = [t for t in run_pages if 'id="cost"' in t]
    assert with_cost and all("source: test table" in t for t in with_cost)
    assert len(with_cost) < len(run_pages)  # runs on other GPUs: no guessed price


def test_static_summary_and_hidden_chooser(sites: dict[str, Path]) -> None:
    index = (sites["plain"] / "index.html").read_text("utf-8")
    assert "Fastest at common operating points" in index
    assert re.search(r'<div data-needs-js hidden>[^<]*(?:<[^f][^>]*>[^<]*)*<form[^>]*'
                     r'id="oppoint-form"', index) is not None
    data = re.search(r'<script type="application/json" id="oppoint-data"[^>]*>(.*?)</script>',
                     index, re.S)
    assert data is not None and json.loads(data.group(1))["choices"]
    assert 'fastest per GPU at ' in index


# ---- browser: the choice lives in the address --------------------------------
@pytest.mark.browser
def test_chooser_state_lives_in_the_url_over_file(browser: Any, sites: dict[str, Path]) -> None:
    from tests.support.chromium import Watcher

    root = sites["priced"].resolve().as_uri() + "/"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto(root + "index.html#q=synth&at=8K-4&by=total")
    assert page.locator("#oppoint-form").is_visible()
    assert page.locator("select[name=ctx]").input_value() == "8K"
    assert page.locator("select[name=n]").input_value() == "4"
    assert page.locator("select[name=by]").input_value() == "total"
    rows = page.locator("#oppoint-table tbody tr")
    assert rows.count() >= 2
    values = page.eval_on_selector_all("#oppoint-table tbody tr td.by",
                                       "els => els.map(e => e.textContent)")
    assert values and all(v for v in values)
    # Changing the measure rewrites the address, keeping the runs table's own keys.
    page.select_option("select[name=by]", "per_gpu")
    hash_ = page.evaluate("() => location.hash")
    assert "at=8K-4" in hash_ and "by=per_gpu" in hash_ and "q=synth" in hash_
    # And the runs table's filters keep the chooser's keys.
    page.fill("input[name=q]", "synth-a")
    hash_ = page.evaluate("() => location.hash")
    assert "q=synth-a" in hash_ and "at=8K-4" in hash_ and "by=per_gpu" in hash_
    # A shared link restores the same ranking (after a reload, too).
    shared = page.evaluate("() => location.href")
    page.goto("about:blank")
    page.goto(shared)
    page.reload()
    assert page.locator("select[name=by]").input_value() == "per_gpu"
    first = page.locator("#oppoint-table tbody tr").first.get_attribute("data-slug")
    assert first
    # One click from the index: a family's "fastest per GPU at 32K × 8".
    page.goto(root + "index.html")
    link = page.locator(".model-list a.rank-link").first
    at = re.search(r"#at=([^&]+)&by=per_gpu$", link.get_attribute("href")).group(1)
    link.click()
    page.wait_for_load_state()
    assert "/models/" in page.url and page.url.endswith(f"#at={at}&by=per_gpu")
    assert page.locator("select[name=by]").input_value() == "per_gpu"
    ctx, n = at.rsplit("-", 1)
    assert page.locator("select[name=ctx]").input_value() == ctx
    assert page.locator("select[name=n]").input_value() == n
    assert page.locator("#oppoint-table tbody tr").count() >= 1
    assert page.locator("#oppoint-result .notice").count() == 0
    assert watcher.problems() == []
    context.close()
