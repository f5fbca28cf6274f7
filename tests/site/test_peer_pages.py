"""A run imported from another tool's per-request output, built into the site (issue 36)."""

from __future__ import annotations

import dataclasses
import re
from html import unescape
from pathlib import Path

import pytest

from importer.peers.model import TIER_AGGREGATE
from importer.peers.write import write_peer_run
from site_builder.publish import build_site
from tests.importer.test_peer_write import chunk_run


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("peer-site")
    src, agg_src = root / "raw.jsonl", root / "summary.json"
    src.write_text('{"synthetic": 1}\n')
    agg_src.write_text('{"synthetic": 2}\n')
    ids = {"chunk": write_peer_run(chunk_run(src), root / "data").run_id,
           "aggregate": write_peer_run(dataclasses.replace(chunk_run(agg_src), tier=TIER_AGGREGATE,
                                                           requests=()), root / "data").run_id}
    build_site(root / "data", root / "out", jobs=1)
    return root / "out", ids


def _page(out: Path, run_id: str) -> str:
    return (out / "runs" / run_id / "index.html").read_text(encoding="utf-8")


def _plain(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_chunk_tier_page_shows_the_tool_its_figures_and_ours(site) -> None:
    out, ids = site
    text = _plain(_page(out, ids["chunk"]))
    assert "Imported from synthtool" in text
    assert "Version 1.2.3" in text and "Tier chunk: every chunk's arrival" in text
    assert "Clock time.perf_counter_ns (CLOCK_MONOTONIC)" in text
    assert "What the format does not keep the server's finish reasons" in text
    assert "our figures, computed from the tool's per-request rows over the run's steady span" in text
    assert "The tool's own figures, as it published them (whole run)" in text
    # one row per metric: its mean, p50, p90, p99 in columns and the tool's definition once
    assert "Figure mean p50 p90 p99 The tool's definition" in text
    assert "itl_ms — 10 — — mean gap between chunks of a request" in text
    assert text.count("mean gap between chunks of a request") == 1
    assert "The tool's own totals (whole run) Total Value The tool's definition completed 8" in text
    assert "a published page" not in text  # not the page-import notice
    assert "204.3" not in text and "200.9" in text  # our total tok/s over the window (231 / 1.15)


def test_aggregate_tier_page_says_nothing_was_recomputed(site) -> None:
    out, ids = site
    text = _plain(_page(out, ids["aggregate"]))
    assert "Tier aggregate: the tool's summary figures only" in text
    assert "nothing on this page was recomputed or checked" in text
