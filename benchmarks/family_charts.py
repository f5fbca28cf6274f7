"""How long a big family page takes to draw its charts (issue 21: under 1 s at 100 runs).

    python benchmarks/family_charts.py [--runs N] [--loads K] [--throttle R]
                                       [--site LABEL=DIR ...] [--keep DIR]

Without --site, builds a site of N synthetic runs (tests/support/many_runs.py;
the default 340 puts about 100 runs in the largest family) with this tree and
times its largest family page. Each --site LABEL=DIR adds an already built
site (another tree's build of the same runs, e.g. the previous commit's), so
the figures are measured side by side, the loads alternating between sites.

A load: a fresh browser context (nothing cached), served over http from
127.0.0.1, headless Debian Chromium at 1440×900, optionally with the CPU
throttled R× (Chrome DevTools' Emulation.setCPUThrottlingRate, a phone's
speed); timed on the page's own clock from navigation start until every
chart on the page has been drawn by vega-embed (each <figure class="chart">
is "is-live"), and until the charts on the first screen are. Medians of K
loads. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from site_builder.publish import build_site  # noqa: E402
from site_builder.serve import serve_in_thread  # noqa: E402
from tests.support.chromium import ARGS, CHROMIUM  # noqa: E402
from tests.support.many_runs import make_many_runs  # noqa: E402

ALL_LIVE_JS = """() => {
  const figs = Array.from(document.querySelectorAll('figure.chart'));
  return figs.length > 0 && figs.every(f => f.classList.contains('is-live'))
    ? performance.now() : false;
}"""
# The charts whose top is inside the first screen (what a reader sees first).
FIRST_LIVE_JS = """() => {
  const figs = Array.from(document.querySelectorAll('figure.chart'))
    .filter(f => f.getBoundingClientRect().top < window.innerHeight);
  if (!figs.length) return -1;  // no chart on the first screen
  return figs.every(f => f.classList.contains('is-live')) ? performance.now() : false;
}"""
GOAL_S = 1.0


def largest_family(site: Path) -> Path:
    """The family page with the most runs (one side-by-side matrix per run)."""
    pages = sorted((site / "models").glob("*.html"))
    return max(pages, key=lambda p: p.read_text("utf-8").count('class="mini-matrix"'))


def _load(browser: Any, url: str, throttle: float) -> tuple[float, float, int]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        if throttle > 1:
            cdp = context.new_cdp_session(page)
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": throttle})
        first = None
        page.goto(url, wait_until="commit")
        while True:
            if first is None:
                first = page.evaluate(FIRST_LIVE_JS) or None
            done = page.evaluate(ALL_LIVE_JS)
            if done:
                first = first if first is not None else done
                break
            page.wait_for_timeout(20)
        n = page.locator("figure.chart").count()
        return (None if first < 0 else first / 1000), done / 1000, n
    finally:
        context.close()


def measure(sites: dict[str, Path], loads: int, throttle: float) -> dict[str, Any]:
    """Median first-screen and all-charts times per site, loads alternating."""
    from playwright.sync_api import sync_playwright

    servers = {label: serve_in_thread(root, port=0) for label, root in sites.items()}
    urls = {}
    for label, root in sites.items():
        page = largest_family(root)
        urls[label] = f"{servers[label][1]}{page.relative_to(root).as_posix()}"
    times: dict[str, list[tuple[float, float, int]]] = {label: [] for label in sites}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                for label in sites:  # a warm-up load each (the browser's own start)
                    _load(browser, urls[label], throttle)
                for _ in range(loads):
                    for label in sites:
                        times[label].append(_load(browser, urls[label], throttle))
            finally:
                browser.close()
    finally:
        for server in servers.values():
            server[0].shutdown()
    out: dict[str, Any] = {}
    for label, ts in times.items():
        page = largest_family(sites[label])
        out[label] = {"page": page.name,
                      "runs": page.read_text("utf-8").count('class="mini-matrix"'),
                      "charts": ts[0][2],
                      "first_screen_s": (None if ts[0][0] is None else
                                         round(statistics.median(t[0] or 0 for t in ts), 3)),
                      "all_charts_s": round(statistics.median(t[1] for t in ts), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=340)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--throttle", type=float, default=1.0)
    ap.add_argument("--site", action="append", default=[], metavar="LABEL=DIR")
    ap.add_argument("--keep", type=Path, help="build this tree's site here (kept)")
    args = ap.parse_args()
    sites: dict[str, Path] = {}
    for item in args.site:
        label, sep, path = item.partition("=")
        if not sep or not (Path(path) / "models").is_dir():
            sys.exit(f"--site {item!r}: expected LABEL=DIR of a built site (with models/)")
        sites[label] = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        if not (root / "site" / "models").is_dir():
            make_many_runs(root / "data", args.runs, seed=1)
            report = build_site(root / "data", root / "site", cache_dir=root / "cache", jobs=1)
            if report.errors:
                sys.exit(f"build failed: {report.errors[:3]}")
        sites["this tree"] = root / "site"
        result = measure(sites, args.loads, args.throttle)
    for label, r in result.items():
        first = ("no chart on it" if r["first_screen_s"] is None
                 else f"{r['first_screen_s']:.3f} s")
        print(f"{label:>12}: {r['page']} ({r['runs']} runs, {r['charts']} charts) "
              f"first screen {first}, all charts {r['all_charts_s']:.3f} s"
              f" (CPU throttle {args.throttle:g}x)")
    base = result.get("this tree", {}).get("all_charts_s")
    for label, r in result.items():
        if label != "this tree" and base:
            print(f"{label} / this tree, all charts: {r['all_charts_s'] / base:.2f}x")
    print(json.dumps({"throttle": args.throttle, "goal_s": GOAL_S, "sites": result}))


if __name__ == "__main__":
    main()
