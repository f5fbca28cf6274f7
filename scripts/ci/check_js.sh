#!/usr/bin/env bash
# The pages' scripts parse: `node --check` on every .js file of the given folders
# (default: templates/static and the tests' node driver). A syntax error fails CI
# with the file named, before any browser test would have met it as a blank chart.
set -uo pipefail
cd "$(dirname "$0")/../.."
folders=("$@")
[ ${#folders[@]} -gt 0 ] || folders=(templates/static tests/support)
failed=0
checked=0
for folder in "${folders[@]}"; do
    for file in "$folder"/*.js; do
        [ -e "$file" ] || continue
        checked=$((checked + 1))
        if ! node --check "$file"; then
            echo "check_js: $file: JavaScript syntax error (node --check)" >&2
            failed=1
        fi
    done
done
if [ "$checked" -eq 0 ]; then
    echo "check_js: no .js files in ${folders[*]}" >&2
    exit 1
fi
exit "$failed"
