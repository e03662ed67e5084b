#!/usr/bin/env bash
# Runnel vs Apache Kafka, one broker each, on this machine, measured in the same run with
# the same tool: Kafka's own ProducerPerformance/ConsumerPerformance, driven by
# ../shared/peers/kafka/bench.sh. Rounds alternate between the systems; every summary line
# goes to $OUT/results.txt and the table is printed at the end.
#
# usage: bench/single-node.sh [ROUNDS]        (default 3)
# env:   RECORDS (durable-512 record count, default 1500000)
#        LATENCY_SECONDS (latency-1k duration, default 30)
#        KAFKA_FSYNC=1 also measures Kafka with log.flush.interval.messages=1 (fsync parity)
#        PEERS_KAFKA (default ../shared/peers/kafka), OUT (default /tmp/runnel-bench)
#
# Scenarios (MEASURING.md): durable-512 = 512-byte records, acks=all, 12 partitions,
# batch 128 KiB, linger 5 ms, as fast as possible; latency-1k = 100-byte records at a fixed
# 1,000 msg/s to one partition, linger 0, p50/p99/p99.9 from the tool.
# Runnel fsyncs before acknowledging acks=all; Kafka (by default) does not.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
RECORDS="${RECORDS:-1500000}"
LATENCY_SECONDS="${LATENCY_SECONDS:-30}"
OUT="${OUT:-/tmp/runnel-bench}"
# Kafka nodes also listen on BASEPORT+100 (controller), so the ports are 200 apart.
KPORT=39392          # Kafka
KFPORT=39592         # Kafka with an fsync per message (KAFKA_FSYNC=1)
RPORT=39892          # Runnel
PEERS_HOME="${PEERS_KAFKA_HOME:-/tmp/peers/kafka}"

mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)

RUNNEL_PID=""
cleanup() {
  [[ -n "$RUNNEL_PID" ]] && kill "$RUNNEL_PID" 2>/dev/null || true
  "$PEERS/stop-cluster.sh" "$KPORT" --wipe >/dev/null 2>&1 || true
  "$PEERS/stop-cluster.sh" "$KFPORT" --wipe >/dev/null 2>&1 || true
  rm -rf "$OUT/runnel-data" "$PEERS_HOME/run-$RPORT"
}
trap cleanup EXIT

"$PEERS/start-cluster.sh" 1 "$KPORT" >/dev/null
if [[ "${KAFKA_FSYNC:-0}" == 1 ]]; then
  EXTRA_BROKER_PROPS="log.flush.interval.messages=1" "$PEERS/start-cluster.sh" 1 "$KFPORT" >/dev/null
fi
rm -rf "$OUT/runnel-data"
"$ROOT/target/release/runnel" dev --port "$RPORT" --data-dir "$OUT/runnel-data" \
    --set auto.create.topics.enable=false > "$OUT/runnel.log" 2>&1 &
RUNNEL_PID=$!
sleep 0.5
kill -0 "$RUNNEL_PID" 2>/dev/null || { echo "runnel did not start:" >&2; cat "$OUT/runnel.log" >&2; exit 1; }
# bench.sh reads broker pids from run-<port>/node*.pid to report broker CPU and RSS.
mkdir -p "$PEERS_HOME/run-$RPORT"
echo "$RUNNEL_PID" > "$PEERS_HOME/run-$RPORT/node1.pid"
sleep 1

targets=("kafka:$KPORT" "runnel:$RPORT")
[[ "${KAFKA_FSYNC:-0}" == 1 ]] && targets+=("kafka-fsync:$KFPORT")
: > "$OUT/results.txt"
for round in $(seq "$ROUNDS"); do
  for t in "${targets[@]}"; do
    name="${t%%:*}"; port="${t##*:}"
    "$PEERS/bench.sh" --bootstrap "127.0.0.1:$port" --topic "d512-$name-$round" --label "durable-512 $name r$round" \
      --num-records "$RECORDS" --record-size 512 --partitions 12 --acks all --batch-size 131072 --linger-ms 5 \
      --no-consumer | tee -a "$OUT/results.txt"
    "$PEERS/bench.sh" --bootstrap "127.0.0.1:$port" --topic "lat-$name-$round" --label "latency-1k $name r$round" \
      --num-records $((1000 * LATENCY_SECONDS)) --throughput 1000 --record-size 100 --partitions 1 --acks all \
      --linger-ms 0 --no-consumer | tee -a "$OUT/results.txt"
  done
done

python3 - "$OUT/results.txt" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    scen, name, _ = kv["label"].strip('"').split()
    rows.setdefault((scen, name), []).append(kv)
def med(rs, k):
    vals = [float(r[k]) for r in rs if r.get(k) not in (None, "na")]
    return statistics.median(vals) if vals else float("nan")
print("\nscenario      system       rec/s(med)  MB/s   p50  p99  p99.9 ms  broker_cpu_s  rss_peak_mb  runs")
for (scen, name), rs in sorted(rows.items()):
    print(f"{scen:13} {name:12} {med(rs,'prod_msgs_s'):10.0f} {med(rs,'prod_MB_s'):6.1f} "
          f"{med(rs,'lat_p50'):4.0f} {med(rs,'lat_p99'):4.0f} {med(rs,'lat_p999'):5.0f}    "
          f"{med(rs,'broker_cpu_s'):10.1f}  {rs[-1].get('broker_rss_peak_mb','na'):>10}  {len(rs)}")
PY
