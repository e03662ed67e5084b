"""Client-level compatibility tests with librdkafka (confluent-kafka).

These run against a fresh runnel (`broker` fixture), or against any broker named by
RUNNEL_TEST_BOOTSTRAP (for example Apache Kafka from ../shared/peers/kafka), so that every
expectation here can be checked against Kafka itself.

The auto-create tests need to control `auto.create.topics.enable`, so they start their own
runnel. With RUNNEL_TEST_BOOTSTRAP set they use the external broker only when
RUNNEL_TEST_EXTERNAL_AUTOCREATE says how it is configured ("false", the default, matches the
peer Kafka's auto.create.topics.enable=false; "true" also needs
RUNNEL_TEST_EXTERNAL_NUM_PARTITIONS, default 1) and skip otherwise.
"""

import functools
import os
import random
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaError,
                             KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import NewPartitions, NewTopic

from conftest import Broker, External, admin_client, create_topic, unique_topic, wait_for_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N_RECORDS = 3000


# ---------------------------------------------------------------------------------------------
# helpers


def kafka_error_code(exc):
    assert isinstance(exc, KafkaException), repr(exc)
    return exc.args[0].code()


def make_records(rng, n, base_ts):
    """n records as dicts: key (bytes or None), value (bytes, b'' or None), headers, timestamp."""
    records = []
    for i in range(n):
        kind = i % 10
        if kind == 0:
            value = None
        elif kind == 1:
            value = b""
        elif kind in (2, 3):
            value = (f"compressible-{i}-" * rng.randrange(1, 60)).encode()
        elif kind == 4:
            value = rng.randbytes(rng.randrange(1, 3000))
        else:
            value = f"v{i}".encode() + rng.randbytes(rng.randrange(0, 40))
        if i % 13 == 0:
            key = None
        elif i % 17 == 0:
            key = b""
        else:
            key = f"key-{rng.randrange(50)}".encode()
        if i % 3 == 0:
            headers = None
        else:
            headers = [("seq", str(i).encode()), ("dup", b"1"), ("dup", b"2")]
            if i % 7 == 0:
                headers.append(("null", None))
            if i % 11 == 0:
                headers.append(("empty", b""))
        records.append({"i": i, "key": key, "value": value, "headers": headers,
                        "timestamp": base_ts + i})
    return records


def produce_all(bootstrap, topic, records, extra_conf=None, timeout_s=90.0):
    """Produce records (idempotent, acks=all). Returns {i: (partition, offset)}; asserts no
    delivery error and that every record was reported."""
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5}
    conf.update(extra_conf or {})
    p = Producer(conf)
    reports = {}
    errors = []

    def on_delivery(i, err, msg):
        if err is not None:
            errors.append((i, err))
        else:
            reports[i] = (msg.partition(), msg.offset())

    deadline = time.monotonic() + timeout_s
    for r in records:
        for _ in range(1000):  # bounded BufferError retry
            try:
                p.produce(topic, key=r["key"], value=r["value"], headers=r["headers"],
                          timestamp=r["timestamp"], on_delivery=functools.partial(on_delivery, r["i"]))
                break
            except BufferError:
                p.poll(0.05)
                assert time.monotonic() < deadline, "producer queue stayed full"
        else:
            raise AssertionError("producer queue stayed full")
        p.poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} records not delivered within {timeout_s}s"
    assert not errors, f"delivery errors: {errors[:5]}"
    assert len(reports) == len(records)
    return reports


def consume_partitions(bootstrap, topic, partitions, expected_total, timeout_s=60.0, start=OFFSET_BEGINNING):
    """assign() every partition from `start` and read until expected_total messages (bounded).
    Returns {partition: [Message, ...]} in consumption order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        got = {p: [] for p in range(partitions)}
        total = 0
        deadline = time.monotonic() + timeout_s
        while total < expected_total and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    raise AssertionError(f"consumer error: {m.error()}")
                got[m.partition()].append(m)
                total += 1
        return got
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# produce/consume round trip per codec


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_byte(broker, codec):
    """For each compression codec, an idempotent acks=all librdkafka producer writes ~3000
    records (keys, null/empty/binary values, headers incl. duplicates and null values, explicit
    timestamps) to a 3-partition topic, and an assign()ed consumer reads back exactly those
    records: same bytes, per-partition produce order, contiguous offsets from 0 that equal the
    offsets in the delivery reports, and the producer's CreateTime timestamps."""
    topic = unique_topic(f"rt-{codec}")
    admin = admin_client(broker.bootstrap)
    create_topic(admin, topic, 3)

    rng = random.Random(f"roundtrip-{codec}")
    base_ts = int(time.time() * 1000) - 600_000  # recent: must not be hit by time retention
    records = make_records(rng, N_RECORDS, base_ts)
    reports = produce_all(broker.bootstrap, topic, records, {"compression.type": codec})

    per_partition = {p: sorted((off, i) for i, (pp, off) in reports.items() if pp == p)
                     for p in range(3)}
    assert sum(len(v) for v in per_partition.values()) == N_RECORDS
    for p, entries in per_partition.items():
        # a fresh topic written by one idempotent producer has no gaps
        assert [off for off, _ in entries] == list(range(len(entries))), f"partition {p} offsets"
        # idempotence keeps produce order within a partition
        idx = [i for _, i in entries]
        assert idx == sorted(idx), f"partition {p} out of produce order"
    assert sum(1 for v in per_partition.values() if v) >= 2, "keyed records should spread"

    got = consume_partitions(broker.bootstrap, topic, 3, N_RECORDS)
    assert sum(len(v) for v in got.values()) == N_RECORDS
    for p in range(3):
        msgs = got[p]
        assert [m.offset() for m in msgs] == [off for off, _ in per_partition[p]]
        for m, (off, i) in zip(msgs, per_partition[p]):
            r = records[i]
            assert m.topic() == topic
            assert m.key() == r["key"], f"key of record {i} at {p}/{off}"
            assert m.value() == r["value"], f"value of record {i} at {p}/{off}"
            expected_headers = r["headers"] or None
            assert m.headers() == expected_headers, f"headers of record {i} at {p}/{off}"
            assert m.timestamp() == (TIMESTAMP_CREATE_TIME, r["timestamp"])

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
    try:
        for p in range(3):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert (lo, hi) == (0, len(per_partition[p]))
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# auto-create on/off


@pytest.fixture
def broker_autocreate_on(tmp_path):
    """(broker, expected partitions of an auto-created topic)"""
    ext = os.environ.get("RUNNEL_TEST_BOOTSTRAP")
    if ext:
        if os.environ.get("RUNNEL_TEST_EXTERNAL_AUTOCREATE", "false") != "true":
            pytest.skip("external broker has auto-create off")
        yield External(ext), int(os.environ.get("RUNNEL_TEST_EXTERNAL_NUM_PARTITIONS", "1"))
        return
    b = Broker(tmp_path / "auto", settings={"auto.create.topics.enable": "true",
                                            "num.partitions": "3"}).start()
    yield b, 3
    b.kill9()


def test_produce_unknown_topic_autocreate_off(broker_autocreate_off):
    """With auto.create.topics.enable=false, producing to a topic that does not exist fails
    with UNKNOWN_TOPIC_OR_PART (Kafka error 3) in the delivery report, and the topic is not
    created as a side effect of the producer's metadata requests."""
    b = broker_autocreate_off
    topic = unique_topic("missing")
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                  "topic.metadata.propagation.max.ms": 2000, "message.timeout.ms": 10000})
    errors = []
    p.produce(topic, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, errors[0]

    md = admin_client(b.bootstrap).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    assert t is not None and t.error is not None
    assert t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_produce_autocreates_topic(broker_autocreate_on):
    """With auto.create.topics.enable=true (runnel's default, like Kafka), producing to a new
    topic succeeds: the producer's metadata request creates it with num.partitions partitions,
    and the record can be read back."""
    b, expected_partitions = broker_autocreate_on
    topic = unique_topic("auto")
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                  "message.timeout.ms": 30000})
    reports = []
    p.produce(topic, key=b"k", value=b"hello", on_delivery=lambda err, msg: reports.append(
        (err, msg.partition(), msg.offset())))
    assert p.flush(40) == 0
    assert len(reports) == 1
    err, partition, offset = reports[0]
    assert err is None, err
    assert offset == 0

    admin = admin_client(b.bootstrap)
    t = wait_for_topic(admin, topic, expected_partitions)
    assert len(t.partitions) == expected_partitions
    got = consume_partitions(b.bootstrap, topic, expected_partitions, 1)
    assert [(m.key(), m.value()) for m in got[partition]] == [(b"k", b"hello")]


# ---------------------------------------------------------------------------------------------
# admin: metadata, delete, create partitions


def test_list_topics_metadata(broker):
    """Metadata (list_topics) names the broker the client bootstrapped from, lists a created
    topic with its partitions (each with a leader that is a listed broker, replicas and ISR
    containing it), returns it among all topics, reports UNKNOWN_TOPIC_OR_PART for a missing
    topic, and creating an existing topic fails with TOPIC_ALREADY_EXISTS (36)."""
    admin = admin_client(broker.bootstrap)
    topic = unique_topic("md")
    create_topic(admin, topic, 3)

    md = admin.list_topics(topic, timeout=10)
    host, port = broker.bootstrap.rsplit(":", 1)
    assert any(bm.host == host and bm.port == int(port) for bm in md.brokers.values()), md.brokers
    t = md.topics[topic]
    assert t.error is None
    assert sorted(t.partitions) == [0, 1, 2]
    for pid, pm in t.partitions.items():
        assert pm.id == pid
        assert pm.error is None
        assert pm.leader in md.brokers
        assert pm.leader in pm.replicas
        assert pm.leader in pm.isrs

    all_md = admin.list_topics(timeout=10)
    assert topic in all_md.topics
    assert len(all_md.topics[topic].partitions) == 3

    missing = unique_topic("md-missing")
    mt = admin.list_topics(missing, timeout=10).topics.get(missing)
    assert mt is not None and mt.error is not None
    assert mt.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    fs = admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=20)
    with pytest.raises(KafkaException) as ei:
        fs[topic].result(timeout=30)
    assert kafka_error_code(ei.value) == KafkaError.TOPIC_ALREADY_EXISTS


def test_delete_topics(broker):
    """DeleteTopics removes a topic with data: it disappears from metadata (bounded wait), a
    topic re-created under the same name starts empty at offset 0, and deleting a topic that
    does not exist fails with UNKNOWN_TOPIC_OR_PART."""
    admin = admin_client(broker.bootstrap)
    topic = unique_topic("del")
    create_topic(admin, topic, 2)
    base_ts = int(time.time() * 1000) - 60_000
    records = make_records(random.Random("del"), 50, base_ts)
    produce_all(broker.bootstrap, topic, records)

    admin.delete_topics([topic], operation_timeout=20)[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=5).topics.get(topic)
        if t is not None and t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"{topic} still in metadata after delete")

    # Re-create under the same name; Kafka may briefly refuse while deletion completes.
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=20)[topic].result(timeout=30)
            break
        except KafkaException as e:
            if time.monotonic() > deadline or kafka_error_code(e) != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            time.sleep(0.5)
    wait_for_topic(admin, topic, 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        c.close()

    missing = unique_topic("del-missing")
    with pytest.raises(KafkaException) as ei:
        admin.delete_topics([missing], operation_timeout=20)[missing].result(timeout=30)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(broker):
    """CreatePartitions grows a topic from 3 to 5 partitions: metadata shows 5, a record sent
    explicitly to the new partition 4 is stored at offset 0 and read back, and existing data is
    untouched. Shrinking or keeping the count fails with INVALID_PARTITIONS (37); growing a
    missing topic fails with UNKNOWN_TOPIC_OR_PART."""
    admin = admin_client(broker.bootstrap)
    topic = unique_topic("cp")
    create_topic(admin, topic, 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True})
    reports = []
    cb = lambda err, msg: reports.append((err, msg.partition(), msg.offset()))  # noqa: E731
    p.produce(topic, partition=2, value=b"before", on_delivery=cb)
    assert p.flush(30) == 0

    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=20)[topic].result(timeout=30)
    wait_for_topic(admin, topic, 5)

    # The producer refreshes metadata on its own; an explicit partition it does not know yet
    # is held until it does (bounded by message.timeout.ms).
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True})
    p2.produce(topic, partition=4, value=b"after", on_delivery=cb)
    assert p2.flush(30) == 0
    assert reports == [(None, 2, 0), (None, 4, 0)], reports

    got = consume_partitions(broker.bootstrap, topic, 5, 2)
    assert [m.value() for m in got[2]] == [b"before"]
    assert [m.value() for m in got[4]] == [b"after"]
    assert all(not got[i] for i in (0, 1, 3))

    for bad in (5, 2):
        with pytest.raises(KafkaException) as ei:
            admin.create_partitions([NewPartitions(topic, bad)], operation_timeout=20)[topic].result(timeout=30)
        assert kafka_error_code(ei.value) == KafkaError.INVALID_PARTITIONS, bad

    missing = unique_topic("cp-missing")
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions(missing, 3)], operation_timeout=20)[missing].result(timeout=30)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART
