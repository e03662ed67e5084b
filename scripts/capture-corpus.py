#!/usr/bin/env python3
"""Makes the fuzz seed corpora (fuzz/corpus/<target>/) from real traffic and real data
directories; docs/fuzzing.md says what each target reads.

1. Requests. One `runnel dev` broker whose advertised listener is a TCP proxy run here, so
   that every connection of every client goes through the proxy, which writes each request
   frame (the bytes after the size prefix) to broker_request/ and request_decode/: at most
   a few per (API, version), none over 32 KiB. The clients are the ones the integration
   tests use: confluent-kafka (librdkafka: producers with every codec, idempotence, a
   classic and a KIP-848 consumer group, the admin API), Kafka's Java tools (console
   producer and consumer, topics, configs, consumer groups, log dirs, reassignments,
   leader election, delete records, offsets, API versions) and franz-go (tests/go).
2. Raft. A `runnel dev --brokers 3` cluster under a packet capture on the loopback
   interface (an AF_PACKET socket: run as root), taking the TCP streams to the Raft ports
   apart into transport frames: raft_transport/ and raft_step/, a few per message type.
3. Files. The data directories of both runs, after a clean stop: segments (cut at a batch
   boundary to stay small), checkpoints and `raft.state` files become storage_open/ and
   raft_store_open/ inputs; `__consumer_offsets` segments offsets_records/ inputs (as a log
   and as key/value pairs); the metadata log controller_records/ inputs (as a log and as
   the JSON records it holds); the stored batches of every codec record_batch/ inputs.

Run with the test virtualenv's Python, after `cargo build --release`, scripts/test.sh's
client installs (.cache/venv, .cache/java, .cache/go) and as root:

    .cache/venv/bin/python scripts/capture-corpus.py [--out fuzz/corpus] [--keep DIR]

The corpora are replaced whole. Takes about a minute.
"""

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from conftest import free_port, wait_for_port  # noqa: E402  (the tests' helpers)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEPARATOR = b"\n--runnel-fuzz-file--\n"
FRAME_BYTES_MAX = 32 << 10
FRAMES_PER_KIND = 3
SEGMENT_BYTES_MAX = 16 << 10
JAVA_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def log(*a):
    print("capture:", *a, file=sys.stderr, flush=True)


class Corpus:
    """Seed files of one target, named by content hash, with a cap per kind."""

    def __init__(self, out, target):
        self.dir = out / target
        self.kinds = {}

    def add(self, data, kind="", cap=FRAMES_PER_KIND):
        if self.kinds.get(kind, 0) >= cap:
            return False
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.dir.mkdir(parents=True, exist_ok=True)
        name = (kind + "-" if kind else "") + hashlib.sha1(data).hexdigest()[:16]
        (self.dir / name).write_bytes(data)
        return True


# ---- 1. Requests through a proxy -------------------------------------------------------

class Proxy:
    """Forwards 127.0.0.1:listen to 127.0.0.1:upstream, keeping each request frame."""

    def __init__(self, listen, upstream, on_frame):
        self.listen, self.upstream, self.on_frame = listen, upstream, on_frame
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", listen))
        self.sock.listen(64)
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self.pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, False), daemon=True).start()

    def pump(self, src, dst, requests):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if requests:
                    buf += data
                    while len(buf) >= 4:
                        size = int.from_bytes(buf[:4], "big", signed=True)
                        if size < 0 or len(buf) < 4 + size:
                            break
                        with self.lock:
                            self.on_frame(buf[4:4 + size])
                        buf = buf[4 + size:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def run(cmd, timeout=90, **kw):
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, cwd=ROOT, **kw)
        if p.returncode != 0:
            log(f"(exit {p.returncode}) {' '.join(map(str, cmd))[:160]}: {p.stderr[-300:]!r}")
    except subprocess.TimeoutExpired:
        log(f"(timed out) {' '.join(map(str, cmd))[:160]}")


def java(main, *args, stdin=None, timeout=90):
    cp = f"{ROOT / '.cache/java/lib'}/*"
    run(["java", *JAVA_OPTS, "-cp", cp, main, *map(str, args)], input=stdin, timeout=timeout)


def attempt(f, *a, **kw):
    """Calls f; a client error is logged (the requests were sent all the same)."""
    try:
        return f(*a, **kw)
    except Exception as e:  # noqa: BLE001
        log(f"{getattr(f, '__name__', f)}: {e}")


def librdkafka_clients(bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, ConfigResource, ConfigEntry, AlterConfigOpType, NewPartitions,
                                       NewTopic, OffsetSpec)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def wait(futures):
        for f in futures.values():
            try:
                f.result(timeout=30)
            except Exception as e:  # noqa: BLE001 (errors are traffic too)
                log("admin:", e)

    # Small segments (Kafka's internal.segment.bytes: segment.bytes starts at 1 MiB), so the
    # data directory holds many segment files to seed storage_open with.
    small = {"internal.segment.bytes": "8192"}
    topics = [NewTopic(f"c-{c}", num_partitions=2, replication_factor=1, config=small) for c in CODECS]
    topics.append(NewTopic("compacted", num_partitions=1, replication_factor=1,
                           config={"cleanup.policy": "compact", "internal.segment.bytes": "4096",
                                   "min.cleanable.dirty.ratio": "0.01"}))
    topics.append(NewTopic("logtime", num_partitions=1, replication_factor=1,
                           config={"message.timestamp.type": "LogAppendTime", **small}))
    wait(admin.create_topics(topics))
    for codec in CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": True,
                      "linger.ms": 5, "batch.num.messages": 20})
        for i in range(60):
            p.produce(f"c-{codec}", key=f"k{i % 7}".encode(), value=(f"value {i} " * (1 + i % 5)).encode(),
                      headers=[("h", b"x")] if i % 3 == 0 else None, partition=i % 2)
            if i % 20 == 19:
                p.flush(10)
        p.flush(10)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "compression.type": "lz4"})
    for i in range(300):
        p.produce("compacted", key=f"key-{i % 10}".encode(), value=None if i % 50 == 49 else b"v" * 40)
        p.produce("logtime", key=None, value=b"t%d" % i)
    p.flush(10)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 0})
    p.produce("c-none", value=b"acks zero")
    p.flush(10)

    for protocol in ["classic", "consumer"]:
        group = f"g-{protocol}"
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "group.protocol": protocol}
        if protocol == "classic":
            conf["session.timeout.ms"] = 6000
        c = Consumer(conf)
        c.subscribe([f"c-{codec}" for codec in CODECS])
        got, deadline = 0, time.monotonic() + 20
        while got < 200 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
                if got % 40 == 0:
                    attempt(c.commit, asynchronous=False)
        log(f"group {group}: {got} records")
        attempt(c.commit, asynchronous=False)
        attempt(c.committed, [TopicPartition("c-none", 0), TopicPartition("c-gzip", 1)], timeout=10)
        c.close()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-assign", "enable.auto.commit": False})
    c.assign([TopicPartition("c-zstd", 0, 0)])
    for _ in range(5):
        c.poll(0.2)
    attempt(c.commit, offsets=[TopicPartition("c-zstd", 0, 3)], asynchronous=False)
    c.close()

    wait(admin.create_partitions([NewPartitions("c-none", 3)]))
    res = ConfigResource(ConfigResource.Type.TOPIC, "c-gzip")
    wait(admin.describe_configs([res]))
    wait(admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]))
    res = ConfigResource(ConfigResource.Type.TOPIC, "c-gzip", incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    wait(admin.incremental_alter_configs([res]))
    wait(admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "c-snappy", set_config={"retention.ms": "90000000"})]))
    wait(admin.list_offsets({TopicPartition("c-lz4", 0): OffsetSpec.earliest(),
                             TopicPartition("c-lz4", 1): OffsetSpec.latest(),
                             TopicPartition("c-zstd", 0): OffsetSpec.for_timestamp(int(time.time() * 1000) - 60000),
                             TopicPartition("c-gzip", 0): OffsetSpec.max_timestamp()}))
    wait(admin.delete_records([TopicPartition("c-lz4", 0, 2)]))
    admin.list_topics(timeout=10)
    try:
        admin.describe_cluster().result(timeout=10)
        admin.list_consumer_groups().result(timeout=10)
    except Exception as e:  # noqa: BLE001
        log("admin:", e)
    wait(admin.describe_consumer_groups(["g-classic", "g-consumer"]))
    wait(admin.list_consumer_group_offsets([__import__("confluent_kafka").ConsumerGroupTopicPartitions("g-classic")]))
    wait(admin.delete_consumer_groups(["g-assign"]))
    wait(admin.create_topics([NewTopic("doomed", num_partitions=1, replication_factor=1)]))
    wait(admin.delete_topics(["doomed"]))


def java_clients(bootstrap):
    bs = ["--bootstrap-server", bootstrap]
    java("org.apache.kafka.tools.BrokerApiVersionsCommand", *bs)
    java("org.apache.kafka.tools.TopicCommand", *bs, "--create", "--topic", "j-topic", "--partitions", "2",
         "--config", "max.message.bytes=100000")
    java("org.apache.kafka.tools.TopicCommand", *bs, "--describe", "--topic", "j-topic")
    java("org.apache.kafka.tools.TopicCommand", *bs, "--alter", "--topic", "j-topic", "--partitions", "3")
    lines = "".join(f"key{i}\tjava value {i}\n" for i in range(50)).encode()
    for codec in ["gzip", "zstd"]:
        java("org.apache.kafka.tools.ConsoleProducer", *bs, "--topic", "j-topic", "--compression-codec", codec,
             "--property", "parse.key=true", stdin=lines)
    for protocol in ["classic", "consumer"]:
        java("org.apache.kafka.tools.consumer.ConsoleConsumer", *bs, "--topic", "j-topic", "--from-beginning",
             "--max-messages", "40", "--timeout-ms", "15000", "--group", f"j-{protocol}",
             "--consumer-property", f"group.protocol={protocol}")
    # Again from the committed offsets, which carry a leader epoch: the Java consumer checks
    # its position with OffsetForLeaderEpoch.
    java("org.apache.kafka.tools.consumer.ConsoleConsumer", *bs, "--topic", "j-topic", "--max-messages", "5",
         "--timeout-ms", "8000", "--group", "j-classic")
    groups = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    java(groups, *bs, "--list")
    java(groups, *bs, "--describe", "--all-groups", "--members", "--verbose")
    java(groups, *bs, "--describe", "--all-groups", "--state")
    java(groups, *bs, "--describe", "--group", "j-consumer")
    java(groups, *bs, "--reset-offsets", "--group", "j-classic", "--topic", "j-topic", "--to-earliest", "--execute")
    java(groups, *bs, "--delete-offsets", "--group", "j-classic", "--topic", "j-topic")
    java(groups, *bs, "--delete", "--group", "j-consumer")
    java("kafka.admin.ConfigCommand", *bs, "--entity-type", "topics", "--entity-name", "j-topic", "--describe")
    java("kafka.admin.ConfigCommand", *bs, "--entity-type", "topics", "--entity-name", "j-topic", "--alter",
         "--add-config", "retention.ms=7200000")
    java("kafka.admin.ConfigCommand", *bs, "--entity-type", "brokers", "--entity-name", "1", "--describe")
    java("org.apache.kafka.tools.LogDirsCommand", *bs, "--describe")
    java("org.apache.kafka.tools.GetOffsetShell", *bs, "--topic", "j-topic", "--time", "-1")
    java("org.apache.kafka.tools.GetOffsetShell", *bs, "--topic", "j-topic", "--time", "-3")
    offsets = pathlib.Path(tempfile.mkstemp(suffix=".json")[1])
    offsets.write_text(json.dumps({"partitions": [{"topic": "j-topic", "partition": 0, "offset": 1}], "version": 1}))
    java("org.apache.kafka.tools.DeleteRecordsCommand", *bs, "--offset-json-file", offsets)
    moves = pathlib.Path(tempfile.mkstemp(suffix=".json")[1])
    moves.write_text(json.dumps({"partitions": [{"topic": "j-topic", "partition": 0, "replicas": [1]}], "version": 1}))
    java("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", *bs, "--reassignment-json-file", moves,
         "--execute")
    java("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", *bs, "--list")
    java("org.apache.kafka.tools.LeaderElectionCommand", *bs, "--election-type", "preferred", "--all-topic-partitions")
    java("org.apache.kafka.tools.TopicCommand", *bs, "--delete", "--topic", "j-topic")


def franz_clients(bootstrap):
    go = ROOT / ".cache/go"
    run([go / "clientcheck", "--bootstrap", bootstrap, "--topic-prefix", "franz", "--records", "200",
         "--timeout", "60s"], timeout=90)
    run([go / "groupcheck", "--mode", "offsetdelete", "--bootstrap", bootstrap, "--group", "franz-g",
         "--topic", "franz-od"], timeout=90)


def capture_requests(runnel, out, work):
    port, proxy_port = free_port(), free_port()
    requests = Corpus(out, "broker_request")
    decode = Corpus(out, "request_decode")

    def on_frame(frame):
        if len(frame) < 8 or len(frame) > FRAME_BYTES_MAX:
            return
        key, version = struct.unpack(">hh", frame[:4])
        kind = f"k{key}v{version}"
        if requests.add(frame, kind):
            decode.add(frame, kind)

    Proxy(proxy_port, port, on_frame)
    data = work / "single"
    broker = subprocess.Popen(
        [runnel, "dev", "--port", str(port), "--data-dir", data,
         "--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}",
         "--set", "group.initial.rebalance.delay.ms=0",
         "--set", "offsets.topic.num.partitions=2", "--set", "log.cleaner.backoff.ms=500"],
        stdout=subprocess.DEVNULL, stderr=open(work / "single.log", "wb"))
    try:
        wait_for_port(port, timeout_s=30)
        bootstrap = f"127.0.0.1:{proxy_port}"
        log("librdkafka clients")
        librdkafka_clients(bootstrap)
        log("Java tools")
        java_clients(bootstrap)
        log("franz-go")
        franz_clients(bootstrap)
        time.sleep(2)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=60)
    log(f"requests: {sum(requests.kinds.values())} frames of {len(requests.kinds)} (API, version) pairs")
    return data


# ---- 2. Raft frames off the loopback interface -----------------------------------------

class Sniffer:
    """TCP payloads to the given ports on lo, by connection, from an AF_PACKET socket."""

    def __init__(self, ports):
        self.ports = set(ports)
        self.flows = {}
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.stopped = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stopped:
            try:
                pkt = self.sock.recv(1 << 17)
            except socket.timeout:
                continue
            if len(pkt) < 14 + 20 or pkt[12:14] != b"\x08\x00":
                continue
            ip = pkt[14:]
            ihl = (ip[0] & 0x0F) * 4
            if ip[9] != 6:
                continue
            total = int.from_bytes(ip[2:4], "big")
            tcp = ip[ihl:total]
            sport, dport, seq = struct.unpack(">HHI", tcp[:8])
            if dport not in self.ports:
                continue
            payload = tcp[(tcp[12] >> 4) * 4:]
            flow = self.flows.setdefault((sport, dport), {})
            if tcp[13] & 0x02:  # SYN
                flow["isn"] = (seq + 1) & 0xFFFFFFFF
            elif payload:
                flow[seq] = payload

    def stop(self):
        self.stopped = True
        self.thread.join()
        self.sock.close()

    def streams(self):
        for (sport, dport), flow in self.flows.items():
            pos = flow.pop("isn", None)
            if pos is None:
                continue
            out = bytearray()
            while pos in flow:
                chunk = flow.pop(pos)
                out += chunk
                pos = (pos + len(chunk)) & 0xFFFFFFFF
            yield dport, bytes(out)


MSG_TYPES = {0: "hup", 1: "beat", 2: "propose", 3: "append", 4: "appendresp", 5: "vote", 6: "voteresp",
             7: "snapshot", 8: "heartbeat", 9: "heartbeatresp", 17: "prevote", 18: "prevoteresp"}


def first_msg_type(body):
    """eraftpb.Message field 1 (msg_type) of the first message of a frame; 0 when absent."""
    if len(body) < 13:
        return None
    group = int.from_bytes(body[:8], "big")
    msg = body[12:12 + int.from_bytes(body[8:12], "big")]
    kind = MSG_TYPES.get(msg[1], f"t{msg[1]}") if len(msg) >= 2 and msg[0] == 0x08 else "hup"
    return ("fwd-" if group == (1 << 64) - 1 else "meta-" if group == 0 else "part-") + kind


def capture_raft(runnel, out, work):
    port = free_port()
    while any(not port_free(p) for p in [port, port + 1, port + 2, port + 1000, port + 1001, port + 1002]):
        port = free_port()
    sniffer = Sniffer([port + 1000 + i for i in range(3)])
    data = work / "cluster"
    cluster = subprocess.Popen([runnel, "dev", "--brokers", "3", "--port", str(port), "--data-dir", data,
                                "--set", "group.initial.rebalance.delay.ms=0"],
                               stdout=subprocess.DEVNULL, stderr=open(work / "cluster.log", "wb"),
                               start_new_session=True)
    try:
        for i in range(3):
            wait_for_port(port + i, timeout_s=60)
        time.sleep(3)
        log("cluster traffic")
        cluster_traffic(f"127.0.0.1:{port}")
        time.sleep(2)
    finally:
        os.killpg(cluster.pid, signal.SIGTERM)
        cluster.wait(timeout=60)
        sniffer.stop()
    transport, step = Corpus(out, "raft_transport"), Corpus(out, "raft_step")
    for _, stream in sniffer.streams():
        pos = 0
        while pos + 4 <= len(stream):
            n = int.from_bytes(stream[pos:pos + 4], "big")
            body = stream[pos + 4:pos + 4 + n]
            if len(body) < n:
                break
            pos += 4 + n
            kind = first_msg_type(body)
            if kind and len(body) <= FRAME_BYTES_MAX and transport.add(body, kind):
                step.add(body, kind)
    log(f"raft: {sum(transport.kinds.values())} frames of kinds {sorted(transport.kinds)}")
    return data


def port_free(p):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False


def cluster_traffic(bootstrap):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    from confluent_kafka import TopicPartition
    admin = AdminClient({"bootstrap.servers": bootstrap})
    small = {"internal.segment.bytes": "8192"}
    for f in admin.create_topics([NewTopic("r3", num_partitions=2, replication_factor=3, config=small),
                                  NewTopic("r3c", num_partitions=1, replication_factor=3,
                                           config={"cleanup.policy": "compact", **small})]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "zstd",
                  "enable.idempotence": True})
    for i in range(200):
        p.produce("r3", key=b"k%d" % (i % 9), value=b"replicated %d" % i)
        p.produce("r3c", key=b"k%d" % (i % 9), value=b"v%d" % i)
    p.flush(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "r3g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["r3"])
    got, deadline = 0, time.monotonic() + 20
    while got < 100 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    attempt(c.commit, asynchronous=False)
    c.close()
    for fut in [admin.create_partitions([NewPartitions("r3", 3)]),
                admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "r3", set_config={"retention.ms": "99999999"})]),
                admin.delete_records([TopicPartition("r3", 0, 5)])]:
        for f in fut.values():
            try:
                f.result(timeout=30)
            except Exception as e:  # noqa: BLE001
                log("admin:", e)


# ---- 3. Files from the data directories -------------------------------------------------

def batches(data):
    """(start, end, header fields) of each whole batch."""
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack(">qi", data[pos:pos + 12])
        end = pos + 12 + length
        if length < 49 or end > len(data):
            return
        attrs, = struct.unpack(">h", data[pos + 21:pos + 23])
        yield pos, end, {"base": base, "attrs": attrs}
        pos = end


def cut(data, limit=SEGMENT_BYTES_MAX):
    """The longest prefix of whole batches within `limit` (at least the first batch)."""
    end = 0
    for _, e, _ in batches(data):
        if end and e > limit:
            break
        end = e
    return data[:end]


def varint(b, pos):
    raw, shift = 0, 0
    while True:
        byte = b[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


def records(batch):
    """(key, value) of each record of an uncompressed batch."""
    out, pos = [], 61
    while pos < len(batch):
        length, pos = varint(batch, pos)
        end = pos + length
        p = pos + 1
        _, p = varint(batch, p)
        _, p = varint(batch, p)
        klen, p = varint(batch, p)
        key = None if klen < 0 else batch[p:p + klen]
        p += max(klen, 0)
        vlen, p = varint(batch, p)
        value = None if vlen < 0 else batch[p:p + vlen]
        out.append((key, value))
        pos = end
    return out


def segment_file(path):
    return struct.pack(">q", int(path.stem)) + cut(path.read_bytes())


def harvest(data_dirs, out):
    storage, store = Corpus(out, "storage_open"), Corpus(out, "raft_store_open")
    offsets, controller = Corpus(out, "offsets_records"), Corpus(out, "controller_records")
    record_batch = Corpus(out, "record_batch")
    for data in data_dirs:
        for part in sorted(p for p in data.rglob("*") if p.is_dir() and list(p.glob("*.log"))):
            segs = sorted(part.glob("*.log"))
            checkpoint = (part / "checkpoint").read_bytes() if (part / "checkpoint").exists() else b""
            state = (part / "raft.state").read_bytes() if (part / "raft.state").exists() else b""
            name = part.name.rsplit("-", 1)[0]
            files = [segment_file(s) for s in segs[:2]]
            flags = b"\x02" if name in ("compacted", "r3c", "__consumer_offsets") else b"\x00"
            storage.add(flags + SEPARATOR.join([checkpoint] + files), name, cap=2)
            store.add(b"\x00" + SEPARATOR.join([state, checkpoint] + files), name, cap=2)
            # A torn tail: the same directory cut mid-batch, without its checkpoint.
            torn = files[0][:len(files[0]) - 7] if len(files[0]) > 80 else files[0]
            storage.add(b"\x01" + SEPARATOR.join([b"", torn]), name + "-torn", cap=1)
            for seg in segs:
                blob = seg.read_bytes()
                for start, end, h in batches(blob):
                    codec = h["attrs"] & 7
                    record_batch.add(b"\x00" + blob[start:end], f"codec{codec}", cap=4)
                    if name == "__consumer_offsets" and not h["attrs"] & 0x20:
                        pairs = b"".join(
                            struct.pack(">I", len(k)) + k + (struct.pack(">i", -1) if v is None else
                                                              struct.pack(">i", len(v)) + v)
                            for k, v in records(blob[start:end]) if k is not None)
                        offsets.add(b"\x01" + pairs, "pairs", cap=6)
                    if name == "__cluster_metadata" and not h["attrs"] & 0x20 and codec == 0:
                        docs = [v for _, v in records(blob[start:end]) if v]
                        controller.add(b"\x01" + b"\n".join(docs), "json", cap=8)
                record_batch.add(b"\x01" + cut(blob, 4096), "blob", cap=6)
                if name == "__consumer_offsets":
                    offsets.add(b"\x00" + cut(blob), "log", cap=4)
                if name == "__cluster_metadata":
                    controller.add(b"\x02" + cut(blob), "log", cap=4)
    for c in (storage, store, offsets, controller, record_batch):
        log(f"{c.dir.name}: {sum(c.kinds.values())} seeds")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runnel", default=str(ROOT / "target/release/runnel"))
    ap.add_argument("--out", default=str(ROOT / "fuzz/corpus"))
    ap.add_argument("--keep", help="keep the data directories here")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    work = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="runnel-corpus-"))
    work.mkdir(parents=True, exist_ok=True)
    targets = ["broker_request", "request_decode", "raft_transport", "raft_step", "storage_open",
               "raft_store_open", "offsets_records", "controller_records", "record_batch"]
    for t in targets:
        shutil.rmtree(out / t, ignore_errors=True)
    try:
        single = capture_requests(args.runnel, out, work)
        cluster = capture_raft(args.runnel, out, work)
        harvest([single, cluster], out)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = sum(f.stat().st_size for t in targets for f in (out / t).glob("*"))
    log(f"done: {total} bytes in {out}")


if __name__ == "__main__":
    main()
