"""Fetch from follower (KIP-392) on a 3-broker cluster (`runnel dev --brokers 3`, broker i in
zone dev-i), with each of the three client stacks: a consumer that sets `client.rack` to a
zone reads the partitions led elsewhere from the replica in its zone. Checked on both sides:
every record is read back in order, and the broker in the consumer's zone logs that it
served each of those partitions as a follower. With `replica.selector.class` set to Kafka's
LeaderSelector, no follower serves anything."""

import json
import re
import subprocess

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import CACHE, ROOT, unique_topic, wait_for
from test_cluster import DevCluster, create_rf3
from test_franz_go import clientcheck_bin  # noqa: F401  (session fixture: runs tests/go/build.sh)
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)

PARTITIONS = 3
RECORDS = 300  # per partition
# The zone of the consumers: broker 1's.
READER = 1
JAVA_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = DevCluster(tmp_path_factory.mktemp("follower-fetch"))
    yield c
    c.close()


def fill(c, topic):
    """A topic with replication factor 3 whose partitions are led by every broker in turn,
    RECORDS values per partition. Returns {partition: leader}."""
    create_rf3(c, topic, partitions=PARTITIONS)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        for part in range(PARTITIONS):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0
    leaders = c.leaders_seen_by(0, topic)
    assert len(leaders) == PARTITIONS
    return leaders


def expected(part):
    return [f"{part}-{i}" for i in range(RECORDS)]


def served_by_follower(c, broker, topic):
    """Partitions of `topic` that `broker` logged serving to consumers as a follower."""
    text = open(c.log.name).read()
    pattern = rf"serving consumers from this follower.*broker={broker} topic={re.escape(topic)} partition=(\d+)"
    return {int(m) for m in re.findall(pattern, text)}


def check_served(c, topic, leaders):
    away = {p for p, leader in leaders.items() if leader != READER}
    assert away, f"every partition is led by the consumer's zone: {leaders}"
    wait_for(lambda: served_by_follower(c, READER, topic) >= away,
             f"broker {READER} serving partitions {sorted(away)} as a follower", 10, c.diagnostics)
    for other in range(3):
        if other != READER:
            assert not served_by_follower(c, other, topic), f"broker {other} served a consumer in zone dev-{READER}"


def read_all_with_librdkafka(c, topic, until=lambda: True):
    """Every record of `topic`, read by a librdkafka consumer in zone dev-READER, checked;
    the consumer goes on fetching (bounded) until `until()` holds as well."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g"),
                         "client.rack": f"dev-{READER}", "enable.auto.commit": False})
    got = {p: [] for p in range(PARTITIONS)}

    def poll():
        for m in consumer.consume(500, timeout=0.5):
            if m.error() is None:
                got[m.partition()].append(m.value().decode())
        return all(len(v) == RECORDS for v in got.values()) and until()

    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        wait_for(poll, "every record", 30, c.diagnostics, interval_s=0)
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert got[p] == expected(p), f"partition {p}"


def test_librdkafka_reads_from_the_replica_in_its_zone(cluster):
    topic = unique_topic("ff-rdkafka")
    leaders = fill(cluster, topic)
    away = {p for p, leader in leaders.items() if leader != READER}
    read_all_with_librdkafka(cluster, topic, until=lambda: served_by_follower(cluster, READER, topic) >= away)
    check_served(cluster, topic, leaders)


def test_java_console_consumer_reads_from_the_replica_in_its_zone(cluster, java_build):  # noqa: F811
    topic = unique_topic("ff-java")
    leaders = fill(cluster, topic)
    cmd = ["java", *JAVA_OPTS, "-cp", f"{java_build / 'lib'}/*", "org.apache.kafka.tools.consumer.ConsoleConsumer",
           "--bootstrap-server", cluster.bootstrap, "--topic", topic, "--from-beginning",
           "--max-messages", str(RECORDS * PARTITIONS), "--timeout-ms", "60000",
           "--command-property", f"client.rack=dev-{READER}", "--formatter-property", "print.partition=true"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    got = {part: [] for part in range(PARTITIONS)}
    for line in p.stdout.splitlines():
        m = re.match(r"Partition:(\d+)\s+(\S+)$", line)
        assert m, f"unexpected line {line!r}"
        got[int(m.group(1))].append(m.group(2))
    for part in range(PARTITIONS):
        assert got[part] == expected(part), f"partition {part}"
    check_served(cluster, topic, leaders)


def test_franz_go_reads_from_the_replica_in_its_zone(cluster, clientcheck_bin):  # noqa: F811
    topic = unique_topic("ff-franz")
    leaders = fill(cluster, topic)
    p = subprocess.run([str(CACHE / "go" / "rackcheck"), "--bootstrap", cluster.bootstrap, "--topic", topic,
                        "--rack", f"dev-{READER}", "--records", str(RECORDS * PARTITIONS), "--timeout", "60s"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    got = {json.loads(line)["partition"]: json.loads(line)["values"] for line in p.stdout.splitlines()}
    for part in range(PARTITIONS):
        assert got.get(part) == expected(part), f"partition {part}"
    check_served(cluster, topic, leaders)


def test_leader_selector_keeps_consumers_on_leaders(tmp_path):
    c = DevCluster(tmp_path, settings=["replica.selector.class=org.apache.kafka.common.replica.LeaderSelector"])
    try:
        topic = unique_topic("ff-leader")
        fill(c, topic)
        read_all_with_librdkafka(c, topic)
        for b in range(3):
            assert not served_by_follower(c, b, topic), f"broker {b} served as a follower"
    finally:
        c.close()
