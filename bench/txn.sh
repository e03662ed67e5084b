#!/usr/bin/env bash
# Transactional producers, Runnel vs Apache Kafka, three brokers each, replication factor 3,
# on this machine in the same run with the same program (bench/java/TxnBench.java, the Java
# client 4.3.1): 512-byte records, a commit every 100 ms, acks=all; and, for each system, the
# same producer without transactions (idempotent), to show what transactions cost. Rounds
# alternate between the systems. Kafka runs with min.insync.replicas=2 (a majority, as
# Runnel's Raft quorum); Runnel fsyncs before it acknowledges, Kafka does not.
#
# usage: bench/txn.sh [ROUNDS]      (default 3)
# env:   SECONDS_PER_RUN (default 10), COMMIT_MS (default 100), RECORD_SIZE (default 512),
#        RATE (records/s; default 0: as fast as the producer takes them),
#        PEERS_KAFKA (default ../shared/peers/kafka), OUT (default /tmp/runnel-bench-txn),
#        JAVA_OPTS (extra JVM options for the client, e.g. -Dlog4j2.configurationFile=... to
#        see its warnings in $OUT/java.err)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
SECS="${SECONDS_PER_RUN:-10}"
COMMIT_MS="${COMMIT_MS:-100}"
RECORD_SIZE="${RECORD_SIZE:-512}"
RATE="${RATE:-0}"
OUT="${OUT:-/tmp/runnel-bench-txn}"
KPORT=39392
RPORT=39892
KBOOT="127.0.0.1:$KPORT,127.0.0.1:$((KPORT + 1)),127.0.0.1:$((KPORT + 2))"
RBOOT="127.0.0.1:$RPORT,127.0.0.1:$((RPORT + 1)),127.0.0.1:$((RPORT + 2))"
RUNNEL="$ROOT/target/release/runnel"
PEERS_HOME="${PEERS_KAFKA_HOME:-/tmp/peers/kafka}"

mkdir -p "$OUT/classes"
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)
javac -d "$OUT/classes" -cp "$PEERS_HOME/lib/*" "$ROOT/bench/java/TxnBench.java"

DEV_PID=""
cleanup() {
  [[ -n "$DEV_PID" ]] && kill "$DEV_PID" 2>/dev/null && wait "$DEV_PID" 2>/dev/null || true
  "$PEERS/stop-cluster.sh" "$KPORT" --wipe >/dev/null 2>&1 || true
  rm -rf "$OUT/runnel-data"
}
trap cleanup EXIT

EXTRA_BROKER_PROPS="min.insync.replicas=2" "$PEERS/start-cluster.sh" 3 "$KPORT" >/dev/null
rm -rf "$OUT/runnel-data"
"$RUNNEL" dev --brokers 3 --port "$RPORT" --data-dir "$OUT/runnel-data" > "$OUT/runnel-dev.out" 2> "$OUT/runnel.log" &
DEV_PID=$!
for _ in $(seq 100); do
  [[ $(grep -c "listening on" "$OUT/runnel-dev.out" 2>/dev/null) -ge 3 ]] && break
  sleep 0.1
done
sleep 2

run() {  # system bootstrap commit_ms round
  local line
  # A run that fails (say, a commit past max.block.ms) is reported and left out of the medians.
  # shellcheck disable=SC2086 # JAVA_OPTS holds several options
  line=$(java -XX:+UseSerialGC -Xmx1g ${JAVA_OPTS:-} -cp "$OUT/classes:$PEERS_HOME/lib/*" -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
      TxnBench --bootstrap "$2" --topic "bench-$1-c$3-r$4" --seconds "$SECS" --record-size "$RECORD_SIZE" \
      --commit-ms "$3" --rate "$RATE" 2>>"$OUT/java.err" | tail -1) || line="failed (see $OUT/java.err)"
  case "$line" in
    records_per_s=*) echo "$1 commit_ms=$3 round=$4 $line" | tee -a "$OUT/summary.txt" ;;
    *) echo "$1 commit_ms=$3 round=$4 FAILED: $line" | tee -a "$OUT/failed.txt" ;;
  esac
}

: > "$OUT/summary.txt"
: > "$OUT/failed.txt"
for r in $(seq "$ROUNDS"); do
  run kafka "$KBOOT" "$COMMIT_MS" "$r"
  run runnel "$RBOOT" "$COMMIT_MS" "$r"
  run kafka "$KBOOT" 0 "$r"
  run runnel "$RBOOT" 0 "$r"
done
echo "==> medians over $ROUNDS rounds"
python3 - "$OUT/summary.txt" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    system, commit = line.split()[0], line.split()[1]
    kv = dict(re.findall(r"(\w+)=([\d.]+)", line))
    rows.setdefault((system, commit), []).append(kv)
med = lambda k, key: statistics.median(float(r[key]) for r in rows[k])
for (system, commit) in sorted(rows):
    k = (system, commit)
    print(f"{system:7} {commit:14} records/s {med(k, 'records_per_s'):>10.0f}  commit p50 {med(k, 'commit_p50_ms'):6.1f} ms  p99 {med(k, 'commit_p99_ms'):6.1f} ms")
tx = next(c for s, c in rows if c != "commit_ms=0")
ratio = med(("runnel", tx), "records_per_s") / med(("kafka", tx), "records_per_s")
p99 = med(("runnel", tx), "commit_p99_ms") / max(med(("kafka", tx), "commit_p99_ms"), 0.001)
cost_r = 1 - med(("runnel", tx), "records_per_s") / med(("runnel", "commit_ms=0"), "records_per_s")
cost_k = 1 - med(("kafka", tx), "records_per_s") / med(("kafka", "commit_ms=0"), "records_per_s")
print(f"transactional throughput Runnel/Kafka {ratio:.2f}x; commit p99 Runnel/Kafka {p99:.2f}x; "
      f"cost of transactions: Runnel {cost_r:.0%}, Kafka {cost_k:.0%}")
PY
