#!/usr/bin/env bash
# Build the same sites from two commits and show every byte that differs.
#
#   scripts/diff_builds.sh BEFORE AFTER [SEEDS_DIR]
#
# BEFORE and AFTER are commits, or folders holding a checkout (a working tree
# with uncommitted changes, built as it is).
# Two sites per commit: the bundled sample (data/), and, when SEEDS_DIR is
# given, the published Speed test matrix pages in it (*.txt) imported with
# that commit's `bench import` and built. A restructuring that should change
# nothing must print "identical" for every site; one that should change a
# few things (a colour) must print only those lines. Each build has its own
# fresh cache, so nothing cached by one commit is reused by the other.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [SEEDS_DIR]" >&2; exit 2; }
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
seeds=${3:+$(cd "$3" && pwd)}
[ -z "$seeds" ] || [ -d "$seeds" ] || { echo "$0: SEEDS_DIR $seeds: not a folder" >&2; exit 2; }
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/src-a" 2>/dev/null || true
      git -C "$repo" worktree remove --force "$work/src-b" 2>/dev/null || true
      rm -rf "$work"' EXIT

build() {  # build <commit> <label>
    local src="$work/src-$2" out="$work/out-$2"
    if [ -d "$1" ]; then src=$(cd "$1" && pwd); else git -C "$repo" worktree add -q --detach "$src" "$1"; fi
    mkdir -p "$out"
    # cwd first on sys.path: the commit's own modules, not the installed ones
    (cd "$src" && python3 -m site_builder.cli -q --data data --out "$out/bundled" \
        --cache "$out/cache-bundled")
    if [ -n "$seeds" ]; then
        for page in "$seeds"/*.txt; do
            (cd "$src" && python3 -m bench.cli import "$page" --out "$out/seed-runs" >/dev/null)
        done
        (cd "$src" && python3 -m site_builder.cli -q --data "$out/seed-runs" \
            --out "$out/seeds" --cache "$out/cache-seeds")
    fi
}

build "$1" a
build "$2" b
status=0
for site in bundled ${seeds:+seeds}; do
    if diff -rq "$work/out-a/$site" "$work/out-b/$site" >/dev/null; then
        echo "$site: identical ($(find "$work/out-a/$site" -type f | wc -l) files)"
    else
        status=1
        echo "$site: differs"
        # the changed lines, file by file (binary files are named only)
        diff -r -U0 "$work/out-a/$site" "$work/out-b/$site" | grep -v '^@@' || true
    fi
done
exit $status
