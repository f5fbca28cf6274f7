"""`bench import` of other tools' files end to end: file or folder -> run dirs -> build-site -> page.

Why through the real CLI: the readers and the writer were built apart; these
tests hold what a maintainer does (issue 36): import a folder of a tool's
exports, declare what the files do not carry, build, and read each page.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench.cli import main
from importer.peers.load import infer_concurrency

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
AIPERF = DATA / "aiperf" / "refserver"
IPERF = DATA / "inference-perf" / "refserver-c4.per_request_lifecycle_metrics.json"
GUIDE = DATA / "guidellm" / "refserver-c4.benchmarks.json"
IPERF_ALONE = DATA / "inference-perf" / "llama-c4.per_request_lifecycle_metrics.json"  # no config.yaml


def _import(*args: str) -> tuple[int, str, str]:
    got = CliRunner().invoke(main, ["import", *args])
    return got.exit_code, got.stdout, got.stderr


def _info(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "run.yaml").read_text())


def _cell(run_dir: Path) -> dict:
    import pyarrow.parquet as pq

    return pq.read_table(run_dir / "cells.parquet").to_pylist()[0]


def _build(data: Path, out: Path) -> None:
    from site_builder.cli import main as build

    got = CliRunner().invoke(build, ["-q", "--data", str(data), "--out", str(out),
                                     "--cache", str(out.parent / "cache")])
    assert got.exit_code == 0, got.output


def test_aiperf_raw_reads_the_summary_beside_it(tmp_path: Path) -> None:
    code, out, err = _import(str(AIPERF / "profile_export_raw.jsonl"), "--out", str(tmp_path))
    assert code == 0, err
    info = _info(Path(out.strip()))
    assert info["parameters"]["concurrency"] == [3]
    assert info["imported"]["tier"] == "chunk" and info["imported"]["tool_version"] == "0.13.0"
    names = {f["name"] for f in info["imported"]["published"]}
    assert {"ttft_ms.p50", "total_tok_s"} <= names  # AIPerf's own figures came along


def test_a_summary_of_another_run_is_not_taken(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(AIPERF / "profile_export_raw.jsonl", folder)
    doc = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    doc["request_count"]["avg"] += 5  # a summary of some other run of 17 requests
    (folder / "profile_export_aiperf.json").write_text(json.dumps(doc))
    code, out, err = _import(str(folder / "profile_export_raw.jsonl"), "--out", str(tmp_path / "d"))
    assert code == 0, err  # the counts differ: the summary is refused and the load inferred
    info = _info(Path(out.strip()))
    assert any("another run" in x for x in info["imported"]["lost"])
    assert not info["imported"].get("published")


def test_inferred_then_declared_load(tmp_path: Path) -> None:
    code, out, err = _import(str(IPERF_ALONE), "--out", str(tmp_path / "a"))
    assert code == 0, err
    run_dir = Path(out.strip())
    assert _info(run_dir)["parameters"]["concurrency"] == [4]
    assert "concurrency inferred from the requests' stamps: 4" in _info(run_dir)["notes"]
    code, out, err = _import(str(IPERF_ALONE), "--out", str(tmp_path / "b"), "--concurrency", "4")
    assert code == 0, err
    assert "declared at import (--concurrency 4)" in _info(Path(out.strip()))["notes"]


@pytest.mark.parametrize("args, words", [
    (["--concurrency", "5"], "contradicts the file's own concurrency 3"),
    (["--concurrency", "0"], "--concurrency 0"),
    (["--rate", "1", "--concurrency", "2"], "not both"),
    (["--engine", "=1"], "--engine"),
    (["--gpu-count", "2"], "--gpu-count needs --hardware"),
    (["--setup-from", "/nonexistent"], "not a run directory"),
])
def test_bad_flags_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    code, _, err = _import(str(AIPERF / "profile_export_raw.jsonl"), "--out", str(tmp_path), *args)
    assert code != 0 and words in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("rate", [2, 5, 10, 20])
def test_open_loop_is_not_inferred(rate: int) -> None:
    """Poisson arrivals (seeded), each request 0.1-0.3 s: the count swings, no load inferred."""
    import numpy as np

    rng = np.random.default_rng(1)
    sends = np.cumsum(rng.exponential(1e9 / rate, 200)).astype(np.int64)
    ends = sends + (rng.uniform(0.1, 0.3, 200) * 1e9).astype(np.int64)
    assert infer_concurrency(sends.tolist(), ends.tolist()) is None


@pytest.mark.parametrize("rel, expected", [
    ("aiperf/refserver/profile_export_raw.jsonl", 3),
    ("inference-perf/llama-c4.per_request_lifecycle_metrics.json", 4),
    ("inference-perf/refserver-c4.per_request_lifecycle_metrics.json", 4),
    ("mlperf-endpoints/handmade-events.jsonl", 3),
])
def test_closed_loop_fixtures_are_inferred(rel: str, expected: int) -> None:
    from importer.peers import read_runs

    _, (run,) = read_runs(DATA / rel)
    reqs = run.requests
    assert infer_concurrency([r.send_ns for r in reqs], [r.end_ns for r in reqs]) == expected


def test_folder_groups_one_runs_exports(tmp_path: Path) -> None:
    code, out, err = _import(str(DATA / "aiperf"), "--out", str(tmp_path / "d"))
    assert code == 0, err
    written = [line for line in out.splitlines() if not line.startswith("skipped")]
    assert len(written) == 3 and all("profile_export_raw.jsonl" in line for line in written)
    assert out.count("a poorer view of the same run") == 6
    code, out2, _ = _import(str(DATA / "aiperf"), "--out", str(tmp_path / "d"))
    assert code == 0 and out2.count("already imported") == 3


def test_folder_with_a_bad_file_exits_nonzero_and_writes_the_rest(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(GUIDE, folder)
    bad = folder / "profile_export_raw.jsonl"
    first = (AIPERF / "profile_export_raw.jsonl").read_text().splitlines()[0]
    bad.write_text(first.replace('"start_perf_ns":', '"start_perf_ns":"x","was":', 1) + "\n")
    code, out, err = _import(str(folder), "--out", str(tmp_path / "d"))
    assert code != 0 and err.count("error:") == 1 and "profile_export_raw.jsonl" in err
    assert len([p for p in (tmp_path / "d").iterdir() if p.is_dir()]) == 1


def _setup(info: dict) -> tuple:
    """The site's own setup key (site_builder/setups.setup_key) of a run directory."""
    from rundir.io import read_run_info
    from site_builder.setups import setup_key
    from site_builder.views import RunView

    return setup_key(RunView(read_run_info(info["dir"]), None, "x"))  # type: ignore[arg-type]


def test_setup_from_puts_the_run_in_our_setup(tmp_path: Path) -> None:
    ours = Path(__file__).resolve().parents[2] / "data" / "llama-cpp-tiny-cpu"
    code, out, err = _import(str(AIPERF / "profile_export_raw.jsonl"), "--out", str(tmp_path),
                             "--setup-from", str(ours))
    assert code == 0, err
    run_dir = Path(out.strip())
    info = _info(run_dir)
    assert info["model"]["served_name"] == "ref"  # the name the tool sent stays
    assert "Setup declared at import, not measured by the tool" in info["notes"]
    assert _setup({"dir": run_dir}) == _setup({"dir": ours})
    code, out, err = _import(str(IPERF), "--out", str(tmp_path))
    assert _setup({"dir": Path(out.strip())}) != _setup({"dir": ours})  # without: unknown hardware


def _peer(sends: list[int], ends: list[int]):
    from importer.peers.model import TIER_CHUNK, PeerRequest, PeerRun

    ms = 1_000_000
    reqs = tuple(PeerRequest(send_ns=s * ms, end_ns=e * ms, chunk_ns=(s * ms + ms, e * ms),
                             chunk_tokens=(1, 2), prompt_tokens=8, output_tokens=2)
                 for s, e in zip(sends, ends, strict=True))
    return PeerRun(tool="synthetic", tool_version="1", format="synthetic", tier=TIER_CHUNK,
                   source_file=IPERF, clock="test", requests=reqs, published={}, definitions={},
                   concurrency=4)


def test_peer_queue_check_judges_whether_the_tool_held_its_concurrency(tmp_path: Path) -> None:
    from importer.peers.write import write_peer_run

    held = [(k * 100, k * 100 + 100) for k in range(20)]
    # slots 0-2 refilled at once; slot 3 refilled 80 ms late each time: ~3.55 in flight of 4
    late = [(k * 180, k * 180 + 100) for k in range(12)]
    for name, slot3, queued in (("held", held, False), ("late", late, True)):
        pairs = held * 3 + slot3
        run = _peer([s for s, _ in pairs], [e for _, e in pairs])
        got = write_peer_run(run, tmp_path / name, sha256=name * 8)
        cell = _cell(got.path)
        assert (cell["status"] == "requests_queued") is queued, cell
        if queued:
            assert "server's queue was not observed" in cell["reason"]
            assert "held 3.5" in cell["reason"]


def test_pages_show_tool_tier_and_status(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for path in (AIPERF / "profile_export_aiperf.json", GUIDE):
        code, _, err = _import(str(path), "--out", str(data))
        assert code == 0, err
    code, _, err = _import(str(AIPERF / "profile_export_raw.jsonl"), "--out", str(data),
                           "--hardware", "Reference server", "--engine", "refserver=1")
    assert code == 0, err
    site = tmp_path / "site"
    _build(data, site)
    pages = {p.parent.name: p.read_text() for p in (site / "runs").glob("*/index.html")}
    agg = next(t for n, t in pages.items() if n.startswith("aiperf") and "tier **aggregate**" in t
               or ("aggregate: the tool" in t))
    assert 'Not checked</td>' in agg and '<span class="status">Not checked</span>' in agg
    assert ">Valid<" not in agg
    guide = next(t for n, t in pages.items() if n.startswith("guidellm"))
    assert "guidellm" in guide and "request: first and last token" in guide
    assert "Requests queued" not in guide  # truth: nothing queued at the reference server
    raw = next(t for t in pages.values() if "Reference server" in t)
    assert "Setup declared at import" in raw and "chunk: every chunk" in raw
    assert raw.count("The tool&#39;s definition") + raw.count("The tool's definition") == 2
    assert raw.count("AIPerf time_to_first_token") == 1  # one row per metric, definition once


# Every committed tool fixture, its tier and the status its rows support (see the report of
# issue 36's integration: AIPerf's and inference-perf's reference runs did not keep C requests
# in flight by their own stamps, 2.80 of 3 and 3.00 of 4; guidellm's did).
FIXTURES = [
    ("aiperf/refserver/profile_export_raw.jsonl", (), "chunk", "requests_queued", "0.13.0"),
    ("aiperf/refserver/profile_export.jsonl", (), "gap", "error", "0.13.0"),
    ("aiperf/refserver/profile_export_aiperf.json", (), "aggregate", "not_checked", "0.13.0"),
    ("aiperf/refserver-errors/profile_export_raw.jsonl", (), "chunk", "error", "0.13.0"),
    ("aiperf/llama-server/profile_export_raw.jsonl", (), "chunk", "error", "0.13.0"),
    ("guidellm/refserver-c4.benchmarks.json", (), "request", "valid", None),
    ("guidellm/llama-c4.benchmarks.json", (), "request", "valid", None),
    ("inference-perf/refserver-c4.per_request_lifecycle_metrics.json", (), "chunk", "requests_queued",
     "not in the file"),
    ("inference-perf/llama-c4.per_request_lifecycle_metrics.json", (), "chunk", "error", "not in the file"),
    ("mlperf-endpoints/handmade-events.jsonl", ("--input-tokens", "64"), "chunk", "error", "not in the file"),
]


def test_every_fixture_file_imports_and_its_page_says_tool_tier_and_status(tmp_path: Path) -> None:
    from rundir.words import NOT_CHECKED, NOT_CHECKED_NOTE, status_label
    from site_builder.peerpage import TIER_TEXT

    data = tmp_path / "data"
    dirs = {}
    for rel, flags, tier, status, _ in FIXTURES:
        code, out, err = _import(str(DATA / rel), "--out", str(data), *flags)
        assert code == 0, (rel, err)
        run_dir = Path(out.strip().splitlines()[0])
        info, cell = _info(run_dir), _cell(run_dir)
        assert info["imported"]["tier"] == tier, rel
        assert cell["status"] == ("valid" if status == "not_checked" else status), (rel, cell["reason"])
        dirs[rel] = run_dir
    site = tmp_path / "site"
    _build(data, site)
    for rel, _, tier, status, version in FIXTURES:
        page = (site / "runs" / dirs[rel].name / "index.html").read_text()
        info = _info(dirs[rel])
        assert f"Imported from {info['imported']['tool']}" in page, rel
        assert TIER_TEXT[tier].split(":")[0] in page
        if version:
            assert version in page, rel
        label = NOT_CHECKED if status == "not_checked" else status_label(status)
        assert f">{label}<" in page or f">{label}</a>" in page, (rel, label)
        if rel.startswith("mlperf"):  # no configuration beside it: the load was inferred
            assert "concurrency inferred from the requests' stamps: 3" in page.replace("&#39;", "'")
        if status == "not_checked":
            assert f">{status_label('valid')}<" not in page
            assert NOT_CHECKED_NOTE in page.replace("&#39;", "'")


def test_inference_perf_config_beside_gives_the_load(tmp_path: Path) -> None:
    code, out, err = _import(str(IPERF), "--out", str(tmp_path))
    assert code == 0, err
    info = _info(Path(out.strip()))
    assert info["parameters"]["concurrency"] == [4] and info["model"]["name"] == "ref"
    assert "refserver-c4.config.yaml (the tool's configuration)" in info["notes"]
    assert "inferred" not in info["notes"]
    # without it, the load comes from the stamps, and the notes say so
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(IPERF, alone)
    code, out, err = _import(str(alone / IPERF.name), "--out", str(tmp_path / "d"))
    assert code == 0, err
    assert "concurrency inferred from the requests' stamps: 4" in _info(Path(out.strip()))["notes"]


def _mlperf_folder(tmp_path: Path, *, config: bool, summary: bool) -> Path:
    folder = tmp_path / "mlperf"
    (folder / "performance").mkdir(parents=True)
    shutil.copy(DATA / "mlperf-endpoints" / "handmade-events.jsonl", folder / "events.jsonl")
    if config:  # the fields the tool's submission CLI reads from it
        (folder / "config.yaml").write_text("model_params:\n  name: ref\nsettings:\n  load_pattern:\n"
                                            "    type: concurrency\n    target_concurrency: 3\n")
    if summary:
        (folder / "performance" / "result_summary.json").write_text(json.dumps({
            "n_samples_issued": 40, "n_samples_completed": 40, "n_samples_failed": 0,
            "duration_ns": 2_000_000_000, "output_sequence_lengths": {"total": 1280},
            "ttft": {"total": 800_000_000, "percentiles": {"50": 19_000_000, "90": 25_000_000}}}))
    return folder


def test_mlperf_reads_config_and_summary_beside_the_events(tmp_path: Path) -> None:
    folder = _mlperf_folder(tmp_path, config=True, summary=True)
    code, out, err = _import(str(folder), "--out", str(tmp_path / "d"), "--input-tokens", "64")
    assert code == 0, err
    assert out.count("read with it") == 2  # config.yaml and the summary: part of the run
    run_dir = Path(out.splitlines()[0].split(" (from")[0])
    info = _info(run_dir)
    assert info["parameters"]["concurrency"] == [3] and info["model"]["name"] == "ref"
    got = {f["name"]: f["value"] for f in info["imported"]["published"]}
    assert got["ttft_ms.p50"] == pytest.approx(19.0) and got["ttft_ms.mean"] == pytest.approx(20.0)
    assert got["total_tok_s"] == pytest.approx(640.0) and got["completed"] == 40
    assert not any("config.yaml, not in this file" in x for x in info["imported"]["lost"])


def test_mlperf_without_companions_infers_and_says_what_is_missing(tmp_path: Path) -> None:
    folder = _mlperf_folder(tmp_path, config=False, summary=False)
    code, _, err = _import(str(folder / "events.jsonl"), "--out", str(tmp_path / "d"))
    assert code != 0 and "--input-tokens" in err and len(err.strip().splitlines()) == 1
    code, out, err = _import(str(folder / "events.jsonl"), "--out", str(tmp_path / "d"),
                             "--input-tokens", "64")
    assert code == 0, err
    info = _info(Path(out.strip()))
    assert "concurrency inferred from the requests' stamps: 3" in info["notes"]
    assert any("result_summary.json" in x for x in info["imported"]["lost"])


def test_guidellm_multi_benchmark_file_is_one_run_per_load_point(tmp_path: Path) -> None:
    doc = json.loads(GUIDE.read_text())
    second = json.loads(json.dumps(doc["benchmarks"][0]))
    second["config"]["strategy"]["streams"] = 2  # another load point of the same sweep
    if "max_concurrency" in second["config"]["strategy"]:
        second["config"]["strategy"]["max_concurrency"] = 2
    doc["benchmarks"].append(second)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "sweep.benchmarks.json").write_text(json.dumps(doc))
    code, out, err = _import(str(folder), "--out", str(tmp_path / "d"))
    assert code == 0, err
    written = out.strip().splitlines()
    assert len(written) == 2 and len({line.split(" ")[0] for line in written}) == 2
    code, out, _ = _import(str(folder), "--out", str(tmp_path / "d"))
    assert code == 0 and out.count("already imported") == 2
