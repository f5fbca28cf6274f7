"""`build-site`: build the static site from run directories, or preview it.

    build-site --data data|URL --out site [--skip-invalid] [--cache DIR] [--prices prices.yaml]
               [--slo ttft_p99=2000,tbt_p99=50] [--allow-edited]
    build-site [--out site] serve [--port 8000]
    build-site serve [--out site] [--port 8000]
    build-site publish URL [--out site] [--dry-run]
    build-site cache pull|push URL [--out site] [--cache DIR]

Exit status: 0 when every run was published (or bad ones were skipped with
--skip-invalid), 1 when a run was invalid (failed to load or to render),
there was nothing to publish, or the folders cannot be used (--out inside
--data, a symlink in --out leading elsewhere, an unwritable --out), 2 for a
bad flag (one line naming it, as `bench` does).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from rundir import storage
from rundir.clierrors import EXIT_FAILED, EXIT_USAGE, OneLineGroup, fail
from rundir.redact import redact, redact_url
from site_builder import cachesync, load, prices, publish, remote, slo, sync
from site_builder import serve as serve_mod
from site_builder.sitewriter import SiteError, default_cache_dir


class SloLimits(click.ParamType):
    """`ttft_p99=2000,tbt_p99=50`: latency limits (site_builder/slo.py), read when the
    flag is parsed, so a bad one is one line naming --slo and what was expected."""

    name = "limits"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> slo.Slo:
        if isinstance(value, slo.Slo):
            return value
        try:
            return slo.parse(str(value))
        except slo.SloError as exc:
            self.fail(str(exc), param, ctx)


def _err(message: str) -> None:
    click.echo(f"error: {message}", err=True)


@click.group(cls=OneLineGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data", "data_arg", default="data", show_default=True,
              help="Folder searched (recursively) for run directories, or a storage URL "
                   "(s3://bucket/prefix, gs://..., file:///...) runs were uploaded to with "
                   "bench upload: mirrored into the build cache first (docs/publishing.md).")
@click.option("--out", "out_dir", default="site", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Where the site is written.")
@click.option("--skip-invalid", is_flag=True,
              help="Publish the good runs and exit 0 even when some runs are invalid.")
@click.option("--methodology", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None,
              help="Markdown for the methodology page [default: docs/methodology.md].")
@click.option("--cache", "cache_dir", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="The build cache (never published; must be outside --out) "
                   "[default: .OUT-build-cache beside --out].")
@click.option("--prices", "prices_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="YAML price table (dollars per GPU-hour by GPU name, with date and source; "
                   "see docs/prices.example.yaml): adds $ per 1M output tokens. No table, no cost.")
@click.option("--slo", "limits", default=None, type=SloLimits(),
              help="Latency limits the pages judge cells by, METRIC_LEVEL=MS with METRIC ttft "
                   "or tbt and LEVEL p50, p90, p95, p99 or p99.9 (p99_9), comma-separated "
                   f"[default: {slo.DEFAULT_SPEC}; readers can change them on the page].")
@click.option("--allow-edited", is_flag=True,
              help="Publish runs whose files differ from the sha256 checksums their collector "
                   "recorded (manifest.json), each page saying it was edited after measurement; "
                   "without it such a run is refused in one line.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display and no summary.")
@click.version_option(publish.version(), prog_name="build-site")
@click.pass_context
def main(ctx: click.Context, data_arg: str, out_dir: Path, skip_invalid: bool,
         methodology: Path | None, cache_dir: Path | None, prices_file: Path | None,
         limits: slo.Slo | None, allow_edited: bool, quiet: bool) -> None:
    """Build the Speed test matrix site from the run directories under --data."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        table = prices.load_prices(prices_file) if prices_file is not None else None
    except prices.PriceError as exc:
        fail(f"--prices: {exc}", EXIT_USAGE)
    data_dir = Path(data_arg)
    if not storage.is_url(data_arg) and data_dir.is_file():  # as click.Path words it
        fail(f"--data: Directory '{data_arg}' is a file.", EXIT_USAGE)
    if storage.is_url(data_arg):
        cache_dir = cache_dir if cache_dir is not None else default_cache_dir(out_dir)
        try:
            got = remote.mirror(data_arg, cache_dir)
        except storage.StorageError as exc:
            _err(redact(" ".join(str(exc).split()), storage.secrets(data_arg)))
            ctx.exit(1)
        data_dir = got.folder
        if not quiet:
            click.echo(f"Mirrored {redact_url(data_arg)}: {len(got.fetched)} run(s) fetched "
                       f"({got.files} files), {len(got.unchanged)} unchanged, "
                       f"{len(got.removed)} removed", err=True)
    try:
        report = publish.build_site(data_dir, out_dir, methodology=methodology,
                                    progress=not quiet and sys.stderr.isatty(),
                                    cache_dir=cache_dir, prices=table, slo=limits,
                                    allow_edited=allow_edited)
    except (load.LoadError, SiteError) as exc:
        _err(" ".join(str(exc).split()))
        ctx.exit(1)
    for line in report.warnings:
        click.echo(f"warning: {line}", err=True)
    for line in report.errors:
        if skip_invalid:
            click.echo(f"warning: skipped {line}", err=True)
        else:
            _err(line)
    if not report.published:
        if skip_invalid or not report.errors:  # otherwise the lines above say why
            _err("no valid runs to publish")
        ctx.exit(1)
    if not quiet:
        click.echo(
            f"Published {len(report.published)} run(s) to {report.out}/index.html "
            f"({len(report.aggregated)} aggregated, {len(report.reused)} from cache; "
            f"{report.written} files written, {report.unchanged} unchanged, "
            f"{report.removed} removed)",
            err=True,
        )
    if report.errors and not skip_invalid:
        ctx.exit(1)


def _site_dir(ctx: click.Context, out_dir: Path | None, command: str) -> Path:
    """The built site's folder: --out given before or after the subcommand, not both."""
    parent = ctx.parent
    outer: Path = parent.params["out_dir"] if parent else Path("site")
    outer_given = parent is not None and \
        parent.get_parameter_source("out_dir") is ParameterSource.COMMANDLINE
    if out_dir is not None and outer_given and out_dir != outer:
        fail(f"--out: given twice ({outer} before {command}, {out_dir} after it); give one",
             EXIT_USAGE)
    directory = out_dir if out_dir is not None else outer
    if not directory.is_dir():
        fail(f"--out: {directory}: no such folder; build the site first "
             f"(build-site --out {directory})", EXIT_USAGE)
    return directory


@main.command()
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="The built site (as `build-site --out DIR serve`) [default: site].")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Local port (0: any free one).")
@click.pass_context
def serve(ctx: click.Context, out_dir: Path | None, port: int) -> None:
    """Preview the site built in --out at http://127.0.0.1:PORT/ (local only).

    --out goes before or after `serve`: `build-site serve --out site` and
    `build-site --out site serve` are the same."""
    directory = _site_dir(ctx, out_dir, "serve")
    try:
        serve_mod.serve(directory, port)
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}", EXIT_FAILED)


@main.command("publish")
@click.argument("url")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="The built site (as `build-site --out DIR publish URL`) [default: site].")
@click.option("--dry-run", is_flag=True, help="Print what would be uploaded and removed; change nothing.")
@click.option("--quiet", "-q", is_flag=True, help="No summary.")
@click.pass_context
def publish_cmd(ctx: click.Context, url: str, out_dir: Path | None, dry_run: bool, quiet: bool) -> None:
    """Upload the built site to URL (any fsspec URL: file://, s3://, gs://), changed files only.

    Content types by extension; static/ (content-named) cached a year as immutable,
    everything else `no-cache`; files the last publish had and the site no longer has
    are removed. The manifest of what was published is kept at URL (docs/site.md)."""
    directory = _site_dir(ctx, out_dir, "publish")
    try:
        report = sync.publish_site(directory, url, dry_run=dry_run, say=click.echo)
    except sync.SyncError as exc:
        fail(" ".join(str(exc).split()), EXIT_FAILED)
    if not quiet:
        verb = "Would publish" if dry_run else "Published"
        click.echo(f"{verb} {directory} to {report.url}: {len(report.uploaded)} uploaded, "
                   f"{report.unchanged} unchanged, {len(report.removed)} removed", err=True)


@main.group("cache")
def cache_group() -> None:
    """Keep the build cache and the built site in object storage, for a CI runner that
    starts empty: `pull` before the build, `push` after it (docs/publishing.md)."""


def _cache_command(verb: str, run: Any, text: str) -> None:
    @cache_group.command(verb, help=text)
    @click.argument("url")
    @click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
                  help="The built site, as for the build (or before `cache`) [default: site].")
    @click.option("--cache", "cache_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
                  help="The build cache, as for the build [default: .OUT-build-cache beside --out].")
    @click.option("--quiet", "-q", is_flag=True, help="No summary.")
    @click.pass_context
    def command(ctx: click.Context, url: str, out_dir: Path | None, cache_dir: Path | None,
                quiet: bool) -> None:
        root = ctx.find_root()
        out = out_dir if out_dir is not None else root.params["out_dir"]
        cache = cache_dir or root.params["cache_dir"] or default_cache_dir(out)
        try:
            result = run(url, cache, out)
        except storage.StorageError as exc:
            fail(redact(" ".join(str(exc).split()), storage.secrets(url)), EXIT_FAILED)
        if not quiet:
            click.echo(cachesync.describe(result, verb), err=True)



_cache_command("pull", cachesync.pull,
               "Restore --cache and --out from URL (the files missing or different here), each "
               "checked against its sha256. Nothing stored there yet is not an error.")
_cache_command("push", cachesync.push,
               "Store --cache and --out under URL after a build: the changed packs only, the "
               "index written last.")


if __name__ == "__main__":
    main()
