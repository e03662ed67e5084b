#!/usr/bin/env bash
# How long a partition stops taking acknowledged writes when its leader dies or stalls:
# Runnel vs Apache Kafka, three brokers each, replication factor 3, acks=all, idempotent,
# the same `runnel chaos` workload and fault schedule against both, alternating rounds.
# Runnel: a cluster `runnel chaos` starts. Kafka: 3 KRaft nodes from ../shared/peers/kafka
# (min.insync.replicas=2, a majority as Runnel's quorum), broken through `runnel chaos
# --attach` (it finds each JVM through /proc and starts a killed one again).
#
# usage: bench/availability.sh [ROUNDS]        (default 3)
# env:   SCHEDULE (default "8:kill-leader:5,22:pause-leader:5,36:pause-leader:15")
#        DURATION (seconds of workload, default 60)
#        PEERS_KAFKA (default ../shared/peers/kafka), OUT (default /tmp/runnel-availability)
#
# Prints, per fault of the schedule, the longest stall of acknowledged sends in one stream
# (a producer's sends to one partition) on each system: median and range over the rounds.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
SCHEDULE="${SCHEDULE:-8:kill-leader:5,22:pause-leader:5,36:pause-leader:15}"
DURATION="${DURATION:-60}"
OUT="${OUT:-/tmp/runnel-availability}"
KPORT=39392          # Kafka nodes 1..3 on 39392..39394 (controllers on +100)
RPORT=39892          # Runnel brokers 0..2 on 39892..39894 (Raft on +1000)
RUNNEL="$ROOT/target/release/runnel"
WORKLOAD=(--duration "$DURATION" --partitions 3 --replication-factor 3 --schedule "$SCHEDULE")

mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)

cleanup() {
  "$PEERS/stop-cluster.sh" "$KPORT" --wipe >/dev/null 2>&1 || true
  # A node `runnel chaos` started again is not in the peer scripts' pid files.
  pkill -9 -f "run-$KPORT/node" 2>/dev/null || true
}
trap cleanup EXIT
EXTRA_BROKER_PROPS="min.insync.replicas=2" "$PEERS/start-cluster.sh" 3 "$KPORT" >/dev/null

for r in $(seq "$ROUNDS"); do
  echo "==> round $r: runnel"
  "$RUNNEL" chaos --port "$RPORT" --seed "$r" "${WORKLOAD[@]}" --json "$OUT/runnel-$r.json" \
      --chart "$OUT/runnel-$r.svg" > "$OUT/runnel-$r.out" 2>&1 || { cat "$OUT/runnel-$r.out"; exit 1; }
  grep -E "^ +[0-9.]+s-|anomal" "$OUT/runnel-$r.out"
  echo "==> round $r: kafka"
  "$RUNNEL" chaos --attach --bootstrap "127.0.0.1:$KPORT" --seed "$r" "${WORKLOAD[@]}" \
      --json "$OUT/kafka-$r.json" --chart "$OUT/kafka-$r.svg" > "$OUT/kafka-$r.out" 2>&1 \
      || { cat "$OUT/kafka-$r.out"; exit 1; }
  grep -E "^ +[0-9.]+s-|anomal" "$OUT/kafka-$r.out"
done

python3 - "$OUT" "$ROUNDS" "$SCHEDULE" <<'EOF'
import json, statistics, sys
out, rounds, schedule = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
def stalls(system):
    runs = [json.load(open(f"{out}/{system}-{r}.json"))["faults"] for r in range(1, rounds + 1)]
    return [[f["longest_stall_ms"] / 1000 for f in run] for run in runs]
runnel, kafka = stalls("runnel"), stalls("kafka")
print("\n| fault | Runnel: longest stall | Kafka: longest stall | Runnel / Kafka |")
print("|---|---|---|---|")
for i, planned in enumerate(schedule):
    r = [run[i] for run in runnel if i < len(run)]
    k = [run[i] for run in kafka if i < len(run)]
    if not r or not k:
        continue
    rm, km = statistics.median(r), statistics.median(k)
    _, fault, hold = planned.split(":")
    print(f"| {fault} {hold} s | {rm:.2f} s ({min(r):.2f}-{max(r):.2f}) | {km:.2f} s ({min(k):.2f}-{max(k):.2f}) "
          f"| {rm / km:.2f}x |")
EOF
