"""The bundled site publishes what the collector measured, and its Error
legend says what the Error cells' reasons say.

The site builder re-runs the collector's decode checks (rundir/decode_checks.py)
on the raw data. It may publish a cell as worse than the collector stored it
only with a reason naming the check that refused it; the bundled sample,
measured by the current collector (scripts/make_sample.sh), must need none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from rundir import contract, decode_checks, words
from rundir.contract import CELLS_FILE, REQUESTS_FILE, REQUESTS_SCHEMA
from rundir.io import read_run, write_table
from rundir.metrics import DecodeMetrics
from rundir.validate import RECHECK
from tests.conftest import run_cli
from tests.support.chromium import parse_html
from tests.support.synthetic_runs import MS, S, make_measured_run

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "llama-cpp-tiny-cpu"
# How far a published status is from the numbers the collector measured.
RANK = {contract.VALID: 0, contract.REQUESTS_QUEUED: 1}
CHECK_CAUSES = {cause for _markers, cause in words.ERROR_CAUSES}


def published_cells(site: Path) -> dict[str, list[dict[str, Any]]]:
    """run_id -> the cells of its page, from the run's cells.json download."""
    out = {}
    for path in (site / "runs").glob("*/cells.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        out[data["run"]["info"]["run_id"]] = data["cells"]
    return out


def names_a_check(reason: str | None) -> bool:
    """A builder's Error reason: the re-check, and a check the legend knows."""
    return bool(reason) and RECHECK in reason and words.error_cause(reason) in CHECK_CAUSES


@pytest.fixture(scope="module")
def bundled_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`build-site --data data --out <tmp>`, as the README's quick start does."""
    out = tmp_path_factory.mktemp("bundled") / "site"
    res = run_cli("build-site", "--data", str(REPO / "data"), "--out", str(out), "--quiet",
                  cwd=REPO)
    assert res.returncode == 0, res.stderr
    return out


def test_no_bundled_cell_is_published_worse_than_its_collector_stored_it(bundled_site: Path):
    published = published_cells(bundled_site)
    for run_dir in sorted(p.parent for p in (REPO / "data").glob("*/run.yaml")):
        stored = {(r["phase"], r["context"], r["concurrency"]): r
                  for r in read_run(run_dir).cells.to_pylist()}
        cells = published[read_run(run_dir).info.run_id]
        assert len(cells) == len(stored), run_dir.name
        for cell in cells:
            was = stored[(cell["phase"], cell["context"], cell["concurrency"])]["status"]
            worse = RANK.get(cell["status"], 9) > RANK.get(was, 9)
            assert not worse or names_a_check(cell["reason"]), (run_dir.name, was, cell)


def test_the_bundled_sample_shows_what_its_collector_measured(bundled_site: Path):
    """No Error, and every status as stored: the builder's checks find nothing
    the collector's did not (when a check changes, measure the sample again
    with scripts/make_sample.sh)."""
    stored = {(r["phase"], r["context"], r["concurrency"]): r
              for r in read_run(SAMPLE).cells.to_pylist()}
    cells = published_cells(bundled_site)[read_run(SAMPLE).info.run_id]
    assert [c["status"] for c in cells if c["status"] == contract.ERROR] == []
    for cell in cells:
        row = stored[(cell["phase"], cell["context"], cell["concurrency"])]
        assert (cell["status"], cell["reason"]) == (row["status"], row["reason"]), cell
        assert row["status"] in (contract.VALID, contract.REQUESTS_QUEUED), row
        assert cell["total_tok_s"] is not None, cell
    page = (bundled_site / "runs").glob("*/index.html")
    assert not any("Error:" in p.read_text(encoding="utf-8") for p in page)


# ---- a run with every kind of Error: what the pages say -------------------

CTX_HTTP, CTX_FROZEN, CTX_STUCK, CTX_UNKNOWN = 1024, 2048, 4096, 8192
FREEZE_AT_NS, FREEZE_NS = 500 * MS, 1500 * MS


def _edit_requests(run_dir: Path, edit) -> None:
    """Rewrite requests.parquet through edit(rows, windows), windows by context."""
    run = read_run(run_dir)
    windows = {r["context"]: (r["window_start_ns"], r["window_end_ns"])
               for r in run.cells.to_pylist() if r["phase"] == contract.DECODE}
    rows = edit(run.requests.to_pylist(), windows)
    cols = {f.name: [r[f.name] for r in rows] for f in REQUESTS_SCHEMA}
    write_table(run_dir, REQUESTS_FILE, pa.table(cols, schema=REQUESTS_SCHEMA))


def _freeze_server(rows: list[dict], windows: dict) -> list[dict]:
    """The whole server sends nothing for 1.5 s from 0.5 s into CTX_FROZEN's
    window, then resumes at its pace (no backlog: its own stall, not ours)."""
    at = windows[CTX_FROZEN][0] + FREEZE_AT_NS
    for r in rows:
        if r["context"] != CTX_FROZEN or r["purpose"] != contract.PURPOSE_MEASURE:
            continue
        r["chunk_ns"] = [t + FREEZE_NS if t > at else t for t in r["chunk_ns"]]
        r["send_ns"] += FREEZE_NS if r["send_ns"] > at else 0
        r["end_ns"] += FREEZE_NS if r["end_ns"] > at else 0
    return rows


def _stick_stream(rows: list[dict], windows: dict) -> list[dict]:
    """Stream 0 of CTX_STUCK and CTX_UNKNOWN gets stuck 0.3 s into the window
    and stays open to its end while stream 1 runs on: total tok/s falls to
    about half of per-request tok/s × the streams receiving tokens."""
    out = []
    for r in rows:
        ctx = r["context"]
        if (ctx not in (CTX_STUCK, CTX_UNKNOWN) or r["purpose"] != contract.PURPOSE_MEASURE
                or r["stream_index"] != 0):
            out.append(r)
            continue
        ws, we = windows[ctx]
        stuck = ws + 300 * MS
        if r["send_ns"] > stuck:
            continue  # never sent: the stream never got past the stuck request
        if r["end_ns"] > stuck:
            keep = [i for i, t in enumerate(r["chunk_ns"]) if t <= stuck]
            r["chunk_ns"] = [r["chunk_ns"][i] for i in keep]
            r["chunk_tokens"] = [r["chunk_tokens"][i] for i in keep]
            r.update(end_ns=we + 5 * MS, cancelled=True, finish_reason=None)
        out.append(r)
    return out


@pytest.fixture(scope="module")
def error_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One run stored all Valid but for a failed request (HTTP 500); the raw data
    holds a frozen server, a stuck stream, and the same stuck stream in a cell
    whose client-bound flag was never recorded (a collector older than it)."""
    root = tmp_path_factory.mktemp("errors")
    run_dir = make_measured_run(
        root / "data" / "errors", run_id="errors", duration_s=3.0, seed=3,
        contexts=[CTX_HTTP, CTX_FROZEN, CTX_STUCK, CTX_UNKNOWN], concurrency=[2],
        prefill_contexts=[], statuses={(CTX_HTTP, 2): contract.ERROR},
        error_text="HTTP 500: Internal Server Error")
    _edit_requests(run_dir, lambda rows, w: _stick_stream(_freeze_server(rows, w), w))
    cells = read_run(run_dir).cells
    flags = [None if c == CTX_UNKNOWN else False for c in cells.column("context").to_pylist()]
    i = cells.schema.get_field_index("client_bound")
    write_table(run_dir, CELLS_FILE, cells.set_column(i, "client_bound", pa.array(flags, pa.bool_())))
    res = run_cli("build-site", "--data", str(root / "data"), "--out", str(root / "site"),
                  "--quiet")
    assert res.returncode == 0, res.stderr
    return root / "site", next((root / "site" / "runs").iterdir())


def test_the_builder_refutes_a_stored_valid_naming_the_check(error_site):
    cells = {c["context"]: c for c in published_cells(error_site[0])["errors"]}
    assert cells[CTX_HTTP]["status"] == contract.ERROR
    assert cells[CTX_HTTP]["reason"] == "HTTP 500: Internal Server Error"
    for ctx, says in ((CTX_FROZEN, "the server stalled"), (CTX_STUCK, "inconsistent figures")):
        assert cells[ctx]["status"] == contract.ERROR and cells[ctx]["total_tok_s"] is None
        assert cells[ctx]["reason"].startswith(says), cells[ctx]
        assert names_a_check(cells[ctx]["reason"]) and "stored as Valid" in cells[ctx]["reason"]


def test_a_client_bound_flag_never_recorded_does_not_run_the_consistency_check(error_site):
    """The collector runs the consistency check only on a cell it knows it kept
    up with; the builder, not knowing, must not run it either."""
    cell = {c["context"]: c for c in published_cells(error_site[0])["errors"]}[CTX_UNKNOWN]
    assert cell["status"] == contract.VALID and cell["reason"] is None, cell
    assert cell["total_tok_s"] is not None


def test_the_error_legend_says_what_the_reasons_say(error_site):
    _site, run = error_site
    doc = parse_html((run / "index.html").read_text(encoding="utf-8"))
    notes = " ".join(p.text() for p in doc.find("section", id="decode").find_all("p", "status-notes"))
    assert ("Error: no numbers are shown because "
            "a request failed: HTTP 500 (1 cell); "
            "the server sent no token to any stream for too long inside the window (1 cell); "
            "total tok/s disagreed with per-request tok/s × the streams receiving tokens (1 cell). "
            "Each cell's page gives its full reason.") in notes, notes
    assert "during the measurement" not in notes
    page = parse_html((run / "cells" / f"decode-{CTX_FROZEN}-2.html").read_text(encoding="utf-8"))
    note = page.find("p", "note").text()
    assert note == ("Error: no numbers are shown because the server sent no token to any "
                    "stream for too long inside the window."), note


def test_a_legend_without_reasons_claims_no_cause():
    assert words.error_note([None, None]) == words.STATUS_NOTES[contract.ERROR]
    assert words.FAILED_REQUEST not in words.STATUS_NOTES[contract.ERROR]
    assert words.error_note(["HTTP 429: slow down", None], on_pages=False) == (
        "Error: no numbers are shown because a request failed: HTTP 429 (1 cell); "
        "no reason was recorded (1 cell).")


def _metrics(total: float, per_request: float | None, producing: float) -> DecodeMetrics:
    return DecodeMetrics(output_tokens=100, duration_s=1.0, total_tok_s=total,
                         per_request_tok_s=per_request, tbt_ms=None, ttft_ms=None,
                         completed=0, avg_active_client=producing)


@pytest.mark.parametrize("message", [
    decode_checks.consistency_problem(_metrics(10.0, 40.0, 1.0)),
    decode_checks.no_decode_problem(_metrics(10.0, None, 1.0)),
    decode_checks.length_problem(["length"], np.array([5]), np.array([True]), 100),
    decode_checks.counting_problem(contract.COUNT_CHUNKS_UNVERIFIED),
    "the server stalled: no token reached any stream for 2.5 s inside the window "
    "(from 1.2 s; limit 1.5 s)",
    "no tokens arrived during the measurement window",
    "the server reported inconsistent token counts: completion_tokens fell from 200 to 50",
    "server sends several tokens per chunk without per-chunk usage (547 chunks for 1024 "
    "tokens): token times unknown",
    "only 1 cold samples in 9 tries",
])
def test_every_check_message_has_its_own_legend_words(message: str | None) -> None:
    """A check's message must not be told as a failed request."""
    assert message
    cause = words.error_cause(message)
    assert cause in CHECK_CAUSES, (message, cause)


def test_the_stall_message_is_the_one_the_legend_knows() -> None:
    from tests.collector.test_trust import _chunks

    streams = [[(t * 10 * MS, t + 1) for t in range(50)] + [(3 * S + t * 10 * MS, 51 + t)
                                                             for t in range(50)]]
    found = decode_checks.stall_problem(_chunks(streams), 0, 4 * S)
    assert found and words.error_cause(found) == words.ERROR_CAUSES[0][1]


@pytest.mark.parametrize("error", ["HTTP 500: boom", "stream stalled: no bytes for 60.0 s",
                                   "malformed SSE event: not a JSON object",
                                   "cannot connect to 127.0.0.1:9 (Connection refused)",
                                   "prefix warm-up failed: HTTP 503: loading"])
def test_a_failed_request_is_told_as_one(error: str) -> None:
    assert words.error_cause(error).startswith(words.FAILED_REQUEST + ": ")
