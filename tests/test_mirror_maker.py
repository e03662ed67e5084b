"""MirrorMaker 2 (Kafka 4.3.1's connect-mirror, dedicated mode) between Apache Kafka and
Runnel, both ways at once, as a team moving in would run it (docs/migrating.md):

- an Apache Kafka 4.3.1 broker started here from the jars the Java tests fetch (KRaft,
  combined mode, loopback only);
- `orders` on Kafka is mirrored into Runnel as `kafka.orders`, and `events` on Runnel into
  Kafka as `runnel.events`: every record, in order, per partition;
- group `g`, which committed offset 300 of `orders` on Kafka, gets its offsets on Runnel
  translated by MM2's checkpoints (at or before 300: MM2 translates conservatively, from
  its offset syncs), and a consumer of `g` on Runnel resumes there and reads the rest."""

import base64
import signal
import subprocess
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import stop_process, free_port, wait_for
from test_java_client import java_build  # noqa: F401  (session fixture: the Kafka and Connect jars)

RECORDS = 1000
PARTITIONS = 2
COMMITTED = 300


class ApacheKafka:
    """One Apache Kafka broker (broker and controller in one process) on 127.0.0.1."""

    def __init__(self, java_build, tmp_path):
        self.port, controller = free_port(), free_port()
        self.dir = tmp_path / "kafka"
        self.dir.mkdir()
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "inter.broker.listener.name=PLAINTEXT", "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.dir / 'data'}", "num.partitions=1", "default.replication.factor=1",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1", "group.initial.rebalance.delay.ms=0",
        ]) + "\n")
        java = ["java", "-XX:+UseSerialGC", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", f"{java_build / 'lib'}/*"]
        fmt = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", self.cluster_id(), "-c", str(props)],
                             capture_output=True, text=True, timeout=120)
        assert fmt.returncode == 0, fmt.stdout + fmt.stderr
        self.log = open(self.dir / "kafka.log", "ab")
        self.proc = subprocess.Popen(java + ["kafka.Kafka", str(props)], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.bootstrap = f"127.0.0.1:{self.port}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait_for(lambda: self.proc.poll() is None and _brokers(admin), "Apache Kafka up", 120, self.tail)

    @staticmethod
    def cluster_id():
        """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def tail(self):
        self.log.flush()
        return "\n".join((self.dir / "kafka.log").read_text(errors="replace").splitlines()[-40:])

    def stop(self):
        stop_process(self.proc)
        self.log.close()


def _brokers(admin):
    try:
        return len(admin.list_topics(timeout=5).brokers) > 0
    except Exception:  # noqa: BLE001  (still starting)
        return False


def seed(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        p.produce(topic, key=b"%d" % i, value=b"%s %d" % (topic.encode(), i), partition=i % PARTITIONS)
    assert p.flush(60) == 0


def read(bootstrap, topic, group=None, partitions=PARTITIONS, want=RECORDS):
    """{partition: [values]} from the group's committed offsets (or the start), until
    `want` records or 60 s."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or "mm2-probe", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    got = {p: [] for p in range(partitions)}
    try:
        if group:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got[m.partition()].append(m.value())
    finally:
        c.close()
    return got


def expected(topic):
    return {p: [b"%s %d" % (topic.encode(), i) for i in range(RECORDS) if i % PARTITIONS == p]
            for p in range(PARTITIONS)}


def commit_retrying(consumer, offsets):
    """Commits; False on a retriable error or a coordinator still loading or moving (the
    caller tries again, as Kafka's Java client does by itself)."""
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
        return True
    except KafkaException as e:
        moving = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                  KafkaError.COORDINATOR_NOT_AVAILABLE)
        if e.args and (e.args[0].retriable() or e.args[0].code() in moving):
            return False
        raise


def test_mirror_maker_2_between_kafka_and_runnel(broker, java_build, tmp_path):  # noqa: F811
    kafka = ApacheKafka(java_build, tmp_path)
    mm2 = None
    try:
        seed(kafka.bootstrap, "orders")
        seed(broker.bootstrap, "events")
        c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g", "enable.auto.commit": False})
        # A Kafka just started may answer COORDINATOR_LOAD_IN_PROGRESS while it loads its
        # offsets partition (seen in CI); the error is retriable, so the commit is retried.
        wait_for(lambda: commit_retrying(c, [TopicPartition("orders", p, COMMITTED) for p in range(PARTITIONS)]),
                 "the group's offsets committed on Kafka", 30)
        c.close()

        props = tmp_path / "mm2.properties"
        props.write_text("\n".join([
            "clusters = kafka, runnel",
            f"kafka.bootstrap.servers = {kafka.bootstrap}",
            f"runnel.bootstrap.servers = {broker.bootstrap}",
            "kafka->runnel.enabled = true", "kafka->runnel.topics = orders",
            "runnel->kafka.enabled = true", "runnel->kafka.topics = events",
            "replication.factor = 1", "checkpoints.topic.replication.factor = 1",
            "heartbeats.topic.replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
            "offset.storage.replication.factor = 1", "status.storage.replication.factor = 1",
            "config.storage.replication.factor = 1",
            "sync.group.offsets.enabled = true", "sync.group.offsets.interval.seconds = 1",
            "emit.checkpoints.interval.seconds = 1", "refresh.topics.interval.seconds = 2",
            "refresh.groups.interval.seconds = 2", "offset.flush.interval.ms = 1000",
        ]) + "\n")
        log = open(tmp_path / "mm2.log", "ab")
        mm2 = subprocess.Popen(
            ["java", "-XX:+UseSerialGC", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
             "-cp", f"{java_build / 'connect-lib'}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp_path)

        def mm2_log():
            log.flush()
            return "\n".join((tmp_path / "mm2.log").read_text(errors="replace").splitlines()[-60:])

        def ends(bootstrap, topic):
            probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-ends"})
            try:
                md = probe.list_topics(topic, timeout=5).topics.get(topic)
                if md is None or md.error is not None:
                    return None
                return sum(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in md.partitions)
            except Exception:  # noqa: BLE001  (not there yet)
                return None
            finally:
                probe.close()

        wait_for(lambda: mm2.poll() is None and ends(broker.bootstrap, "kafka.orders") == RECORDS,
                 "orders mirrored into Runnel", 120, mm2_log)
        wait_for(lambda: mm2.poll() is None and ends(kafka.bootstrap, "runnel.events") == RECORDS,
                 "events mirrored into Kafka", 120, mm2_log)
        assert read(broker.bootstrap, "kafka.orders") == expected("orders")
        assert read(kafka.bootstrap, "runnel.events") == expected("events")

        def translated():
            g = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
            try:
                tps = g.committed([TopicPartition("kafka.orders", p) for p in range(PARTITIONS)], timeout=10)
                return [tp.offset for tp in tps] if all(tp.offset >= 0 for tp in tps) else None
            finally:
                g.close()

        wait_for(translated, "group g's offsets translated onto Runnel", 120, mm2_log)
        # MirrorMaker may move them on with later offset syncs until it stops: read them after.
        time.sleep(3)
        mm2.send_signal(signal.SIGTERM)
        mm2.wait(timeout=60)
        offsets = translated()
        per_partition = RECORDS // PARTITIONS
        assert offsets and all(0 < o <= COMMITTED for o in offsets), offsets
        # The group moves to Runnel: it resumes at the translated offsets and reads the rest,
        # every record from where it stopped on Kafka included.
        want = sum(per_partition - o for o in offsets)
        got = read(broker.bootstrap, "kafka.orders", group="g", want=want)
        for p in range(PARTITIONS):
            assert got[p] == expected("orders")[p][offsets[p]:], (p, offsets[p], len(got[p]))
    finally:
        if mm2 is not None and mm2.poll() is None:
            mm2.kill()
            mm2.wait(timeout=10)
        kafka.stop()
