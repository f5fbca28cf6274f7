"""The explorer loads only what its view draws (issue 30, item 14).

data/explore.js held every point of the site and the explorer loaded all of it for
any view (4.2 MB at 1,000 runs). The build now puts an index in explore.html and
writes one file of points per family and context (site_builder/exploredata.py); the
explorer loads the files of its view's runs at its context, with <script> tags so
that it works from file://. Checked here: the index and the files put together are
the whole data again; a run added to one family leaves the other families' files as
they were; in Chromium, over file:// and http, a family's view requests that
family's file only, "All runs" adds the other families' files at that context and
nothing at other contexts, and what it draws matches the whole data.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from site_builder import exploredata
from site_builder.publish import build_site
from site_builder.serve import serve_in_thread
from tests.support.chromium import Watcher, parse_html, require_chromium
from tests.support.many_runs import make_many_runs


def _script_json(path: Path) -> Any:
    """The value a data script assigns (`window.X = …;` or `(…)["id"] = …;`)."""
    text = path.read_text("utf-8")
    head = re.match(r'(window\.\w+|\(window\.\w+ = window\.\w+ \|\| \{\}\)\["[^"]*"\]) = ',
                    text)
    assert head is not None, text[:80]
    return json.loads(text[head.end():].strip().rstrip(";"))


def _chunks(site: Path) -> dict[str, list[list[Any]]]:
    return {f"{exploredata.FOLDER}/{p.relative_to(site / exploredata.FOLDER).as_posix()}":
            _script_json(p) for p in (site / exploredata.FOLDER).rglob("*.js")}


def _index(site: Path) -> Any:
    """The index explore.html holds (its script element of type application/json)."""
    node = parse_html((site / "explore.html").read_text("utf-8")).find(
        "script", id=exploredata.INDEX_ID)
    assert node is not None and node.attrs.get("type") == "application/json"
    return json.loads(node.text())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """40 runs (8 families, 3 contexts) and their site; one more run kept apart."""
    root = tmp_path_factory.mktemp("explore-split")
    paths = make_many_runs(root / "data", 41, seed=2)
    extra = root / "pending" / paths[-1].name
    extra.parent.mkdir()
    shutil.move(paths[-1], extra)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site", extra


def test_the_index_and_its_files_are_the_whole_data(built: tuple[Path, Path]) -> None:
    site, _ = built
    whole = _script_json(site / exploredata.WHOLE)
    index = _index(site)
    chunks = _chunks(site)
    assert "points" not in index and index["total"] == len(whole["points"])
    assert exploredata.joined(index, chunks) == whole["points"]
    assert sorted(chunks) == sorted(c["id"] for c in index["chunks"])
    for c in index["chunks"]:  # one family at one context per file
        runs = {whole["runs"][p[0]]["family_slug"] for p in
                whole["points"][c["start"]:c["start"] + c["count"]]}
        contexts = {p[1] for p in whole["points"][c["start"]:c["start"] + c["count"]]}
        assert runs == {c["family"]} and contexts == {c["context"]}
    assert {k: v for k, v in index.items() if k not in ("runs", "chunks", "total")} == {
        k: v for k, v in whole.items() if k not in ("runs", "points")}  # frontiers too
    assert [{k: r[k] for k in exploredata.RUN_FIELDS} for r in whole["runs"]] == index["runs"]
    assert exploredata.WHOLE not in (site / "explore.html").read_text("utf-8")
    assert all("?v=" in c["src"] for c in index["chunks"])


def test_a_run_added_to_one_family_leaves_the_others_files_as_they_were(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    site, extra = built
    data = tmp_path / "data"
    shutil.copytree(site.parent / "data", data)
    before = {rel: (site / rel).read_bytes() for rel in _chunks(site)}
    shutil.copytree(extra, data / "a-first")  # found first: every other run's place moves
    after_site = tmp_path / "site"
    assert build_site(data, after_site, cache_dir=tmp_path / "cache", jobs=1).errors == []
    runs = _script_json(after_site / exploredata.WHOLE)["runs"]
    family = next(r["family_slug"] for r in runs if r["slug"] == extra.name)
    after = {rel: (after_site / rel).read_bytes() for rel in _chunks(after_site)}
    others = [rel for rel in before if Path(rel).stem != family]
    assert others and all(after[rel] == before[rel] for rel in others)
    assert any(after[rel] != before[rel] for rel in before if Path(rel).stem == family)


# ---------------------------------------------------------------------------
# browser: what a view loads
# ---------------------------------------------------------------------------

LIVE = "() => document.querySelector('#explore-chart.is-live')"


@pytest.fixture(params=["file", "http"])
def opened(request: pytest.FixtureRequest, browser: Any,
           built: tuple[Path, Path]) -> Iterator[tuple[Any, Watcher, list[str], str]]:
    """A page of the site over file:// or http, and the site paths it requested."""
    require_chromium()
    site, _ = built
    server = None
    if request.param == "http":
        server, root = serve_in_thread(site)
    else:
        root = site.resolve().as_uri() + "/"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    asked: list[str] = []
    base = urlparse(root).path
    page.on("request", lambda r: asked.append(urlparse(r.url).path[len(base):]))
    try:
        yield page, watcher, asked, root
    finally:
        context.close()
        if server is not None:
            server.shutdown()
            server.server_close()


def _data_files(asked: list[str]) -> set[str]:
    return {p for p in asked if p.startswith("data/")}


@pytest.mark.browser
def test_a_view_loads_its_families_files_at_its_context_only(
        opened: tuple[Any, Watcher, list[str], str], built: tuple[Path, Path]) -> None:
    page, watcher, asked, root = opened
    site, _ = built
    whole = _script_json(site / exploredata.WHOLE)
    fam = max(whole["families"], key=lambda f: len(f["runs"]))
    ctx = whole["best_context"][fam["slug"]]
    page.goto(f"{root}explore.html#family={fam['slug']}&ctx={ctx}&y=total")
    page.wait_for_function(LIVE, timeout=30_000)
    assert _data_files(asked) == {exploredata.chunk_rel(fam["slug"], ctx)}
    with_points = {p[0] for p in whole["points"] if p[1] == ctx and p[0] in fam["runs"]}
    assert page.locator("#explore-chart").get_attribute("data-curves") == str(len(with_points))
    loaded = sum((site / rel).stat().st_size for rel in {"explore.html", *_data_files(asked)})
    assert loaded < (site / exploredata.WHOLE).stat().st_size / 2  # the page with its index
    # all runs: every family's file at this context, none at another
    page.select_option("#ex-family", "*")
    everyone = {p[0] for p in whole["points"] if p[1] == ctx}
    page.wait_for_function("(n) => document.querySelector('#explore-chart.is-live')"
                           " && document.querySelector('#explore-chart').dataset.curves === n",
                           arg=str(len(everyone)), timeout=30_000)
    at_ctx = {exploredata.chunk_rel(f["slug"], ctx) for f in whole["families"]
              if any(p[1] == ctx and p[0] in f["runs"] for p in whole["points"])}
    assert _data_files(asked) == at_ctx
    assert page.evaluate("() => document.querySelectorAll("
                         "'#explore-chart g.frontier_points_marks > *').length") == len(
        whole["frontiers"][f"*|{ctx}|total"])
    # another context: its files come (each file once: the first ones are not asked again)
    other = next(c for c in whole["contexts"]["*"] if c != ctx)
    page.select_option("#ex-ctx", str(other))
    page.wait_for_function("(n) => document.querySelector('#explore-chart.is-live')"
                           " && document.querySelector('#explore-chart').dataset.curves === n",
                           arg=str(len({p[0] for p in whole["points"] if p[1] == other})),
                           timeout=30_000)
    data = [p for p in asked if p.startswith("data/")]
    assert len(data) == len(set(data))
    assert exploredata.WHOLE not in data
    assert watcher.problems() == []
