#!/usr/bin/env python3
"""Cold start: how long one broker holding COUNT partitions takes to be ready again after a
clean shutdown (SIGTERM) and after kill -9, for Runnel (`runnel dev`, one broker) and then
Apache Kafka (one combined broker+controller node from ../shared/peers/kafka).

Each partition holds a few records before the stop. "Ready" is measured from the moment the
broker process is launched until, in order: its client port accepts a connection, Metadata
names a leader for every partition, and a producer with acks=all has one record
acknowledged by every partition. The stop itself (SIGTERM until the process exits) is timed
too: once after a write to every partition, and once after a start with nothing written.

usage: .cache/venv/bin/python bench/cold_start.py [COUNT]      (default 10000)
env:   RUNNEL_BIN (default target/release/runnel), SYSTEMS (default "runnel kafka"),
       PORT / KAFKA_PORT (default 31000 / 31200: below
       the ephemeral range, so that polling a port nobody listens on cannot connect to itself),
       OUT (default /tmp/runnel-cold-start), PEERS_KAFKA (default ../shared/peers/kafka),
       SYNCS=1: then Runnel is started twice more under `perf stat`, after a kill -9 that
       followed a write to every partition and after a clean stop, each time until every
       partition is led (then kill -9): the fdatasync, fsync and syncfs calls of each start
"""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from harness import produce_everywhere, wait_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNEL = os.environ.get("RUNNEL_BIN", os.path.join(ROOT, "target", "release", "runnel"))
PORT = int(os.environ.get("PORT", "31000"))
KAFKA_PORT = int(os.environ.get("KAFKA_PORT", "31200"))
PEERS = os.environ.get("PEERS_KAFKA", os.path.join(ROOT, "..", "shared", "peers", "kafka"))
PEERS_HOME = os.environ.get("PEERS_KAFKA_HOME", "/tmp/peers/kafka")
OUT = os.environ.get("OUT", "/tmp/runnel-cold-start")
SYNCS = os.environ.get("SYNCS") == "1"
SYNC_EVENTS = ["syscalls:sys_enter_fdatasync", "syscalls:sys_enter_fsync", "syscalls:sys_enter_syncfs"]
PER_TOPIC = 100
PREFIX = "cold"


def all_led(admin, count):
    try:
        md = admin.list_topics(timeout=5)
    except Exception:
        return False
    led = sum(1 for t in md.topics.values() if t.topic.startswith(PREFIX)
              for p in t.partitions.values() if p.leader >= 0 and p.error is None)
    return led >= count


def every_partition(count):
    return [(f"{PREFIX}{t}", p) for t in range(count // PER_TOPIC) for p in range(PER_TOPIC)]


def ready_after(launch, bootstrap, port, count):
    """Seconds from launch to: port open, every partition led, every partition acks a write."""
    deadline = launch + 600
    wait_port(port, deadline)
    t_port = time.monotonic() - launch
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while not all_led(admin, count):
        assert time.monotonic() < deadline, "leaders missing after 10 minutes"
        time.sleep(0.05)
    t_led = time.monotonic() - launch
    produce_everywhere(bootstrap, every_partition(count), deadline)
    t_acked = time.monotonic() - launch
    return t_port, t_led, t_acked


class Runnel:
    name = "Runnel (`runnel dev`, one broker)"

    def __init__(self):
        self.proc = None
        self.bootstrap, self.port = f"127.0.0.1:{PORT}", PORT

    def launch(self, fresh=False, counted=False):
        if fresh:
            shutil.rmtree(OUT, ignore_errors=True)
        argv = [RUNNEL, "dev", "--port", str(PORT), "--data-dir", OUT]
        if counted:
            # perf stat forwards no signals: the broker (its child) gets them directly.
            argv = ["perf", "stat", "-x,", "-o", OUT + ".syncs", "-e", ",".join(SYNC_EVENTS), "--"] + argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(OUT + ".log", "a"))
        launched = time.monotonic()
        self.pid = self.proc.pid
        while counted and time.monotonic() < launched + 10:
            children = pathlib.Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            if children:
                self.pid = int(children[0])
                break
            time.sleep(0.01)
        return launched

    def stop(self):
        started = time.monotonic()
        os.kill(self.pid, signal.SIGTERM)
        self.proc.wait(timeout=300)
        return time.monotonic() - started

    def kill9(self):
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()

    def syncs(self):
        """The sync calls perf counted for the broker that just exited."""
        counts = {}
        for line in pathlib.Path(OUT + ".syncs").read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] in SYNC_EVENTS:
                counts[fields[2].rsplit("_", 1)[1]] = fields[0]
        return ", ".join(f"{v} {k}" for k, v in counts.items())

    def wipe(self):
        if self.proc and self.proc.poll() is None:
            self.kill9()
        shutil.rmtree(OUT, ignore_errors=True)


class Kafka:
    name = "Apache Kafka (one combined node, 1 GiB heap)"

    def __init__(self):
        self.argv = None
        self.bootstrap, self.port = f"127.0.0.1:{KAFKA_PORT}", KAFKA_PORT
        self.run = os.path.join(PEERS_HOME, f"run-{KAFKA_PORT}")

    def launch(self, fresh=False):
        launched = time.monotonic()
        if fresh:
            # start-cluster.sh formats the data directory and returns once the broker is
            # registered; the broker's command line is kept to start it again on the same data.
            subprocess.run([os.path.join(PEERS, "install.sh")], check=True, stdout=subprocess.DEVNULL)
            launched = time.monotonic()
            subprocess.run([os.path.join(PEERS, "start-cluster.sh"), "1", str(KAFKA_PORT)], check=True,
                           env=dict(os.environ, READY_TIMEOUT="600"), stdout=subprocess.DEVNULL)
            with open(f"/proc/{self.pid()}/cmdline", "rb") as f:
                self.argv = [a.decode() for a in f.read().split(b"\0") if a]
        else:
            # Started from a shell that exits at once, so the JVM is not this script's child
            # (stop-cluster.sh waits for its pid to go, which a child would not until reaped).
            log = os.path.join(self.run, "node1", "stdout.log")
            pid = subprocess.run(["setsid", "bash", "-c", '"$@" >>"$0" 2>&1 </dev/null & echo $!', log, *self.argv],
                                 check=True, capture_output=True, text=True).stdout.strip()
            with open(os.path.join(self.run, "node1.pid"), "w") as f:
                f.write(pid)
        return launched

    def pid(self):
        deadline = time.monotonic() + 60
        path = os.path.join(self.run, "node1.pid")
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return int(open(path).read())

    def stop(self):
        started = time.monotonic()
        subprocess.run([os.path.join(PEERS, "stop-cluster.sh"), str(KAFKA_PORT)], stdout=subprocess.DEVNULL)
        return time.monotonic() - started

    def kill9(self):
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        while os.path.exists(f"/proc/{pid}"):
            time.sleep(0.05)
        os.unlink(os.path.join(self.run, "node1.pid"))

    def wipe(self):
        subprocess.run([os.path.join(PEERS, "stop-cluster.sh"), str(KAFKA_PORT), "--wipe"],
                       stdout=subprocess.DEVNULL)


def row(label, t):
    print(f"| {label} | {t[0]:.2f} | {t[1]:.2f} | {t[2]:.2f} |", flush=True)


def wait_led(system, launch, count):
    """Seconds from launch until every partition is led."""
    wait_port(system.port, launch + 120)
    admin = AdminClient({"bootstrap.servers": system.bootstrap})
    while not all_led(admin, count):
        if time.monotonic() > launch + 600:
            raise TimeoutError("not every partition led within 600 s")
        time.sleep(0.05)
    return time.monotonic() - launch


def sync_counts(system, count):
    """The sync calls of a start until every partition is led: after a kill -9 that followed
    a write to every partition (the last row's: every log's tail is past its checkpoint),
    and after a clean stop. The broker runs under perf stat only for the counted starts."""
    print("\n| start (counted until every partition is led) | all led s | sync calls |\n|---|---|---|")
    for label in ("after kill -9", "after a clean stop"):
        if label == "after kill -9":
            system.kill9()
        else:
            system.stop()
        led = wait_led(system, system.launch(counted=True), count)
        system.kill9()
        print(f"| {label} | {led:.2f} | {system.syncs()} |", flush=True)
        wait_led(system, system.launch(), count)


def run(system, count):
    try:
        launch = system.launch(fresh=True)
        wait_port(system.port, launch + 120)
        admin = AdminClient({"bootstrap.servers": system.bootstrap})
        for first in range(0, count // PER_TOPIC, 10):
            names = [f"{PREFIX}{i}" for i in range(first, min(first + 10, count // PER_TOPIC))]
            for f in admin.create_topics([NewTopic(t, PER_TOPIC, 1) for t in names],
                                         operation_timeout=120, request_timeout=180).values():
                f.result(timeout=180)
        row("first start (created, led, written)", ready_after(launch, system.bootstrap, system.port, count))
        stopped = system.stop()
        print(f"| clean stop: {stopped:.2f} s | | | |", flush=True)
        row("after a clean stop", ready_after(system.launch(), system.bootstrap, system.port, count))
        system.kill9()
        row("after kill -9", ready_after(system.launch(), system.bootstrap, system.port, count))
        print(f"| clean stop, every partition written since the start: {system.stop():.2f} s | | | |", flush=True)
        led = wait_led(system, system.launch(), count)
        print(f"| start until all led: {led:.2f} s; clean stop, nothing written since the start: "
              f"{system.stop():.2f} s | | | |", flush=True)
        ready_after(system.launch(), system.bootstrap, system.port, count)
        if SYNCS and isinstance(system, Runnel):
            sync_counts(system, count)
    finally:
        system.wipe()


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    systems = {"runnel": Runnel, "kafka": Kafka}
    for key in os.environ.get("SYSTEMS", "runnel kafka").split():
        system = systems[key]()
        print(f"\n{system.name}, {count} partitions (RF 1, {PER_TOPIC} per topic)\n")
        print("| start | port open s | all led s | all acked a write s |")
        print("|---|---|---|---|")
        run(system, count)


if __name__ == "__main__":
    main()
