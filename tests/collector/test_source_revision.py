"""The collector's source revision in run.yaml (parameters.collector_revision).

bench/server/provenance.py finds it from the first of BENCH_SOURCE_REVISION (the image
build sets it), pip's direct_url.json (`pip install git+URL`) and the git checkout the
package runs from; unknown is absent, so such a run.yaml is what it was before the field
existed. A malformed BENCH_SOURCE_REVISION stops the run in one line; the other two
sources never fail a run.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench.server.provenance import (
    DISTRIBUTION,
    SOURCE_REVISION_ENV,
    SourceRevisionError,
    checkout_revision,
    collector_revision,
    installed_revision,
)
from rundir.contract import RUN_YAML, ContractError, Parameters, RunInfo
from rundir.io import read_run_info, write_run_info
from site_builder.cli import main as build_main
from site_builder.views import revision_label
from tests.collector.test_faults import FAST, STEADY
from tests.conftest import REPO, run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401
from tests.support.synthetic_runs import make_measured_run

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "89abcdef" * 8
OTHER = "fedcba9876543210fedcba9876543210fedcba98"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo(root: Path) -> tuple[Path, Path]:
    """A repository with a tracked package (pkg/__init__.py) and a tracked README."""
    root.mkdir()
    _git(root, "init", "-q")
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (root / "README").write_text("one\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root, pkg


def _installed(site: Path, direct_url: object | None) -> tuple[Path, importlib.metadata.Distribution]:
    """A site-packages holding the package (bench/) and its dist-info, as pip leaves them."""
    pkg = site / "bench"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    info = site / "speed_matrix-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 0.1.0\n")
    if direct_url is not None:
        text = direct_url if isinstance(direct_url, str) else json.dumps(direct_url)
        (info / "direct_url.json").write_text(text)
    return pkg, importlib.metadata.PathDistribution(info)


def _git_url(commit: str, vcs: str = "git") -> dict:
    return {"url": "https://example.org/speed-matrix.git",
            "vcs_info": {"vcs": vcs, "commit_id": commit, "requested_revision": "main"}}


# -- where it comes from --------------------------------------------------------


def test_the_environment_wins_over_pip_and_the_checkout(tmp_path: Path) -> None:
    pkg, dist = _installed(tmp_path / "site", _git_url(OTHER))
    assert collector_revision({}, package_dir=pkg, distribution=lambda _: dist) == OTHER
    env = {SOURCE_REVISION_ENV: f" {SHA1}-dirty\n"}
    assert collector_revision(env, package_dir=pkg, distribution=lambda _: dist) == SHA1 + "-dirty"
    _root, checkout = _repo(tmp_path / "repo")
    assert collector_revision({SOURCE_REVISION_ENV: SHA256}, package_dir=checkout) == SHA256
    # empty is unset (an image built without the build arg): the next source answers
    assert collector_revision({SOURCE_REVISION_ENV: ""}, package_dir=pkg,
                              distribution=lambda _: dist) == OTHER


@pytest.mark.parametrize("value", ["main", SHA1[:12], SHA1.upper(), SHA1 + "-modified",
                                   SHA1 + "-dirty-dirty", SHA1 + "0", f"{SHA1} {SHA1}"])
def test_a_malformed_environment_value_is_refused_in_one_line(value: str, tmp_path: Path) -> None:
    with pytest.raises(SourceRevisionError) as caught:
        collector_revision({SOURCE_REVISION_ENV: value}, package_dir=tmp_path)
    message = str(caught.value)
    assert SOURCE_REVISION_ENV in message and "\n" not in message and "40 or 64" in message


def test_pips_direct_url_names_the_commit_it_installed(tmp_path: Path, monkeypatch) -> None:
    pkg, dist = _installed(tmp_path / "site", _git_url(SHA1))
    asked = []
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: asked.append(name) or dist)
    assert collector_revision({}, package_dir=pkg) == SHA1
    assert asked == [DISTRIBUTION]


@pytest.mark.parametrize("direct_url", [
    {"url": "file:///src/speed-matrix", "dir_info": {"editable": True}},  # pip install -e .
    {"url": "https://example.org/speed_matrix-0.1.0.tar.gz", "archive_info": {}},
    _git_url(SHA1, vcs="hg"),
    _git_url("v0.1.0"),  # not a commit id
    _git_url(SHA1[:12]),
    "{not json",
    "[]",
    None,  # a wheel from an index: no direct_url.json
])
def test_pip_records_without_a_git_commit_are_unknown(direct_url: object, tmp_path: Path) -> None:
    pkg, dist = _installed(tmp_path / "site", direct_url)
    assert installed_revision(pkg, lambda _: dist) is None


def test_an_installed_copy_shadowed_by_another_package_is_not_asked(tmp_path: Path) -> None:
    """A checkout on PYTHONPATH in front of a git install runs other code than pip installed."""
    _pkg, dist = _installed(tmp_path / "site", _git_url(SHA1))
    elsewhere = tmp_path / "checkout" / "bench"
    elsewhere.mkdir(parents=True)
    assert installed_revision(elsewhere, lambda _: dist) is None


def test_no_installed_distribution_is_unknown(tmp_path: Path) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    assert installed_revision(tmp_path, missing) is None


def test_a_git_checkout_gives_head_and_dirty_for_changed_tracked_files(tmp_path: Path) -> None:
    root, pkg = _repo(tmp_path / "repo")
    env = {"PATH": "/usr/bin:/bin"}
    head = _git(root, "rev-parse", "HEAD")
    assert checkout_revision(pkg, env) == head
    (root / "notes.txt").write_text("untracked: not the source git names\n")
    assert checkout_revision(pkg, env) == head
    (root / "README").write_text("two\n")  # a tracked file outside the package counts too
    assert checkout_revision(pkg, env) == head + "-dirty"
    _git(root, "add", "README")  # staged, not committed: still not HEAD's source
    assert checkout_revision(pkg, env) == head + "-dirty"
    _git(root, "commit", "-q", "-m", "second")
    assert checkout_revision(pkg, env) == _git(root, "rev-parse", "HEAD") != head
    # the whole chain, with nothing from the environment or pip
    assert collector_revision(env, package_dir=pkg, distribution=lambda _: None) == _git(
        root, "rev-parse", "HEAD")


def test_git_variables_of_the_caller_do_not_redirect_it(tmp_path: Path) -> None:
    root, pkg = _repo(tmp_path / "repo")
    other, _ = _repo(tmp_path / "other")
    env = {"PATH": "/usr/bin:/bin", "GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other)}
    assert checkout_revision(pkg, env) == _git(root, "rev-parse", "HEAD")


def test_what_git_cannot_tell_is_unknown(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    plain = tmp_path / "plain" / "pkg"
    plain.mkdir(parents=True)
    (plain / "__init__.py").write_text("")
    assert checkout_revision(plain, env) is None  # not a repository
    root, pkg = _repo(tmp_path / "repo")
    assert checkout_revision(pkg, env, git="no-such-git-binary") is None
    venv_pkg = root / ".venv" / "site-packages" / "bench"  # an untracked package inside a repo
    venv_pkg.mkdir(parents=True)
    (venv_pkg / "__init__.py").write_text("")
    assert checkout_revision(venv_pkg, env) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")
    (empty / "__init__.py").write_text("")
    _git(empty, "add", "__init__.py")  # tracked, nothing committed: no HEAD
    assert checkout_revision(empty, env) is None


# -- the contract ---------------------------------------------------------------


def _run_yaml() -> dict:
    return yaml.safe_load((REPO / "data" / "llama-cpp-tiny-cpu" / RUN_YAML).read_text())


@pytest.mark.parametrize("value", [SHA1, SHA256, SHA1 + "-dirty", SHA256 + "-dirty"])
def test_the_contract_round_trips_a_revision(value: str, tmp_path: Path) -> None:
    data = _run_yaml()
    data["parameters"]["collector_revision"] = value
    write_run_info(tmp_path, RunInfo.from_dict(data))
    assert yaml.safe_load((tmp_path / RUN_YAML).read_text())["parameters"]["collector_revision"] == value
    assert read_run_info(tmp_path).parameters.collector_revision == value


def test_a_run_without_it_writes_no_key() -> None:
    assert "collector_revision" not in RunInfo(1, "r", parameters=Parameters()).to_dict()["parameters"]
    info = RunInfo.from_dict(_run_yaml())
    assert info.parameters.collector_revision is None
    assert "collector_revision" not in info.to_dict()["parameters"]


@pytest.mark.parametrize("value", ["", "HEAD", SHA1[:12], SHA1.upper(), SHA1 + "-modified",
                                   SHA1 + "-dirty-dirty", "-dirty", SHA1 + "ab", f" {SHA1}"])
def test_the_contract_refuses_what_is_not_a_full_commit_id(value: str) -> None:
    data = _run_yaml()
    data["parameters"]["collector_revision"] = value
    with pytest.raises(ContractError) as caught:
        RunInfo.from_dict(data)
    message = str(caught.value)
    assert message.startswith("run.yaml: field parameters.collector_revision: expected a full git commit")
    assert "\n" not in message


# -- end to end: bench run, bench import, the run page ------------------------


def test_bench_run_records_it_and_refuses_a_malformed_one(refserver, tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=STEADY)
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST,
                  "--concurrency", "1", env={SOURCE_REVISION_ENV: SHA1 + "-dirty"})
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load((out / RUN_YAML).read_text())["parameters"]["collector_revision"] == SHA1 + "-dirty"
    bad = tmp_path / "bad"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(bad), *FAST,
                  "--concurrency", "1", env={SOURCE_REVISION_ENV: "main"})
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and SOURCE_REVISION_ENV in lines[0] and "'main'" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert not (bad / RUN_YAML).exists()


def test_bench_import_records_no_revision(tmp_path: Path) -> None:
    """The imported run was measured by another tool: the importer's revision is not its."""
    page = REPO / "tests" / "data" / "import" / "seeds" / "qwen3.5-4b-bf16-rtxpro6000.txt"
    out = tmp_path / "data"
    res = run_cli("bench", "import", str(page), "--out", str(out), env={SOURCE_REVISION_ENV: SHA1})
    assert res.returncode == 0, res.stderr
    (run_yaml,) = out.glob(f"*/{RUN_YAML}")
    assert "collector_revision" not in run_yaml.read_text()


def test_the_run_page_shows_twelve_hex_and_keeps_the_whole_id_in_the_title(tmp_path: Path) -> None:
    assert str(revision_label(SHA1)) == f'<span title="{SHA1}">{SHA1[:12]}</span>'
    assert str(revision_label(SHA256 + "-dirty")) == (
        f'<span title="{SHA256}-dirty">{SHA256[:12]}-dirty</span>')
    assert revision_label(None) is None
    for name, revision in (("with", SHA1 + "-dirty"), ("without", None)):
        extra = {"parameters": {"collector_revision": revision}} if revision else None
        make_measured_run(tmp_path / "data" / name, run_id=name, contexts=[1024], concurrency=[1],
                          duration_s=0.6, info=extra)
    res = CliRunner().invoke(build_main, ["--data", str(tmp_path / "data"), "--out",
                                          str(tmp_path / "site"), "--quiet"])
    assert res.exit_code == 0, res.output
    shown = (tmp_path / "site" / "runs" / "with" / "index.html").read_text()
    assert (f'<dt>Tool revision</dt><dd><span title="{SHA1}-dirty">{SHA1[:12]}-dirty</span></dd>'
            in shown)
    assert "Tool revision" not in (tmp_path / "site" / "runs" / "without" / "index.html").read_text()
