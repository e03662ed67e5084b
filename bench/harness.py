"""What the partition benchmarks (`partition_cost.py`, `cold_start.py`, `failover.py`)
share: a `runnel dev --brokers N` cluster with its brokers' pids, waiting for a port, and
one record to every partition of a list."""

import os
import re
import signal
import socket
import subprocess
import time

from confluent_kafka import Producer


def wait_port(port, deadline):
    """Until 127.0.0.1:port accepts a connection (that is not the socket connecting to
    itself, which a port in the ephemeral range nobody listens on can do)."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                if s.getsockname() != s.getpeername():
                    return
        except OSError:
            pass
        time.sleep(0.01)
    raise TimeoutError(f"nothing listening on {port}")


def produce_everywhere(bootstrap, partitions, deadline):
    """One 100-byte record to each (topic, partition), acks=all; returns once all are
    acknowledged, fails if one is refused or the deadline (monotonic) passes."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "message.timeout.ms": 300000, "queue.buffering.max.messages": 200000})
    failed = []
    for topic, part in partitions:
        p.produce(topic, b"x" * 100, partition=part, on_delivery=lambda e, _m: e and failed.append(e))
        p.poll(0)
    while len(p) and time.monotonic() < deadline:
        p.poll(0.05)
    assert not len(p), "records still unacknowledged"
    assert not failed, failed[:3]


class DevCluster:
    """`runnel dev --brokers N`: broker i is node i, client port `port + i`."""

    def __init__(self, runnel, brokers, port, data_dir, log_path):
        self.proc = subprocess.Popen([runnel, "dev", "--brokers", str(brokers), "--port", str(port),
                                      "--data-dir", data_dir],
                                     stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True)
        self.pids = {}
        while len(self.pids) < brokers:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"runnel dev exited with {self.proc.returncode}; see {log_path}")
            m = re.match(r"broker (\d+) pid (\d+)", line)
            if m:
                self.pids[int(m.group(1))] = int(m.group(2))
        self.addresses = {n: f"127.0.0.1:{port + n}" for n in self.pids}

    def stop(self):
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()

