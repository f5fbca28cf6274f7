"""The builder at site size: N light measured runs (docs/performance.md, "Builder scale").

    python benchmarks/builder_scale.py --site-runs 1000 [--workdir DIR] [--baseline REV|DIR]
    python benchmarks/builder_scale.py --site-runs 200 --quick      # to try (one repeat)

A real site holds hundreds of runs over a few model families, GPUs, engines and
versions, measured again on later dates (tests/support/many_runs.py writes that
shape). Here every run is measured, with raw chunks, but a light one: 9 decode
cells (3 contexts x 3 concurrencies) and 2 prefill cells, a one-second window,
~40 KB of raw data, so a thousand fit in ~40 MB and ~1 min to generate (a
real-size run, benchmarks/_synthetic.py, is 18 MB and 3 s). The runs are
generated once per --workdir. Timed, each build in a fresh interpreter
(`builder_scale.build`, imports included): a cold build, a rebuild with
nothing changed (no-op), a rebuild after adding one run (and one after
removing it again); peak memory (ru_maxrss and the sampled process tree);
the index's first screen (tests/support/weight.first_screen: index.html and
all it references, each gzipped on its own). With a baseline the same builds
by that version of the builder run alternated with this tree's, on the same
runs, each into its own site folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from site_builder.sitewriter import default_cache_dir
from tests.support.many_runs import make_many_runs
from tests.support.weight import first_screen

SHAPE = {"contexts": [1024, 4096, 16384], "concurrency": [1, 4, 16],
         "prefill_contexts": [1024, 4096], "duration_s": 1.0}
GOALS = {"add_one_s": 5.0, "noop_s": 3.0, "cold_s": 600.0, "peak_rss_mb": 4096.0}
REPO = Path(__file__).resolve().parents[1]
GENERATOR_FILES = ("tests/support/many_runs.py", "tests/support/synthetic_runs.py")

Build = Callable[[Path, Path, Path], dict[str, Any]]


def generate(root: Path, n: int) -> tuple[Path, Path, float]:
    """(data folder of n runs, one more run kept apart, seconds): reused when present."""
    folder = root / f"site-runs-{n}"
    data, pending = folder / "data", folder / "pending"
    marker = folder / "generated.json"
    h = hashlib.sha256(json.dumps(SHAPE, sort_keys=True).encode())
    for name in GENERATOR_FILES:
        h.update((REPO / name).read_bytes())
    want = {"runs": n, "generator": h.hexdigest()[:16]}
    t = time.perf_counter()
    extra = pending / f"many-{n:04d}"
    if (data / extra.name).exists():  # an interrupted add-one build left it in
        shutil.move(data / extra.name, extra)
    if not (marker.is_file() and json.loads(marker.read_text()) == want):
        shutil.rmtree(folder, ignore_errors=True)
        make_many_runs(data, n + 1, seed=21, measured=n + 1, measured_shape=SHAPE)
        pending.mkdir(parents=True)
        shutil.move(data / extra.name, extra)
        marker.write_text(json.dumps(want))
    return data, extra, time.perf_counter() - t


def snapshot(dest: Path) -> Path:
    """This tree's builder as it is now (rundir/, site_builder/, templates/, the
    methodology), copied: the builds then run one version of the code even while
    the checkout is being edited (any edit under rundir/ or site_builder/ changes
    the aggregate cache's salt, so every run would be aggregated again)."""
    shutil.rmtree(dest, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("rundir", "site_builder", "templates"):
        shutil.copytree(REPO / name, dest / name, ignore=skip)
    (dest / "docs").mkdir()
    shutil.copy2(REPO / "docs" / "methodology.md", dest / "docs" / "methodology.md")
    return dest


def _fresh(site: Path) -> None:
    shutil.rmtree(site, ignore_errors=True)
    shutil.rmtree(default_cache_dir(site), ignore_errors=True)


def _peak(b: dict[str, Any]) -> float:
    return max(b["maxrss_mb"], b["tree_rss_mb"])


def site_scale(root: Path, n: int, build: Build, baseline: Path | None = None,
               repeats: int = 3) -> dict[str, Any]:
    """Cold, no-op, add-one and remove-one builds of n runs by this tree (and the
    baseline, alternated, build by build); the figures and goals_met (this tree's)."""
    data, extra, gen_s = generate(root, n)
    print(f"{n} + 1 light measured runs ready in {gen_s:.1f} s under {data.parent}", flush=True)
    trees = {"ours": snapshot(root / "ours-tree"),
             **({"baseline": baseline} if baseline is not None else {})}
    sites = {name: data.parent / f"site-{name}" for name in trees}
    builds: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {"cold": [], "noop": [], "add_one": [], "remove_one": []} for name in trees}
    load = [os.getloadavg()[0]]

    def each(kind: str) -> None:
        for name, repo in trees.items():
            b = build(data, sites[name], repo)
            assert b["errors"] == [], (name, kind, b["errors"][:3])
            builds[name][kind].append(b)
            print(f"  {name:8s} {kind:10s} {b['wall_s']:8.2f} s ({b['inner_s']:.2f} in build_site),"
                  f" aggregated {b['aggregated']}, peak {_peak(b):.0f} MB, load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            load.append(os.getloadavg()[0])

    for site in sites.values():
        _fresh(site)
    each("cold")
    weight = {name: first_screen(site) for name, site in sites.items()}
    for _ in range(repeats):
        each("noop")
    for _ in range(max(1, repeats - 1)):
        shutil.move(extra, data / extra.name)
        try:
            each("add_one")
        finally:
            shutil.move(data / extra.name, extra)
        each("remove_one")
    out: dict[str, Any] = {"site_runs": n, "raw_mb_per_run": round(_raw_mb(data) / n, 3)}
    for name in trees:
        got = builds[name]
        fig = {f"{kind}_s": round(statistics.median(b["wall_s"] for b in bs), 2)
               for kind, bs in got.items()}
        fig |= {f"{kind}_all_s": [b["wall_s"] for b in bs] for kind, bs in got.items()}
        fig["peak_rss_mb"] = round(max(_peak(b) for bs in got.values() for b in bs), 1)
        fig["first_screen_raw_kb"] = round(weight[name]["raw"] / 1024, 1)
        fig["first_screen_gzip_kb"] = round(weight[name]["gzip"] / 1024, 1)
        out[name] = fig
    ours = out["ours"]
    out["goals_met"] = {k: ours[k] <= v if k.endswith("_s") else ours[k] < v
                        for k, v in GOALS.items()}
    out["load_avg_1m"] = [round(min(load), 2), round(max(load), 2)]
    out["cpus"] = os.cpu_count()
    _table(out, list(trees))
    return out


def _raw_mb(data: Path) -> float:
    return sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20


def _table(out: dict[str, Any], names: list[str]) -> None:
    rows = [("cold build", "cold_s", "s"), ("no-op rebuild", "noop_s", "s"),
            ("one run added", "add_one_s", "s"), ("one run removed", "remove_one_s", "s"),
            ("peak memory", "peak_rss_mb", "MB"),
            ("index first screen, gzip", "first_screen_gzip_kb", "KB"),
            ("index first screen, raw", "first_screen_raw_kb", "KB")]
    print(f"\n{out['site_runs']} runs (medians)  " + "  ".join(f"{n:>12s}" for n in names))
    for label, key, unit in rows:
        print(f"{label:26s}" + "  ".join(f"{out[n][key]:>9.1f} {unit:2s}" for n in names))
    print(f"goals met (this tree): {out['goals_met']}; load average {out['load_avg_1m']}",
          flush=True)
