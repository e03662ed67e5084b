"""Durability of acknowledged writes across crashes, clean shutdowns and torn log tails.

All tests here control the broker process, so they always run our runnel (`runnel_broker`),
never an external broker. The restarted broker reuses the same data dir and port.
"""

import os
import random
import re
import time
import urllib.request

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

import kafka_wire
from conftest import Broker, admin_client, create_topic, free_port, unique_topic, wait_for_topic

PARTITIONS = 3


# ---------------------------------------------------------------------------------------------
# helpers


def make_producer(bootstrap, **extra):
    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        # long enough that no message times out while the broker restarts (a timeout of an
        # in-flight message would force an epoch bump in librdkafka)
        "message.timeout.ms": 120000,
        "request.timeout.ms": 10000,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "socket.connection.setup.timeout.ms": 5000,
    }
    conf.update(extra)
    return Producer(conf)


class Acks:
    """Collects delivery reports: acked[value] = (partition, offset); failed[value] = error."""

    def __init__(self):
        self.acked = {}
        self.failed = {}

    def callback(self, err, msg):
        if err is None:
            assert msg.value() not in self.acked, f"two delivery reports for {msg.value()!r}"
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.failed[msg.value()] = err


def produce_acked(producer, topic, values, acks, timeout_s=60.0):
    for v in values:
        producer.produce(topic, value=v, key=v[-2:], on_delivery=acks.callback)
        producer.poll(0)
    assert producer.flush(timeout_s) == 0, "not all records delivered"


def read_log(bootstrap, topic, partitions, timeout_s=60.0):
    """Read every partition from the beginning up to its high watermark.
    Returns {partition: {offset: value}}; fails if an offset is delivered twice."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        high = {}
        deadline = time.monotonic() + 30
        for p in range(partitions):
            while True:  # right after a restart Kafka briefly answers NOT_LEADER
                try:
                    high[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        log = {p: {} for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        pending = {p for p in range(partitions) if high[p] > 0}
        while pending and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    raise AssertionError(f"consumer error: {m.error()}")
                p, off = m.partition(), m.offset()
                assert off not in log[p], f"offset {p}/{off} delivered twice"
                log[p][off] = m.value()
                if off + 1 >= high[p]:
                    pending.discard(p)
        assert not pending, f"partitions {pending} not read up to {high} within {timeout_s}s"
        return log, high
    finally:
        c.close()


def assert_acked_present(acks, log):
    """Every acked value sits at its acked offset, exactly once in the whole log, and no value
    appears twice anywhere (idempotent producer: retries must not duplicate)."""
    where = {}
    for p, offsets in log.items():
        for off, v in offsets.items():
            assert v not in where, f"value {v!r} stored twice: {where[v]} and {(p, off)}"
            where[v] = (p, off)
    slots = {}
    for v, (p, off) in acks.acked.items():
        assert (p, off) not in slots, f"{v!r} and {slots[(p, off)]!r} both acked at {p}/{off}"
        slots[(p, off)] = v
        assert log[p].get(off) == v, (
            f"acked {v!r} at {p}/{off}, log holds {log[p].get(off)!r} (value found at {where.get(v)})")


# ---------------------------------------------------------------------------------------------
# tests


def test_acked_writes_survive_kill9(runnel_broker):
    """While an idempotent acks=all producer writes (up to 20000 values or 15 s), the broker is
    killed with SIGKILL at random moments 3 times and restarted on the same data dir and port;
    librdkafka keeps retrying. Afterwards every value that got a successful delivery report is
    in the log exactly once, at the partition and offset the report named; no offset holds two
    values; and the producer still gets acks after the last restart."""
    b = runnel_broker
    topic = unique_topic("kill9")
    create_topic(b.bootstrap, topic, PARTITIONS)

    seed = int(os.environ.get("RUNNEL_TEST_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    kill_at = []
    t = 0.5
    for _ in range(3):
        t += rng.uniform(1.0, 3.5)
        kill_at.append(t)
    print(f"seed={seed} kill_at={kill_at}")

    producer = make_producer(b.bootstrap)
    acks = Acks()
    max_values, max_seconds, burst = 20000, 15.0, 40
    start = time.monotonic()
    acked_before_last_kill = None
    i = 0
    while i < max_values and time.monotonic() - start < max_seconds:
        if kill_at and time.monotonic() - start >= kill_at[0]:
            kill_at.pop(0)
            b.kill9()
            acked_before_last_kill = len(acks.acked)
            b.start()  # waits (bounded) until the port listens again
        for _ in range(burst):
            producer.produce(topic, value=b"v-%08d" % i, key=b"%02d" % (i % 100),
                             on_delivery=acks.callback)
            i += 1
        producer.poll(0)
        time.sleep(0.02)  # pace: ~2000 values/s, so the kills land while requests are in flight
    # If the loop ended before all kills happened (slow machine), do them now.
    for _ in kill_at:
        b.kill9()
        acked_before_last_kill = len(acks.acked)
        b.start()
    remaining = producer.flush(90)
    assert remaining == 0, f"{remaining} records still queued 90 s after the last restart\n{b.log_tail()}"
    # the producer kept working after the last restart
    sentinel = Acks()
    produce_acked(producer, topic, [b"sentinel-%d" % k for k in range(10)], sentinel)
    assert len(sentinel.acked) == 10, f"post-restart produce failed: {sentinel.failed}"
    assert len(acks.acked) > 0
    print(f"produced={i} acked={len(acks.acked)} failed={len(acks.failed)} "
          f"acked_before_last_kill={acked_before_last_kill}")

    log, high = read_log(b.bootstrap, topic, PARTITIONS)
    assert_acked_present(acks, log)
    assert_acked_present(sentinel, log)
    # every value in the log is one we produced
    produced = {b"v-%08d" % k for k in range(i)} | set(sentinel.acked)
    for p, offsets in log.items():
        for off, v in offsets.items():
            assert v in produced, f"unknown value {v!r} at {p}/{off}"


def test_sigterm_shutdown_is_clean_and_loses_nothing(runnel_broker):
    """SIGTERM makes the broker exit with status 0; after a restart every acked record is
    readable at its offset, the high watermarks are unchanged, and new records continue at the
    next offsets."""
    b = runnel_broker
    topic = unique_topic("sigterm")
    create_topic(b.bootstrap, topic, PARTITIONS)
    producer = make_producer(b.bootstrap)
    acks = Acks()
    produce_acked(producer, topic, [b"v-%08d" % k for k in range(5000)], acks)
    assert len(acks.acked) == 5000, acks.failed
    _, high_before = read_log(b.bootstrap, topic, PARTITIONS)
    del producer

    rc = b.stop()
    assert rc == 0, f"runnel exited with {rc} on SIGTERM\n{b.log_tail()}"
    b.start()

    log, high = read_log(b.bootstrap, topic, PARTITIONS)
    assert high == high_before
    assert_acked_present(acks, log)

    after = Acks()
    produce_acked(make_producer(b.bootstrap), topic, [b"w-%04d" % k for k in range(300)], after)
    assert len(after.acked) == 300, after.failed
    for p in range(PARTITIONS):
        offs = sorted(off for pp, off in after.acked.values() if pp == p)
        assert offs == list(range(high[p], high[p] + len(offs))), f"partition {p}: {offs[:5]}..."


def state_terms(data_dir, topic, partitions):
    """The term each partition's raft.state holds on disk (its first field after the version)."""
    return [int((data_dir / f"{topic}-{p}" / "raft.state").read_text().split()[1]) for p in range(partitions)]


def close_files(data_dir, topic, partitions):
    """The inode of each partition's raft.state and checkpoint: a close that writes one
    renames a new file over it."""
    return {(p, name): (data_dir / f"{topic}-{p}" / name).stat().st_ino
            for p in range(partitions) for name in ("raft.state", "checkpoint")}


@pytest.mark.parametrize("scope", ["filesystem", "file"])
def test_a_clean_stop_writes_only_what_changed(tmp_path, scope):
    """A clean stop writes a partition's checkpoint and Raft state only when they would say
    something new (docs/cluster.md, "The Raft log is the Kafka log"): after a restart, with 5 of
    40 partitions written to, the stop replaces the files of those 5 and leaves the other
    35 as they were, and the next start has every partition led with every acknowledged
    record. With either `log.fsync.scope` (one syncfs per step, or an fdatasync per file)."""
    partitions, written = 40, [3, 11, 19, 27, 35]
    b = Broker(tmp_path / "data", settings={"log.fsync.scope": scope}).start()
    try:
        topic = unique_topic("idle-stop")
        create_topic(b.bootstrap, topic, partitions)
        acks = Acks()
        producer = make_producer(b.bootstrap)
        for p in range(partitions):
            producer.produce(topic, value=b"a-%02d" % p, partition=p, on_delivery=acks.callback)
        assert producer.flush(60) == 0 and len(acks.acked) == partitions, acks.failed
        del producer
        assert b.stop() == 0, b.log_tail()
        terms = state_terms(b.data_dir, topic, partitions)

        b.start()
        wait_for_topic(admin_client(b.bootstrap), topic, partitions)
        # Every partition's election after the start is on disk before the stop (a state a
        # round is still putting in place is rightly written by the close).
        deadline = time.monotonic() + 30
        while any(n <= t for n, t in zip(state_terms(b.data_dir, topic, partitions), terms)):
            assert time.monotonic() < deadline, "elections not on disk within 30 s"
            time.sleep(0.1)
        producer = make_producer(b.bootstrap)
        for p in written:
            producer.produce(topic, value=b"b-%02d" % p, partition=p, on_delivery=acks.callback)
        assert producer.flush(60) == 0 and len(acks.acked) == partitions + len(written), acks.failed
        del producer
        time.sleep(1)
        before = close_files(b.data_dir, topic, partitions)
        assert b.stop() == 0, b.log_tail()
        after = close_files(b.data_dir, topic, partitions)
        replaced = sorted({p for key, ino in after.items() if before[key] != ino for p in [key[0]]})
        assert replaced == written, f"files replaced by the stop: {replaced}"
        closed = re.findall(r"logs closed partitions=(\d+) written=(\d+)", b.log_path.read_text())
        assert closed and closed[-1] == (str(partitions), str(len(written))), closed[-1:]

        b.start()
        wait_for_topic(admin_client(b.bootstrap), topic, partitions)
        log, high = read_log(b.bootstrap, topic, partitions)
        assert high == {p: 2 if p in written else 1 for p in range(partitions)}, high
        assert_acked_present(acks, log)
    finally:
        b.kill9()


def newest_log_file(data_dir, topic):
    files = [f for f in data_dir.glob("**/*.log") if f.is_file()]
    mine = [f for f in files if topic in str(f.relative_to(data_dir))]
    candidates = mine or files
    assert candidates, f"no .log files under {data_dir}"
    return max(candidates, key=lambda f: (f.stat().st_mtime_ns, f.name))


def torn_tail_cycle(b, topic, acks, garbage):
    """kill -9, append `garbage` to the newest .log, restart, check acked data and new produces.
    (kill -9 rather than SIGTERM: a torn tail is what a crash leaves, and a broker may rightly
    skip tail recovery after a clean shutdown.)"""
    _, high_before = read_log(b.bootstrap, topic, 1)
    b.kill9()
    victim = newest_log_file(b.data_dir, topic)
    size = victim.stat().st_size
    with open(victim, "ab") as f:
        f.write(garbage)
        f.flush()
        os.fsync(f.fileno())
    assert victim.stat().st_size == size + len(garbage)

    b.start()
    log, high = read_log(b.bootstrap, topic, 1)
    assert high == high_before, f"high watermark {high} != {high_before} after a torn tail\n{b.log_tail()}"
    assert_acked_present(acks, log)
    assert sorted(log[0]) == list(range(high[0]))

    more = Acks()
    values = [b"after-%d-%04d" % (len(acks.acked), k) for k in range(200)]
    produce_acked(make_producer(b.bootstrap), topic, values, more)
    assert len(more.acked) == len(values), more.failed
    offs = [more.acked[v][1] for v in values]
    assert offs == list(range(high[0], high[0] + len(values))), f"new offsets {offs[:3]}..."
    acks.acked.update(more.acked)
    log, _ = read_log(b.bootstrap, topic, 1)
    assert_acked_present(acks, log)


def test_torn_tail_is_truncated_on_restart(runnel_broker):
    """Bytes appended after the last complete batch of the newest segment, as a crash during a
    write leaves them (broker killed with SIGKILL, then bytes appended), do not stop the
    broker: after a restart it serves, all previously acked records are readable, the log end
    offset is unchanged, and new records get contiguous offsets right after it. Three kinds of
    tail: random garbage, a batch header that promises more bytes than exist, and a
    complete-looking batch with a wrong CRC."""
    b = runnel_broker
    topic = unique_topic("torn")
    create_topic(b.bootstrap, topic, 1)
    acks = Acks()
    produce_acked(make_producer(b.bootstrap), topic, [b"v-%05d" % k for k in range(2000)], acks)
    assert len(acks.acked) == 2000, acks.failed

    rng = random.Random(7)
    # 1) random garbage
    torn_tail_cycle(b, topic, acks, rng.randbytes(137))

    # 2) the start of a plausible batch: next base offset, a length far past EOF, then cut off
    _, high = read_log(b.bootstrap, topic, 1)
    header = (high[0]).to_bytes(8, "big") + (5000).to_bytes(4, "big") + b"\xff\xff\xff\xff\x02"
    torn_tail_cycle(b, topic, acks, header + rng.randbytes(40))

    # 3) a whole batch whose CRC does not match its content
    _, high = read_log(b.bootstrap, topic, 1)
    batch = kafka_wire.record_batch([(b"k", b"never-acked")], base_offset=high[0], crc=0xDEADBEEF)
    torn_tail_cycle(b, topic, acks, batch)
    log, _ = read_log(b.bootstrap, topic, 1)
    assert b"never-acked" not in log[0].values()


def flushes(admin_port):
    """The broker's count of log syncs (`runnel_log_flush_seconds_count`): one per Raft
    round that had something to make durable."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^runnel_log_flush_seconds_count (\S+)$", text, re.M)
    assert m, "no runnel_log_flush_seconds_count"
    return float(m.group(1))


def test_partitions_created_together_share_their_syncs_and_survive_a_crash(tmp_path):
    """A topic's new partitions are claimed, given their first Raft state and elected
    together (docs/cluster.md, "Many partitions"): 200 partitions on one broker cost a few
    sync rounds, where each partition used to have a round of its own (and four more syncs
    besides). Killed with kill -9 right after, the broker starts again with every partition
    led and holding what was acknowledged."""
    admin_port = free_port()
    b = Broker(tmp_path / "data", settings={"admin.listeners": f"http://127.0.0.1:{admin_port}"}).start()
    try:
        topic = unique_topic("together")
        before = flushes(admin_port)
        create_topic(b.bootstrap, topic, 200)
        rounds = flushes(admin_port) - before
        assert rounds < 40, f"{rounds} sync rounds for 200 new partitions"

        producer = make_producer(b.bootstrap)
        acks = Acks()
        for p in range(200):
            producer.produce(topic, value=b"p-%03d" % p, partition=p, on_delivery=acks.callback)
        assert producer.flush(60) == 0 and len(acks.acked) == 200, acks.failed
        del producer
        b.kill9()
        b.start()
        wait_for_topic(admin_client(b.bootstrap), topic, 200)
        log, high = read_log(b.bootstrap, topic, 200)
        assert all(high[p] == 1 for p in range(200)), high
        assert_acked_present(acks, log)
    finally:
        b.kill9()
