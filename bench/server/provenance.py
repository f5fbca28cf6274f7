"""Where a run was measured: GPUs, CPU, OS and the server's launch command;
and what measured it: the collector image's digest and the collector's source revision.

GPU facts come from NVML (nvidia-ml-py) or `nvidia-smi`; the launch
command from the local process table when the server listens on this
host. Every string passes through the redactor before it is kept.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from rundir.contract import IMAGE_DIGEST, SOURCE_REVISION, Hardware
from rundir.redact import redact

GIB = 1 << 30
# Cards whose memory as the driver reports it (after ECC and reserved space)
# does not round to the capacity they are sold and known by. Matched against
# the name NVML or nvidia-smi gives; first match wins.
NOMINAL_VRAM_GB = (
    (re.compile(r"\bH200\b"), 141),
    (re.compile(r"\bB200\b"), 180),
    (re.compile(r"\bB300\b"), 288),
    (re.compile(r"\bRTX PRO 6000\b"), 96),
    (re.compile(r"\b(L40S?|A40)\b"), 48),
    (re.compile(r"\b(A10G?|L4)\b"), 24),
)


def vram_gb(name: str, total_bytes: float) -> int:
    """The GPU's memory as readers know the card ("H200 141GB", "H100 80GB").

    The driver reports what is usable: 143,771 MiB on an H200, sold as 141 GB.
    Decimal gigabytes (151 there) match no spec sheet and would set a card
    apart from the same card on published pages; binary gigabytes (GiB) match
    most cards (80 for an H100 80GB), and the table names the rest.
    """
    for pattern, nominal in NOMINAL_VRAM_GB:
        if pattern.search(name):
            return nominal
    return round(total_bytes / GIB)


def gpu_hardware() -> Hardware | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVIDIA driver: try the CLI, then give up
        return nvidia_smi_hardware()
    try:
        count = pynvml.nvmlDeviceGetCount()
        if not count:
            return None
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return Hardware(
            type="Discrete GPU", gpu_name=name.removeprefix("NVIDIA ").strip(), gpu_count=count,
            vram_gb_per_gpu=vram_gb(name, mem), driver=driver,
            cuda=f"{cuda // 1000}.{cuda % 1000 // 10}",
        )
    finally:
        pynvml.nvmlShutdown()


def nvidia_smi_hardware() -> Hardware | None:
    """GPU facts from the `nvidia-smi` CLI, where NVML cannot be loaded."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out:
        return None
    name, mem_mib, driver = (p.strip() for p in out[0].split(","))
    return Hardware(
        type="Discrete GPU", gpu_name=name.removeprefix("NVIDIA ").strip(), gpu_count=len(out),
        vram_gb_per_gpu=vram_gb(name, float(mem_mib) * (1 << 20)), driver=driver,
        cuda=_nvidia_smi_cuda(),
    )


def _nvidia_smi_cuda() -> str | None:
    """The CUDA version the driver supports, from the banner of a plain
    `nvidia-smi` (its CSV queries do not offer it)."""
    try:
        banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=10,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", banner)
    return found.group(1) if found else None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_hardware() -> Hardware:
    hw = gpu_hardware() or Hardware(type="CPU")
    hw.cpu = cpu_name()
    hw.os = f"{platform.system().lower()} {platform.release()}".strip()
    return hw


def local_launch_command(base_url: str, secrets: Iterable[str] = ()) -> str | None:
    """The command line of the local process listening on the server's port,
    redacted: a server started with ``--api-key K`` shows K to every user of
    the host, and the command line is published with the run."""
    try:
        parts = urlsplit(base_url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: not ours to judge here
        return None
    if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") and not host.startswith("127."):
        return None
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            try:
                return redact(shlex.join(psutil.Process(conn.pid).cmdline()), secrets)
            except psutil.Error:
                return None
    return None


# The runner of the collector image tells it its own digest: an image cannot know
# the digest it will have (the digest is of the finished image), and Kubernetes'
# downward API passes a pod's image name but not its digest (docs/collector-image.md).
IMAGE_DIGEST_ENV = "BENCH_IMAGE_DIGEST"


class ImageDigestError(ValueError):
    """BENCH_IMAGE_DIGEST is set to something that is not an image digest."""


def collector_image(environ: Mapping[str, str]) -> str | None:
    """The image this collector runs from, by digest, as the runner passed it in
    BENCH_IMAGE_DIGEST; None when unset or empty (a collector outside an image, or a
    runner that did not say). A tag (`:latest`) is refused: it does not name content."""
    return _env_value(environ, IMAGE_DIGEST_ENV, IMAGE_DIGEST, ImageDigestError,
                      "IMAGE@sha256:<64 hex> or sha256:<64 hex> "
                      "(e.g. podman image inspect --format '{{.Digest}}' IMAGE)")


def _env_value(environ: Mapping[str, str], name: str, pattern: re.Pattern[str],
               error: type[ValueError], expected: str) -> str | None:
    """A provenance variable the runner sets: None when unset or empty; a value that
    does not match refuses the run in one line naming the variable."""
    value = environ.get(name, "").strip()
    if not value:
        return None
    if not pattern.fullmatch(value):
        raise error(f"{name}: expected {expected}, got {value[:80]!r}")
    return value


# The collector's source revision (parameters.collector_revision), from the first of:
# the image build's BENCH_SOURCE_REVISION (an image keeps no .git); pip's record of a
# `pip install git+URL` (PEP 610 direct_url.json); the git checkout the package runs from.
SOURCE_REVISION_ENV = "BENCH_SOURCE_REVISION"
DISTRIBUTION = "speed-matrix"
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the `bench` package that is running
GIT_TIMEOUT_S = 5.0
# Variables that would point git at another repository than the package's.
_GIT_REPO_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")


class SourceRevisionError(ValueError):
    """BENCH_SOURCE_REVISION is set to something that is not a full commit id."""


def collector_revision(environ: Mapping[str, str], *, package_dir: Path = PACKAGE_DIR,
                       distribution: Callable[[str], Any] | None = None,
                       git: str = "git") -> str | None:
    """The source revision of the collector that is running, or None when nothing says.

    An image build's BENCH_SOURCE_REVISION wins (a malformed one refuses the run: the
    builder asked for it); pip's direct_url.json and the git checkout are read quietly,
    and what they cannot tell is unknown, never a failed run."""
    return (env_revision(environ) or installed_revision(package_dir, distribution)
            or checkout_revision(package_dir, environ, git))


def env_revision(environ: Mapping[str, str]) -> str | None:
    """BENCH_SOURCE_REVISION; None when unset or empty (an image built without the arg)."""
    return _env_value(environ, SOURCE_REVISION_ENV, SOURCE_REVISION, SourceRevisionError,
                      "a full git commit id (40 or 64 lowercase hex, optionally followed by "
                      "-dirty; e.g. --build-arg SOURCE_REVISION=$(git rev-parse HEAD))")


def installed_revision(package_dir: Path, distribution: Callable[[str], Any] | None = None) -> str | None:
    """The commit pip installed from (`pip install git+URL`: direct_url.json's
    vcs_info.commit_id), when that installation is the package running: a checkout on
    PYTHONPATH in front of an installed copy is another revision. `distribution`:
    importlib.metadata.distribution unless given."""
    try:
        dist = (distribution or importlib.metadata.distribution)(DISTRIBUTION)
        text = dist.read_text("direct_url.json")
        if not text or Path(dist.locate_file(package_dir.name)).resolve() != package_dir.resolve():
            return None
        vcs = json.loads(text).get("vcs_info") or {}
    except (importlib.metadata.PackageNotFoundError, OSError, ValueError, AttributeError, TypeError):
        return None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) and vcs.get("vcs") == "git" else None
    return commit if isinstance(commit, str) and SOURCE_REVISION.fullmatch(commit) else None


def checkout_revision(package_dir: Path, environ: Mapping[str, str], git: str = "git") -> str | None:
    """HEAD of the git work tree the package is tracked in, `-dirty` when a tracked file
    there has uncommitted changes (untracked files do not count: they are not the source
    git names). No git, no repository, a package git does not track (a venv inside some
    other repository) or git too slow: None."""
    exe = shutil.which(git)
    if exe is None:
        return None
    env = {k: v for k, v in environ.items() if k not in _GIT_REPO_ENV}
    base = [exe, "--no-optional-locks", "-C", str(package_dir)]  # never write the index
    try:
        tracked = subprocess.run([*base, "ls-files", "--error-unmatch", "--", "__init__.py"],
                                 capture_output=True, text=True, timeout=GIT_TIMEOUT_S, env=env)
        if tracked.returncode != 0:
            return None
        status = subprocess.run([*base, "status", "--porcelain=v2", "--branch", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=GIT_TIMEOUT_S, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    if status.returncode != 0:
        return None
    lines = status.stdout.splitlines()
    head = next((ln.split()[2] for ln in lines if ln.startswith("# branch.oid ")), "")
    if not SOURCE_REVISION.fullmatch(head):  # "(initial)": nothing committed yet
        return None
    return head + "-dirty" if any(not ln.startswith("#") for ln in lines) else head
