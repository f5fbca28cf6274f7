"""Published figures that moved without a word (issue 30, items 6 and 7), through
`build-site` as a user runs it:

- a hand-edited windows.parquet (the last window deleted, one shrunk to 1 ms)
  is refused in one line naming the file, the cell and what was expected;
- rows taken out of (or added to) requests.parquet no longer publish a cell
  Valid at another rate: the builder re-checks the stored status against the
  cell's own rows (every stream slot, average active against C, failures);
- a run edited after its collector sealed it (manifest.json) is refused in
  one line, or published marked as edited with --allow-edited; a run
  without a manifest (written before them) builds as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from click.testing import CliRunner

from rundir import contract, manifest, words
from rundir.io import read_table, write_table
from rundir.windows import split_span
from site_builder import load
from site_builder.cli import main
from tests.support.synthetic_runs import make_measured_run

S = 1_000_000_000


def _build(data: Path, out: Path, *extra: str):
    return CliRunner().invoke(main, ["--data", str(data), "--out", str(out), "--quiet", *extra])


def _errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def _cells(site: Path, slug: str) -> dict[str, dict[str, Any]]:
    data = json.loads((site / "runs" / slug / "cells.json").read_text(encoding="utf-8"))
    return {f"{c['phase']}-{c['context']}-{c['concurrency']}": c for c in data["cells"]}


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for top, _dirs, files in os.walk(root):
        for name in files:
            p = Path(top) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# --------------------------------------------------------------------------
# item 6: windows.parquet must be the windows the collector cut
# --------------------------------------------------------------------------


def repeated_run(data: Path, name: str, k: int = 3, span_s: float = 3.0, seed: int = 0) -> Path:
    """A run measured with `--repeats k`: each decode cell's span cut into windows of
    duration_s = span / k exactly as the collector cuts them (rundir.windows.split_span)."""
    path = make_measured_run(data / name, run_id=name, contexts=[1024], concurrency=[1, 2],
                             duration_s=span_s, seed=seed, prefill_contexts=[],
                             info={"parameters": {"repeats": k, "duration_s": span_s / k}})
    step = int(span_s / k * 1e9)
    rows = []
    for cell in read_table(path, contract.CELLS_FILE).to_pylist():
        if cell["phase"] != contract.DECODE or cell["window_start_ns"] is None:
            continue
        for i, (s, e) in enumerate(split_span(cell["window_start_ns"], cell["window_end_ns"], k,
                                              step)):
            rows.append(dict(phase=cell["phase"], context=cell["context"],
                             concurrency=cell["concurrency"], window=i, start_ns=s, end_ns=e))
    write_table(path, contract.WINDOWS_FILE, pa.Table.from_pylist(rows, contract.WINDOWS_SCHEMA))
    return path


def _edit_windows(path: Path, edit) -> None:
    rows = read_table(path, contract.WINDOWS_FILE).to_pylist()
    write_table(path, contract.WINDOWS_FILE,
                pa.Table.from_pylist(edit(rows), contract.WINDOWS_SCHEMA))


def _is_cell(row: dict, concurrency: int) -> bool:
    return row["concurrency"] == concurrency


def test_collector_cut_windows_publish_a_median_over_them(tmp_path: Path) -> None:
    repeated_run(tmp_path / "data", "rep")
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "site", "rep")["decode-1024-2"]
    assert cell["status"] == "valid" and cell["windows"] == 3
    assert cell["total_tok_s_ci95_lo"] is not None


def test_deleted_last_window_is_refused_in_one_line_subprocess(cli, tmp_path: Path) -> None:
    """The issue: the last window of 1K×2 deleted by hand moved the published
    median (120.5 -> 130.0) and the build said nothing, exit 0."""
    path = repeated_run(tmp_path / "data", "rep")
    _edit_windows(path, lambda rows: [r for r in rows if not (_is_cell(r, 2) and r["window"] == 2)])
    res = cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert _errors(res.stderr) == [
        "error: data/rep/windows.parquet: column window: cell (decode, 1024, 2) has 2 windows, "
        "expected 3: 3 × 1 s (run.yaml parameters.repeats × duration_s) back to back from its "
        "window_start_ns, the last cut at its window_end_ns, as the collector cuts them"]


def test_window_shrunk_to_1_ms_is_refused_in_one_line(tmp_path: Path) -> None:
    """The issue: one window shrunk to 1 ms published 96.5 with an interval from 0.0."""
    path = repeated_run(tmp_path / "data", "rep")

    def shrink(rows: list[dict]) -> list[dict]:
        for r in rows:
            if _is_cell(r, 2) and r["window"] == 1:
                r["end_ns"] = r["start_ns"] + 1_000_000
        return rows
    _edit_windows(path, shrink)
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 1
    assert _errors(res.output) == [
        f"error: {path / contract.WINDOWS_FILE}: columns start_ns, end_ns: cell (decode, 1024, 2) "
        "window 1 spans 1.0–1.001 s of the cell's window, expected 1.0–2.0 s: 3 × 1 s (run.yaml "
        "parameters.repeats × duration_s) back to back from its window_start_ns, the last cut "
        "at its window_end_ns, as the collector cuts them"]


def test_a_boundary_moved_between_two_windows_is_refused(tmp_path: Path) -> None:
    """Windows that still tile the cell but are not the planned duration."""
    path = repeated_run(tmp_path / "data", "rep")

    def move(rows: list[dict]) -> list[dict]:
        for r in rows:
            if _is_cell(r, 1) and r["window"] == 0:
                r["end_ns"] -= S // 2
            if _is_cell(r, 1) and r["window"] == 1:
                r["start_ns"] -= S // 2
        return rows
    _edit_windows(path, move)
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 1
    (line,) = _errors(res.output)
    assert "cell (decode, 1024, 1) window 0 spans 0.0–0.5 s of the cell's window, expected " \
           "0.0–1.0 s" in line


# --------------------------------------------------------------------------
# item 7a: the stored status against the cell's own rows
# --------------------------------------------------------------------------


def _run(data: Path, name: str = "r", **kw: Any) -> Path:
    return make_measured_run(data / name, run_id=name, contexts=[1024], concurrency=[1, 2],
                             duration_s=2.0, **kw)


def _edit_requests(path: Path, edit) -> None:
    table = read_table(path, contract.REQUESTS_FILE)
    write_table(path, contract.REQUESTS_FILE, edit(table))


def _stream(table: pa.Table, concurrency: int, slot: int) -> pa.ChunkedArray:
    """Mask of the measure requests of one stream slot of the decode cell."""
    return pc.and_(pc.and_(pc.equal(table["concurrency"], concurrency),
                           pc.equal(table["stream_index"], slot)),
                   pc.equal(table["purpose"], contract.PURPOSE_MEASURE))


STORED_VALID = ("(found by the site builder's re-check of the raw data, stored as Valid by the "
                "collector)")


def test_one_streams_rows_deleted_is_an_error_not_half_the_rate_subprocess(
        cli, tmp_path: Path) -> None:
    """The issue: stream 1's rows deleted from a concurrency-2 cell published it
    Valid at half its rate (139.8 -> 70.0 tok/s) with average active 1.0, exit 0."""
    path = _run(tmp_path / "data")
    assert _build(tmp_path / "data", tmp_path / "before").exit_code == 0
    before = _cells(tmp_path / "before", "r")["decode-1024-2"]
    assert before["status"] == "valid" and before["avg_active"] > 1.9
    _edit_requests(path, lambda t: t.filter(pc.invert(_stream(t, 2, 1))))
    res = cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    cell = _cells(tmp_path / "site", "r")["decode-1024-2"]
    assert cell["status"] == "error" and cell["total_tok_s"] is None
    assert cell["reason"] == ("requests missing for stream 1 of 2: none of its requests in "
                              f"requests.parquet spans the window {STORED_VALID}")
    assert _cells(tmp_path / "site", "r")["decode-1024-1"] == \
        _cells(tmp_path / "before", "r")["decode-1024-1"]  # the other cell as before
    page = (tmp_path / "site" / "runs" / "r" / "index.html").read_text(encoding="utf-8")
    assert "a stream&#39;s requests are missing from the raw data" in page or \
        "a stream's requests are missing from the raw data" in page  # the Error legend


def test_one_stream_thinned_in_the_window_is_requests_queued(tmp_path: Path) -> None:
    """Every slot still has requests, but stream 1's after mid-window are gone:
    average active 1.4 < 0.95 × 2, which the collector calls Requests queued."""
    path = _run(tmp_path / "data")
    row = next(r for r in read_table(path, contract.CELLS_FILE).to_pylist()
               if r["phase"] == contract.DECODE and r["concurrency"] == 2)
    mid = (row["window_start_ns"] + row["window_end_ns"]) // 2
    _edit_requests(path, lambda t: t.filter(pc.invert(
        pc.and_(_stream(t, 2, 1), pc.greater(t["end_ns"], mid)))))
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "site", "r")["decode-1024-2"]
    assert cell["status"] == "requests_queued" and cell["total_tok_s"] is not None
    assert cell["reason"].startswith("average active 1.4") and \
        cell["reason"].endswith(f"< 0.95 × 2 {STORED_VALID}")


def test_a_stream_copied_into_the_cell_is_an_error(tmp_path: Path) -> None:
    """Rows added (stream 0's requests copied under new ids): three requests at once
    in a cell of two would publish a total half again too high."""
    path = _run(tmp_path / "data")

    def copy(table: pa.Table) -> pa.Table:
        rows = table.filter(_stream(table, 2, 0)).to_pylist()
        for r in rows:
            r["request_id"] += "-copy"
        return pa.concat_tables([table, pa.Table.from_pylist(rows, schema=table.schema)])
    _edit_requests(path, copy)
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "site", "r")["decode-1024-2"]
    assert cell["status"] == "error" and cell["total_tok_s"] is None
    assert cell["reason"] == ("average active 3.00 > 2: more requests ran at once than the "
                              f"cell sent {STORED_VALID}")


def test_a_failed_request_in_a_cell_stored_valid_is_an_error(tmp_path: Path) -> None:
    """Any failed stream makes the collector's cell an Error: a Valid one holding
    one (its status edited by hand) is published as the collector would."""
    path = _run(tmp_path / "data")

    def fail_one(table: pa.Table) -> pa.Table:
        rows = table.to_pylist()
        hit = next(r for r in rows if r["concurrency"] == 2 and r["purpose"] == "measure")
        hit.update(error="stream closed: server returned HTTP 500", finish_reason=None)
        return pa.Table.from_pylist(rows, schema=table.schema)
    _edit_requests(path, fail_one)
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "site", "r")["decode-1024-2"]
    assert cell["status"] == "error" and cell["total_tok_s"] is None
    assert cell["reason"] == f"stream closed: server returned HTTP 500 {STORED_VALID}"


def test_the_collectors_own_cells_pass_the_re_check(tmp_path: Path) -> None:
    """Untouched runs (gauges or not, queued or not) publish their stored statuses."""
    _run(tmp_path / "data", "plain")
    _run(tmp_path / "data", "queued", statuses={(1024, 2): contract.REQUESTS_QUEUED}, seed=1)
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output
    assert {k: c["status"] for k, c in _cells(tmp_path / "site", "plain").items()} == {
        "prefill-1024-1": "valid", "decode-1024-1": "valid", "decode-1024-2": "valid"}
    queued = _cells(tmp_path / "site", "queued")["decode-1024-2"]
    assert queued["status"] == "requests_queued" and "re-check" not in (queued["reason"] or "")


def test_the_error_legend_names_the_new_causes() -> None:
    assert words.error_cause(f"requests missing for stream 1 of 2: … {STORED_VALID}") == \
        "a stream's requests are missing from the raw data"
    assert words.error_cause("average active 3.00 > 2: more requests ran at once than the "
                             "cell sent") == "the raw data holds requests the cell did not send"


# --------------------------------------------------------------------------
# item 7b: manifest.json, edited after measurement
# --------------------------------------------------------------------------


def _sealed(data: Path, name: str = "r", **kw: Any) -> Path:
    """A run as the collector leaves it: its files, then manifest.json."""
    path = _run(data, name, **kw)
    manifest.seal(path)
    return path


EDITED = ("error: data/r/requests.parquet: edited after measurement (sha256 differs from "
          "manifest.json); --allow-edited publishes it marked as edited after measurement")


def _delete_stream(path: Path) -> None:
    _edit_requests(path, lambda t: t.filter(pc.invert(_stream(t, 2, 1))))


def test_an_edited_file_is_refused_in_one_line_subprocess(cli, tmp_path: Path) -> None:
    _sealed(tmp_path / "data", "good", seed=1)
    path = _sealed(tmp_path / "data")
    _delete_stream(path)
    res = cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert _errors(res.stderr) == [EDITED]
    assert (tmp_path / "site" / "runs" / "good" / "index.html").is_file()  # the others publish
    assert not (tmp_path / "site" / "runs" / "r").exists()


def test_allow_edited_publishes_the_run_saying_so(cli, tmp_path: Path) -> None:
    path = _sealed(tmp_path / "data")
    _delete_stream(path)
    res = cli("build-site", "--data", "data", "--out", "site", "--allow-edited", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "site" / "runs" / "r" / "index.html").read_text(encoding="utf-8")
    assert "<strong>Edited after measurement.</strong>" in page
    assert "<code>requests.parquet</code>: sha256 differs from manifest.json" in page
    info = json.loads((tmp_path / "site" / "runs" / "r" / "cells.json").read_text())["run"]["info"]
    assert info["notes"].startswith("**Edited after measurement.**")
    # the figures are still the builder's own re-check of what the files hold now
    assert _cells(tmp_path / "site", "r")["decode-1024-2"]["status"] == "error"


def test_the_flag_does_not_outlive_its_build(tmp_path: Path) -> None:
    """Aggregates and digests are cached by the run's bytes: a build with the flag
    must not let the next one, without it, publish the edited run from the cache."""
    path = _sealed(tmp_path / "data")
    _delete_stream(path)
    data, site = tmp_path / "data", tmp_path / "site"
    assert _build(data, site, "--allow-edited").exit_code == 0
    again = _build(data, site, "--allow-edited")
    assert again.exit_code == 0
    page = (site / "runs" / "r" / "index.html").read_text(encoding="utf-8")
    assert "Edited after measurement." in page  # from the cache, still marked
    res = _build(data, site)
    assert res.exit_code == 1
    assert _errors(res.output) == [EDITED.replace("data/r", str(path))]
    assert _build(data, site, "--allow-edited").exit_code == 0


def test_an_edited_run_is_marked_when_its_aggregate_comes_from_the_cache(tmp_path: Path) -> None:
    """discover() keeps what it found (edited files) for a cached run's run.yaml."""
    path = _sealed(tmp_path / "data")
    (path / contract.SERVER_METRICS_FILE).unlink()
    (src,) = load.discover(tmp_path / "data", known={}, allow_edited=True)
    assert src.problem is None and [e.name for e in src.edited] == ["server_metrics.parquet"]
    assert load.load_info(src).notes.startswith("**Edited after measurement.** ")
    assert "`server_metrics.parquet`: deleted: listed in manifest.json" in load.load_info(src).notes
    (src,) = load.discover(tmp_path / "data", known={})
    assert src.problem == (f"{path / 'server_metrics.parquet'}: edited after measurement "
                           "(deleted: listed in manifest.json); --allow-edited publishes it "
                           "marked as edited after measurement")


def test_a_crafted_cache_entry_is_not_trusted(tmp_path: Path) -> None:
    """The build cache files each run's verdict by its files' signature: an entry
    whose digest could name a path, or whose edits are not pairs of text, is read
    again from the files."""
    path = _sealed(tmp_path / "data")
    sig = load.file_signature(path, "salt")
    for entry in ([sig, "../../victim", []], [sig, "0" * 64, "no"], [sig, "0" * 64, [[1, 2]]]):
        known = {str(path): entry}
        (src,) = load.discover(tmp_path / "data", salt="salt", known=known)
        assert src.digest == load.content_digest(path, "salt") and src.problem is None
        assert known[str(path)] == [sig, src.digest, []]


def test_a_sealed_run_publishes_what_it_did_without_a_manifest(tmp_path: Path) -> None:
    """The manifest changes nothing published: not a page, not a download."""
    _run(tmp_path / "plain", "r")
    _sealed(tmp_path / "sealed", "r")
    assert _build(tmp_path / "plain", tmp_path / "site-plain").exit_code == 0
    assert _build(tmp_path / "sealed", tmp_path / "site-sealed").exit_code == 0
    assert _tree(tmp_path / "site-plain") == _tree(tmp_path / "site-sealed")


def test_files_added_or_deleted_after_the_seal_are_edits(tmp_path: Path) -> None:
    path = _sealed(tmp_path / "data")
    shrunk = read_table(path, contract.SERVER_METRICS_FILE)
    write_table(path, contract.SERVER_METRICS_FILE, shrunk.slice(0, 0))
    write_table(path, contract.GPU_METRICS_FILE, read_table(path, contract.GPU_METRICS_FILE,
                                                            required=False))
    res = _build(tmp_path / "data", tmp_path / "site")
    assert _errors(res.output) == [
        f"error: {path / contract.SERVER_METRICS_FILE}: edited after measurement (sha256 "
        "differs from manifest.json) (and 1 more file); --allow-edited publishes it marked as "
        "edited after measurement"]
    assert [(e.name, e.what) for e in manifest.check(path)] == [
        ("server_metrics.parquet", "sha256 differs from manifest.json"),
        ("gpu_metrics.parquet", "added: not listed in manifest.json")]


def test_a_manifest_that_is_not_one_refuses_the_run(tmp_path: Path) -> None:
    path = _sealed(tmp_path / "data")
    (path / manifest.MANIFEST_FILE).write_text("{not json")
    res = _build(tmp_path / "data", tmp_path / "site")
    assert _errors(res.output) == [
        f"error: {path / manifest.MANIFEST_FILE}: edited after measurement (not valid JSON); "
        "--allow-edited publishes it marked as edited after measurement"]


def test_runs_without_a_manifest_build_as_before(tmp_path: Path) -> None:
    """Written before manifests existed: nothing to compare, nothing refused."""
    path = _run(tmp_path / "data")
    assert not (path / manifest.MANIFEST_FILE).exists()
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output
    page = (tmp_path / "site" / "runs" / "r" / "index.html").read_text(encoding="utf-8")
    assert "Edited after measurement" not in page
