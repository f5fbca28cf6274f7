"""GPU telemetry without a GPU: an NVML stand-in with a scripted power and
energy curve and throttle episodes, sampled by the real sampler thread,
written to gpu_metrics.parquet and read back validated."""

from __future__ import annotations

import io
import time
import types
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from bench.measure.cells import Settings
from bench.run.progress import Progress
from bench.run.runner import RunOptions, run_benchmark
from bench.server import telemetry
from bench.server.telemetry import GpuTelemetry, NvmlSource, open_source, server_is_local
from rundir.contract import GPU_METRICS_FILE, GPU_METRICS_SCHEMA, ContractError, check_table
from rundir.io import read_run, read_table
from tests.refserver.harness import refserver_fixture  # noqa: F401

IDLE, POWER_CAP, THERMAL = 0x1, 0x4, 0x20


class Curve:
    """The scripted card: a function of the monotonic clock, like a real one.
    Power steps from 100 W to 300 W at `step_ns`; energy is the exact integral
    (millijoules); a power-cap episode runs while power is high, a thermal one
    on GPU 1 only; GPU 0 reports idle before the step."""

    def __init__(self, step_ns: int) -> None:
        self.step_ns = step_ns

    def power_mw(self, t: int) -> int:
        return 100_000 if t < self.step_ns else 300_000

    def energy_mj(self, t: int) -> int:
        start = self.step_ns - 10**9  # the counter started 1 s before the step
        low = min(t, self.step_ns) - start
        high = max(0, t - self.step_ns)
        return (100 * low + 300 * high) // 10**6  # W × ns -> mJ

    def reasons(self, gpu: int, t: int) -> int:
        if t < self.step_ns:
            return IDLE
        return POWER_CAP | (THERMAL if gpu == 1 else 0)


def fake_nvml(curve: Curve, gpus: int = 2, energy: bool = True,
              clock=time.monotonic_ns) -> types.SimpleNamespace:
    """A stand-in for the pynvml module: the calls the sampler makes, nothing more."""

    class NVMLError(Exception):
        pass

    class NotSupported(NVMLError):
        pass

    def handle(i):
        return i

    def total_energy(h):
        if not energy:
            raise NotSupported("not supported")
        return curve.energy_mj(clock())

    return types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: gpus, nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: b"Fake H200",
        nvmlDeviceGetPowerUsage=lambda h: curve.power_mw(clock()),
        nvmlDeviceGetTotalEnergyConsumption=total_energy,
        nvmlDeviceGetClockInfo=lambda h, kind: 1980 if kind == 1 else 3201,
        nvmlDeviceGetTemperature=lambda h, kind: 61 + h,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=8 * 2**30),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: curve.reasons(h, clock()),
    )


def no_gpu_nvml() -> types.SimpleNamespace:
    class NVMLError(Exception):
        pass

    def init():
        raise NVMLError("NVML Shared Library Not Found")

    return types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=init)


def test_a_sample_holds_every_reading_of_every_gpu() -> None:
    now = [5 * 10**9]
    curve = Curve(step_ns=6 * 10**9)
    sampler = GpuTelemetry(NvmlSource(fake_nvml(curve, clock=lambda: now[0])),
                           clock=lambda: now[0], cpu=lambda: 37.5)
    sampler.sample()
    now[0] = 7 * 10**9
    sampler.sample()
    rows = check_table(GPU_METRICS_FILE, sampler.table()).to_pylist()
    assert [(r["t_ns"], r["gpu"]) for r in rows] == [(5 * 10**9, 0), (5 * 10**9, 1),
                                                     (7 * 10**9, 0), (7 * 10**9, 1)]
    first, last = rows[0], rows[3]
    assert first == {"t_ns": 5 * 10**9, "gpu": 0, "gpu_name": "Fake H200", "power_w": 100.0,
                     "energy_mj": 0, "sm_clock_mhz": 1980, "mem_clock_mhz": 3201,
                     "temp_c": 61.0, "util_gpu_pct": 97.0, "util_mem_pct": 40.0,
                     "mem_used_mb": 8192.0, "throttle_reasons": IDLE, "host_cpu_pct": 37.5}
    # 1 s at 100 W, then 1 s at 300 W: exactly 400 J on the counter
    assert last["power_w"] == 300.0 and last["energy_mj"] == 400_000
    assert last["throttle_reasons"] == POWER_CAP | THERMAL and rows[2]["throttle_reasons"] == POWER_CAP


def test_no_energy_counter_is_empty_not_guessed() -> None:
    sampler = GpuTelemetry(NvmlSource(fake_nvml(Curve(0), gpus=1, energy=False)))
    sampler.sample()
    sampler.sample()
    rows = sampler.table().to_pylist()
    assert [r["energy_mj"] for r in rows] == [None, None] and rows[0]["power_w"] == 300.0


def test_sampler_clock_is_the_token_clock_within_one_period() -> None:
    """The real thread on the real monotonic clock (the clock chunk_ns is on):
    every sample's power is the curve's at an instant within one sample period
    of the sample's t_ns, and the step shows up in the sample that follows it."""
    period = 10**9 // telemetry.RATE_HZ
    start = time.monotonic_ns()
    curve = Curve(step_ns=start + 3 * period)
    sampler = GpuTelemetry(NvmlSource(fake_nvml(curve, gpus=1)))
    sampler.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(
            t > curve.step_ns + period for t in sampler.table().column("t_ns").to_pylist()) < 2:
        time.sleep(0.05)
    sampler.stop()
    rows = sampler.table().to_pylist()
    assert len(rows) >= 4
    for r in rows:
        near = {curve.power_mw(r["t_ns"] + d) / 1000 for d in (-period, 0, period)}
        assert r["power_w"] in near, r
    assert all(r["power_w"] == 100.0 for r in rows if r["t_ns"] < curve.step_ns - period)
    assert all(r["power_w"] == 300.0 for r in rows if r["t_ns"] > curve.step_ns + period)
    ts = [r["t_ns"] for r in rows]
    assert ts == sorted(ts) and start <= ts[0] and ts[-1] <= time.monotonic_ns()


def test_no_gpus_is_a_note_and_no_sampler() -> None:
    source, why = open_source(nvml=no_gpu_nvml(), amd=None)
    assert source is None and "NVIDIA-only" in why and "not recorded" in why
    source, why = open_source(nvml=fake_nvml(Curve(0), gpus=0), amd=None)
    assert source is None and "NVIDIA-only" in why
    source, why = open_source(nvml=None, amd=None)
    assert source is None and "NVIDIA-only" in why


def test_a_remote_server_is_noted_not_sampled() -> None:
    notes: list[str] = []
    opened = []
    tel = telemetry.start_telemetry("auto", "http://gpu-box.example:8000", notes.append,
                                    open_gpus=lambda: opened.append(1) or (None, None))
    assert not tel.enabled and not opened
    assert len(notes) == 1 and "gpu-box.example" in notes[0] and "not on this host" in notes[0]
    assert server_is_local("http://127.0.0.1:8000") and server_is_local("http://localhost:1")
    assert server_is_local("http://[::1]:8000")


def test_the_file_refuses_bad_readings() -> None:
    ok = {n: [None] for n in GPU_METRICS_SCHEMA.names} | {"t_ns": [1], "gpu": [0]}
    check_table(GPU_METRICS_FILE, pa.table(ok))
    for column, value, words in (("power_w", -5.0, "column power_w: expected >= 0"),
                                 ("temp_c", float("nan"), "column temp_c: expected a finite"),
                                 ("gpu", -1, "column gpu: expected >= 0")):
        with pytest.raises(ContractError, match=words):
            check_table(GPU_METRICS_FILE, pa.table(ok | {column: [value]}))
    twice = ok | {"t_ns": [1, 1], "gpu": [0, 0]}
    twice = {k: v if len(v) == 2 else v * 2 for k, v in twice.items()}
    with pytest.raises(ContractError, match="a GPU appears twice in one sample"):
        check_table(GPU_METRICS_FILE, pa.table(twice))
    with pytest.raises(ContractError, match="column host_cpu_pct: missing"):
        check_table(GPU_METRICS_FILE, pa.table({k: v for k, v in ok.items() if k != "host_cpu_pct"}))


# -- a whole run against the reference server ------------------------------------

def _run(srv, out: Path, mode: str) -> str:
    buf = io.StringIO()
    opts = RunOptions(base_url=srv.base_url, out=out, contexts=[128], concurrency=[1],
                      prefill=False, gpu_telemetry=mode,
                      settings=Settings(duration_s=1.0, max_output=200, stable_s=0.2))
    run_benchmark(opts, Progress(Console(file=buf, width=100)))
    return buf.getvalue()


def test_a_run_writes_validated_telemetry(refserver, tmp_path, monkeypatch) -> None:  # noqa: F811
    curve = Curve(step_ns=time.monotonic_ns())
    monkeypatch.setattr(telemetry, "open_source",
                        lambda: open_source(nvml=fake_nvml(curve), amd=None))
    srv = refserver(tokens_per_s=200)
    _run(srv, tmp_path / "run", "auto")
    run = read_run(tmp_path / "run")
    gpu = run.gpu_metrics
    assert len(gpu) >= 2 and set(gpu.column("gpu").to_pylist()) == {0, 1}
    cell = run.cells.to_pylist()[0]
    # samples cover the cell's window, on the same clock as its tokens
    ts = gpu.column("t_ns").to_pylist()
    assert min(ts) <= cell["window_start_ns"] and max(ts) >= cell["window_end_ns"] - 10**9 // 10
    assert read_table(tmp_path / "run", GPU_METRICS_FILE).equals(gpu)


def test_off_writes_nothing(refserver, tmp_path, monkeypatch) -> None:  # noqa: F811
    opened = []
    monkeypatch.setattr(telemetry, "open_source", lambda: opened.append(1) or (None, None))
    srv = refserver(tokens_per_s=200)
    text = _run(srv, tmp_path / "run", "off")
    assert not opened and "telemetry" not in text
    assert not (tmp_path / "run" / GPU_METRICS_FILE).exists()
    assert len(read_run(tmp_path / "run").gpu_metrics) == 0


def test_no_gpus_writes_nothing_and_says_so(refserver, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(telemetry, "open_source", lambda: open_source(nvml=no_gpu_nvml(), amd=None))
    srv = refserver(tokens_per_s=200)
    text = _run(srv, tmp_path / "run", "auto")
    assert "GPU telemetry" in text and "not recorded" in text
    assert not (tmp_path / "run" / GPU_METRICS_FILE).exists()


def test_a_bad_mode_is_one_line_naming_the_flag(tmp_path) -> None:
    from click.testing import CliRunner

    from bench.cli import main

    res = CliRunner().invoke(main, ["run", "--base-url", "http://127.0.0.1:1",
                                    "--gpu-telemetry", "maybe", "--out", str(tmp_path / "r")])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: --gpu-telemetry: ") and "'auto', 'off'" in lines[0]
    assert not (tmp_path / "r").exists()
