#!/usr/bin/env python3
"""Failover with many partitions: three brokers holding COUNT partitions at RF 3, one
broker stopped dead (SIGSTOP: no clean shutdown, no restart, its sockets stay open), and
the time until every partition it led has a leader elsewhere and accepts writes again.
Runs `runnel dev --brokers 3`, then a 3-node Apache Kafka from ../shared/peers/kafka
(combined broker+controller nodes, 1 GiB heap each, min.insync.replicas=2 on the topics).

Measured from the SIGSTOP until, in order: Metadata from a live broker names a leader other
than the stopped broker for every partition, and a producer (acks=all) has one record
acknowledged by every partition. Kafka's controller fences the stopped broker after
`broker.session.timeout.ms` (9 s by default) and only then moves its leaders; Runnel's
partitions elect among themselves once their leader's heartbeats (or, for quiet groups, the
broker's pings) stop for an election timeout.

usage: .cache/venv/bin/python bench/failover.py [COUNT]      (default 3000)
env:   RUNNEL_BIN (default target/release/runnel), SYSTEMS (default "runnel kafka"),
       PORT / KAFKA_PORT (default 31000 / 31200, below
       the ephemeral range), OUT (default /tmp/runnel-failover), PEERS_KAFKA
"""

import os
import shutil
import signal
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from harness import DevCluster, produce_everywhere

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNEL = os.environ.get("RUNNEL_BIN", os.path.join(ROOT, "target", "release", "runnel"))
PORT = int(os.environ.get("PORT", "31000"))
KAFKA_PORT = int(os.environ.get("KAFKA_PORT", "31200"))
PEERS = os.environ.get("PEERS_KAFKA", os.path.join(ROOT, "..", "shared", "peers", "kafka"))
PEERS_HOME = os.environ.get("PEERS_KAFKA_HOME", "/tmp/peers/kafka")
OUT = os.environ.get("OUT", "/tmp/runnel-failover")
PER_TOPIC = 100
PREFIX = "fail"


def leaders(admin):
    """{(topic, partition): leader} of the benchmark's partitions (-1: none)."""
    md = admin.list_topics(timeout=10)
    return {(t.topic, p.id): p.leader for t in md.topics.values() if t.topic.startswith(PREFIX)
            for p in t.partitions.values()}


class Runnel:
    name = "Runnel (`runnel dev --brokers 3`)"

    def start(self):
        shutil.rmtree(OUT, ignore_errors=True)
        self.dev = DevCluster(RUNNEL, 3, PORT, OUT, OUT + ".log")
        self.pids = self.dev.pids
        return self.dev.addresses

    def stop(self):
        self.dev.stop()
        shutil.rmtree(OUT, ignore_errors=True)


class Kafka:
    name = "Apache Kafka (3 combined nodes, 1 GiB heap each)"

    def start(self):
        subprocess.run([os.path.join(PEERS, "install.sh")], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(PEERS, "start-cluster.sh"), "3", str(KAFKA_PORT)], check=True,
                       stdout=subprocess.DEVNULL)
        run = os.path.join(PEERS_HOME, f"run-{KAFKA_PORT}")
        self.pids = {i: int(open(os.path.join(run, f"node{i}.pid")).read()) for i in (1, 2, 3)}
        return {n: f"127.0.0.1:{KAFKA_PORT + n - 1}" for n in self.pids}

    def stop(self):
        for pid in self.pids.values():
            os.kill(pid, signal.SIGCONT)
        subprocess.run([os.path.join(PEERS, "stop-cluster.sh"), str(KAFKA_PORT), "--wipe"],
                       stdout=subprocess.DEVNULL)


def run(system, count):
    nodes = system.start()
    try:
        bootstrap = ",".join(nodes.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            assert time.monotonic() < deadline, "the cluster did not start"
            time.sleep(0.5)
        for first in range(0, count // PER_TOPIC, 10):
            names = [f"{PREFIX}{i}" for i in range(first, min(first + 10, count // PER_TOPIC))]
            topics = [NewTopic(t, PER_TOPIC, 3, config={"min.insync.replicas": "2"}) for t in names]
            for f in admin.create_topics(topics, operation_timeout=120, request_timeout=180).values():
                f.result(timeout=180)
        deadline = time.monotonic() + 600
        while any(l < 0 for l in leaders(admin).values()) or len(leaders(admin)) < count:
            assert time.monotonic() < deadline, "leaders missing after 10 minutes"
            time.sleep(1)
        produce_everywhere(bootstrap, list(leaders(admin)), time.monotonic() + 300)
        time.sleep(15)  # idle: Runnel's groups go quiet, as most partitions of a big cluster are
        led = leaders(admin)
        victim = max(nodes, key=lambda n: sum(1 for l in led.values() if l == n))
        moved = [tp for tp, l in led.items() if l == victim]
        live = ",".join(a for n, a in nodes.items() if n != victim)
        admin = AdminClient({"bootstrap.servers": live})
        os.kill(system.pids[victim], signal.SIGSTOP)
        t0 = time.monotonic()
        deadline = t0 + 300
        while True:
            now = leaders(admin)
            if all(now.get(tp, -1) not in (-1, victim) for tp in moved):
                break
            assert time.monotonic() < deadline, "leaders not moved after 5 minutes"
            time.sleep(0.05)
        t_led = time.monotonic() - t0
        produce_everywhere(live, moved, deadline)
        t_acked = time.monotonic() - t0
        print(f"| {count} partitions, {len(moved)} led by the stopped broker | {t_led:.2f} | {t_acked:.2f} |",
              flush=True)
    finally:
        system.stop()


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    systems = {"runnel": Runnel, "kafka": Kafka}
    for key in os.environ.get("SYSTEMS", "runnel kafka").split():
        system = systems[key]()
        print(f"\n{system.name}\n")
        print("| partitions (RF 3) | all moved, s | all acked a write, s |")
        print("|---|---|---|")
        run(system, count)


if __name__ == "__main__":
    main()
