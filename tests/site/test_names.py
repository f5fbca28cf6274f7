"""Distinct run names (site_builder/names.py): runs that share a label never share a name."""

from __future__ import annotations

from pathlib import Path

import pytest

from rundir.io import read_run_info
from site_builder.names import distinct_names
from site_builder.views import hardware_label, model_name
from tests.support.many_runs import make_many_runs
from tests.support.synthetic_runs import run_info


class _Run:
    """What naming reads of a run (RunView has the same)."""

    def __init__(self, run_id: str, **info: object) -> None:
        self.info = run_info(run_id, info=info)

    @property
    def model(self) -> str:
        return model_name(self.info)

    @property
    def hardware(self) -> str:
        return hardware_label(self.info)


def _run(run_id: str, model: str = "Synth-4B", gpu: str = "H200 SXM", count: int = 8,
         version: str = "0.30.1", quant: str = "BF16",
         at: str = "2026-09-27T19:59:00Z") -> _Run:
    return _Run(run_id, measured_at=at, model={"name": model},
                hardware={"gpu_name": gpu, "gpu_count": count, "vram_gb_per_gpu": None},
                engine={"name": "vllm", "version": version, "quantization": quant})


def test_one_run_is_named_by_its_model_alone() -> None:
    assert distinct_names([_run("a")]) == ["Synth-4B"]


def test_only_the_parts_that_differ_are_added() -> None:
    runs = [_run("a", at="2026-09-02T10:00:00Z"), _run("b", at="2026-09-27T10:00:00Z")]
    assert distinct_names(runs) == ["Synth-4B · Sep 2, 2026", "Synth-4B · Sep 27, 2026"]


def test_parts_follow_the_order_model_gpu_engine_date() -> None:
    runs = [_run("a"), _run("b", gpu="B200"), _run("c", gpu="B200", version="0.31.0")]
    assert distinct_names(runs) == ["Synth-4B · H200 SXM ×8", "Synth-4B · B200 ×8 · vllm 0.30.1",
                                    "Synth-4B · B200 ×8 · vllm 0.31.0"]


def test_quantization_tells_apart_otherwise_equal_runs() -> None:
    assert distinct_names([_run("a"), _run("b", quant="FP8")]) == [
        "Synth-4B · BF16", "Synth-4B · FP8"]


def test_same_day_gives_the_time_instead_of_the_date() -> None:
    runs = [_run("a", at="2026-09-27T09:00:00Z"), _run("b", at="2026-09-27T19:59:00Z"),
            _run("c", at="2026-09-28T09:00:00Z")]
    names = distinct_names(runs)
    assert names[2] == "Synth-4B · Sep 28, 2026"
    assert names[0] != names[1] and "Sep 27, 2026" in names[0] and "UTC" in names[0]
    assert names[0].count("Sep 27") == 1  # the time replaced the date, not beside it


def test_identical_runs_fall_back_to_their_ids() -> None:
    names = distinct_names([_run("first-run"), _run("second-run")])
    assert names == ["Synth-4B · first-run", "Synth-4B · second-run"]


def test_without_the_model_a_family_page_names_by_what_differs() -> None:
    runs = [_run("a"), _run("b", gpu="B200")]
    assert distinct_names(runs, with_model=False) == ["H200 SXM ×8", "B200 ×8"]
    assert distinct_names([_run("a")], with_model=False) == ["H200 SXM ×8"]
    other = [_run("a"), _run("b", model="Synth-4B-FP8")]
    assert distinct_names(other, with_model=False) == ["Synth-4B", "Synth-4B-FP8"]


@pytest.mark.parametrize("seed", [0, 1])
def test_every_name_of_a_big_site_is_distinct(tmp_path: Path, seed: int) -> None:
    paths = make_many_runs(tmp_path, 200, seed=seed)
    runs = [_Run.__new__(_Run) for _ in paths]
    for r, p in zip(runs, paths, strict=True):
        r.info = read_run_info(p)
    names = distinct_names(runs)
    assert len(set(names)) == len(names)
    assert all(n.startswith(r.model) for n, r in zip(names, runs, strict=True))
    assert not any(n.endswith(r.info.run_id) for n, r in zip(names, runs, strict=True))
