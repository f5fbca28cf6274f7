"""The percentile selector's data, read as files: every latency text of the run and
family pages at every level, formatted at build time ("—" where a rank has too few
requests, never the median), and a default page that is today's page plus that data.

The expected texts are computed here from the aggregate's tail columns and the
number formats, not by the functions that print them on the pages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rundir import contract, tails
from rundir.io import read_run
from site_builder import chartkit, formats, views
from site_builder.aggregate import CellResult, aggregate_run
from site_builder.publish import build_site
from site_builder.render import json_script
from tests.support.chromium import Node, parse_html
from tests.support.synthetic_runs import make_imported_run, make_measured_run

MISSING = formats.MISSING
# What each tailed column prints, and its header at p90, p95, p99, p99.9.
COLUMNS = {
    "TTFT": ("ttft_ms", formats.ttft, ["TTFT p90", "TTFT p95", "TTFT p99", "TTFT p99.9"]),
    "Time between tokens": ("tbt_ms", formats.tbt, [
        "Time between tokens p90", "Time between tokens p95", "Time between tokens p99",
        "Time between tokens p99.9"]),
    # a rate: its slow side, the 10th … 0.1st percentile
    "Per request tok/s": ("per_request_tok_s", formats.tok_s, [
        "Per request tok/s p10", "Per request tok/s p5", "Per request tok/s p1",
        "Per request tok/s p0.1"]),
}


def make_tail_data(root: Path) -> Path:
    """A measured run whose cells have every level, some levels, or none (too few
    requests, a Looped cell), and an imported run of the same family (no tails).

    decode 1K × 8: > 100 requests (p99 and below); 1K × 1: about 20 (p90, p95 of
    TTFT; "—" at p99); 2K × 8 Looped (no numbers)."""
    make_measured_run(root / "tails-run", run_id="tails-run", contexts=[1024, 2048],
                      concurrency=[1, 8], duration_s=2.0, max_output_tokens=16,
                      tokens_per_chunk=1, tokens_per_s=200.0, prefill_contexts=[1024],
                      statuses={(2048, 8): contract.LOOPED})
    make_imported_run(root / "tails-imported", run_id="tails-imported", cells=[
        {"phase": contract.DECODE, "context": 1024, "concurrency": 1, "total_tok_s": 90.0,
         "per_request_tok_s": 90.0, "ttft_ms": 41.0, "tbt_ms": 11.1, "avg_active": 1.0,
         "completed": 30, "output_tokens": 2700, "measured_s": 30.0},
        {"phase": contract.DECODE, "context": 1024, "concurrency": 8, "total_tok_s": 600.0,
         "per_request_tok_s": 75.0, "ttft_ms": 63.0, "tbt_ms": 13.3, "avg_active": 8.0,
         "completed": 200, "output_tokens": 18000, "measured_s": 30.0},
    ], info={"hardware": {"gpu_name": "H200 SXM", "gpu_count": 8, "vram_gb_per_gpu": 141.0}})
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, CellResult]]:
    root = tmp_path_factory.mktemp("tails")
    data = make_tail_data(root / "data")
    report = build_site(data, root / "site")
    assert report.errors == []
    cells = {x.key: x for x in aggregate_run(read_run(data / "tails-run")).cells}
    return root / "site", cells


@pytest.fixture(scope="module")
def site(built: tuple[Path, dict[str, CellResult]]) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def cells(built: tuple[Path, dict[str, CellResult]]) -> dict[str, CellResult]:
    return built[1]


def _doc(site: Path, rel: str) -> Node:
    return parse_html((site / rel).read_text(encoding="utf-8"))


def _levels(node: Node) -> list[str]:
    return json.loads(node.attrs["data-levels"])


def _expected(cell: CellResult, key: str, fmt: Any) -> list[str]:
    """A cell's figure at every level, straight from its tail columns (p50: the median)."""
    metric = tails.BY_KEY[key]
    out = [fmt(getattr(cell, key))]
    for level in tails.LEVELS[1:]:
        out.append(fmt(cell.tails.get(metric.column(level))))
    return out


def _model_page(site: Path) -> str:
    return next(p.relative_to(site).as_posix() for p in (site / "models").glob("*.html"))


def test_the_data_has_cells_with_every_level_some_levels_and_none(
        cells: dict[str, CellResult]) -> None:
    """The fixture is what the other tests need: a p99, a "—" at p99 beside a p90."""
    big, small = cells["decode-1024-8"], cells["decode-1024-1"]
    assert big.tails["ttft_ms_p99"] is not None and big.tails["per_request_tok_s_p1"] is not None
    assert small.tails["ttft_ms_p90"] is not None and small.tails["ttft_ms_p99"] is None
    assert cells["decode-2048-8"].status == contract.LOOPED


def test_all_measurements_carries_every_level_of_each_latency(
        site: Path, cells: dict[str, CellResult]) -> None:
    table = _doc(site, "runs/tails-run/index.html").find("table", "measurements")
    heads = [" ".join(th.text().split()) for th in table.find("thead").find_all("th")]
    for name, (_, _, at_levels) in COLUMNS.items():
        th = table.find("thead").find_all("th")[heads.index(name)]
        assert _levels(th) == [name, *at_levels]
    tailed = [heads.index(name) for name in COLUMNS]
    plain = [i for i in range(4, len(heads)) if i not in tailed]
    rows = table.find("tbody").find_all("tr")
    by_key = {(x.phase, x.context, x.concurrency): x for x in cells.values()}
    seen = 0
    for tr in rows:
        tds = [c for c in tr.children if isinstance(c, Node) and c.tag == "td"]
        phase = "prefill" if tds[0].text() == "Prefill" else "decode"
        cell = by_key[(phase, int(tds[1].text().rstrip("K")) * 1024, int(tds[2].text()))]
        for name, (key, fmt, _) in COLUMNS.items():
            td = tds[heads.index(name)]
            want = _expected(cell, key, fmt)
            assert _levels(td) == want, (cell.key, name)
            assert td.text() == want[0]  # the page shows the median, as today
            seen += 1
        assert all("data-levels" not in tds[i].attrs for i in plain)
    assert seen == 3 * len(cells)
    ttft = [_levels(tr.find_all("td")[heads.index("TTFT")]) for tr in rows]
    assert any(t[3] != MISSING for t in ttft) and any(t[3] == MISSING != t[0] for t in ttft)


def test_a_rank_with_too_few_requests_is_missing_never_the_median(
        site: Path, cells: dict[str, CellResult]) -> None:
    small = cells["decode-1024-1"]
    table = _doc(site, "runs/tails-run/index.html").find("table", "measurements")
    heads = [" ".join(th.text().split()) for th in table.find("thead").find_all("th")]
    row = next(tr for tr in table.find("tbody").find_all("tr")
               if [td.text() for td in tr.find_all("td")[1:3]] == ["1K", "1"]
               and tr.find_all("td")[0].text() == "Sustained decode")
    ttft = _levels(row.find_all("td")[heads.index("TTFT")])
    assert ttft[0] == formats.ttft(small.ttft_ms) != MISSING
    assert ttft[1] == formats.ttft(small.tails["ttft_ms_p90"]) != ttft[0]
    assert ttft[3:] == [MISSING, MISSING]


def test_matrix_ttft_lines_carry_every_level(site: Path, cells: dict[str, CellResult]) -> None:
    links = _doc(site, "runs/tails-run/index.html").find("table", "matrix").find_all("a")
    spans = [(a.attrs["href"], span) for a in links for span in a.find_all("span", "ttft")]
    assert len(spans) == 3  # the Looped cell shows its status, no TTFT
    for href, span in spans:
        cell = cells[re.fullmatch(r"cells/(decode-\d+-\d+)\.html", href).group(1)]
        texts = _expected(cell, "ttft_ms", formats.ttft)
        assert _levels(span) == [f"{texts[0]} TTFT", *(f"{t} TTFT {lv}" for t, lv in
                                                       zip(texts[1:], tails.LEVELS[1:], strict=True))]
        assert span.text() == _levels(span)[0]


def _specs(html: str) -> list[dict[str, Any]]:
    return [json.loads(m) for m in re.findall(
        r'<script type="application/json" class="chart-spec">(.*?)</script>', html)]


def test_chart_rows_carry_every_level_and_their_titles(
        site: Path, cells: dict[str, CellResult]) -> None:
    html = (site / "runs/tails-run/index.html").read_text(encoding="utf-8")
    specs = {s["description"].split(".")[0]: s for s in _specs(html)}
    tradeoff = specs["Per-request speed against total throughput"]
    assert tradeoff["usermeta"]["tails"]["p99"] == {
        "TTFT": "TTFT p99", "Per request tok/s": "Per request tok/s p1",
        "per_request": "Per request tok/s p1"}
    rows = tradeoff["datasets"]["cells"]
    for row in rows:
        cell = cells[f"decode-{int(row['Context'].rstrip('K')) * 1024}-{row['concurrency']}"]
        for i, level in enumerate(tails.LEVELS[1:], start=1):
            at = row["levels"][level]
            assert at["TTFT"] == _expected(cell, "ttft_ms", formats.ttft)[i]
            assert at["Per request tok/s"] == _expected(cell, "per_request_tok_s", formats.tok_s)[i]
            plotted = cell.tails.get(tails.PER_REQUEST.column(level)) if cell.has_numbers else None
            assert at["per_request"] == plotted
    assert any(r["levels"]["p99"]["per_request"] is not None for r in rows)
    assert any(r["levels"]["p99"]["per_request"] is None and r["per_request"] is not None
               for r in rows)
    # a level may leave the tradeoff no x to plot (p99.9 here): the page says so instead
    assert tradeoff["usermeta"]["empty"] == chartkit.NO_POINT_AT_LEVEL
    assert all(r["levels"]["p99.9"]["per_request"] is None for r in rows)
    for name, spec in specs.items():  # every chart of the page switches its TTFT tooltip
        assert "TTFT" in spec["usermeta"]["tails"]["p99"], name
        assert ("empty" in spec["usermeta"]) == (spec is tradeoff), name
        assert all(set(r["levels"]) == set(tails.LEVELS[1:]) for r in spec["datasets"]["cells"])


def test_family_page_imported_run_reads_missing_past_the_median(site: Path) -> None:
    rel = _model_page(site)
    doc = _doc(site, rel)
    assert doc.find("div", "tail-select", id="tail-select").attrs.get("hidden") is not None
    minis = doc.find_all("section", "mini-matrix")
    imported = next(m for m in minis if "H200" in m.find("h3").text())
    spans = imported.find_all("span", "ttft")
    assert [_levels(s) for s in spans] == [
        ["41 ms TTFT", f"{MISSING} TTFT p90", f"{MISSING} TTFT p95", f"{MISSING} TTFT p99",
         f"{MISSING} TTFT p99.9"],
        ["63 ms TTFT", f"{MISSING} TTFT p90", f"{MISSING} TTFT p95", f"{MISSING} TTFT p99",
         f"{MISSING} TTFT p99.9"]]
    note = next(p for p in doc.find_all("p", "sub") if p.text().startswith("total tok/s with"))
    assert _levels(note)[0] == note.text() == (
        "total tok/s with median TTFT · rows are context length, columns are simultaneous requests")
    assert _levels(note)[3].startswith("total tok/s with p99 TTFT")
    html = (site / rel).read_text(encoding="utf-8")
    for spec in _specs(html):
        for row in spec["datasets"]["cells"]:
            if row["run"].startswith("H200"):  # the imported run: no tails behind it
                assert all(v in (MISSING, None) for lv in row["levels"].values()
                           for v in lv.values()), spec["description"]


def test_imported_run_page_has_no_selector(site: Path) -> None:
    html = (site / "runs/tails-imported/index.html").read_text(encoding="utf-8")
    assert "tail-select" not in html and "data-levels" not in html and "usermeta" not in html
    assert "tails." not in html  # its script is not loaded


def test_selector_offers_every_level_and_loads_its_script(site: Path) -> None:
    html = (site / "runs/tails-run/index.html").read_text(encoding="utf-8")
    doc = parse_html(html)
    box = doc.find("div", id="tail-select")
    assert "data-needs-js" in box.attrs and "hidden" in box.attrs
    options = [(o.attrs["value"], o.text()) for o in box.find("select").find_all("option")]
    assert options == [("p50", "median (p50)"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"),
                       ("p99.9", "p99.9")]
    assert [o[0] for o in options] == list(tails.LEVELS)
    scripts = [s.attrs["src"] for s in doc.find_all("script") if "src" in s.attrs]
    assert any(re.search(r"static/tails\.\w+\.js$", s) for s in scripts)
    assert list(site.glob("static/tails.*.js"))


# --------------------------------------------------------------------------
# the default page: today's page plus the selector and its data
# --------------------------------------------------------------------------

_ADDED_ATTR = re.compile(r" data-levels='[^']*'")
_SELECTOR = re.compile(r'<div class="tail-select" id="tail-select".*?</div>\n', re.S)
_SCRIPT = re.compile(r'<script src="[./]*static/tails\.\w+\.js" defer></script>')
_SPEC = re.compile(r'(<script type="application/json" class="chart-spec">)(.*?)(</script>)')


def _without_levels(html: str) -> str:
    """A page with the selector, its script and every level's data taken out."""
    html = _SCRIPT.sub("", _SELECTOR.sub("", _ADDED_ATTR.sub("", html)))

    def spec(m: re.Match[str]) -> str:
        data = json.loads(m.group(2))
        meta = data.get("usermeta", {})
        for key in ("tails", "empty"):  # the levels' titles; a chart's run list stays
            meta.pop(key, None)
        if not meta:
            data.pop("usermeta", None)
        for rows in data.get("datasets", {}).values():
            for row in rows:
                row.pop("levels", None)
        return m.group(1) + str(json_script(data)) + m.group(3)

    return _SPEC.sub(spec, html)


def test_default_pages_are_todays_plus_the_selector_data(
        site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same site built with no page given the selector (as before it existed):
    every page is the default page minus the selector, its script and its data."""
    monkeypatch.setattr(views.RunView, "has_tails", property(lambda self: False))
    monkeypatch.setattr(views.FamilyGroup, "has_tails", property(lambda self: False))
    data = make_tail_data(tmp_path / "data")
    report = build_site(data, tmp_path / "site", jobs=1)
    assert report.errors == []
    pages = ["runs/tails-run/index.html", "runs/tails-imported/index.html", _model_page(site)]
    for rel in pages:
        with_levels = (site / rel).read_text(encoding="utf-8")
        before = (tmp_path / "site" / rel).read_text(encoding="utf-8")
        assert "data-levels" not in before and "tail-select" not in before
        assert _without_levels(with_levels) == before, rel
    assert "data-levels" in (site / pages[0]).read_text(encoding="utf-8")
