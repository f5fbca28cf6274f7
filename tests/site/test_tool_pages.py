"""The comparison page of one server measured by two tools (site_builder/toolpages.py): a
run of ours and a hand-written `vllm bench serve` import of the same setup, built into a site."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from rundir import contract
from rundir.io import write_run_info, write_table
from site_builder import toolpages
from site_builder.publish import build_site
from tests.support.synthetic_runs import MS, T0, make_measured_run, run_info

CTX, CONC = 1024, 2


def _imported(path: Path, tool: str = "vllm-bench-serve", tier: str = "gap",
              published: list[dict] | None = None, ctx: int = CTX, no_clock: bool = False) -> Path:
    """Ten requests on two streams, sent 100 ms apart: TTFT 30 ms, then four chunks of
    two tokens 10 ms apart (10 tokens), ended 1 ms after the last; window 100–400 ms.
    Tier "request": only the first (1 token) and last chunk (10) are kept."""
    rows = []
    for j in range(5):
        for s in range(2):
            send = 0 if no_clock else T0 + (j * 100 + s * 3) * MS
            rows.append({"phase": contract.DECODE, "context": ctx, "concurrency": CONC,
                         "request_id": f"r{j}-{s}", "purpose": contract.PURPOSE_MEASURE,
                         "stream_index": s, "send_ns": send, "end_ns": send + 71 * MS,
                         "prompt_tokens": ctx, "cancelled": False, "finish_reason": "length",
                         "chunk_ns": [send + (30 + 10 * k) * MS for k in range(5)],
                         "chunk_tokens": [2 * (k + 1) for k in range(5)]})
            if tier == "request":
                rows[-1] |= {"chunk_ns": [send + 30 * MS, send + 70 * MS], "chunk_tokens": [1, 10]}
    cells = [{"phase": contract.DECODE, "context": ctx, "concurrency": CONC, "status": contract.VALID,
              "window_start_ns": T0 + 100 * MS, "window_end_ns": T0 + 400 * MS,
              "token_counting": contract.COUNT_USAGE_CONTINUOUS, "client_bound": False}]
    published = published or [{"name": "itl_ms.p50", "value": 10.0}, {"name": "ttft_ms.p50", "value": 30.0},
                 {"name": "total_tok_s", "value": 200.0}, {"name": "duration_s", "value": 0.5},
                 {"name": "completed", "value": 10.0},
                 {"name": "output_tokens", "value": 101.0}]
    info = run_info("peer-vllm", source=contract.SOURCE_IMPORTED, info={
        "parameters": {"contexts": [ctx], "concurrency": [CONC], "prefill_contexts": []},
        "imported": {"source_file": "vllm.json", "format": "vllm-bench-serve", "tool": tool,
                     "tool_version": "0.32.0", "tier": tier, "published": published,
                     "definitions": [{"name": "itl_ms", "text": "every gap between chunks"}]}})
    path.mkdir(parents=True)
    write_run_info(path, info)
    write_table(path, contract.CELLS_FILE, pa.Table.from_pylist(
        [{f.name: c.get(f.name) for f in contract.CELLS_SCHEMA} for c in cells], contract.CELLS_SCHEMA))
    write_table(path, contract.REQUESTS_FILE, pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in contract.REQUESTS_SCHEMA} for r in rows],
        contract.REQUESTS_SCHEMA))
    return path


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _row(page: str, label: str) -> str:
    m = re.search(r"<tr><th scope=\"row\">" + re.escape(label) + r"</th>(.*?)</tr>", page)
    assert m, label
    return _text(m.group(1)).strip()


def test_two_tools_get_a_comparison_page_with_recomputed_and_published_figures(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    make_measured_run(data / "ours", run_id="ours", contexts=[CTX], concurrency=[CONC],
                      prefill_contexts=[])
    _imported(data / "peer")
    report = build_site(data, out, jobs=0)
    assert report.errors == []
    (page_path,) = (out / "tools").glob("*.html")
    page = page_path.read_text()
    assert "speed-matrix" in page and "vllm-bench-serve" in page
    # the peer's columns (whole run, window) follow ours: TTFT 30 ms; TPOT 40/9; ITL per token 5
    assert _row(page, "TTFT (ms) p50").split()[-2:] == ["30.00", "30.00"]
    assert _row(page, "TPOT (ms) p50").split()[-2:] == ["4.44", "4.44"]
    assert _row(page, "ITL per token (ms) p50").split()[-2:] == ["5.00", "5.00"]
    assert _row(page, "Total tok/s").split()[-2:] == ["210.97", "200.00"]  # 100 / 0.474 s; 60 / 0.3 s
    assert _row(page, "Completed requests").split()[-2:] == ["10", "6"]
    # its own figures: ITL per chunk is its definition (10 ms), ours per token reads half
    itl = _row(page, "ITL (per chunk) p50")
    assert itl.startswith("10.00 10.00 5.00 5.00 Definition:") and "-50.0%" in itl
    assert "Same definition" in _row(page, "TTFT p50")
    assert "Counting: it published 101, its rows hold 100." in _text(page)
    assert ("Span: its rows' 100 tokens over its own span (0.5 s) give its figure; over first send → "
            "last end (0.474 s) they read +5.5% from it. Window: over the steady window ours reads "
            "-5.2% from the whole run") in _text(page)
    assert "every gap between chunks" in page
    # the runs link to it, and the compare page lists it
    rel = page_path.relative_to(out).as_posix()
    for slug in ("ours", "peer-vllm"):
        assert f'href="../../{rel}"' in (out / "runs" / slug / "index.html").read_text()
    assert f'href="{rel}"' in (out / "compare.html").read_text()


def test_one_tool_only_writes_no_comparison(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    make_measured_run(data / "ours", run_id="ours", contexts=[CTX], concurrency=[CONC],
                      prefill_contexts=[])
    _imported(data / "peer", tool="")  # an import without a tool: a published page's
    assert build_site(data, out, jobs=0).errors == []
    assert not (out / "tools").exists()
    assert "tool-compare-link" not in (out / "runs" / "ours" / "index.html").read_text()
    assert "One server, several tools" not in (out / "compare.html").read_text()


def test_request_tier_shows_no_itl_of_ours_and_guidellm_tpot_with_its_ttft(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    make_measured_run(data / "ours", run_id="ours", contexts=[CTX], concurrency=[CONC],
                      prefill_contexts=[])
    # guidellm: TPOT = (last − send) / tokens = 70 / 10 = 7 ms; its ITL (first to last) 40 / 9
    _imported(data / "peer", tool="guidellm", tier="request",
              published=[{"name": "tpot_ms.p50", "value": 7.0}, {"name": "itl_ms.p50", "value": 4.444}])
    assert build_site(data, out, jobs=0).errors == []
    (page_path,) = (out / "tools").glob("*.html")
    page = page_path.read_text()
    assert _row(page, "ITL per token (ms) p50").split()[-2:] == ["—", "—"]  # no gap kept at this tier
    assert _row(page, "TPOT (ms) p50").split()[-2:] == ["4.44", "4.44"]  # first and last are kept
    tpot = _row(page, "TPOT (with the TTFT) p50")
    assert tpot.startswith("7.00 7.00 4.44 4.44 Definition:") and "includes the TTFT" in tpot
    assert _row(page, "ITL (per request) p50").startswith(  # ours: none at this tier
        "4.44 4.44 — — Definition: its rows give its figure under its own definition (per request (last")


def test_a_run_that_becomes_a_tools_run_re_renders_the_cached_run_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    make_measured_run(data / "ours", run_id="ours", contexts=[CTX], concurrency=[CONC],
                      prefill_contexts=[])
    _imported(data / "peer", tool="")  # no tool: no comparison (its series links are the same after)
    assert build_site(data, out, jobs=0).errors == []
    assert "tool-compare-link" not in (out / "runs" / "ours" / "index.html").read_text()
    shutil.rmtree(data / "peer")
    _imported(data / "peer")
    assert build_site(data, out, jobs=0).errors == []
    assert "tool-compare-link" in (out / "runs" / "ours" / "index.html").read_text()
    calls = []
    real = toolpages.sections
    monkeypatch.setattr(toolpages, "sections", lambda g: calls.append(g) or real(g))
    make_measured_run(data / "other", run_id="other", contexts=[CTX], concurrency=[CONC],
                      prefill_contexts=[], info={"model": {"name": "Other-7B", "served_name": "o"}})
    assert build_site(data, out, jobs=0).errors == []  # another setup: the group's rows not read again
    assert calls == []
    assert (out / "runs" / "other" / "index.html").exists()


def test_runs_are_grouped_by_load_alone_and_show_their_inputs(tmp_path: Path) -> None:
    """A tool's input length is in its own tokenizer's count: never our context. Ours has two
    contexts at this load: the column is the one nearest the tool's input."""
    data, out = tmp_path / "data", tmp_path / "site"
    make_measured_run(data / "ours", run_id="ours", contexts=[256, CTX], concurrency=[CONC],
                      prefill_contexts=[])
    _imported(data / "peer", ctx=1300)
    assert build_site(data, out, jobs=0).errors == []
    (page_path,) = (out / "tools").glob("*.html")
    page = page_path.read_text()
    assert page.count('class="tool-point"') == 1 and "2 requests at once" in page
    assert _row(page, "Input: context · median prompt tokens").split() == ["1,024", "·", "1,024", "1,300",
                                                                           "·", "1,300"]
    assert "The inputs differ by more than 10%" in page
    shutil.rmtree(data / "peer")
    _imported(data / "peer", ctx=1100)  # within 10%: nothing to call out
    assert build_site(data, out, jobs=0).errors == []
    assert "The inputs differ" not in (out / page_path.relative_to(out)).read_text()


def test_rows_without_send_times_show_no_span_and_say_why(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    make_measured_run(data / "ours", run_id="ours", contexts=[CTX], concurrency=[CONC],
                      prefill_contexts=[])
    _imported(data / "peer", tool="sglang-bench-serving", no_clock=True,
              published=[{"name": "ttft_ms.p50", "value": 30.0}, {"name": "e2e_ms.p50", "value": 75.0},
                         {"name": "total_tok_s", "value": 200.0}, {"name": "duration_s", "value": 0.5}])
    assert build_site(data, out, jobs=0).errors == []
    (page_path,) = (out / "tools").glob("*.html")
    page = page_path.read_text()
    assert _row(page, "Total tok/s").split()[-2:] == ["—", "—"]
    assert _row(page, "TTFT (ms) p50").split()[-2:] == ["30.00", "—"]  # per request: its own send
    assert "— in the totals of sglang-bench-serving: its file keeps no send times" in _text(page)
    assert "Same definition" in _row(page, "TTFT p50")
    assert _row(page, "E2E p50").split("— ")[-1].strip().startswith(
        "Its definition cannot be recomputed from its rows: send to [DONE]")
    rows = re.findall(r'<tr><th scope="row">Total tok/s</th>(.*?)</tr>', page)
    assert "its rows share no clock" in _text(rows[-1])  # its own table: over its own span only
