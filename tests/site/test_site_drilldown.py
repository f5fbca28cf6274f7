"""Drill-down pages: every count says what it counts and the counts reconcile,
rejected prefill samples are marked, and every table scrolls in its own box."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rundir import contract, words
from site_builder.publish import build_site
from tests.support.chromium import Node, parse_html
from tests.support.synthetic_runs import make_measured_run

RUN = "drill"
REJECTED = "rejected: prefix-cache hit (900 cached tokens)"


def _spoil_prefill(run_dir: Path) -> None:
    """Turn the 1K prefill cell's samples into: 3 used, 2 rejected prefix-cache hits
    (which the server also gave a finish reason), 1 failed with a finish reason."""
    path = run_dir / contract.REQUESTS_FILE
    table = pq.read_table(path)
    rows = table.to_pylist()
    prefill = [r for r in rows if r["purpose"] == contract.PURPOSE_PREFILL and r["context"] == 1024]
    assert len(prefill) == 6
    for r in prefill[:2]:  # a cache hit answers fast: it would pull the median down
        r["error"], r["cached_tokens"] = REJECTED, 900
        r["chunk_ns"] = [r["send_ns"] + 4_000_000, r["send_ns"] + 5_000_000]
        r["end_ns"] = r["send_ns"] + 6_000_000
    prefill[2]["error"] = "HTTP 500: boom"
    assert all(r["finish_reason"] == "length" for r in prefill)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("drill")
    run = make_measured_run(root / "data" / RUN, run_id=RUN, contexts=[1024], concurrency=[2, 4],
                            duration_s=1.5, prefill_repeats=6, seed=3,
                            statuses={(1024, 4): contract.ERROR})
    _spoil_prefill(run)
    report = build_site(root / "data", root / "site", cache_dir=root / "cache")
    assert report.errors == []
    return root / "site"


def _page(site: Path, key: str) -> Node:
    return parse_html((site / "runs" / RUN / "cells" / f"{key}.html").read_text(encoding="utf-8"))


def _requests(site: Path) -> list[dict]:
    return pq.read_table(site.parent / "data" / RUN / contract.REQUESTS_FILE).to_pylist()


def _number(text: str) -> int:
    return int(re.match(r"[\d,]+", text.strip()).group(0).replace(",", ""))


def _counts(dl: Node) -> dict[str, tuple[str, str]]:
    """term name -> (what it counts, value) of a <dl>'s rows, each a linked term."""
    out = {}
    for div in dl.find_all("div"):
        dt, dd = div.find("dt"), div.find("dd")
        links = dt.find_all("a", "term")
        name = links[0].text() if links else dt.text()
        what = dt.find_all("span", "counts")
        out[name] = (what[0].text() if what else "", dd.text())
    return out


COUNT_TERMS = ["Requests sent", "Finished normally", "Completed requests",
               "Cancelled at window end", "Failed requests", "Produced a first token"]


def test_decode_counts_are_labelled_and_reconcile(site: Path) -> None:
    doc = _page(site, "decode-1024-2")
    head = _counts(doc.find("dl", "metrics"))
    rows = _counts(doc.find("dl", "facts-inline"))
    # Each count is a glossary term (hover text) and says what it counts.
    for name in COUNT_TERMS:
        assert name in rows, name
        assert rows[name][0] or name in ("Cancelled at window end",), name
    for dt in doc.find("dl", "facts-inline").find_all("dt"):
        if dt.find_all("a", "term"):
            assert dt.find("a", "term").attrs["title"]
    assert head["Completed requests"][0] == "(ended inside the window)"
    assert rows["Requests sent"][0] == "(warm-up and window)"
    n = {k: _number(v[1]) for k, v in rows.items() if k in COUNT_TERMS}
    # The header's Completed requests is the in-window subset of Finished normally.
    assert _number(head["Completed requests"][1]) == n["Completed requests"] <= n["Finished normally"]
    assert n["Requests sent"] == n["Finished normally"] + n["Cancelled at window end"] + n[
        "Failed requests"]
    # ... and they are the raw data's counts.
    mine = [r for r in _requests(site) if r["purpose"] == contract.PURPOSE_MEASURE
            and r["context"] == 1024 and r["concurrency"] == 2]
    assert n["Requests sent"] == len(mine)
    assert n["Cancelled at window end"] == sum(r["cancelled"] for r in mine) > 0
    assert n["Finished normally"] == sum(r["finish_reason"] is not None for r in mine)
    # The TTFT histogram says which requests it holds: the Produced a first token ones.
    caption = doc.find("figure", id="chart-ttft").find("figcaption").text()
    assert f"each of the {n['Produced a first token']} requests that produced a token" in caption
    assert n["Produced a first token"] == sum(any(t > 0 for t in r["chunk_tokens"]) for r in mine)


def test_error_cell_counts_add_up(site: Path) -> None:
    rows = _counts(_page(site, "decode-1024-4").find("dl", "facts-inline"))
    n = {k: _number(v[1]) for k, v in rows.items() if k in COUNT_TERMS}
    assert n["Failed requests"] >= 1
    assert n["Requests sent"] == n["Finished normally"] + n["Cancelled at window end"] + n[
        "Failed requests"]


def test_prefill_rejected_samples_are_marked(site: Path) -> None:
    doc = _page(site, "prefill-1024-1")
    table = doc.find("table", "samples")
    body = table.find("tbody").rows()
    marks = [r[1] for r in body]
    assert marks == ["Rejected: prefix-cache hit"] * 2 + [
        "Not used: failed", "Used", "Used", "Used"]
    assert [r[0] for r in body] == ["1", "2", "3", "4", "5", "6"]
    assert "3 of 6 samples marked Used" in doc.find("p", "samples-used").text()
    # The published figure is the median of exactly the rows marked Used.
    head = _counts(doc.find("dl", "metrics"))
    assert head["Completed requests"] == ("(cold samples used)", "3")
    samples = [r for r in _requests(site) if r["purpose"] == contract.PURPOSE_PREFILL
               and r["context"] == 1024]
    ttft = [(next(t for t, k in zip(r["chunk_ns"], r["chunk_tokens"], strict=True) if k > 0)
             - r["send_ns"]) / 1e6 for r in samples]
    used = [t for t, mark in zip(ttft, marks, strict=True) if mark == "Used"]
    assert head["TTFT"][1] == words.ttft(statistics.median(used)) != words.ttft(statistics.median(ttft))
    assert [r[5] for r in body] == [words.ttft(t) for t in ttft]


def test_prefill_counts_do_not_count_a_failure_as_finished(site: Path) -> None:
    """A rejected or failed sample the server also gave a finish reason was counted
    both Finished and Failed ("Finished 6 / Failed 3 / Requests 6")."""
    rows = _counts(_page(site, "prefill-1024-1").find("dl", "facts-inline"))
    n = {k: _number(v[1]) for k, v in rows.items() if v[1][:1].isdigit()}
    assert n["Requests sent"] == 6
    assert rows["Finished normally"] == ("(any time)", "3 (length: 3)")
    assert n["Rejected samples"] == 2
    assert n["Failed requests"] == 1
    assert n["Samples used"] == 3
    assert "Ended without a finish reason" not in n


def test_every_cell_table_scrolls_in_its_own_box(site: Path) -> None:
    pages = sorted((site / "runs" / RUN / "cells").glob("*.html"))
    assert pages and any(p.name.startswith("prefill") for p in pages)
    seen = 0
    for page in pages:
        doc = parse_html(page.read_text(encoding="utf-8"))
        for box in doc.find_all("div", "table-scroll"):
            assert box.attrs.get("role") == "region" and box.attrs.get("tabindex") == "0"
            assert box.attrs.get("aria-label")
        wrapped = [t for box in doc.find_all("div", "table-scroll") for t in box.find_all("table")]
        tables = doc.find_all("table")
        assert len(wrapped) == len(tables), page.name
        seen += len(tables)
    assert seen
    table = _page(site, "prefill-1024-1").find("table", "samples")
    assert "sticky-first" in table.attrs["class"].split()
