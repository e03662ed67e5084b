#!/usr/bin/env bash
# Installs helm, at the version pinned below, into .cache/go/bin/helm (relative to the repo
# root) with `go install` from the Go module proxy, for tests/test_helm.py (the chart in
# deploy/helm/runnel, docs/kubernetes.md). Idempotent: a helm already there at the pinned
# version is left alone. The first install compiles helm (a few minutes on 2 cores); the
# modules and the build cache stay in Go's own caches (go env GOMODCACHE, GOCACHE).
#
# Usage: scripts/helm.sh [--force]
set -euo pipefail

HELM_VERSION=v3.22.0
# The Kubernetes version helm assumes without a cluster (`helm template`, `helm lint`), as
# helm's own Makefile derives it from the k8s.io/client-go it builds with (v0.37 for
# v3.22.0); a plain `go install` would leave it at 1.20.
HELM_K8S_MINOR=37

cd "$(dirname "$0")/.."          # repo root
bin="$PWD/.cache/go/bin"
helm="$bin/helm"

if ! command -v go >/dev/null 2>&1; then
    [ -x /usr/local/go/bin/go ] && PATH=/usr/local/go/bin:$PATH
fi

installed() {  # the version of .cache/go/bin/helm, or nothing
    [ -x "$helm" ] && "$helm" version --template '{{ .Version }}' 2>/dev/null || true
}

if [ "${1:-}" != "--force" ] && [ "$(installed)" = "$HELM_VERSION" ]; then
    echo "helm.sh: $helm is $HELM_VERSION"
    exit 0
fi

command -v go >/dev/null 2>&1 || { echo "helm.sh: go not found on PATH (nor /usr/local/go/bin)" >&2; exit 1; }
mkdir -p "$bin"
# GOTOOLCHAIN=local: never download a different Go toolchain behind our back. `go install`
# stamps neither helm's version nor the Kubernetes version it assumes, so both are set
# with -ldflags as helm's Makefile sets them.
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$HELM_K8S_MINOR"
done
GOTOOLCHAIN=local GOBIN="$bin" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

got="$(installed)"
if [ "$got" != "$HELM_VERSION" ]; then
    echo "helm.sh: installed helm reports '$got', expected $HELM_VERSION" >&2
    exit 1
fi
echo "helm.sh: installed $helm $HELM_VERSION ($(go version | awk '{print $3}'))"
