"""Worker processes for the heavy, per-run part of a build.

A real-size run takes about 0.2 s to read and aggregate and as long again to
render (~50 drill-down pages); at a hundred runs that is most of a cold
build, and each run is independent, so with more than one CPU the runs are
spread over worker processes (spawned: no fork of a process that may hold
vl-convert's threads). Small builds (the tests, a rebuild after adding one
run) stay in-process, since starting a worker costs about half a second.
Results are put back in the order the in-process build produces them, so
the report and every page are the same either way: the build process runs
the very same `aggregate_one` and `runpages.write_run` when it does a run
itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from rundir.contract import REQUESTS_FILE
from site_builder import chartkit, charts, load, runpages
from site_builder.aggregate import AggregateCache, aggregate_run
from site_builder.pages import Pages
from site_builder.render import Renderer
from site_builder.sitewriter import AGGREGATES, SiteWriter, Tally

JOBS_ENV = "SPEED_MATRIX_JOBS"  # worker processes; 1 keeps everything in-process
MIN_PARALLEL_BYTES = 48 << 20  # raw chunks to aggregate before workers pay off (~3 real runs)


def default_jobs() -> int:
    """$SPEED_MATRIX_JOBS, else the CPUs this process may use (at most 4)."""
    try:
        env = int(os.environ.get(JOBS_ENV, ""))
        return max(1, env)
    except ValueError:
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def worth_it(paths: list[Path]) -> bool:
    """True when the runs to aggregate hold enough raw data to keep workers busy
    (and spawned workers can start: a __main__ read from stdin cannot be re-run)."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file is not None and not Path(main_file).is_file():
        return False
    total = 0
    for p in paths:
        try:
            total += (Path(p) / REQUESTS_FILE).stat().st_size
        except OSError:
            continue
    return total >= MIN_PARALLEL_BYTES


class Pool:
    """A spawn-based process pool for aggregate_one and render_one tasks.

    When workers cannot run (e.g. a __main__ that spawn cannot re-import) the
    pool is marked broken and `result` returns None: the caller then does
    that task in-process, so a build never fails for want of workers.
    """

    def __init__(self, jobs: int) -> None:
        self.executor = ProcessPoolExecutor(max_workers=jobs,
                                            mp_context=multiprocessing.get_context("spawn"))
        self.broken = False

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)

    def submit(self, fn: Any, *args: Any) -> Future:
        return self.executor.submit(fn, *args)

    def result(self, future: Future) -> Any:
        """The task's result, or None when the pool broke (do the task in-process)."""
        try:
            return future.result()
        except BrokenProcessPool:
            self.broken = True
            return None


def aggregate_one(path: str, digest: str, cache_folder: str,
                  keep_details: bool = False) -> tuple[str, Any, Any]:
    """Read, validate and aggregate one run, caching its aggregate (details on disk).

    The one way a run is aggregated, in a worker or in the build process.
    Returns ("ok", info, aggregate) or ("error", one line, None). A worker
    drops the details (the parent needs cells only, and pages read details
    from the cache); the build process keeps them (keep_details) to render
    the run's pages without reading them back.
    """
    src = load.RunSource(Path(path), digest)
    try:
        data = load.load_run(src)
        agg = aggregate_run(data, digest)
        AggregateCache(Path(cache_folder)).put(agg)
    except Exception as exc:  # one bad run must never stop the others
        return "error", load.one_line(exc, src.path), None
    if not keep_details:
        agg.details = {}
    return "ok", data.info, agg


_STATE: dict[str, Any] = {}


def render_one(out: str, cache_dir: str, assets: dict[str, str], version: str, fp: str,
               run: Any) -> Tally:
    """Write one run's pages and files; return what was written, for the parent to merge."""
    key = (out, cache_dir, tuple(sorted(assets.items())), version)
    if _STATE.get("key") != key:  # once per worker and build
        renderer = Renderer()
        renderer.keep_compiled(Path(cache_dir), fp)  # the build process cleans the cache
        chartkit.keep(chartkit.kept_path(Path(cache_dir), fp))
        _STATE.update(key=key, pages=Pages(renderer, charts.SvgRenderer(), assets, version),
                      writer=SiteWriter(Path(out), Path(cache_dir)),
                      cache=AggregateCache(Path(cache_dir) / AGGREGATES))
    writer = _STATE["writer"]
    writer.reset()
    runpages.write_run(writer, _STATE["pages"], run, fp, _STATE["cache"])
    chartkit.save_kept()  # only when this run made a template the file lacks
    return writer.tally()
