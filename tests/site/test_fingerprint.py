"""One code-fingerprint rule for both build caches (issue 19 item 4): the aggregate
cache and the page cache miss when anything their output is computed from changes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import rundir
import site_builder
from site_builder import fingerprint
from site_builder.aggregate import code_salt
from site_builder.pages import Pages
from site_builder.prices import Price, PriceTable, gpu_key
from site_builder.publish import build_site
from tests.site.test_rebuild_identical import cold, same_site
from tests.support.many_runs import make_many_runs
from tests.support.synthetic_runs import make_measured_run

GPU = "RTX PRO 6000 Blackwell Server Edition"  # synthetic_runs' GPU


@pytest.fixture
def code_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of rundir/ and site_builder/ that the fingerprint reads instead of the real one."""
    roots = []
    for package in (rundir, site_builder):
        src = Path(package.__file__).parent
        dst = tmp_path / "code" / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        roots.append(dst)
    monkeypatch.setattr(fingerprint, "CODE_PACKAGES", tuple(roots))
    return tmp_path / "code"


def _flip_a_byte(path: Path) -> None:
    """One byte changed (an empty module, such as an __init__.py, gains one)."""
    data = bytearray(path.read_bytes() or b" ")
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_byte_of_the_run_reader_changes_the_aggregate_cache_key(code_copy: Path) -> None:
    """rundir/io.py decides what a cached run holds; the old hand list of 7 files missed it."""
    before = code_salt()
    _flip_a_byte(code_copy / "rundir" / "io.py")
    assert code_salt() != before


def test_every_module_of_both_packages_changes_the_aggregate_cache_key(code_copy: Path) -> None:
    files = fingerprint.code_files()
    names = {f"{p.parent.name}/{p.name}" for p in files}
    assert {"rundir/io.py", "contract/runyaml.py", "contract/tables.py", "rundir/metrics.py",
            "site_builder/aggregate.py", "site_builder/fingerprint.py", "site_builder/publish.py"} <= names
    seen = {code_salt()}
    for path in files:
        original = path.read_bytes()
        _flip_a_byte(path)
        salt = code_salt()
        assert salt not in seen, path
        seen.add(salt)
        path.write_bytes(original)
    assert code_salt() in seen  # restored: the first key again


def test_the_fingerprint_hashes_names_and_texts_apart(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("x = 1\n")
    assert fingerprint.fingerprint([a]) != fingerprint.fingerprint([b])  # a renamed module
    assert fingerprint.fingerprint([a], "ab", "c") != fingerprint.fingerprint([a], "a", "bc")


def test_a_price_change_below_the_cent_re_renders_the_run_page(tmp_path: Path) -> None:
    """Costs come from the unrounded price while the price note rounds it to cents:
    the page cache must follow the price itself, not its note."""
    data = tmp_path / "data"
    make_measured_run(data / "r", run_id="r", contexts=[1024], concurrency=[1, 2],
                      tokens_per_s=47.0, duration_s=0.5)

    def table(usd: float) -> PriceTable:
        return PriceTable((Price(GPU, usd, "2026-11-01", "https://example.com/prices"),))

    def page(site: Path) -> str:
        return (site / "runs" / "r" / "index.html").read_text(encoding="utf-8")

    low, high = table(3.50), table(3.504)
    assert low.prices[0].note == high.prices[0].note  # the same words beside the costs
    fresh = tmp_path / "fresh"
    build_site(data, fresh, prices=high, cache_dir=tmp_path / "cache-fresh")
    want = page(fresh)
    site, cache = tmp_path / "site", tmp_path / "cache"
    build_site(data, site, prices=low, cache_dir=cache)
    assert page(site) != want  # the costs differ, so the test can tell a stale page
    build_site(data, site, prices=high, cache_dir=cache)
    assert page(site) == want


# ---------------------------------------------------------------------------
# issue 30, item 13: a page keys on the prices it shows, not on every priced run
# ---------------------------------------------------------------------------


def _gpu(run: Path) -> str:
    return str(yaml.safe_load((run / "run.yaml").read_text("utf-8"))["hardware"]["gpu_name"])


class _Rendered:
    """Which pages a build rendered (Pages.run_page, cell_pages, model_page), by slug:
    a page whose key is current is never rendered, so this is what a rebuild redid."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[str] = []
        self.cells: list[str] = []
        self.models: list[str] = []
        run_page, cell_pages, model_page = Pages.run_page, Pages.cell_pages, Pages.model_page

        def spy_run(pages: Pages, run: Any) -> str:
            self.runs.append(run.slug)
            return run_page(pages, run)

        def spy_cells(pages: Pages, run: Any) -> Iterator[tuple[str, str]]:
            for got in cell_pages(pages, run):
                self.cells.append(run.slug)
                yield got

        def spy_model(pages: Pages, model: Any) -> str:
            self.models.append(model.slug)
            return model_page(pages, model)

        monkeypatch.setattr(Pages, "run_page", spy_run)
        monkeypatch.setattr(Pages, "cell_pages", spy_cells)
        monkeypatch.setattr(Pages, "model_page", spy_model)

    def clear(self) -> None:
        self.runs.clear()
        self.cells.clear()
        self.models.clear()


def _run_pages(site: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in (site / "runs").glob("*/index.html")}


@pytest.fixture()
def priced_runs(tmp_path: Path) -> tuple[Path, Path, PriceTable]:
    """Ten runs (three measured: with cell pages), one more kept apart, and a price
    table for the kept run's GPU and one other: a site built with --prices."""
    data = tmp_path / "data"
    paths = make_many_runs(data, 11, seed=5, measured=3)
    extra = tmp_path / "pending" / paths[-1].name
    extra.parent.mkdir()
    shutil.move(paths[-1], extra)
    others = sorted({_gpu(p) for p in paths[:-1]} - {_gpu(extra)})
    table = PriceTable(tuple(Price(g, usd, "2026-11-01", "example")
                             for g, usd in ((_gpu(extra), 3.5), (others[0], 1.8))), "p.yaml")
    return data, extra, table


def test_adding_a_priced_run_re_renders_only_the_pages_it_changes(
        tmp_path: Path, priced_runs: tuple[Path, Path, PriceTable],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30 item 13: the page fingerprint listed every priced run, so one run on a
    priced GPU re-rendered every run page, cell page and family page of the site."""
    data, extra, table = priced_runs
    site = tmp_path / "site"
    rendered = _Rendered(monkeypatch)
    build_site(data, site, jobs=1, prices=table)
    assert rendered.runs and rendered.cells  # the spy sees a cold build's pages
    before = _run_pages(site)
    rendered.clear()
    shutil.move(extra, data / extra.name)
    added = build_site(data, site, jobs=1, prices=table)
    assert added.errors == [] and added.aggregated == [extra.name]
    after = _run_pages(site)
    changed = {slug for slug in before if before[slug] != after[slug]}  # series neighbours
    assert extra.name in rendered.runs
    assert set(rendered.runs) <= {extra.name} | changed, sorted(rendered.runs)
    assert set(rendered.cells) == {extra.name}
    index = json.loads((site / "index.json").read_text("utf-8"))["runs"]
    family = next(r["family_slug"] for r in index if r["slug"] == extra.name)
    assert rendered.models == [family]
    monkeypatch.undo()
    same_site(site, cold(data, tmp_path / "cold", prices=table))


def test_a_price_change_re_renders_only_the_runs_on_that_gpu(
        tmp_path: Path, priced_runs: tuple[Path, Path, PriceTable],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A price is on its runs' pages and their families' rankings: another GPU's runs
    keep their pages."""
    data, _, table = priced_runs
    site = tmp_path / "site"
    rendered = _Rendered(monkeypatch)
    build_site(data, site, jobs=1, prices=table)
    rendered.clear()
    moved = Price(table.prices[1].gpu, 2.25, "2026-12-01", "example")
    new = PriceTable((table.prices[0], moved), "p.yaml")
    build_site(data, site, jobs=1, prices=new)
    on_gpu = {p.name for p in data.iterdir() if gpu_key(_gpu(p)) == gpu_key(moved.gpu)}
    assert on_gpu and set(rendered.runs) == on_gpu
    assert rendered.cells == []  # cell pages show no cost
    monkeypatch.undo()
    same_site(site, cold(data, tmp_path / "cold", prices=new))
