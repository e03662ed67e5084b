"""Log lifecycle: segment rolling, size and time retention, ListOffsets by timestamp,
DeleteRecords.

By default each test starts its own runnel with log.retention.check.interval.ms=500. With
RUNNEL_TEST_BOOTSTRAP set, the client-level parts run against that broker instead (the peer
Kafka must then be started with EXTRA_BROKER_PROPS=log.retention.check.interval.ms=500, and
file.delete.delay.ms=1000 if RUNNEL_TEST_EXTERNAL_DATA_DIR is given so the on-disk checks can
run). Kafka 4 refuses segment.bytes below 1 MiB, so against an external broker the segment
size is 1 MiB instead of 16 KiB.
"""

import os
import pathlib
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, Consumer,
                             KafkaError, KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import OffsetSpec

from conftest import Broker, External, admin_client, create_topic, unique_topic

RECORD_BYTES = 1000


@pytest.fixture
def lifecycle_broker(tmp_path):
    """(broker, data_dir or None, segment.bytes to use)"""
    ext = os.environ.get("RUNNEL_TEST_BOOTSTRAP")
    if ext:
        dd = os.environ.get("RUNNEL_TEST_EXTERNAL_DATA_DIR")
        yield External(ext), (pathlib.Path(dd) if dd else None), 1048576
        return
    b = Broker(tmp_path / "life", settings={"log.retention.check.interval.ms": "500"}).start()
    yield b, b.data_dir, 16384
    b.kill9()


# ---------------------------------------------------------------------------------------------
# helpers


def produce(bootstrap, topic, items, partition=0, chunk=None, batch_bytes=None, timeout_s=60.0):
    """items: [(value, timestamp or None)]. Produces uncompressed, waits for every ack and
    returns the offsets in order. `chunk` flushes every `chunk` records (separate batches);
    `batch_bytes` caps librdkafka's batch.size so that several batches fit in one segment."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "compression.type": "none", "linger.ms": 5}
    if batch_bytes:
        conf["batch.size"] = batch_bytes
    p = Producer(conf)
    offsets = [None] * len(items)
    errors = []

    def cb(idx, err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets[idx] = msg.offset()

    deadline = time.monotonic() + timeout_s
    for idx, (value, ts) in enumerate(items):
        kwargs = {"timestamp": ts} if ts is not None else {}
        for _ in range(1000):
            try:
                p.produce(topic, value=value, partition=partition,
                          on_delivery=lambda err, msg, idx=idx: cb(idx, err, msg), **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if chunk and (idx + 1) % chunk == 0:
            assert p.flush(max(1.0, deadline - time.monotonic())) == 0
    assert p.flush(max(1.0, deadline - time.monotonic())) == 0
    assert not errors, errors[:3]
    return offsets


def watermarks(bootstrap, topic, partition=0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def consume_from(bootstrap, topic, partition, start, until_offset, timeout_s=60.0):
    """assign() at `start` and read until the message at until_offset-1 (bounded)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out = []
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (not out or out[-1].offset() < until_offset - 1):
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append(m)
        return out
    finally:
        c.close()


def topic_log_files(data_dir, topic):
    """The .log segment files of `topic` (by path), or every .log file when no path names the
    topic (a broker that lays out directories by topic id; these tests' brokers hold one topic)."""
    files = [f for f in data_dir.glob("**/*.log") if f.is_file()]
    mine = [f for f in files if topic in str(f.relative_to(data_dir))]
    return mine or files


def value_for(i):
    head = b"%08d:" % i
    return head + b"x" * (RECORD_BYTES - len(head))


def wait_for(predicate, timeout_s, interval_s=0.25):
    """Poll predicate() until it returns a truthy value or timeout_s passes; returns the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = predicate()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval_s)


# ---------------------------------------------------------------------------------------------
# retention


def test_size_retention_deletes_old_segments(lifecycle_broker):
    """A topic with a small segment.bytes rolls many segments; with retention.bytes = 3
    segments the broker's retention check (every 500 ms) deletes the oldest whole segments:
    the log start offset advances above 0 while the end offset stays, the retained size
    settles within retention.bytes plus two segments, the old segment files are gone from
    disk, and a consumer starting from earliest reads from the new start offset contiguously
    to the end."""
    b, data_dir, seg = lifecycle_broker
    topic = unique_topic("ret-bytes")
    retention = 3 * seg
    admin = admin_client(b.bootstrap)
    create_topic(admin, topic, 1, {"internal.segment.bytes": str(seg), "retention.bytes": str(retention)})
    n = 8 * seg // RECORD_BYTES + 50
    offsets = produce(b.bootstrap, topic, [(value_for(i), None) for i in range(n)], chunk=50,
                      batch_bytes=seg // 4)
    assert offsets == list(range(n))

    def settled():
        lo, hi = watermarks(b.bootstrap, topic)
        return (lo, hi) if lo > 0 and (hi - lo) * RECORD_BYTES <= retention + 2 * seg else None

    got = wait_for(settled, 30)
    lo, hi = watermarks(b.bootstrap, topic)
    assert got, f"retention did not trim: watermarks ({lo}, {hi}), retention.bytes={retention}"
    assert hi == n
    assert (hi - lo) * RECORD_BYTES >= retention - 2 * seg, "retention deleted too much"

    if data_dir is not None:
        def files_trimmed():
            files = topic_log_files(data_dir, topic)
            return sum(f.stat().st_size for f in files) <= retention + 3 * seg
        assert wait_for(files_trimmed, 20), [
            (f.name, f.stat().st_size) for f in topic_log_files(data_dir, topic)]
        total_written = n * RECORD_BYTES
        assert len(topic_log_files(data_dir, topic)) < total_written // seg

    msgs = consume_from(b.bootstrap, topic, 0, OFFSET_BEGINNING, hi)
    lo_now, _ = watermarks(b.bootstrap, topic)
    assert msgs, "nothing readable from earliest"
    first = msgs[0].offset()
    assert lo <= first <= lo_now
    assert [m.offset() for m in msgs] == list(range(first, hi))
    assert all(m.value() == value_for(m.offset()) for m in msgs)


def test_time_retention_deletes_expired_segments(lifecycle_broker):
    """With retention.ms=60000, segments whose records all carry timestamps from 10 minutes
    ago are deleted by the retention check: the log start offset advances above 0, records
    produced afterwards with current timestamps are kept and readable, and a consumer from
    earliest starts at the log start offset."""
    b, data_dir, seg = lifecycle_broker
    topic = unique_topic("ret-ms")
    admin = admin_client(b.bootstrap)
    create_topic(admin, topic, 1, {"internal.segment.bytes": str(seg), "retention.ms": "60000"})
    old_ts = int(time.time() * 1000) - 600_000
    n_old = 4 * seg // RECORD_BYTES + 20
    produce(b.bootstrap, topic, [(value_for(i), old_ts + i) for i in range(n_old)], chunk=50,
            batch_bytes=seg // 4)

    def trimmed():
        return watermarks(b.bootstrap, topic)[0] > 0

    assert wait_for(trimmed, 30), f"time retention did not trim: {watermarks(b.bootstrap, topic)}"

    fresh = [(value_for(n_old + k), None) for k in range(30)]
    offsets = produce(b.bootstrap, topic, fresh)
    assert offsets == list(range(n_old, n_old + 30))
    lo, hi = watermarks(b.bootstrap, topic)
    assert 0 < lo <= n_old and hi == n_old + 30

    msgs = consume_from(b.bootstrap, topic, 0, OFFSET_BEGINNING, hi)
    assert msgs and msgs[0].offset() >= lo
    assert [m.offset() for m in msgs] == list(range(msgs[0].offset(), hi))
    assert all(m.value() == value_for(m.offset()) for m in msgs)
    assert [m.value() for m in msgs[-30:]] == [v for v, _ in fresh]


# ---------------------------------------------------------------------------------------------
# ListOffsets by timestamp


def expected_for_timestamp(timestamps, target):
    for off, ts in enumerate(timestamps):
        if ts >= target:
            return off, ts
    return -1, -1


def test_list_offsets_by_timestamp(lifecycle_broker):
    """ListOffsets with a timestamp returns the first offset (in offset order) whose record
    timestamp is >= T, with that record's timestamp, or offset -1 when no record is that late;
    this holds across batches and with one out-of-order timestamp in the middle.
    OffsetSpec.max_timestamp returns the offset and timestamp of the record with the largest
    timestamp; earliest/latest return the log start and end. Checked through AdminClient
    list_offsets and Consumer.offsets_for_times."""
    b, _, seg = lifecycle_broker
    topic = unique_topic("lo-ts")
    admin = admin_client(b.bootstrap)
    create_topic(admin, topic, 1, {"internal.segment.bytes": str(seg)})
    base = int(time.time() * 1000) - 300_000
    n = 120
    timestamps = [base + 10 * i for i in range(n)]
    timestamps[50] = base + 100_000  # out of order: later than everything else
    # ~8 records per produce batch, and segments of 16 KiB hold ~16 of these 1 KB records
    offsets = produce(b.bootstrap, topic, [(value_for(i), timestamps[i]) for i in range(n)], chunk=8)
    assert offsets == list(range(n))

    targets = [base - 1000, base, base + 5, base + 10 * 37, base + 10 * 37 + 1, base + 10 * 49 + 3,
               base + 10 * 51, base + 10 * 80 + 9, base + 10 * (n - 1), base + 10 * (n - 1) + 1,
               base + 100_000, base + 100_001]
    tp = TopicPartition(topic, 0)
    for target in targets:
        want_off, want_ts = expected_for_timestamp(timestamps, target)
        res = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)}, request_timeout=20)
        info = res[tp].result(timeout=30)
        assert (info.offset, info.timestamp) == (want_off, want_ts), f"T=base+{target - base}"

    res = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=20)
    info = res[tp].result(timeout=30)
    assert (info.offset, info.timestamp) == (50, base + 100_000)
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=30).offset == 0
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(timeout=30).offset == n

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("g")})
    try:
        for target in targets:
            want_off, _ = expected_for_timestamp(timestamps, target)
            [r] = c.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert r.error is None
            assert r.offset == want_off, f"offsets_for_times T=base+{target - base}"
    finally:
        c.close()

    # consuming from a looked-up offset yields the record with the expected timestamp
    msgs = consume_from(b.bootstrap, topic, 0, 37, 38)
    assert msgs[0].offset() == 37
    assert msgs[0].timestamp() == (TIMESTAMP_CREATE_TIME, timestamps[37])


# ---------------------------------------------------------------------------------------------
# DeleteRecords


def test_delete_records_moves_log_start(lifecycle_broker):
    """DeleteRecords(p0, 40) returns low watermark 40, ListOffsets earliest and the low
    watermark then say 40, the other partition is untouched, and a consumer from earliest
    starts at 40. Deleting below the current start keeps it; OFFSET_END (-1) deletes up to the
    high watermark; an offset past the end fails with OFFSET_OUT_OF_RANGE (1). New records
    still get offsets after the old end."""
    b, _, _ = lifecycle_broker
    topic = unique_topic("delrec")
    admin = admin_client(b.bootstrap)
    create_topic(admin, topic, 2)
    for part in (0, 1):
        offs = produce(b.bootstrap, topic, [(value_for(i), None) for i in range(100)], partition=part,
                       chunk=10)
        assert offs == list(range(100))

    tp0 = TopicPartition(topic, 0, 40)
    res = admin.delete_records([tp0], request_timeout=20)
    assert list(res.values())[0].result(timeout=30).low_watermark == 40
    assert watermarks(b.bootstrap, topic, 0) == (40, 100)
    assert watermarks(b.bootstrap, topic, 1) == (0, 100)
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert list(earliest.values())[0].result(timeout=30).offset == 40

    msgs = consume_from(b.bootstrap, topic, 0, OFFSET_BEGINNING, 100)
    assert [m.offset() for m in msgs] == list(range(40, 100))
    assert all(m.value() == value_for(m.offset()) for m in msgs)

    # below the current start: no change
    res = admin.delete_records([TopicPartition(topic, 0, 10)], request_timeout=20)
    assert list(res.values())[0].result(timeout=30).low_watermark == 40

    # past the end
    res = admin.delete_records([TopicPartition(topic, 0, 101)], request_timeout=20)
    with pytest.raises(KafkaException) as ei:
        list(res.values())[0].result(timeout=30)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    # OFFSET_END: everything
    res = admin.delete_records([TopicPartition(topic, 1, OFFSET_END)], request_timeout=20)
    assert list(res.values())[0].result(timeout=30).low_watermark == 100
    assert watermarks(b.bootstrap, topic, 1) == (100, 100)

    offs = produce(b.bootstrap, topic, [(value_for(100), None)], partition=1)
    assert offs == [100]
    msgs = consume_from(b.bootstrap, topic, 1, OFFSET_BEGINNING, 101)
    assert [(m.offset(), m.value()) for m in msgs] == [(100, value_for(100))]
