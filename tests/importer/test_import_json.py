"""``bench import`` of llm-inference-bench JSON reports.

Why the checks are built this way: the reference for every figure on the run
page is the fixture read here with plain ``json.load`` and this file's own
reading of its fields (no importer code), compared with the built page's
tables to the precision the page prints. The three fixtures were written by
the tool (0.4.18) against a server with a known schedule; see
docs/import-llm-inference-bench.md.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from importer.cli import import_cmd
from rundir.io import read_run
from site_builder.publish import build_site
from tests.support.chromium import parse_html

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
FIXTURES = DATA / "llm-inference-bench"
NAMES = ["ref-1tok-c1-8.json", "ref-3tok-c1-8.json", "ref-queued-c4-8.json"]
SEED_PAGE = DATA / "seeds" / "qwen3.5-4b-bf16-rtxpro6000.txt"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def run_import(path: Path, out: Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(import_cmd, [str(path), "--out", str(out)])
    return res.exit_code, res.stdout, res.stderr


def import_ok(path: Path, out: Path) -> Path:
    code, stdout, stderr = run_import(path, out)
    assert code == 0, stderr
    return Path(stdout.strip())


def write_json(tmp: Path, data: object, name: str = "r.json") -> Path:
    path = tmp / name
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


# -- an independent reading of the page's printed numbers -----------------------


def shown(text: str) -> tuple[float, float] | None:
    """(value, half of the last printed digit) of a page figure; None for '—'."""
    if text == "—":
        return None
    text = text.removesuffix(" ms").removesuffix(" s").replace(",", "")
    scale = 1000.0 if text.endswith("K") else 1.0
    text = text.removesuffix("K")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text) * scale, 0.5 * 10.0 ** -decimals * scale + 1e-9


def close(text: str, want: float | None) -> bool:
    got = shown(text)
    if got is None or want is None:
        return got is None and want is None
    return abs(got[0] - want) <= got[1]


def label(context: int) -> str:
    return f"{context // 1024}K"


def expected_decode(r: dict) -> dict:
    """The test's own reading of one result of the tool (fields as the tool names them)."""
    queued = bool(r.get("capacity_limited"))
    return {
        "status": "Requests queued" if queued else "Valid",
        "total": r["aggregate_tps"],
        "per_request": r["per_request_avg_tps"],
        "ttft": r["ttft_p50"] * 1000,
        "tbt": r["inter_token_latency_p50"] * 1000,
        "active": r["effective_concurrency"],
        "completed": r["completed_request_count"],
        "output": r["client_output_tokens"],
        "measured": r["measurement_seconds"],
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("jsonsite")
    runs = {name: import_ok(FIXTURES / name, tmp / "data") for name in NAMES}
    report = build_site(tmp / "data", tmp / "site")
    assert report.errors == []
    assert sorted(report.published) == sorted(p.name for p in runs.values())
    pages = {
        name: parse_html((tmp / "site" / "runs" / p.name / "index.html").read_text(encoding="utf-8"))
        for name, p in runs.items()
    }
    return {"runs": runs, "pages": pages}


def test_fixtures_are_in_the_repo() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_run_page_equals_the_json_cell_by_cell(site: dict, name: str) -> None:
    data = load(name)
    doc = site["pages"][name]
    rows = doc.find("table", "measurements").rows()
    body = [r for r in rows[1:] if r[0] == "Sustained decode"]
    prefill = [r for r in rows[1:] if r[0] == "Prefill"]
    results = {(r["context_tokens"], r["concurrency"]): r for r in data["results"]}
    planned = [(x, c) for x in data["metadata"]["context_lengths"]
               for c in data["metadata"]["concurrency_levels"]]
    assert [(r[1], int(r[2])) for r in body] == [(label(x), c) for x, c in planned]
    for row in body:
        key = next(k for k in planned if (label(k[0]), k[1]) == (row[1], int(row[2])))
        want = expected_decode(results[key])
        assert row[3] == want["status"], (name, key)
        for col, field in zip(range(4, 12), ("total", "per_request", "ttft", "tbt", "active",
                                             "completed", "output", "measured"), strict=True):
            assert close(row[col], want[field]), (name, key, field, row[col], want[field])

    # The matrix shows the same totals and statuses, context by C.
    table = doc.find("table", "matrix")
    levels = data["metadata"]["concurrency_levels"]
    assert table.rows()[0] == ["Context", *map(str, levels)]
    for tr in table.find("tbody").find_all("tr"):
        ctx = next(x for x in data["metadata"]["context_lengths"] if label(x) == tr.find("th").text())
        for c, td in zip(levels, tr.find_all("td"), strict=True):
            r = results[(ctx, c)]
            assert close(td.find("span", "tok").text(), r["aggregate_tps"]), (name, ctx, c)
            assert close(td.find("span", "ttft").text().removesuffix(" TTFT"), r["ttft_p50"] * 1000)
            status = [s.text() for s in td.find_all("span", "status")]
            assert status == (["Requests queued"] if r["capacity_limited"] else []), (name, ctx, c)

    # Prefill: every context of the JSON's prefill block, prompt tok/s and TTFT.
    want_prefill = sorted((int(k), v) for k, v in data["prefill"].items())
    assert [r[1] for r in prefill] == [label(k) for k, _ in want_prefill]
    for row, (_, p) in zip(prefill, want_prefill, strict=True):
        assert row[3] == "Valid"
        assert close(row[4], p["tok_per_sec"]) and close(row[6], p["ttft_seconds"] * 1000)


def test_queued_fixture_has_a_queued_cell_with_the_reason(site: dict) -> None:
    run = read_run(site["runs"]["ref-queued-c4-8.json"])
    cells = {(r["context"], r["concurrency"]): r for r in run.cells.to_pylist() if r["phase"] == "decode"}
    assert cells[(1024, 4)]["status"] == "valid"
    assert cells[(1024, 8)]["status"] == "requests_queued"
    assert "capacity_limited" in cells[(1024, 8)]["reason"]
    assert "effective concurrency 4 of 8" in cells[(1024, 8)]["reason"]


def test_page_states_the_definition_differences(site: dict) -> None:
    doc = site["pages"]["ref-3tok-c1-8.json"]
    notes = doc.find("section", "run-notes").text()
    assert "llm-inference-bench" in notes and "0.4.18" in notes
    assert "aggregate ÷ C" in notes
    assert "per-chunk" in notes and "chunk_inter_token_latency_p50" in notes
    assert "scout" in notes
    assert "raw/llm-inference-bench.json" in notes
    banner = doc.find("p", "imported-note").text()
    assert "imported from an llm-inference-bench JSON report" in banner



def test_run_yaml_carries_the_metadata_and_the_raw_json_is_kept(site: dict) -> None:
    path = site["runs"]["ref-1tok-c1-8.json"]
    data = load("ref-1tok-c1-8.json")
    info = read_run(path).info
    assert info.source == "imported"
    assert info.parameters.tool_name == "llm-inference-bench"
    assert info.parameters.tool_version == data["metadata"]["version"]
    assert info.parameters.contexts == data["metadata"]["context_lengths"]
    assert info.parameters.concurrency == data["metadata"]["concurrency_levels"]
    assert info.parameters.duration_s == data["metadata"]["duration_per_test"]
    assert info.parameters.max_output_tokens == data["metadata"]["max_tokens"]
    assert info.parameters.prefill_mode == data["metadata"]["prefill_mode"]
    assert info.engine.name == data["metadata"]["engine"]
    assert info.model.served_name == data["metadata"]["model"]
    assert info.measured_at.startswith(data["metadata"]["timestamp"])
    assert info.kv_budget.tokens == data["metadata"]["max_total_tokens"]
    kept = json.loads((path / "raw" / "llm-inference-bench.json").read_text(encoding="utf-8"))
    assert kept == data  # nothing secret in the fixture: kept as it is, samples included


def test_content_decides_not_the_extension(tmp_path: Path) -> None:
    as_txt = tmp_path / "results.txt"
    as_txt.write_bytes((FIXTURES / NAMES[0]).read_bytes())
    run = import_ok(as_txt, tmp_path / "a")
    assert read_run(run).info.parameters.tool_name == "llm-inference-bench"
    page_as_json = tmp_path / "page.json"
    page_as_json.write_bytes(SEED_PAGE.read_bytes())
    run = import_ok(page_as_json, tmp_path / "b")
    assert read_run(run).info.imported.format.startswith("speed-test-matrix/text")


def test_same_report_reformatted_is_the_same_run(tmp_path: Path) -> None:
    first = import_ok(FIXTURES / NAMES[0], tmp_path / "d")
    compact = write_json(tmp_path, load(NAMES[0]))
    code, stdout, stderr = run_import(compact, tmp_path / "d")
    assert code == 0 and Path(stdout.strip()) == first and "already imported" in stderr


# -- refusals: one line, non-zero, nothing written -------------------------------


def _missing_field(data: dict) -> dict:
    del data["results"][2]["ttft_p50"]
    return data


def _old(data: dict) -> dict:
    data["metadata"]["version"] = "0.3.9"
    del data["results"][0]["aggregate_source"]
    return data


def _no_results(data: dict) -> dict:
    data["results"], data["prefill"] = [], {}
    return data


def _comparison(data: dict) -> dict:
    return {"metadata": {"version": "0.4.25", "mode": "paired_comparison"}, "comparison": {}}


def _bad_number(data: dict) -> dict:
    data["results"][0]["aggregate_tps"] = "fast"
    return data


REFUSED = {
    "missing field": (_missing_field, "llm-inference-bench 0.4.18: field results[2].ttft_p50: missing"),
    "before 0.4": (_old, "llm-inference-bench 0.3.9: versions before 0.4.0 are not supported"),
    "no results": (_no_results, "llm-inference-bench 0.4.18: no results"),
    "other mode": (_comparison, "a 'paired_comparison' report holds no decode matrix"),
    "foreign": (lambda d: {"name": "other-bench", "runs": [1, 2]}, "not an llm-inference-bench result"),
    "foreign list": (lambda d: [{"metadata": d["metadata"]}], "not an llm-inference-bench result"),
    "bad number": (_bad_number, "field results[0].aggregate_tps: expected a number or null"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_one_line(tmp_path: Path, case: str) -> None:
    change, message = REFUSED[case]
    path = write_json(tmp_path, change(copy.deepcopy(load(NAMES[0]))))
    code, stdout, stderr = run_import(path, tmp_path / "out")
    assert code != 0 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith(f"error: {path}: "), stderr
    assert message in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    text = (FIXTURES / NAMES[0]).read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")  # cut short
    code, stdout, stderr = run_import(path, tmp_path / "out")
    assert code != 0 and stderr.count("\n") == 1
    assert re.match(rf"error: {re.escape(str(path))}: line \d+: not valid JSON", stderr), stderr
    assert not (tmp_path / "out").exists()


# -- later versions' cells and secrets ------------------------------------------


def test_statuses_of_later_versions_map_with_their_reasons(tmp_path: Path) -> None:
    data = load("ref-1tok-c1-8.json")
    data["metadata"]["version"] = "0.6.2"
    r1, r2 = data["results"][1], data["results"][2]
    r1.update(loop_detected=True, aggregate_tps=-2.0, per_request_avg_tps=0.0,
              loop_reason="4 identical cycles of 1200 chars")
    r2.update(failure_reason="stream 3 disconnected before the window closed")
    del data["results"][3]  # the tool does not write cells it skipped
    data["summary_table"]["1024"] = {"1": data["results"][0]["aggregate_tps"], "2": None, "4": None}
    run = read_run(import_ok(write_json(tmp_path, data), tmp_path / "d"))
    cells = {r["concurrency"]: r for r in run.cells.to_pylist() if r["phase"] == "decode"}
    assert cells[1]["status"] == "valid"
    assert cells[2]["status"] == "looped" and "4 identical cycles" in cells[2]["reason"]
    assert cells[2]["pub_total_tok_s"] is None  # the tool's negative sentinel is no figure
    assert cells[4]["status"] == "error" and "disconnected" in cells[4]["reason"]
    assert cells[8]["status"] == "over_capacity" and "not in its results" in cells[8]["reason"]


SECRET = "sk-proj-Zx81kQ93mLwPq7Rt5Vb2"
PASSWORD = "hunter2-Zq9vXk"


def test_secrets_in_arguments_and_environment_are_redacted(tmp_path: Path) -> None:
    data = load("ref-1tok-c1-8.json")
    diag = data["startup_diagnostics"]
    diag["args"]["api_key"] = SECRET
    diag["env"] = {"OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_" + "a1B2c3D4e5F6g7H8i9J0k"}
    data["metadata"]["server"] = f"http://bench:{PASSWORD}@10.0.0.7:8000"
    data["event_log"].append(f"startup curl -H 'Authorization: Bearer {SECRET}'")
    run = import_ok(write_json(tmp_path, data), tmp_path / "d")
    blobs = b"".join(p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file())
    for secret in (SECRET, PASSWORD, "a1B2c3D4e5F6g7H8i9J0k"):
        assert secret.encode() not in blobs
    kept = json.loads((run / "raw" / "llm-inference-bench.json").read_text(encoding="utf-8"))
    assert kept["startup_diagnostics"]["args"]["api_key"] == "<redacted>"
    assert kept["startup_diagnostics"]["env"]["OPENAI_API_KEY"] == "<redacted>"
    assert "--api-key <redacted>" in read_run(run).info.notes
