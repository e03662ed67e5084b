#!/usr/bin/env bash
# A long chaos run: `runnel chaos` against a cluster it starts, every fault type in rotation,
# the verify checker on the whole history, and each broker's resident memory and open file
# descriptors sampled every 30 s (a leak shows as a climb that restarts do not reset).
#
#   bench/chaos-long.sh 3 [SECONDS]   3 brokers, RF 3 (default 3600 s)
#   bench/chaos-long.sh 9 [SECONDS]   9 brokers in 3 regions, RF 3 (one replica per region),
#                                     with whole-region isolation and latency between regions
#
# Network faults need root and iproute2 (network namespaces); without them, set FAULTS
# without the isolate-* and region-latency faults. Output in OUT (default
# bench/results/chaos-long-N-DATE): chaos.out (the summary), report.json, chart.svg,
# samples.txt (time pid port rss_kb fds anon_kb: anonymous memory, without the executable's
# pages), broker logs.
set -euo pipefail
cd "$(dirname "$0")/.."
BROKERS="${1:-3}"
DURATION="${2:-3600}"
OUT="${OUT:-bench/results/chaos-long-$BROKERS-$(date +%Y%m%d-%H%M)}"
PORT="${PORT:-29092}"
RUNNEL="${RUNNEL:-target/release/runnel}"
[[ -x "$RUNNEL" ]] || cargo build --release
mkdir -p "$OUT"

ALL=kill-leader,kill-follower,pause-leader,pause-follower,slow-disk-leader,slow-disk-follower,fail-disk-follower
ALL+=,disk-full-leader,disk-full-follower,clock-jump-leader,clock-jump-follower,isolate-leader,isolate-follower
ARGS=(--brokers "$BROKERS" --partitions 3 --replication-factor 3)
if [[ "$BROKERS" -ge 9 ]]; then
  ALL+=,isolate-region,region-latency
  ARGS=(--brokers "$BROKERS" --regions 3 --partitions 6 --replication-factor 3)
fi
# FAULTS=... picks some: e.g. only those that never restart a broker (pause, isolate,
# slow disk, clock jump), to watch the memory of long-lived processes.
FAULTS="${FAULTS:-$ALL}"

sample() {
  while true; do
    local ts; ts=$(date +%s)
    for p in $(pgrep -f " dev --port " || true); do
      local port rss fds
      port=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -o -- '--port [0-9]*' | awk '{print $2}') || continue
      (( port >= PORT && port < PORT + BROKERS )) || continue
      rss=$(awk '/VmRSS/{print $2}' "/proc/$p/status" 2>/dev/null) || continue
      anon=$(awk '/RssAnon/{print $2}' "/proc/$p/status" 2>/dev/null) || continue
      fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
      echo "$ts $p $port $rss $fds $anon"
    done
    sleep 30
  done
}
sample > "$OUT/samples.txt" &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null || true' EXIT

"$RUNNEL" chaos "${ARGS[@]}" --duration "$DURATION" --rate 50 --faults "$FAULTS" --seed "${SEED:-2111}" \
  --port "$PORT" --json "$OUT/report.json" --chart "$OUT/chart.svg" --logs "$OUT/logs" | tee "$OUT/chaos.out"
