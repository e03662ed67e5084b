#!/usr/bin/env bash
# SCRAM-SHA-512 logins per second against one broker, Runnel and Apache Kafka in the same
# run: each has a PLAINTEXT listener (to create the user with kafka-configs.sh) and a
# SASL_PLAINTEXT one with SCRAM; `runnel bench logins` logs in again and again from
# CONNECTIONS workers (connect, SaslHandshake, two SaslAuthenticate rounds, disconnect),
# alternating the systems for ROUNDS rounds. The brokers' CPU seconds per 1000 logins
# come from /proc.
#
# usage: bench/logins.sh [ROUNDS]      (default 3)
# env:   DURATION (s per run, default 10), CONNECTIONS (default 8), OUT (default
#        /tmp/runnel-bench-logins), PEERS_KAFKA (default ../shared/peers/kafka)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-8}"
OUT="${OUT:-/tmp/runnel-bench-logins}"
KPORT=37392   # Kafka: PLAINTEXT 37392, SASL_PLAINTEXT 37393, controller 37492
RPORT=37892   # Runnel: PLAINTEXT 37892, SASL_PLAINTEXT 37893
RUNNEL="$ROOT/target/release/runnel"

mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)
# shellcheck source=/dev/null
source "$PEERS/common.sh"

RPID=""
cleanup() {
  [[ -n "$RPID" ]] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null || true
  "$PEERS/stop-cluster.sh" "$KPORT" --wipe >/dev/null 2>&1 || true
  rm -rf "$OUT/runnel-data"
}
trap cleanup EXIT

EXTRA_BROKER_PROPS="listeners=PLAINTEXT://127.0.0.1:$KPORT,SASL_PLAINTEXT://127.0.0.1:$((KPORT+1)),CONTROLLER://127.0.0.1:$((KPORT+100))
advertised.listeners=PLAINTEXT://127.0.0.1:$KPORT,SASL_PLAINTEXT://127.0.0.1:$((KPORT+1))
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;" \
  "$PEERS/start-cluster.sh" 1 "$KPORT" >/dev/null
rm -rf "$OUT/runnel-data"
"$RUNNEL" dev --port "$RPORT" --data-dir "$OUT/runnel-data" \
    --set "listeners=PLAINTEXT://127.0.0.1:$RPORT,SASL_PLAINTEXT://127.0.0.1:$((RPORT+1))" \
    --set sasl.enabled.mechanisms=SCRAM-SHA-512 > "$OUT/runnel-dev.out" 2> "$OUT/runnel.log" &
RPID=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$((RPORT+1))) 2>/dev/null && break; sleep 0.1; done
for port in "$KPORT" "$RPORT"; do
  kafka_tool kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$port" --entity-type users \
      --entity-name bench --alter --add-config 'SCRAM-SHA-512=[iterations=4096,password=bench-secret]' >/dev/null
done
sleep 2   # the credential reaches Kafka's metadata cache

cpu_s() {
  [[ -r /proc/$1/stat ]] || { echo 0; return; }
  echo "scale=3; $(awk '{print $14 + $15}' "/proc/$1/stat") / $(getconf CLK_TCK)" | bc
}
run() {  # label port pid round
  local before after
  before=$(cpu_s "$3")
  "$RUNNEL" bench logins --bootstrap "127.0.0.1:$2" --user bench --password bench-secret \
      --connections "$CONNECTIONS" --duration "$DURATION" --json "$OUT/$1-$4.json" > "$OUT/$1-$4.txt"
  after=$(cpu_s "$3")
  echo "$after - $before" | bc > "$OUT/$1-$4.cpu"
  echo "  $1 round $4: $(grep -o '[0-9]* logins/s' "$OUT/$1-$4.txt"), broker CPU $(cat "$OUT/$1-$4.cpu") s"
}
KPID=$(cat "$PEERS_KAFKA_HOME/run-$KPORT/node1.pid")
RBPID=$(grep "^broker" "$OUT/runnel-dev.out" | tail -1 | awk '{print $4}' || true)
RBPID="${RBPID:-$RPID}"
: > "$OUT/summary.txt"
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then
    run kafka $((KPORT+1)) "$KPID" "$r"; run runnel $((RPORT+1)) "$RBPID" "$r"
  else
    run runnel $((RPORT+1)) "$RBPID" "$r"; run kafka $((KPORT+1)) "$KPID" "$r"
  fi
done | tee -a "$OUT/summary.txt"
python3 - "$OUT" "$ROUNDS" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for who in ("kafka", "runnel"):
    rows[who] = []
    for r in range(1, rounds + 1):
        rep = json.load(open(f"{out}/{who}-{r}.json"))
        cpu = float(open(f"{out}/{who}-{r}.cpu").read())
        rows[who].append((rep["logins_per_s"], rep["latency_ms"]["p99"], 1000 * cpu / max(rep["logins"], 1)))
for who, rs in rows.items():
    print(f"  {who:7s} {statistics.median(x[0] for x in rs):8.0f} logins/s  p99 {statistics.median(x[1] for x in rs):6.2f} ms"
          f"  {statistics.median(x[2] for x in rs):6.3f} broker CPU-s per 1000 logins")
print(f"Runnel / Kafka logins/s: {statistics.median(a[0] / b[0] for a, b in zip(rows['runnel'], rows['kafka'])):.2f}x")
PY
