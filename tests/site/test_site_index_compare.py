"""The index, model and A/B pages (issue 10): a queued peak is marked, imported
runs show their date, the A/B page names an unknown run id, says a shared
status once and pairs nearby context labels, nothing that needs JavaScript
shows without it, and the pages fit a phone.

Two small imported runs of one model are enough: "ra" has a peak from a
Requests-queued cell, a published date, 8K and 251K (257,984 tokens); "rb"
has 8K and 256K. Both are Over capacity at 251K/256K × 32.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rundir import contract
from rundir.words import STATUS_NOTES, status_label
from site_builder import indexpages
from site_builder.publish import build_site
from tests.support.chromium import Node, Watcher, parse_html
from tests.support.many_runs import make_many_runs
from tests.support.synthetic_runs import make_imported_run
from tests.support.weight import first_screen

QUEUED = status_label(contract.REQUESTS_QUEUED)
OVER = status_label(contract.OVER_CAPACITY)
K251, K256 = 257_984, 262_144
BROKEN_WORDS_JS = """tds => tds.flatMap(td => {
  const out = [], walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (const m of n.data.matchAll(/\\S+/g)) {
      const r = document.createRange();
      r.setStart(n, m.index);
      r.setEnd(n, m.index + m[0].length);
      if (r.getClientRects().length > 1) out.push(m[0]);
    }
  }
  return out;
})"""


def _decode(ctx: int, conc: int, status: str, tok: float | None = None) -> dict[str, Any]:
    nums = {} if tok is None else {"total_tok_s": tok, "per_request_tok_s": tok / conc,
                                   "ttft_ms": 120.0, "tbt_ms": 20.0}
    return {"phase": contract.DECODE, "context": ctx, "concurrency": conc, "status": status, **nums}


def _prefill(ctx: int, tok: float) -> dict[str, Any]:
    return {"phase": contract.PREFILL, "context": ctx, "concurrency": 1, "status": contract.VALID,
            "total_tok_s": tok, "ttft_ms": ctx / tok * 1000}


def make_data(root: Path) -> Path:
    """Two imported runs of one model, built to show each defect."""
    data = root / "data"
    make_imported_run(
        data / "ra", run_id="ra",
        cells=[_prefill(8192, 8820.4),
               _decode(8192, 1, contract.VALID, 50.0), _decode(8192, 16, contract.REQUESTS_QUEUED, 400.0),
               _decode(8192, 32, contract.VALID, 300.0), _decode(K251, 1, contract.VALID, 40.0),
               _decode(K251, 16, contract.VALID, 200.0), _decode(K251, 32, contract.OVER_CAPACITY)],
        info={"measured_at": "2026-09-27T19:59:00Z", "model": {"name": "Same-Model"}})
    make_imported_run(
        data / "rb", run_id="rb",
        cells=[_prefill(8192, 32_700.0),
               _decode(8192, 1, contract.VALID, 60.0), _decode(8192, 16, contract.VALID, 380.0),
               _decode(8192, 32, contract.VALID, 390.0), _decode(K256, 1, contract.VALID, 45.0),
               _decode(K256, 16, contract.VALID, 210.0), _decode(K256, 32, contract.OVER_CAPACITY)],
        info={"model": {"name": "Same-Model"},
              "hardware": {"gpu_name": "H200 SXM", "gpu_count": 8, "vram_gb_per_gpu": 141.0}})
    return data


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("index-compare")
    report = build_site(make_data(root), root / "site")
    assert report.errors == []
    return root / "site"


def _page(site: Path, rel: str) -> Node:
    return parse_html((site / rel).read_text(encoding="utf-8"))


def _runs_rows(doc: Node) -> dict[str, Node]:
    """Index rows by GPU name (the two runs differ there)."""
    return {tr.find_all("td")[1].text().strip(): tr
            for tr in doc.find("table", "runs").find("tbody").find_all("tr")}


# --------------------------------------------------------------------------
# pages as HTML
# --------------------------------------------------------------------------

def test_index_and_model_page_mark_a_peak_from_a_queued_cell(site: Path) -> None:
    index = _runs_rows(_page(site, "index.html"))
    gpu_a = "RTX PRO 6000 Blackwell Server Edition"
    peak_a = index[gpu_a].find_all("td")[8]
    assert " ".join(peak_a.text().split()) == f"400.0 {QUEUED}"
    assert peak_a.find("span", "status").text() == QUEUED
    assert "st-requests_queued" in peak_a.attrs["class"].split()
    peak_b = index["H200 SXM"].find_all("td")[8]
    assert peak_b.text().strip() == "390.0" and not peak_b.find_all("span", "status")
    assert STATUS_NOTES[contract.REQUESTS_QUEUED] in _page(site, "index.html").find("p", "note").text()

    model = next((site / "models").glob("*.html"))
    rows = _page(site, f"models/{model.name}").find("table", "runs").find("tbody").rows()
    assert sorted(r[5] for r in rows) == ["390.0", f"400.0 {QUEUED}"]

    # The downloads carry it too.
    runs = {r["run_id"]: r for r in json.loads((site / "index.json").read_text())["runs"]}
    assert runs["ra"]["peak_status"] == contract.REQUESTS_QUEUED
    assert runs["ra"]["peak_status_label"] == QUEUED
    assert runs["rb"]["peak_status"] == contract.VALID
    with (site / "index.csv").open(encoding="utf-8") as fh:
        lines = {r["run_id"]: r for r in csv.DictReader(fh)}
    assert lines["ra"]["peak_status"] == contract.REQUESTS_QUEUED


def test_measured_date_of_an_imported_run_is_shown_in_the_byline_style(site: Path) -> None:
    index = _runs_rows(_page(site, "index.html"))
    assert index["RTX PRO 6000 Blackwell Server Edition"].find_all("td")[6].text() == "Sep 27, 2026"
    assert index["H200 SXM"].find_all("td")[6].text() == "—"
    model = next((site / "models").glob("*.html"))
    rows = _page(site, f"models/{model.name}").find("table", "runs").find("tbody").rows()
    assert sorted(r[3] for r in rows) == ["Sep 27, 2026", "—"]
    run = _page(site, "runs/ra/index.html").find("p", "byline").text()
    assert "Sep 27, 2026" in run  # the run page's own date, in the same style


def test_controls_that_need_javascript_are_hidden_in_the_html(site: Path) -> None:
    for rel in ("index.html", "compare.html"):
        doc = _page(site, rel)
        for form in doc.find_all("form"):
            wrapper = next(n for n in doc.iter() if form in n.children)
            assert "hidden" in wrapper.attrs and "data-needs-js" in wrapper.attrs, rel
    index = _page(site, "index.html")
    assert not index.find("table", "runs").find_all("button")  # table.js adds the sort buttons
    hint = next(n for n in index.iter() if "Click a column to sort" in n.text()
                and all(isinstance(x, str) for x in n.children))
    assert "hidden" in hint.attrs and "data-needs-js" in hint.attrs
    compare = _page(site, "compare.html")
    assert "Loading" not in compare.text()
    noscript = compare.find("noscript")
    assert "need JavaScript" in noscript.text()
    assert {a.attrs["href"] for a in noscript.find_all("a")} >= {
        "runs/ra/index.html", "runs/rb/index.html"}


def test_wide_tables_scroll_in_their_own_box(site: Path) -> None:
    model = next((site / "models").glob("*.html"))
    for rel in ("index.html", f"models/{model.name}"):
        doc = _page(site, rel)
        table = doc.find("table", "runs")
        box = next(n for n in doc.iter() if table in n.children)
        assert "table-scroll" in box.attrs["class"].split() and box.attrs.get("role") == "region"
        assert "sticky-first" in table.attrs["class"].split()
        assert all("name" in tr.find_all("td")[0].attrs.get("class", "").split()
                   for tr in table.find("tbody").find_all("tr"))
        assert doc.find_all("p", "scroll-hint"), rel


def test_compare_data_carries_texts_formatted_as_the_run_pages(site: Path) -> None:
    text = (site / "runs" / "ra" / "data.js").read_text(encoding="utf-8")
    data = json.loads(text[text.index("] = ") + 4:].rstrip().rstrip(";"))
    cells = [dict(zip(data["fields"], row, strict=True)) for row in data["cells"]]
    prefill = next(x for x in cells if x["phase"] == contract.PREFILL)
    assert prefill["total_tok_s_text"] == "8,820"  # whole, as the run page's prefill list
    assert prefill["context_label"] == "8K"
    big = next(x for x in cells if x["context"] == K251 and x["concurrency"] == 32)
    assert (big["context_label"], big["status_label"]) == ("251K", OVER)
    queued = next(x for x in cells if x["status"] == contract.REQUESTS_QUEUED)
    assert (queued["total_tok_s_text"], queued["ttft_ms_text"], queued["tbt_ms_text"]) == (
        "400.0", "120 ms", "20.0 ms")


# --------------------------------------------------------------------------
# in a browser
# --------------------------------------------------------------------------

def _open(browser: Any, site: Path, rel: str, *, width: int = 1280, js: bool = True
          ) -> tuple[Any, Any, Watcher]:
    root = site.resolve().as_uri() + "/"
    context = browser.new_context(viewport={"width": width, "height": 900},
                                  java_script_enabled=js)
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto(root + rel, wait_until="load")
    return context, page, watcher


def _ab_table(page: Any) -> list[list[str]]:
    page.wait_for_selector("table.ab tbody tr")
    return page.eval_on_selector(
        "table.ab", "t => Array.from(t.tBodies[0].rows).map(r => "
        "Array.from(r.cells).map(c => c.innerText.replace(/\\s+/g, ' ').trim()))")


@pytest.mark.browser
def test_compare_names_an_unknown_run_id_and_shows_no_other_run(browser: Any, site: Path) -> None:
    context, page, watcher = _open(browser, site, "compare.html#a=no-such-run&b=rb")
    try:
        message = page.locator(".ab-unknown")
        message.wait_for(state="visible")
        assert "“no-such-run”" in message.inner_text() and "for A" in message.inner_text()
        assert page.locator("table.ab").count() == 0
        result = page.locator("#ab-result").inner_text()
        assert "runs/ra" not in result and "RTX PRO 6000" not in result
        assert page.eval_on_selector("#ab-a", "s => s.selectedIndex") == -1
        # Picking a run replaces the message with the comparison.
        page.select_option("#ab-a", "ra")
        assert _ab_table(page)
        assert page.locator(".ab-unknown").count() == 0
        assert watcher.problems() == []
    finally:
        context.close()


@pytest.mark.browser
def test_compare_from_a_run_page_asks_for_the_other_run(browser: Any, site: Path) -> None:
    """A run page's "Compare with another run" names A only: B is left for the
    reader to pick (the page's default pair could be the run against itself)."""
    context, page, watcher = _open(browser, site, "compare.html#a=rb")
    try:
        page.wait_for_function("() => /Pick run B/.test(document.querySelector('#ab-result')"
                               ".innerText)")
        assert page.eval_on_selector("#ab-b", "s => s.selectedIndex") == -1
        assert page.input_value("#ab-a") == "rb"
        assert page.locator("table.ab").count() == 0
        page.select_option("#ab-b", "ra")
        assert _ab_table(page)
        assert "a=rb&b=ra" in page.url
        assert watcher.problems() == []
    finally:
        context.close()


@pytest.mark.browser
def test_compare_pairs_nearby_contexts_and_says_a_shared_status_once(
        browser: Any, site: Path) -> None:
    context, page, watcher = _open(browser, site, "compare.html#a=ra&b=rb&m=total_tok_s")
    try:
        rows = _ab_table(page)
        assert [r[0] for r in rows] == ["8K", "251K / 256K"]
        assert rows[1][3] == OVER  # both Over capacity: once, not "A Over capacity B …"
        assert rows[1][1] == "+12.5% A 40.0 B 45.0"
        note = page.locator(".ab-paired").first.inner_text()
        assert "A 251K with B 256K" in note
        prefill = page.eval_on_selector_all(
            "table.ab", "ts => ts[1].tBodies[0].rows[0].cells[0].innerText")
        assert prefill.split("\n")[1:] == ["A 8,820", "B 32.7K"]  # one format, as run pages
        assert watcher.problems() == []
    finally:
        context.close()


@pytest.mark.browser
def test_without_javascript_nothing_that_needs_it_is_visible(browser: Any, site: Path) -> None:
    for rel in ("index.html", "compare.html"):
        context, page, _watcher = _open(browser, site, rel, js=False)
        try:
            controls = page.locator("input, select, button, output")
            assert controls.count() > 0
            assert [i for i in range(controls.count()) if controls.nth(i).is_visible()] == [], rel
            body = page.inner_text("body")
            assert "Loading" not in body and "Click a column" not in body, rel
            if rel == "compare.html":
                assert "Comparisons need JavaScript" in body
                assert page.locator("noscript a[href$='runs/ra/index.html']").count() == 1
        finally:
            context.close()
    # With JavaScript the same controls show and the headers sort.
    context, page, watcher = _open(browser, site, "index.html")
    try:
        assert page.locator("#run-filters").is_visible()
        assert "Click a column to sort" in page.inner_text("body")
        # The header says the order as soon as it is clicked, in the same task,
        # before the rows file has loaded (it said nothing until then: a race).
        said = page.evaluate(
            "() => { document.querySelector('th[data-key=peak] button').click();"
            " return document.querySelector('th[data-key=peak]').getAttribute('aria-sort'); }")
        assert said == "descending"
        page.wait_for_function(
            "() => !/Loading/.test(document.querySelector('#run-filters output').textContent)")
        assert page.get_attribute("th[data-key=peak]", "aria-sort") == "descending"
        assert watcher.problems() == []
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.parametrize("rel", ["index.html", "compare.html#a=ra&b=rb"])
def test_phone_width_pages_fit_and_names_do_not_break_mid_word(
        browser: Any, site: Path, rel: str) -> None:
    context, page, watcher = _open(browser, site, rel, width=390)
    try:
        if rel.startswith("compare"):
            _ab_table(page)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"{rel}: page is {width} px wide"
        if rel == "index.html":
            # No word of a name cell is split across lines (not even at a hyphen).
            broken = page.eval_on_selector_all("table.runs td.name", BROKEN_WORDS_JS)
            assert broken == []
            assert page.locator("p.scroll-hint").first.is_visible()
        assert watcher.problems() == []
    finally:
        context.close()


# --------------------------------------------------------------------------
# the index at scale (issue 21): static pages, a lean rows file, its weight
# --------------------------------------------------------------------------

MANY = 300
LIMIT_GZIP, LIMIT_RAW = 100 * 1024, 600 * 1024
# The operating-point and latency-limit rankings (_partials/oppoint.html) are another
# part of issue 21 (their data moves to a file loaded on demand): counted apart.
RANKINGS = ("oppoint", "slo-rank")


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("index-many")
    make_many_runs(root / "data", MANY, seed=3)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


@pytest.fixture(scope="module")
def few(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("index-few")
    make_many_runs(root / "data", 60, seed=3)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def _index_pages(site: Path) -> list[str]:
    count = len(list(site.glob("index-*.html"))) + 1
    return [indexpages.page_file(n) for n in range(1, count + 1)]


def _rows_file(site: Path) -> list[dict[str, Any]]:
    text = (site / indexpages.ROWS_FILE).read_text("utf-8")
    assert text.startswith(f"window.{indexpages.ROWS_GLOBAL} = ")
    data = json.loads(text.split(" = ", 1)[1].rstrip().rstrip(";"))
    return [dict(zip(data["fields"], row, strict=True)) for row in data["rows"]]


def test_index_is_static_pages_of_fifty_runs_newest_first(many: Path) -> None:
    pages = _index_pages(many)
    assert pages == ["index.html", *(f"index-{n}.html" for n in range(2, 7))]
    seen, dates = [], []
    for rel in pages:
        body = _page(many, rel).find("table", "runs").find("tbody")
        rows = body.find_all("tr")
        assert len(rows) == indexpages.PAGE_SIZE, rel
        seen += [tr.find("a").attrs["href"] for tr in rows]
        dates += [tr.find_all("td")[6].attrs["data-value"] for tr in rows]
    index = json.loads((many / "index.json").read_text("utf-8"))["runs"]
    assert sorted(seen) == sorted(r["page"] for r in index)  # every run once
    assert dates == sorted(dates, reverse=True)
    # The rankings and the model list are the first page's only.
    assert _page(many, "index.html").find_all("section", id="oppoint")
    assert not _page(many, "index-2.html").find_all("section", id="oppoint")


def test_each_index_page_has_a_labelled_pager(many: Path) -> None:
    pages = _index_pages(many)
    for n, rel in enumerate(pages, 1):
        doc = _page(many, rel)
        nav = doc.find("nav", "index-pager")
        assert nav.attrs["aria-label"] == "Pages of runs"
        current = [a for a in nav.find_all("a") if a.attrs.get("aria-current") == "page"]
        assert [a.text() for a in current] == [str(n)] and current[0].attrs["href"] == rel
        rels = {a.attrs.get("rel"): a.attrs["href"] for a in nav.find_all("a") if "rel" in a.attrs}
        assert rels.get("prev") == (pages[n - 2] if n > 1 else None)
        assert rels.get("next") == (pages[n] if n < len(pages) else None)
        first = (n - 1) * indexpages.PAGE_SIZE + 1
        assert nav.find("p").text().startswith(f"Runs {first}–{first + 49} of {MANY}")
        assert doc.find("title").text().startswith("All runs" + ("" if n == 1 else f", page {n}"))


def test_every_header_cell_of_the_index_has_scope(many: Path) -> None:
    for rel in _index_pages(many):
        doc = _page(many, rel)
        for table in doc.find_all("table"):
            groups = [th for tr in table.find_all("tr", "family-head") for th in tr.children]
            for th in table.find_all("th"):
                want = "col" if any(th in tr.children for head in table.find_all("thead")
                                    for tr in head.find_all("tr")) else "row"
                want = "rowgroup" if th in groups else want  # a ranking's family heading
                assert th.attrs.get("scope") == want, (rel, th.text())


def test_rows_file_holds_every_run_with_the_static_pages_texts(many: Path) -> None:
    rows = _rows_file(many)
    assert len(rows) == MANY
    static = {}
    for rel in _index_pages(many):
        for tr in _page(many, rel).find("table", "runs").find("tbody").find_all("tr"):
            static[tr.find("a").attrs["href"]] = tr
    assert [r["page"] for r in rows] == list(static)  # the same order as the pages
    for r in rows:
        tds = static[r["page"]].find_all("td")
        assert [" ".join(td.text().split()) for td in tds[1:]] == [
            " ".join([c[1], *c[4:5]]) for c in r["cells"][1:]]
        assert [td.attrs["data-value"] for td in tds] == [str(c[0]) for c in r["cells"]]
        assert static[r["page"]].attrs["data-search"] == r["search"]
    # Not loaded before a reader acts: no page references it by src or href.
    for rel in _index_pages(many):
        html = (many / rel).read_text("utf-8")
        assert f'src="{indexpages.ROWS_FILE}' not in html and "data-rows=" in html


def test_index_first_screen_stays_light_at_300_runs(many: Path, few: Path) -> None:
    first = first_screen(many, "index.html", without=RANKINGS)
    assert first["gzip"] <= LIMIT_GZIP and first["raw"] <= LIMIT_RAW, first
    assert indexpages.ROWS_FILE not in first["parts"]
    later = first_screen(many, "index-6.html")  # holds no rankings
    assert later["gzip"] <= LIMIT_GZIP and later["raw"] <= LIMIT_RAW, later
    # Whatever the number of runs: 5× the runs of a 60-run site add only the pager's
    # links and the filters' choices (a few KB), never rows.
    small = first_screen(few, "index.html", without=RANKINGS)
    assert first["raw"] - small["raw"] < 8 * 1024, (first["raw"], small["raw"])
    table = _page(many, "index.html").find("table", "runs")
    assert len(table.find("tbody").find_all("tr")) == 50


def test_long_version_is_cut_with_its_full_text_in_the_title(many: Path) -> None:
    cells = [tr.find_all("td")[4] for rel in _index_pages(many)
             for tr in _page(many, rel).find("table", "runs").find("tbody").find_all("tr")]
    long = [td for td in cells if td.attrs["data-value"] == "0.31.0rc1.dev452+g73a583112"]
    assert long
    for td in long:
        assert td.attrs["title"] == td.attrs["data-value"] == td.find("span", "clip").text()


def test_regression_badge_shows_in_the_paginated_rows(many: Path) -> None:
    flagged = {r["page"]: r for r in _rows_file(many) if r["regression"]}
    assert flagged
    found = {}
    for rel in _index_pages(many):
        for tr in _page(many, rel).find("table", "runs").find("tbody").find_all("tr"):
            for badge in tr.find_all("a", "badge"):
                found[tr.find("a").attrs["href"]] = badge
    assert set(found) == set(flagged)
    for page, badge in found.items():
        text, title, classes = flagged[page]["regression"]  # the same badge the script draws
        assert badge.attrs["href"] == flagged[page]["series_page"]
        assert badge.attrs["title"] == title and badge.text() == text
        assert badge.attrs["class"] == classes


def test_pager_lists_the_ends_and_the_pages_near_the_current_one() -> None:
    assert indexpages.page_links(1, 1) == [1]
    assert indexpages.page_links(1, 6) == [1, 2, 3, None, 6]
    assert indexpages.page_links(10, 20) == [1, None, 8, 9, 10, 11, 12, None, 20]
    assert indexpages.page_links(20, 20) == [1, None, 18, 19, 20]
    assert indexpages.page_links(4, 7) == [1, 2, 3, 4, 5, 6, 7]


def test_a_page_no_longer_needed_is_removed(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexpages, "PAGE_SIZE", 1)
    data = make_data(tmp_path)
    assert build_site(data, tmp_path / "site").errors == []
    assert (tmp_path / "site" / "index-2.html").is_file()
    assert "index-2.html" in (tmp_path / "site" / "index.html").read_text("utf-8")
    shutil.rmtree(data / "rb")
    assert build_site(data, tmp_path / "site").errors == []
    assert not (tmp_path / "site" / "index-2.html").exists()
    assert "index-pager" not in (tmp_path / "site" / "index.html").read_text("utf-8")
