"""Build the site: load -> aggregate (cached) -> render -> write, with progress.

Every file is written atomically (temporary sibling + rename) and only when
its content changed, so a host syncing the folder uploads only what moved.
Pages of a run are keyed by the run's content digest and the builder's own
fingerprint: a rebuild after adding one run renders that run's pages and
the site-wide ones, nothing else. Links are relative everywhere, so the
folder works from file://, GitHub Pages, S3 or nginx as it is.

Big builds spread the per-run work (aggregate, render) over worker processes
(`workers`); small ones do it here, through the same functions
(`workers.aggregate_one`, `runpages.write_run`), into the same `SiteWriter`.
A rebuild stays fast at hundreds of real-size runs: file digests are reused
while a run's files keep their size, times and inode (digests.json in the
build cache, which lives outside the published folder: `sitewriter`),
cached runs load only their cells (their drill-down details are read only
when their pages are rendered), model pages are keyed like run pages, and
raw files are copied by the kernel (shutil.copyfile), not through Python.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rundir.contract import ContractError
from rundir.slugs import unique_slugs
from rundir.validate import duplicate_id_line, same_source_line  # one wording with bench validate
from site_builder import (
    buildstate,
    chartkit,
    charts,
    explore,
    explorecharts,
    exploredata,
    load,
    rankings,
    runpages,
    runrows,
    series,
    statusstyle,
    toolpages,
    workers,
)
from site_builder.aggregate import AggregateCache, code_salt
from site_builder.fingerprint import code_files, fingerprint
from site_builder.glossary import body_without_glossary, methodology_path
from site_builder.names import distinct_names
from site_builder.pages import Pages
from site_builder.prices import PriceTable, page_key
from site_builder.render import Renderer, json_script
from site_builder.sitewriter import (
    AGGREGATES,
    DIGESTS,
    SiteError,
    SiteWriter,
    default_cache_dir,
    digest,
    save,
)
from site_builder.slo import DEFAULT as DEFAULT_SLO
from site_builder.slo import RunSlo, Slo
from site_builder.views import FamilyGroup, RunView, family_groups

STATIC = "static"
# What a build writes at the top of --out: a --data folder there would be overwritten.
BUILDER_NAMES = ("runs", "models", STATIC, "data", "index.html", "compare.html",
                 "explore.html", "downloads.html", "methodology.html", "index.json", "index.csv",
                 ".cache", "series")


def version() -> str:
    try:
        return metadata.version("speed-matrix")
    except metadata.PackageNotFoundError:  # running from a checkout without install
        return "dev"


@dataclass
class BuildReport:
    """What a build did: published runs, one line per bad run, cache use."""

    out: Path
    published: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one line each, nothing skipped
    aggregated: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    written: int = 0
    unchanged: int = 0
    removed: int = 0


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True, disable=not enabled,
    )


def write_assets(writer: SiteWriter, folder: Path, traffic: bool = False,
                 drafts: bool = False) -> dict[str, str]:
    """Copy static files under content-hashed names; vendor the Vega bundle once.
    `traffic`: some run of the site has traffic cells (their status rules join the
    stylesheet; without, it is as it was before them); `drafts`: some run has a
    speculative-decoding acceptance (the compare page's table of it)."""
    static = folder / STATIC
    names = {"css": "style.css", "site_js": "site.js", "table_js": "table.js",
             "compare_js": "compare.js", "oppoint_js": "oppoint.js",
             "explore_js": "explore.js", "slo_js": "slo.js", "tails_js": "tails.js",
             "address_js": "address.js", "rules_js": "rules.js", "favicon": "favicon.svg"}
    if traffic or drafts:  # the compare page's traffic tables: only a site with such cells has them
        names["compare_traffic_js"] = "compare_traffic.js"
    assets = {}
    for key, name in names.items():
        data = statusstyle.static_bytes(static / name, traffic)  # style.css: with its status rules
        stem, ext = name.rsplit(".", 1)
        rel = f"{STATIC}/{stem}.{digest(data)[:10]}.{ext}"
        writer.write(rel, data)
        assets[key] = rel
    bundle = f"{STATIC}/{charts.bundle_name()}"
    if (writer.out / bundle).is_file():
        writer.keep(bundle)
    else:
        writer.write(bundle, charts.bundle_js())
    assets["vega"] = bundle
    return assets


def page_fingerprint(renderer: Renderer, assets: dict[str, str], methodology: str,
                     views: list[RunView]) -> str:
    """What every cached page depends on, by site_builder.fingerprint's rule: the code
    (rundir/, site_builder/), the templates and static files, the asset names, the
    methodology text and the SLO's limits (run pages print meets/misses under them).
    Not the prices: a page keys on those it shows (`prices.page_key`: a run page and
    its downloads on its run's, a family page and its ranking data on their runs'); in
    here, one run added on a priced GPU re-rendered every page (issue 30 item 13)."""
    limits = next((f"slo={v.slo.slo.spec}" for v in views if v.slo is not None), "")
    return fingerprint([*code_files(), *renderer.fingerprint_files()], version(),
                       json.dumps(assets, sort_keys=True), methodology, limits)


def methodology_text(path: Path | None = None) -> str:
    """The methodology page's text: the given file, else the builder's own
    methodology (never the current folder's docs/); its Glossary section is
    left to the page's list of terms."""
    return body_without_glossary((path or methodology_path()).read_text(encoding="utf-8"))


def _load_all(sources: list[load.RunSource], cache: AggregateCache, report: BuildReport,
              progress: Progress, pool: workers.Pool | None = None,
              index: buildstate.RunIndex | None = None,
              ) -> list[tuple[load.RunSource, Any, Any]]:
    task = progress.add_task("Reading runs", total=len(sources))
    done: list[tuple[str, Any, Any] | Future] = []
    for src in sources:
        try:
            if src.problem:  # never read (nor hand to a worker) a run refused at discovery
                raise ContractError(src.problem)
            hit = index.get(src.digest) if index is not None else None
            if hit is not None:  # one file for all runs
                done.append(("indexed", *hit))
                progress.advance(task)
                continue
            agg = cache.get(src.digest, details=False)  # details: read if pages are rendered
            if agg is not None:
                done.append(("reused", load.load_info(src), agg))
            elif pool is not None and not pool.broken:
                future = pool.submit(workers.aggregate_one, str(src.path), src.digest,
                                     str(cache.folder))
                future.add_done_callback(lambda _: progress.advance(task))
                done.append(future)
                continue
            else:
                done.append(workers.aggregate_one(str(src.path), src.digest, str(cache.folder),
                                                  keep_details=True))
        except Exception as exc:  # one bad run must never stop the others
            done.append(("error", load.one_line(exc, src.path), None))
        progress.advance(task)
    loaded = []
    for src, item in zip(sources, done, strict=True):  # in source order, like in-process
        if isinstance(item, Future):
            item = pool.result(item) if pool is not None else None
            item = item or workers.aggregate_one(  # no worker: do it here
                str(src.path), src.digest, str(cache.folder), keep_details=True)
        kind, info, agg = item
        if kind == "error":
            report.errors.append(info)
            continue
        (report.aggregated if kind == "ok" else report.reused).append(info.run_id)
        if index is not None and kind != "indexed":
            index.put(info, agg)
        loaded.append((src, info, agg))
    return loaded


def _views(loaded: list[tuple[load.RunSource, Any, Any]], report: BuildReport) -> list[RunView]:
    seen: dict[str, Path] = {}
    kept = []
    twice = load.same_source([(src.path, info, agg) for src, info, agg in loaded])
    for src, info, agg in loaded:
        if src.path in twice:  # one measurement, imported twice: published once
            report.warnings.append(same_source_line(src.path, twice[src.path]))
            continue
        if info.run_id in seen:
            report.errors.append(duplicate_id_line(src.path, info.run_id, seen[info.run_id]))
            continue
        seen[info.run_id] = src.path
        kept.append((src, info, agg))
    slugs = unique_slugs([info.run_id for _, info, _ in kept])
    views = []
    for (src, info, agg), slug in zip(kept, slugs, strict=True):
        try:
            raw = [(p.name, p.stat().st_size) for p in src.files()]
        except OSError as exc:  # a file removed since discovery
            report.errors.append(f"{src.path}: cannot read ({exc.strerror or exc})")
            continue
        views.append(RunView(info, agg, slug, source_dir=str(src.path), raw_files=raw))
    for view, name in zip(views, distinct_names(views), strict=True):
        view.name = name
    return views


def check_folders(data: Path, out: Path, cache_dir: Path) -> None:
    """Refuse folder layouts where a build would publish or delete what it must not:
    --out at or inside --data (the site would be read back as data, or data
    overwritten), --data where the builder writes inside --out, the cache inside
    --out (it would be published). SiteError, one line."""
    data_real, out_real, cache_real = (Path(p).resolve() for p in (data, out, cache_dir))
    if out_real == data_real:
        raise SiteError(f"--out {out} is the --data folder: choose an output folder "
                        "outside the run directories")
    if data_real in out_real.parents:
        raise SiteError(f"--out {out} is inside --data {data}: the site would be searched "
                        "for runs and could overwrite them; choose an --out outside --data")
    if out_real in data_real.parents:
        top = data_real.relative_to(out_real).parts[0]
        if top in BUILDER_NAMES:
            raise SiteError(f"--data {data} is inside --out {out} under {top}/, which a build "
                            "rewrites and cleans; keep the run directories elsewhere")
    if cache_real == out_real or out_real in cache_real.parents:
        raise SiteError(f"--cache {cache_dir} is inside --out {out}: the cache holds local "
                        "paths and must not be published")


def _render_runs(views: list[RunView], writer: SiteWriter, pages: Pages, fp: str,
                 cache: AggregateCache, pool: workers.Pool | None, assets: dict[str, str],
                 report: BuildReport, bar: Progress) -> list[RunView]:
    """Write every run's pages; a run that fails to render is reported in one line,
    its files removed, and left out. Returns the runs that were written."""
    task = bar.add_task("Rendering runs", total=len(views))
    futures = [pool.submit(workers.render_one, str(writer.out), str(cache.folder.parent),
                           assets, version(), fp, run)
               if pool is not None and not pool.broken else None for run in views]
    done = []
    for run, future in zip(views, futures, strict=True):
        try:
            got = pool.result(future) if pool is not None and future is not None else None
            if got is None:  # in-process (small build, or no worker could start)
                runpages.write_run(writer, pages, run, fp, cache)
            else:
                writer.merge(got)
        except SiteError:
            raise  # the output folder itself: no other run can be written either
        except Exception as exc:  # one run's pages must never stop the others
            what = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            report.errors.append(f"{run.source_dir}: could not render its pages ({what})")
            writer.forget(f"runs/{run.slug}/")
        else:
            done.append(run)
            report.published.append(run.run_id)
        bar.advance(task)
    return done


def _sources(data_dir: Path, out: Path, cache_dir: Path,
             allow_edited: bool) -> tuple[dict, list[load.RunSource]]:
    """(known file digests, run sources): the folders checked first, then the runs
    found, each run's digest reused from the last build while its files are unchanged."""
    if Path(data_dir).is_dir():
        check_folders(Path(data_dir), out, cache_dir)
    try:
        known = json.loads((cache_dir / DIGESTS).read_text("utf-8"))
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    sources = load.discover(Path(data_dir), salt=code_salt(), exclude=out, known=known,
                            allow_edited=allow_edited)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SiteError(f"--out {out}: cannot create ({exc.strerror or exc})") from None
    return known, sources


def _start_bundle(out: Path) -> threading.Thread | None:
    """Start building the Vega bundle when --out lacks it: vl-convert takes seconds
    and releases the GIL, so it runs alongside the aggregation instead of after it."""
    if (out / STATIC / charts.bundle_name()).is_file():
        return None
    bundle = threading.Thread(target=charts.bundle_js, daemon=True)
    bundle.start()
    return bundle


def _published_only(views: list[RunView], models: list[FamilyGroup],
                    done: list[RunView]) -> tuple[list[RunView], list[FamilyGroup]]:
    """Runs and models less the runs that failed to render. Slugs stay as they
    were given (pages already written link to them)."""
    if len(done) == len(views):
        return views, models
    kept = [FamilyGroup(m.name, m.slug, [r for r in m.runs if r in done]) for m in models]
    return done, [m for m in kept if m.runs]


def _explore_templates(writer: SiteWriter, fp: str, cost: bool) -> Any:
    """The explorer's chart templates (Altair compiles them in ~1 s, whatever the site's
    size), kept in the build cache under the page fingerprint and Altair's version."""
    try:
        altair = metadata.version("altair")
    except metadata.PackageNotFoundError:
        altair = "-"
    name = digest(f"{fp}|{altair}|{cost}".encode())[:24]
    path = writer.manifest_path.parent / f"explore-templates-{name}.json"
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        pass
    got = explorecharts.templates(cost=cost)
    for old in path.parent.glob("explore-templates-*.json"):
        old.unlink(missing_ok=True)
    save(path, json.dumps(got, allow_nan=False).encode())
    return got


def _site_pages(writer: SiteWriter, pages: Pages, views: list[RunView],
                models: list[FamilyGroup], fp: str, text: str, bar: Progress) -> None:
    """The pages and files that cover every run: model pages (keyed, so only a
    model whose runs changed is rendered again), index, compare, explorer,
    downloads, methodology, the index data and the explorer's."""
    task = bar.add_task("Site pages", total=len(models) + 8)
    for m in models:
        rel = f"models/{m.slug}.html"
        key = digest("|".join([fp, m.slug, *(f"{r.agg.digest}:{r.slug}:{page_key(r.price)}"
                                             for r in m.runs)]).encode())  # its rankings' costs
        if not writer.is_current(rel, key):
            writer.write(rel, pages.model_page(m), key)
        bar.advance(task)
    records = [runrows.index_record(r) for r in views]
    index = {"generator": f"speed-matrix {version()}", "runs": records}
    series.write_pages(writer, pages, series.attach(views), fp)
    rankings.write_data(writer, views, models, fp)  # data/oppoint/<family>.js, on demand
    for rel, page in pages.index_pages(views, models):  # index.html, index-2.html, …, its rows
        writer.write(rel, page)
    found = toolpages.groups(views)  # one server, several tools: only where there is such a setup
    for g in found:  # keyed by its runs' digests and slugs: its runs' rows are read only when changed
        key = digest("|".join([fp, g.slug, *(f"{r.agg.digest}:{r.slug}:{r.name}" for r in g.runs)]).encode())
        if not writer.is_current(g.page, key):
            writer.write(g.page, pages.tool_compare_page(g, toolpages.sections(g)), key)
    writer.write("compare.html", pages.compare_page(views, found))
    writer.write("downloads.html", pages.downloads_page(views))
    if not writer.is_current("methodology.html", key := digest(f"{fp}|methodology".encode())):
        writer.write("methodology.html", pages.methodology_page(text), key)  # fp holds the text
    writer.write("index.json", runpages.json_text(index))
    writer.write("index.csv", runpages.csv_text(records))
    writer.write("data/index.js", f"window.SPEED_MATRIX_INDEX = {json_script(index)};\n")
    data = explore.explore_data(views)
    data |= {"templates": _explore_templates(writer, fp, cost=bool(data["prices"])),
             "colors": chartkit.LINE_COLORS, "rest_color": chartkit.REST_COLOR}
    index, scripts = exploredata.scripts(data)  # an index, the points by family and context
    writer.write("explore.html", pages.explore_page(data | {"explore_index": index},
                                                    traffic=any(v.agg.traffic for v in views),
                                                    rate=any(v.agg.rate for v in views)))
    for rel, text in scripts:
        writer.write(rel, text)
    bar.advance(task, 8)


def _publish(views: list[RunView], writer: SiteWriter, cache: AggregateCache,
             pool: workers.Pool | None, bundle: threading.Thread | None,
             methodology: Path | None, report: BuildReport, bar: Progress) -> bool:
    """Write the site for the loaded runs: assets, each run's pages (in workers
    when there is a pool), then the site-wide pages over the runs that rendered.
    False when no run could be rendered (nothing site-wide is written then)."""
    models = family_groups(views)
    series.attach(views)  # before the run pages: they link their series' neighbours
    toolpages.attach(views, toolpages.groups(views))  # and their tools' comparison page
    if bundle is not None:
        bundle.join()
    renderer = Renderer()
    assets = write_assets(writer, renderer.folder, any(v.agg.traffic or v.agg.rate for v in views),
                          any(v.agg.spec for v in views))
    text = methodology_text(methodology)
    fp = page_fingerprint(renderer, assets, text, views)
    renderer.keep_compiled(cache.folder.parent, fp, clean=True)  # Jinja's, in the build cache
    chartkit.keep(chartkit.kept_path(cache.folder.parent, fp, clean=True))  # and Altair's
    pages = Pages(renderer, charts.SvgRenderer(), assets, version())
    try:
        done = _render_runs(views, writer, pages, fp, cache, pool, assets, report, bar)
        views, models = _published_only(views, models, done)
        if not views:
            return False
        _site_pages(writer, pages, views, models, fp, text, bar)
    finally:
        chartkit.save_kept()
        chartkit.keep(None)
    return True


def _build_key(data_dir: Path, out: Path, cache_dir: Path, methodology: Path | None,
               prices: PriceTable | None, slo: Slo | None,
               sources: list[load.RunSource]) -> str:
    """Everything a build's output is made from (buildstate.BuildState): the builder's
    code, templates and static files, version and libraries, the methodology, the
    prices, the SLO, the folders, and each run's path and digest (its files' bytes)."""
    code = fingerprint([*code_files(), *Renderer().fingerprint_files()], version())
    libraries = []
    for name in ("altair", "jinja2", "vl-convert-python", "markdown-it-py", "pyarrow", "numpy"):
        try:
            libraries.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            libraries.append(f"{name}=-")
    return buildstate.build_key(
        code, libraries, charts.bundle_name(), methodology_text(methodology), repr(prices),
        (slo or DEFAULT_SLO).spec, slo is not None,
        *(str(Path(p).resolve()) for p in (data_dir, out, cache_dir)),
        [[str(s.path), s.digest, s.problem] for s in sources])


def _replay(report: BuildReport, last: dict[str, Any], files: int) -> BuildReport:
    """The report of a build that found nothing to do: the last one's runs, all reused."""
    report.published = list(last.get("published", []))
    report.warnings = list(last.get("warnings", []))
    report.reused = list(last.get("runs", []))
    report.unchanged = files
    return report


def _finish(writer: SiteWriter, cache: AggregateCache, sources: list[load.RunSource],
            known: dict, cache_dir: Path, report: BuildReport) -> None:
    """Delete what the last build wrote and this one did not, save the manifest and
    the digests, drop cached aggregates of runs that are gone; fill in the report."""
    writer.finish()
    if writer.ignored:
        shown = ", ".join(repr(r) for r in writer.ignored[:3])
        more = f" and {len(writer.ignored) - 3} more" if len(writer.ignored) > 3 else ""
        report.warnings.append(f"{writer.manifest_path}: ignored {len(writer.ignored)} "
                               f"path(s) outside --out or inside --data: {shown}{more}")
    cache.prune({s.digest for s in sources})
    save(cache_dir / DIGESTS, json.dumps(known, sort_keys=True).encode())
    report.written, report.unchanged, report.removed = (
        writer.written, writer.unchanged, writer.removed)


def build_site(
    data_dir: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    methodology: Path | None = None,
    jobs: int | None = None,
    cache_dir: Path | None = None,
    prices: PriceTable | None = None,
    slo: Slo | None = None,
    allow_edited: bool = False,
) -> BuildReport:
    """Build (or update) the site in out_dir from the runs under data_dir.

    Bad runs (failing to load or to render) are reported in BuildReport.errors
    (one line each) and left out; the good ones are published regardless.
    Raises load.LoadError when the data folder is missing or holds no run
    directory at all, SiteError when the folders overlap dangerously or the
    output cannot be written. `jobs` caps the worker processes (default:
    workers.default_jobs(); used only for builds with enough raw data to
    aggregate). The cache (default: sitewriter.default_cache_dir) is never
    inside out_dir. `prices` (build-site --prices) gives each run its GPU's price,
    hence a cost; without it no page shows a cost. `slo` (build-site --slo) is the
    latency limits the pages judge cells by; without it, slo.DEFAULT. It is applied
    after aggregation (never part of a run's cached aggregate). `allow_edited`
    (build-site --allow-edited) publishes runs whose files differ from their
    manifest, marked as edited; without it they are refused in one line.
    """
    out = Path(out_dir)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir(out)
    report = BuildReport(out)
    known, sources = _sources(Path(data_dir), out, cache_dir, allow_edited)
    cache = AggregateCache(cache_dir / AGGREGATES)
    writer = SiteWriter(out, cache_dir, protect=(Path(data_dir),))
    state = buildstate.BuildState(cache_dir)
    key = _build_key(Path(data_dir), out, cache_dir, methodology, prices, slo, sources)
    last = None if writer.ignored else state.unchanged(key, out, writer.old, writer.manifest_path)
    if last is not None:  # the same inputs, and the site as the last build left it
        return _replay(report, last, len(writer.old))
    index = buildstate.RunIndex(cache_dir, cache)
    bundle = _start_bundle(out)
    jobs = workers.default_jobs() if jobs is None else jobs
    todo = [s.path for s in sources if not cache.has(s.digest)]
    pool = workers.Pool(jobs) if jobs > 1 and workers.worth_it(todo) else None
    with pool or nullcontext(), _progress(progress) as bar:
        views = _views(_load_all(sources, cache, report, bar, pool, index), report)
        for v in views:
            v.price = prices.for_gpu(v.info.hardware.gpu_name) if prices else None
            v.slo = RunSlo(slo or DEFAULT_SLO, given=slo is not None)
        if not views or not _publish(views, writer, cache, pool, bundle, methodology,
                                     report, bar):
            return report
    about_runs = list(report.warnings)  # not _finish's, about the last manifest
    _finish(writer, cache, sources, known, cache_dir, report)
    index.save({s.digest for s in sources})
    state.save(key, out, writer.new, writer.manifest_path,
               {"published": report.published, "warnings": about_runs,
                "errors": report.errors, "runs": report.reused + report.aggregated},
               writer.seen)
    return report
