#!/usr/bin/env bash
# The suite's "host speed does not matter" check: `.ci/run` twice in a row
# from a clean clone of HEAD, with a busy loop on every core, stopping at the
# first failure. Logs and a summary go to OUT_DIR (default: ./ci-under-load).
#
#   scripts/ci_under_load.sh [OUT_DIR]
set -u
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
out=$(mkdir -p "${1:-ci-under-load}" && cd "${1:-ci-under-load}" && pwd)
clone=$(mktemp -d)
git clone -q "$repo" "$clone"
git -C "$clone" log --oneline -1 > "$out/commit"
hogs=()
for _ in $(seq "$(nproc)"); do python3 -c 'while True: pass' & hogs+=($!); done
trap 'kill "${hogs[@]}" 2>/dev/null; rm -rf "$clone"' EXIT
for i in 1 2; do
    start=$SECONDS
    (cd "$clone" && bash .ci/run) > "$out/ci$i.log" 2>&1
    rc=$?
    echo "run $i rc=$rc wall=$((SECONDS - start))s load=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/summary"
    [ $rc -eq 0 ] || exit $rc
done
