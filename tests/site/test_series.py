"""History (site_builder/series.py, changes.py): series grouping and order, the
what-changed rule with and without intervals, regression flags, the series page
and the run pages' previous/next links (and their cache invalidation)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rundir import contract
from rundir.io import read_run
from site_builder import changes, series
from site_builder.aggregate import aggregate_run
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


def test_what_changed_without_intervals_uses_the_threshold(tmp_path: Path) -> None:
    old = _view(_run(tmp_path, "a", "0.29.0", 2, total=100.0))
    same = _view(_run(tmp_path, "b", "0.30.1", 3, total=104.0))  # +4%: within 5%
    up = _view(_run(tmp_path, "c", "0.31.0", 4, total=110.0))
    assert changes.compare(old, same).moves == []
    found = changes.compare(old, up)
    assert found.compared == 2
    assert {(m.where, m.figure, m.better, m.by_intervals) for m in found.moves} == {
        ("8K × 1", "Total tok/s", True, False), ("8K × 1", "Per request tok/s", True, False),
        ("8K × 8", "Total tok/s", True, False), ("8K × 8", "Per request tok/s", True, False)}
    assert found.rules == [changes.THRESHOLD_RULE]
    assert "5%" in changes.THRESHOLD_RULE and "noise" in changes.THRESHOLD_RULE


def test_what_changed_with_intervals_needs_them_apart() -> None:
    assert changes.beyond_noise(100.0, 130.0, [95.0, 105.0], [125.0, 135.0]) == (True, True)
    # 30% apart but the intervals overlap: not claimed, whatever the threshold says
    assert changes.beyond_noise(100.0, 130.0, [80.0, 128.0], [110.0, 150.0]) == (False, True)
    # 3% apart, intervals apart: beyond noise although under the threshold
    assert changes.beyond_noise(100.0, 103.0, [99.5, 100.5], [102.5, 103.5]) == (True, True)
    assert changes.beyond_noise(100.0, 103.0, None, [102.5, 103.5]) == (False, False)


def test_what_changed_on_repeated_windows(tmp_path: Path) -> None:
    a = _view(repeated_run(tmp_path, "a", 60.0, 1))
    b = _view(repeated_run(tmp_path, "b", 120.0, 2))
    c = _view(repeated_run(tmp_path, "c", 60.0, 3))
    faster = changes.compare(a, b)
    assert faster.rules == [changes.INTERVAL_RULE]
    assert any(m.figure == "Total tok/s" and m.better and m.by_intervals for m in faster.moves)
    assert not [m for m in changes.compare(a, c).moves if m.figure == "Total tok/s"]


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
    assert a.regression == "" and z.regression == "" and z.series_slug == ""
    assert b.regression == "Peak total tok/s −20.0% vs vllm 0.29.0 (Sep 2, 2026)"
    assert a.series_next == ("b", "vllm 0.30.1") and a.series_prev is None
    assert b.series_prev == ("a", "vllm 0.29.0") and b.series_next is None
    assert a.series_page == b.series_page == "series/qwen3.5-4b-fp8-on-h200-sxm-141gb-8-vllm.html"
    faster = [_view(_run(tmp_path, "c", "0.29.0", 2)), _view(_run(tmp_path, "d", "0.30.1", 9, 120.0))]
    series.attach(faster)
    assert faster[1].regression == ""


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
    assert "Sep 2, 2026 → Sep 9, 2026" in text and "worse" in text
    assert "Moved by more than 5%" in text
    assert 'class="chart"' in page.read_text()
    assert "Regression" in _text((out / "series/index.html").read_text())
    index = (out / "index.html").read_text()  # the index flags the latest run's regression
    assert index.count('class="badge regression"') == 1
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
