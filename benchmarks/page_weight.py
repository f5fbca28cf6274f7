"""What a run page costs a reader (docs/performance.md, "Page weight").

    python benchmarks/page_weight.py [--loads N] [--keep DIR] [--index-runs 300,1000]
                                     [--index-only]

Builds a site from the bundled data/ plus one real-size synthetic measured
run (60 cells, ~3 million chunks; benchmarks/_synthetic.py), then reports:

- bytes per run page beyond the shared Vega bundle: the page's HTML, its
  data.js and every stylesheet, script and icon the HTML references except
  the vendored bundle, each gzipped on its own (as a server sends it,
  level 9), raw and gzip; for the synthetic run and the heaviest page;
- the bundle's size, raw and gzip;
- time to render the synthetic run's page in headless Chromium (Debian's
  /usr/bin/chromium through Playwright, never a downloaded browser), served
  over http from 127.0.0.1 in a fresh browser context per load (nothing
  cached): from navigation start until every chart has been drawn by
  vega-embed (each <figure class="chart"> is "is-live"), read from the
  page's own clock; the median of N loads;
- requests to any other origin, counted (and aborted) by request interception;
- the index's first screen at N runs (--index-runs; sites of N synthetic runs,
  tests/support/many_runs.py): index.html and every stylesheet, script and icon
  it references, each gzipped on its own (tests/support/weight.py), in all and
  without the rankings (`oppoint`, `slo-rank` sections: another part of the page);
  the second static page; the rows file table.js loads on demand.

The machine is shared: render times are medians. The last stdout line is
one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks._synthetic import make_large_run  # noqa: E402
from site_builder import indexpages  # noqa: E402
from site_builder.publish import build_site  # noqa: E402
from site_builder.serve import serve_in_thread  # noqa: E402
from tests.support.many_runs import make_many_runs  # noqa: E402
from tests.support.weight import first_screen  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
SLUG = "synthetic-real-size"
GOALS = {"run_page_gzip_kb": 60.0, "render_s": 1.0, "foreign_requests": 0,
         "index_first_screen_gzip_kb": 100.0, "index_first_screen_raw_kb": 600.0}
RANKINGS = ("oppoint", "slo-rank")
_REF = re.compile(r'<(?:link|script)\b[^>]*?\b(?:href|src)="([^"]+)"', re.IGNORECASE)
LIVE_JS = """() => {
  const figs = Array.from(document.querySelectorAll('figure.chart'));
  return figs.length > 0 && figs.every(f => f.classList.contains('is-live'))
    ? performance.now() : false;
}"""


def _gz(data: bytes) -> int:
    return len(gzip.compress(data, 9))


def page_weight(site: Path, page: Path, bundle: str) -> dict[str, Any]:
    """Raw and gzip bytes of a run page and everything it loads, minus the bundle."""
    html = page.read_bytes()
    parts = {page.name: html}
    for ref in _REF.findall(html.decode("utf-8")):
        target = (page.parent / ref).resolve()
        if target.name == bundle or not target.is_file():
            continue
        parts[str(target.relative_to(site.resolve()))] = target.read_bytes()
    data_js = page.parent / "data.js"  # the run's A/B data, loaded by the compare page
    parts.setdefault("data.js", data_js.read_bytes())
    return {"raw_kb": round(sum(len(b) for b in parts.values()) / 1024, 1),
            "gzip_kb": round(sum(_gz(b) for b in parts.values()) / 1024, 1),
            "parts": {k: [len(b), _gz(b)] for k, b in parts.items()}}


def render_times(url: str, loads: int) -> dict[str, Any]:
    """Chromium loads of url: ms until every chart is drawn, requests, foreign requests."""
    from playwright.sync_api import sync_playwright

    origin = urlsplit(url)[:2]
    foreign: list[str] = []
    requests = [0]
    errors: list[str] = []
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            for i in range(loads + 1):  # the first load warms the browser process up
                context = browser.new_context(viewport={"width": 1280, "height": 900})

                def route(r: Any) -> None:
                    requests[0] += 1
                    if urlsplit(r.request.url)[:2] == origin:
                        r.continue_()
                    else:
                        foreign.append(r.request.url)
                        r.abort()

                context.route("**/*", route)
                page = context.new_page()
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.goto(url, wait_until="commit")
                ms = page.wait_for_function(LIVE_JS, polling="raf", timeout=30_000).json_value()
                charts = page.locator("figure.chart").count()
                if i:
                    times.append(ms / 1000)
                context.close()
        finally:
            browser.close()
    return {"render_s": statistics.median(times), "render_runs_s": [round(t, 3) for t in times],
            "charts": charts, "requests": requests[0], "foreign_requests": len(foreign),
            "foreign_urls": foreign[:5], "console_errors": errors[:5]}


def index_weight(root: Path, runs: int) -> dict[str, Any]:
    """Build a site of `runs` synthetic runs; the index's first-screen weight in KB."""
    data, site = root / f"many-{runs}" / "data", root / f"many-{runs}" / "site"
    shutil.rmtree(data.parent, ignore_errors=True)
    make_many_runs(data, runs, seed=3)
    t = time.perf_counter()
    report = build_site(data, site, cache_dir=data.parent / "cache")
    build_s = time.perf_counter() - t
    assert not report.errors, report.errors[:3]
    full, own = first_screen(site), first_screen(site, without=RANKINGS)
    second = first_screen(site, indexpages.page_file(2)) if runs > indexpages.PAGE_SIZE else None
    rows = (site / indexpages.ROWS_FILE).read_bytes()
    kb = lambda b: round(b / 1024, 1)  # noqa: E731
    out = {"runs": runs, "build_s": round(build_s, 1),
           "first_screen_raw_kb": kb(full["raw"]), "first_screen_gzip_kb": kb(full["gzip"]),
           "without_rankings_raw_kb": kb(own["raw"]),
           "without_rankings_gzip_kb": kb(own["gzip"]),
           "index_html_raw_kb": kb(full["parts"]["index.html"][0]),
           "page_2_raw_kb": kb(second["raw"]) if second else None,
           "page_2_gzip_kb": kb(second["gzip"]) if second else None,
           "static_pages": len(list(site.glob("index*.html"))),
           "rows_file_raw_kb": kb(len(rows)), "rows_file_gzip_kb": kb(_gz(rows))}
    print(f"index at {runs} runs (built in {build_s:.0f} s): first screen "
          f"{out['first_screen_raw_kb']} KB raw {out['first_screen_gzip_kb']} KB gzip; without "
          f"the rankings {out['without_rankings_raw_kb']} KB raw "
          f"{out['without_rankings_gzip_kb']} KB gzip; page 2 {out['page_2_raw_kb']} KB raw "
          f"{out['page_2_gzip_kb']} KB gzip; rows file (on demand) "
          f"{out['rows_file_raw_kb']} KB raw {out['rows_file_gzip_kb']} KB gzip", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--loads", type=int, default=5, help="timed page loads (median reported)")
    ap.add_argument("--keep", type=Path, help="build the site here and keep it")
    ap.add_argument("--index-runs", default="300,1000",
                    help="comma-separated site sizes to weigh the index at ('' for none)")
    ap.add_argument("--index-only", action="store_true",
                    help="weigh only the index (no run page, no browser)")
    args = ap.parse_args()
    try:
        sizes = [int(n) for n in args.index_runs.split(",") if n.strip()]
    except ValueError:
        ap.error(f"--index-runs: expected comma-separated run counts, got {args.index_runs!r}")
    if any(n < 1 for n in sizes):
        ap.error(f"--index-runs: each run count must be 1 or more, got {args.index_runs!r}")
    if args.index_only:
        root = args.keep or Path(tempfile.mkdtemp(prefix="page-weight-"))
        try:
            index = [index_weight(root, n) for n in sizes]
        finally:
            if args.keep is None:
                shutil.rmtree(root, ignore_errors=True)
        print(json.dumps({"index": index, "goals_met": _index_goals(index)}))
        return
    if not Path(CHROMIUM).is_file():
        sys.exit(f"{CHROMIUM} not found (apt-get install chromium); no browser is downloaded")
    root = args.keep or Path(tempfile.mkdtemp(prefix="page-weight-"))
    try:
        data, site = root / "data", root / "site"
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(REPO / "data", data)
        t = time.perf_counter()
        chunks = make_large_run(data / SLUG, run_id=SLUG, seed=1)
        gen_s = time.perf_counter() - t
        t = time.perf_counter()
        report = build_site(data, site)
        build_s = time.perf_counter() - t
        assert not report.errors, report.errors
        bundle = next(site.glob("static/vega-*_vega-lite-*_vega-embed-*.js"))
        weights = {p.parent.name: page_weight(site, p, bundle.name)
                   for p in sorted(site.glob("runs/*/index.html"))}
        ours = weights[SLUG]
        heaviest = max(weights, key=lambda k: weights[k]["gzip_kb"])
        print(f"site: {len(weights)} runs built in {build_s:.1f} s (synthetic run: "
              f"{chunks:,} chunks, generated in {gen_s:.1f} s)", flush=True)
        for name, w in weights.items():
            print(f"  {name[:60]:60s} {w['raw_kb']:7.1f} KB raw {w['gzip_kb']:6.1f} KB gzip")
        for part, (raw, gz) in ours["parts"].items():
            print(f"    {part:50s} {raw:8,d} B raw {gz:7,d} B gzip")
        bundle_bytes = bundle.read_bytes()
        server, url = serve_in_thread(site)
        try:
            r = render_times(f"{url}runs/{SLUG}/index.html", args.loads)
        finally:
            server.shutdown()
            server.server_close()
        print(f"render: {r['render_runs_s']} s for {r['charts']} charts; {r['requests']} "
              f"requests, {r['foreign_requests']} to other origins", flush=True)
        index = [index_weight(root, n) for n in sizes]
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    out = {
        "run_page_gzip_kb": ours["gzip_kb"], "run_page_raw_kb": ours["raw_kb"],
        "bundle_gzip_kb": round(_gz(bundle_bytes) / 1024, 1),
        "bundle_raw_kb": round(len(bundle_bytes) / 1024, 1),
        "render_s": round(r["render_s"], 3), "foreign_requests": r["foreign_requests"],
        "render_runs_s": r["render_runs_s"], "requests": r["requests"], "charts": r["charts"],
        "console_errors": r["console_errors"], "heaviest_run_page": heaviest[:60],
        "heaviest_run_page_gzip_kb": weights[heaviest]["gzip_kb"], "chunks": chunks,
        "index": index,
    }
    out["goals_met"] = {"run_page_gzip_kb": out["run_page_gzip_kb"] <= 60.0,
                        "render_s": out["render_s"] < 1.0, "foreign_requests": out[
                            "foreign_requests"] == 0, **_index_goals(index)}
    print(json.dumps(out))


def _index_goals(index: list[dict[str, Any]]) -> dict[str, bool]:
    """The index's goals at every size weighed: the whole first screen, and without the
    rankings (what the index's own pagination answers for)."""
    if not index:
        return {}
    gz, raw = GOALS["index_first_screen_gzip_kb"], GOALS["index_first_screen_raw_kb"]
    return {"index_first_screen": all(i["first_screen_gzip_kb"] <= gz
                                      and i["first_screen_raw_kb"] <= raw for i in index),
            "index_first_screen_without_rankings": all(
                i["without_rankings_gzip_kb"] <= gz and i["without_rankings_raw_kb"] <= raw
                for i in index)}


if __name__ == "__main__":
    main()
