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
    code, out, err = _import(str(IPERF), "--out", str(tmp_path / "a"))
    assert code == 0, err
    run_dir = Path(out.strip())
    assert _info(run_dir)["parameters"]["concurrency"] == [4]
    assert "concurrency inferred from the requests' stamps: 4" in _info(run_dir)["notes"]
    code, out, err = _import(str(IPERF), "--out", str(tmp_path / "b"), "--concurrency", "4")
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


def test_open_loop_is_not_inferred() -> None:
    sends = [int(i * 1e9) for i in range(20)]  # one request a second, each 0.2 s: never overlap much
    ends = [s + 200_000_000 for s in sends]
    assert infer_concurrency(sends[:1] + sends, ends[:1] + ends) is None
    closed = [0, 0, 0] + [int(1e8) * k for k in range(1, 30)]
    assert infer_concurrency(closed[:3], [int(1e8)] * 3) == 3


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
    """site_builder.setups.setup_key's parts, from run.yaml as the builder reads it."""
    from rundir.io import read_run_info
    from site_builder.families import family_of
    from site_builder.views import hardware_label, model_name

    ri = read_run_info(info["dir"])
    name = model_name(ri)
    return (name.lower(), family_of(name, ri.engine.quantization, ri.model.family)[1].lower(),
            (ri.hardware.gpu_name or hardware_label(ri)).lower(), ri.hardware.gpu_count or 1,
            (ri.engine.name or "").lower())


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
