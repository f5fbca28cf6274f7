"""The ``bench validate`` command (added to the ``bench`` group in ``bench/cli.py``).

Why: a run is published by `build-site`, often on another machine, by someone
else; a contributor or a CI job should learn first, in one line per problem,
whether the builder will take it. The checks are the builder's own
(rundir/validate.py), so the lines are the builder's too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rundir.clierrors import EXIT_FAILED, EXIT_OK
from rundir.redact import redact, redact_tree
from rundir.validate import ALLOW_EDITED_FLAG, ERROR, RunReport, validate_paths

VALIDATE_HELP = """Check run directories as build-site would, without building anything.

Each RUN_DIR is a run directory, or a data folder searched as build-site
--data searches it (every run below it). Prints one line per problem,
`LEVEL: FILE: field: message`:

\b
  error    build-site refuses the run with this very line
  warning  build-site publishes the run, but not as stored (a cell whose
           rows contradict its status is published with the status they
           support; an edited run allowed by --allow-edited is marked)

\b
Exit status:
  0  every run validates (warnings allowed unless --strict)
  1  a run has an error (or, with --strict, a warning)
  2  a bad flag
"""


def summary(reports: list[RunReport], strict: bool = False) -> str:
    """The closing line on stderr, so a run that passes says so (stdout: problems only)."""
    bad = sum(not r.ok(strict) for r in reports)
    warned = sum(1 for r in reports for p in r.problems if p.level != ERROR)
    runs = f"{len(reports)} run{'s' if len(reports) != 1 else ''} checked"
    if not bad:
        return f"{runs}: all would build" + (f" ({warned} warning{'s' if warned != 1 else ''})"
                                             if warned else "")
    return f"{runs}: {bad} refused" + (f", {warned} warning{'s' if warned != 1 else ''}" if warned else "")


@click.command("validate", help=VALIDATE_HELP)
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document {runs: [{path, run_id, ok, problems: "
                   "[{level, file, field, message}]}]} instead of lines (for CI).")
@click.option("--strict", is_flag=True, help="Warnings fail too (exit status 1).")
@click.option(ALLOW_EDITED_FLAG, "allow_edited", is_flag=True,
              help="Judge runs as `build-site --allow-edited` does: files that differ from "
                   "manifest.json are a warning, not an error.")
def validate_cmd(run_dirs: tuple[Path, ...], as_json: bool, strict: bool,
                 allow_edited: bool) -> None:
    reports = validate_paths(run_dirs, allow_edited=allow_edited)
    if as_json:
        doc = {"runs": [r.to_dict(strict) for r in reports]}
        click.echo(json.dumps(redact_tree(doc), indent=1))  # each string redacted
    else:
        for report in reports:
            for problem in report.problems:
                click.echo(redact(problem.line))  # a message may quote a run's text
        click.echo(summary(reports, strict), err=True)
    sys.exit(EXIT_OK if all(r.ok(strict) for r in reports) else EXIT_FAILED)
