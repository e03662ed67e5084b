#!/usr/bin/env bash
# Runnel vs Apache Kafka, three brokers each, replication factor 3, acks=all, on this
# machine in the same run with the same tool (`runnel bench compare`, alternating rounds).
# Kafka runs with min.insync.replicas=2 (a majority, as Runnel's Raft quorum), and deletes a
# deleted topic's files at once (log.segment.delete.delay.ms=0) so that they do not go during
# the next Runnel run.
#
# usage: bench/replicated.sh [ROUNDS]          (default 3)
# env:   DURATION (seconds per system per round, default 15)
#        WARMUP (seconds of a discarded first run per system and scenario, default 30:
#        with 10 s Kafka was still rising through the rounds, as in bench/compare.sh)
#        SLOW_MS  (slow-follower disk delay per fsync round, default 50)
#        STOP_MS / RUN_MS (slow-follower pause duty cycle, default 100 / 400)
#        SCENARIOS (default "durable-512 tiny-8 slow-follower")
#        PEERS_KAFKA (default ../shared/peers/kafka), OUT (default /tmp/runnel-bench-rf3)
#        PIN=1 (brokers and load generator on separate CPUs: bench/pin.sh)
#        RUNNEL_SET ("key=value ..." broker settings for Runnel, e.g. log.cache.tail.bytes=0)
#
# Scenarios:
#   durable-512   12 partitions, 512-byte records, acks=all, idempotent
#   tiny-8        100 partitions, 8-byte records, acks=all
#   slow-follower durable-512 at a fixed rate on a topic whose replicas are assigned by
#                 hand so that one broker is a follower of every partition and leads none;
#                 that follower is then made slow and the producer's latency compared with
#                 the same run without the fault:
#                   pause: the follower process is stopped STOP_MS of every STOP_MS+RUN_MS
#                          (both systems; a follower that is slow at everything);
#                   disk:  Runnel only, the storage fault hook sleeps SLOW_MS before every
#                          fsync round (Kafka does not fsync on the produce path, so a slow
#                          fsync alone would not touch it).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
DURATION="${DURATION:-15}"
WARMUP="${WARMUP:-30}"
SLOW_MS="${SLOW_MS:-50}"
STOP_MS="${STOP_MS:-100}"
RUN_MS="${RUN_MS:-400}"
SCENARIOS="${SCENARIOS:-durable-512 tiny-8 slow-follower}"
OUT="${OUT:-/tmp/runnel-bench-rf3}"
KPORT=39392          # Kafka nodes 1..3 on 39392..39394 (controllers on +100)
RPORT=39892          # Runnel brokers 0..2 on 39892..39894 (Raft on +1000)
KBOOT="127.0.0.1:$KPORT"
RBOOT="127.0.0.1:$RPORT"
RUNNEL="$ROOT/target/release/runnel"
RUNNEL_SETS=()
for kv in ${RUNNEL_SET:-}; do RUNNEL_SETS+=(--set "$kv"); done
PEERS_HOME="${PEERS_KAFKA_HOME:-/tmp/peers/kafka}"
# shellcheck source=bench/pin.sh
source "$ROOT/bench/pin.sh"

mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)
# shellcheck source=/dev/null
source "$PEERS/common.sh"

DEV_PID=""
DUTY_PID=""
cleanup() {
  [[ -n "$DUTY_PID" ]] && kill "$DUTY_PID" 2>/dev/null || true
  [[ -n "$DEV_PID" ]] && kill "$DEV_PID" 2>/dev/null && wait "$DEV_PID" 2>/dev/null || true
  "$PEERS/stop-cluster.sh" "$KPORT" --wipe >/dev/null 2>&1 || true
  rm -rf "$OUT/runnel-data"
}
trap cleanup EXIT

# Deleted topics' files go at once, not a minute later in the other system's run (docs/bench.md).
EXTRA_BROKER_PROPS="min.insync.replicas=2
log.segment.delete.delay.ms=0" "$PEERS/start-cluster.sh" 3 "$KPORT" >/dev/null
rm -rf "$OUT/runnel-data"
"$RUNNEL" dev --brokers 3 --port "$RPORT" --data-dir "$OUT/runnel-data" "${RUNNEL_SETS[@]}" > "$OUT/runnel-dev.out" 2> "$OUT/runnel.log" &
DEV_PID=$!
for _ in $(seq 100); do
  [[ $(grep -c "listening on" "$OUT/runnel-dev.out" 2>/dev/null) -ge 3 ]] && break
  sleep 0.1
done
sleep 2   # registrations and the first controller election

compare() {  # name, then bench compare options
  local name="$1"; shift
  local pids=()
  for f in "$PEERS_HOME/run-$KPORT"/node*.pid; do pids+=(--pid-a "$(cat "$f")"); done
  for i in 0 1 2; do pids+=(--pid-b "$(runnel_pid "$i")"); done
  echo "==> $name" | tee -a "$OUT/summary.txt"
  loadgen "$RUNNEL" bench compare --a "$KBOOT" --b "$RBOOT" --rounds "$ROUNDS" --duration "$DURATION" \
      --warmup "$WARMUP" "${pids[@]}" "${PARK_OPTS[@]}" --progress false --json "$OUT/$name.json" "$@" 2>&1 | tee -a "$OUT/summary.txt"
}

runnel_pid() {  # broker id -> its current pid (runnel dev prints "broker i pid X")
  grep "^broker $1 pid" "$OUT/runnel-dev.out" | tail -1 | awk '{print $4}'
}

duty_cycle() {  # pids...: stop STOP_MS of every STOP_MS+RUN_MS, until killed
  local stop run
  stop=$(awk "BEGIN{print $STOP_MS/1000}")
  run=$(awk "BEGIN{print $RUN_MS/1000}")
  trap 'kill -CONT "$@" 2>/dev/null; exit 0' TERM
  while true; do
    kill -STOP "$@"; sleep "$stop"; kill -CONT "$@"; sleep "$run"
  done
}

pin_brokers "$DEV_PID" $(cat "$PEERS_HOME/run-$KPORT"/node*.pid) "$(runnel_pid 0)" "$(runnel_pid 1)" "$(runnel_pid 2)"
pin_note > "$OUT/summary.txt"
for s in $SCENARIOS; do
  case "$s" in
    durable-512|tiny-8)
      compare "$s" --scenario "$s" --replication-factor 3 ;;
    slow-follower)
      # The last broker (Kafka node 3, Runnel broker 2) follows all 12 partitions and
      # leads none; leaders alternate between the first two.
      assign=$(for p in $(seq 0 11); do [[ $((p % 2)) == 0 ]] && printf "1:2:3," || printf "2:1:3,"; done)
      kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KPORT" --create \
          --topic slow-follower --replica-assignment "${assign%,}" >/dev/null
      assign=$(for p in $(seq 0 11); do [[ $((p % 2)) == 0 ]] && printf "0:1:2," || printf "1:0:2,"; done)
      kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$RPORT" --create \
          --topic slow-follower --replica-assignment "${assign%,}" >/dev/null
      sleep 2   # preferred leaders win their elections
      # A fixed rate both sustain, so latency is not queueing at saturation.
      common=(--scenario durable-512 --topic slow-follower --existing-topic --rate "${RATE:-50000}")
      compare slow-follower-baseline "${common[@]}"
      kpid=$(cat "$PEERS_HOME/run-$KPORT/node3.pid")
      duty_cycle "$kpid" "$(runnel_pid 2)" &
      DUTY_PID=$!
      compare slow-follower-paused "${common[@]}"
      kill "$DUTY_PID"; wait "$DUTY_PID" 2>/dev/null || true; DUTY_PID=""
      kafka_tool kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$RPORT" --alter \
          --entity-type brokers --entity-name 2 --add-config "fault.disk.sync.delay.ms=$SLOW_MS" >/dev/null
      compare slow-follower-disk "${common[@]}"
      kafka_tool kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$RPORT" --alter \
          --entity-type brokers --entity-name 2 --delete-config fault.disk.sync.delay.ms >/dev/null
      ;;
    *) echo "unknown scenario $s" >&2; exit 2 ;;
  esac
done
echo "summary: $OUT/summary.txt"
