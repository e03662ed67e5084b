"""Protocol-edge tests with raw sockets (tests/kafka_wire.py): malformed frames, unsupported
versions and corrupt record batches must be rejected exactly like Apache Kafka 4.3 rejects
them, without storing anything and without harming the process or other connections.

By default these run against a fresh runnel. With RUNNEL_TEST_BOOTSTRAP set they run against
that broker (this is how the expectations were checked against Kafka 4.3.1); the test that
needs auto-create off then relies on the external broker having
auto.create.topics.enable=false (as ../shared/peers/kafka configures it), unless
RUNNEL_TEST_EXTERNAL_AUTOCREATE=true, in which case it is skipped.

Kafka 4.3.1 answers, as observed:
  * ApiVersions with an unsupported version (v99): a v0-format body (error_code int16,
    int32-length array of [api_key, min, max], nothing after it) with error 35
    UNSUPPORTED_VERSION and a list holding only ApiVersions (18, 0..4); the connection stays
    usable.
  * a frame it cannot parse (random bytes, unknown api key, unsupported version of another
    API, garbage body, truncated header, size 0, negative size, size over
    socket.request.max.bytes): the connection is closed without any answer.
  * Produce with a bad batch CRC: 2 CORRUPT_MESSAGE. Magic 3: 2 CORRUPT_MESSAGE ("Invalid
    magic found in record: 3"). Magic 0 or 1 in a v2-framed batch: 87 INVALID_RECORD.
    Record count != lastOffsetDelta + 1 (or != records present): 87 INVALID_RECORD.
  * Produce to a missing topic or a missing partition: 3 UNKNOWN_TOPIC_OR_PARTITION.
Where the brief asked for CORRUPT_MESSAGE and Kafka says INVALID_RECORD, the tests accept both.
"""

import random
import time

import pytest

import kafka_wire as kw
from conftest import create_topic, unique_topic

ANY_BATCH_REJECTION = {kw.CORRUPT_MESSAGE, kw.INVALID_RECORD}
INVALID_TOPIC_EXCEPTION = 17


# ---------------------------------------------------------------------------------------------
# helpers


def assert_serving(broker):
    """The process (if ours) is alive and a new connection gets a normal ApiVersions answer."""
    proc = getattr(broker, "proc", None)
    if proc is not None:
        assert proc.poll() is None, f"runnel exited with {proc.returncode}\n{broker.log_tail()}"
    with kw.Conn(broker.bootstrap) as c:
        v = c.api_versions(3)
    assert v["error_code"] == kw.NONE
    assert kw.API_VERSIONS in v["api_keys"]


def assert_partition_empty(bootstrap, topic, partition=0):
    """Nothing stored: ListOffsets earliest/latest are 0 and a fetch from 0 returns no records."""
    with kw.Conn(bootstrap) as c:
        latest = c.list_offsets_v1(topic, partition, kw.LATEST)
        earliest = c.list_offsets_v1(topic, partition, kw.EARLIEST)
        fetched = c.fetch_v4(topic, partition, 0)
    assert latest["error_code"] == 0 and latest["offset"] == 0, latest
    assert earliest["error_code"] == 0 and earliest["offset"] == 0, earliest
    assert fetched["error_code"] == 0 and fetched["high_watermark"] == 0, fetched
    assert kw.decode_record_batches(fetched["records"]) == []


# ---------------------------------------------------------------------------------------------
# ApiVersions


def test_api_versions_v0_and_v3(broker):
    """ApiVersions v0 (header v1, empty body) and v3 (header v2, client software name/version)
    both succeed with error 0; both list the same APIs; each range has min <= max; ApiVersions
    itself covers v0..v3; the v0 body has nothing after the array, the v3 body parses to its
    end (throttle time and tagged fields); the response header has no tagged fields."""
    with kw.Conn(broker.bootstrap) as c:
        v0 = c.api_versions(0)
        r = c.request(kw.api_versions_request(3, c.next_correlation_id()))
        v3 = kw.decode_api_versions_v3(r)
        assert r.remaining() == 0, "trailing bytes after the ApiVersions v3 body"
    assert v0["error_code"] == 0 and v3["error_code"] == 0
    assert v0["api_keys"] == v3["api_keys"]
    for key, (lo, hi) in v3["api_keys"].items():
        assert 0 <= lo <= hi, (key, lo, hi)
    lo, hi = v3["api_keys"][kw.API_VERSIONS]
    assert lo == 0 and hi >= 3
    for key in (kw.PRODUCE, kw.FETCH, kw.LIST_OFFSETS, kw.METADATA):
        assert key in v3["api_keys"], key


def test_api_versions_unsupported_version_gets_v0_fallback(broker):
    """ApiVersions v99 is answered (same correlation id) with a body in the v0 format:
    error 35 UNSUPPORTED_VERSION and a non-empty api list that contains ApiVersions with a range
    including v3, and nothing after the array (no throttle time, no tagged fields). The
    connection stays usable: a following ApiVersions v3 on it succeeds. This is how
    librdkafka and the Java client discover the highest ApiVersions version to use."""
    with kw.Conn(broker.bootstrap) as c:
        cid = c.next_correlation_id()
        payload = (kw.header_v2(kw.API_VERSIONS, 99, cid) + kw.compact_string("runnel-tests")
                   + kw.compact_string("0.1") + kw.EMPTY_TAGS)
        r = c.request(payload)
        v = kw.decode_api_versions_v0(r)
        assert r.remaining() == 0, f"{r.remaining()} bytes after the v0 body"
        assert v["error_code"] == kw.UNSUPPORTED_VERSION
        assert v["api_keys"], "the fallback answer must list at least ApiVersions"
        assert kw.API_VERSIONS in v["api_keys"]
        lo, hi = v["api_keys"][kw.API_VERSIONS]
        assert lo == 0 and hi >= 3

        again = c.api_versions(3)
        assert again["error_code"] == 0
    assert_serving(broker)


# ---------------------------------------------------------------------------------------------
# garbage frames


def _garbage_frames():
    rng = random.Random(1234)
    body = rng.randbytes(200)
    return {
        # random bytes, with the api key forced to one that does not exist
        "random-bytes": kw.i32(202) + b"\x7f\x3a" + body,
        "unknown-api-key": kw.frame(kw.header_v1(0x7fff, 0, 7) + rng.randbytes(20)),
        "metadata-v99": kw.frame(kw.header_v1(kw.METADATA, 99, 7)),
        "produce-v9-garbage-body": kw.frame(kw.header_v2(kw.PRODUCE, 9, 7) + b"\xff" * 10),
        "truncated-header": kw.i32(3) + b"\x00\x12\x00",
        "zero-size": kw.i32(0),
        "negative-size": kw.i32(-5),
        # one byte over Kafka's default socket.request.max.bytes (104857600)
        "over-max-request-size": kw.i32(104857601),
        "size-int32-max": kw.i32(0x7FFFFFFF),
    }


@pytest.mark.parametrize("name", sorted(_garbage_frames()))
def test_garbage_frame_closes_only_that_connection(broker, name):
    """A frame the broker cannot parse, or whose size prefix is negative, zero or larger than
    socket.request.max.bytes, makes the broker close that connection without answering (it does
    not wait for a body it will never accept). The process stays up, an idle connection opened
    before keeps working, and a new connection is served."""
    data = _garbage_frames()[name]
    with kw.Conn(broker.bootstrap) as bystander:
        assert bystander.api_versions(0)["error_code"] == 0
        with kw.Conn(broker.bootstrap) as c:
            c.send_raw(data)
            assert c.closed_by_peer(timeout_s=10), f"{name}: connection still open after 10 s"
        assert bystander.api_versions(3)["error_code"] == 0
    assert_serving(broker)


def test_garbage_after_valid_request_closes_connection(broker):
    """A valid request followed by garbage on the same connection: the valid request is
    answered, then the connection is closed."""
    with kw.Conn(broker.bootstrap) as c:
        cid = c.next_correlation_id()
        c.send_raw(kw.frame(kw.api_versions_request(0, cid)) + kw.i32(-1))
        r = kw.Reader(c.recv_frame())
        assert r.i32() == cid
        assert kw.decode_api_versions_v0(r)["error_code"] == 0
        assert c.closed_by_peer(timeout_s=10)
    assert_serving(broker)


# ---------------------------------------------------------------------------------------------
# corrupt record batches


def test_produce_with_bad_crc_is_rejected_and_not_stored(broker):
    """A Produce v9 whose RecordBatch CRC32C does not match gets CORRUPT_MESSAGE (2) with base
    offset -1, nothing becomes visible (ListOffsets earliest/latest 0, Fetch returns no
    records), and a following valid batch gets offset 0 and reads back byte for byte."""
    topic = unique_topic("badcrc")
    create_topic(broker.bootstrap, topic)
    good = kw.record_batch([(b"k", b"v-bad")])
    honest_crc = kw.crc32c(good[21:])
    assert kw.Reader(good[17:21]).u32() == honest_crc
    bad = kw.record_batch([(b"k", b"v-bad")], crc=honest_crc ^ 0x1)
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 0, bad)
    assert resp["error_code"] == kw.CORRUPT_MESSAGE, resp
    assert resp["base_offset"] == -1
    assert_partition_empty(broker.bootstrap, topic)

    # flip one payload byte instead, keeping the original CRC
    tampered = bytearray(good)
    tampered[-3] ^= 0x20
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 0, bytes(tampered))
    assert resp["error_code"] == kw.CORRUPT_MESSAGE, resp
    assert_partition_empty(broker.bootstrap, topic)

    ts = int(time.time() * 1000) - 1000
    ok = kw.record_batch([(b"k1", b"v1", [("h", b"x")]), (None, b""), (b"k3", None)], base_timestamp=ts)
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 0, ok)
        assert resp["error_code"] == 0 and resp["base_offset"] == 0, resp
        fetched = c.fetch_v4(topic, 0, 0)
    assert fetched["high_watermark"] == 3
    recs = kw.decode_record_batches(fetched["records"])
    assert [(r["offset"], r["key"], r["value"], r["headers"], r["timestamp"]) for r in recs] == [
        (0, b"k1", b"v1", [(b"h", b"x")], ts), (1, None, b"", [], ts), (2, b"k3", None, [], ts)]
    assert_serving(broker)


@pytest.mark.parametrize("magic", [3, 99, -1])
def test_produce_with_unknown_magic_is_corrupt(broker, magic):
    """A batch whose magic byte is above 2 (3, 99, 0xff) gets CORRUPT_MESSAGE (2) (Kafka:
    "Invalid magic found in record") and nothing is stored."""
    topic = unique_topic("magic")
    create_topic(broker.bootstrap, topic)
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 0, kw.record_batch([(b"k", b"v")], magic=magic))
    assert resp["error_code"] == kw.CORRUPT_MESSAGE, resp
    assert_partition_empty(broker.bootstrap, topic)
    assert_serving(broker)


@pytest.mark.parametrize("magic", [0, 1])
def test_produce_with_old_magic_is_rejected(broker, magic):
    """A batch laid out as v2 but carrying magic 0 or 1 is rejected and nothing is stored.
    Kafka 4.3.1 answers 87 INVALID_RECORD (Produce v3+ only allows magic 2); CORRUPT_MESSAGE (2)
    is accepted too."""
    topic = unique_topic("oldmagic")
    create_topic(broker.bootstrap, topic)
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 0, kw.record_batch([(b"k", b"v")], magic=magic))
    assert resp["error_code"] in ANY_BATCH_REJECTION, resp
    assert_partition_empty(broker.bootstrap, topic)


@pytest.mark.parametrize("variant", ["count-too-high", "count-too-low", "delta-too-high",
                                     "delta-too-low"])
def test_produce_with_inconsistent_record_count_is_rejected(broker, variant):
    """A batch of 2 records whose header record count (3 or 1) or lastOffsetDelta (5 or 0)
    disagrees with the records it holds is rejected without storing anything. Kafka 4.3.1
    answers 87 INVALID_RECORD; CORRUPT_MESSAGE (2) is accepted too. The CRC is honest, so this
    is a structural check, not a checksum one."""
    topic = unique_topic("count")
    create_topic(broker.bootstrap, topic)
    overrides = {"count-too-high": {"record_count": 3}, "count-too-low": {"record_count": 1},
                 "delta-too-high": {"last_offset_delta": 5}, "delta-too-low": {"last_offset_delta": 0}}
    batch = kw.record_batch([(b"k", b"a"), (b"k", b"b")], **overrides[variant])
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 0, batch)
    assert resp["error_code"] in ANY_BATCH_REJECTION, resp
    assert resp["base_offset"] == -1
    assert_partition_empty(broker.bootstrap, topic)
    assert_serving(broker)


def test_produce_to_missing_partition(broker):
    """Produce to a partition index the topic does not have gets UNKNOWN_TOPIC_OR_PARTITION (3)
    for that partition, and the topic's real partition is untouched."""
    topic = unique_topic("nopart")
    create_topic(broker.bootstrap, topic)
    with kw.Conn(broker.bootstrap) as c:
        resp = c.produce_v9(topic, 7, kw.record_batch([(b"k", b"v")]))
    assert resp["index"] == 7
    assert resp["error_code"] == kw.UNKNOWN_TOPIC_OR_PARTITION, resp
    assert_partition_empty(broker.bootstrap, topic)


def test_produce_to_an_internal_topic_is_refused(broker):
    """Clients never write __consumer_offsets (the group coordinator replays it): Kafka
    answers INVALID_TOPIC_EXCEPTION (17), "Cannot append to internal topic"."""
    from confluent_kafka import Consumer, TopicPartition
    topic = unique_topic("internal")
    create_topic(broker.bootstrap, topic)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    with kw.Conn(broker.bootstrap) as conn:
        resp = conn.produce_v9("__consumer_offsets", 0, kw.record_batch([(b"k", b"forged")]))
    assert resp["error_code"] == INVALID_TOPIC_EXCEPTION, resp


# ---------------------------------------------------------------------------------------------
# unknown topic with auto-create off


def test_produce_to_unknown_topic_autocreate_off(broker_autocreate_off):
    """With auto.create.topics.enable=false: Produce v9 to a missing topic gets
    UNKNOWN_TOPIC_OR_PARTITION (3) and base offset -1; Metadata v1 (which implicitly asks for
    auto-creation) reports the topic with error 3 and no partitions; it is still missing after
    both requests."""
    b = broker_autocreate_off
    topic = unique_topic("missing")
    with kw.Conn(b.bootstrap) as c:
        resp = c.produce_v9(topic, 0, kw.record_batch([(b"k", b"v")]))
        assert resp["error_code"] == kw.UNKNOWN_TOPIC_OR_PARTITION, resp
        assert resp["base_offset"] == -1
        for _ in range(2):
            md = c.metadata_v1([topic])
            [t] = md["topics"]
            assert t["name"] == topic
            assert t["error_code"] == kw.UNKNOWN_TOPIC_OR_PARTITION, t
            assert t["partitions"] == []
        assert md["brokers"], "metadata must still list the broker"
    assert_serving(b)
