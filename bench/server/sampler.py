"""Sampling the server's Prometheus gauges about once a second.

Runs in its own thread with its own HTTP client, so scraping and parsing a
large /metrics page never delays the event loop that stamps token
arrivals. Each sample is stamped at the midpoint of its scrape.

Nothing a server answers on /metrics can raise out of here: no answer, a
slow one, an HTTP error or a page of garbage is a failed scrape, counted in
`failures` and stamped in `failed_ns` (a gap in the gauges); a negative or
non-finite gauge value is dropped, never recorded.
"""

from __future__ import annotations

import math
import threading
import time

import httpx
import pyarrow as pa

from bench.core.auth import bearer_header
from bench.server.engines import ServerInfo
from bench.server.prometheus_text import labels_text, parse_metrics
from rundir.contract import METRIC_RUNNING, METRIC_WAITING, SERVER_METRICS_SCHEMA


class NoGauges(ValueError):
    """/metrics answered 200 but with none of the gauges we read (garbage,
    an HTML page, only NaN or negative values)."""


class MetricsSampler:
    def __init__(self, info: ServerInfo, api_key: str | None, interval_s: float = 1.0,
                 timeout_s: float = 5.0) -> None:
        self.info = info
        self.interval_s = interval_s
        self._by_source = {src: name for name, src in info.gauges.items()}
        self._http = httpx.Client(base_url=info.base_url, headers=bearer_header(api_key),
                                  timeout=timeout_s)
        self._rows: dict[str, list] = {k: [] for k in SERVER_METRICS_SCHEMA.names}
        self._latest: dict[str, float] = {}
        self._half: dict[int, int] = {}  # sample stamp -> half its scrape's round trip
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.failed_ns: list[int] = []  # when each failed scrape was (a gap in the gauges)

    @property
    def enabled(self) -> bool:
        return bool(self.info.has_metrics)

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="metrics-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._http.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.scrape()
            except Exception:  # noqa: BLE001  a bug here must not end the sampling thread
                self._failed(time.monotonic_ns())
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def _failed(self, t_ns: int) -> None:
        with self._lock:
            self.failures += 1
            self.failed_ns.append(t_ns)

    def scrape(self) -> dict[str, float] | None:
        """One scrape; returns the canonical gauges summed over label sets,
        or None if it failed (recorded as a gap)."""
        t0 = time.monotonic_ns()
        try:
            return self._scrape()
        except (httpx.HTTPError, NoGauges):
            self._failed((t0 + time.monotonic_ns()) // 2)
            return None

    def drain_state(self) -> str:
        """'idle', 'busy' or 'gone', for the drain between cells. A /metrics
        that connects but does not answer in time is busy, not gone:
        llama-server answers it from the loop that runs the requests, and
        that loop was seen stalled for 33 s on an H200."""
        t0 = time.monotonic_ns()
        try:
            sums = self._scrape()
        except (httpx.ReadTimeout, httpx.PoolTimeout):
            self._failed((t0 + time.monotonic_ns()) // 2)
            return "busy"
        except (httpx.HTTPError, NoGauges):  # NoGauges: it answers, but cannot tell us
            self._failed((t0 + time.monotonic_ns()) // 2)
            return "gone"
        return "busy" if sums.get("running") or sums.get("waiting") else "idle"

    def _scrape(self) -> dict[str, float]:
        t0 = time.monotonic_ns()
        resp = self._http.get("/metrics")
        t1 = time.monotonic_ns()
        if resp.status_code != 200:
            raise httpx.HTTPStatusError(f"/metrics answered HTTP {resp.status_code}",
                                        request=resp.request, response=resp)
        stamp = (t0 + t1) // 2
        samples = parse_metrics(resp.text, wanted=self._by_source)
        sums: dict[str, float] = {}
        rows = self._rows
        with self._lock:
            for s in samples:
                name = self._by_source.get(s.name)
                if name is None or not math.isfinite(s.value) or s.value < 0:
                    continue  # every gauge and counter read here is a finite count or ratio
                rows["t_ns"].append(stamp)
                rows["name"].append(name)
                rows["source"].append(s.name)
                rows["labels"].append(labels_text(s.labels))
                rows["value"].append(s.value)
                sums[name] = sums.get(name, 0.0) + s.value
            if not sums:
                raise NoGauges("/metrics answered without any usable gauge")
            self._latest = sums
            self._half[stamp] = (t1 - t0 + 1) // 2
        return sums

    def counters(self, names: dict[str, str]) -> dict[str, float] | None:
        """One scrape of other counters (`names`: canonical -> the engine's name), summed
        over label sets and not recorded as gauges; None if it failed or has none of them."""
        if not self.enabled or not names:
            return None
        by_source = {src: name for name, src in names.items()}
        try:
            resp = self._http.get("/metrics")
        except httpx.HTTPError:
            return None
        if resp.status_code != 200:
            return None
        sums: dict[str, float] = {}
        for s in parse_metrics(resp.text, wanted=by_source):
            name = by_source.get(s.name)
            if name is not None and math.isfinite(s.value) and s.value >= 0:
                sums[name] = sums.get(name, 0.0) + s.value
        return sums or None

    def latest(self) -> dict[str, float]:
        with self._lock:
            return dict(self._latest)

    def half_round_trips(self) -> dict[int, int]:
        """Per sample stamp, half the round trip of its scrape (ns)."""
        with self._lock:
            return dict(self._half)

    def running_waiting(self) -> tuple[float | None, float | None]:
        latest = self.latest()
        return latest.get(METRIC_RUNNING), latest.get(METRIC_WAITING)

    def table(self) -> pa.Table:
        with self._lock:
            return pa.table({k: list(v) for k, v in self._rows.items()}, schema=SERVER_METRICS_SCHEMA)
