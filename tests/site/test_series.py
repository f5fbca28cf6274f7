"""History (site_builder/series.py, changes.py): series grouping and order, the
what-changed rule with and without intervals, regression flags, the series page
and the run pages' previous/next links (and their cache invalidation)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import vl_convert as vlc

from rundir import contract
from rundir.io import read_run
from site_builder import changes, chartkit, series, serieschart, setups
from site_builder.aggregate import CellResult, aggregate_run
from site_builder.publish import build_site
from site_builder.views import RunView
from tests.site.test_repeats_site import run as repeated_run
from tests.support.synthetic_runs import make_imported_run


def _cells(total: float) -> list[dict[str, Any]]:
    return [{"phase": contract.DECODE, "context": 8192, "concurrency": n,
             "status": contract.VALID, "total_tok_s": total * n, "per_request_tok_s": total,
             "ttft_ms": 100.0, "tbt_ms": 1000.0 / total, "avg_active": float(n),
             "completed": 4 * n, "output_tokens": 100, "measured_s": 30.0}
            for n in (1, 8)]


def _info(version: str, day: int, gpus: int = 8) -> dict[str, Any]:
    return {"measured_at": f"2026-09-{day:02d}T10:00:00Z",
            "hardware": {"gpu_name": "H200 SXM", "gpu_count": gpus, "vram_gb_per_gpu": 141.0},
            "engine": {"name": "vllm", "version": version, "quantization": "FP8"},
            "model": {"name": "Qwen3.5-4B", "served_name": "q"}}


def _run(data: Path, run_id: str, version: str, day: int, total: float = 100.0,
         gpus: int = 8) -> Path:
    return make_imported_run(data / run_id, run_id=run_id, cells=_cells(total),
                             info=_info(version, day, gpus))


def _view(path: Path) -> RunView:
    agg = aggregate_run(read_run(path))
    return RunView(read_run(path).info, agg, path.name)


def test_series_grouping_and_order(tmp_path: Path) -> None:
    views = [_view(_run(tmp_path, "c", "0.30.1", 20)), _view(_run(tmp_path, "a", "0.29.0", 2)),
             _view(_run(tmp_path, "b", "0.10.0", 2)),  # same date: version order
             _view(_run(tmp_path, "x", "0.29.0", 3, gpus=4)),  # another GPU count
             _view(_run(tmp_path, "y", "0.30.1", 9, gpus=4))]
    found = series.series_groups(views)
    assert [[r.run_id for r in s.runs] for s in found] == [["x", "y"], ["b", "a", "c"]]
    assert [s.slug for s in found] == ["qwen3.5-4b-fp8-on-h200-sxm-141gb-4-vllm",
                                       "qwen3.5-4b-fp8-on-h200-sxm-141gb-8-vllm"]
    lone = series.series_groups(views[:1] + views[3:4])
    assert lone == []  # one run per setup: no series


def test_what_changed_without_spread_lists_large_moves_as_not_established(tmp_path: Path) -> None:
    """Imported figures carry no spread: a move past 5% is listed with its numbers, but
    as not established (issue 32: no regression from what may be noise)."""
    old = _view(_run(tmp_path, "a", "0.29.0", 2, total=100.0))
    same = _view(_run(tmp_path, "b", "0.30.1", 3, total=104.0))  # +4%: within 5%
    up = _view(_run(tmp_path, "c", "0.31.0", 4, total=110.0))
    assert changes.compare(old, same).moves == []
    found = changes.compare(old, up)
    assert found.compared == 2
    assert {(m.where, m.figure, m.better, m.established, m.why) for m in found.moves} == {
        (w, f, True, False, changes.NO_BAND) for w in ("8K × 1", "8K × 8")
        for f in ("Total tok/s", "Per request tok/s")}
    assert {m.change for m in found.moves} == {"+10.0%"}
    assert found.rules == [changes.THRESHOLD_RULE]
    assert "5%" in changes.THRESHOLD_RULE and "noise" in changes.THRESHOLD_RULE


def _cell(total: float, intervals: dict[str, list[float]] | None = None,
          noise: dict[str, list[float]] | None = None) -> CellResult:
    return CellResult(contract.DECODE, 1024, 1, contract.VALID, total_tok_s=total,
                      intervals=intervals or {}, noise=noise or {},
                      windows=3 if intervals else 1)


def test_what_changed_with_intervals_needs_them_apart() -> None:
    assert changes.judge([95.0, 105.0], [125.0, 135.0], True) == (True, changes.APART)
    # 30% apart but the intervals overlap: not established, whatever the threshold says
    assert changes.judge([80.0, 128.0], [110.0, 150.0], True) == (False, changes.OVERLAP)
    assert changes.judge(None, [102.5, 103.5], False) == (False, changes.NO_BAND)

    def move(a: CellResult, b: CellResult) -> changes.Move | None:
        return changes.figure_move("1K × 1", a, b, "total_tok_s", "Total tok/s", True, str)

    # 3% apart, intervals apart: established although under the threshold
    found = move(_cell(100.0, {"total_tok_s": [99.5, 100.5]}),
                 _cell(103.0, {"total_tok_s": [102.5, 103.5]}))
    assert found is not None and found.established and found.why == changes.APART
    # 30% apart, overlapping: listed (past 5%) with its numbers, not established
    found = move(_cell(100.0, {"total_tok_s": [80.0, 128.0]}),
                 _cell(130.0, {"total_tok_s": [110.0, 150.0]}))
    assert found is not None and not found.established and found.change == "+30.0%"
    # 3% apart and overlapping: not listed at all
    assert move(_cell(100.0, {"total_tok_s": [95.0, 105.0]}),
                _cell(103.0, {"total_tok_s": [98.0, 108.0]})) is None


def test_one_window_bands_decide_where_no_repeats() -> None:
    """A one-window cell is judged by its noise band (CellResult.noise); a repeated
    cell's interval wins over it; a cell without either establishes nothing."""
    def move(a: CellResult, b: CellResult) -> changes.Move | None:
        return changes.figure_move("1K × 1", a, b, "total_tok_s", "Total tok/s", True, str)

    tight = move(_cell(100.0, noise={"total_tok_s": [97.0, 103.0]}),
                 _cell(80.0, noise={"total_tok_s": [78.0, 82.0]}))
    assert tight is not None and tight.established and not tight.better
    assert tight.why == changes.BANDS_APART
    wide = move(_cell(100.0, noise={"total_tok_s": [80.0, 120.0]}),
                _cell(86.6, noise={"total_tok_s": [70.0, 103.0]}))
    assert wide is not None and not wide.established and wide.why == changes.BANDS_OVERLAP
    assert wide.change == "−13.4%"
    half = move(_cell(100.0, noise={"total_tok_s": [97.0, 103.0]}), _cell(80.0))
    assert half is not None and not half.established and half.why == changes.NO_BAND
    # repeats: the k windows' interval decides, not the (narrower) band
    both = _cell(100.0, {"total_tok_s": [90.0, 110.0]}, {"total_tok_s": [99.0, 101.0]})
    assert changes.band_of(both, "total_tok_s") == ([90.0, 110.0], True)
    found = move(both, _cell(88.0, {"total_tok_s": [85.0, 95.0]}, {"total_tok_s": [87.0, 89.0]}))
    assert found is not None and not found.established and found.why == changes.OVERLAP


def test_what_changed_on_repeated_windows(tmp_path: Path) -> None:
    a = _view(repeated_run(tmp_path, "a", 60.0, 1))
    b = _view(repeated_run(tmp_path, "b", 120.0, 2))
    c = _view(repeated_run(tmp_path, "c", 60.0, 3))
    faster = changes.compare(a, b)
    assert changes.INTERVAL_RULE in faster.rules
    assert any(m.figure == "Total tok/s" and m.better and m.established and m.why == changes.APART
               for m in faster.moves)
    assert not [m for m in changes.compare(a, c).moves
                if m.figure == "Total tok/s" and m.established]


def test_status_changes_are_listed(tmp_path: Path) -> None:
    cells = _cells(100.0)
    cells[1] = {**cells[1], "status": contract.OVER_CAPACITY, "total_tok_s": None,
                "per_request_tok_s": None, "ttft_ms": None, "tbt_ms": None}
    old = _view(_run(tmp_path, "a", "0.29.0", 2))
    new = _view(make_imported_run(tmp_path / "b", run_id="b", cells=cells,
                                  info=_info("0.30.1", 3)))
    found = changes.compare(old, new)
    assert [(s.where, s.before) for s in found.statuses] == [("8K × 8", "Valid")]
    assert found.statuses[0].after != "Valid"


def test_regression_flag_and_links(tmp_path: Path) -> None:
    views = [_view(_run(tmp_path, "a", "0.29.0", 2)), _view(_run(tmp_path, "b", "0.30.1", 9, 80.0)),
             _view(_run(tmp_path, "z", "0.30.1", 9, 80.0, gpus=2))]
    series.attach(views)
    a, b, z = views
    assert a.regression is None and z.regression is None and z.series_slug == ""
    # imported figures: no spread, so a −20% fall is shown but not established
    assert b.regression == changes.Fall("Peak total tok/s −20.0% vs vllm 0.29.0 (Sep 2, 2026)",
                                        False, changes.NO_BAND)
    assert a.series_next == ("b", "vllm 0.30.1") and a.series_prev is None
    assert b.series_prev == ("a", "vllm 0.29.0") and b.series_next is None
    assert a.series_page == b.series_page == "series/qwen3.5-4b-fp8-on-h200-sxm-141gb-8-vllm.html"
    faster = [_view(_run(tmp_path, "c", "0.29.0", 2)), _view(_run(tmp_path, "d", "0.30.1", 9, 120.0))]
    series.attach(faster)
    assert faster[1].regression is None


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_series_page_and_next_link_after_a_new_run(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "a", "0.29.0", 2)
    _run(data, "b", "0.29.0", 9, 80.0)  # same label, another date: distinct names
    assert build_site(data, out, jobs=0).errors == []
    page = out / "series/qwen3.5-4b-fp8-on-h200-sxm-141gb-8-vllm.html"
    text = _text(page.read_text())
    assert text.index("Sep 2, 2026 0.29.0") < text.index("Sep 9, 2026 0.29.0")
    assert "Sep 2, 2026 → Sep 9, 2026" in text and "not established" in text
    assert "moves by more than 5%" in text
    assert "Change not established: the latest run" in text
    assert 'class="chart"' in page.read_text()
    assert "(not established)" in _text((out / "series/index.html").read_text())
    index = (out / "index.html").read_text()  # imported figures: a fall, not a regression
    assert index.count('class="badge regression"') == 0
    assert index.count('>change not established</a>') == 1
    assert 'href="series/qwen3.5-4b-fp8-on-h200-sxm-141gb-8-vllm.html"' in index
    b_page = out / "runs/b/index.html"
    assert 'rel="prev"' in b_page.read_text() and 'rel="next"' not in b_page.read_text()
    _run(data, "c", "0.30.1", 20)
    report = build_site(data, out, jobs=0)
    assert report.errors == []
    html = b_page.read_text()
    assert 'rel="next" class="series-next" href="../../runs/c/index.html"' in html
    assert "Next run: vllm 0.30.1" in html


def test_compare_opens_on_the_newest_run_against_its_previous_run(tmp_path: Path) -> None:
    """The compare page's pickers open on what changed last: the newest run
    with an earlier run of its setup (B) against that run (A), not on the
    first two runs of the site (other models at 1,000 runs); its runs are
    grouped by family, a setup's runs together and oldest first, with and
    without JavaScript; a run page links its comparison with its previous run."""
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "a", "0.29.0", 2)
    _run(data, "b", "0.30.1", 9)
    _run(data, "m", "0.30.1", 25, gpus=2)  # newest run of all, but alone in its setup
    make_imported_run(data / "o", run_id="o", cells=_cells(50.0),
                      info=_info("0.30.1", 1) | {"model": {"name": "Llama-4-Scout",
                                                           "served_name": "l"}})
    assert build_site(data, out, jobs=0).errors == []
    html = (out / "compare.html").read_text()
    for side, chosen in (("a", "a"), ("b", "b")):
        select = html[html.index(f'id="ab-{side}"'):html.index("</select>", html.index(f'id="ab-{side}"'))]
        assert re.findall(r'<option value="([^"]+)" selected>', select) == [chosen], side
        groups = re.findall(r'<optgroup label="([^"]+)">(.*?)</optgroup>', select)
        assert [g for g, _ in groups] == ["Llama-4-Scout", "Qwen3.5-4B"]
        assert re.findall(r'value="([^"]+)"', groups[1][1]) == ["m", "a", "b"]
    noscript = html[html.index("<noscript>"):html.index("</noscript>")]
    assert re.findall(r'<h2 class="run-links-family">([^<]+)<', noscript) == [
        "Llama-4-Scout ", "Qwen3.5-4B "]
    assert 'href="../../compare.html#a=a&amp;b=b">Compare with the previous run' in (
        out / "runs/b/index.html").read_text()
    assert "Compare with the previous run" not in (out / "runs/a/index.html").read_text()


def test_the_list_of_series_names_each_latest_run_by_version_and_date(tmp_path: Path) -> None:
    """Each series' latest run reads the same way in the list (version and
    date, its time when the series needs it), linked; its distinct name alone
    was a version in one row and a date in the next."""
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "a", "0.29.0", 2)
    _run(data, "b", "0.30.1", 9)  # names differ by version only: "vllm 0.30.1"
    _run(data, "c", "0.29.0", 3, gpus=4)
    _run(data, "d", "0.29.0", 5, gpus=4)  # names differ by date only: "Sep 5, 2026"
    assert build_site(data, out, jobs=0).errors == []
    rows = re.findall(r'<td><a href="../runs/(\w+)/index.html">([^<]+)</a></td>',
                      (out / "series/index.html").read_text())
    assert rows == [("d", "vllm 0.29.0 · Sep 5, 2026"), ("b", "vllm 0.30.1 · Sep 9, 2026")]


def test_engine_versions_are_ordered_as_versions() -> None:
    """PEP 440's order (a dev release before its pre-releases, those before the final,
    then post releases), numbers as numbers, llama.cpp build numbers, commit and local
    suffixes ignored; a text that is no version has no key."""
    ordered = ["0.9.2", "0.10.0", "0.29.0", "0.30.1.dev1", "0.30.1rc1.dev452+g73a583112",
               "0.30.1rc1", "0.30.1", "0.30.1.post1", "v0.31.0"]
    keys = [setups.version_key(v) for v in ordered]
    assert all(k is not None for k in keys) and keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    assert setups.version_key("1.0") == setups.version_key("1.0.0")
    assert setups.version_key("b6000") < setups.version_key("b6200-0c1e57098")
    assert setups.version_key("main") is None and setups.version_key("") is None


def test_an_older_version_measured_later_is_no_regression_of_the_newer(tmp_path: Path) -> None:
    """Issue 30: 0.30.1 measured on Sep 2, then 0.29.0 re-measured on Sep 9 (slower):
    by date the latest run was 0.29.0 and it was called a −20% regression of 0.30.1.
    Where versions differ the series is in version order: 0.30.1 is the latest, and
    it is faster than 0.29.0, so no regression is flagged; runs of one version keep
    their date order, and a series of one version is by date."""
    views = [_view(_run(tmp_path, "new", "0.30.1", 2, total=100.0)),
             _view(_run(tmp_path, "old", "0.29.0", 9, total=80.0))]
    (s,) = series.attach(views)
    new, old = views
    assert [r.run_id for r in s.runs] == ["old", "new"] and s.by_version
    assert s.latest is new and new.regression is None and old.regression is None
    assert old.series_next == ("new", "vllm 0.30.1") and new.series_prev == ("old", "vllm 0.29.0")
    assert s.order_words == "oldest engine version first"
    # the same version twice, and a newer one: by version, then date
    more = [_view(_run(tmp_path, "b", "0.29.0", 20)), _view(_run(tmp_path, "c", "0.29.0", 3)),
            _view(_run(tmp_path, "a", "0.28.0", 25))]
    (s,) = series.series_groups(more)
    assert [r.run_id for r in s.runs] == ["a", "c", "b"]
    # one version only: by date, and the page says so
    same = [_view(_run(tmp_path, "y", "0.29.0", 9)), _view(_run(tmp_path, "x", "0.29.0", 2))]
    (s,) = series.series_groups(same)
    assert [r.run_id for r in s.runs] == ["x", "y"] and s.order_words == "oldest first"


def test_series_chart_gives_each_operating_point_its_own_scale() -> None:
    """Issue 30: three operating points on one linear axis of tok/s (40K, 2K, 100) made
    an 18% fall of the smallest a 2-pixel dip. Each point is now a percentage of its
    first run's figure: the fall reads as 18% of the scale's 100, whatever its size."""
    chart = serieschart.series_chart(
        ["run 1", "run 2"], ["8K × 64", "32K × 8", "251K × 1"],
        [[(40000.0, None, "40K"), (40400.0, None, "40.4K")],
         [(2000.0, None, "2,000"), (2000.0, None, "2,000")],
         [(100.0, None, "100"), (82.0, None, "82")]])
    assert chart is not None
    rows = {(r["point"], r["run"]): r for r in chart.spec["datasets"]["points"]}
    assert rows[("251K × 1", "run 2")]["rel"] == pytest.approx(82.0)
    assert rows[("251K × 1", "run 2")]["change"] == "-18.0%"
    assert rows[("8K × 64", "run 2")]["rel"] == pytest.approx(101.0)
    assert rows[("251K × 1", "run 2")]["text"] == "82"  # the tooltip keeps tok/s
    svg = vlc.vegalite_to_svg({**chart.spec, "width": 400, "autosize": "pad"},
                              vl_version=chartkit.VL_VERSION, allowed_base_urls=[])
    ys = {}
    for label, y in re.findall(r'aria-label="([^"]*At: 251K × 1[^"]*)"[^>]*'
                               r'transform="translate\([\d.]+,([\d.]+)\)"', svg):
        ys[label.split(";")[0]] = float(y)
    assert len(ys) == 2, ys
    dip = max(ys.values()) - min(ys.values())
    assert dip >= 0.15 * chartkit.HEIGHT, (dip, ys)  # an 18% fall is ~18% of the plot


def test_compare_opens_on_two_runs_of_one_model_without_a_series(tmp_path: Path) -> None:
    """Issue 30: with no setup measured twice the page opened on the pickers' first
    two runs: two different models. It opens on the newest run of a family with two
    runs (B) against the family's next newest (A); with no such family it selects
    nothing and asks the reader to pick."""
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "q1", "0.30.1", 2)
    _run(data, "q2", "0.30.1", 9, gpus=4)  # the same model on other hardware
    make_imported_run(data / "o", run_id="o", cells=_cells(50.0),
                      info=_info("0.30.1", 20) | {"model": {"name": "Aardvark-7B",
                                                            "served_name": "a"}})
    assert build_site(data, out, jobs=0).errors == []
    html = (out / "compare.html").read_text()
    assert _selected(html) == {"a": ["q1"], "b": ["q2"]}
    assert 'id="ab-no-pair"' not in html
    lone, lone_out = tmp_path / "lone", tmp_path / "lone-site"
    _run(lone, "q1", "0.30.1", 2)
    make_imported_run(lone / "o", run_id="o", cells=_cells(50.0),
                      info=_info("0.30.1", 20) | {"model": {"name": "Aardvark-7B",
                                                            "served_name": "a"}})
    assert build_site(lone, lone_out, jobs=0).errors == []
    html = (lone_out / "compare.html").read_text()
    assert _selected(html) == {"a": [""], "b": [""]}  # the "Pick a run" placeholder
    assert 'id="ab-no-pair"' in html and "pick the two runs" in html


def _selected(html: str) -> dict[str, list[str]]:
    out = {}
    for side in ("a", "b"):
        start = html.index(f'id="ab-{side}"')
        select = html[start:html.index("</select>", start)]
        out[side] = re.findall(r'<option value="([^"]*)" selected', select)
    return out
