"""The builder at site size: N light measured runs (docs/performance.md, "Builder scale").

    python benchmarks/builder_scale.py --site-runs 1000 [--workdir DIR] [--baseline REV|DIR]
    python benchmarks/builder_scale.py --site-runs 200 --quick      # to try (one repeat)
    python benchmarks/builder_scale.py --site-runs 1000 --prices    # and priced, side by side

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
all it references, each gzipped on its own); what the explorer (explore.html
and its data) loads for its default view and for "All runs" at that context
(`explorer_weight`), beside explore.html and the whole data/explore.js. With a baseline the same builds
by that version of the builder run alternated with this tree's, on the same
runs, each into its own site folder. With a price table (`--prices`) each tree
also builds a second site with it (build-site --prices), alternated with its
plain one: "ours+prices" beside "ours".
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from site_builder.sitewriter import default_cache_dir
from tests.support.many_runs import GPUS, make_many_runs
from tests.support.weight import first_screen

SHAPE = {"contexts": [1024, 4096, 16384], "concurrency": [1, 4, 16],
         "prefill_contexts": [1024, 4096], "duration_s": 1.0}
GOALS = {"add_one_s": 5.0, "noop_s": 3.0, "cold_s": 600.0, "peak_rss_mb": 4096.0}
REPO = Path(__file__).resolve().parents[1]
GENERATOR_FILES = ("tests/support/many_runs.py", "tests/support/synthetic_runs.py")

Build = Callable[[Path, Path, Path, Path | None], dict[str, Any]]


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


def every_gpu_prices(path: Path) -> Path:
    """A price table (docs/prices.example.yaml's format) pricing every GPU the
    generated runs use, so the run an add-one build adds is on a priced GPU:
    the case that re-rendered every page (issue 30 item 13). Example prices."""
    rows = "".join(f"  - gpu: {name}\n    usd_per_gpu_hour: {1.5 + k * 0.75:.2f}\n"
                   f"    date: 2026-11-01\n    source: \"benchmark example, not a quote\"\n"
                   for k, (name, *_) in enumerate(GPUS))
    path.write_text(f"prices:\n{rows}", "utf-8")
    return path


def _weigh(paths: list[Path]) -> tuple[int, int]:
    """Raw and gzip (level 9, each file on its own, as a server sends it) bytes."""
    raw = gz = 0
    for p in paths:
        data = p.read_bytes()
        raw += len(data)
        gz += len(gzip.compress(data, 9))
    return raw, gz


def explorer_weight(site: Path) -> dict[str, list[int]]:
    """[raw, gzip] bytes of the explorer with its data: explore.html and the whole
    data/explore.js (what every view loaded before the split), and what the page loads
    for its default view (explore.html, which holds the index, and the default
    family's file at the default context) and for "All runs" at that context."""
    page = site / "explore.html"
    html = page.read_text("utf-8")
    whole = site / "data" / "explore.js"
    out = {"whole": list(_weigh([page, whole]))}
    found = re.search(r'<script type="application/json" id="explore-index">(.*?)</script>',
                      html, re.S)
    if found is None:  # one file for every view
        out["default_view"] = out["all_runs"] = out["whole"]
        return out
    data = json.loads(found[1])
    view = data["default"]
    files = [c for c in data["chunks"] if c["context"] == view["context"]]
    own = [site / c["id"] for c in files if c["family"] == view["family"] or view["family"] == "*"]
    out["default_view"] = list(_weigh([page, *own]))
    out["all_runs"] = list(_weigh([page, *(site / c["id"] for c in files)]))
    return out


def _fresh(site: Path) -> None:
    shutil.rmtree(site, ignore_errors=True)
    shutil.rmtree(default_cache_dir(site), ignore_errors=True)


def _peak(b: dict[str, Any]) -> float:
    return max(b["maxrss_mb"], b["tree_rss_mb"])


def site_scale(root: Path, n: int, build: Build, baseline: Path | None = None,
               repeats: int = 3, prices: Path | None = None) -> dict[str, Any]:
    """Cold, no-op, add-one and remove-one builds of n runs by this tree (and the
    baseline, alternated, build by build; with `prices`, each tree's priced site
    too); the figures and goals_met (this tree's, and with prices its priced site's)."""
    data, extra, gen_s = generate(root, n)
    print(f"{n} + 1 light measured runs ready in {gen_s:.1f} s under {data.parent}", flush=True)
    repos = {"ours": snapshot(root / "ours-tree"),
             **({"baseline": baseline} if baseline is not None else {})}
    trees: dict[str, tuple[Path, Path | None]] = {}
    for name, repo in repos.items():
        trees[name] = (repo, None)
        if prices is not None:
            trees[f"{name}+prices"] = (repo, prices)
    sites = {name: data.parent / f"site-{name}" for name in trees}
    builds: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {"cold": [], "noop": [], "add_one": [], "remove_one": []} for name in trees}
    load = [os.getloadavg()[0]]

    def each(kind: str) -> None:
        for name, (repo, table) in trees.items():
            b = build(data, sites[name], repo, table)
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
    explorer = {name: explorer_weight(site) for name, site in sites.items()}
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
        fig |= {f"{kind}_inner_s": round(statistics.median(b["inner_s"] for b in bs), 2)
                for kind, bs in got.items()}  # build_site alone: less start-up noise
        fig["peak_rss_mb"] = round(max(_peak(b) for bs in got.values() for b in bs), 1)
        fig["first_screen_raw_kb"] = round(weight[name]["raw"] / 1024, 1)
        fig["first_screen_gzip_kb"] = round(weight[name]["gzip"] / 1024, 1)
        for part, (raw, gz) in explorer[name].items():
            fig[f"explorer_{part}_raw_kb"] = round(raw / 1024, 1)
            fig[f"explorer_{part}_gzip_kb"] = round(gz / 1024, 1)
        out[name] = fig
    for name in ("ours", "ours+prices"):
        if name in out:
            key = "goals_met" if name == "ours" else "goals_met_priced"
            out[key] = {k: out[name][k] <= v if k.endswith("_s") else out[name][k] < v
                        for k, v in GOALS.items()}
    out["prices"] = str(prices) if prices is not None else None
    out["load_avg_1m"] = [round(min(load), 2), round(max(load), 2)]
    out["cpus"] = os.cpu_count()
    _table(out, list(trees))
    return out


def _raw_mb(data: Path) -> float:
    return sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20


def _table(out: dict[str, Any], names: list[str]) -> None:
    rows = [("cold build", "cold_s", "s"), ("no-op rebuild", "noop_s", "s"),
            ("one run added", "add_one_s", "s"), ("one run removed", "remove_one_s", "s"),
            ("one run added, in build_site", "add_one_inner_s", "s"),
            ("peak memory", "peak_rss_mb", "MB"),
            ("index first screen, gzip", "first_screen_gzip_kb", "KB"),
            ("index first screen, raw", "first_screen_raw_kb", "KB"),
            ("explorer + whole data, gzip", "explorer_whole_gzip_kb", "KB"),
            ("explorer + whole data, raw", "explorer_whole_raw_kb", "KB"),
            ("explorer default view, gzip", "explorer_default_view_gzip_kb", "KB"),
            ("explorer default view, raw", "explorer_default_view_raw_kb", "KB"),
            ("explorer all runs, gzip", "explorer_all_runs_gzip_kb", "KB"),
            ("explorer all runs, raw", "explorer_all_runs_raw_kb", "KB")]
    print(f"\n{out['site_runs']} runs (medians)        " + "  ".join(f"{n:>14s}" for n in names))
    for label, key, unit in rows:
        print(f"{label:30s}" + "  ".join(f"{out[n][key]:>11.1f} {unit:2s}" for n in names))
    if "ours+prices" in out:  # what a price table costs each build, this tree
        print("priced / plain (this tree): " + ", ".join(
            f"{kind} {out['ours+prices'][f'{kind}_s'] / out['ours'][f'{kind}_s']:.2f}x"
            for kind in ("cold", "noop", "add_one", "remove_one")))
    print(f"goals met (this tree): {out['goals_met']}"
          + (f"; priced: {out['goals_met_priced']}" if "goals_met_priced" in out else "")
          + f"; load average {out['load_avg_1m']}", flush=True)
