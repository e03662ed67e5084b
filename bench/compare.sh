#!/usr/bin/env bash
# Runnel vs Apache Kafka, one broker each, on this machine in the same run with the same
# tool (`runnel bench compare`: alternating rounds after a discarded warm-up of each, the
# page cache synced before every run, both brokers' CPU per GB produced).
# Kafka 4.3.1 single node from ../shared/peers/kafka with its defaults (1 GiB heap, G1), but
# for log.segment.delete.delay.ms=0: the topic a run deletes is removed at once, not a minute
# later during the other side's run. Runnel fsyncs before it acknowledges; Kafka does not.
#
# usage: bench/compare.sh [ROUNDS]          (default 5)
# env:   SCENARIOS (default "durable-512 tiny-8 latency-1k"), DURATION (s per run, default 15),
#        WARMUP (default 30: with 20 s Kafka was still rising through the rounds; two runs
#        of 5 rounds after 30 s agreed within 5% on durable-512), OUT (default /tmp/runnel-bench-single),
#        RUNNEL_BIN (default target/release/runnel, built first), PEERS_KAFKA,
#        PIN=1 (brokers and load generator on separate CPUs: bench/pin.sh),
#        RUNNEL_SET ("key=value ..." broker settings for Runnel, e.g. log.cache.tail.bytes=0),
#        KAFKA_SET (the same for Kafka, e.g. log.flush.interval.messages=1: Kafka fsyncs each
#        append before it answers, as Runnel does),
#        BALLAST_GB (fill this much memory in /dev/shm for the run, so that the machine's memory
#        is as full as a long-running broker's: new page cache then comes from reclaim, not
#        from free memory; docs/bench.md)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
PEERS_HOME="${PEERS_KAFKA_HOME:-/tmp/peers/kafka}"
ROUNDS="${1:-5}"
DURATION="${DURATION:-15}"
WARMUP="${WARMUP:-30}"
SCENARIOS="${SCENARIOS:-durable-512 tiny-8 latency-1k}"
OUT="${OUT:-/tmp/runnel-bench-single}"
KPORT=31400          # Kafka on 31400 (its controller on 31500)
RPORT=31700
RUNNEL="${RUNNEL_BIN:-$ROOT/target/release/runnel}"
RUNNEL_SETS=()
for kv in ${RUNNEL_SET:-}; do RUNNEL_SETS+=(--set "$kv"); done
# shellcheck source=bench/pin.sh
source "$ROOT/bench/pin.sh"

mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
[[ -n "${RUNNEL_BIN:-}" ]] || (cd "$ROOT" && cargo build --release -q)

RPID=""
cleanup() {
  [[ -n "$RPID" ]] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null || true
  "$PEERS/stop-cluster.sh" "$KPORT" --wipe >/dev/null 2>&1 || true
  rm -rf "$OUT/runnel-data"
  rm -f "/dev/shm/runnel-bench-ballast-$$"
}
trap cleanup EXIT
if [[ "${BALLAST_GB:-0}" -gt 0 ]]; then
  head -c "${BALLAST_GB}G" /dev/zero > "/dev/shm/runnel-bench-ballast-$$"
  echo "memory filled: $BALLAST_GB GB in /dev/shm; $(awk '/MemAvailable/{print int($2/1048576)}' /proc/meminfo) GB available" | tee -a "$OUT/summary.txt"
fi

KAFKA_PROPS="log.segment.delete.delay.ms=0"
for kv in ${KAFKA_SET:-}; do KAFKA_PROPS+=$'\n'"$kv"; done
EXTRA_BROKER_PROPS="$KAFKA_PROPS" "$PEERS/start-cluster.sh" 1 "$KPORT" >/dev/null
rm -rf "$OUT/runnel-data"
"$RUNNEL" dev --port "$RPORT" --data-dir "$OUT/runnel-data" "${RUNNEL_SETS[@]}" >/dev/null 2>"$OUT/runnel.log" &
RPID=$!
for _ in $(seq 100); do
  (echo >"/dev/tcp/127.0.0.1/$RPORT") 2>/dev/null && break
  sleep 0.1
done
KPID="$(cat "$PEERS_HOME/run-$KPORT/node1.pid")"
pin_brokers "$KPID" "$RPID"
pin_note | tee -a "$OUT/summary.txt"

for s in $SCENARIOS; do
  echo "==> $s" | tee -a "$OUT/summary.txt"
  loadgen "$RUNNEL" bench compare --a "127.0.0.1:$KPORT" --b "127.0.0.1:$RPORT" --scenario "$s" \
      --replication-factor 1 --rounds "$ROUNDS" --duration "$DURATION" --warmup "$WARMUP" \
      --pid-a "$KPID" --pid-b "$RPID" "${PARK_OPTS[@]}" --progress false --json "$OUT/$s.json" 2>&1 | tee -a "$OUT/summary.txt"
done
