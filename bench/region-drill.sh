#!/usr/bin/env bash
# The region-loss drill side by side: Runnel vs Apache Kafka, 9 brokers each in 3 regions
# (network namespaces, LATENCY round trip between regions), replication factor 3 with one
# replica per region, acks=all idempotent producers and a consumer group in every region
# reading from its own region (client.rack), one region cut off completely for a third of
# the run. The same `runnel chaos --drill region-loss` workload, faults and measurements
# against both; Kafka is started by runnel chaos through bench/kafka-broker.sh (KRaft,
# broker.rack = region, min.insync.replicas=2, RackAwareReplicaSelector). Rounds alternate.
# Needs root, iproute2 and iptables-legacy (the latency), and the Kafka jars of
# ../shared/peers/kafka/install.sh.
#
# usage: bench/region-drill.sh [ROUNDS]        (default 3)
# env:   LATENCY (default 30ms), DURATION (seconds, default 90), OUT (default /tmp/runnel-region-drill)
#        PEERS_KAFKA (default ../shared/peers/kafka)
#
# Prints per system the median (and range) over the rounds of: acknowledged writes lost,
# RTO per surviving region (worst of the two), consumers reading again, group members
# committing again, whether metadata stayed writable, share of bytes read across regions, replicas caught up and leaders back after the heal, and acks=all send
# latency (before the cut, to a leader in the producer's region and elsewhere; away from
# the fault). SUMMARY_ONLY=1 prints the summary of the rounds already in OUT.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="${PEERS_KAFKA:-$ROOT/../shared/peers/kafka}"
ROUNDS="${1:-3}"
LATENCY="${LATENCY:-30ms}"
DURATION="${DURATION:-90}"
OUT="${OUT:-/tmp/runnel-region-drill}"
RUNNEL="$ROOT/target/release/runnel"

mkdir -p "$OUT"
if [[ "${SUMMARY_ONLY:-0}" != 1 ]]; then
"$PEERS/install.sh" >/dev/null
(cd "$ROOT" && cargo build --release -q)

drill() {  # drill SYSTEM ROUND [extra args...]
  local system=$1 round=$2; shift 2
  local dir="$OUT/$system-$round"
  rm -rf "$dir"; mkdir -p "$dir"
  "$RUNNEL" chaos --drill region-loss --brokers 9 --regions 3 --inter-region-latency "$LATENCY" \
    --partitions 9 --producers 3 --consumers 3 --group-consumers 1 --rate 60 --duration "$DURATION" \
    --port 43092 --data-dir "$dir/data" --logs "$dir/logs" --json "$dir/report.json" \
    --drill-json "$dir/drill.json" --chart "$dir/chart.svg" "$@" > "$dir/out.txt" 2>&1 \
    || echo "$system round $round: runnel chaos exited $? (see $dir/out.txt)" >&2
  rm -rf "$dir/data"
  grep -E "RPO|RTO|read again|committed offsets again|metadata|bytes read|after the heal|anomal" "$dir/out.txt" | sed "s/^/  $system $round: /" || true
}

for r in $(seq "$ROUNDS"); do
  # Both check for leaders away from their preferred replica every 30 s (Kafka's default
  # is 300 s, Runnel's 30 s).
  drill runnel "$r" --set leader.imbalance.check.interval.seconds=30
  drill kafka "$r" --set leader.imbalance.check.interval.seconds=30 --broker-command "$ROOT/bench/kafka-broker.sh"
done
fi

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys, pathlib
out, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def rows(system):
    got = []
    for r in range(1, rounds + 1):
        d, rep = out / f"{system}-{r}" / "drill.json", out / f"{system}-{r}" / "report.json"
        if d.exists() and rep.exists():
            got.append((json.loads(d.read_text()), json.loads(rep.read_text())))
    return got
def med(v):
    v = [x for x in v if x is not None]
    return (statistics.median(v), min(v), max(v)) if v else None
def show(name, m, unit=""):
    return f"{name}: " + ("n/a" if m is None else f"{m[0]:.2f}{unit} ({m[1]:.2f}-{m[2]:.2f})")
for system in ("runnel", "kafka"):
    rs = rows(system)
    if not rs:
        print(f"{system}: no complete round"); continue
    lost = [d["rpo_lost_acknowledged"] for d, _ in rs]
    print(f"{system} ({len(rs)} rounds): acknowledged writes lost {lost}")
    print("  " + show("RTO s (worst surviving region)", med([max(ms for _, ms in d["rto_ms"]) / 1000 for d, _ in rs])))
    print("  " + show("consumers read again s (worst surviving region)", med([max(ms for _, ms in d["consumers_read_again_ms"]) / 1000 for d, _ in rs])))
    print("  " + show("group members committed again s (worst surviving region)", med([max(ms for _, ms in d.get("groups_committed_again_ms") or [("", None)]) / 1000 if d.get("groups_committed_again_ms") else None for d, _ in rs])))
    writable = [d.get("metadata_written_during_cut_ms") for d, _ in rs]
    print(f"  metadata writable during the cut: {sum(w is not None for w in writable)} of {len(rs)} rounds; " + show("topic created after the cut s", med([w / 1000 if w is not None else None for w in writable])))
    print("  " + show("bytes read across regions", med([100 * d["bytes_read_across_regions"] / max(d["bytes_read"], 1) for d, _ in rs]), "%"))
    print("  " + show("caught up after heal s", med([(d["caught_up_after_heal_ms"] or 0) / 1000 if d["caught_up_after_heal_ms"] is not None else None for d, _ in rs])))
    print("  " + show("leaders back after heal s", med([d["leaders_back_after_heal_ms"] / 1000 if d["leaders_back_after_heal_ms"] is not None else None for d, _ in rs])))
    print("  " + show("send p50 ms before the cut, leader in the producer's region", med([d["send_ms_leader_in_region"][0] for d, _ in rs])))
    print("  " + show("send p99 ms before the cut, leader in the producer's region", med([d["send_ms_leader_in_region"][1] for d, _ in rs])))
    print("  " + show("send p50 ms before the cut, leader elsewhere", med([d["send_ms_leader_elsewhere"][0] for d, _ in rs])))
    print("  " + show("send p50 ms away from the fault", med([rep["baseline_send_ms"][0] for _, rep in rs])))
    print("  " + show("send p99 ms away from the fault", med([rep["baseline_send_ms"][1] for _, rep in rs])))
PY
