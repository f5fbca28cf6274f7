"""Prefix reuse and conversation cells on the site: the exact figures from a run
whose every request is known (tests/support/traffic_runs.py), their statuses
with their words, the download columns, and nothing of it for runs without."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from rundir import contract
from site_builder import load
from site_builder.aggregate import RunAggregate, aggregate_run
from site_builder.publish import build_site
from tests.support.synthetic_runs import make_measured_run
from tests.support.traffic_runs import EXPECTED, REUSE_REASON, UNVERIFIED_REASON, add_traffic


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traffic")
    add_traffic(make_measured_run(root / "data" / "with", run_id="with-traffic", contexts=[1024],
                                  concurrency=[1, 2]))
    make_measured_run(root / "data" / "without", run_id="plain", contexts=[1024],
                      concurrency=[1, 2], seed=3)
    report = build_site(root / "data", root / "out", jobs=1)
    assert report.errors == []
    return root / "out"


def _text(html: str, section: str) -> str:
    """The visible text of one section of a page, whitespace collapsed."""
    m = re.search(rf'<section id="{section}".*?</section>', html, re.S)
    assert m, section
    body = re.sub(r"<(script|svg)\b.*?</\1>", "", m.group(0), flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", body).split())


def test_the_figures_come_from_the_requests_not_the_knob(tmp_path: Path) -> None:
    run = add_traffic(make_measured_run(tmp_path / "r", run_id="r", contexts=[1024],
                                        concurrency=[1]))
    agg = aggregate_run(load.load_run(load.RunSource(run, "d")), "d")
    assert {x.phase for x in agg.cells} == {contract.PREFILL, contract.DECODE}
    got = {(x.phase if x.phase == contract.PREFIX else "turn", x.target if x.turn is None
            else x.turn): x for x in agg.traffic}
    assert set(got) == set(EXPECTED)
    for key, want in EXPECTED.items():
        x = got[key]
        assert x.achieved == pytest.approx(want["achieved"]) if want["achieved"] is not None \
            else x.achieved is None
        assert x.server == pytest.approx(want["server"]) if want["server"] is not None \
            else x.server is None
        assert x.ttft_ms == pytest.approx(want["ttft_ms"])
        assert (x.uncached_tok_s == pytest.approx(want["uncached"]) if want["uncached"]
                else x.uncached_tok_s is None)
        if key[0] == "turn":
            assert x.per_request_tok_s == pytest.approx(want["per_request"])
            assert x.prompt_tokens == want["prompt"]
    assert got[("prefix", 90)].status == contract.REUSE_OFF_TARGET
    # the cache keeps them: a rebuild reads the same traffic cells back
    again = RunAggregate.from_json(agg.head().to_json())
    assert again.traffic == agg.traffic


def test_run_page_shows_prefix_reuse_with_statuses(site: Path) -> None:
    html = (site / "runs" / "with-traffic" / "index.html").read_text()
    text = _text(html, "prefix-reuse")
    assert "4K context, 1 at once" in text
    assert "0% 0.0% 0.0% 200 ms 20K Valid" in text
    assert "50% 50.0% 50.5% 110 ms 18.2K Valid" in text
    assert f"90% 10.0% 10.0% 190 ms 18.9K Reuse off target : {REUSE_REASON}" in text
    assert f"99% — — 50 ms — Reuse not verifiable : {UNVERIFIED_REASON}" in text
    assert "Reuse off target: the share of each prompt" in text  # the legend line
    assert 'td class="st-reuse_off_target"' in html
    # the charts put the achieved reuse on x: 10% for the cell that asked 90%
    spec = json.loads(re.search(r'id="chart-reuse-ttft".*?<script type="application/json" '
                                r'class="chart-spec">(.*?)</script>', html, re.S).group(1))
    xs = sorted(r["x"] for r in spec["datasets"]["cells"])
    assert xs == [0.0, 10.0, 50.0]  # the unverified cell has no achieved reuse to plot


def test_run_page_shows_conversation_turns(site: Path) -> None:
    html = (site / "runs" / "with-traffic" / "index.html").read_text()
    text = _text(html, "conversations")
    assert "8K context, 2 conversations at once" in text
    assert "1 2,048 0.0% — 100 ms 20.5K 100.0 Valid" in text  # cached: requests, then engine (none)
    assert "4 8,192 75.0% 75.0% 80 ms 25.6K 100.0 Valid" in text
    assert 'id="chart-turn-ttft"' in html


def test_downloads_carry_the_traffic_columns(site: Path) -> None:
    rows = list(csv.DictReader((site / "runs" / "with-traffic" / "cells.csv").open()))
    data = json.loads((site / "runs" / "with-traffic" / "cells.json").read_text())["cells"]
    assert len(rows) == len(data) == 3 + 6
    assert list(rows[0])[-4:] == ["prefix_reuse_target", "turn", "prefix_reuse_achieved",
                                  "prefix_reuse_server"]
    assert all(r["prefix_reuse_target"] is None and r["turn"] is None
               for r in data if r["phase"] in contract.MATRIX_PHASES)
    by = {(r["phase"], r["prefix_reuse_target"], r["turn"]): r for r in data}
    off = by[("prefix", 90, None)]
    assert (off["prefix_reuse_achieved"], off["prefix_reuse_server"]) == (10.0, 10.0)
    assert off["status"] == "reuse_off_target" and off["status_label"] == "Reuse off target"
    assert by[("prefix", 50, None)]["prefix_reuse_server"] == pytest.approx(50.5)
    assert by[("prefix", 99, None)]["prefix_reuse_achieved"] is None
    assert by[("conversation", None, 4)]["prefix_reuse_achieved"] == 75.0
    assert by[("conversation", None, 4)]["ttft_ms"] == pytest.approx(80.0)
    assert by[("conversation", None, 1)]["prefix_reuse_server"] is None


def test_a_run_without_traffic_cells_has_none_of_it(site: Path) -> None:
    html = (site / "runs" / "plain" / "index.html").read_text()
    assert 'id="prefix-reuse"' not in html and 'id="conversations"' not in html
    header = (site / "runs" / "plain" / "cells.csv").read_text().splitlines()[0]
    assert "prefix_reuse" not in header and ",turn" not in header
    assert "prefix_reuse" not in (site / "runs" / "plain" / "cells.json").read_text()
    # the matrix tables of the traffic run never list a traffic cell
    assert "prefix" not in _text((site / "runs" / "with-traffic" / "index.html").read_text(),
                                 "measurements").lower()


def test_stylesheet_has_traffic_rules_only_on_a_site_with_traffic(site: Path,
                                                                  tmp_path: Path) -> None:
    css = next((site / "static").glob("style.*.css")).read_text()
    assert "st-reuse_off_target" in css and "st-reuse_unverified" in css
    make_measured_run(tmp_path / "data" / "p", run_id="p", contexts=[1024], concurrency=[1])
    assert build_site(tmp_path / "data", tmp_path / "out", jobs=1).errors == []
    plain = next((tmp_path / "out" / "static").glob("style.*.css")).read_text()
    assert "reuse_" not in plain


def test_index_row_says_what_else_a_run_measured(site: Path) -> None:
    html = (site / "index.html").read_text()
    assert 'title="also measured: prefix reuse 0–99%, 4 turns"' in html
    assert html.count("also measured:") == 1  # the run without traffic cells: nothing


def test_a_rebuild_reads_the_traffic_cells_back_from_its_cache(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    add_traffic(make_measured_run(data / "t", run_id="t", contexts=[1024], concurrency=[1]))
    assert build_site(data, out, jobs=1).errors == []
    make_measured_run(data / "p", run_id="p", contexts=[1024], concurrency=[1], seed=5)
    report = build_site(data, out, jobs=1)  # run t from the build's run index this time
    assert report.errors == [] and "t" in report.reused
    assert "also measured: prefix reuse 0–99%, 4 turns" in (out / "index.html").read_text()
    assert "st-reuse_off_target" in next((out / "static").glob("style.*.css")).read_text()


def _status_rules(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="status-rules">(.*?)</script>',
                                html, re.S).group(1))


def test_the_compare_page_gets_the_traffic_data_and_rules(site: Path) -> None:
    html = (site / "compare.html").read_text()
    assert '<div id="ab-traffic"' in html
    assert re.search(r'src="static/compare_traffic\.[0-9a-f]{10}\.js"', html)
    rules = _status_rules(html)
    assert {contract.REUSE_OFF_TARGET, contract.REUSE_UNVERIFIED} <= set(rules["numbers"])
    js = (site / "runs" / "with-traffic" / "data.js").read_text()
    data = json.loads(js.split("] = ", 1)[1].rstrip(";\n"))
    traffic = [dict(zip(data["traffic"]["fields"], row, strict=True))
               for row in data["traffic"]["cells"]]
    off = next(c for c in traffic if c["phase"] == "prefix" and c["target"] == 90)
    assert (off["achieved_text"], off["ttft_ms_text"], off["status_label"]) == (
        "10.0%", "190 ms", "Reuse off target")
    assert data["traffic"]["anchors"][contract.REUSE_OFF_TARGET] == "reuse-off-target"
    assert [c["turn"] for c in traffic if c["phase"] == "conversation"] == [1, 4]
    assert "traffic" not in (site / "runs" / "plain" / "data.js").read_text()


def test_traffic_status_words_link_to_their_methodology_entries(site: Path) -> None:
    html = (site / "runs" / "with-traffic" / "index.html").read_text()
    assert '<a href="../../methodology.html#reuse-off-target">Reuse off target</a>' in html
    assert '<a href="../../methodology.html#reuse-unverified">Reuse not verifiable</a>' in html
    method = (site / "methodology.html").read_text()
    assert 'id="reuse-off-target"' in method and 'id="reuse-unverified"' in method
    entry = " ".join(re.search(r'id="reuse-off-target".*?</li>', method, re.S).group(0).split())
    assert "max(2 points, one cache block ÷ the mean prompt)" in entry
    assert "cached_tokens" in entry and "Never Valid" in entry


def test_family_page_and_explorer_say_what_else_was_measured(site: Path) -> None:
    family = next((site / "models").glob("*.html")).read_text()
    assert family.count('class="muted also-measured"') == 1  # the plain run: nothing
    assert "· also prefix reuse 0–99%, 4 turns" in family
    explore = (site / "explore.html").read_text()
    assert 'id="ex-traffic"' in explore and "Prefix-reuse and conversation cells" in explore


def test_a_site_without_traffic_has_none_of_the_compare_parts(tmp_path: Path) -> None:
    make_measured_run(tmp_path / "data" / "p", run_id="p", contexts=[1024], concurrency=[1])
    make_measured_run(tmp_path / "data" / "q", run_id="q", contexts=[1024], concurrency=[1],
                      seed=4)
    assert build_site(tmp_path / "data", tmp_path / "out", jobs=1).errors == []
    out = tmp_path / "out"
    html = (out / "compare.html").read_text()
    assert "ab-traffic" not in html and "compare_traffic" not in html
    assert "reuse_" not in json.dumps(_status_rules(html))
    assert not list((out / "static").glob("compare_traffic.*"))
    assert "ex-traffic" not in (out / "explore.html").read_text()
    assert "also-measured" not in next((out / "models").glob("*.html")).read_text()
