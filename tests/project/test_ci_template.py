""".github/workflows/contribute.yml: its `run:` steps are plain commands of ours, run
here as the workflow runs them (bash -eo pipefail, the job's environment), against a
scratch git repository and file:// URLs.

The GitHub-specific actions (checkout, setup-python, upload-artifact) and the Install
step are left out: the repository is the scratch one and the package is this checkout.
`bench validate` and `bench upload`/`build-site --data URL` come from the other parts
of issue 37; the steps that call them run once those commands exist and are skipped,
saying so, before.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bench.cli import main as bench_main
from tests.conftest import REPO
from tests.support.synthetic_runs import make_measured_run

WORKFLOW = REPO / ".github" / "workflows" / "contribute.yml"
GITHUB_ACTIONS = {"actions/checkout", "actions/setup-python", "actions/upload-artifact"}
SKIPPED_STEPS = {"Install"}
SCRIPT = Path("scripts") / "ci" / "changed_runs.py"
FETCH_PR = "Fetch the runs the pull request's manifests name"
FETCH_PUSH = "Fetch the runs the merged manifests name"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _job(name: str) -> dict:
    return _workflow()["jobs"][name]


def _steps(job: str) -> dict[str, str]:
    """The job's `run:` steps by name, in order."""
    return {s["name"]: s["run"] for s in _job(job)["steps"] if "run" in s}


def _has_bench(command: str) -> bool:
    return command in bench_main.commands


def test_the_workflow_runs_on_pull_requests_and_pushes_to_main_touching_data() -> None:
    flow = _workflow()
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["pull_request"]["paths"] == ["data/**"]
    assert on["push"] == {"branches": ["main"], "paths": ["data/**"]}
    # runs uploaded straight from a GPU box reach no commit: published on demand and daily
    assert "workflow_dispatch" in on and on["schedule"][0]["cron"]
    assert _job("publish")["if"] == "github.event_name != 'pull_request'"
    assert _job("publish")["env"]["BEFORE_SHA"].startswith("${{ github.event.before || github.sha }}")
    assert flow["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("job", ["check", "publish"])
def test_every_step_is_a_known_action_or_a_plain_command(job: str) -> None:
    env = set(_job(job).get("env", {}))
    for step in _job(job)["steps"]:
        if "uses" in step:
            assert step["uses"].split("@")[0] in GITHUB_ACTIONS, step["uses"]
            continue
        command = step["run"]
        assert "${{" not in command, f"{step['name']}: an expression in run: cannot run outside GitHub"
        used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", command))
        assert used <= env, f"{step['name']}: {used - env} not in the job's env"
        first = command.split()[0]
        # `while`: the fetch steps' loop over manifests.txt (bench download for each line)
        assert first in {"python", "xargs", "bench", "build-site", "while"}, command
    secrets = {k for k, v in _job(job).get("env", {}).items() if "secrets." in str(v)}
    for step in _job(job)["steps"]:  # a secret reaches only the environment, never a command line
        assert not any(name in step.get("run", "") for name in secrets)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A repository with our script, one run at BASE and a second added after it."""
    repo = tmp_path_factory.mktemp("contrib") / "repo"
    (repo / SCRIPT.parent).mkdir(parents=True)
    shutil.copy(REPO / SCRIPT, repo / SCRIPT)
    make_measured_run(repo / "data" / "old-run", run_id="old-run", contexts=[1024],
                      concurrency=[1, 2], duration_s=0.6, seed=3)
    _git(repo, "init", "-q", "-b", "main")
    base = _commit(repo, "base")
    make_measured_run(repo / "data" / "team" / "new-run", run_id="new-run", contexts=[1024, 4096],
                      concurrency=[1, 2], duration_s=0.6, seed=4)
    _commit(repo, "a contribution")
    return repo, base


def _run(command: str, repo: Path, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full["PYTHONPATH"] = str(REPO) + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env)
    return subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=repo, env=full,
                          capture_output=True, text=True, timeout=600)


def test_the_pull_request_job_finds_validates_and_builds_the_preview(scratch) -> None:
    repo, base = scratch
    steps = _steps("check")
    env = {"BASE_SHA": base}
    assert set(steps) - SKIPPED_STEPS == {"Find the runs this pull request adds", FETCH_PR,
                                          "Validate them", "Build the preview site"}
    found = _run(steps["Find the runs this pull request adds"], repo, **env)
    assert found.returncode == 0, found.stderr
    assert (repo / "runs.txt").read_text() == "data/team/new-run\n"  # not the run at BASE
    assert (repo / "manifests.txt").read_text() == ""  # written, empty: no upload manifest
    fetched = _run(steps[FETCH_PR], repo, **env)
    assert fetched.returncode == 0, fetched.stderr
    assert (repo / "runs.txt").read_text() == "data/team/new-run\n"
    if _has_bench("validate"):
        checked = _run(steps["Validate them"], repo, **env)
        assert checked.returncode == 0, checked.stderr
        json.loads((repo / "validate.json").read_text())
    built = _run(steps["Build the preview site"], repo, **env)
    assert built.returncode == 0, built.stderr
    assert (repo / "preview-site" / "index.html").is_file()
    assert (repo / "preview-site" / "runs").is_dir()


@pytest.mark.parametrize(("command", "part"), [("validate", "1: the Validate step"),
                                               ("upload", "2: the Upload and bucket build steps")])
def test_the_steps_of_the_other_parts_ran(command: str, part: str) -> None:
    """Says, as a skip, which steps the tests above could not run on this branch."""
    if not _has_bench(command):
        pytest.skip(f"bench {command} is not on this branch; not run: issue 37, part {part}")


def test_a_broken_run_fails_the_validate_step(scratch, tmp_path: Path) -> None:
    if not _has_bench("validate"):
        pytest.skip("bench validate is not on this branch (issue 37, part 1)")
    repo, base = scratch
    broken = tmp_path / "repo"
    shutil.copytree(repo, broken)
    run_yaml = broken / "data" / "team" / "new-run" / "run.yaml"
    run_yaml.write_text(run_yaml.read_text().replace("schema_version:", "schema_version: 99\nx:", 1))
    steps = _steps("check")
    assert _run(steps["Find the runs this pull request adds"], broken, BASE_SHA=base).returncode == 0
    res = _run(steps["Validate them"], broken, BASE_SHA=base)
    assert res.returncode != 0
    assert "run.yaml" in res.stdout + res.stderr


def test_a_file_outside_any_run_directory_fails_the_find_step(scratch, tmp_path: Path) -> None:
    repo, base = scratch
    stray = tmp_path / "repo"
    shutil.copytree(repo, stray)
    (stray / "data" / "team" / "new-run" / "run.yaml").unlink()  # the run lost its run.yaml
    _commit(stray, "no run.yaml")
    res = _run(_steps("check")["Find the runs this pull request adds"], stray, BASE_SHA=base)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "error: data/team/new-run/cells.parquet: not in a run directory "
        "(no run.yaml in a folder above it under data/)"]


def test_the_push_job_uploads_builds_and_publishes(scratch, tmp_path: Path) -> None:
    repo, base = scratch
    steps = _steps("publish")
    env = {"BEFORE_SHA": "0" * 40,  # a first push: every run
           "RUNS_URL": (tmp_path / "bucket" / "runs").as_uri(),
           "SITE_URL": (tmp_path / "www").as_uri()}
    work = tmp_path / "repo"
    shutil.copytree(repo, work)
    found = _run(steps["Find the runs this push adds"], work, **env)
    assert found.returncode == 0, found.stderr
    assert (work / "runs.txt").read_text() == "data/old-run\ndata/team/new-run\n"
    for name in ("Restore the last build from the bucket", "Upload them",
                 "Build the site from the bucket"):
        res = _run(steps[name], work, **env)
        assert res.returncode == 0, (name, res.stderr)
    published = _run(steps["Publish the changed files"], work, **env)
    assert published.returncode == 0, published.stderr
    assert (tmp_path / "www" / "index.html").read_bytes() == (work / "site" / "index.html").read_bytes()
    again = _run(steps["Publish the changed files"], work, **env)
    assert again.returncode == 0 and ": 0 uploaded," in again.stderr, again.stderr
    kept = _run(steps["Keep this build in the bucket for the next runner"], work, **env)
    assert kept.returncode == 0 and "Pushed to " in kept.stderr, kept.stderr

    # The next push, on a runner that starts empty: one more run
    nxt = tmp_path / "next-runner"
    shutil.move(work, tmp_path / "gone")
    shutil.copytree(repo, work)
    shutil.move(work, nxt)
    before = _git(nxt, "rev-parse", "HEAD")
    make_measured_run(nxt / "data" / "third-run", run_id="third-run", contexts=[1024],
                      concurrency=[1, 2], duration_s=0.6, seed=5)
    _commit(nxt, "a third run")
    env["BEFORE_SHA"] = before
    pulled = _run(steps["Restore the last build from the bucket"], nxt, **env)
    assert pulled.returncode == 0 and "Pulled from " in pulled.stderr, pulled.stderr
    for name in ("Find the runs this push adds", "Upload them"):
        assert _run(steps[name], nxt, **env).returncode == 0, name
    assert (nxt / "runs.txt").read_text() == "data/third-run\n"
    build = steps["Build the site from the bucket"].replace(" --quiet", "")
    res = _run(build, nxt, **env)
    assert res.returncode == 0, res.stderr
    assert "(1 aggregated, 2 from cache;" in res.stderr, res.stderr  # only the new run read
    published = _run(steps["Publish the changed files"], nxt, **env)
    assert published.returncode == 0, published.stderr
    assert (tmp_path / "www" / "runs" / "third-run" / "index.html").is_file()
    assert _run(steps["Keep this build in the bucket for the next runner"], nxt, **env).returncode == 0

    # A run uploaded straight from a GPU box reaches no commit: a dispatch (or the daily
    # schedule) runs every step with BEFORE_SHA = github.sha, finds nothing, publishes it.
    box = make_measured_run(tmp_path / "gpu-box" / "box-run", run_id="box-run", contexts=[1024],
                            concurrency=[1, 2], duration_s=0.6, seed=6)
    assert _run(f'bench upload {box} "$RUNS_URL"', nxt, **env).returncode == 0
    env["BEFORE_SHA"] = _git(nxt, "rev-parse", "HEAD")
    for name, command in steps.items():
        if name not in SKIPPED_STEPS:
            res = _run(command, nxt, **env, STAGING_URL="file:///nowhere")
            assert res.returncode == 0, (name, res.stderr)
    assert (nxt / "runs.txt").read_text() == ""
    assert (tmp_path / "www" / "runs" / "box-run" / "index.html").is_file()


def test_a_base_git_cannot_compare_is_one_line(scratch) -> None:
    repo, _ = scratch
    res = _run(_steps("check")["Find the runs this pull request adds"], repo, BASE_SHA="f" * 40)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: --base {'f' * 40}: git cannot compare it with HEAD")


@pytest.fixture(scope="module")
def by_manifest(scratch, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, Path]:
    """(repository, BASE, staging URL, the PR's manifest): a run uploaded to a file://
    staging prefix, and a commit after BASE that adds only its upload manifest."""
    from rundir import storage, upload
    from rundir.manifest import seal

    origin, _ = scratch
    top = tmp_path_factory.mktemp("by-manifest")
    repo = top / "repo"
    shutil.copytree(origin, repo)
    base = _git(repo, "rev-parse", "HEAD")
    run = make_measured_run(top / "box" / "staged-run", run_id="staged-run", contexts=[1024],
                            concurrency=[1, 2], duration_s=0.6, seed=6)
    seal(run)
    staging = (top / "staging").as_uri()
    assert upload.upload(run, staging).state == upload.UPLOADED
    manifest = repo / "data" / "contrib" / "staged-run" / storage.UPLOAD_MANIFEST
    manifest.parent.mkdir(parents=True)
    shutil.copy(top / "staging" / "staged-run" / storage.UPLOAD_MANIFEST, manifest)
    _commit(repo, "a run by its upload manifest")
    return repo, base, staging, manifest


def test_a_pull_request_adding_an_upload_manifest_fetches_validates_and_previews(
        by_manifest, tmp_path: Path) -> None:
    origin, base, staging, _ = by_manifest
    repo = tmp_path / "repo"
    shutil.copytree(origin, repo)
    steps = _steps("check")
    env = {"BASE_SHA": base, "STAGING_URL": staging}
    found = _run(steps["Find the runs this pull request adds"], repo, **env)
    assert found.returncode == 0, found.stderr
    assert (repo / "runs.txt").read_text() == ""
    assert (repo / "manifests.txt").read_text() == "data/contrib/staged-run/upload-manifest.json\n"
    fetched = _run(steps[FETCH_PR], repo, **env)
    assert fetched.returncode == 0, fetched.stderr
    assert (repo / "runs.txt").read_text() == "data/fetched/staged-run\n"
    assert (repo / "data" / "fetched" / "staged-run" / "run.yaml").is_file()
    checked = _run(steps["Validate them"], repo, **env)
    assert checked.returncode == 0, checked.stderr
    assert "staged-run" in (repo / "validate.json").read_text()
    built = _run(steps["Build the preview site"], repo, **env)
    assert built.returncode == 0, built.stderr
    assert (repo / "preview-site" / "runs" / "staged-run" / "index.html").is_file()


def test_a_run_changed_in_staging_after_its_manifest_fails_the_fetch(
        by_manifest, tmp_path: Path) -> None:
    origin, base, staging, _ = by_manifest
    repo = tmp_path / "repo"
    shutil.copytree(origin, repo)
    moved = tmp_path / "staging"
    shutil.copytree(Path(staging.removeprefix("file://")), moved)
    cells = moved / "staged-run" / "cells.parquet"
    raw = bytearray(cells.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one byte of one file, after the pull request named them
    cells.write_bytes(bytes(raw))
    env = {"BASE_SHA": base, "STAGING_URL": moved.as_uri()}
    steps = _steps("check")
    assert _run(steps["Find the runs this pull request adds"], repo, **env).returncode == 0
    res = _run(steps[FETCH_PR], repo, **env)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"error: {moved.as_uri()}/staged-run/cells.parquet: sha256 or size differs from its "
        "upload manifest; nothing fetched (the stored run is not the one the manifest names)"]
    assert not (repo / "data" / "fetched").exists() or not any((repo / "data" / "fetched").iterdir())


def test_a_manifest_the_pull_request_edited_fails_the_fetch(by_manifest, tmp_path: Path) -> None:
    origin, base, staging, _ = by_manifest
    repo = tmp_path / "repo"
    shutil.copytree(origin, repo)
    manifest = repo / "data" / "contrib" / "staged-run" / "upload-manifest.json"
    manifest.write_text(manifest.read_text().replace('"source": "measured"', '"source":  "measured"'))
    _commit(repo, "the manifest, edited")
    env = {"BASE_SHA": base, "STAGING_URL": staging}
    steps = _steps("check")
    assert _run(steps["Find the runs this pull request adds"], repo, **env).returncode == 0
    res = _run(steps[FETCH_PR], repo, **env)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"error: {staging}/staged-run/upload-manifest.json: differs from "
        "data/contrib/staged-run/upload-manifest.json; the stored run is not the one the manifest names"]


def test_the_push_job_uploads_the_fetched_run(by_manifest, tmp_path: Path) -> None:
    origin, base, staging, manifest = by_manifest
    repo = tmp_path / "repo"
    shutil.copytree(origin, repo)
    steps = _steps("publish")
    runs = tmp_path / "bucket" / "runs"
    env = {"BEFORE_SHA": base, "STAGING_URL": staging, "RUNS_URL": runs.as_uri(),
           "SITE_URL": (tmp_path / "www").as_uri()}
    names = list(steps)
    assert names.index(FETCH_PUSH) == names.index("Find the runs this push adds") + 1
    assert names.index("Upload them") == names.index(FETCH_PUSH) + 1
    for name in ("Restore the last build from the bucket", "Find the runs this push adds",
                 FETCH_PUSH, "Upload them", "Build the site from the bucket",
                 "Publish the changed files"):
        res = _run(steps[name], repo, **env)
        assert res.returncode == 0, (name, res.stderr)
    assert (repo / "runs.txt").read_text() == "data/fetched/staged-run\n"
    assert (runs / "staged-run" / "upload-manifest.json").read_bytes() == manifest.read_bytes()
    stored = sorted(p.name for p in (runs / "staged-run").iterdir())
    assert stored == sorted(p.name for p in (Path(staging.removeprefix("file://")) / "staged-run").iterdir())
    assert (tmp_path / "www" / "runs" / "staged-run" / "index.html").is_file()


def test_an_upload_manifest_is_an_error_without_manifests_and_its_neighbours_always(
        by_manifest, tmp_path: Path) -> None:
    origin, base, _, _ = by_manifest
    repo = tmp_path / "repo"
    shutil.copytree(origin, repo)
    plain = _run(f"python {SCRIPT} --base {base} --data data", repo)
    assert plain.returncode == 1
    assert plain.stderr.strip() == ("error: data/contrib/staged-run/upload-manifest.json: not in a "
                                    "run directory (no run.yaml in a folder above it under data/)")
    (repo / "data" / "contrib" / "staged-run" / "notes.txt").write_text("more than the manifest")
    _commit(repo, "a stray file beside the manifest")
    res = _run(f"python {SCRIPT} --base {base} --data data --manifests m.txt", repo)
    assert res.returncode == 1
    assert res.stderr.strip() == ("error: data/contrib/staged-run/notes.txt: not in a run "
                                  "directory (no run.yaml in a folder above it under data/)")
