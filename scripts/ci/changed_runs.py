#!/usr/bin/env python3
"""Print the run directories under DATA that changed since BASE, one a line, and list the
upload manifests that changed in a file (--manifests).

Used by .github/workflows/contribute.yml (docs/publishing-ci.md): a pull request's
runs are validated and a merged push's runs uploaded, and both need the runs the
commits added or changed, not every run of the repository. A run directory is the
nearest folder above a changed file that holds run.yaml. A changed file under DATA that
is in no run directory is an error (one line naming it): a run whose run.yaml was left
out would otherwise pass unchecked. Deleted files are left out (nothing to check).

BASE may be empty or all zeros (the first push of a branch, as GitHub reports it):
then every run under DATA is printed.

    python scripts/ci/changed_runs.py --base "$BASE_SHA" [--data data] [--head HEAD] \
        [--manifests manifests.txt]

Exit status: 0 with the list (possibly empty), 1 for a changed file in no run
directory, 2 when git cannot compare the two commits.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import PurePosixPath

RUN_YAML = "run.yaml"
UPLOAD_MANIFEST = "upload-manifest.json"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def run_dir_of(path: PurePosixPath, data: PurePosixPath, has_file) -> PurePosixPath | None:
    """The nearest folder above path, within data, that holds run.yaml (None if none)."""
    for folder in path.parents:
        if folder == data or data not in folder.parents:
            return None
        if has_file(folder / RUN_YAML):
            return folder
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with (may be empty)")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--data", default="data")
    parser.add_argument("--manifests", default=None,
                        help="write the changed upload manifests (in no run directory) here")
    args = parser.parse_args(argv)
    data = PurePosixPath(args.data.rstrip("/"))
    try:
        tracked = set(git("ls-tree", "-r", "--name-only", args.head, "--", str(data)).splitlines())
        if args.base.strip("0"):
            changed = git("diff", "--name-only", "--no-renames", "--diff-filter=d",
                          args.base, args.head, "--", str(data)).splitlines()
        else:
            changed = sorted(tracked)
    except subprocess.CalledProcessError as exc:
        print(f"error: --base {args.base}: git cannot compare it with {args.head}: "
              f"{' '.join(exc.stderr.split())}", file=sys.stderr)
        return 2
    runs: set[PurePosixPath] = set()
    manifests: set[PurePosixPath] = set()
    for name in changed:
        path = PurePosixPath(name)
        found = run_dir_of(path, data, lambda p: str(p) in tracked)
        if found is None and args.manifests is not None and path.name == UPLOAD_MANIFEST \
                and data in path.parent.parents:
            manifests.add(path)
            continue
        if found is None:
            print(f"error: {name}: not in a run directory (no {RUN_YAML} in a folder above it "
                  f"under {data}/)", file=sys.stderr)
            return 1
        runs.add(found)
    if args.manifests is not None:
        with open(args.manifests, "w", encoding="utf-8") as fh:
            fh.writelines(f"{m}\n" for m in sorted(manifests))
    for run in sorted(runs):
        print(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
