#!/usr/bin/env bash
# Builds the franz-go programs tests/go/clientcheck, tests/go/groupcheck, tests/go/txncheck,
# tests/go/rackcheck and tests/go/seccheck, and the Sarama program tests/go/saramacheck, into
# .cache/go/<name> (relative to the repo root).
# Idempotent: a binary newer than go.mod, go.sum and every .go file under
# tests/go is left alone. Otherwise `go build` runs (itself
# incremental via Go's build cache). Modules come from the Go module proxy on
# first use and are cached in the Go module cache (go env GOMODCACHE).
#
# Usage: tests/go/build.sh [--force]
set -euo pipefail

cd "$(dirname "$0")/../.."          # repo root
src=tests/go

if ! command -v go >/dev/null 2>&1; then
    [ -x /usr/local/go/bin/go ] && PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null 2>&1 || { echo "build.sh: go not found on PATH" >&2; exit 1; }

# One build at a time (two pytest workers may each call this): the second finds the
# binaries up to date.
mkdir -p .cache/go
exec 9>.cache/go/build.lock
flock 9

build() {  # build NAME: tests/go/NAME -> .cache/go/NAME
    local name=$1 out=.cache/go/$1
    if [ "$force" != "--force" ] && [ -x "$out" ] \
        && [ -z "$(find "$src" \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$out" -print -quit)" ]; then
        echo "build.sh: $out is up to date"
        return 0
    fi
    mkdir -p "$(dirname "$out")"
    # GOTOOLCHAIN=local: never download a different Go toolchain behind our back.
    # -trimpath keeps the binary independent of where the repo lives.
    (cd "$src" && GOTOOLCHAIN=local go build -trimpath -o "../../$out.tmp" "./$name")
    mv -f "$out.tmp" "$out"
    echo "build.sh: built $out ($(go version | awk '{print $3}'))"
}

force=${1:-}
build clientcheck
build groupcheck
build seccheck
build txncheck
build rackcheck
build saramacheck
build sharecheck
