#!/usr/bin/env bash
# The layout rules docs/ARCHITECTURE.md states, checked: no import cycle between the
# modules of a crate (scripts/module-cycles.py), and no source file in crates/*/src longer
# than 800 lines outside its unit tests (the lines before `#[cfg(test)]`).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for src in crates/*/src; do
    python3 scripts/module-cycles.py "$src" || status=1
done
while IFS= read -r f; do
    n=$(awk '/^#\[cfg\(test\)\]/ { exit } { n++ } END { print n + 0 }' "$f")
    if [ "$n" -gt 800 ]; then
        echo "$f: $n lines outside tests (at most 800)"
        status=1
    fi
done < <(find crates/*/src -name '*.rs' | sort)
exit $status
