"""Shared fixtures for the integration tests.

Every test here talks to a real `runnel` process on 127.0.0.1 with a real Kafka client.
`Broker` starts `runnel dev --port P --data-dir D` and can kill -9, SIGTERM and restart it.

Set RUNNEL_TEST_BOOTSTRAP=host:port to point the client-level tests at an already running
broker (for example Apache Kafka from ../shared/peers/kafka, to check that a test's
expectations match Kafka's). Tests that need to control the process use `runnel_broker`,
which always starts our binary.
"""

import os
import pathlib
import random
import signal
import socket
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
RUNNEL_BIN = os.environ.get("RUNNEL_BIN", str(ROOT / "target" / "release" / "runnel"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_port(brokers=3):
    """A base port P with P..P+N-1 (clients) and P+1000..P+1000+N-1 (Raft) all free, below the
    kernel's ephemeral range so that client sockets cannot take them meanwhile."""
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(20000, 28000)
        try:
            for port in [p + i for i in range(brokers)] + [p + 1000 + i for i in range(brokers)]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port range for a cluster")


def wait_for(predicate, what, timeout_s, diagnostics=lambda: "", interval_s=0.5):
    """Polls predicate() (bounded) until it returns a truthy value, which it returns; fails
    the test with `diagnostics()` when the time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for: {what}\n{diagnostics()}")
        time.sleep(interval_s)


def wait_for_port(port, timeout_s=20.0, proc=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"runnel exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


class Broker:
    """One `runnel dev` process. `settings` are Kafka-named broker configs passed as --set k=v."""

    # Like the Kafka peer the tests are checked against: no wait before a new group's
    # first rebalance (Kafka's default is 3 s).
    DEFAULT_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}

    def __init__(self, data_dir, port=None, settings=None, args=()):
        self.args = list(args)
        self.data_dir = pathlib.Path(data_dir)
        self.port = port or free_port()
        self.settings = {**self.DEFAULT_SETTINGS, **(settings or {})}
        self.proc = None
        self.log_path = self.data_dir.parent / f"runnel-{self.port}.log"

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        args = [RUNNEL_BIN, "dev", *self.args, "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for_port(self.port, proc=self.proc)
        return self

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError("runnel did not exit within %ss of SIGTERM" % timeout_s)
        return self.proc.returncode if self.proc else None

    def restart(self):
        self.stop()
        return self.start()

    def log_tail(self, n=50):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class External:
    """An already running broker named by RUNNEL_TEST_BOOTSTRAP."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap


@pytest.fixture
def runnel_broker(tmp_path):
    """A fresh runnel process (always ours: for tests that kill or restart it)."""
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill9()


@pytest.fixture
def broker(tmp_path):
    """A broker for client-level tests: a fresh runnel, or RUNNEL_TEST_BOOTSTRAP if set."""
    ext = os.environ.get("RUNNEL_TEST_BOOTSTRAP")
    if ext:
        yield External(ext)
        return
    b = Broker(tmp_path / "data").start()
    yield b
    b.kill9()


def unique_topic(prefix="t"):
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


def admin_client(bootstrap, **extra):
    """An AdminClient whose metadata look-ups never auto-create topics."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False, **extra})


def wait_for_topic(admin, topic, partitions, timeout_s=30.0):
    """Bounded wait until metadata shows `topic` with `partitions` partitions, each with a leader."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=5).topics.get(topic)
        last = t
        if (t is not None and t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values())):
            return t
        time.sleep(0.2)
    raise AssertionError(f"topic {topic} not ready with {partitions} partitions: {last}")


def create_topic(admin_or_bootstrap, topic, partitions=1, config=None, timeout_s=30.0):
    """CreateTopics (replication factor 1) and wait until every partition has a leader.
    Takes an AdminClient or a bootstrap address."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(admin_or_bootstrap) if isinstance(admin_or_bootstrap, str) else admin_or_bootstrap
    fs = admin.create_topics([NewTopic(topic, partitions, 1, config=dict(config or {}))],
                             operation_timeout=timeout_s, request_timeout=timeout_s)
    fs[topic].result(timeout=timeout_s)
    return wait_for_topic(admin, topic, partitions, timeout_s)


@pytest.fixture
def broker_autocreate_off(tmp_path):
    """A broker with auto.create.topics.enable=false (an external one must be set up so)."""
    ext = os.environ.get("RUNNEL_TEST_BOOTSTRAP")
    if ext:
        if os.environ.get("RUNNEL_TEST_EXTERNAL_AUTOCREATE", "false") != "false":
            pytest.skip("external broker has auto-create on")
        yield External(ext)
        return
    b = Broker(tmp_path / "noauto", settings={"auto.create.topics.enable": "false"}).start()
    yield b
    b.kill9()


def stop_process(proc, timeout_s=60):
    """SIGTERM, then SIGKILL if it has not exited within timeout_s (helper JVMs: Kafka,
    Connect, MirrorMaker)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
