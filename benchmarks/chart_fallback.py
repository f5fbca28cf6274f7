"""The no-JS chart fallback: hand-written SVG against vl-convert (docs/performance.md,
"The no-JS fallback: drawn in Python, not by vl-convert").

    python benchmarks/chart_fallback.py [--runs N] [--workdir DIR] [--keep]

Every chart on a page is a Vega-Lite spec (drawn by the browser) plus a static
SVG inside its element for readers without JavaScript. The product draws that
SVG in Python (`site_builder/fallback.py`); the alternative is to have
vl-convert draw it from the very spec the browser gets, so a chart exists once.
Pages are cached per run (`runpages.write_run`), so either way only changed runs
are drawn. This script builds the same sites both ways, side by side in one
run, so both meet the same load:

- sites: the bundled sample (data/) and N real-size synthetic runs (60 cells,
  ~3 million chunks each; benchmarks/_synthetic.py; default 3);
- per site and renderer: a cold build (fresh output and cache), then an
  incremental build after adding one real-size run;
- each build `build_site` in a fresh interpreter, in-process (jobs=1, so the
  alternative renderer, patched in by this script only, draws every chart);
  the renderers alternate first place from one site to the next.

Reported per build: wall time, time spent drawing fallbacks and charts drawn
(so the cost per chart), and the HTML written (bytes of every page, raw and
each gzipped at level 9, and of the fallback SVGs alone); then the ratios
vl-convert / Python. The machine is shared: ratios from the same run are the
figures to read, not absolute times. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks._synthetic import make_large_run, run_identity  # noqa: E402

RENDERERS = ("python", "vl-convert")
CHILD = """
import sys
from benchmarks.chart_fallback import child_build
child_build(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
"""


# --------------------------------------------------------------------------
# in the build's interpreter: the renderer, timed
# --------------------------------------------------------------------------


def vl_convert_svg(spec: dict[str, Any]) -> str:
    """vl-convert's SVG of a page's spec, at the fixed width the Python fallback uses
    (a container width has no container here)."""
    import vl_convert as vlc

    from site_builder import chartkit

    spec = json.loads(json.dumps(spec))  # the page keeps its own copy
    if spec.get("width") == chartkit.WIDTH:
        spec["width"] = chartkit.FIXED_WIDTH
    return vlc.vegalite_to_svg(spec, vl_version=chartkit.VL_VERSION)


def child_build(renderer: str, data: str, out: str, stats_path: str) -> None:
    """One build_site with the chosen fallback renderer; its stats written as JSON."""
    from site_builder import charts, fallback
    from site_builder.publish import build_site

    stats = {"charts": 0, "draw_s": 0.0, "svg_bytes": 0, "dropped": 0}
    base = charts.SvgRenderer

    class Timed(base):  # type: ignore[misc,valid-type]
        def fill(self, chs: list[Any]) -> list[Any]:
            t = time.perf_counter()
            if renderer == "python":
                got = super().fill(chs)
            else:
                got = [ch for ch in chs if ch is not None]
                for ch in got:
                    svg = vl_convert_svg(ch.spec)
                    ch.svg = "" if fallback.UNSAFE.search(svg) else svg
            stats["draw_s"] += time.perf_counter() - t
            stats["charts"] += len(got)
            stats["svg_bytes"] += sum(len(ch.svg.encode()) for ch in got)
            stats["dropped"] += sum(not ch.svg for ch in got)
            return got

    charts.SvgRenderer = Timed  # publish looks it up when it builds its Pages
    t = time.perf_counter()
    report = build_site(Path(data), Path(out), jobs=1, cache_dir=Path(out + "-cache"))
    stats |= {"inner_s": time.perf_counter() - t, "errors": report.errors,
              "aggregated": len(report.aggregated)}
    Path(stats_path).write_text(json.dumps(stats))


# --------------------------------------------------------------------------
# in this process: builds, page weight, ratios
# --------------------------------------------------------------------------


def html_weight(site: Path) -> dict[str, int]:
    """Bytes of every HTML page of a site: raw, and each gzipped on its own (level 9)."""
    raw = gz = pages = 0
    for page in site.rglob("*.html"):
        b = page.read_bytes()
        raw, gz, pages = raw + len(b), gz + len(gzip.compress(b, 9)), pages + 1
    return {"html_bytes": raw, "html_gzip_bytes": gz, "pages": pages}


def build(renderer: str, data: Path, out: Path) -> dict[str, Any]:
    """One build in a fresh interpreter: wall time, drawing stats, HTML weight."""
    stats_path = out.parent / f"{out.name}.stats.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    got = subprocess.run([sys.executable, "-c", CHILD, renderer, str(data), str(out),
                          str(stats_path)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if got.returncode:
        raise RuntimeError(f"{renderer} build failed: {got.stderr[-2000:]}")
    stats = json.loads(stats_path.read_text())
    assert not stats["errors"], stats["errors"]
    per_chart = stats["draw_s"] / stats["charts"] if stats["charts"] else 0.0
    return {"wall_s": round(wall, 2), "draw_s": round(stats["draw_s"], 3),
            "charts": stats["charts"], "ms_per_chart": round(per_chart * 1000, 2),
            "svg_bytes": stats["svg_bytes"], "dropped": stats["dropped"],
            "aggregated": stats["aggregated"], **html_weight(out)}


def site_pair(name: str, data: Path, extra: Path, root: Path, order: tuple[str, ...]
              ) -> dict[str, dict[str, Any]]:
    """Cold build, then one run added, by each renderer in turn (fresh folders each)."""
    out: dict[str, dict[str, Any]] = {}
    added = data / extra.name
    for renderer in order:
        site = root / f"site-{name}-{renderer}"
        for p in (site, Path(f"{site}-cache"), added):
            shutil.rmtree(p, ignore_errors=True)
        cold = build(renderer, data, site)
        shutil.copytree(extra, added)
        try:
            incr = build(renderer, data, site)
        finally:
            shutil.rmtree(added, ignore_errors=True)
        out[renderer] = {"cold": cold, "incremental": incr}
        for kind, b in (("cold", cold), ("one run added", incr)):
            print(f"{name:9s} {renderer:10s} {kind:13s} {b['wall_s']:7.2f} s wall, "
                  f"{b['draw_s']:6.2f} s drawing {b['charts']:4d} charts "
                  f"({b['ms_per_chart']:.2f} ms each; {b['dropped']} dropped), "
                  f"HTML {b['html_bytes'] / 1024:,.0f} KB raw {b['html_gzip_bytes'] / 1024:,.0f} KB "
                  f"gzip ({b['pages']} pages; fallback SVGs {b['svg_bytes'] / 1024:,.0f} KB)",
                  flush=True)
        shutil.rmtree(site, ignore_errors=True)
        shutil.rmtree(Path(f"{site}-cache"), ignore_errors=True)
    return out


def ratios(pair: dict[str, dict[str, Any]]) -> dict[str, float]:
    """vl-convert / Python, for each build and figure."""
    py, vl = pair["python"], pair["vl-convert"]
    out = {}
    for kind in ("cold", "incremental"):
        for key in ("wall_s", "ms_per_chart", "html_bytes", "html_gzip_bytes", "svg_bytes"):
            if py[kind][key]:
                out[f"{kind}_{key}"] = round(vl[kind][key] / py[kind][key], 2)
        out[f"{kind}_extra_s"] = round(vl[kind]["wall_s"] - py[kind]["wall_s"], 2)
    return out


def generate(root: Path, n: int) -> tuple[Path, Path]:
    """n real-size runs under root/synthetic and the run to add under root/extra."""
    data, extra = root / "synthetic", root / "extra" / "run-extra"
    if not (data.is_dir() and len(list(data.iterdir())) == n and extra.is_dir()):
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(extra, ignore_errors=True)
        for i in range(n):
            make_large_run(data / f"run-{i:03d}", run_id=f"run-{i:03d}", seed=i, info=run_identity(i))
        make_large_run(extra, run_id="run-extra", seed=10_000, info=run_identity(n))
    return data, extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="real-size runs in the synthetic site")
    ap.add_argument("--workdir", type=Path, help="keep generated runs here (reused next time)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="chart-fallback-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        synthetic, extra = generate(root, args.runs)
        print(f"generated {args.runs} + 1 real-size runs in {time.perf_counter() - t:.1f} s",
              flush=True)
        sample = root / "sample"
        shutil.rmtree(sample, ignore_errors=True)
        shutil.copytree(REPO / "data", sample)
        result: dict[str, Any] = {"runs": args.runs, "cpus": os.cpu_count()}
        for i, (name, data) in enumerate((("sample", sample), ("synthetic", synthetic))):
            pair = site_pair(name, data, extra, root, RENDERERS[::-1] if i % 2 else RENDERERS)
            result[name] = {**pair, "vl_over_python": ratios(pair)}
            print(f"{name}: vl-convert / Python {json.dumps(result[name]['vl_over_python'])}",
                  flush=True)
        result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
