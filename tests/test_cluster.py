"""A 3-broker cluster (`runnel dev --brokers 3`) on loopback with replication factor 3,
driven by librdkafka (confluent-kafka): faults on the partition leader, a follower and the
controller, while an idempotent acks=all producer writes bounded sequences. Every
acknowledged record must be read back exactly once and in order, and once the cluster is
quiet the three replicas of a partition must hold byte-identical logs (so no offset ever
holds two different records)."""

import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec, ResourceType

import kafka_wire as kw
from conftest import RUNNEL_BIN, admin_client, cluster_port, unique_topic, wait_for, wait_for_port, wait_for_topic
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)

BROKERS = 3


class DevCluster:
    """`runnel dev --brokers 3`; follows its stdout for each broker's current pid (dev starts
    a broker that died again and prints the new pid)."""

    def __init__(self, tmp_path, settings=(), brokers=BROKERS, args=(), port=None, registered=True):
        self.brokers = brokers
        self.port = port or cluster_port(brokers)
        self.data_dir = tmp_path / "cluster"
        self.log = open(tmp_path / "cluster.log", "w")
        sets = [arg for s in settings for arg in ("--set", s)]
        self.proc = subprocess.Popen(
            [RUNNEL_BIN, "dev", "--brokers", str(brokers), "--port", str(self.port), "--data-dir", str(self.data_dir)]
            + sets + list(args), stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.pids = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._follow, daemon=True).start()
        for i in range(brokers):
            wait_for_port(self.port + i, proc=self.proc)
        self.bootstrap = ",".join(f"127.0.0.1:{self.port + i}" for i in range(brokers))
        self.admin = admin_client(self.bootstrap)
        if registered:
            wait_for(lambda: self.registered() == brokers, f"{brokers} registered brokers", 30, self.diagnostics)

    def registered(self):
        try:
            return len(self.admin.list_topics(timeout=5).brokers)
        except KafkaException:  # a broker still starting
            return 0

    def _follow(self):
        for line in self.proc.stdout:
            m = re.match(r"broker (\d+) pid (\d+)", line)
            if m:
                with self.lock:
                    self.pids[int(m.group(1))] = int(m.group(2))

    def pid(self, broker):
        with self.lock:
            return self.pids[broker]

    def diagnostics(self):
        self.log.flush()
        text = pathlib.Path(self.log.name).read_text()
        return "\n".join(text.splitlines()[-40:])

    def seen_by(self, broker, topic):
        """{partition: (leader, replicas)} as the given broker's Metadata (v1) names them."""
        with kw.Conn(f"127.0.0.1:{self.port + broker}") as conn:
            r = conn.request(kw.metadata_v1_request([topic], conn.next_correlation_id()))
            [t] = kw.decode_metadata_v1(r)["topics"]
            return {p["partition_index"]: (p["leader_id"], p["replicas"]) for p in t["partitions"] or []}

    def isr_seen_by(self, broker, topic):
        """{partition: sorted ISR} as the given broker's Metadata (v1) names them."""
        with kw.Conn(f"127.0.0.1:{self.port + broker}") as conn:
            r = conn.request(kw.metadata_v1_request([topic], conn.next_correlation_id()))
            [t] = kw.decode_metadata_v1(r)["topics"]
            return {p["partition_index"]: sorted(p["isr"]) for p in t["partitions"] or []}

    def leaders_seen_by(self, broker, topic):
        return {p: leader for p, (leader, _) in self.seen_by(broker, topic).items()}

    def displace_leaders(self, topic, victim):
        """Waits for the preferred leaders (first replicas) to lead, then pauses `victim`
        until its partitions have other leaders (per broker 0) and resumes it. Returns
        ({partition: preferred leader}, [the victim's partitions])."""
        preferred = {p: replicas[0] for p, (_, replicas) in self.seen_by(0, topic).items()}
        wait_for(lambda: self.leaders_seen_by(0, topic) == preferred, "preferred leaders at first", 30,
                 self.diagnostics)
        theirs = [q for q, b in preferred.items() if b == victim]
        os.kill(self.pid(victim), signal.SIGSTOP)
        try:
            wait_for(lambda: all(self.leaders_seen_by(0, topic).get(q, -1) not in (-1, victim) for q in theirs),
                     "new leaders while the broker is paused", 30, self.diagnostics)
        finally:
            os.kill(self.pid(victim), signal.SIGCONT)
        return preferred, theirs

    def leader(self, topic, partition=0):
        """The partition's leader, or -1 when unknown: the broker asked has not applied the
        topic yet, or the request timed out (librdkafka may have asked a paused broker)."""
        try:
            t = self.admin.list_topics(topic, timeout=5).topics.get(topic)
        except KafkaException:
            return -1
        p = t.partitions.get(partition) if t is not None else None
        return p.leader if p is not None else -1

    def known_leader(self, topic):
        """The partition's leader, waiting (bounded) until some broker names one."""
        # wait_for wants a truthy value and broker 0 is a valid leader, hence the +1/-1.
        return wait_for(lambda: self.leader(topic) + 1, f"a leader for {topic}", 30, self.diagnostics) - 1

    def controller(self):
        try:
            return self.admin.list_topics(timeout=5).controller_id
        except KafkaException:
            return -1

    def partition_log_bytes(self, broker, topic, partition=0):
        d = self.data_dir / f"broker-{broker}" / f"{topic}-{partition}"
        return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def cluster(tmp_path):
    c = DevCluster(tmp_path)
    yield c
    c.close()


def create_rf3(c, topic, partitions=1):
    fs = c.admin.create_topics([NewTopic(topic, partitions, 3)], operation_timeout=30, request_timeout=30)
    fs[topic].result(timeout=30)
    return wait_for_topic(c.admin, topic, partitions)


class Writer:
    """An idempotent acks=all producer writing "0", "1", ... to partition 0 from a thread,
    recording what was acknowledged (value -> offset)."""

    def __init__(self, c, topic, count, pace_s=0.001):
        self.topic, self.count, self.pace_s = topic, count, pace_s
        self.acked = {}
        self.errors = []
        # Short request and socket timeouts: a request stuck on a paused broker is retried
        # elsewhere within seconds.
        self.producer = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 90000, "request.timeout.ms": 5000,
                                  "socket.timeout.ms": 5000})
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _done(self, err, msg):
        if err is None:
            self.acked[int(msg.value())] = msg.offset()
        else:
            self.errors.append(str(err))

    def _run(self):
        for i in range(self.count):
            while True:
                try:
                    self.producer.produce(self.topic, value=str(i).encode(), partition=0, on_delivery=self._done)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
            time.sleep(self.pace_s)
        self.producer.flush(90)

    def acked_count(self):
        return len(self.acked)

    def join(self):
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "producer did not finish"


def read_all(c, topic, expected):
    """Every record of partition 0 from the start: [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        for m in consumer.consume(1000, timeout=1):
            if m.error() is None:
                out.append((m.offset(), int(m.value())))
    consumer.close()
    return out


def writing(c, prefix, count, acks_first):
    """A new RF 3 topic, a writer of `count` values into it, and a bounded wait for its first
    `acks_first` acknowledgements (so the fault lands mid-stream)."""
    topic = unique_topic(prefix)
    create_rf3(c, topic)
    writer = Writer(c, topic, count)
    wait_for(lambda: writer.acked_count() >= acks_first, "acks before the fault", 60, c.diagnostics, 0.1)
    return topic, writer


def finish(c, topic, writer, count):
    """Waits for the writer, reads everything back and checks it, then checks the replicas."""
    writer.join()
    check_history(writer, read_all(c, topic, count))
    assert writer.acked_count() == count
    # Followers that were behind (killed, paused, or a deposed leader) end up identical.
    check_replicas_identical(c, topic)


def acks_go_on_while_paused(c, writer, broker, more, timeout_s, what):
    """SIGSTOPs `broker` until the writer has `more` new acknowledgements (bounded), then
    SIGCONTs it whatever happened."""
    pid = c.pid(broker)
    os.kill(pid, signal.SIGSTOP)
    try:
        before = writer.acked_count()
        wait_for(lambda: writer.acked_count() >= before + more, what, timeout_s, c.diagnostics, 0.1)
    finally:
        os.kill(pid, signal.SIGCONT)


def check_history(writer, records):
    assert not writer.errors, f"idempotent acks=all produce failed: {writer.errors[:5]}"
    offsets = [o for o, _ in records]
    assert offsets == sorted(set(offsets)), "offsets read back are not strictly increasing"
    values = [v for _, v in records]
    assert len(values) == len(set(values)), "a value was stored twice"
    assert values == sorted(values), "values are out of the order they were produced in"
    stored = dict((v, o) for o, v in records)
    missing = [v for v in writer.acked if v not in stored]
    assert not missing, f"{len(missing)} acknowledged values lost, e.g. {missing[:5]}"
    moved = [v for v, o in writer.acked.items() if stored[v] != o]
    assert not moved, f"acknowledged offsets differ from where values were read: {moved[:5]}"


def check_replicas_identical(c, topic):
    def same():
        logs = [c.partition_log_bytes(b, topic) for b in range(BROKERS)]
        return logs[0] and all(log == logs[0] for log in logs)
    wait_for(same, "three byte-identical replicas", 30, c.diagnostics)


def test_leader_killed_during_acks_all_produce(cluster):
    topic, writer = writing(cluster, "kill", 6000, 1500)
    old = cluster.known_leader(topic)
    os.kill(cluster.pid(old), signal.SIGKILL)
    before = writer.acked_count()
    # Service resumes: a leader is elected (one of the two others, or the killed broker if
    # it is back first: dev restarts it within a second) and acknowledgements go on.
    wait_for(lambda: writer.acked_count() >= before + 1000, "acks after the leader was killed", 30,
             cluster.diagnostics, 0.1)
    finish(cluster, topic, writer, 6000)


def test_follower_paused_producers_keep_being_acknowledged(cluster):
    topic, writer = writing(cluster, "pause-f", 5000, 1000)
    leader = cluster.known_leader(topic)
    follower = next(b for b in range(BROKERS) if b != leader)
    # The leader and the other follower are a majority: acks go on.
    acks_go_on_while_paused(cluster, writer, follower, 1000, 30, "acks while a follower is paused")
    finish(cluster, topic, writer, 5000)


def test_isr_leaves_out_a_paused_follower_until_it_is_back(cluster, java_build):  # noqa: F811
    """Metadata's ISR (the replicas heard from within twice the election timeout and
    caught up within replica.lag.time.max.ms), as every broker answers it: all three
    replicas; without a paused follower while a producer writes, and kafka-topics
    --describe --under-replicated-partitions lists the partitions it follows; all three
    again once it is back and caught up."""
    from test_kafka_tools import TOPICS, Tools

    c = cluster
    topic, writer = writing(c, "isr", 4000, 500)
    full = {0: [0, 1, 2]}
    for b in range(BROKERS):
        wait_for(lambda: c.isr_seen_by(b, topic) == full, f"the full ISR from broker {b}", 30, c.diagnostics)
    leader = c.known_leader(topic)
    follower = next(b for b in range(BROKERS) if b != leader)
    without = {0: sorted(set(range(BROKERS)) - {follower})}
    tools = Tools(java_build / "lib", c)
    # The tool bootstraps from the running brokers only: a Java client that picks the paused
    # one waits out its request timeout (30 s) there, twice in a row is past the call's 60 s.
    tools.bootstrap = ",".join(f"127.0.0.1:{c.port + b}" for b in range(BROKERS) if b != follower)
    os.kill(c.pid(follower), signal.SIGSTOP)
    try:
        others = [b for b in range(BROKERS) if b != follower]
        for b in others:
            wait_for(lambda: c.isr_seen_by(b, topic) == without, f"broker {b} to leave {follower} out of the ISR",
                     30, c.diagnostics)
        out = tools.run(TOPICS, "--describe", "--under-replicated-partitions", "--topic", topic).stdout
        isr = re.search(r"Partition: 0\s.*Isr: ([\d,]+)", out)
        assert isr and sorted(map(int, isr.group(1).split(","))) == without[0], out
    finally:
        os.kill(c.pid(follower), signal.SIGCONT)
    for b in range(BROKERS):
        wait_for(lambda: c.isr_seen_by(b, topic) == full, f"the full ISR again from broker {b}", 30, c.diagnostics)
    finish(c, topic, writer, 4000)


def test_leader_paused_then_resumed_loses_nothing(cluster):
    topic, writer = writing(cluster, "pause-l", 5000, 1000)
    old = cluster.known_leader(topic)
    # The two others elect a leader and the producer finds it (after its request to the
    # paused broker times out): acknowledgements resume while the old leader is frozen.
    acks_go_on_while_paused(cluster, writer, old, 500, 60, "acks while the old leader is paused")
    # The old leader's unacknowledged tail was replaced: one record per offset everywhere.
    finish(cluster, topic, writer, 5000)


def test_controller_killed_topic_creation_resumes(cluster):
    # wait_for wants a truthy value and broker 0 is a valid controller, hence the +1/-1.
    old = wait_for(lambda: cluster.controller() + 1, "a controller", 30, cluster.diagnostics) - 1
    os.kill(cluster.pid(old), signal.SIGKILL)
    topic = unique_topic("after-controller")
    started = time.monotonic()

    attempts = []

    def created():
        t = time.monotonic()
        try:
            fs = cluster.admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=5, request_timeout=5)
            fs[topic].result(timeout=10)
            return True
        except Exception as e:  # NOT_CONTROLLER / timeouts while the quorum elects
            attempts.append(f"{t - started:.1f}s: {e}")
            return "already exists" in str(e).lower()
    wait_for(created, "topic creation after the controller died", 30,
             lambda: "\n".join(attempts) + "\n" + cluster.diagnostics())
    wait_for_topic(cluster.admin, topic, 1)
    assert time.monotonic() - started < 30


def test_a_topic_created_as_the_cluster_starts(tmp_path):
    """A client that creates a topic the moment `runnel dev --brokers 3` listens, before every
    broker has registered, gets it: every Metadata response names as controller a broker it
    lists (a broker whose image does not list the metadata leader yet names itself, and takes
    the request to the controller). librdkafka waited for a controller missing from the
    broker list until its request timed out. The window lasts a second or so after the
    start, so the cluster is started three times."""
    for attempt in range(3):
        created_as_the_cluster_starts(tmp_path / f"start-{attempt}")


def created_as_the_cluster_starts(tmp_path):
    tmp_path.mkdir()
    c = DevCluster(tmp_path, registered=False)
    try:
        topic = unique_topic("early")
        # Replication factor 1: three would rightly be refused while a broker is unregistered.
        created = c.admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=30, request_timeout=30)[topic]
        # Until every broker lists all three, each response's controller is one it lists.
        seen = set()
        deadline = time.monotonic() + 30
        while len(seen) < BROKERS:
            assert time.monotonic() < deadline, f"brokers listing all {BROKERS}: {sorted(seen)}"
            for i in range(BROKERS):
                with kw.Conn(f"127.0.0.1:{c.port + i}") as conn:
                    md = kw.decode_metadata_v1(conn.request(kw.metadata_v1_request([], conn.next_correlation_id())))
                listed = sorted(b["node_id"] for b in md["brokers"])
                assert md["controller_id"] in listed, f"broker {i} names {md['controller_id']}, lists {listed}"
                if len(listed) == BROKERS:
                    seen.add(i)
        created.result(timeout=40)
        wait_for_topic(c.admin, topic, 3)
    finally:
        c.close()


def test_create_topics_sent_to_any_broker_is_decided_by_the_controller(cluster):
    """CreateTopics sent straight to a broker that is not the controller (as `runnel bench`
    and older tools do) is forwarded; the controller's answer, success or refusal, comes
    back to the client."""
    controller = wait_for(lambda: cluster.controller() + 1, "a controller", 30, cluster.diagnostics) - 1
    for broker in [b for b in range(BROKERS) if b != controller]:
        with kw.Conn(f"127.0.0.1:{cluster.port + broker}", timeout_s=30) as conn:
            def create(name, rf):
                r = conn.request(kw.create_topics_v4_request(name, 2, rf, conn.next_correlation_id()))
                [t] = kw.decode_create_topics_v4(r)["topics"]
                return t
            topic = unique_topic(f"fwd-{broker}")
            t = create(topic, 3)
            assert t["error_code"] == kw.NONE, t
            # Answered once the topic is applied on the broker asked: it knows it already.
            assert create(topic, 3)["error_code"] == kw.TOPIC_ALREADY_EXISTS
            t = create(unique_topic("fwd-rf4"), 4)
            assert t["error_code"] == kw.INVALID_REPLICATION_FACTOR, t
            assert "3 broker(s) are registered" in t["error_message"]
        wait_for_topic(cluster.admin, topic, 2)


def test_deleted_topic_is_gone_everywhere_and_its_name_reusable(cluster):
    """DeleteTopics goes through the metadata log: every broker stops the partitions' Raft
    groups and removes their data, also a broker that was down and replays the log; a new
    topic of the same name starts empty."""
    topic = unique_topic("del")
    create_rf3(cluster, topic, partitions=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        p.produce(topic, value=f"old-{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    dirs = [cluster.data_dir / f"broker-{b}" / f"{topic}-{i}" for b in range(BROKERS) for i in range(3)]
    assert all(d.is_dir() for d in dirs)

    cluster.admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(timeout=30)
    wait_for(lambda: not any(d.exists() for d in dirs), "partition directories removed on every broker", 30,
             cluster.diagnostics)
    wait_for(lambda: topic not in cluster.admin.list_topics(timeout=5).topics, "the topic gone from Metadata", 30,
             cluster.diagnostics)

    # Recreated under the same name: new Raft groups, only the new records.
    create_rf3(cluster, topic, partitions=1)
    for i in range(100):
        p.produce(topic, value=f"new-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 100 and time.monotonic() < deadline:
        got += [m.value().decode() for m in consumer.consume(200, timeout=1) if m.error() is None]
    consumer.close()
    assert got == [f"new-{i}" for i in range(100)]
    check_replicas_identical(cluster, topic)

    # A broker killed now replays create, delete, create on restart and ends up with the
    # new topic's data only.
    victim = next(b for b in range(BROKERS) if b != cluster.controller())
    old_pid = cluster.pid(victim)
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: cluster.pid(victim) != old_pid, "the killed broker restarted", 30, cluster.diagnostics)
    wait_for_port(cluster.port + victim)
    check_replicas_identical(cluster, topic)
    assert not any((cluster.data_dir / f"broker-{b}" / f"{topic}-{i}").exists()
                   for b in range(BROKERS) for i in (1, 2))


def set_broker_config(c, broker, name, value):
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.BROKER, str(broker),
                         incremental_configs=[ConfigEntry(name, value, incremental_operation=op)])
    c.admin.incremental_alter_configs([res])[res].result(timeout=30)


def test_manual_assignment_and_a_slow_follower_disk(cluster):
    """Manual replica assignments are kept as given (first replica = preferred leader);
    bad ones are refused. With broker 2 a follower only and its fsyncs slowed by the storage
    fault hook, acks=all writes are acknowledged by the other two, and broker 2 converges
    to the same bytes once the fault is removed."""
    topic = unique_topic("manual")
    assignment = [[0, 1, 2], [1, 0, 2]]
    fs = cluster.admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)], operation_timeout=30)
    fs[topic].result(timeout=30)
    wait_for_topic(cluster.admin, topic, 2)

    def placed():
        t = cluster.admin.list_topics(topic, timeout=5).topics[topic]
        return all(t.partitions[p].replicas == assignment[p] and t.partitions[p].leader == assignment[p][0]
                   for p in range(2))
    wait_for(placed, "replicas as assigned, preferred leaders leading", 30, cluster.diagnostics)

    for bad in ([[0, 1, 7]], [[0, 0, 1]], [[0, 1, 2], [0, 1]]):
        name = unique_topic("bad-assign")
        fs = cluster.admin.create_topics([NewTopic(name, len(bad), replica_assignment=bad)], operation_timeout=30)
        with pytest.raises(KafkaException) as e:
            fs[name].result(timeout=30)
        assert e.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, e.value

    set_broker_config(cluster, 2, "fault.disk.sync.delay.ms", "2000")
    try:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(2000):
            p.produce(topic, value=str(i).encode(), partition=i % 2)
        assert p.flush(60) == 0
    finally:
        set_broker_config(cluster, 2, "fault.disk.sync.delay.ms", None)
    check_replicas_identical(cluster, topic)


def test_every_broker_names_leaders_of_partitions_it_does_not_host(cluster):
    """With replication factor 1 each broker hosts a third of the partitions; Metadata from
    any broker still names every partition's leader (leaders announce themselves to the
    brokers that do not host the partition), so clients produce to all of them."""
    topic = unique_topic("rf1")
    fs = cluster.admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=30)
    fs[topic].result(timeout=30)

    def all_named():
        views = [cluster.seen_by(b, topic) for b in range(BROKERS)]
        return all(len(v) == 6 and all(leader == replicas[0] for leader, replicas in v.values()) for v in views)
    wait_for(all_named, "every broker naming every partition's leader", 30, cluster.diagnostics)

    p = Producer({"bootstrap.servers": f"127.0.0.1:{cluster.port}", "acks": "all"})
    for i in range(600):
        p.produce(topic, value=str(i).encode(), partition=i % 6)
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{cluster.port + 1}", "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, i, 0) for i in range(6)])
    got = set()
    deadline = time.monotonic() + 30
    while len(got) < 600 and time.monotonic() < deadline:
        got |= {int(m.value()) for m in consumer.consume(500, timeout=1) if m.error() is None}
    consumer.close()
    assert got == set(range(600))


def group_consume(c, group, topic, want, deadline_s=60):
    """A group member (subscribe) reading until it has `want` records; commits what it read
    synchronously (retrying while the coordinator moves) and leaves. Returns
    {(partition, offset): value}."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    consumer.subscribe([topic])
    got = {}
    deadline = time.monotonic() + deadline_s
    try:
        while len(got) < want and time.monotonic() < deadline:
            for m in consumer.consume(want - len(got), timeout=1):
                if m.error() is None:
                    got[(m.partition(), m.offset())] = int(m.value())
        assert len(got) == want, f"the group member read {len(got)} of {want} records"
        errors = []
        while True:
            try:
                consumer.commit(asynchronous=False)
                break
            except KafkaException as e:  # the coordinator moving: retry, bounded
                errors.append(str(e))
                assert time.monotonic() < deadline, f"commits kept failing: {errors[-3:]}"
                time.sleep(0.5)
    finally:
        consumer.close()
    return got


def next_offsets(records, partitions):
    """Per partition, the offset after the last record read (0 when none was)."""
    return {part: max((o + 1 for q, o in records if q == part), default=0) for part in range(partitions)}


def committed(c, group, topic, partitions):
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def log_ends(c, topic, partitions):
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g")})
    try:
        return {q: consumer.get_watermark_offsets(TopicPartition(topic, q), timeout=30)[1] for q in range(partitions)}
    finally:
        consumer.close()


def coordinator_of(c, group):
    def found():
        try:
            return c.admin.describe_consumer_groups([group])[group].result(timeout=10).coordinator.id + 1
        except KafkaException:
            return 0
    return wait_for(found, f"a coordinator for {group}", 30, c.diagnostics) - 1


def test_group_offsets_survive_the_coordinator_being_killed(cluster):
    """Consumer groups live in the replicated __consumer_offsets topic: its partition leader
    coordinates the group. Kill -9 of the coordinator after a commit: the next member
    resumes exactly at the committed offsets (nothing read twice, nothing skipped) through
    the new coordinator, and its own commits are acknowledged there."""
    topic, group, partitions, total = unique_topic("grp"), unique_topic("g"), 3, 300
    create_rf3(cluster, topic, partitions)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(total):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(60) == 0

    first_half = group_consume(cluster, group, topic, total // 2)
    # -1001: no commit for a partition the member was not given. (A partition's first
    # offsets hold Raft's own entries as control batches, so counts and offsets differ.)
    before = {part: max(o, 0) for part, o in committed(cluster, group, topic, partitions).items()}
    assert before == next_offsets(first_half, partitions), before

    victim = coordinator_of(cluster, group)
    os.kill(cluster.pid(victim), signal.SIGKILL)
    # `runnel dev` restarts it; the member below finds whichever broker leads now.
    second_half = group_consume(cluster, group, topic, total - total // 2)
    early = [(part, o) for part, o in second_half if o < before[part]]
    assert not early, f"read again below the committed offsets {before}: {early[:5]}"
    assert sorted(list(first_half.values()) + list(second_half.values())) == list(range(total))

    # Past every record read and at most the log end (a position may also step over the
    # control batch a new partition leader appends).
    after = committed(cluster, group, topic, partitions)
    read_up_to = next_offsets({**first_half, **second_half}, partitions)
    ends = log_ends(cluster, topic, partitions)
    assert all(read_up_to[q] <= after[q] <= ends[q] for q in range(partitions)), (after, read_up_to, ends)
    # The group's records are replicated: once the killed broker is back, any leader of
    # the offsets partition answers the same.
    wait_for(lambda: cluster.registered() == BROKERS, "the killed broker back", 60, cluster.diagnostics)
    assert committed(cluster, group, topic, partitions) == after


def test_leadership_returns_to_preferred_leaders_after_a_broker_comes_back(tmp_path):
    """Placement spreads preferred leaders (the first replica of each partition) over the
    brokers. A broker paused long enough loses its leaderships; once it is back and has
    caught up, the new leaders hand them back (automatic preferred leader election), so the
    load is spread again without an operator."""
    c = DevCluster(tmp_path, settings=["leader.imbalance.check.interval.seconds=1"])
    try:
        topic, partitions = unique_topic("pref"), 6
        create_rf3(c, topic, partitions)
        preferred = {p: replicas[0] for p, (_, replicas) in c.seen_by(0, topic).items()}
        assert sorted(preferred.values()) == [0, 0, 1, 1, 2, 2], preferred
        p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all"})
        for i in range(600):
            p.produce(topic, value=str(i).encode(), partition=i % partitions)
        assert p.flush(60) == 0

        c.displace_leaders(topic, victim=1)
        wait_for(lambda: all(c.leaders_seen_by(b, topic) == preferred for b in range(BROKERS)),
                 "leadership back at the preferred leaders", 60, c.diagnostics)
        # The new leaders keep their term when the old one returns: transfers bring it back.
        c.log.flush()
        assert "handing partitions back to their preferred leaders" in pathlib.Path(c.log.name).read_text()
        # Nothing was lost on the way: every record is there once.
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g"),
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, q, 0) for q in range(partitions)])
        got, deadline = [], time.monotonic() + 60
        while len(got) < 600 and time.monotonic() < deadline:
            got += [int(m.value()) for m in consumer.consume(600, timeout=1) if m.error() is None]
        consumer.close()
        assert sorted(got) == list(range(600))
    finally:
        c.close()


def test_a_placement_that_a_region_loss_would_break_is_refused_unless_forced(tmp_path):
    """Three brokers in two regions (a, a, b): RF 3 would put two replicas in region a, so
    losing region a would lose every partition's quorum. CreateTopics refuses it with
    INVALID_REPLICATION_FACTOR and says why, unless the topic is created with
    placement.unsafe.allow=true; RF 2 is taken as chosen."""
    port = cluster_port()
    voters = ",".join(f"{i}@127.0.0.1:{port + 1000 + i}" for i in range(BROKERS))
    log = open(tmp_path / "brokers.log", "w")
    procs = [subprocess.Popen([RUNNEL_BIN, "dev", "--port", str(port + i), "--data-dir", str(tmp_path / f"b{i}"),
                               "--set", f"node.id={i}", "--set", f"controller.quorum.voters={voters}",
                               "--set", f"broker.location=region={region},zone={region}{i}"],
                              stdout=subprocess.DEVNULL, stderr=log)
             for i, region in enumerate(["a", "a", "b"])]
    try:
        for i in range(BROKERS):
            wait_for_port(port + i, proc=procs[i])
        admin = admin_client(",".join(f"127.0.0.1:{port + i}" for i in range(BROKERS)))
        wait_for(lambda: len(admin.list_topics(timeout=5).brokers) == BROKERS, "3 registered brokers", 30)

        refused = unique_topic("unsafe")
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic(refused, 3, 3)], operation_timeout=30)[refused].result(timeout=30)
        err = e.value.args[0]
        assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR, err
        assert "in region a" in err.str() and "placement.unsafe.allow" in err.str(), err.str()
        assert refused not in admin.list_topics(timeout=10).topics

        forced, two = unique_topic("forced"), unique_topic("rf2")
        fs = admin.create_topics([NewTopic(forced, 3, 3, config={"placement.unsafe.allow": "true"}),
                                  NewTopic(two, 3, 2)], operation_timeout=30)
        for f in fs.values():
            f.result(timeout=30)
        wait_for_topic(admin, forced, 3)
        wait_for_topic(admin, two, 3)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def test_elect_leaders_hands_partitions_to_preferred_leaders_on_request(tmp_path):
    """With automatic rebalancing off, a broker that was paused stays without its
    leaderships after it returns; ElectLeaders (preferred, as kafka-leader-election sends
    it) gives them back, once the broker has caught up, and reports ELECTION_NOT_NEEDED for
    partitions already led by their preferred leader. Unclean elections are refused."""
    from confluent_kafka import ElectionType
    c = DevCluster(tmp_path, settings=["auto.leader.rebalance.enable=false"])
    try:
        topic, partitions = unique_topic("elect"), 6
        create_rf3(c, topic, partitions)
        victim = 1
        preferred, theirs = c.displace_leaders(topic, victim)
        time.sleep(3)
        assert all(c.leaders_seen_by(0, topic)[q] != victim for q in theirs), "leadership came back without being asked"

        tps = [TopicPartition(topic, q) for q in range(partitions)]
        last, moved = {}, set()
        # The election's timeout_ms is socket.timeout.ms (passing operation_timeout to
        # elect_leaders fails inside confluent-kafka 2.16).
        admin = admin_client(c.bootstrap, **{"socket.timeout.ms": 10000})

        def elected():
            """One ElectLeaders round; done when no partition reports an error other than
            ELECTION_NOT_NEEDED (PREFERRED_LEADER_NOT_AVAILABLE while broker 1 catches up)."""
            try:
                outcome = admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=30)
            except KafkaException as e:  # the whole request failed (a timeout): retry
                last["request"] = str(e)
                return False
            last.clear()
            last.update({tp.partition: (e.code() if e is not None else 0) for tp, e in outcome.items()})
            moved.update(q for q, code in last.items() if code == 0)
            return all(code in (0, KafkaError.ELECTION_NOT_NEEDED) for code in last.values())
        wait_for(elected, "ElectLeaders succeeding", 60, lambda: f"last answer {last}\n{c.diagnostics()}", 1)
        assert moved & set(theirs), f"ElectLeaders moved none of broker {victim}'s partitions {theirs}: {last}"
        wait_for(lambda: all(c.leaders_seen_by(b, topic) == preferred for b in range(BROKERS)),
                 "every broker naming the preferred leaders", 30, c.diagnostics)

        unclean = admin.elect_leaders(ElectionType.UNCLEAN, tps[:1]).result(timeout=30)
        [err] = unclean.values()
        assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED, err
    finally:
        c.close()


class PreferredLeaderAway:
    """Pauses a partition's preferred leader (its first replica) until another replica
    leads, for the body of a `with`; on the way out resumes it and waits until it has caught
    up and leads again (only a replica with every entry gets leadership back, which needs
    leader.imbalance.check.interval.seconds short). `admin` talks to the other brokers only
    (a client that knew the paused broker as leader would wait on it)."""

    def __init__(self, c, topic):
        self.c, self.topic = c, topic
        [(_, replicas)] = c.seen_by(0, topic).values()
        self.victim, self.observer = replicas[0], replicas[1]
        self.admin = admin_client(",".join(f"127.0.0.1:{c.port + b}" for b in range(BROKERS) if b != self.victim))

    def __enter__(self):
        c, topic = self.c, self.topic
        # Every replica must know the victim as leader: one that still followed someone else
        # would keep receiving entries while the victim is paused.
        wait_for(lambda: all(c.leaders_seen_by(b, topic) == {0: self.victim} for b in range(BROKERS)),
                 "the preferred leader leads", 30, c.diagnostics)
        os.kill(c.pid(self.victim), signal.SIGSTOP)
        wait_for(lambda: c.leaders_seen_by(self.observer, topic).get(0, -1) not in (-1, self.victim),
                 "a new leader while the preferred one is paused", 30, c.diagnostics)
        return self

    def __exit__(self, *exc):
        os.kill(self.c.pid(self.victim), signal.SIGCONT)
        if exc[0] is None:
            wait_for(lambda: all(self.c.leaders_seen_by(b, self.topic) == {0: self.victim} for b in range(BROKERS)),
                     "the returning replica to catch up and lead again", 60, self.c.diagnostics)
        return False


def produce_acked(c, topic, records):
    """Idempotent acks=all produce of [(key, value)] to partition 0: {offset: (key, value)}."""
    acked = {}

    def done(err, msg):
        assert err is None, err
        acked[msg.offset()] = (msg.key(), msg.value())

    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "batch.size": 4096, "socket.timeout.ms": 5000})
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == len(records)
    return acked


def read_partition0(c, topic, until):
    """{offset: (key, value)} of partition 0 from its start, until `until(records)` (60 s)."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = {}, time.monotonic() + 60
    while not until(got) and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=1):
            if m.error() is None:
                assert m.offset() not in got, f"offset {m.offset()} read twice"
                got[m.offset()] = (m.key(), m.value())
    consumer.close()
    return got


def test_retention_and_delete_records_trim_replicated_logs_and_a_follower_that_missed_it_catches_up(tmp_path):
    """Retention (by size) and DeleteRecords on an RF 3 partition while its preferred leader
    is paused: the other two replicas trim their logs (the segments go from disk), and
    DeleteRecords answers once the new start has committed. When the paused replica comes
    back, the entries it lacks are gone from the leader, so it catches up from a snapshot: it
    restarts its log at the leader's start, takes the rest, and gets its leadership back
    (only a replica with every entry does). Read from it, the log starts at or after the
    DeleteRecords offset and holds exactly the acknowledged records from there on, and its
    own directory holds no segment from before."""
    c = DevCluster(tmp_path, settings=["log.retention.check.interval.ms=300",
                                       "leader.imbalance.check.interval.seconds=1"])
    try:
        topic = unique_topic("trim")
        fs = c.admin.create_topics([NewTopic(topic, 1, 3, config={"internal.segment.bytes": "8192",
                                                                   "retention.bytes": "32768"})],
                                   operation_timeout=30, request_timeout=30)
        fs[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, 1)
        with PreferredLeaderAway(c, topic) as away:
            acked = produce_acked(c, topic, [(None, f"{i:04d}".encode() + b"x" * 500) for i in range(400)])
            # Size retention trims the leader (the low watermark moves past 0) ...
            lows = lambda: away.admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()},
                                                   request_timeout=10)
            wait_for(lambda: list(lows().values())[0].result(timeout=15).offset > 0,
                     "retention to move the log start", 30, c.diagnostics)
            # ... and DeleteRecords moves it further, through Raft.
            target = sorted(acked)[-30]  # retention keeps the last 32 KiB: some 60 records
            res = away.admin.delete_records([TopicPartition(topic, 0, target)], request_timeout=20)
            assert list(res.values())[0].result(timeout=30).low_watermark == target
            assert list(lows().values())[0].result(timeout=15).offset == target

        expected = {o: kv for o, kv in acked.items() if o >= target}
        got = read_partition0(c, topic, lambda got: len(got) >= len(expected))
        assert got == expected, f"read {len(got)} records from {min(got, default=None)}, " \
                                f"expected {len(expected)} from {target}"
        # The returning replica's own log starts at or after the DeleteRecords offset.
        bases = [int(f.stem) for f in (c.data_dir / f"broker-{away.victim}" / f"{topic}-0").glob("*.log")]
        assert bases and min(bases) >= target - 20, f"segments of the returning replica start at {sorted(bases)}"
        c.log.flush()
        text = pathlib.Path(c.log.name).read_text()
        assert "retention deleted segments" in text
        assert "restarting the log from its snapshot" in text, "the returning replica did not take a snapshot"
    finally:
        c.close()


def test_compaction_of_a_replicated_log_reaches_a_follower_that_missed_it_through_a_snapshot(tmp_path):
    """A compacted RF 3 partition (cleanup.policy=compact) is cleaned while its preferred
    leader is paused. The cleaned part becomes the Raft snapshot: the returning replica gets
    the cleaned batches in a snapshot, then the entries after them, and leads again. Read
    from it, every record is one that was acknowledged at that offset, fewer than were
    written are left, and the latest value of every key is there."""
    c = DevCluster(tmp_path, settings=["log.cleaner.backoff.ms=200", "leader.imbalance.check.interval.seconds=1"])
    try:
        topic = unique_topic("compact")
        config = {"cleanup.policy": "compact", "internal.segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
        c.admin.create_topics([NewTopic(topic, 1, 3, config=config)], operation_timeout=30,
                              request_timeout=30)[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, 1)
        records = [(f"k{i % 10}".encode(), f"k{i % 10}-{i:04d}".encode() + b"x" * 80) for i in range(600)]
        with PreferredLeaderAway(c, topic) as away:
            acked = produce_acked(c, topic, records)

            # Every replica cleans its own log, and the cleaned part becomes the snapshot the
            # returning replica must get from whichever of the two others leads when it is back.
            # The cleaner may take the log in several passes (a first one over the first
            # segment only, under load): wait until most of what was written is cleaned away,
            # or the victim could catch up from entries not cleaned yet.
            def compacted():
                c.log.flush()
                text = pathlib.Path(c.log.name).read_text()

                def removed(b):
                    return sum(int(n) for n in re.findall(
                        rf"compacted topic={topic} partition=0 node_id={b} .* records_removed=(\d+)", text))
                return all(removed(b) >= 500 for b in range(BROKERS) if b != away.victim)
            wait_for(compacted, "the replicas left to compact the partition", 30, c.diagnostics)

        latest = {k: v for k, v in records}
        end = max(acked) + 1

        def has_latest(got):
            return {k: v for _, (k, v) in sorted(got.items())} == latest and max(got, default=-1) == end - 1
        got = read_partition0(c, topic, has_latest)
        assert has_latest(got), f"latest values not read back: {len(got)} records"
        assert all(acked.get(o) == kv for o, kv in got.items()), "a record read is not the one acknowledged there"
        assert len(got) < len(acked), f"nothing was compacted away: {len(got)} of {len(acked)} records"
        c.log.flush()
        text = pathlib.Path(c.log.name).read_text()
        m = re.search(rf"restarting the log from its snapshot dir=\S*/broker-{away.victim}/{topic}-0 .*cleaned_bytes=(\d+)",
                      text)
        story = "\n".join(line for line in text.splitlines() if topic in line or "snapshot" in line)
        assert m and int(m.group(1)) > 0, f"the returning replica did not get the cleaned batches in a snapshot:\n{story}"
    finally:
        c.close()


def test_a_silent_broker_is_fenced_until_it_is_heard_from_again(tmp_path):
    """Brokers heartbeat to the controller. One that is not heard from within
    broker.session.timeout.ms is fenced: DescribeCluster and Metadata leave it out, and new
    replicas are placed on the other brokers only (RF 3 on the two left is refused, RF 2 goes
    to them). Once it is heard from again it is listed again."""
    c = DevCluster(tmp_path, settings=["broker.session.timeout.ms=2000", "broker.heartbeat.interval.ms=300"])
    try:
        controller = wait_for(lambda: c.controller() + 1, "a controller", 30, c.diagnostics) - 1
        victim = next(b for b in range(BROKERS) if b != controller)
        others = [b for b in range(BROKERS) if b != victim]
        admin = admin_client(",".join(f"127.0.0.1:{c.port + b}" for b in others))

        def listed():
            try:
                return sorted(n.id for n in admin.describe_cluster(request_timeout=5).result(timeout=10).nodes)
            except KafkaException:  # asked the paused broker before it was left out
                return None

        wait_for(lambda: listed() == list(range(BROKERS)), "every broker listed", 30, c.diagnostics)
        os.kill(c.pid(victim), signal.SIGSTOP)
        try:
            wait_for(lambda: listed() == others, "the paused broker to be fenced", 30, c.diagnostics)
            assert sorted(admin.list_topics(timeout=10).brokers) == others
            refused = unique_topic("fenced3")
            with pytest.raises(KafkaException) as e:
                admin.create_topics([NewTopic(refused, 1, 3)], operation_timeout=30)[refused].result(timeout=30)
            assert e.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR, e.value
            placed = unique_topic("fenced2")
            admin.create_topics([NewTopic(placed, 4, 2)], operation_timeout=30)[placed].result(timeout=30)
            md = wait_for_topic(admin, placed, 4)
            assert all(sorted(p.replicas) == others for p in md.partitions.values()), md.partitions
        finally:
            os.kill(c.pid(victim), signal.SIGCONT)
        wait_for(lambda: listed() == list(range(BROKERS)), "the broker to be listed again", 30, c.diagnostics)
        c.log.flush()
        text = pathlib.Path(c.log.name).read_text()
        assert "broker fenced" in text and "broker unfenced" in text
    finally:
        c.close()


def test_create_partitions_adds_replicated_partitions_that_every_broker_serves(cluster):
    """CreatePartitions in cluster mode: the controller places the new partitions (RF of the
    topic, preferred leaders spread) or takes a manual assignment, every broker opens its
    replicas, records go in and come back on the new partitions, and a restarted broker
    replays the change. Fewer partitions than now is refused with INVALID_PARTITIONS."""
    from confluent_kafka.admin import NewPartitions

    c = cluster
    topic = unique_topic("grow")
    create_rf3(c, topic, 2)
    c.admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=30)[topic].result(timeout=30)
    c.admin.create_partitions([NewPartitions(topic, 6, replica_assignment=[[2, 1, 0]])],
                              operation_timeout=30)[topic].result(timeout=30)
    md = wait_for_topic(c.admin, topic, 6)
    assert all(len(p.replicas) == 3 for p in md.partitions.values()), md.partitions
    assert md.partitions[5].replicas == [2, 1, 0]
    assert sorted({md.partitions[p].replicas[0] for p in range(5)}) == [0, 1, 2], "preferred leaders not spread"

    def served_everywhere():
        return all(sorted(c.leaders_seen_by(b, topic)) == list(range(6))
                   and -1 not in c.leaders_seen_by(b, topic).values() for b in range(BROKERS))
    wait_for(served_everywhere, "every broker to name a leader for the 6 partitions", 30, c.diagnostics)

    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(60):
        p.produce(topic, value=str(i).encode(), partition=i % 6)
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, q, 0) for q in range(6)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 60 and time.monotonic() < deadline:
        got += [(m.partition(), int(m.value())) for m in consumer.consume(60, timeout=1) if m.error() is None]
    consumer.close()
    assert sorted(got) == sorted((i % 6, i) for i in range(60))

    with pytest.raises(KafkaException) as e:
        c.admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=30)[topic].result(timeout=30)
    assert e.value.args[0].code() == KafkaError.INVALID_PARTITIONS, e.value

    # A restarted broker replays the new partitions from the metadata log.
    victim = md.partitions[5].replicas[1]
    old_pid = c.pid(victim)
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: c.pid(victim) != old_pid, "the broker to be restarted", 30, c.diagnostics)
    wait_for(served_everywhere, "the restarted broker to serve the 6 partitions again", 60, c.diagnostics)


def test_a_topic_config_change_reaches_every_replica(tmp_path):
    """IncrementalAlterConfigs on a topic in cluster mode goes through the controller into
    the metadata log, so every broker applies it to its replicas: after retention.bytes is
    lowered, all three replicas delete their oldest segments. Two changes sent at once through
    different brokers are both kept (the controller applies each to the current overrides),
    and every broker describes all three values."""
    c = DevCluster(tmp_path, settings=["log.retention.check.interval.ms=300"])
    try:
        topic = unique_topic("reconf")
        c.admin.create_topics([NewTopic(topic, 1, 3, config={"internal.segment.bytes": "4096"})], operation_timeout=30,
                              request_timeout=30)[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, 1)
        produce_acked(c, topic, [(None, b"x" * 500) for _ in range(200)])

        def first_bases():
            return [min(int(f.stem) for f in (c.data_dir / f"broker-{b}" / f"{topic}-0").glob("*.log"))
                    for b in range(BROKERS)]
        wait_for(lambda: first_bases() == [0, 0, 0], "every replica to hold the records", 30, c.diagnostics)

        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.bytes", "16384", incremental_operation=AlterConfigOpType.SET)])
        c.admin.incremental_alter_configs([res])[res].result(timeout=30)
        wait_for(lambda: all(b > 0 for b in first_bases()), "every replica to apply the new retention", 30,
                 lambda: f"{first_bases()} {c.diagnostics()}")
        # Two incremental changes at once, through different brokers: the controller applies
        # each to the current overrides, so neither is lost.
        failed = []

        def set_one(broker, name, value):
            res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
            one = admin_client(f"127.0.0.1:{c.port + broker}")  # kept alive until the answer
            try:
                one.incremental_alter_configs([res])[res].result(timeout=30)
            except Exception as e:  # reported below, from the test's thread
                failed.append((name, e))
        both = [threading.Thread(target=set_one, args=(0, "max.message.bytes", "500000")),
                threading.Thread(target=set_one, args=(1, "segment.ms", "3600000"))]
        for t in both:
            t.start()
        for t in both:
            t.join(timeout=60)
        assert not failed, failed
        expected = {"retention.bytes": "16384", "max.message.bytes": "500000", "segment.ms": "3600000"}
        for b in range(BROKERS):
            one = admin_client(f"127.0.0.1:{c.port + b}")
            described = one.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
            [entries] = [f.result(timeout=30) for f in described.values()]
            assert {k: entries[k].value for k in expected} == expected, b
    finally:
        c.close()


REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def test_reassignment_moves_a_partition_by_joint_consensus_while_a_producer_writes(cluster, java_build, tmp_path):
    """kafka-reassign-partitions moves two RF 2 partitions while an idempotent acks=all
    producer writes to the first: [0, 1] -> [2, 1], whose leader (0) is leaving, and
    [1, 0] -> [1, 2], whose leader stays. Broker 2 joins each Raft group as a learner; once
    caught up, one joint-consensus change makes it a voter and removes broker 0 (a leaving
    leader first promotes it, hands leadership over, and the new leader removes the old).
    `--verify` reports completion, every broker's Metadata lists the new replicas, every
    acknowledged record is read back once and in order, broker 0's replicas are deleted, and
    brokers 1 and 2 hold identical logs."""
    from test_kafka_tools import Tools

    c = cluster
    tools = Tools(java_build / "lib", c)
    topic = unique_topic("move")
    c.admin.create_topics([NewTopic(topic, 2, replica_assignment=[[0, 1], [1, 0]])], operation_timeout=30,
                          request_timeout=30)[topic].result(timeout=30)
    wait_for_topic(c.admin, topic, 2)
    wait_for(lambda: c.leaders_seen_by(0, topic) == {0: 0, 1: 1}, "the preferred leaders to lead", 30, c.diagnostics)
    writer = Writer(c, topic, 3000, pace_s=0.002)
    wait_for(lambda: writer.acked_count() >= 300, "acks before the move", 60, c.diagnostics, 0.1)

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 1]},
                                                             {"topic": topic, "partition": 1, "replicas": [1, 2]}]}))
    out = tools.run(REASSIGN, "--reassignment-json-file", plan, "--execute").stdout
    assert "Successfully started" in out, out
    wait_for(lambda: tools.run(REASSIGN, "--reassignment-json-file", plan, "--verify").stdout.count("is completed") == 2,
             "kafka-reassign-partitions --verify to report completion", 90, c.diagnostics, 1)
    wait_for(lambda: all({q: r for q, (_, r) in c.seen_by(b, topic).items()} == {0: [2, 1], 1: [1, 2]}
                         for b in range(BROKERS)),
             "every broker to list the new replicas", 30, c.diagnostics)

    writer.join()
    check_history(writer, read_all(c, topic, 3000))
    assert writer.acked_count() == 3000
    assert not list((c.data_dir / "broker-0").glob(f"{topic}-*")), "a removed replica is still on disk"
    wait_for(lambda: c.partition_log_bytes(1, topic) == c.partition_log_bytes(2, topic),
             "the new replica to hold the same log", 30, c.diagnostics)
    c.log.flush()
    text = pathlib.Path(c.log.name).read_text()
    assert "joint change" in text and "handing leadership to a target replica" in text


def test_decommission_moves_every_replica_off_a_broker_before_it_leaves(tmp_path):
    """`runnel admin decommission --broker 3` on a 4-broker cluster: every replica on broker 3
    (an RF 3 topic's and the consumer groups' `__consumer_offsets`) moves to the other brokers
    by reassignment, the command returns once none is left, and then broker 3 can be stopped
    for good: every partition still has 3 replicas, all records and the group's committed
    offsets are there, and broker 3 holds no partition directory."""
    c = DevCluster(tmp_path, brokers=4)
    try:
        topic = unique_topic("decom")
        c.admin.create_topics([NewTopic(topic, 4, 3)], operation_timeout=30, request_timeout=30)[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, 4)
        assert any(3 in p.replicas for p in c.admin.list_topics(topic, timeout=10).topics[topic].partitions.values())
        produce_to_all = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all"})
        for i in range(400):
            produce_to_all.produce(topic, value=str(i).encode(), partition=i % 4)
        assert produce_to_all.flush(30) == 0
        group = unique_topic("g")
        got = group_consume(c, group, topic, 400)
        assert sorted(int(v) for v in got.values()) == list(range(400)), "the group did not read everything"
        before = committed(c, group, topic, 4)

        p = subprocess.run([RUNNEL_BIN, "admin", "decommission", "--bootstrap", c.bootstrap, "--broker", "3",
                            "--timeout-s", "120"], capture_output=True, text=True, timeout=150)
        assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n{c.diagnostics()}"
        assert "holds no replicas" in p.stdout, p.stdout
        # Broker 3 deletes its replicas as it applies the moves' ends, a moment after the
        # controller commits them (as Kafka's brokers delete stopped replicas).
        wait_for(lambda: not [d for d in (c.data_dir / "broker-3").iterdir()
                              if d.name.startswith((topic, "__consumer_offsets"))],
                 "broker 3 to delete its moved replicas", 30, c.diagnostics)

        os.kill(c.pid(3), signal.SIGSTOP)  # gone for good, as far as the others can tell
        try:
            admin = admin_client(admin_bootstrap(c, 3))
            md = admin.list_topics(timeout=10)
            for t in (topic, "__consumer_offsets"):
                for q in md.topics[t].partitions.values():
                    assert 3 not in q.replicas and len(q.replicas) == 3, (t, q.id, q.replicas)
            consumer = Consumer({"bootstrap.servers": admin_bootstrap(c, 3), "group.id": unique_topic("g"),
                                 "enable.auto.commit": False, "auto.offset.reset": "earliest"})
            consumer.assign([TopicPartition(topic, q, 0) for q in range(4)])
            values, deadline = [], time.monotonic() + 60
            while len(values) < 400 and time.monotonic() < deadline:
                values += [int(m.value()) for m in consumer.consume(400, timeout=1) if m.error() is None]
            consumer.close()
            assert sorted(values) == list(range(400))
            reader = Consumer({"bootstrap.servers": admin_bootstrap(c, 3), "group.id": group,
                               "enable.auto.commit": False})
            try:
                after = {tp.partition: tp.offset
                         for tp in reader.committed([TopicPartition(topic, q) for q in range(4)], timeout=30)}
            finally:
                reader.close()
            assert after == before, f"committed offsets before the move {before}, after {after}"
        finally:
            os.kill(c.pid(3), signal.SIGCONT)
    finally:
        c.close()


def admin_bootstrap(c, without):
    return ",".join(f"127.0.0.1:{c.port + b}" for b in range(c.brokers) if b != without)


class MoveToPaused:
    """An RF 2 partition on brokers [a, b] asked (raw AlterPartitionReassignments) to move to
    [victim, b] while `victim` is paused, so the move waits; the controller is never the
    victim. `alter({(topic, p): replicas or None})` returns {(topic, p) or None: (code, msg)}.
    (kafka-reassign-partitions refuses brokers that DescribeCluster does not list, and clears
    throttles on every broker, including a paused one.)"""

    def __init__(self, c, prefix):
        self.c = c
        controller = wait_for(lambda: c.controller() + 1, "a controller", 30, c.diagnostics) - 1
        self.victim = next(x for x in range(BROKERS) if x != controller)
        self.a, self.b = [x for x in range(BROKERS) if x != self.victim]
        self.topic = unique_topic(prefix)
        c.admin.create_topics([NewTopic(self.topic, 1, replica_assignment=[[self.a, self.b]])], operation_timeout=30,
                              request_timeout=30)[self.topic].result(timeout=30)
        wait_for_topic(c.admin, self.topic, 1)
        os.kill(c.pid(self.victim), signal.SIGSTOP)
        self.paused = True
        assert [code for code, _ in self.alter({(self.topic, 0): [self.victim, self.b]}).values()] == [0, 0]

    def alter(self, moves):
        with kw.Conn(f"127.0.0.1:{self.c.port + self.a}", timeout_s=40) as conn:
            r = conn.request(kw.alter_partition_reassignments_v0_request(moves, conn.next_correlation_id()),
                             flexible_response_header=True)
            return kw.decode_alter_partition_reassignments_v0(r)

    def listed(self, broker):
        return {q: r for q, (_, r) in self.c.seen_by(broker, self.topic).items()}

    def write(self, values):
        p = Producer({"bootstrap.servers": admin_bootstrap(self.c, self.victim), "enable.idempotence": True,
                      "acks": "all"})
        for v in values:
            p.produce(self.topic, value=str(v).encode(), partition=0)
        assert p.flush(30) == 0, "writes stalled while the move waits"

    def resume(self):
        if self.paused:
            os.kill(self.c.pid(self.victim), signal.SIGCONT)
            self.paused = False


def test_a_reassignment_to_an_unreachable_broker_waits_and_can_be_cancelled(cluster):
    """A move to a paused broker cannot finish: the learner never answers, so it is not
    promoted and no voter is removed; the partition keeps taking acks=all writes on its
    original replicas while Metadata lists the target then the leaving replicas. Cancelling
    it (a null target) returns the target to the original replicas: the leader removes the
    learner and the move ends with the original list; cancelling again answers
    NO_REASSIGNMENT_IN_PROGRESS. The paused broker, once resumed, deletes the replica it had
    opened."""
    c = cluster
    m = MoveToPaused(c, "cancel")
    try:
        time.sleep(3)  # several rounds of the leader's reassignment loop
        assert m.listed(m.a) == {0: [m.victim, m.b, m.a]}, "the move should still be under way"
        m.write(range(100))
        assert [code for code, _ in m.alter({(m.topic, 0): None}).values()] == [0, 0]
        wait_for(lambda: m.alter({(m.topic, 0): None})[(m.topic, 0)][0] == 85, "the cancelled move to end", 30,
                 c.diagnostics)
        assert m.listed(m.a) == {0: [m.a, m.b]}
    finally:
        m.resume()
    wait_for(lambda: not (c.data_dir / f"broker-{m.victim}" / f"{m.topic}-0").exists(),
             "the resumed broker to delete the replica it had opened", 30, c.diagnostics)
    assert sorted(v for _, v in read_all(c, m.topic, 100)) == list(range(100))


def test_a_reassignment_survives_its_leader_being_killed(cluster):
    """A move waits on a paused target broker; its leader is killed with kill -9 (runnel dev
    starts it again, and it replays the move from the metadata log). Once the target broker
    is resumed, the new leader finishes the move: every broker lists the target replicas,
    every acknowledged record written before and after the kill is there, and the replica
    that left is deleted."""
    c = cluster
    m = MoveToPaused(c, "movekill")
    try:
        m.write(range(100))
        leader = c.leaders_seen_by(m.a, m.topic)[0]
        assert leader in (m.a, m.b), leader
        old_pid = c.pid(leader)
        os.kill(old_pid, signal.SIGKILL)
        wait_for(lambda: c.pid(leader) != old_pid, "the killed broker to be started again", 30, c.diagnostics)
        wait_for(lambda: c.leaders_seen_by(m.a if leader == m.b else m.b, m.topic).get(0, -1) in (m.a, m.b),
                 "a leader after the kill", 30, c.diagnostics)
        m.write(range(100, 200))
    finally:
        m.resume()
    wait_for(lambda: all(m.listed(x) == {0: [m.victim, m.b]} for x in range(BROKERS)),
             "the move to finish after the leader's restart", 60, c.diagnostics)
    wait_for(lambda: not (c.data_dir / f"broker-{m.a}" / f"{m.topic}-0").exists(),
             "the replica that left to be deleted", 30, c.diagnostics)
    assert sorted(v for _, v in read_all(c, m.topic, 200)) == list(range(200))


def test_min_insync_replicas_refuses_acks_all_while_too_few_are_in_sync(tmp_path):
    """min.insync.replicas=3 on an RF 3 topic: with a follower paused past
    replica.lag.time.max.ms it leaves the ISR, and acks=all is refused with
    NOT_ENOUGH_REPLICAS (Raft alone would have taken it with two of three) while acks=1 is
    taken; once the follower is back in sync, acks=all is taken again."""
    c = DevCluster(tmp_path, settings=["replica.lag.time.max.ms=1500"])
    try:
        topic = unique_topic("minisr")
        fs = c.admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "3"})],
                                   operation_timeout=30, request_timeout=30)
        fs[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, 1)
        leader = c.known_leader(topic)
        wait_for(lambda: c.isr_seen_by(leader, topic).get(0) == [0, 1, 2], "all three in sync", 30, c.diagnostics)

        def produce(acks):
            p = Producer({"bootstrap.servers": c.bootstrap, "acks": acks, "retries": 0,
                          "enable.idempotence": False, "message.timeout.ms": 10000})
            out = []
            p.produce(topic, value=b"v", on_delivery=lambda err, _m: out.append(err.name() if err else "OK"))
            p.flush(20)
            return out

        assert produce("all") == ["OK"]
        follower = next(b for b in range(3) if b != leader)
        os.kill(c.pid(follower), signal.SIGSTOP)
        try:
            wait_for(lambda: follower not in c.isr_seen_by(leader, topic).get(0, [follower]),
                     "the paused follower out of the ISR", 30, c.diagnostics)
            assert produce("all") == ["NOT_ENOUGH_REPLICAS"]
            assert produce("1") == ["OK"]
        finally:
            os.kill(c.pid(follower), signal.SIGCONT)
        wait_for(lambda: c.isr_seen_by(leader, topic).get(0) == [0, 1, 2], "the follower back in sync", 30,
                 c.diagnostics)
        assert produce("all") == ["OK"]
    finally:
        c.close()
