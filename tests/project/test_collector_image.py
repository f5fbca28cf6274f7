"""deploy/Containerfile, the collector image: what it installs, who it runs as, and
the Kubernetes manifest that names it.

No container engine runs here (CI has none either), so the image is checked as text:
the collector's dependency list is pyproject.toml's less the builder's and covers
every third-party import of the collector's packages, the last stage runs `bench` as a
non-root user, every path it copies is in the build context, and pin-image.sh gives
the manifest's `image:` and BENCH_IMAGE_DIGEST the same digest.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from bench.server.provenance import IMAGE_DIGEST_ENV, SOURCE_REVISION_ENV
from tests.conftest import REPO

CONTAINERFILE = REPO / "deploy" / "Containerfile"
REQUIREMENTS = REPO / "deploy" / "collector-requirements.txt"
IGNORE = REPO / ".dockerignore"
JOB = REPO / "deploy" / "kubernetes" / "indexed-job.yaml"
PIN = REPO / "deploy" / "kubernetes" / "pin-image.sh"
IMAGE_NAME = "speed-matrix-collector"
# The site builder's own dependencies: what the image leaves out.
BUILDER_ONLY = {"jinja2", "markdown-it-py", "altair", "vl-convert-python"}
COLLECTOR_PACKAGES = ("bench", "rundir", "importer")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _requirements() -> list[str]:
    lines = (ln.strip() for ln in REQUIREMENTS.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_the_image_installs_pyprojects_dependencies_less_the_builders() -> None:
    """The list is pyproject's dependencies less the builder's, in order, then any
    optional ones the image adds (e.g. the fsspec stack for `bench upload s3://...`),
    each written as pyproject.toml's extras write it."""
    deps = PYPROJECT["project"]["dependencies"]
    assert BUILDER_ONLY <= {_name(d) for d in deps}  # the list names real dependencies
    base = [d for d in deps if _name(d) not in BUILDER_ONLY]
    listed = _requirements()
    assert listed[: len(base)] == base
    extras = {r for group in PYPROJECT["project"].get("optional-dependencies", {}).values()
              for r in group}
    assert set(listed[len(base):]) <= extras, set(listed[len(base):]) - extras
    assert not {_name(r) for r in listed} & BUILDER_ONLY


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> the first file importing it, over the collector's packages."""
    found: dict[str, str] = {}
    own = set(COLLECTOR_PACKAGES) | {"site_builder", "tests"}
    for package in COLLECTOR_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and (top not in own or top == "site_builder"):
                        found.setdefault(top, str(path.relative_to(REPO)))
    return found


def test_every_import_of_the_collector_is_in_its_list() -> None:
    imports = _third_party_imports()
    assert "site_builder" not in imports, f"{imports.get('site_builder')} imports the builder"
    providers = importlib.metadata.packages_distributions()
    listed = {_name(r) for r in _requirements()}
    for module, where in imports.items():
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        assert dists & listed, f"{where} imports {module} ({sorted(dists)}), not in {REQUIREMENTS.name}"


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def _ignored(rel: str, patterns: list[str]) -> bool:
    """.dockerignore's rule: the last pattern matching the path (or a folder above it) wins."""
    ignored = False
    parts = rel.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!")
        if any(fnmatch.fnmatch("/".join(parts[:i]), pat) for i in range(1, len(parts) + 1)):
            ignored = not negate
    return ignored


def test_the_last_stage_runs_bench_as_a_non_root_user() -> None:
    steps = _instructions()
    last = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    final = steps[last:]
    users = [arg for op, arg in final if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert json.loads(next(arg for op, arg in reversed(final) if op == "ENTRYPOINT")) == ["bench"]
    patterns = [ln.strip() for ln in IGNORE.read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    for op, arg in steps:
        if op == "COPY" and not arg.startswith("--from"):
            *sources, _dest = arg.split()
            for src in sources:
                assert (REPO / src).exists(), f"COPY {src}: no such path"
                assert not _ignored(src, patterns), f"COPY {src}: left out by .dockerignore"


def test_the_last_stage_passes_its_source_revision_to_every_run() -> None:
    """`--build-arg SOURCE_REVISION=...` (docs/collector-image.md) reaches `bench run` as
    BENCH_SOURCE_REVISION: an image keeps no .git for the collector to ask."""
    steps = _instructions()
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]
    assert ("ARG", "SOURCE_REVISION=") in final
    assert ("ENV", f"{SOURCE_REVISION_ENV}=${{SOURCE_REVISION}}") in final
    assert "--build-arg SOURCE_REVISION=" in (REPO / "docs" / "collector-image.md").read_text()


def test_the_manifest_names_this_image_at_the_projects_version() -> None:
    job = {d["kind"]: d for d in yaml.safe_load_all(JOB.read_text())}["Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"].rsplit("/", 1)[-1] == f"{IMAGE_NAME}:{PYPROJECT['project']['version']}"
    assert f"ARG VERSION={PYPROJECT['project']['version']}" in CONTAINERFILE.read_text()
    env = {e["name"]: e for e in container["env"]}
    assert env[IMAGE_DIGEST_ENV]["value"] == ""  # unpinned: the run records no image


def test_pin_image_gives_image_and_digest_the_same_reference() -> None:
    ref = f"registry.example/team/{IMAGE_NAME}@sha256:" + "ab" * 32
    out = subprocess.run(["sh", str(PIN), ref], capture_output=True, text=True, check=True).stdout
    job = {d["kind"]: d for d in yaml.safe_load_all(out)}["Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == env[IMAGE_DIGEST_ENV] == ref
    # the rest of the manifest is untouched
    rest = [ln for ln in out.splitlines() if ref not in ln]
    assert rest == [ln for ln in JOB.read_text().splitlines()
                    if not re.match(r"\s*(image:|value: \"\")", ln)]


@pytest.mark.parametrize("ref", [f"{IMAGE_NAME}:0.1.0", f"{IMAGE_NAME}@sha256:abc", ""])
def test_pin_image_refuses_a_tag_in_one_line(ref: str) -> None:
    res = subprocess.run(["sh", str(PIN), ref], capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
