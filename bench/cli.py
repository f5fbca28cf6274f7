"""`bench`: the collector's command line.

Errors a user can cause (bad flag, no server, wrong key, bad run card, a
second writer, a full disk) end with one line on stderr, never a
traceback, and an exit status a script can act on (see `bench run --help`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from bench import __version__
from bench.core.limits import out_of_memory
from bench.core.plan import PlanError
from bench.distributed.peer_auth import secret_problem
from bench.options import GroupedCommand, build_run_options, option_groups, run_options
from bench.params import api_key_problem
from bench.run.progress import Progress
from bench.run.runner import FlagError, RunError, RunOptions, run_benchmark, secrets_of
from bench.validate_cmd import validate_cmd
from importer.cli import import_cmd
from rundir import download, upload
from rundir.clierrors import EXIT_FAILED, EXIT_USAGE, OneLineGroup, fail
from rundir.contract import ContractError
from rundir.redact import redact
from rundir.storage import StorageError, secrets

EXIT_STOPPED = EXIT_FAILED  # the run stopped early, or could not start
EXIT_ERROR_CELLS = 3  # the run finished, and some cells ended Error


@click.group(cls=OneLineGroup)
@click.version_option(__version__, prog_name="bench")
def main() -> None:
    """Measure LLM inference servers over a context × concurrency matrix."""


RUN_HELP = """Sweep the matrix against a running server and write a run directory.

\b
Examples:
  bench run --base-url http://127.0.0.1:8000 --dry-run   # the plan only
  bench run --base-url http://127.0.0.1:8000             # the full default matrix
  bench run --base-url http://gpu-box:8000 --contexts 8k,32k,max \\
            --concurrency 1,8,64 --duration 30 --run-card card.yaml --out runs/my-run
  bench run --base-url http://127.0.0.1:8000 --resume runs/my-run   # after Ctrl-C
  bench run --base-url http://127.0.0.1:8000 --resume runs/my-run --concurrency 128
  bench run --base-url http://127.0.0.1:8000 --resume runs/my-run --retry-errors
  build-site --data runs --out site && build-site --out site serve  # then look

\b
Exit status:
  0  every planned cell was measured and none ended Error
  1  the run stopped (server gone, wrong API key, Ctrl-C, disk full,
     another bench run holds the directory ...): measured cells are
     kept; continue with --resume R
  2  a bad flag, or flags that contradict each other or R's run.yaml
  3  the run finished but some cells ended Error (the last line of
     stderr counts them; --resume R --retry-errors measures them again)
"""


@main.command("run", help=RUN_HELP, cls=GroupedCommand, groups=option_groups())
@run_options()
def run_cmd(**kw: Any) -> None:
    if kw["shard"] is not None and (problem := secret_problem()):
        fail(f"--shard: {problem}", EXIT_USAGE)  # names the variable, never its value
    api_key = kw["api_key"] or os.environ.get("OPENAI_API_KEY") or None
    if not kw["api_key"] and api_key and (problem := api_key_problem(api_key)):
        fail(f"OPENAI_API_KEY (the default of --api-key): {problem}", EXIT_USAGE)
    ctx = click.get_current_context()
    given = {name: value for name, value in kw.items()
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                                   ParameterSource.ENVIRONMENT)}
    # the key alone, for redacting an error raised while the options are built (a run card)
    secrets = secrets_of(RunOptions(base_url=kw["base_url"], api_key=api_key))
    try:
        opts = build_run_options(kw, given, api_key=api_key)
        result = run_benchmark(opts, Progress())
    except (FlagError, PlanError, ContractError) as exc:
        fail(redact(str(exc), secrets), EXIT_USAGE)
    except RunError as exc:
        fail(redact(str(exc), secrets), EXIT_STOPPED)
    except OSError as exc:  # a safety net: every known write is worded where it happens
        fail(redact(f"{exc.filename or 'I/O'}: {exc.strerror or exc}", secrets), EXIT_STOPPED)
    except MemoryError:  # before the sweep (which names the run directory to resume)
        fail(out_of_memory(), EXIT_STOPPED)
    if result is None:
        return
    click.echo(str(result.run_dir))
    if result.errors:
        sys.exit(EXIT_ERROR_CELLS)


main.add_command(import_cmd)
main.add_command(validate_cmd)

UPLOAD_HELP = """Validate a run directory and store it under URL/<key>/ (key: its run id as a slug).

\b
URL is any fsspec URL: s3://bucket/prefix, gs://bucket/prefix, file:///srv/runs.
Credentials come from the usual variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_ENDPOINT_URL for an S3-compatible server ...), never from the command line.
The files go first and upload-manifest.json last; a cut upload is completed by
running the same command again; a different run stored under the same id is
never overwritten.

\b
Exit status:
  0  uploaded, or already there (the same run: nothing written)
  1  the run is invalid, the bucket holds a different run with its id, or
     the upload stopped (run it again)
"""


@main.command("upload", help=UPLOAD_HELP)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("url")
def upload_cmd(run_dir: Path, url: str) -> None:
    try:
        out = upload.upload(run_dir, url)
    except StorageError as exc:
        fail(redact(str(exc), secrets(url)), EXIT_FAILED)
    except OSError as exc:  # reading the run directory
        fail(redact(f"{exc.filename or run_dir}: {exc.strerror or exc}", secrets(url)),
             EXIT_FAILED)
    if out.state == upload.ALREADY:
        click.echo(f"{out.run_id}: already at {out.where} (the same run); nothing written")
    else:
        click.echo(f"{out.run_id}: uploaded to {out.where} ({len(out.sent)} file(s) sent, "
                   f"{len(out.skipped)} already there)")


DOWNLOAD_HELP = """Fetch the run stored at URL into DEST/<key>/, checking every file's sha256.

\b
URL is a stored run's folder, as `bench upload` prints it (STAGING/<key>); the
credentials come from the same variables as for upload. With --manifest FILE
(the upload-manifest.json a pull request adds, docs/publishing-ci.md) the
stored manifest must be the same bytes as FILE, so the run fetched is exactly
the one FILE names. The run appears in DEST only when whole; a folder already
there is never overwritten. Prints the run folder's path on stdout. It
validates nothing: run `bench validate` on that path next.

\b
Exit status:
  0  downloaded, or already there (the same files)
  1  the stored run is not the one the manifest names (a file's sha256 or size
     differs, the stored manifest differs from FILE), DEST/<key> holds another
     run, or the download stopped
"""


@main.command("download", help=DOWNLOAD_HELP)
@click.argument("url")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option("--manifest", "manifest_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="the upload manifest the stored run must match, byte for byte")
def download_cmd(url: str, dest: Path, manifest_file: Path | None) -> None:
    try:
        out = download.download(url, dest, manifest_file)
    except StorageError as exc:
        fail(redact(str(exc), secrets(url)), EXIT_FAILED)
    except OSError as exc:  # writing DEST
        fail(redact(f"{exc.filename or dest}: {exc.strerror or exc}", secrets(url)), EXIT_FAILED)
    click.echo(redact(download.summary(out), secrets(url)), err=True)
    click.echo(str(out.path))


if __name__ == "__main__":
    main()
