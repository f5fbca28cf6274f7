"""GPU telemetry while a run measures: power, energy, clocks, throttling.

Why: a slow cell may be a slow server or a power-capped, thermally throttled
card; only readings taken during the window tell them apart, and only the
driver's energy counter says what a token costs. A thread (never the event
loop that stamps token arrivals) reads every GPU of this host RATE_HZ times a
second through NVML (`nvidia-ml-py`), or `amdsmi` for AMD, and stamps each
sample on time.monotonic_ns, the clock chunk_ns is on, at the midpoint of its
reads. The client host's CPU (psutil) goes with every sample. A reading the
driver does not offer is None, never guessed; the table is gpu_metrics.parquet.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import psutil
import pyarrow as pa

from rundir.contract import GPU_METRICS_SCHEMA

RATE_HZ = 10  # samples a second (documented in docs/data-format.md)
MODES = ("auto", "off")
NVIDIA_ONLY = ("GPU telemetry: no NVIDIA GPU found through NVML and amdsmi is not installed "
               "(telemetry is NVIDIA-only without it): not recorded")

Reading = dict[str, Any]  # one GPU's columns of GPU_METRICS_SCHEMA, less t_ns/gpu/host_cpu_pct


class Source(Protocol):
    """A driver binding: how many GPUs, what they are called, one reading each."""

    names: list[str]

    def read(self, gpu: int) -> Reading: ...

    def close(self) -> None: ...


def _guard(call: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> Any:
    """A reading, or None when the driver refuses it (not supported, GPU lost)."""
    try:
        return call()
    except errors:
        return None


class NvmlSource:
    """NVIDIA GPUs through NVML; `nvml` is the pynvml module (or a stand-in)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self._errors = (nvml.NVMLError,)
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.names = [_text(_guard(lambda h=h: nvml.nvmlDeviceGetName(h), self._errors))
                      for h in self._handles]
        # Energy counter: Volta and later; once refused, never asked again.
        self._energy = [True] * len(self._handles)
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(self, gpu: int) -> Reading:
        nv, h, g = self.nvml, self._handles[gpu], self._errors
        power = _guard(lambda: nv.nvmlDeviceGetPowerUsage(h), g)  # milliwatts
        energy = None
        if self._energy[gpu]:
            energy = _guard(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), g)  # millijoules
            self._energy[gpu] = energy is not None
        util = _guard(lambda: nv.nvmlDeviceGetUtilizationRates(h), g)
        mem = _guard(lambda: nv.nvmlDeviceGetMemoryInfo(h), g)
        return {
            "power_w": None if power is None else power / 1000.0,
            "energy_mj": energy,
            "sm_clock_mhz": _guard(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM), g),
            "mem_clock_mhz": _guard(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM), g),
            "temp_c": _float(_guard(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), g)),
            "util_gpu_pct": None if util is None else float(util.gpu),
            "util_mem_pct": None if util is None else float(util.memory),
            "mem_used_mb": None if mem is None else mem.used / 2**20,
            "throttle_reasons": _guard(lambda: self._reasons(h), g),
        }

    def close(self) -> None:
        with contextlib.suppress(*self._errors):
            self.nvml.nvmlShutdown()


class AmdSource:
    """AMD GPUs through amdsmi (same fields; no throttle bitmask: left empty)."""

    def __init__(self, amd: Any) -> None:
        self.amd = amd
        amd.amdsmi_init()
        self._errors = (Exception,)  # amdsmi raises its own classes, per version
        self._handles = list(amd.amdsmi_get_processor_handles())
        self.names = [_text((_guard(lambda h=h: amd.amdsmi_get_gpu_asic_info(h), self._errors)
                             or {}).get("market_name")) for h in self._handles]

    def read(self, gpu: int) -> Reading:
        a, h, g = self.amd, self._handles[gpu], self._errors
        power = _guard(lambda: a.amdsmi_get_power_info(h), g) or {}
        energy = _guard(lambda: a.amdsmi_get_energy_count(h), g) or {}
        clk = a.AmdSmiClkType
        sm = _guard(lambda: a.amdsmi_get_clock_info(h, clk.GFX), g) or {}
        memclk = _guard(lambda: a.amdsmi_get_clock_info(h, clk.MEM), g) or {}
        temp = _guard(lambda: a.amdsmi_get_temp_metric(
            h, a.AmdSmiTemperatureType.EDGE, a.AmdSmiTemperatureMetric.CURRENT), g)
        act = _guard(lambda: a.amdsmi_get_gpu_activity(h), g) or {}
        vram = _guard(lambda: a.amdsmi_get_gpu_vram_usage(h), g) or {}
        joules_uj = None  # accumulator × resolution is in microjoules
        if isinstance(energy.get("energy_accumulator"), int | float):
            joules_uj = energy["energy_accumulator"] * float(energy.get("counter_resolution", 0))
        watts = power.get("current_socket_power", power.get("average_socket_power"))
        return {
            "power_w": _float(watts),
            "energy_mj": None if not joules_uj else int(joules_uj // 1000),
            "sm_clock_mhz": _int(sm.get("clk")), "mem_clock_mhz": _int(memclk.get("clk")),
            "temp_c": _float(temp), "util_gpu_pct": _float(act.get("gfx_activity")),
            "util_mem_pct": _float(act.get("umc_activity")),
            "mem_used_mb": _float(vram.get("vram_used")), "throttle_reasons": None,
        }

    def close(self) -> None:
        with contextlib.suppress(*self._errors):
            self.amd.amdsmi_shut_down()


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else (None if value is None else str(value))


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def open_source(nvml: Any = "pynvml", amd: Any = "amdsmi") -> tuple[Source | None, str | None]:
    """This host's GPUs: an NVML source, else an amdsmi one, else (None, why).
    A module name is imported; a module object (a test's stand-in) is used as is."""
    nvml = _import(nvml) if isinstance(nvml, str) else nvml
    if nvml is not None:
        try:
            source = NvmlSource(nvml)
            if source.names:
                return source, None
            source.close()
        except nvml.NVMLError:  # no driver, no library: no NVIDIA GPU here
            pass
    amd = _import(amd) if isinstance(amd, str) else amd
    if amd is not None:
        try:
            source = AmdSource(amd)
            if source.names:
                return source, None
            source.close()
        except Exception:  # noqa: BLE001 - amdsmi's errors differ per version
            pass
        return None, "GPU telemetry: no GPU found through NVML or amdsmi: not recorded"
    return None, NVIDIA_ONLY


def server_is_local(base_url: str) -> bool:
    """Does the server run on this host (so this host's GPUs are its GPUs)?
    Only a loopback address or one of this host's own names/addresses says yes."""
    host = (urlsplit(base_url).hostname or "").lower()
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return True
    if host in ("localhost", socket.gethostname().lower()):
        return True
    own: set[str] = set()
    with contextlib.suppress(OSError):
        for addrs in psutil.net_if_addrs().values():
            own.update(a.address.split("%")[0].lower() for a in addrs)
    return host in own


class GpuTelemetry:
    """Samples `source` RATE_HZ times a second in a thread until stop()."""

    def __init__(self, source: Source | None, rate_hz: float = RATE_HZ,
                 clock: Callable[[], int] = time.monotonic_ns,
                 cpu: Callable[[], float] = lambda: psutil.cpu_percent(interval=None)) -> None:
        self.source = source
        self.period_ns = int(1e9 / rate_hz)
        self.clock = clock
        self.cpu = cpu
        self._rows: dict[str, list] = {k: [] for k in GPU_METRICS_SCHEMA.names}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.source is not None

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self.cpu()  # the first CPU reading only sets psutil's reference point
            self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop sampling and release the driver; the table stays readable."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.source is not None:
            self.source.close()

    def _loop(self) -> None:
        due = self.clock()
        while not self._stop.is_set():
            self.sample()
            due += self.period_ns
            now = self.clock()
            if due < now:  # a slow read: skip the ticks it missed, keep the rate
                due = now + self.period_ns - (now - due) % self.period_ns
            self._stop.wait((due - now) / 1e9)

    def sample(self) -> None:
        """One sample of every GPU, stamped at the midpoint of its reads."""
        assert self.source is not None
        before = self.clock()
        readings = []
        for gpu in range(len(self.source.names)):
            try:
                readings.append(self.source.read(gpu))
            except Exception:  # noqa: BLE001 - a lost GPU is a gap, never a crash
                readings.append({})
        t_ns = (before + self.clock()) // 2
        cpu = _guard(self.cpu, (Exception,))
        with self._lock:
            for gpu, reading in enumerate(readings):
                row = {"t_ns": t_ns, "gpu": gpu, "gpu_name": self.source.names[gpu],
                       "host_cpu_pct": cpu, **reading}
                for name, values in self._rows.items():
                    values.append(row.get(name))

    def table(self) -> pa.Table:
        """Every sample so far, in the contract's schema."""
        with self._lock:
            return pa.table({k: list(v) for k, v in self._rows.items()}, schema=GPU_METRICS_SCHEMA)

    def latest(self) -> list[dict[str, Any]]:
        """The last sample, one row per GPU (the live display reads it; it
        copies a few values, not the table); [] before the first sample."""
        n = len(self.source.names) if self.source is not None else 0
        with self._lock:
            if n == 0 or len(self._rows["t_ns"]) < n:
                return []
            return [{k: v[i] for k, v in self._rows.items()} for i in range(-n, 0)]


def start_telemetry(mode: str, base_url: str, note: Callable[[str], None],
                    open_gpus: Callable[[], tuple[Source | None, str | None]] | None = None,
                    ) -> GpuTelemetry:
    """The sampler for a run under `--gpu-telemetry mode`; every reason it is off
    is one note (off by flag is silent). Not started: the caller starts it."""
    if mode == "off":
        return GpuTelemetry(None)
    if not server_is_local(base_url):
        host = urlsplit(base_url).hostname
        note(f"GPU telemetry: the server ({host}) is not on this host; its GPUs are not "
             "visible here: not recorded")
        return GpuTelemetry(None)
    source, why = (open_gpus or open_source)()
    if why:
        note(why)
    return GpuTelemetry(source)
