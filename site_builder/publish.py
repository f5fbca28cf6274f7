"""Build the site: load -> aggregate (cached) -> render -> write, with progress.

Every file is written atomically (temporary sibling + rename) and only when
its content changed, so a host syncing the folder uploads only what moved.
Pages of a run are keyed by the run's content digest and the builder's own
fingerprint: a rebuild after adding one run renders that run's pages and
the site-wide ones, nothing else. Links are relative everywhere, so the
folder works from file://, GitHub Pages, S3 or nginx as it is.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rundir.contract import RUN_YAML
from site_builder import charts as ch
from site_builder import load
from site_builder.aggregate import AggregateCache, aggregate_run, code_salt
from site_builder.pages import ModelGroup, Pages
from site_builder.render import Renderer, json_script, templates_dir
from site_builder.views import RunView

CACHE_DIR = ".cache"
STATIC = "static"


def version() -> str:
    try:
        return metadata.version("speed-matrix")
    except metadata.PackageNotFoundError:  # running from a checkout without install
        return "dev"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class BuildReport:
    """What a build did: published runs, one line per bad run, cache use."""

    out: Path
    published: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    aggregated: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    written: int = 0
    unchanged: int = 0
    removed: int = 0


class SiteWriter:
    """Atomic, change-only writes into the output folder, with stale-file cleanup."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.manifest_path = self.out / CACHE_DIR / "manifest.json"
        try:
            self.old: dict[str, str] = json.loads(self.manifest_path.read_text("utf-8"))
        except (OSError, ValueError):
            self.old = {}
        self.new: dict[str, str] = {}
        self.written = self.unchanged = self.removed = 0

    def _atomic(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()

    def is_current(self, rel: str, key: str) -> bool:
        """True (and recorded) when rel was written from the same key and is still there."""
        if self.old.get(rel) == key and (self.out / rel).is_file():
            self.new[rel] = key
            self.unchanged += 1
            return True
        return False

    def write(self, rel: str, data: str | bytes, key: str | None = None) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        path = self.out / rel
        self.new[rel] = key or _sha(raw)
        try:
            same = path.stat().st_size == len(raw) and path.read_bytes() == raw
        except OSError:
            same = False
        if same:
            self.unchanged += 1
            return
        self._atomic(path, raw)
        self.written += 1

    def copy(self, rel: str, src: Path, key: str) -> None:
        if self.is_current(rel, key):
            return
        self.write(rel, Path(src).read_bytes(), key)

    def keep(self, rel: str) -> None:
        """Keep a file written outside the manifest's keys (e.g. the Vega bundle)."""
        self.new[rel] = self.old.get(rel, "kept")

    def finish(self) -> None:
        """Delete files the previous build wrote and this one did not; save the manifest."""
        for rel in sorted(set(self.old) - set(self.new)):
            path = self.out / rel
            if path.is_file():
                path.unlink()
                self.removed += 1
                parent = path.parent
                while parent != self.out and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
                    parent = parent.parent
        self._atomic(self.manifest_path, json.dumps(self.new, indent=0, sort_keys=True).encode())


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True, disable=not enabled,
    )


def write_assets(writer: SiteWriter, folder: Path) -> dict[str, str]:
    """Copy static files under content-hashed names; vendor the Vega bundle once."""
    static = folder / STATIC
    names = {"css": "style.css", "site_js": "site.js", "table_js": "table.js",
             "compare_js": "compare.js", "favicon": "favicon.svg"}
    assets = {}
    for key, name in names.items():
        data = (static / name).read_bytes()
        stem, ext = name.rsplit(".", 1)
        rel = f"{STATIC}/{stem}.{_sha(data)[:10]}.{ext}"
        writer.write(rel, data)
        assets[key] = rel
    bundle = f"{STATIC}/{ch.bundle_name()}"
    if (writer.out / bundle).is_file():
        writer.keep(bundle)
    else:
        writer.write(bundle, ch.bundle_js())
    assets["vega"] = bundle
    return assets


def _fingerprint(renderer: Renderer, assets: dict[str, str], methodology: str) -> str:
    h = hashlib.sha256(version().encode())
    here = Path(__file__).parent
    for path in [*sorted(here.glob("*.py")), *renderer.fingerprint_files()]:
        h.update(path.name.encode() + path.read_bytes())
    h.update(json.dumps(assets, sort_keys=True).encode() + methodology.encode())
    return h.hexdigest()


def methodology_text(path: Path | None = None) -> str:
    """docs/methodology.md when the project has one, else the builder's own text."""
    candidates = [path] if path else [templates_dir().parent / "docs" / "methodology.md",
                                      Path.cwd() / "docs" / "methodology.md"]
    for p in candidates:
        if p is not None and p.is_file():
            return p.read_text(encoding="utf-8")
    return (templates_dir() / "methodology.md").read_text(encoding="utf-8")


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def _load_all(sources: list[load.RunSource], cache: AggregateCache, report: BuildReport,
              progress: Progress) -> list[tuple[load.RunSource, Any, Any]]:
    task = progress.add_task("Reading runs", total=len(sources))
    loaded = []
    for src in sources:
        try:
            agg = cache.get(src.digest)
            if agg is not None:
                info = load.load_info(src)
                report.reused.append(info.run_id)
            else:
                data = load.load_run(src)
                info = data.info
                agg = aggregate_run(data, src.digest)
                cache.put(agg)
                report.aggregated.append(info.run_id)
            loaded.append((src, info, agg))
        except Exception as exc:  # one bad run must never stop the others
            report.errors.append(load.one_line(exc, src.path))
        progress.advance(task)
    return loaded


def _views(loaded: list[tuple[load.RunSource, Any, Any]], report: BuildReport) -> list[RunView]:
    seen: dict[str, Path] = {}
    kept = []
    for src, info, agg in loaded:
        if info.run_id in seen:
            report.errors.append(f"{src.path / RUN_YAML}: field run_id: {info.run_id!r} is "
                                 f"also used by {seen[info.run_id]}")
            continue
        seen[info.run_id] = src.path
        kept.append((src, info, agg))
    slugs = load.unique_slugs([info.run_id for _, info, _ in kept])
    views = []
    for (src, info, agg), slug in zip(kept, slugs, strict=True):
        raw = [(p.name, p.stat().st_size) for p in src.files()]
        views.append(RunView(info, agg, slug, source_dir=str(src.path), raw_files=raw))
    return views


def _models(views: list[RunView]) -> list[ModelGroup]:
    groups: dict[str, list[RunView]] = {}
    for v in views:
        groups.setdefault(v.model.lower(), []).append(v)
    names = sorted(groups)
    slugs = load.unique_slugs([groups[n][0].model for n in names], fallback="model")
    out = []
    for name, slug in zip(names, slugs, strict=True):
        runs = sorted(groups[name], key=lambda r: (r.hardware.lower(), r.run_id))
        for r in runs:
            r.model_slug = slug
        out.append(ModelGroup(runs[0].model, slug, runs))
    return out


def _write_run(writer: SiteWriter, pages: Pages, run: RunView, fp: str, src_dir: Path) -> None:
    base = f"runs/{run.slug}"
    key = _sha(f"{fp}|{run.agg.digest}|{run.slug}|{run.model_slug}".encode())
    if not writer.is_current(f"{base}/index.html", key):
        writer.write(f"{base}/index.html", pages.run_page(run), key)
    cell_rels = [f"{base}/cells/{x.key}.html" for x in run.agg.cells
                 if x.has_detail and x.key in run.agg.details]
    if not all(writer.is_current(rel, key) for rel in cell_rels):
        for name, html in pages.cell_pages(run):
            writer.write(f"{base}/cells/{name}", html, key)
    records = run.cell_records()
    writer.write(f"{base}/cells.csv", _csv(records))
    writer.write(f"{base}/cells.json", _json({"run": {**run.record(), "info": run.info.to_dict()},
                                              "cells": records}))
    writer.write(f"{base}/data.js", "(window.SPEED_MATRIX_RUNS = window.SPEED_MATRIX_RUNS || {})"
                 f"[{json_script(run.slug)}] = {json_script(run.compare_data())};\n")
    for name, _size in run.raw_files:
        writer.copy(f"{base}/raw/{name}", src_dir / name, _sha(f"{run.agg.digest}|{name}".encode()))


def build_site(
    data_dir: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    methodology: Path | None = None,
) -> BuildReport:
    """Build (or update) the site in out_dir from the runs under data_dir.

    Bad runs are reported in BuildReport.errors (one line each) and left out;
    the good ones are published regardless. Raises load.LoadError when the
    data folder is missing or holds no run directory at all.
    """
    out = Path(out_dir)
    report = BuildReport(out)
    sources = load.discover(Path(data_dir), salt=code_salt(), exclude=out)
    out.mkdir(parents=True, exist_ok=True)
    cache = AggregateCache(out / CACHE_DIR / "aggregates")
    writer = SiteWriter(out)
    renderer = Renderer()
    svg = ch.SvgRenderer()
    with _progress(progress) as bar:
        loaded = _load_all(sources, cache, report, bar)
        views = _views(loaded, report)
        if not views:
            return report
        models = _models(views)
        assets = write_assets(writer, renderer.folder)
        text = methodology_text(methodology)
        fp = _fingerprint(renderer, assets, text)
        pages = Pages(renderer, svg, assets, version())
        task = bar.add_task("Rendering runs", total=len(views))
        for run in views:
            _write_run(writer, pages, run, fp, Path(run.source_dir))
            report.published.append(run.run_id)
            bar.advance(task)
        task = bar.add_task("Site pages", total=len(models) + 6)
        for m in models:
            writer.write(f"models/{m.slug}.html", pages.model_page(m))
            bar.advance(task)
        records = [r.record() for r in views]
        index = {"generator": f"speed-matrix {version()}", "runs": records}
        writer.write("index.html", pages.index_page(views, models))
        writer.write("compare.html", pages.compare_page(views))
        writer.write("downloads.html", pages.downloads_page(views))
        writer.write("methodology.html", pages.methodology_page(text))
        writer.write("index.json", _json(index))
        writer.write("index.csv", _csv(records))
        writer.write("data/index.js", f"window.SPEED_MATRIX_INDEX = {json_script(index)};\n")
        bar.advance(task, 6)
    writer.finish()
    cache.prune({s.digest for s in sources})
    report.written, report.unchanged, report.removed = (
        writer.written, writer.unchanged, writer.removed)
    return report
