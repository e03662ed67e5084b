#!/usr/bin/env python3
"""The per-partition cost of a three-broker cluster: memory, idle CPU and open files of
each broker with no partitions, then with each COUNT partitions at replication factor 3
(every broker holds a replica of every partition), measured while nothing is produced.
Runs `runnel dev --brokers 3`, then a 3-node Apache Kafka from ../shared/peers/kafka
(combined broker+controller nodes, 1 GiB heap each), one after the other.

usage: .cache/venv/bin/python bench/partition_cost.py [COUNT ...]    (default 1000 10000)
env:   RUNNEL_BIN (default target/release/runnel), SYSTEMS (default "runnel kafka"),
       IDLE_S (seconds of CPU sampled, default 20), PORT / KAFKA_PORT (default 32000 / 39592),
       OUT (default /tmp/runnel-partition-cost), PEERS_KAFKA (default ../shared/peers/kafka)
"""

import os
import re
import shutil
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from harness import DevCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNEL = os.environ.get("RUNNEL_BIN", os.path.join(ROOT, "target", "release", "runnel"))
PORT = int(os.environ.get("PORT", "32000"))
KAFKA_PORT = int(os.environ.get("KAFKA_PORT", "39592"))
PEERS = os.environ.get("PEERS_KAFKA", os.path.join(ROOT, "..", "shared", "peers", "kafka"))
PEERS_HOME = os.environ.get("PEERS_KAFKA_HOME", "/tmp/peers/kafka")
IDLE_S = float(os.environ.get("IDLE_S", "20"))
OUT = os.environ.get("OUT", "/tmp/runnel-partition-cost")
PER_TOPIC = 100
TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid):
    """(CPU seconds, RSS MiB, open files) of a process."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    rss = int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1)) / 1024
    return cpu, rss, len(os.listdir(f"/proc/{pid}/fd"))


def measure(pids, label):
    before = [proc_stat(p) for p in pids]
    time.sleep(IDLE_S)
    after = [proc_stat(p) for p in pids]
    cpu = [(a[0] - b[0]) / IDLE_S * 100 for b, a in zip(before, after)]
    row = (label, sum(cpu) / len(cpu), sum(a[1] for a in after) / len(after), sum(a[2] for a in after) / len(after))
    print(f"| {row[0]} | {row[1]:.1f} | {row[2]:.0f} | {row[3]:.0f} |", flush=True)
    return row


def settle(pids):
    """Waits (bounded) until no broker's open-file count moved for 10 s: the brokers have
    created every replica (Kafka names leaders before its brokers have made the logs)."""
    last, still, deadline = None, 0, time.monotonic() + 600
    while still < 2 and time.monotonic() < deadline:
        now = [proc_stat(p)[2] for p in pids]
        still = still + 1 if now == last else 0
        last = now
        time.sleep(5)


def leaders_missing(admin, prefix):
    md = admin.list_topics(timeout=60)
    return sum(1 for t in md.topics.values() if t.topic.startswith(prefix)
               for p in t.partitions.values() if p.leader < 0)


class Runnel:
    def start(self):
        shutil.rmtree(OUT, ignore_errors=True)
        self.dev = DevCluster(RUNNEL, 3, PORT, OUT, OUT + ".log")
        return list(self.dev.pids.values()), ",".join(self.dev.addresses.values())

    def stop(self):
        self.dev.stop()
        shutil.rmtree(OUT, ignore_errors=True)


class Kafka:
    def start(self):
        subprocess.run([os.path.join(PEERS, "install.sh")], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(PEERS, "start-cluster.sh"), "3", str(KAFKA_PORT)], check=True,
                       stdout=subprocess.DEVNULL)
        run = os.path.join(PEERS_HOME, f"run-{KAFKA_PORT}")
        pids = [int(open(os.path.join(run, f"node{i}.pid")).read()) for i in (1, 2, 3)]
        return pids, ",".join(f"127.0.0.1:{KAFKA_PORT + i}" for i in range(3))

    def stop(self):
        subprocess.run([os.path.join(PEERS, "stop-cluster.sh"), str(KAFKA_PORT), "--wipe"],
                       stdout=subprocess.DEVNULL)


def run(system, name, counts):
    pids, bootstrap = system.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            assert time.monotonic() < deadline, "the cluster did not start"
            time.sleep(0.5)
        print(f"\n{name}\n")
        print("| partitions (RF 3) | idle CPU % of a core, per broker | RSS MiB per broker | open files per broker |")
        print("|---|---|---|---|")
        base = measure(pids, "0")
        made, n = 0, 0
        for count in sorted(counts):
            started = time.monotonic()
            while made < count:
                names = [f"cost{n}-{i}" for i in range(min(10, (count - made) // PER_TOPIC) or 1)]
                n += 1
                for f in admin.create_topics([NewTopic(t, PER_TOPIC, 3) for t in names],
                                             operation_timeout=120, request_timeout=180).values():
                    f.result(timeout=180)
                made += PER_TOPIC * len(names)
            while leaders_missing(admin, "cost"):
                assert time.monotonic() - started < 600, "leaders missing after 10 minutes"
                time.sleep(2)
            settle(pids)
            ready = time.monotonic() - started - 10
            row = measure(pids, f"{made} (created and led in {ready:.0f} s)")
            print(f"|   per 1000 partitions | {(row[1] - base[1]) / made * 1000:.2f} |"
                  f" {(row[2] - base[2]) / made * 1000:.1f} | {(row[3] - base[3]) / made * 1000:.0f} |", flush=True)
    finally:
        # Closed first: left open, the client logs every failed reconnect once the cluster
        # has stopped.
        del admin
        system.stop()


def main():
    counts = [int(c) for c in sys.argv[1:]] or [1000, 10000]
    systems = {"runnel": (Runnel(), "Runnel (`runnel dev --brokers 3`)"),
               "kafka": (Kafka(), "Apache Kafka (3 combined nodes, 1 GiB heap each)")}
    for key in os.environ.get("SYSTEMS", "runnel kafka").split():
        system, name = systems[key]
        run(system, name, counts)


if __name__ == "__main__":
    main()
