"""Operating point ranking (site_builder/oppoint.py), price tables and cost
(site_builder/prices.py), and the chooser's address state in a real browser."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rundir import contract
from site_builder import oppoint, prices, rankings
from site_builder.aggregate import CellResult, RunAggregate
from site_builder.views import RunView, family_groups
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
        ("single request", "32K-1"), ("common serving point", "32K-8"),
        ("largest context most runs measured", "128K-2")]


def _matrix(contexts: list[int], levels: list[int], speed: float = 1.0) -> list[CellResult]:
    return [_cell(c, n, speed * n * 100.0 / (1 + c / (256 * K))) for c in contexts for n in levels]


def test_a_cpu_test_run_never_sets_a_summary_point() -> None:
    # One GPU run and the tiny CPU test run of the same model: the rows are the GPU
    # run's points, not the test run's 1K; the test run is still ranked (nearest).
    gpu = _run("gpu", _matrix([8 * K, 32 * K, 128 * K], [1, 8, 64]), gpus=8)
    tiny = _run("tiny-cpu", _matrix([K, 4 * K], [1, 2, 4, 8], speed=50.0), gpus=None, gpu=None)
    points = oppoint.summary_points([gpu, tiny])
    assert [p.key for _, p in points] == ["8K-1", "32K-8", "128K-64"]
    rows = oppoint.summary([gpu, tiny])
    assert [r["title"] for r in rows] == ["8K × 1", "32K × 8", "128K × 64"]
    at = oppoint.rank([gpu, tiny], points[0][1], "total")
    assert [e.run.run_id for e in at] == ["gpu", "tiny-cpu"]  # faster, but not at 8K
    assert not at[1].exact and at[1].cell.context == 4 * K
    # With no GPU run at all, the runs there are decide (a CPU-only family).
    assert [p.key for _, p in oppoint.summary_points([tiny])] == ["1K-1", "4K-8"]


def test_one_runs_odd_matrix_does_not_set_the_largest_point() -> None:
    # Three runs share 8K-128K; one also went to 251K at 128 requests: a majority
    # did not, so the largest row is 128K at the most requests most runs measured.
    a = _run("a", _matrix([8 * K, 32 * K, 128 * K], [1, 8, 64]))
    b = _run("b", _matrix([8 * K, 32 * K, 128 * K], [1, 8, 64]))
    c = _run("c", _matrix([K, 8 * K, 32 * K, 128 * K, 251 * K], [1, 8, 64, 128]))
    assert [p.key for _, p in oppoint.summary_points([a, b, c])] == ["8K-1", "32K-8", "128K-64"]


def test_summary_rows_are_named_by_the_point_and_a_stand_in_says_nearest(
        tmp_path: Path) -> None:
    # "a" measured 32K x 8 but has no price; "b" has a price and no 32K row: the
    # cheapest at the row "32K × 8" is b, at its own 16K x 8, shown as nearest, and
    # the row keeps the asked point's name.
    a = _run("a", _matrix([8 * K, 32 * K], [1, 8]), gpus=2, gpu="B200")
    b = _run("b", _matrix([8 * K, 16 * K], [1, 8]), gpus=2)
    b.price = prices.load_prices(_write(tmp_path, GOOD)).for_gpu("H200 SXM")
    rows = {r["point"].key: r for r in oppoint.summary([a, b])}
    row = rows["32K-8"]
    assert row["title"] == "32K × 8" and row["note"] == "common serving point"
    cheapest = {x["by"]: x for x in row["best"]}["cost"]
    assert cheapest["run"].run_id == "b" and cheapest["nearest"] == "16K × 8"
    fastest = {x["by"]: x for x in row["best"]}["total"]
    assert fastest["run"].run_id == "a" and fastest["nearest"] == ""  # exact cells first
    assert all(r["title"] == r["point"].label for r in rows.values())


def test_client_data_encodes_exact_and_nearest_choices() -> None:
    a = _run("a", [_cell(8 * K, 1, 1.0), _cell(32 * K, 8, 2.0)])
    b = _run("b", [_cell(8 * K, 1, 3.0)])
    data = rankings.client_data([a, b])
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


def data_file(site: Path, slug: str) -> dict[str, Any]:
    """A family's ranking data as the page loads it (data/oppoint/<slug>.js)."""
    text = (site / rankings.data_file(slug)).read_text("utf-8")
    prefix = f"(window.{rankings.GLOBAL} = window.{rankings.GLOBAL} || {{}})[{json.dumps(slug)}] = "
    assert text.startswith(prefix) and text.endswith(";\n")
    return json.loads(text[len(prefix):-2])


def test_static_summary_and_hidden_chooser(sites: dict[str, Path]) -> None:
    index = (sites["plain"] / "index.html").read_text("utf-8")
    assert "Fastest at common operating points" in index
    assert re.search(r'<div data-needs-js hidden>[^<]*(?:<[^f][^>]*>[^<]*)*<form[^>]*'
                     r'id="oppoint-form"', index) is not None
    assert 'fastest per GPU at ' in index


def test_index_no_longer_inlines_the_ranking_data(sites: dict[str, Path]) -> None:
    site = sites["plain"]
    index = (site / "index.html").read_text("utf-8")
    assert '"choices"' not in index and '"lv"' not in index
    # the one JSON inlined: the page's rules (site_builder/pagerules.py), no ranking data
    assert re.findall(r'type="application/json"[^>]*', index) == ['type="application/json" '
                                                                 'id="page-rules"']
    families = sorted(p.stem for p in (site / "models").glob("*.html"))
    files = sorted(p.stem for p in (site / rankings.DATA_DIR).glob("*.js"))
    assert files == families
    points = None
    for slug in files:
        data = data_file(site, slug)
        assert data["runs"] and {r["family_slug"] for r in data["runs"]} == {slug}
        assert all(len(row) == len(data["runs"]) for row in data["choices"].values())
        assert "cost" not in [m["key"] for m in data["metrics"]]
        points = points or data["points"]
        assert data["points"] == points  # the site's points in every file: "All" joins them
        page = (site / "models" / f"{slug}.html").read_text("utf-8")
        assert f'data-family="{slug}"' in page and '"choices"' not in page
    # The index's chooser opens on the family with the most runs; "All" is labelled.
    form = index[index.index('id="oppoint-form"'):index.index("</form>", index.index(
        'id="oppoint-form"'))]
    options = re.findall(r'<option value="([^"]*)"[^>]*?( selected)?>([^<]*)</option>',
                         form[:form.index("</select>")])
    biggest = max(files, key=lambda f: (len(data_file(site, f)["runs"]), f == "synth-4b"))
    assert options[0][:2] == (biggest, " selected") and "(2 runs)" in options[0][2]
    assert options[-1][0] == "*" and "not comparable on speed alone" in options[-1][2]
    # every file has the choices at every point the index's chooser offers
    ctx = re.findall(r'<option value="([^"]+)">', form[form.index('name="ctx"'):form.index(
        'name="n"')])
    levels = re.findall(r'<option value="(\d+)">', form[form.index('name="n"'):form.index(
        'name="by"')])
    assert set(points) == {f"{c}-{n}" for c in ctx for n in levels} and len(points) > 4
    # every family's option names its own default point
    assert all(re.search(rf'value="{slug}" data-default-at="[^"]+-\d+"', form) for slug in files)


def test_priced_site_files_carry_the_cost_measure(sites: dict[str, Path]) -> None:
    for path in (sites["priced"] / rankings.DATA_DIR).glob("*.js"):
        data = data_file(sites["priced"], path.stem)
        assert [m["key"] for m in data["metrics"]][-1] == "cost"


def test_unchanged_families_are_not_recomputed(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from site_builder.publish import build_site
    from tests.support.synthetic_runs import make_sample_data

    data = make_sample_data(tmp_path / "data")
    site, cache = tmp_path / "site", tmp_path / "cache"
    assert build_site(data, site, cache_dir=cache, jobs=1).errors == []
    before = {p.name: p.read_bytes() for p in (site / rankings.DATA_DIR).iterdir()}
    calls: list[int] = []
    real = rankings.client_data
    monkeypatch.setattr(rankings, "client_data", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert build_site(data, site, cache_dir=cache, jobs=1).errors == []
    assert calls == []  # keyed: nothing changed, nothing recomputed
    assert {p.name: p.read_bytes() for p in (site / rankings.DATA_DIR).iterdir()} == before
    (site / rankings.data_file("synth-4b")).unlink()  # a file gone is written again
    assert build_site(data, site, cache_dir=cache, jobs=1).errors == []
    assert len(calls) == 1 and (site / rankings.data_file("synth-4b")).read_bytes() == \
        before["synth-4b.js"]


# ---- rankings within a family --------------------------------------------------
def _family(model: str, n: int, speed: float, gpus: int = 8) -> list[RunView]:
    return [_run(f"{model.lower()}-{i}", _matrix([8 * K, 32 * K, 128 * K], [1, 8, 64],
                                                  speed=speed * (1 + i / 10)),
                 gpus=gpus, model=model) for i in range(n)]


def test_the_index_ranks_within_each_family_largest_first() -> None:
    # A 1T model's runs and one much faster 4B run: the 4B run never "wins" the 1T
    # family's rows, and the chooser and the latency ranking open on the largest family.
    big = _family("Kimi-K2.6", 3, speed=1.0)
    small = _family("Qwen3.5-4B", 1, speed=40.0)
    runs = big + small
    ctx = rankings.page_context(runs, index=True, models=family_groups(runs))
    assert [b["name"] for b in ctx["blocks"]] == ["Kimi-K2.6", "Qwen3.5-4B"]
    assert ctx["blocks"][0]["count"] == "3 runs" and ctx["blocks"][1]["count"] == "1 run"
    kimi = {r.run_id for r in big}
    winners = {b["run"].run_id for row in ctx["blocks"][0]["summary"] for b in row["best"]}
    assert winners and winners <= kimi
    assert ctx["family"] == "kimi-k2.6" and [f["slug"] for f in ctx["families"]] == [
        "kimi-k2.6", "qwen3.5-4b"]
    assert {e["entry"].run.run_id for e in ctx["slo"]["rows"]} == kimi
    assert ctx["all_label"].startswith("All models") and "not comparable" in ctx["all_label"]
    # A family page ranks its own runs only.
    page = rankings.page_context(big, index=False, models=family_groups(big))
    assert page["families"] == [] and page["family"] == "kimi-k2.6"
    assert [len(b["summary"]) for b in page["blocks"]] == [3]


def test_the_index_summary_and_latency_table_stay_bounded() -> None:
    runs = _family("Big", 15, 1.0) + [r for i in range(7) for r in _family(f"M{i}", 1, 2.0)]
    ctx = rankings.page_context(runs, index=True, models=family_groups(runs))
    assert len(ctx["blocks"]) == rankings.SUMMARY_FAMILIES and ctx["more_families"] == 2
    assert len(ctx["slo"]["rows"]) == rankings.SLO_TOP and ctx["slo"]["total"] == 15
    assert len(ctx["families"]) == 8  # the chooser offers every family
    whole = rankings.page_context(runs[:15], index=False, models=family_groups(runs[:15]))
    assert len(whole["slo"]["rows"]) == 15  # a family page lists all its runs


def test_built_index_prints_a_block_per_family_named_by_points(sites: dict[str, Path]) -> None:
    index = (sites["plain"] / "index.html").read_text("utf-8")
    section = index[index.index('id="oppoint"'):index.index('id="slo-rank"')]
    heads = re.findall(r'<th scope="rowgroup"[^>]*><a href="models/([^"]+)\.html">', section)
    assert heads[0] == "synth-4b" and len(heads) == len(set(heads)) >= 3
    synth = section[section.index('data-family="synth-4b"'):]
    synth = synth[:synth.index("</tbody>")]
    assert re.findall(r'<th scope="row">([^<]*) <span', synth) == ["1K × 1", "4K × 4"]
    assert "&amp;fam=synth-4b" in synth  # "rank all" opens the chooser on the family
    assert "Qwen" not in synth and "qwen-seed" not in synth
    slo_part = index[index.index('id="slo-rank"'):]
    assert 'id="slo-rank-family">Synth-4B<' in slo_part
    assert set(re.findall(r'<tr data-slug="([^"]+)"', slo_part)) == {"synth-a", "synth-b"}


def test_a_sites_worth_of_runs_ranks_every_block_within_its_family(
        tmp_path: Path) -> None:
    # Eight families, a 4B model ten times as fast as a 1T one: each block's winners
    # are runs of that block's family, and the row names are the asked points.
    from site_builder.publish import build_site
    from tests.support.many_runs import make_many_runs

    make_many_runs(tmp_path / "data", 40, seed=3)
    site = tmp_path / "site"
    assert build_site(tmp_path / "data", site, cache_dir=tmp_path / "cache", jobs=1).errors == []
    family_of = {r["slug"]: p.stem for p in (site / rankings.DATA_DIR).glob("*.js")
                 for r in data_file(site, p.stem)["runs"]}
    index = (site / "index.html").read_text("utf-8")
    section = index[index.index('id="oppoint"'):index.index('id="slo-rank"')]
    blocks = re.findall(r'<tbody data-family="([^"]+)">(.*?)</tbody>', section, re.S)
    assert len(blocks) == min(rankings.SUMMARY_FAMILIES, len(set(family_of.values())))
    for family, body in blocks:
        winners = re.findall(r'<a href="runs/([^/]+)/index.html">', body)
        assert winners and {family_of[w] for w in winners} == {family}, family
        titles = re.findall(r'<th scope="row">([^<]*) <span', body)
        assert titles and all(re.fullmatch(r"\d+K × \d+", t) for t in titles)


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
    page.wait_for_selector("#oppoint-table")  # a ranking in the address: loaded at once
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
    page.wait_for_selector("#oppoint-table")
    assert page.locator("select[name=by]").input_value() == "per_gpu"
    first = page.locator("#oppoint-table tbody tr").first.get_attribute("data-slug")
    assert first
    # One click from the index: a family's "fastest per GPU at 32K × 8".
    page.goto(root + "index.html")
    link = page.locator(".model-list a.rank-link").first
    at = re.search(r"#at=([^&]+)&by=per_gpu$", link.get_attribute("href")).group(1)
    link.click()
    page.wait_for_load_state()
    page.wait_for_selector("#oppoint-table")
    assert "/models/" in page.url and page.url.endswith(f"#at={at}&by=per_gpu")
    assert page.locator("select[name=by]").input_value() == "per_gpu"
    ctx, n = at.rsplit("-", 1)
    assert page.locator("select[name=ctx]").input_value() == ctx
    assert page.locator("select[name=n]").input_value() == n
    assert page.locator("#oppoint-table tbody tr").count() >= 1
    assert page.locator("#oppoint-result .notice").count() == 0
    assert watcher.problems() == []
    context.close()


@pytest.mark.browser
def test_the_chooser_loads_its_family_on_demand_and_ranks(browser: Any,
                                                           sites: dict[str, Path]) -> None:
    from tests.support.chromium import Watcher

    site = sites["plain"]
    root = site.resolve().as_uri() + "/"
    slugs = {f: [r["slug"] for r in data_file(site, f)["runs"]]
             for f in (p.stem for p in (site / rankings.DATA_DIR).glob("*.js"))}
    context = browser.new_context(viewport={"width": 1280, "height": 250})
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto(root + "index.html")
    loaded = """() => Array.from(document.querySelectorAll('script[src*="data/oppoint/"]'))
        .map(s => s.getAttribute('src').split('/').pop())"""
    # Below the first screen, nothing is loaded yet.
    assert page.evaluate("document.getElementById('oppoint').getBoundingClientRect().top") > 250 + 200
    assert page.evaluate(loaded) == []
    assert page.evaluate("typeof window.SPEED_MATRIX_OPPOINT") == "undefined"
    page.locator("#oppoint-form").scroll_into_view_if_needed()
    page.wait_for_selector("#oppoint-table")
    assert page.evaluate(loaded) == ["synth-4b.js"]  # the largest family's file only
    rows = "() => Array.from(document.querySelectorAll('#oppoint-table tbody tr'))" \
           ".map(tr => tr.dataset.slug)"
    assert sorted(page.evaluate(rows)) == sorted(slugs["synth-4b"])
    assert page.locator("select[name=fam]").input_value() == "synth-4b"
    assert page.locator("#oppoint-result .cross-model").count() == 0
    # Every model at once: every family's file, every run, and the warning.
    page.select_option("select[name=fam]", "*")
    page.wait_for_function(f"() => document.querySelectorAll('#oppoint-table tbody tr')"
                           f".length === {sum(map(len, slugs.values()))}")
    assert sorted(page.evaluate(loaded)) == sorted(f"{f}.js" for f in slugs)
    assert "not comparable on speed alone" in page.locator(".cross-model").inner_text()
    assert "fam=*" in page.evaluate("decodeURIComponent(location.hash)")
    values = page.eval_on_selector_all("#oppoint-table tbody tr td.by",
                                       "els => els.map(e => e.textContent)")
    assert len(values) == sum(map(len, slugs.values()))
    # Another family: its runs only, in both rankings.
    page.select_option("select[name=fam]", "qwen3.5-4b")
    page.wait_for_function("() => document.querySelectorAll('#oppoint-table tbody tr')"
                           f".length === {len(slugs['qwen3.5-4b'])}")
    assert page.evaluate(rows) == slugs["qwen3.5-4b"]
    slo_rows = page.evaluate("""() => Array.from(document.querySelectorAll(
        '#slo-rank-table tbody tr')).map(tr => tr.dataset.slug)""")
    assert slo_rows == slugs["qwen3.5-4b"]
    assert page.locator("#slo-rank-family").inner_text() == "Qwen3.5-4B"
    assert page.locator("select[name=slofam]").input_value() == "qwen3.5-4b"
    # The latency ranking's own family control drives both.
    page.select_option("select[name=slofam]", "synth-4b")
    page.wait_for_function("() => document.querySelectorAll('#slo-rank-table tbody tr')"
                           f".length === {len(slugs['synth-4b'])}")
    assert page.locator("select[name=fam]").input_value() == "synth-4b"
    assert sorted(page.evaluate(rows)) == sorted(slugs["synth-4b"])
    assert watcher.problems() == []
    context.close()
