#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder that reads network or disk input (cargo-fuzz,
# libFuzzer; the targets are in fuzz/fuzz_targets, docs/fuzzing.md says what each covers).
#
#   scripts/fuzz.sh smoke [SECONDS]        every target for SECONDS each (default 5) from its
#                                          seed corpus, one shared unoptimized build (debug
#                                          assertions and overflow checks on, no sanitizer, no
#                                          debug info: it builds in under half the time of an
#                                          optimized one): the CI step
#   scripts/fuzz.sh run TARGET [SECONDS]   one target under AddressSanitizer (default 600 s);
#                                          new inputs go to fuzz/corpus-new/TARGET, crashes to
#                                          fuzz/artifacts/TARGET
#   scripts/fuzz.sh repro TARGET FILE...   runs inputs (a crash artifact) once, under ASan
#   scripts/fuzz.sh list                   the targets
#
# Needs the nightly toolchain (`cargo +nightly`); installs cargo-fuzz with `cargo install`
# when it is missing. Builds go to $CARGO_TARGET_DIR (default fuzz/target), under dev/ (the
# smoke build) and address/. RUNNEL_FUZZ_ARGS adds libFuzzer flags, e.g. RUNNEL_FUZZ_ARGS=-jobs=2.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(request_decode broker_request record_batch raft_transport raft_step controller_records sasl_login cert_subject
         offsets_records txn_state storage_open raft_store_open)
CARGO_FUZZ_VERSION=0.13.2
TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/fuzz/target}"
TRIPLE=x86_64-unknown-linux-gnu
# Each input gets this long (seconds) before libFuzzer calls it a hang; RSS is bounded too.
LIBFUZZER_FLAGS=(-timeout=30 -rss_limit_mb=4096 -print_final_stats=1)

die() { echo "fuzz.sh: $*" >&2; exit 2; }

setup() {
    rustup run nightly rustc --version >/dev/null 2>&1 ||
        die "the nightly toolchain is missing (rustup toolchain install nightly)"
    if ! cargo +nightly fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
        cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
    fi
}

# build SANITIZER: every target in one cargo invocation (the dependencies build once),
# optimized, with debug assertions.
build() {
    cargo +nightly fuzz build --sanitizer "$1" --target-dir "$TARGET_DIR/$1"
}

# build_dev: every target unoptimized and without debug info, for the smoke run.
build_dev() {
    CARGO_PROFILE_DEV_DEBUG=0 cargo +nightly fuzz build --dev --sanitizer none --target-dir "$TARGET_DIR/dev"
}

binary() { echo "$TARGET_DIR/$1/$TRIPLE/release/$2"; }

known() {
    local t
    for t in "${TARGETS[@]}"; do [[ "$t" == "$1" ]] && return 0; done
    die "unknown target $1 (scripts/fuzz.sh list)"
}

case "${1:-}" in
    list)
        printf '%s\n' "${TARGETS[@]}"
        ;;
    smoke)
        seconds="${2:-5}"
        setup
        build_dev
        scratch=$(mktemp -d)
        trap 'rm -rf "$scratch"' EXIT
        failed=()
        for t in "${TARGETS[@]}"; do
            mkdir -p "$scratch/$t" "fuzz/artifacts/$t"
            echo "==> $t (${seconds}s)"
            # New inputs go to the scratch corpus (listed first); the seeds stay as they are.
            if ! "$TARGET_DIR/dev/$TRIPLE/debug/$t" "${LIBFUZZER_FLAGS[@]}" -max_total_time="$seconds" \
                -artifact_prefix="fuzz/artifacts/$t/" ${RUNNEL_FUZZ_ARGS:-} "$scratch/$t" "fuzz/corpus/$t" \
                >"$scratch/$t.log" 2>&1; then
                failed+=("$t")
                tail -n 60 "$scratch/$t.log"
            fi
            grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|cov: .*(DONE|INITED)' \
                "$scratch/$t.log" | tail -n 4 | sed 's/^/    /' || true
        done
        if ((${#failed[@]})); then
            die "crashed: ${failed[*]} (inputs in fuzz/artifacts/; docs/fuzzing.md says what to do)"
        fi
        ;;
    run)
        target="${2:?scripts/fuzz.sh run TARGET [SECONDS]}"
        known "$target"
        seconds="${3:-600}"
        setup
        build address
        mkdir -p "fuzz/corpus-new/$target" "fuzz/artifacts/$target"
        # Leak checks would report the broker and runtime the targets keep for the whole
        # process; memory growth shows in rss instead.
        "$(binary address "$target")" "${LIBFUZZER_FLAGS[@]}" -max_total_time="$seconds" -detect_leaks=0 \
            -artifact_prefix="fuzz/artifacts/$target/" ${RUNNEL_FUZZ_ARGS:-} \
            "fuzz/corpus-new/$target" "fuzz/corpus/$target"
        ;;
    repro)
        target="${2:?scripts/fuzz.sh repro TARGET FILE...}"
        known "$target"
        shift 2
        setup
        build address
        "$(binary address "$target")" -detect_leaks=0 -runs=1 "$@"
        ;;
    *)
        sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
