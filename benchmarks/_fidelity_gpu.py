"""GPU telemetry sampling during benchmarks/client_fidelity.py's trials.

Why: issue 14 asks that the collector's GPU sampler (bench/server/telemetry.py, a
thread at RATE_HZ) not disturb the stamps; the only honest test is the same
client, same run, with the sampler thread running beside it and without.

The sampler reads real NVML when this host has NVIDIA GPUs. Elsewhere it
reads StandInNvml, which answers every NVML call the sampler makes like the
driver does: each call sleeps `call_us` with the GIL released (a real call is
a ctypes call into libnvidia-ml, which releases the GIL while the driver's
ioctl runs) and then spins `gil_us` holding the GIL (pynvml's Python wrapper:
argument structs, the return value, error checks). The defaults (8 GPUs,
200 us per call, 10 us of Python) model an 8-GPU box at a pessimistic
per-call cost, so one sample is ~9 calls x 8 GPUs = 72 calls, ~15 ms of wall
time and under 1 ms of GIL time, ten times a second.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from bench.server.telemetry import GpuTelemetry, NvmlSource, Source, open_source


class StandInNvmlError(Exception):
    """The stand-in's NVMLError (never raised: every reading is offered)."""


class StandInNvml:
    """A pynvml look-alike whose calls take as long as a driver's."""

    NVMLError = StandInNvmlError
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, gpus: int = 8, call_us: float = 200.0, gil_us: float = 10.0) -> None:
        self.gpus, self.call_s, self.gil_s = gpus, call_us / 1e6, gil_us / 1e6
        self.calls = 0
        self._t0 = time.monotonic()

    def _call(self) -> None:
        """One driver round trip: sleep without the GIL, then Python with it."""
        self.calls += 1
        time.sleep(self.call_s)
        until = time.perf_counter() + self.gil_s
        while time.perf_counter() < until:
            pass

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self._call()

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._call()

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._call()
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        self._call()
        return i

    def nvmlDeviceGetName(self, h: int) -> str:  # noqa: N802
        self._call()
        return "Stand-in GPU"

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        self._call()
        return 300_000 + 1_000 * h  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
        self._call()
        return int((time.monotonic() - self._t0) * 300_000)  # millijoules at 300 W

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:  # noqa: N802
        self._call()
        return SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:  # noqa: N802
        self._call()
        return SimpleNamespace(used=40 * 2**30, total=141 * 2**30, free=101 * 2**30)

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:  # noqa: N802
        self._call()
        return 1980 if which == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetTemperature(self, h: int, which: int) -> int:  # noqa: N802
        self._call()
        return 55

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:  # noqa: N802
        self._call()
        return 0


@dataclass
class SamplerPlan:
    """Where the trial's sampler reads from: real NVML when present, else the stand-in."""

    gpus: int = 8
    call_us: float = 200.0
    gil_us: float = 10.0
    real: bool = False

    def describe(self) -> str:
        if self.real:
            return "GPU sampling: real NVML on this host"
        return (f"GPU sampling: stand-in NVML, {self.gpus} GPUs, each call {self.call_us:g} us "
                f"(GIL released) + {self.gil_us:g} us of Python (GIL held); no NVIDIA GPU here")

    def source(self) -> Source:
        """A fresh source per trial (the sampler's stop() releases it)."""
        if self.real:
            src, _ = open_source(amd=None)
            if src is not None:
                return src
        return NvmlSource(StandInNvml(self.gpus, self.call_us, self.gil_us))


def plan_sampler(gpus: int, call_us: float, gil_us: float) -> SamplerPlan:
    """Real NVML when it finds GPUs here (checked once), else the stand-in."""
    src, _ = open_source(amd=None)
    if src is not None:
        src.close()
        return SamplerPlan(real=True)
    return SamplerPlan(gpus, call_us, gil_us)


class TimedTelemetry(GpuTelemetry):
    """The collector's sampler, also timing each sample (wall and its thread's CPU)."""

    def __init__(self, source: Source) -> None:
        super().__init__(source)
        self.wall_ns: list[int] = []
        self.cpu_ns = 0

    def sample(self) -> None:
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        super().sample()
        self.cpu_ns += time.thread_time_ns() - c0
        self.wall_ns.append(time.perf_counter_ns() - w0)


@contextlib.contextmanager
def sampling(plan: SamplerPlan) -> Iterator[dict[str, Any]]:
    """Run the sampler thread (as the collector does: started before, stopped
    after) around the block; the dict gets its figures on the way out."""
    tel = TimedTelemetry(plan.source())
    stats: dict[str, Any] = {}
    t0 = time.perf_counter_ns()
    tel.start()
    try:
        yield stats
    finally:
        tel.stop()
        wall_s = (time.perf_counter_ns() - t0) / 1e9
        ms = sorted(w / 1e6 for w in tel.wall_ns)
        stats.update(gpu_samples=len(ms),
                     sample_ms_p50=round(ms[len(ms) // 2], 2) if ms else None,
                     sample_ms_max=round(ms[-1], 2) if ms else None,
                     sampler_cpu_ms_per_s=round(tel.cpu_ns / 1e6 / wall_s, 2) if wall_s else None)
