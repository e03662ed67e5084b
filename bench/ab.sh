#!/usr/bin/env bash
# A/B of two Runnel builds on one machine, with Kafka's noise taken out: both brokers run
# side by side (single broker each, fsync on) and rounds alternate between them, driven by
# Kafka's ProducerPerformance through ../shared/peers/kafka/bench.sh. Scenarios as in
# bench/single-node.sh: durable-512 and latency-1k.
#
# usage: bench/ab.sh BINARY_A BINARY_B [ROUNDS]    (default 5; latency-1k gets ROUNDS-2, at least 1)
# e.g.:  git worktree add /tmp/before <commit> && (cd /tmp/before && cargo build --release)
#        bench/ab.sh target/release/runnel /tmp/before/target/release/runnel
# env:   RECORDS (durable-512, default 1500000), LATENCY_RECORDS (default 20000),
#        OUT (default /tmp/runnel-ab), PEERS_KAFKA (default ../shared/peers/kafka)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
A="$1"; B="$2"; ROUNDS="${3:-5}"
RECORDS="${RECORDS:-1500000}"; LATENCY_RECORDS="${LATENCY_RECORDS:-20000}"
OUT="${OUT:-/tmp/runnel-ab}"
rm -rf "$OUT"; mkdir -p "$OUT"
"$PEERS/install.sh" >/dev/null
"$A" dev --port 39901 --data-dir "$OUT/a" --set auto.create.topics.enable=false > "$OUT/a.log" 2>&1 & PA=$!
"$B" dev --port 39902 --data-dir "$OUT/b" --set auto.create.topics.enable=false > "$OUT/b.log" 2>&1 & PB=$!
trap 'kill $PA $PB 2>/dev/null || true' EXIT
sleep 2
run() { # scenario round
  for t in a:39901 b:39902; do
    n=${t%%:*}; p=${t##*:}
    if [[ $1 == durable-512 ]]; then
      "$PEERS/bench.sh" --bootstrap "127.0.0.1:$p" --topic "d-$n-$2" --label "durable-512 $n r$2" \
        --num-records "$RECORDS" --record-size 512 --partitions 12 --acks all --batch-size 131072 \
        --linger-ms 5 --no-consumer >> "$OUT/results.txt"
    else
      "$PEERS/bench.sh" --bootstrap "127.0.0.1:$p" --topic "l-$n-$2" --label "latency-1k $n r$2" \
        --num-records "$LATENCY_RECORDS" --throughput 1000 --record-size 100 --partitions 1 --acks all \
        --linger-ms 0 --no-consumer >> "$OUT/results.txt"
    fi
  done
}
for r in $(seq "$ROUNDS"); do run durable-512 "$r"; done
for r in $(seq $(( ROUNDS > 3 ? ROUNDS - 2 : 1 ))); do run latency-1k "$r"; done
python3 - "$OUT/results.txt" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    scen, name, rnd = kv["label"].strip('"').split()
    rows[(scen, name, rnd)] = kv
for scen, key in [("durable-512", "prod_msgs_s"), ("latency-1k", "lat_p99")]:
    rounds = sorted({r for s, _, r in rows if s == scen})
    ratios = [float(rows[(scen, "a", r)][key]) / float(rows[(scen, "b", r)][key]) for r in rounds
              if (scen, "a", r) in rows and (scen, "b", r) in rows and float(rows[(scen, "b", r)][key]) > 0]
    if ratios:
        print(f"{scen} {key} A/B per round: {', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}x")
PY
