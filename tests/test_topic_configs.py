"""Every topic config Apache Kafka 4.3 defines, taken from Kafka's own definitions (its
LogConfig, read by tests/java/src/ConfigCheck.java) so none is missed:

- the Java AdminClient: defaults, types and sources as Kafka describes them, the same
  verdict as Kafka's validators on some 950 values, every config set at once, per-record
  errors (KIP-467) in the Java producer, recompressed topics read back (ConfigCheck);
- kafka-topics.sh creating a topic with every config, and a broker-side refusal;
- compression.type recompresses what is stored (read off the segment file) and a consumer
  reads it back; librdkafka sees a batch with a bad record refused as a whole, with
  INVALID_RECORD and INVALID_TIMESTAMP, as from Kafka;
- message.timestamp.after.max.ms refuses records from the future."""

import struct
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from conftest import admin_client, create_topic, unique_topic
from test_java_client import _clip, java_build, run_java  # noqa: F401  (java_build: session fixture)
from test_kafka_tools import Tools


def test_every_kafka_topic_config_with_the_java_client(broker, java_build):  # noqa: F811
    p = run_java(java_build, "ConfigCheck", ["check", broker.bootstrap], 300)
    report = f"--- stdout ---\n{_clip(p.stdout)}\n--- stderr ---\n{_clip(p.stderr)}"
    if hasattr(broker, "log_tail"):
        report += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
    assert p.returncode == 0, report
    assert "ConfigCheck OK: 33 configs" in p.stdout, report


def test_every_kafka_topic_config_through_kafka_topics_sh(broker, java_build):  # noqa: F811
    defs = run_java(java_build, "ConfigCheck", ["defs"], 120)
    assert defs.returncode == 0, defs.stderr
    pairs = [line.strip() for line in defs.stdout.splitlines() if "=" in line]
    assert len(pairs) == 33, pairs
    tools = Tools(java_build / "lib", broker)
    topic = unique_topic("everycfg")
    args = ["--create", "--topic", topic, "--partitions", 1, "--replication-factor", 1]
    for pair in pairs:
        args += ["--config", pair]
    out = tools.topics(*args).stdout
    assert f"Created topic {topic}." in out, out
    described = tools.topics("--describe", "--topic", topic).stdout
    for pair in pairs:
        assert pair in described, (pair, described)
    # The tool checks values with Kafka's validators before it sends them; what only a
    # broker can refuse, the broker refuses as Kafka does without tiered storage.
    bad = tools.topics("--create", "--topic", unique_topic("badcfg"), "--partitions", 1,
                       "--replication-factor", 1, "--config", "remote.storage.enable=true", expect_rc=1)
    said = bad.stdout + bad.stderr
    assert "InvalidConfigurationException" in said and "Tiered Storage functionality is disabled" in said, said


def batch_codecs(data_dir, topic):
    """(codec, record count) of every batch in the topic's partition 0 segment files."""
    out = []
    for seg in sorted((data_dir / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            length = struct.unpack(">i", data[pos + 8:pos + 12])[0]
            attributes = struct.unpack(">h", data[pos + 21:pos + 23])[0]
            count = struct.unpack(">i", data[pos + 57:pos + 61])[0]
            out.append((attributes & 7, count))
            pos += 12 + length
    return out


def consume_all(bootstrap, topic, n, timeout_s=30):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    got = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_compression_type_recompresses_what_is_stored(runnel_broker):
    b = runnel_broker
    admin = admin_client(b.bootstrap)
    codecs = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4, "uncompressed": 0}
    topics = {codec: unique_topic(f"re-{codec}") for codec in codecs}
    for codec, topic in topics.items():
        create_topic(admin, topic, 1, {"compression.type": codec, "compression.gzip.level": "9",
                                       "compression.zstd.level": "19", "compression.lz4.level": "12"})
    for sent_as in ("none", "lz4"):
        p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": sent_as, "linger.ms": 50})
        for topic in topics.values():
            for i in range(200):
                p.produce(topic, key=b"k%d" % i, value=b"%s record %d " % (sent_as.encode(), i) * 8)
        assert p.flush(30) == 0
    for codec, topic in topics.items():
        stored = batch_codecs(b.data_dir, topic)
        assert stored and {c for c, _ in stored} == {codecs[codec]}, (codec, stored)
        assert sum(n for _, n in stored) == 400, stored
        got = consume_all(b.bootstrap, topic, 400)
        want = [b"%s record %d " % (s.encode(), i) * 8 for s in ("none", "lz4") for i in range(200)]
        assert got == want, (codec, len(got))


def deliveries(bootstrap, topic, records):
    """Produces (key, value, timestamp) records in one batch; the error name of each."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "compression.type": "none",
                  "enable.idempotence": False, "retries": 0})
    out = [None] * len(records)

    def done(i):
        return lambda err, _msg: out.__setitem__(i, err.name() if err else "OK")

    for i, (key, value, ts) in enumerate(records):
        p.produce(topic, key=key, value=value, timestamp=ts or 0, on_delivery=done(i))
    assert p.flush(30) == 0
    return out


def test_librdkafka_sees_a_batch_with_bad_records_refused_whole(broker):
    admin = admin_client(broker.bootstrap)
    compacted, recent, future = unique_topic("keyless"), unique_topic("old"), unique_topic("future")
    create_topic(admin, compacted, 1, {"cleanup.policy": "compact"})
    create_topic(admin, recent, 1, {"message.timestamp.before.max.ms": "3600000"})
    create_topic(admin, future, 1, {"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    assert deliveries(broker.bootstrap, compacted, [(b"a", b"1", None), (None, b"2", None), (b"c", b"3", None)]) \
        == ["INVALID_RECORD"] * 3
    assert deliveries(broker.bootstrap, recent, [(b"a", b"1", now), (b"b", b"2", now - 7_200_000)]) \
        == ["INVALID_TIMESTAMP"] * 2
    assert deliveries(broker.bootstrap, future, [(b"a", b"1", now + 600_000)]) == ["INVALID_TIMESTAMP"]
    # Within the bounds, and keyed: taken.
    assert deliveries(broker.bootstrap, compacted, [(b"a", b"1", None), (b"b", b"2", None)]) == ["OK"] * 2
    assert deliveries(broker.bootstrap, recent, [(b"a", b"1", now - 60_000)]) == ["OK"]
    assert deliveries(broker.bootstrap, future, [(b"a", b"1", now + 10_000)]) == ["OK"]
    assert consume_all(broker.bootstrap, compacted, 2) == [b"1", b"2"]
