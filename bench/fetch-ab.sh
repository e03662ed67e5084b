#!/usr/bin/env bash
# What reading costs a broker, A/B of two Runnel builds side by side (single broker each):
# both get the same topic filled once (12 partitions, 512-byte records), then Kafka's
# ConsumerPerformance reads it from the start, rounds alternating between the two; each
# line has the broker's CPU seconds for the read (from /proc) and the consumer's MB/s.
#
# usage: bench/fetch-ab.sh BINARY_A BINARY_B [ROUNDS]    (default 3)
# env:   RECORDS (default 3000000), OUT (default /tmp/runnel-fetch-ab), PEERS_KAFKA
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
A="$1"; B="$2"; ROUNDS="${3:-3}"
RECORDS="${RECORDS:-3000000}"
OUT="${OUT:-/tmp/runnel-fetch-ab}"
rm -rf "$OUT"; mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
# shellcheck source=/dev/null
source "$PEERS/common.sh"
"$A" dev --port 39911 --data-dir "$OUT/a" > "$OUT/a.log" 2>&1 & PA=$!
"$B" dev --port 39912 --data-dir "$OUT/b" > "$OUT/b.log" 2>&1 & PB=$!
trap 'kill $PA $PB 2>/dev/null || true' EXIT
sleep 2
cpu_s() { awk '{ print ($14 + $15) / 100 }' "/proc/$1/stat"; }
for port in 39911 39912; do
  "$B" bench --bootstrap "127.0.0.1:$port" --topic fill --keep-topic --partitions 12 --replication-factor 1 \
      --record-size 512 --records "$RECORDS" --acks 1 --progress false 2>&1 | grep '^produce'
done
sync
for round in $(seq "$ROUNDS"); do
  for side in a b; do
    if [[ $side == a ]]; then port=39911; pid=$PA; else port=39912; pid=$PB; fi
    before=$(cpu_s "$pid")
    kafka_tool org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "127.0.0.1:$port" --topic fill \
        --messages "$RECORDS" --timeout 60000 --group "read-$round-$side" > "$OUT/read-$round-$side.txt" 2>&1
    after=$(cpu_s "$pid")
    # ConsumerPerformance's last line: start, end, MB read, MB/s, records, records/s, ...
    mbs=$(tail -1 "$OUT/read-$round-$side.txt" | awk -F', *' '{ print $4 }')
    echo "round $round $side: broker CPU $(awk "BEGIN { print $after - $before }") s, consumer $mbs MB/s"
  done
done
