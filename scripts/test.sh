#!/usr/bin/env bash
# Runs every test of the project, installing what the tests need on the way:
#   1. cargo fmt --check, the layout check (scripts/layout-check.sh), cargo clippy
#      -D warnings, cargo test (unit, storage, Raft simulations, mutation fuzzing), a short
#      run of every cargo-fuzz target (scripts/fuzz.sh smoke: nightly toolchain, cargo-fuzz
#      installed from crates.io when missing)
#   2. a release build of `runnel`
#   3. the integration tests (pytest, two files at a time): real `runnel` processes on 127.0.0.1 driven by real
#      Kafka clients: librdkafka (confluent-kafka from PyPI), kafka-python (PyPI), the Java
#      client and Kafka's own tools (jars from Maven Central), franz-go and Sarama (Go module
#      proxy); and the Helm chart
#      checked offline (tests/test_helm.py: helm lint, helm template, Kubernetes schemas).
# Needs: a Rust toolchain, python3, a JDK 17+ with Maven, Go (which also builds helm, pinned
# in scripts/helm.sh, into .cache/go/bin); kcat, openssl, iptables (for
# iptables-legacy: latency between regions in tests/test_chaos.py), chromium and
# chromium-driver (the web console in headless Chromium: tests/test_console.py) and linux-perf
# (runnel bench --profile-pid: tests/test_bench.py) are installed
# with apt-get when missing and running as root. Extra pytest arguments pass
# through, e.g. scripts/test.sh -k franz.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n==> [%s] %s\n' "$(date -u +%T)" "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check
step "layout: no import cycle in any crate, no file over 800 lines (docs/ARCHITECTURE.md)"
scripts/layout-check.sh
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
step "cargo test"
cargo test --workspace
step "fuzz smoke: every fuzz target a few seconds from its seeds (docs/fuzzing.md)"
scripts/fuzz.sh smoke
step "cargo build --release"
cargo build --release

step "python test environment (.cache/venv)"
if [[ ! -x .cache/venv/bin/python ]]; then
  python3 -m venv .cache/venv
fi
.cache/venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt

step "Debian packages: kcat, openssl, iptables, chromium, chromium-driver, linux-perf"
for need in kcat:kcat openssl:openssl iptables-legacy:iptables chromium:chromium chromedriver:chromium-driver perf:linux-perf; do
  cmd="${need%%:*}" pkg="${need#*:}"
  if ! command -v "$cmd" >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      { apt-get install -y -q "$pkg" || { apt-get update -q && apt-get install -y -q "$pkg"; }; } >/dev/null
    elif [[ "$pkg" == iptables ]]; then
      echo "no iptables-legacy: the tests of latency between regions (root only) will be skipped" >&2
    else
      echo "$pkg is missing: install it (Debian/Ubuntu: apt-get install $pkg)" >&2
      exit 1
    fi
  fi
done

step "Java client and Kafka tools (.cache/java)"
tests/java/build.sh
step "franz-go and Sarama clients (.cache/go)"
tests/go/build.sh
step "helm (.cache/go/bin)"
scripts/helm.sh

step "integration tests"
# Two pytest workers (pytest-xdist), each taking whole files: most tests wait on brokers,
# clients and timeouts rather than on a CPU, so two at a time halve the wall time on two
# cores. RUNNEL_TEST_WORKERS=0 runs them one at a time in this process.
.cache/venv/bin/python -m pytest tests -q -rfE --durations=30 -n "${RUNNEL_TEST_WORKERS:-2}" --dist loadfile "$@"
