"""The page-cache tail (`log.cache.tail.bytes`): a broker leaves only the newest synced bytes
of its log in the OS page cache and drops older synced pages, and consumers still read every
record, from the disk where the cache no longer has it.

Residency is read with mincore(2) on a mapping of each segment file that is never touched,
so measuring does not bring pages in. With the tail off (0, as Kafka leaves it all to the
kernel) the same writes stay cached: that is what shows the measure can tell the two apart.
Reads of pages no longer cached, and reads behind the tail, run off the runtime's threads,
and a Raft leader reads a new replica's entries into the cache before it sends them.
"""

import ctypes
import os
import pathlib
import time
import urllib.request

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import Broker, cluster_port, create_topic, free_port, unique_topic, wait_for, wait_for_topic

RECORDS = 24_000
VALUE_BYTES = 1000
TAIL = 1 << 20
# Segments roll about every 5 MB, so a partition's writes span several files, and each
# rolled one ends inside a folio.
SEGMENT_BYTES = 5 << 20
# The largest page-cache folio (a PMD). The kernel drops only whole folios: the one across
# where the tail begins stays until the tail has moved past it.
FOLIO_MAX = 2 << 20

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes(path):
    """Bytes of `path` in the page cache, in whole pages."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as f:
        addr = _libc.mmap(None, size, 1, 1, f.fileno(), 0)  # PROT_READ, MAP_SHARED
        assert addr not in (None, ctypes.c_void_p(-1).value), f"mmap: errno {ctypes.get_errno()}"
    try:
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        assert _libc.mincore(addr, size, vec) == 0, f"mincore: errno {ctypes.get_errno()}"
        return sum(b & 1 for b in vec) * PAGE
    finally:
        _libc.munmap(addr, size)


def segments_of(broker, topic):
    return sorted(pathlib.Path(broker.data_dir).glob(f"**/{topic}-0/*.log"))


def value(i):
    return (b"%08d" % i) * (VALUE_BYTES // 8)


def produce_and_measure(tmp_path, name, tail_bytes, settle_below=None):
    """Produces RECORDS records to a new one-partition topic on a broker with the given tail,
    then returns (bytes of its segments, bytes of them cached, the broker, the topic).

    Every record is acknowledged, so every round that wrote one has synced; the broker drops
    what those rounds pushed out of the tail right after, with nothing else to sync. So the
    measure is taken again, for up to 10 s, while it is above `settle_below`."""
    broker = Broker(tmp_path / name, settings={"log.cache.tail.bytes": str(tail_bytes)}).start()
    topic = unique_topic("tail")
    create_topic(broker.bootstrap, topic, partitions=1, config={"segment.bytes": str(SEGMENT_BYTES)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value(i))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "every record acknowledged"
    segments = segments_of(broker, topic)
    assert segments, f"no segment of {topic} under {broker.data_dir}"
    total = sum(p.stat().st_size for p in segments)
    deadline = time.monotonic() + 10
    cached = sum(resident_bytes(p) for p in segments)
    while settle_below is not None and cached > settle_below and time.monotonic() < deadline:
        time.sleep(0.1)
        cached = sum(resident_bytes(p) for p in segments)
    return total, cached, broker, topic


def read_all(bootstrap, topic, records=RECORDS):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    try:
        for _ in range(600):
            if len(got) >= records:
                break
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    return got


def test_a_small_tail_drops_older_synced_pages_and_every_record_reads_back(tmp_path):
    bound = TAIL + FOLIO_MAX + PAGE
    total, cached, broker, topic = produce_and_measure(tmp_path, "tail", TAIL, settle_below=bound)
    try:
        assert total >= RECORDS * VALUE_BYTES
        assert len(segments_of(broker, topic)) >= 4, "the writes span several segments"
        # The newest 1 MiB, the folio across where it begins, and the page being written;
        # nothing of the older segments, of the 24 MB written. (A page asked to go while a
        # round still synced it would stay: rounds hand the tail their pages once synced.)
        assert cached <= bound, f"{cached} of {total} bytes cached with a {TAIL}-byte tail"
        got = read_all(broker.bootstrap, topic)
        assert len(got) == RECORDS
        assert all(v == value(i) for i, v in enumerate(got)), "records read back as written, in order"
    finally:
        broker.kill9()


def test_with_the_tail_off_the_page_cache_keeps_what_was_written(tmp_path):
    total, cached, broker, topic = produce_and_measure(tmp_path, "notail", 0)
    broker.kill9()
    assert cached >= total * 3 // 4, f"only {cached} of {total} bytes cached with the tail off"


def disk_reads(admin_port):
    """runnel_log_disk_reads by reason, from the broker's /metrics."""
    url = f"http://127.0.0.1:{admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "runnel_log_disk_reads_total":
                out[s.labels["reason"]] = s.value
    return out


def drop_from_page_cache(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def test_reads_that_might_wait_for_the_disk_run_off_the_runtime_threads(tmp_path):
    """A fetch whose pages have left the page cache, or that starts behind the log's tail
    (its first batch found by reading the file), is read on the blocking pool
    (`num.io.threads` at a time; docs/design.md), and the consumer gets every record as
    written; a ListOffsets by time is looked up there too. The pages are dropped by the test itself (the broker's own tail is off), and
    mincore shows that they were."""
    admin = free_port()
    settings = {"log.cache.tail.bytes": "0", "admin.listeners": f"http://127.0.0.1:{admin}", "num.io.threads": "2"}
    broker = Broker(tmp_path / "cold", settings=settings).start()
    try:
        topic = unique_topic("cold")
        create_topic(broker.bootstrap, topic, partitions=1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})

        def produce(first, n):
            # One batch each: flushed one by one.
            for i in range(first, first + n):
                producer.produce(topic, value(i))
                assert producer.flush(30) == 0

        def consume(n):
            got = read_all(broker.bootstrap, topic, n)
            assert got == [value(i) for i in range(n)], "records read back as written, in order"

        # A few batches, all among those the segment keeps placed: at the tail, but dropped
        # from the page cache.
        produce(0, 10)
        segments = segments_of(broker, topic)
        before = disk_reads(admin)
        drop_from_page_cache(segments)
        assert sum(resident_bytes(p) for p in segments) == 0, "the test dropped the pages"
        consume(10)
        after = disk_reads(admin)
        assert after.get("Uncached", 0) > before.get("Uncached", 0), after
        # Far more batches than the segment keeps placed: a read from the start is behind.
        produce(10, 90)
        before = after
        consume(100)
        after = disk_reads(admin)
        assert after.get("Behind", 0) > before.get("Behind", 0), after
        # ListOffsets by time reads batch headers from the file: there too.
        before = after
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
        try:
            found = consumer.offsets_for_times([TopicPartition(topic, 0, 0)], 10)
        finally:
            consumer.close()
        assert (found[0].error, found[0].offset) == (None, 0), found
        after = disk_reads(admin)
        assert after.get("ByTime", 0) > before.get("ByTime", 0), after
    finally:
        broker.kill9()


def test_a_new_replica_is_sent_entries_read_into_the_cache_off_the_driver(tmp_path):
    """An RF 2 partition holding 80 MB gains a third replica (AlterPartitionReassignments),
    which starts empty and is caught up from the leader's log. The test drops the replicas'
    pages of that log first (the brokers' own tail is off), so the leader's Raft driver does
    not read them where raft-rs asks: raft-rs's asynchronous fetch has them read into the
    page cache on the blocking pool first (`runnel_log_disk_reads_total` with reason
    Replicate, on the leader; docs/design.md). The new replica ends byte-identical to the
    leader, and every record reads back."""
    import kafka_wire as kw
    from confluent_kafka.admin import NewTopic
    from test_cluster import BROKERS, DevCluster
    from test_metrics import ADMIN_OFFSET

    port = cluster_port(BROKERS)
    c = DevCluster(tmp_path, port=port, settings=[f"admin.listeners=http://127.0.0.1:{port + ADMIN_OFFSET}",
                                                  "log.cache.tail.bytes=0"])
    try:
        topic = unique_topic("newreplica")
        a, b, new = 0, 1, 2
        c.admin.create_topics([NewTopic(topic, 1, replica_assignment=[[a, b]])], operation_timeout=30,
                              request_timeout=30)[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, 1)
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
        n = 80_000
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, value(i), partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
        assert producer.flush(60) == 0, "every record acknowledged"
        leader = c.known_leader(topic)
        logs = [sorted((c.data_dir / f"broker-{r}" / f"{topic}-0").glob("*.log")) for r in (a, b)]
        for segments in logs:
            drop_from_page_cache(segments)
            assert sum(resident_bytes(p) for p in segments) < n * VALUE_BYTES // 10, "the test dropped the pages"
        with kw.Conn(f"127.0.0.1:{port + a}", timeout_s=40) as conn:
            r = conn.request(kw.alter_partition_reassignments_v0_request({(topic, 0): [a, b, new]},
                                                                         conn.next_correlation_id()),
                             flexible_response_header=True)
            assert [code for code, _ in kw.decode_alter_partition_reassignments_v0(r).values()] == [0, 0]

        def caught_up():
            d = c.data_dir / f"broker-{new}" / f"{topic}-0"
            got = b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))
            return got and got == c.partition_log_bytes(leader, topic)
        wait_for(caught_up, "the new replica to hold the leader's log", 60, c.diagnostics)
        reads = disk_reads(port + ADMIN_OFFSET + leader)
        assert reads.get("Replicate", 0) > 0, reads
        got = read_all(c.bootstrap, topic, n)
        assert got == [value(i) for i in range(n)], "records read back as written, in order"
    finally:
        c.close()
