"""Log compaction (cleanup.policy=compact), seen through librdkafka.

Each test starts its own runnel whose cleaner runs every 200 ms. A compacted topic keeps
the latest value of every key at the offset it was written to, refuses keyless records,
removes tombstones once delete.retention.ms has passed, and reads the same after a
restart. `__consumer_offsets` is compacted too, so committing the same offset over and over
does not grow what a restarted coordinator replays.
"""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from conftest import Broker, create_topic, unique_topic

CLEANER = {"log.cleaner.backoff.ms": "200"}
KEYS = 20
ROUNDS = 40


@pytest.fixture
def compacting_broker(tmp_path):
    b = Broker(tmp_path / "compact", settings=CLEANER).start()
    yield b
    b.kill9()


def produce(bootstrap, topic, pairs):
    """Writes (key, value) pairs in order, acks=all; returns the offset of each write."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    offsets = [None] * len(pairs)
    errors = []

    def done(i):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                offsets[i] = msg.offset()

        return cb

    for i, (k, v) in enumerate(pairs):
        p.produce(topic, key=k, value=v, on_delivery=done(i))
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return offsets


def read_all(bootstrap, topic, partition=0, timeout_s=30):
    """Every record of one partition from the log start to the high watermark: [(offset, key, value)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, low)])
        out = []
        deadline = time.monotonic() + timeout_s
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append((m.offset(), m.key(), m.value()))
            # A compacted log may end with removed records: stop at the high watermark.
            pos = c.position([TopicPartition(topic, partition)])[0].offset
            if pos >= high:
                break
        return out
    finally:
        c.close()


def wait_compacted(bootstrap, topic, max_records, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while True:
        got = read_all(bootstrap, topic)
        if len(got) <= max_records or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_latest_value_per_key_survives_at_its_offset(compacting_broker):
    b = compacting_broker
    topic = unique_topic("compact")
    create_topic(b.bootstrap, topic, 1, {"cleanup.policy": "compact", "internal.segment.bytes": "2048",
                                         "min.cleanable.dirty.ratio": "0.01"})
    pairs, offsets = [], []
    for r in range(ROUNDS):
        batch = [(f"k{k}".encode(), f"v{r}-{k}".encode()) for k in range(KEYS)]
        offsets += produce(b.bootstrap, topic, batch)
        pairs += batch
    latest = {}
    for (k, v), o in zip(pairs, offsets):
        latest[k] = (o, v)
    # Everything but the active segment compacts to one record per key.
    got = wait_compacted(b.bootstrap, topic, max_records=len(pairs) // 4)
    assert len(got) < len(pairs) // 4, f"compaction did not run: {len(got)} of {len(pairs)} records left"
    offs = [o for o, _, _ in got]
    assert offs == sorted(set(offs)), "offsets ascend, none repeated"
    seen = {}
    for o, k, v in got:
        seen[k] = (o, v)
    assert seen == latest, "each key's last write is there, at the offset it was acknowledged with"
    b.restart()
    assert read_all(b.bootstrap, topic) == got, "the compacted log reads the same after a restart"


def test_keyless_records_are_refused(compacting_broker):
    b = compacting_broker
    topic = unique_topic("compact")
    create_topic(b.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "retries": 0})
    errs = []
    p.produce(topic, value=b"no key", on_delivery=lambda err, msg: errs.append(err))
    p.flush(20)
    assert len(errs) == 1 and errs[0] is not None
    assert errs[0].code() == KafkaError.INVALID_RECORD, errs[0]
    # Keyed records are fine.
    produce(b.bootstrap, topic, [(b"k", b"v")])


def test_tombstones_go_after_delete_retention(compacting_broker):
    b = compacting_broker
    topic = unique_topic("compact")
    create_topic(b.bootstrap, topic, 1, {"cleanup.policy": "compact", "internal.segment.bytes": "2048",
                                         "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "2000"})
    produce(b.bootstrap, topic, [(b"gone", b"x" * 50)] * 10 + [(b"keep", b"y" * 50)] * 10)
    produce(b.bootstrap, topic, [(b"gone", None)])
    # Filler pushes the tombstone out of the active segment; later filler gives the cleaner
    # new dirty data once the tombstone is old enough.
    for i in range(6):
        produce(b.bootstrap, topic, [(f"f{j}".encode(), b"z" * 50) for j in range(20)])
        time.sleep(0.5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        keys = [k for _, k, _ in read_all(b.bootstrap, topic)]
        if b"gone" not in keys:
            break
        produce(b.bootstrap, topic, [(f"f{j}".encode(), b"z" * 50) for j in range(20)])
        time.sleep(0.5)
    got = read_all(b.bootstrap, topic)
    assert b"gone" not in [k for _, k, _ in got], "tombstone and the value it deleted are gone"
    assert [v for _, k, v in got if k == b"keep"] == [b"y" * 50]


def test_consumer_offsets_topic_is_compacted(tmp_path):
    b = Broker(tmp_path / "offsets", settings={**CLEANER, "offsets.topic.segment.bytes": "2048",
                                               "offsets.topic.num.partitions": "1"}).start()
    try:
        topic = unique_topic("src")
        create_topic(b.bootstrap, topic, 1)
        produce(b.bootstrap, topic, [(b"k", b"v")] * 10)
        group = unique_topic("g")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        commits = 300
        for i in range(commits):
            c.commit(offsets=[TopicPartition(topic, 0, i % 10 + 1)], asynchronous=False)
        c.close()
        got = wait_compacted(b.bootstrap, "__consumer_offsets", max_records=commits // 3)
        assert len(got) < commits // 3, f"__consumer_offsets not compacted: {len(got)} records"
        last = (commits - 1) % 10 + 1
        b.restart()
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            committed = c.committed([TopicPartition(topic, 0)], timeout=10)
            assert committed[0].offset == last
        finally:
            c.close()
    finally:
        b.kill9()
