"""One code-fingerprint rule for both build caches (issue 19 item 4): the aggregate
cache and the page cache miss when anything their output is computed from changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import rundir
import site_builder
from site_builder import fingerprint
from site_builder.aggregate import code_salt
from site_builder.prices import Price, PriceTable
from site_builder.publish import build_site
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
    assert {"rundir/io.py", "rundir/contract.py", "rundir/metrics.py", "site_builder/aggregate.py",
            "site_builder/fingerprint.py", "site_builder/publish.py"} <= names
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
