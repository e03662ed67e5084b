"""A tiny raw Kafka wire encoder/decoder, just enough for the protocol-edge tests.

Pure Python, no dependencies. It covers:
  * request headers v1 (non-flexible) and v2 (flexible, with tagged fields);
  * ApiVersions v0 and v3 requests, and decoding of the v0 and v3 responses;
  * Metadata v1 request/response;
  * Produce v9 (flexible) request/response, with a hand-built RecordBatch v2
    whose CRC32C (Castagnoli) is computed here;
  * ListOffsets v1 and Fetch v4 request/response (both non-flexible);
  * admin and group requests with just enough of their responses decoded to read the error
    codes: Alter/ListPartitionReassignments, DescribeLogDirs, ConsumerGroupDescribe,
    OffsetDelete, OffsetForLeaderEpoch, FindCoordinator, ElectLeaders;
  * a blocking `Conn` that frames requests with the int32 size prefix and reads responses.

Everything is explicit so that a test can corrupt any field (CRC, magic, record count...).
"""

import socket
import struct
import time

# ---------------------------------------------------------------------------------------------
# CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table driven.

_CRC32C_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)
del _n, _c


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value

# ---------------------------------------------------------------------------------------------
# API keys and error codes used by the tests.

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18
CREATE_TOPICS = 19

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
TOPIC_ALREADY_EXISTS = 36
INVALID_REPLICATION_FACTOR = 38

# ---------------------------------------------------------------------------------------------
# Primitive encoders.


def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def u32(v):
    return struct.pack(">I", v)


def i64(v):
    return struct.pack(">q", v)


def uvarint(v):
    assert v >= 0
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v):
    """Zig-zag signed varint (also used for varlong)."""
    return uvarint((v << 1) ^ (v >> 63))


def string(s):
    if s is None:
        return i16(-1)
    b = s.encode() if isinstance(s, str) else s
    return i16(len(b)) + b


def compact_string(s):
    if s is None:
        return uvarint(0)
    b = s.encode() if isinstance(s, str) else s
    return uvarint(len(b) + 1) + b


def compact_bytes(b):
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


def array(items):
    if items is None:
        return i32(-1)
    return i32(len(items)) + b"".join(items)


def compact_array(items):
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


EMPTY_TAGS = uvarint(0)

# ---------------------------------------------------------------------------------------------
# Decoder.


class Reader:
    def __init__(self, data):
        self.data = bytes(data)
        self.pos = 0

    def remaining(self):
        return len(self.data) - self.pos

    def _take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"short read: need {n} at {self.pos}, have {len(self.data) - self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self._take(1))[0]

    def i16(self):
        return struct.unpack(">h", self._take(2))[0]

    def i32(self):
        return struct.unpack(">i", self._take(4))[0]

    def u32(self):
        return struct.unpack(">I", self._take(4))[0]

    def i64(self):
        return struct.unpack(">q", self._take(8))[0]

    def bool(self):
        return self.i8() != 0

    def uvarint(self):
        shift = 0
        v = 0
        for _ in range(10):
            b = self._take(1)[0]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7
        raise ValueError("varint too long")

    def varint(self):
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def string(self):
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def compact_string(self):
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode()

    def bytes(self):
        n = self.i32()
        return None if n < 0 else self._take(n)

    def compact_bytes(self):
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1)

    def array(self, fn):
        n = self.i32()
        return None if n < 0 else [fn(self) for _ in range(n)]

    def compact_array(self, fn):
        n = self.uvarint()
        return None if n == 0 else [fn(self) for _ in range(n - 1)]

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


# ---------------------------------------------------------------------------------------------
# Request headers.


def header_v1(api_key, api_version, correlation_id, client_id="runnel-tests"):
    return i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id)


def header_v2(api_key, api_version, correlation_id, client_id="runnel-tests"):
    return header_v1(api_key, api_version, correlation_id, client_id) + EMPTY_TAGS


def frame(payload):
    return i32(len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# ApiVersions.


def api_versions_request(version, correlation_id):
    """ApiVersions request. v0-v2 use header v1 and an empty body; v3+ use header v2."""
    if version >= 3:
        body = compact_string("runnel-tests") + compact_string("0.1") + EMPTY_TAGS
        return header_v2(API_VERSIONS, version, correlation_id) + body
    return header_v1(API_VERSIONS, version, correlation_id)


def decode_api_versions_v0(r):
    """ApiVersions response body v0: error_code, [api_key, min, max] (int32-length array).
    This is also the format of the fallback answer to an unsupported ApiVersions version."""
    err = r.i16()
    keys = r.array(lambda r: (r.i16(), r.i16(), r.i16()))
    return {"error_code": err, "api_keys": {k: (lo, hi) for k, lo, hi in keys or []}}


def decode_api_versions_v3(r):
    err = r.i16()

    def key(r):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        r.tags()
        return k, lo, hi

    keys = r.compact_array(key)
    throttle = r.i32()
    r.tags()
    return {"error_code": err, "api_keys": {k: (lo, hi) for k, lo, hi in keys or []},
            "throttle_time_ms": throttle}


# ---------------------------------------------------------------------------------------------
# Metadata v1.


def metadata_v1_request(topics, correlation_id):
    """topics: list of names, or None for all topics."""
    body = array(None if topics is None else [string(t) for t in topics])
    return header_v1(METADATA, 1, correlation_id) + body


def decode_metadata_v1(r):
    brokers = r.array(lambda r: {"node_id": r.i32(), "host": r.string(), "port": r.i32(),
                                 "rack": r.string()})
    controller_id = r.i32()

    def partition(r):
        return {"error_code": r.i16(), "partition_index": r.i32(), "leader_id": r.i32(),
                "replicas": r.array(lambda r: r.i32()), "isr": r.array(lambda r: r.i32())}

    def topic(r):
        return {"error_code": r.i16(), "name": r.string(), "is_internal": r.bool(),
                "partitions": r.array(partition)}

    return {"brokers": brokers, "controller_id": controller_id, "topics": r.array(topic)}


# ---------------------------------------------------------------------------------------------
# CreateTopics v4 (non-flexible).


def create_topics_v4_request(name, partitions, replication_factor, correlation_id, timeout_ms=10000,
                             validate_only=False):
    topic = string(name) + i32(partitions) + i16(replication_factor) + array([]) + array([])
    body = array([topic]) + i32(timeout_ms) + i8(1 if validate_only else 0)
    return header_v1(CREATE_TOPICS, 4, correlation_id) + body


def decode_create_topics_v4(r):
    throttle = r.i32()
    topics = r.array(lambda r: {"name": r.string(), "error_code": r.i16(), "error_message": r.string()})
    return {"throttle_time_ms": throttle, "topics": topics}


# ---------------------------------------------------------------------------------------------
# RecordBatch v2.


def encode_record(offset_delta, timestamp_delta, key, value, headers=()):
    body = i8(0) + varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        hk = hk.encode() if isinstance(hk, str) else hk
        body += varint(len(hk)) + hk
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + body


def record_batch(records, base_timestamp=None, base_offset=0, magic=2, attributes=0,
                 producer_id=-1, producer_epoch=-1, base_sequence=-1, partition_leader_epoch=-1,
                 record_count=None, last_offset_delta=None, crc=None):
    """Build an uncompressed RecordBatch v2 from [(key, value)] or [(key, value, headers)].

    record_count / last_offset_delta / crc / magic override the honest values so that tests
    can build inconsistent batches. The CRC32C covers everything from `attributes` on."""
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    encoded = b""
    for i, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers = rec[2] if len(rec) > 2 else ()
        encoded += encode_record(i, 0, key, value, headers)
    n = len(records)
    if record_count is None:
        record_count = n
    if last_offset_delta is None:
        last_offset_delta = n - 1
    after_crc = (i16(attributes) + i32(last_offset_delta) + i64(base_timestamp)
                 + i64(base_timestamp) + i64(producer_id) + i16(producer_epoch)
                 + i32(base_sequence) + i32(record_count) + encoded)
    if crc is None:
        crc = crc32c(after_crc)
    after_length = i32(partition_leader_epoch) + i8(magic) + u32(crc) + after_crc
    return i64(base_offset) + i32(len(after_length)) + after_length


def decode_record_batches(data):
    """Decode uncompressed v2 batches into a list of dicts (offset, timestamp, key, value,
    headers). Verifies each batch's CRC32C. A trailing partial batch is ignored."""
    out = []
    r = Reader(data or b"")
    while r.remaining() >= 12:
        base_offset = r.i64()
        length = r.i32()
        if r.remaining() < length:
            break
        br = Reader(r._take(length))
        br.i32()  # partition leader epoch
        magic = br.i8()
        assert magic == 2, f"magic {magic}"
        crc = br.u32()
        assert crc32c(br.data[br.pos:]) == crc, "fetched batch has a bad CRC"
        attributes = br.i16()
        assert attributes & 0x07 == 0, "compressed batches are not decoded here"
        br.i32()  # last offset delta
        base_ts = br.i64()
        br.i64()  # max timestamp
        br.i64(), br.i16(), br.i32()  # producer id, epoch, base sequence
        count = br.i32()
        for _ in range(count):
            br.varint()  # length
            br.i8()
            ts_delta = br.varint()
            off_delta = br.varint()
            kl = br.varint()
            key = None if kl < 0 else br._take(kl)
            vl = br.varint()
            value = None if vl < 0 else br._take(vl)
            headers = []
            for _ in range(br.varint()):
                hk = br._take(br.varint())
                hl = br.varint()
                headers.append((hk, None if hl < 0 else br._take(hl)))
            out.append({"offset": base_offset + off_delta, "timestamp": base_ts + ts_delta,
                        "key": key, "value": value, "headers": headers})
    return out


# ---------------------------------------------------------------------------------------------
# Produce v9 (flexible: request header v2, response header v1).


def produce_v9_request(topic, partition, records_bytes, correlation_id, acks=-1, timeout_ms=10000):
    pdata = i32(partition) + compact_bytes(records_bytes) + EMPTY_TAGS
    tdata = compact_string(topic) + compact_array([pdata]) + EMPTY_TAGS
    body = compact_string(None) + i16(acks) + i32(timeout_ms) + compact_array([tdata]) + EMPTY_TAGS
    return header_v2(PRODUCE, 9, correlation_id) + body


def decode_produce_v9(r):
    def record_error(r):
        e = {"batch_index": r.i32(), "message": r.compact_string()}
        r.tags()
        return e

    def partition(r):
        p = {"index": r.i32(), "error_code": r.i16(), "base_offset": r.i64(),
             "log_append_time_ms": r.i64(), "log_start_offset": r.i64(),
             "record_errors": r.compact_array(record_error), "error_message": r.compact_string()}
        r.tags()
        return p

    def topic(r):
        t = {"name": r.compact_string(), "partitions": r.compact_array(partition)}
        r.tags()
        return t

    topics = r.compact_array(topic)
    throttle = r.i32()
    r.tags()
    return {"topics": topics, "throttle_time_ms": throttle}


# ---------------------------------------------------------------------------------------------
# ListOffsets v1 (non-flexible).

LATEST = -1
EARLIEST = -2


def list_offsets_v1_request(topic, partition, timestamp, correlation_id):
    body = i32(-1) + array([string(topic) + array([i32(partition) + i64(timestamp)])])
    return header_v1(LIST_OFFSETS, 1, correlation_id) + body


def decode_list_offsets_v1(r):
    def partition(r):
        return {"partition_index": r.i32(), "error_code": r.i16(), "timestamp": r.i64(),
                "offset": r.i64()}

    return {"topics": r.array(lambda r: {"name": r.string(), "partitions": r.array(partition)})}


# ---------------------------------------------------------------------------------------------
# Fetch v4 (non-flexible).


def fetch_v4_request(topic, partition, offset, correlation_id, max_wait_ms=100, max_bytes=1 << 20):
    part = i32(partition) + i64(offset) + i32(max_bytes)
    body = (i32(-1) + i32(max_wait_ms) + i32(1) + i32(max_bytes) + i8(0)
            + array([string(topic) + array([part])]))
    return header_v1(FETCH, 4, correlation_id) + body


def decode_fetch_v4(r):
    throttle = r.i32()

    def partition(r):
        return {"partition_index": r.i32(), "error_code": r.i16(), "high_watermark": r.i64(),
                "last_stable_offset": r.i64(),
                "aborted": r.array(lambda r: (r.i64(), r.i64())), "records": r.bytes()}

    topics = r.array(lambda r: {"name": r.string(), "partitions": r.array(partition)})
    return {"throttle_time_ms": throttle, "topics": topics}


# ---------------------------------------------------------------------------------------------
# Connection.


class Conn:
    """A blocking connection that sends framed requests and reads framed responses."""

    def __init__(self, bootstrap, timeout_s=10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self._next_id = 1

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def next_correlation_id(self):
        cid = self._next_id
        self._next_id += 1
        return cid

    def send_raw(self, data):
        self.sock.sendall(data)

    def _recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self):
        (n,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(n)

    def request(self, payload, flexible_response_header=False):
        """Send one framed request and return a Reader positioned at the response body.
        Checks the correlation id. ApiVersions responses always use header v0 (not flexible)."""
        (cid,) = struct.unpack(">i", payload[4:8])
        self.send_raw(frame(payload))
        r = Reader(self.recv_frame())
        got = r.i32()
        assert got == cid, f"correlation id {got} != {cid}"
        if flexible_response_header:
            r.tags()
        return r

    def closed_by_peer(self, timeout_s=10.0):
        """True if the peer closes the connection (EOF or reset) within timeout_s without
        sending anything; False if it is still open at the deadline. Bytes received before the
        close are an error (the broker answered garbage) and raise AssertionError."""
        self.sock.settimeout(0.25)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not data:
                return True
            raise AssertionError(f"broker answered a garbage frame with {data[:64]!r}")
        return False

    # Convenience wrappers -----------------------------------------------------------------

    def api_versions(self, version):
        r = self.request(api_versions_request(version, self.next_correlation_id()))
        return decode_api_versions_v3(r) if version >= 3 else decode_api_versions_v0(r)

    def metadata_v1(self, topics):
        return decode_metadata_v1(self.request(metadata_v1_request(topics, self.next_correlation_id())))

    def produce_v9(self, topic, partition, records_bytes, acks=-1):
        r = self.request(produce_v9_request(topic, partition, records_bytes,
                                            self.next_correlation_id(), acks=acks),
                         flexible_response_header=True)
        resp = decode_produce_v9(r)
        return resp["topics"][0]["partitions"][0]

    def list_offsets_v1(self, topic, partition, timestamp):
        r = self.request(list_offsets_v1_request(topic, partition, timestamp,
                                                 self.next_correlation_id()))
        return decode_list_offsets_v1(r)["topics"][0]["partitions"][0]

    def fetch_v4(self, topic, partition, offset, max_wait_ms=100):
        r = self.request(fetch_v4_request(topic, partition, offset, self.next_correlation_id(),
                                          max_wait_ms=max_wait_ms))
        return decode_fetch_v4(r)["topics"][0]["partitions"][0]


# ---------------------------------------------------------------------------------------------
# AlterPartitionReassignments v0 (flexible).


def alter_partition_reassignments_v0_request(moves, correlation_id, timeout_ms=30000):
    """moves: {(topic, partition): [broker ids] or None (cancel)}."""
    topics = {}
    for (topic, partition), replicas in moves.items():
        target = uvarint(0) if replicas is None else compact_array([i32(b) for b in replicas])
        topics.setdefault(topic, []).append(i32(partition) + target + EMPTY_TAGS)
    body = i32(timeout_ms) + compact_array(
        [compact_string(t) + compact_array(ps) + EMPTY_TAGS for t, ps in topics.items()]) + EMPTY_TAGS
    return header_v2(45, 0, correlation_id) + body


def decode_alter_partition_reassignments_v0(r):
    """{(topic, partition): (error code, message)}, plus the top-level error under None."""
    r.i32()  # throttle
    out = {None: (r.i16(), r.compact_string())}

    def partition(r):
        p = (r.i32(), r.i16(), r.compact_string())
        r.tags()
        return p

    def topic(r):
        name = r.compact_string()
        ps = r.compact_array(partition)
        r.tags()
        return name, ps

    for name, ps in r.compact_array(topic):
        for p, code, msg in ps:
            out[(name, p)] = (code, msg)
    r.tags()
    return out


# ---------------------------------------------------------------------------------------------
# A few more requests, each with just enough of its response decoded to read the error codes
# (tests/test_stress.py sends them from many connections at once).


def list_partition_reassignments_v0_request(correlation_id, topics=None, timeout_ms=30000):
    """ListPartitionReassignments v0 (flexible). topics: {name: [partitions]}, None for all."""
    listed = None if topics is None else [
        compact_string(t) + compact_array([i32(p) for p in ps]) + EMPTY_TAGS for t, ps in topics.items()]
    return header_v2(46, 0, correlation_id) + i32(timeout_ms) + compact_array(listed) + EMPTY_TAGS


def decode_list_partition_reassignments_v0(r):
    """(error code, {(topic, partition): (replicas, adding, removing)})."""
    r.i32()  # throttle
    error = r.i16()
    r.compact_string()  # error message
    moving = {}

    def ids(r):
        return r.compact_array(lambda r: r.i32())

    def partition(r):
        p = (r.i32(), ids(r), ids(r), ids(r))
        r.tags()
        return p

    def topic(r):
        name = r.compact_string()
        for index, replicas, adding, removing in r.compact_array(partition) or []:
            moving[(name, index)] = (replicas, adding, removing)
        r.tags()

    r.compact_array(topic)
    r.tags()
    return error, moving


def describe_log_dirs_v1_request(correlation_id, topics=None):
    """DescribeLogDirs v1. topics: {name: [partitions]}, None for every replica."""
    listed = None if topics is None else [string(t) + array([i32(p) for p in ps]) for t, ps in topics.items()]
    return header_v1(35, 1, correlation_id) + array(listed)


def decode_describe_log_dirs_v1(r):
    """[(error code, log dir, {(topic, partition): size})]."""
    r.i32()  # throttle

    def partition(r):
        index, size = r.i32(), r.i64()
        r.i64(), r.bool()  # offset lag, is future
        return index, size

    def result(r):
        error, path = r.i16(), r.string()
        sizes = {}
        for name, ps in r.array(lambda r: (r.string(), r.array(partition))) or []:
            sizes.update({(name, index): size for index, size in ps or []})
        return error, path, sizes

    return r.array(result) or []


def consumer_group_describe_v0_request(groups, correlation_id):
    """ConsumerGroupDescribe v0 (flexible, KIP-848)."""
    body = compact_array([compact_string(g) for g in groups]) + i8(0) + EMPTY_TAGS
    return header_v2(69, 0, correlation_id) + body


def decode_consumer_group_describe_v0_first(r):
    """The first group's (error code, group id, state, group epoch); the members are not read."""
    r.i32()  # throttle
    if r.uvarint() < 2:
        return None
    error, _message, group = r.i16(), r.compact_string(), r.compact_string()
    return error, group, r.compact_string(), r.i32()


def offset_delete_v0_request(group, topics, correlation_id):
    """OffsetDelete v0. topics: {name: [partitions]}."""
    body = string(group) + array([string(t) + array([i32(p) for p in ps]) for t, ps in topics.items()])
    return header_v1(47, 0, correlation_id) + body


def decode_offset_delete_v0(r):
    """(top-level error code, {(topic, partition): error code})."""
    error = r.i16()
    r.i32()  # throttle
    codes = {}
    for name, ps in r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16())))) or []:
        codes.update({(name, index): code for index, code in ps or []})
    return error, codes


def offset_for_leader_epoch_v2_request(topic, partitions, correlation_id, leader_epoch=0):
    """OffsetForLeaderEpoch v2: the end offset of `leader_epoch` (current epoch not checked)."""
    parts = [i32(p) + i32(-1) + i32(leader_epoch) for p in partitions]
    return header_v1(23, 2, correlation_id) + array([string(topic) + array(parts)])


def decode_offset_for_leader_epoch_v2(r):
    """{(topic, partition): (error code, leader epoch, end offset)}."""
    r.i32()  # throttle
    out = {}
    for name, ps in r.array(lambda r: (r.string(), r.array(lambda r: (r.i16(), r.i32(), r.i32(), r.i64())))) or []:
        out.update({(name, index): (code, epoch, end) for code, index, epoch, end in ps or []})
    return out


def find_coordinator_v1_request(key, correlation_id, key_type=0):
    """FindCoordinator v1: the coordinator of a group (key_type 0) or transactional id (1)."""
    return header_v1(10, 1, correlation_id) + string(key) + i8(key_type)


def decode_find_coordinator_v1(r):
    """(error code, error message, node id)."""
    r.i32()  # throttle
    error, message, node = r.i16(), r.string(), r.i32()
    return error, message, node


def elect_leaders_v1_request(topics, correlation_id, election_type=0, timeout_ms=5000):
    """ElectLeaders v1 (0 preferred, 1 unclean). topics: {name: [partitions]}, None for all."""
    listed = None if topics is None else [string(t) + array([i32(p) for p in ps]) for t, ps in topics.items()]
    return header_v1(43, 1, correlation_id) + i8(election_type) + array(listed) + i32(timeout_ms)


def decode_elect_leaders_v1(r):
    """(top-level error code, {(topic, partition): (error code, message)})."""
    r.i32()  # throttle
    error = r.i16()
    out = {}
    for name, ps in r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16(), r.string())))) or []:
        out.update({(name, index): (code, message) for index, code, message in ps or []})
    return error, out
