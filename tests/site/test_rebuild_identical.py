"""A rebuild writes the same site as a cold build of the same data, byte for byte.

A rebuild skips what the last build left in place (site_builder/buildstate.py:
the whole build when nothing changed; cached run.yaml and cells from one
file; each run's pages and downloads keyed by what they are made from). Each
case here compares every file of the rebuilt site with a cold build (fresh
output, fresh cache) of the same data and options.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rundir.contract import ContractError, RunInfo
from site_builder import buildstate, chartkit, charts, drillcharts
from site_builder.prices import Price, PriceTable
from site_builder.publish import build_site
from tests.support.many_runs import make_many_runs


def files(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes()
            for p in sorted(site.rglob("*")) if p.is_file()}


def same_site(a: Path, b: Path) -> None:
    fa, fb = files(a), files(b)
    assert sorted(fa) == sorted(fb)
    differ = [rel for rel in fa if fa[rel] != fb[rel]]
    assert differ == []


def cold(data: Path, out: Path, **kw: object) -> Path:
    shutil.rmtree(out, ignore_errors=True)
    report = build_site(data, out, cache_dir=out.parent / f".{out.name}-cold-cache", jobs=1, **kw)
    assert report.errors == []
    return out


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    """Twelve runs (three measured, with raw data) in series, and one more kept apart."""
    data = tmp_path / "data"
    paths = make_many_runs(data, 13, seed=5, measured=4)
    extra = tmp_path / "pending" / paths[-1].name
    extra.parent.mkdir()
    shutil.move(paths[-1], extra)
    return data, extra


def test_noop_and_add_one_rebuild_equal_cold_builds(tmp_path: Path,
                                                    runs: tuple[Path, Path]) -> None:
    data, extra = runs
    site = tmp_path / "site"
    first = build_site(data, site, jobs=1)
    again = build_site(data, site, jobs=1)  # nothing changed: nothing done
    assert again.published == first.published and again.errors == []
    assert again.aggregated == [] and again.written == 0
    same_site(site, cold(data, tmp_path / "cold-12"))
    shutil.move(extra, data / extra.name)
    added = build_site(data, site, jobs=1)
    assert added.aggregated == [extra.name] and len(added.published) == 13
    same_site(site, cold(data, tmp_path / "cold-13"))
    shutil.move(data / extra.name, extra)
    removed = build_site(data, site, jobs=1)
    assert removed.aggregated == [] and len(removed.published) == 12
    same_site(site, tmp_path / "cold-12")


def test_changed_run_options_and_pages_are_rebuilt(tmp_path: Path,
                                                   runs: tuple[Path, Path]) -> None:
    data, _ = runs
    site = tmp_path / "site"
    build_site(data, site, jobs=1)
    # A run's run.yaml edited in place: that run is read and aggregated again.
    run_yaml = sorted(data.iterdir())[-1] / "run.yaml"
    run_yaml.write_text(run_yaml.read_text().replace("submitter: tester", "submitter: someone"))
    edited = build_site(data, site, jobs=1)
    assert edited.aggregated == [run_yaml.parent.name]
    same_site(site, cold(data, tmp_path / "cold-edited"))
    # Prices given: every page with a cost changes.
    prices = PriceTable((Price("H200 SXM", 3.5, "2026-06-01", "example"),), "prices.yaml")
    build_site(data, site, jobs=1, prices=prices)
    same_site(site, cold(data, tmp_path / "cold-priced", prices=prices))
    # A page of the site deleted or edited by hand: the next build puts it back.
    index = site / "index.html"
    index.write_text("edited")
    (site / "downloads.html").unlink()
    build_site(data, site, jobs=1, prices=prices)
    same_site(site, tmp_path / "cold-priced")


def test_a_new_process_uses_the_kept_templates_and_run_yaml(
        tmp_path: Path, runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """What a rebuild in a fresh process takes from the build cache instead of making
    it again: the run charts' compiled Altair templates (chartkit.compiled) and each
    cached run's run.yaml (buildstate._filed_info, without the contract's checks)."""
    data, extra = runs
    site = tmp_path / "site"
    build_site(data, site, jobs=1)
    cache = tmp_path / ".site-build-cache"
    filed = json.loads((cache / buildstate.RUNS).read_text())["runs"]
    for entry in filed.values():  # the same RunInfo as the contract's reader makes
        assert repr(buildstate._filed_info(entry["info"])) == repr(RunInfo.from_dict(entry["info"]))
    bad = dict(next(iter(filed.values()))["info"], run_id=3)  # not what put files
    with pytest.raises(ContractError):
        buildstate._filed_info(bad)
    assert list(cache.glob("chart-templates-*.json")) and list(cache.glob("jinja-*"))
    for fn in chartkit.COMPILED:  # as in a fresh process: nothing compiled yet
        fn.cache_clear()
    monkeypatch.setitem(chartkit._KEPT, "made", {})

    def no_altair(*_: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(charts, "template", no_altair)
    monkeypatch.setattr(drillcharts, "template", no_altair)
    shutil.move(extra, data / extra.name)
    added = build_site(data, site, jobs=1)
    assert added.aggregated == [extra.name] and added.errors == []
    monkeypatch.undo()
    same_site(site, cold(data, tmp_path / "cold-13"))
