#!/usr/bin/env bash
# The cost of TLS: three brokers, replication factor 3, acks=all, 512-byte records
# (durable-512), every connection encrypted, on this machine in the same run:
#   - Runnel plaintext     `runnel dev --brokers 3`
#   - Runnel TLS           `runnel dev --brokers 3 --tls` (TLS to clients, mutual TLS
#                          between brokers)
#   - Apache Kafka TLS     3 KRaft nodes with an SSL client listener, and mutual TLS on
#                          the inter-broker and controller listeners; the same CA and
#                          broker certificate as Runnel's, min.insync.replicas=2
# Each round runs `runnel bench` once against each, in rotating order; the load generator
# speaks TLS through --command-config. For every run the brokers' CPU seconds (utime +
# stime from /proc) are read before and after, and reported per GB produced.
#
# usage: bench/tls.sh [ROUNDS]        (default 3)
# env:   DURATION (seconds per run, default 10), SCENARIO (default durable-512),
#        PEERS_KAFKA (default ../shared/peers/kafka), OUT (default /tmp/runnel-bench-tls)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
DURATION="${DURATION:-10}"
SCENARIO="${SCENARIO:-durable-512}"
OUT="${OUT:-/tmp/runnel-bench-tls}"
KPORT=38392   # Kafka SSL clients 38392..38394, controllers +100, inter-broker +200
PPORT=38892   # Runnel plaintext brokers 38892..38894
TPORT=38992   # Runnel TLS brokers 38992..38994
RUNNEL="$ROOT/target/release/runnel"

mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)
# shellcheck source=/dev/null
source "$PEERS/common.sh"
KRUN="$PEERS_KAFKA_HOME/run-tls-$KPORT"

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$KRUN"/node*.pid; do [[ -f "$f" ]] && kill "$(cat "$f")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$OUT/plain-data" "$OUT/tls-data" "$PEERS_KAFKA_HOME"/data-tls-"$KPORT"-node*
}
trap cleanup EXIT

start_runnel() {  # name port [args...]: a 3-broker dev cluster; waits for its listeners
  local name="$1" port="$2"; shift 2
  rm -rf "$OUT/$name-data"
  "$RUNNEL" dev --brokers 3 --port "$port" --data-dir "$OUT/$name-data" "$@" \
      > "$OUT/$name-dev.out" 2> "$OUT/$name.log" &
  PIDS+=($!)
  for _ in $(seq 200); do
    [[ $(grep -c "listening on" "$OUT/$name-dev.out" 2>/dev/null) -ge 3 ]] && return 0
    sleep 0.1
  done
  echo "runnel $name did not start; see $OUT/$name.log" >&2; exit 1
}

runnel_pids() {  # name -> the brokers' current pids
  grep "^broker [0-9]* pid" "$OUT/$1-dev.out" | awk '{p[$2]=$4} END {for (b in p) print p[b]}'
}

start_runnel plain "$PPORT"
start_runnel tls "$TPORT" --tls
sleep 2   # registrations and the first controller election
TLS_DIR="$OUT/tls-data/tls"
CLIENT="$OUT/client-tls.properties"
printf 'security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=%s\n' "$TLS_DIR/ca.pem" > "$CLIENT"

# Kafka with the same certificates: SSL for clients, mutual TLS between brokers.
mkdir -p "$KRUN"
VOTERS=""
for i in 1 2 3; do VOTERS+="${VOTERS:+,}$i@127.0.0.1:$((KPORT+100+i-1))"; done
CLUSTER_ID=$(kafka_tool kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
cp "$PEERS_KAFKA_HOME/run-"*/log4j2.properties "$KRUN/" 2>/dev/null || printf 'rootLogger.level = INFO\n' > "$KRUN/log4j2.properties"
for i in 1 2 3; do
  DATA="$PEERS_KAFKA_HOME/data-tls-$KPORT-node$i"
  rm -rf "$DATA"
  cat > "$KRUN/node$i.properties" <<PROPS
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$VOTERS
listeners=SSL://127.0.0.1:$((KPORT+i-1)),INTERNAL://127.0.0.1:$((KPORT+200+i-1)),CONTROLLER://127.0.0.1:$((KPORT+100+i-1))
advertised.listeners=SSL://127.0.0.1:$((KPORT+i-1)),INTERNAL://127.0.0.1:$((KPORT+200+i-1))
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
listener.security.protocol.map=SSL:SSL,INTERNAL:SSL,CONTROLLER:SSL
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=runnel-dev
ssl.key.password=runnel-dev
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.internal.ssl.client.auth=required
listener.name.controller.ssl.client.auth=required
log.dirs=$DATA
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
num.network.threads=3
num.io.threads=8
log.retention.hours=1
auto.create.topics.enable=false
PROPS
  mkdir -p "$KRUN/node$i"
  kafka_tool kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" -c "$KRUN/node$i.properties" \
      > "$KRUN/node$i/format.out" 2>&1 || { cat "$KRUN/node$i/format.out" >&2; exit 1; }
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$KRUN/node$i.pid" \
      "$JAVA" ${KAFKA_HEAP_OPTS:--Xms1G -Xmx1G} -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -Djava.awt.headless=true -Dkafka.logs.dir="$KRUN/node$i" -Dlog4j2.configurationFile="$KRUN/log4j2.properties" \
      -cp "$KAFKA_CP" kafka.Kafka "$KRUN/node$i.properties" > "$KRUN/node$i/stdout.log" 2>&1 < /dev/null &
done
KALL="127.0.0.1:$KPORT,127.0.0.1:$((KPORT+1)),127.0.0.1:$((KPORT+2))"
KBOOT="127.0.0.1:$KPORT"
deadline=$(( $(date +%s) + 180 ))
until [[ $(kafka_tool org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$KALL" \
          --command-config "$CLIENT" 2>/dev/null | grep -c '(id: ') -ge 3 ]]; do
  if (( $(date +%s) > deadline )); then echo "Kafka (TLS) did not start; see $KRUN/node*/server.log" >&2; exit 1; fi
  sleep 1
done

cpu_s() {  # pids... -> their CPU seconds (utime + stime)
  local t=0 p
  for p in "$@"; do
    [[ -r /proc/$p/stat ]] && t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") ))
  done
  echo "scale=3; $t / $(getconf CLK_TCK)" | bc
}

run() {  # label bootstrap pids-function [bench args...]
  local label="$1" boot="$2" pidsf="$3" round="$4"; shift 4
  local pids before after
  mapfile -t pids < <($pidsf)
  before=$(cpu_s "${pids[@]}")
  "$RUNNEL" bench --bootstrap "$boot" --scenario "$SCENARIO" --replication-factor 3 --duration "$DURATION" \
      --progress false --json "$OUT/$label-$round.json" "$@" > "$OUT/$label-$round.txt" 2>&1
  after=$(cpu_s "${pids[@]}")
  echo "$(echo "$after - $before" | bc)" > "$OUT/$label-$round.cpu"
  echo "  $label round $round: $(grep '^produce' "$OUT/$label-$round.txt" | awk '{print $4, "rec/s"}'), broker CPU $(cat "$OUT/$label-$round.cpu") s"
}
plain_pids() { runnel_pids plain; }
tls_pids() { runnel_pids tls; }
kafka_pids() { for i in 1 2 3; do cat "$KRUN/node$i.pid"; done; }

: > "$OUT/summary.txt"
for r in $(seq "$ROUNDS"); do
  order=("runnel-plain" "runnel-tls" "kafka-tls")
  # Rotate who goes first.
  for k in $(seq $(( (r - 1) % 3 ))); do order=("${order[@]:1}" "${order[0]}"); done
  for who in "${order[@]}"; do
    case "$who" in
      runnel-plain) run runnel-plain "127.0.0.1:$PPORT" plain_pids "$r" ;;
      runnel-tls) run runnel-tls "127.0.0.1:$TPORT" tls_pids "$r" --command-config "$CLIENT" ;;
      kafka-tls) run kafka-tls "$KBOOT" kafka_pids "$r" --command-config "$CLIENT" ;;
    esac
  done
done | tee -a "$OUT/summary.txt"

python3 - "$OUT" "$ROUNDS" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(label):
    rows = []
    for r in range(1, rounds + 1):
        rep = json.load(open(f"{out}/{label}-{r}.json"))
        cpu = float(open(f"{out}/{label}-{r}.cpu").read())
        gb = rep["produce"]["mb_per_s"] * rep["elapsed_s"] / 1e3
        rows.append((rep["produce"]["records_per_s"], rep["produce"]["latency_ms"]["p99"], cpu / gb))
    return rows
data = {k: load(k) for k in ("runnel-plain", "runnel-tls", "kafka-tls")}
med = lambda rows, i: statistics.median(r[i] for r in rows)
print("median over", rounds, "rounds: records/s, produce p99 ms, broker CPU s per GB produced")
for k, rows in data.items():
    print(f"  {k:13s} {med(rows, 0):10.0f} rec/s  p99 {med(rows, 1):7.1f} ms  {med(rows, 2):6.1f} CPU-s/GB")
ratio = lambda a, b, i: statistics.median(x[i] / y[i] for x, y in zip(data[a], data[b]))
print(f"Runnel TLS / Runnel plaintext records/s: {ratio('runnel-tls', 'runnel-plain', 0):.2f}x (per-round median)")
print(f"Runnel TLS / Kafka TLS records/s:        {ratio('runnel-tls', 'kafka-tls', 0):.2f}x")
print(f"Runnel TLS / Kafka TLS p99:              {ratio('runnel-tls', 'kafka-tls', 1):.2f}x")
PY
echo "summary: $OUT/summary.txt"
