"""What to do with a finished run: the commands that turn it into a site.

Why: a run printed its path and stopped there, and a new user had to find
`build-site` in the README (issue 32). The builder reads every run directory
under `--data` (site_builder/load.py), so the run's parent folder publishes
it beside the runs kept with it (`runs/` by default); a run directory given
as a bare name is its own data folder, so the builder does not walk the
whole working directory.
"""

from __future__ import annotations

import shlex
from pathlib import Path

SITE = "site"  # build-site's default --out
PORT = 8000  # build-site serve's default --port


def data_folder(run_dir: Path) -> Path:
    """The folder to give build-site's --data: the run's parent, or the run itself."""
    parent = Path(run_dir).parent
    return Path(run_dir) if parent == Path(".") else parent


def next_steps(run_dir: Path) -> list[str]:
    """The lines that say how to build the site from this run and preview it."""
    data = shlex.quote(str(data_folder(run_dir)))
    return [
        "Next: build the site from this run (and the runs beside it), then preview it:",
        f"  build-site --data {data} --out {SITE}",
        f"  build-site --out {SITE} serve    # http://127.0.0.1:{PORT}/",
    ]
