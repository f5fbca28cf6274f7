"""The collector image's digest in run.yaml (parameters.collector_image).

The runner passes it as BENCH_IMAGE_DIGEST (docs/collector-image.md); a run made
with it records it, a run made without it writes run.yaml exactly as before the
field existed, and a value that is not a digest stops the run in one line.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from bench.server.provenance import IMAGE_DIGEST_ENV, ImageDigestError, collector_image
from rundir.contract import RUN_YAML, ContractError, RunInfo
from rundir.io import read_run, read_run_info, write_run_info
from tests.collector.test_faults import FAST, STEADY
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE = "ghcr.io/example/speed-matrix-collector@" + DIGEST


def test_a_run_made_with_the_digest_records_it(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1", env={IMAGE_DIGEST_ENV: IMAGE})
    assert res.returncode == 0, res.stderr
    assert read_run(out).info.parameters.collector_image == IMAGE
    raw = yaml.safe_load((out / RUN_YAML).read_text())
    assert raw["parameters"]["collector_image"] == IMAGE
    # and without it (set but empty, as a manifest that leaves it blank does): no key at all
    bare = tmp_path / "bare"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(bare), *FAST,
                  "--concurrency", "1", env={IMAGE_DIGEST_ENV: ""})
    assert res.returncode == 0, res.stderr
    assert "collector_image" not in (bare / RUN_YAML).read_text()
    assert read_run(bare).info.parameters.collector_image is None


def test_a_value_that_is_not_a_digest_stops_the_run_in_one_line(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1", env={IMAGE_DIGEST_ENV: "ghcr.io/example/x:latest"})
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and IMAGE_DIGEST_ENV in lines[0] and "x:latest" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert not (out / RUN_YAML).exists()


@pytest.mark.parametrize("value", [DIGEST, IMAGE, "localhost/speed-matrix-collector@" + DIGEST])
def test_digest_forms_podman_and_docker_print_are_kept(value: str) -> None:
    assert collector_image({IMAGE_DIGEST_ENV: f" {value}\n"}) == value


@pytest.mark.parametrize("value", ["latest", "sha256:abc", "img:1.0", "sha256:" + "A" * 64,
                                   "a b@" + DIGEST])
def test_tags_and_short_digests_are_refused(value: str) -> None:
    with pytest.raises(ImageDigestError, match=IMAGE_DIGEST_ENV):
        collector_image({IMAGE_DIGEST_ENV: value})


def test_unset_is_none() -> None:
    assert collector_image({}) is None


def test_runs_without_it_are_written_byte_for_byte_as_before(tmp_path) -> None:
    """data/llama-cpp-tiny-cpu was written by `bench run` before the field existed
    (the other committed runs were imported or edited by hand, so their YAML layout is
    not the writer's): read and written again, its run.yaml is the same bytes."""
    run_yaml = REPO / "data" / "llama-cpp-tiny-cpu" / RUN_YAML
    shutil.copy(run_yaml, tmp_path / RUN_YAML)
    write_run_info(tmp_path, read_run_info(tmp_path))
    assert (tmp_path / RUN_YAML).read_bytes() == run_yaml.read_bytes()


def test_the_contract_refuses_a_collector_image_that_is_not_a_digest() -> None:
    data = yaml.safe_load(next((REPO / "data").glob("*/run.yaml")).read_text())
    data["parameters"]["collector_image"] = IMAGE
    assert RunInfo.from_dict(data).parameters.collector_image == IMAGE
    data["parameters"]["collector_image"] = "speed-matrix-collector:0.1.0"
    with pytest.raises(ContractError, match=r"run.yaml: field parameters.collector_image: expected"):
        RunInfo.from_dict(data)
