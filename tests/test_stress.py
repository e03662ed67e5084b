"""Many connections on every API at once never hang a broker or lose an acknowledged write
(the "No hangs" part of the issue "Reliability under hostile input and long runs").

Twenty-two client threads run at once against one broker, then against three brokers
(replication factor 3), for RUN_S seconds and at most OPS_MAX rounds each:

  * topic churn: CreateTopics, Metadata, CreatePartitions, IncrementalAlterConfigs,
    AlterConfigs, DescribeConfigs, DeleteRecords, ListOffsets, AlterPartitionReassignments
    (a real move between brokers in the cluster) and DeleteTopics, each on its own topics;
  * inspection: Metadata, DescribeCluster, ListGroups, DescribeGroups, DescribeConfigs of a
    broker, ApiVersions, ListPartitionReassignments, DescribeLogDirs, ConsumerGroupDescribe
    and ElectLeaders (preferred) on the topic being written;
  * group offsets: OffsetCommit and OffsetFetch from an admin client, OffsetDelete,
    DeleteGroups of an emptied group and of a group with members (NON_EMPTY_GROUP);
  * producer ids: raw InitProducerId (each id handed out once), and idempotent producers
    started and closed over and over;
  * idempotent acks=all producers and readers (a consumer, and raw Metadata, ListOffsets,
    Fetch and OffsetForLeaderEpoch) on one topic nobody deletes;
  * group members joining, committing and leaving, with the classic protocol (two groups)
    and with KIP-848's (`group.protocol=consumer`, one group).

librdkafka (confluent-kafka) sends what it has an API for; tests/kafka_wire.py sends the rest.
The clients run in a child process (this file, `load` mode) that ends with os._exit: a client
stuck on a hung broker cannot then hold up the test's own exit, and the child is killed if it
overruns. Afterwards the test checks that:

  * every request got an answer. A Kafka error code is an answer. A client-side timeout
    (ANSWER_S), a connection closed under a request, a record not acknowledged within
    message.timeout.ms, or a worker still inside a call when the run is over is not: each is
    listed with the worker, the API, when it was sent and how long it waited;
  * each broker answers ApiVersions on a new connection within 1 s;
  * every record an acks=all producer had acknowledged is at its offset (read back with raw
    Fetch from each partition's leader), and no record is there twice (the producers are
    idempotent);
  * each broker exits with 0 within SHUTDOWN_S of SIGTERM.

When something went unanswered, every broker thread's stack (gdb, if installed) is written
next to the broker logs in the test's tmp_path and named in the failure.
"""

import collections
import faulthandler
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

import pytest
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, ConsumerGroupTopicPartitions, Consumer,
                             KafkaError, KafkaException, Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
                                   OffsetSpec, ResourceType)

import kafka_wire as kw
from conftest import Broker, admin_client, cluster_port, wait_for, wait_for_topic
from test_admin_concurrency import init_producer_id

# alter_configs (AlterConfigs, deprecated in the client for IncrementalAlterConfigs) is sent on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RUN_S = 8.0  # new calls start only before this
OPS_MAX = 1000  # rounds per worker, so the run is bounded in count as well as time
RECORDS_MAX = 4000  # per steady producer (one record per round)
PACE_S = 0.005  # between the rounds of the raw loops, which would otherwise spin a core
ANSWER_S = 20.0  # a call not answered within this is a hang
LOAD_S = RUN_S + ANSWER_S + 30  # the child process is killed after this
SHUTDOWN_S = 20.0  # from SIGTERM to exit
LIVENESS_S = 1.0  # ApiVersions on a new connection, after the run
ELECTION_WAIT_MS = 5000  # ElectLeaders' timeout_ms
PARTITIONS = 6
DURABLE = "durable"  # written with acks=all, never deleted
CLASSIC_GROUPS = ["classic-0", "classic-1"]
KIP848_GROUP = "kip848-0"
# KIP-848 members move one step per heartbeat: every second rather than Kafka's 5 s, so that
# members joining and leaving within the run get partitions.
SETTINGS = {"group.consumer.heartbeat.interval.ms": "1000"}

# RUNNEL_STRESS_CLIENT_DEBUG=admin,protocol (librdkafka debug contexts), optionally followed by
# @<worker name prefix>, puts those clients' debug log into the load process's output
# (tmp_path / "load.log").
CLIENT_DEBUG = os.environ.get("RUNNEL_STRESS_CLIENT_DEBUG", "")


def client(w):
    """Client settings every worker's clients share: its name, and debug if asked for."""
    contexts, _, only = CLIENT_DEBUG.partition("@")
    return {"client.id": w, **({"debug": contexts} if contexts and w.startswith(only) else {})}


# librdkafka's own error codes that mean no answer came (the request timed out in the
# client, or the connection under it was lost).
NO_ANSWER = {KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


class NoAnswer(Exception):
    """A call went unanswered (already recorded); the worker stops."""


class Load:
    """What the workers saw: answers per API, Kafka errors, calls that got no answer, and
    the records acknowledged on DURABLE. `addresses` are the brokers' host:port."""

    def __init__(self, addresses):
        self.addresses = addresses
        self.bootstrap = ",".join(addresses)
        self.started = time.monotonic()
        self.deadline = self.started + RUN_S
        self.lock = threading.Lock()
        self.answers = collections.Counter()  # api -> answers, Kafka errors included
        self.errors = collections.Counter()  # "api error-name" -> count
        self.unanswered = []  # one line per call that got no answer
        self.crashed = []  # a worker's unexpected exception (a bad answer, or a bug here)
        self.fatal = []  # fatal client errors (an idempotent producer fenced by a bad answer)
        self.in_call = {}  # worker -> (api, started)
        self.acked = collections.defaultdict(dict)  # partition -> {offset: value}
        self.pids = set()
        self.rounds_done = {}  # worker -> rounds started
        self.finished = {}  # worker -> when it returned
        self.subject = {}  # worker -> the topic or group it works on now, named in its failures
        self.unacked = {}  # producing worker -> [records without an answer, the first one, when]
        self.threads = []
        self.noted_unfinished = False
        with kw.Conn(addresses[0]) as c:
            nodes = c.metadata_v1([])["brokers"]
        self.node_ids = sorted(n["node_id"] for n in nodes)
        port_index = {int(a.rsplit(":", 1)[1]): i for i, a in enumerate(addresses)}
        self.index_of = {n["node_id"]: port_index[n["port"]] for n in nodes}  # node id -> index in addresses

    def at(self, when):
        return f"t+{when - self.started:.1f}s"

    def rounds(self, w, count=OPS_MAX):
        """Round numbers until the run's deadline or `count`, whichever comes first."""
        for i in range(count):
            if time.monotonic() > self.deadline:
                return
            self.rounds_done[w] = i + 1
            yield i

    def answered(self, api, error=None):
        with self.lock:
            self.answers[api] += 1
            if error is not None:
                self.errors[f"{api} {error}"] += 1

    def no_answer(self, worker, api, waited_s, what):
        with self.lock:
            self.unanswered.append(f"{worker}: {api} sent at {self.at(time.monotonic() - waited_s)}, "
                                   f"no answer after {waited_s:.1f}s: {what}")

    def unacknowledged(self, worker, value, err):
        """A record that got no answer within message.timeout.ms: one line per worker, counted."""
        with self.lock:
            seen = self.unacked.setdefault(worker, [0, f"{value!r}: {err.name()}: {err.str()}",
                                                    self.at(time.monotonic())])
            seen[0] += 1

    def call(self, worker, api, fn, about=""):
        """Runs fn(), which sends requests of one API and waits (bounded) for the answers, and
        returns what it returns. A Kafka error is an answer (None is returned); no answer is
        recorded, with `about` and the worker's subject, and raises NoAnswer."""
        started = time.monotonic()
        with self.lock:
            self.in_call[worker] = (api, started)
        try:
            out = fn()
        except KafkaException as e:
            err = e.args[0]
            if err.code() not in NO_ANSWER:
                self.answered(api, err.name())
                return None
            what = f"{err.name()}: {err.str()}"
        except OSError as e:  # socket timeouts, closed connections, futures' TimeoutError
            what = f"{type(e).__name__}: {e}"
        else:
            self.answered(api)
            return out
        finally:
            with self.lock:
                self.in_call.pop(worker, None)
        about = " ".join(x for x in (self.subject.get(worker), about) if x)
        self.no_answer(worker, f"{api} ({about})" if about else api, time.monotonic() - started, what)
        raise NoAnswer

    def on_error(self, worker):
        """error_cb for a client: a fatal error is a failure, the others are noise."""
        def note(err):
            if err.fatal():
                self.note_fatal(worker, err)
        return note

    def note_fatal(self, worker, err):
        with self.lock:
            self.fatal.append(f"{worker} at {self.at(time.monotonic())}: {err.name()}: {err.str()}")

    def run(self, workers):
        """Runs every (name, fn) as fn(load, name) in its own thread; joins them (bounded) and
        records each thread still inside a call."""
        self.threads = [threading.Thread(target=self._worker, args=(fn, name), name=name, daemon=True)
                        for name, fn in workers]
        for t in self.threads:
            t.start()
        end = self.deadline + ANSWER_S + 15
        for t in self.threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
        self.note_unfinished()

    def note_unfinished(self):
        """Records, once, each worker thread still running when the run is over."""
        with self.lock:
            if self.noted_unfinished:
                return
            self.noted_unfinished = True
            for t in self.threads:
                if t.is_alive():
                    api, started = self.in_call.get(t.name, ("(between calls)", time.monotonic()))
                    self.unanswered.append(f"{t.name}: still inside {api} (sent at {self.at(started)}) "
                                           f"when the run was over")

    def _worker(self, fn, name):
        try:
            fn(self, name)
        except NoAnswer:
            pass
        except Exception:  # noqa: BLE001 - reported as a failure of the run
            with self.lock:
                self.crashed.append(f"{name}: {traceback.format_exc()}")
        self.finished[name] = self.at(time.monotonic())

    def report(self):
        with self.lock:
            unacked = [f"{w}: Produce: {n} records not acknowledged within message.timeout.ms, the first {first} "
                       f"(failed at {when})" for w, (n, first, when) in self.unacked.items()]
            return {"answers": dict(self.answers), "errors": dict(self.errors),
                    "unanswered": unacked + list(self.unanswered),
                    "crashed": list(self.crashed), "fatal": list(self.fatal), "pids": len(self.pids),
                    "workers": {w: f"{n} rounds, done at {self.finished.get(w, '-')}"
                                for w, n in self.rounds_done.items()},
                    "acked": {p: {o: v.decode() for o, v in acked.items()} for p, acked in self.acked.items()}}


class Wire:
    """A worker's raw connections, one per broker, opened on first use."""

    def __init__(self, load, worker):
        self.load, self.worker, self.conns = load, worker, {}

    def conn(self, broker):
        if broker not in self.conns:
            self.conns[broker] = kw.Conn(self.load.addresses[broker], timeout_s=ANSWER_S)
        return self.conns[broker]

    def request(self, api, broker, build, decode, flexible=False):
        """build(correlation id) -> request; the decoded answer (connection errors are NoAnswer)."""
        def send():
            c = self.conn(broker)
            return decode(c.request(build(c.next_correlation_id()), flexible_response_header=flexible))
        return self.load.call(self.worker, api, send, f"to {self.load.addresses[broker]}")


def one(futures):
    """The result of the one future in a dict of futures, waited for at most ANSWER_S."""
    [f] = futures.values()
    return f.result(timeout=ANSWER_S)


# ---------------------------------------------------------------------------------------------
# Workers: each is fn(load, w), w its name, and runs load.rounds(w).


def topic_churn(load, w):
    """Its own topics, through every topic API, deleted at the end of each round. In the
    cluster a replication factor 1 topic is moved to another broker and a factor 3 one has
    its replicas reordered; a single broker can only be asked to keep its own."""
    admin = admin_client(load.bootstrap, **client(w))
    wire = Wire(load, w)
    for i in load.rounds(w):
        topic = f"churn-{w}-{i}"
        load.subject[w] = f"topic {topic}"
        rf = 3 if len(load.addresses) == 3 and i % 2 else 1
        load.call(w, "CreateTopics", lambda: one(
            admin.create_topics([NewTopic(topic, 2, rf)], operation_timeout=10, request_timeout=15)))

        def visible():
            """Metadata until every partition has a leader: DeleteRecords and ListOffsets
            below are only sent once librdkafka knows the leaders."""
            end = time.monotonic() + ANSWER_S
            while True:
                t = admin.list_topics(topic, timeout=15).topics.get(topic)
                if t is not None and t.error is None and len(t.partitions) == 2 and all(
                        p.leader >= 0 for p in t.partitions.values()):
                    return
                if time.monotonic() > end:
                    raise TimeoutError(f"created, but without leaders in Metadata after {ANSWER_S}s: {t}")
                time.sleep(0.05)
        load.call(w, "Metadata", visible)
        load.call(w, "CreatePartitions", lambda: one(
            admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=10, request_timeout=15)))
        inc = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", str(3600000 + i), incremental_operation=AlterConfigOpType.SET)])
        load.call(w, "IncrementalAlterConfigs", lambda: one(admin.incremental_alter_configs([inc], request_timeout=15)))
        legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "1048576"})
        load.call(w, "AlterConfigs", lambda: one(admin.alter_configs([legacy], request_timeout=15)))
        described = ConfigResource(ResourceType.TOPIC, topic)
        load.call(w, "DescribeConfigs", lambda: one(admin.describe_configs([described], request_timeout=15)))
        load.call(w, "DeleteRecords", lambda: one(
            admin.delete_records([TopicPartition(topic, 0, OFFSET_END)], request_timeout=15, operation_timeout=10)))
        load.call(w, "ListOffsets", lambda: one(
            admin.list_offsets({TopicPartition(topic, 1): OffsetSpec.latest()}, request_timeout=15)))
        nodes = load.node_ids
        target = [random.choice(nodes)] if rf == 1 else random.sample(nodes, len(nodes))
        wire.request("AlterPartitionReassignments", i % len(load.addresses),
                     lambda cid: kw.alter_partition_reassignments_v0_request({(topic, 0): target}, cid, 15000),
                     kw.decode_alter_partition_reassignments_v0, flexible=True)
        load.call(w, "DeleteTopics", lambda: one(
            admin.delete_topics([topic], operation_timeout=10, request_timeout=15)))


def inspector(load, w):
    """Read-only admin requests, and preferred leader elections on DURABLE."""
    admin = admin_client(load.bootstrap, **client(w))
    wire = Wire(load, w)
    for i in load.rounds(w):
        b = i % len(load.addresses)
        load.call(w, "Metadata", lambda: admin.list_topics(timeout=15))
        load.call(w, "Metadata", lambda: one(admin.describe_topics(TopicCollection([DURABLE]), request_timeout=15)))
        load.call(w, "DescribeCluster", lambda: admin.describe_cluster(request_timeout=15).result(timeout=ANSWER_S))
        load.call(w, "ListGroups", lambda: admin.list_consumer_groups(request_timeout=15).result(timeout=ANSWER_S))
        group = random.choice(CLASSIC_GROUPS + [KIP848_GROUP])
        load.call(w, "DescribeGroups", lambda: one(admin.describe_consumer_groups([group], request_timeout=15)),
                  f"group {group}")
        node = ConfigResource(ResourceType.BROKER, str(load.node_ids[b]))
        load.call(w, "DescribeConfigs", lambda: one(admin.describe_configs([node], request_timeout=15)))
        wire.request("ApiVersions", b, lambda cid: kw.api_versions_request(3, cid), kw.decode_api_versions_v3)
        wire.request("ListPartitionReassignments", b, kw.list_partition_reassignments_v0_request,
                     kw.decode_list_partition_reassignments_v0, flexible=True)
        wire.request("DescribeLogDirs", b, kw.describe_log_dirs_v1_request, kw.decode_describe_log_dirs_v1)
        wire.request("ConsumerGroupDescribe", b, lambda cid: kw.consumer_group_describe_v0_request([KIP848_GROUP], cid),
                     kw.decode_consumer_group_describe_v0_first, flexible=True)
        # Raw, so that the broker's wait (timeout_ms) is shorter than the client's: librdkafka
        # sends socket.timeout.ms as timeout_ms and gives up after the same time itself, so an
        # election that cannot finish is answered just as the client stops waiting.
        _, elected = wire.request("ElectLeaders", b, lambda cid: kw.elect_leaders_v1_request(
            {DURABLE: [i % PARTITIONS]}, cid, timeout_ms=ELECTION_WAIT_MS), kw.decode_elect_leaders_v1)
        for code, _ in elected.values():
            load.answered("ElectLeaders(partition)", str(code))
        time.sleep(PACE_S * 4)


def group_offsets(load, w):
    """A group that only commits: offsets committed, read, deleted (OffsetDelete, sent to the
    coordinator) and the group deleted; then DeleteGroups of a group with members."""
    admin = admin_client(load.bootstrap, **client(w))
    wire = Wire(load, w)
    for i in load.rounds(w):
        group = f"offsets-{w}-{i}"
        load.subject[w] = f"group {group}"
        tps = [TopicPartition(DURABLE, p, 1) for p in range(2)]
        load.call(w, "OffsetCommit", lambda: one(
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)], request_timeout=15)))
        load.call(w, "OffsetFetch", lambda: one(
            admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=15)))
        desc = load.call(w, "DescribeGroups", lambda: one(admin.describe_consumer_groups([group], request_timeout=15)))
        b = load.index_of.get(desc.coordinator.id, 0) if desc is not None and desc.coordinator else 0
        wire.request("OffsetDelete", b, lambda cid: kw.offset_delete_v0_request(group, {DURABLE: [0]}, cid),
                     kw.decode_offset_delete_v0)
        load.call(w, "DeleteGroups", lambda: one(admin.delete_consumer_groups([group], request_timeout=15)))
        busy = random.choice(CLASSIC_GROUPS + [KIP848_GROUP])
        load.subject[w] = f"group {busy}"
        load.call(w, "DeleteGroups", lambda: one(admin.delete_consumer_groups([busy], request_timeout=15)))


def producer_ids(load, w):
    """Raw InitProducerId (no transactional id) round-robin over the brokers: each id once."""
    wire = Wire(load, w)
    for i in load.rounds(w):
        error, pid = load.call(w, "InitProducerId", lambda: init_producer_id(wire.conn(i % len(load.addresses))))
        if error != 0:
            load.answered("InitProducerId(error)", str(error))
        else:
            with load.lock:
                if pid in load.pids:
                    load.crashed.append(f"{w}: producer id {pid} handed out twice")
                load.pids.add(pid)
        time.sleep(PACE_S)


def new_producer(load, w):
    return Producer({"bootstrap.servers": load.bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 5, "message.timeout.ms": int(ANSWER_S * 1000) - 5000,
                     "request.timeout.ms": 10000, "error_cb": load.on_error(w), **client(w)})


def produce(load, w, producer, partition, value):
    """Queues one record; its acknowledgement lands in load.acked."""
    def delivered(err, msg):
        if err is None:
            load.answered("Produce")
            with load.lock:
                load.acked[msg.partition()][msg.offset()] = msg.value()
        elif err.code() in NO_ANSWER:
            load.unacknowledged(w, msg.value(), err)
        else:
            load.answered("Produce", err.name())
    while True:
        try:
            producer.produce(DURABLE, value=value, partition=partition, on_delivery=delivered)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)


def finish_producing(load, w, producer):
    """flush (bounded), then close; records still unacknowledged are a failure."""
    left = load.call(w, "Produce(flush)", lambda: producer.flush(ANSWER_S))
    if left:
        load.no_answer(w, "Produce", ANSWER_S, f"{left} records unacknowledged after flush")
        raise NoAnswer
    load.call(w, "Produce(close)", producer.close)


def steady_producer(load, w):
    """One idempotent acks=all producer writing "<worker> <n>" round-robin over DURABLE's partitions."""
    producer = new_producer(load, w)
    for n in load.rounds(w, RECORDS_MAX):
        produce(load, w, producer, n % PARTITIONS, f"{w} {n}".encode())
        time.sleep(0.002)
    finish_producing(load, w, producer)


def producer_churn(load, w):
    """Idempotent producers started (InitProducerId), used for a few records and closed."""
    for i in load.rounds(w):
        producer = new_producer(load, w)
        for k in range(5):
            produce(load, w, producer, (i + k) % PARTITIONS, f"{w} {i} {k}".encode())
        finish_producing(load, w, producer)


def raw_reader(load, w):
    """Raw Metadata (for the leader), ListOffsets, Fetch and OffsetForLeaderEpoch on DURABLE."""
    wire = Wire(load, w)
    for i in load.rounds(w):
        p = i % PARTITIONS
        md = wire.request("Metadata", i % len(load.addresses), lambda cid: kw.metadata_v1_request([DURABLE], cid),
                          kw.decode_metadata_v1)
        [leader] = [q["leader_id"] for q in md["topics"][0]["partitions"] if q["partition_index"] == p]
        b = load.index_of.get(leader, 0)
        latest = wire.request("ListOffsets", b, lambda cid: kw.list_offsets_v1_request(DURABLE, p, kw.LATEST, cid),
                              kw.decode_list_offsets_v1)["topics"][0]["partitions"][0]
        start = max(0, latest["offset"] - 20)
        wire.request("Fetch", b, lambda cid: kw.fetch_v4_request(DURABLE, p, start, cid, max_wait_ms=200),
                     kw.decode_fetch_v4)
        wire.request("OffsetForLeaderEpoch", b, lambda cid: kw.offset_for_leader_epoch_v2_request(DURABLE, [p], cid),
                     kw.decode_offset_for_leader_epoch_v2)
        time.sleep(PACE_S)


def check_message(load, w, api, m):
    """Counts a consumed message; a fatal error in it is a failure."""
    err = m.error()
    if err is not None and (err.fatal() or err.code() == KafkaError._FATAL):
        load.note_fatal(w, err)
    load.answered(api, err.name() if err is not None else None)


def fetching_consumer(load, w):
    """A consumer reading DURABLE from the start (assigned, no group) until the deadline."""
    consumer = Consumer({"bootstrap.servers": load.bootstrap, "group.id": f"reader-{w}", "enable.auto.commit": False,
                         "error_cb": load.on_error(w), **client(w)})
    consumer.assign([TopicPartition(DURABLE, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    for _ in load.rounds(w):
        for m in consumer.consume(500, timeout=0.2):
            check_message(load, w, "Fetch(consumer records)", m)
    load.call(w, "Fetch(consumer close)", consumer.close)


def group_member(load, w, group, protocol):
    """Joins `group`, waits (bounded) for an assignment, reads a little, commits what it read
    and leaves; over and over."""
    config = {"bootstrap.servers": load.bootstrap, "group.id": group, "group.protocol": protocol,
              "enable.auto.commit": False, "auto.offset.reset": "earliest", "error_cb": load.on_error(w),
              **client(w)}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 10000})
    join_api = "JoinGroup" if protocol == "classic" else "ConsumerGroupHeartbeat"
    load.subject[w] = f"group {group}"
    for _ in load.rounds(w):
        assigned = threading.Event()
        consumer = Consumer(config)
        consumer.subscribe([DURABLE], on_assign=lambda _c, _ps: assigned.set())

        def join():
            end = time.monotonic() + ANSWER_S
            while not assigned.is_set():
                if time.monotonic() > end:
                    raise TimeoutError(f"no assignment within {ANSWER_S}s of subscribing")
                m = consumer.poll(0.1)
                if m is not None:
                    check_message(load, w, "Fetch(member records)", m)
        load.call(w, join_api, join)
        read = {}
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = consumer.poll(0.1)
            if m is not None:
                check_message(load, w, "Fetch(member records)", m)
                if m.error() is None:
                    read[m.partition()] = m.offset() + 1
        if read:
            offsets = [TopicPartition(DURABLE, p, o) for p, o in read.items()]
            load.call(w, "OffsetCommit", lambda: consumer.commit(offsets=offsets, asynchronous=False))
        load.call(w, "LeaveGroup" if protocol == "classic" else "ConsumerGroupHeartbeat(leave)", consumer.close)


def classic_member(load, w):
    group_member(load, w, CLASSIC_GROUPS[int(w.rsplit("-", 1)[1]) % len(CLASSIC_GROUPS)], "classic")


def kip848_member(load, w):
    group_member(load, w, KIP848_GROUP, "consumer")


WORKERS = [(topic_churn, 3), (inspector, 2), (group_offsets, 1), (producer_ids, 2), (producer_churn, 1),
           (steady_producer, 3), (raw_reader, 2), (fetching_consumer, 1), (classic_member, 4), (kip848_member, 3)]


def load_main(cfg):
    """The child process: runs WORKERS against cfg["addresses"], writes the report to cfg["out"]
    and exits at once, whatever clients are still open."""
    # Last resort, should a thread hold the interpreter inside a client's C code: every
    # thread's Python stack goes to load.log and the process exits (faulthandler needs no GIL).
    faulthandler.dump_traceback_later(LOAD_S - 4, exit=True)
    load = Load(cfg["addresses"])
    written = threading.Lock()

    def write_report(main_blocked=None):
        with written:
            report = load.report()
            report["main_blocked"] = main_blocked
            pathlib.Path(cfg["out"]).write_text(json.dumps(report))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    main = threading.get_ident()

    def watchdog():
        # The workers' calls are bounded, and Load.run waits for them a bounded time; what is
        # not bounded is a client's destructor (librdkafka's rd_kafka_destroy, which a
        # consumer that was never closed runs as a close) wherever Python's garbage
        # collector happens to run it, the main thread included. The report is written
        # anyway, with the main thread's stack.
        time.sleep(max(0.0, load.deadline + ANSWER_S + 15 + 5 - time.monotonic()))
        frame = sys._current_frames().get(main)
        load.note_unfinished()
        write_report("".join(traceback.format_stack(frame)) if frame else "(no stack)")

    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    load.run([(f"{fn.__name__}-{k}", fn) for fn, n in WORKERS for k in range(n)])
    write_report()


# ---------------------------------------------------------------------------------------------
# The test process.


def coordinators_found(brokers):
    """Whether every broker answers FindCoordinator for the test's groups without an error
    (the first FindCoordinator creates __consumer_offsets)."""
    groups = CLASSIC_GROUPS + [KIP848_GROUP, "offsets-0"]
    for b in brokers:
        with kw.Conn(b.bootstrap) as c:
            for g in groups:
                r = c.request(kw.find_coordinator_v1_request(g, c.next_correlation_id()))
                if kw.decode_find_coordinator_v1(r)[0] != 0:
                    return False
    return True


def preferred_leaders_lead(brokers, topics):
    """Asks for preferred leader elections of every partition of `topics` (raw ElectLeaders,
    bounded wait) and tells whether every broker's Metadata names the preferred leader (the
    first replica) of each, and the same partitions."""
    def partitions(b):
        with kw.Conn(b.bootstrap) as c:
            md = c.metadata_v1(topics)["topics"]
        return {(t["name"], p["partition_index"]): (p["leader_id"], p["replicas"]) for t in md
                for p in t["partitions"] or []}
    wanted = collections.defaultdict(list)
    for topic, p in partitions(brokers[0]):
        wanted[topic].append(p)
    with kw.Conn(brokers[0].bootstrap, timeout_s=15) as c:
        c.request(kw.elect_leaders_v1_request(wanted, c.next_correlation_id(), timeout_ms=5000))
    seen = [partitions(b) for b in brokers]
    return all(s.keys() == seen[0].keys() and all(leader == replicas[0] for leader, replicas in s.values())
               for s in seen)


def settle(brokers):
    """Waits (bounded) until the group coordinators are found and, in a cluster, every
    partition of __consumer_offsets and DURABLE is led by its preferred leader, so that no
    leadership moves by itself during the run (leader.imbalance.check.interval.seconds).

    The reason is a librdkafka 2.16 bug, not a broker behaviour to hide: its admin group calls
    (DescribeConsumerGroups, AlterConsumerGroupOffsets, DeleteConsumerGroups...) retry a
    FindCoordinator answered COORDINATOR_NOT_AVAILABLE twice, 100 ms apart, and then wait out
    their whole request timeout without failing, although every FindCoordinator was answered
    within milliseconds (seen with RUNNEL_STRESS_CLIENT_DEBUG=admin,protocol). The broker
    answers so while __consumer_offsets is created and while one of its partitions has no
    leader; such a call would be counted as unanswered."""
    diagnostics = lambda: "\n".join(b.log_tail(20) for b in brokers)  # noqa: E731
    wait_for(lambda: coordinators_found(brokers), "every broker finding group coordinators", 30, diagnostics)
    if len(brokers) > 1:
        wait_for(lambda: preferred_leaders_lead(brokers, ["__consumer_offsets", DURABLE]),
                 "preferred leaders leading", 60, diagnostics)


def run_load(brokers, tmp_path):
    """Runs load_main in a child process (bounded by LOAD_S): its report, or None if it had
    to be killed. Its output (librdkafka's log lines) goes to tmp_path / "load.log"."""
    out = tmp_path / "load.json"
    cfg = {"addresses": [b.bootstrap for b in brokers], "out": str(out)}
    with open(tmp_path / "load.log", "w") as log:
        child = subprocess.Popen([sys.executable, __file__, "load", json.dumps(cfg)], stdout=log,
                                 stderr=subprocess.STDOUT, cwd=pathlib.Path(__file__).parent)
        try:
            child.wait(timeout=LOAD_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
            return None
    return json.loads(out.read_text()) if child.returncode == 0 and out.exists() else None


def api_versions_answered(broker):
    """None if the broker answers ApiVersions on a new connection within LIVENESS_S, else why not."""
    started = time.monotonic()
    try:
        with kw.Conn(broker.bootstrap, timeout_s=LIVENESS_S) as c:
            c.api_versions(3)
    except OSError as e:
        return f"{broker.bootstrap}: no ApiVersions answer within {LIVENESS_S}s ({type(e).__name__}: {e})"
    took = time.monotonic() - started
    return None if took <= LIVENESS_S else f"{broker.bootstrap}: ApiVersions answered after {took:.2f}s"


def read_partition(brokers, p):
    """{offset: value} of DURABLE partition p up to its high watermark, by raw ListOffsets and
    Fetch from the leader that broker 0 names (retried, bounded, while leadership moves)."""
    by_port = {b.port: b for b in brokers}
    stored, last = {}, {}

    def done():
        with kw.Conn(brokers[0].bootstrap) as c:
            md = c.metadata_v1([DURABLE])
        ports = {n["node_id"]: n["port"] for n in md["brokers"]}
        [part] = [q for q in md["topics"][0]["partitions"] if q["partition_index"] == p]
        last["metadata"] = part
        leader = by_port.get(ports.get(part["leader_id"]))
        if leader is None:
            return False
        with kw.Conn(leader.bootstrap) as c:
            end = c.list_offsets_v1(DURABLE, p, kw.LATEST)
            last["end"] = end
            if end["error_code"] != 0:
                return False
            offset = max(stored, default=-1) + 1
            while offset < end["offset"]:
                fetched = c.fetch_v4(DURABLE, p, offset)
                last["fetch"] = {k: v for k, v in fetched.items() if k != "records"}
                if fetched["error_code"] != 0:
                    return False
                records = [r for r in kw.decode_record_batches(fetched["records"]) if r["offset"] >= offset]
                if not records:
                    return False
                stored.update({r["offset"]: r["value"].decode() for r in records})
                offset = max(stored) + 1
        return True

    def attempt():
        try:
            return done()
        except OSError as e:
            last["error"] = repr(e)
            return False
    wait_for(attempt, f"partition {p} of {DURABLE} read back", 30, lambda: f"last answers: {last}", 0.2)
    return stored


def lost_or_doubled(brokers, acked):
    """What is wrong with DURABLE: acknowledged records missing or elsewhere, records stored twice."""
    problems = []
    for p in range(PARTITIONS):
        stored = read_partition(brokers, p)
        theirs = {int(o): v for o, v in acked.get(str(p), {}).items()}
        missing = {o: v for o, v in theirs.items() if stored.get(o) != v}
        if missing:
            o, v = min(missing.items())
            problems.append(f"partition {p}: {len(missing)} of {len(theirs)} acknowledged records not at their "
                            f"offset ({len(stored)} stored), e.g. {v!r} at {o}: {stored.get(o)!r}")
        doubled = [v for v, n in collections.Counter(stored.values()).items() if n > 1]
        if doubled:
            problems.append(f"partition {p}: {len(doubled)} records stored twice, e.g. {doubled[:3]}")
    return problems


def thread_stacks(brokers, out_dir):
    """Every thread's stack of each running broker, written to out_dir; the file names."""
    if shutil.which("gdb") is None:
        return ["(gdb is not installed: no stacks)"]
    files = []
    for b in brokers:
        if b.proc is None or b.proc.poll() is not None:
            continue
        path = out_dir / f"stacks-{b.port}.txt"
        with open(path, "w") as out:
            try:
                subprocess.run(["gdb", "-p", str(b.proc.pid), "-batch", "-ex", "thread apply all bt"],
                               stdout=out, stderr=subprocess.STDOUT, timeout=120)
            except subprocess.TimeoutExpired:
                out.write("gdb did not finish within 120 s\n")
        files.append(str(path))
    return files


def stop_all(brokers):
    """SIGTERM to every broker at once; each must exit with 0 within SHUTDOWN_S. The problems."""
    for b in brokers:
        b.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    problems = []
    for b in brokers:
        try:
            code = b.proc.wait(timeout=max(0.0, sent + SHUTDOWN_S - time.monotonic()))
        except subprocess.TimeoutExpired:
            stacks = thread_stacks([b], b.log_path.parent)
            b.kill9()
            problems.append(f"{b.bootstrap} still running {SHUTDOWN_S}s after SIGTERM; stacks: {stacks}")
            continue
        if code != 0:
            problems.append(f"{b.bootstrap} exited with {code} after SIGTERM")
    return problems


def create_durable(brokers):
    """DURABLE, replicated on every broker. (The client is gone once this returns, so it does
    not log connection failures once the brokers are stopped.)"""
    admin = admin_client(",".join(b.bootstrap for b in brokers))
    admin.create_topics([NewTopic(DURABLE, PARTITIONS, len(brokers))],
                        operation_timeout=30, request_timeout=30)[DURABLE].result(timeout=30)
    wait_for_topic(admin, DURABLE, PARTITIONS)


def registered_brokers(brokers):
    try:
        return len(admin_client(",".join(b.bootstrap for b in brokers)).list_topics(timeout=5).brokers)
    except KafkaException:  # a broker still starting
        return 0


def stress(brokers, tmp_path):
    """Creates DURABLE, runs the load against `brokers`, and fails with everything that went wrong."""
    create_durable(brokers)
    settling = time.monotonic()
    settle(brokers)
    settled_s = time.monotonic() - settling
    report = run_load(brokers, tmp_path)
    load_log = tmp_path / "load.log"
    if report is None:
        failures = [f"the load process did not finish within {LOAD_S}s or failed; its output: {load_log}"]
        report = {"answers": {}, "errors": {}, "acked": {}, "pids": 0, "workers": {}}
    else:
        failures = [f"no answer: {u}" for u in report["unanswered"]]
        failures += [f"worker failed: {c}" for c in report["crashed"]]
        failures += [f"fatal client error: {f}" for f in report["fatal"]]
    failures += [f"not live: {why}" for b in brokers if (why := api_versions_answered(b))]
    if failures:
        failures += [f"broker stacks: {f}" for f in thread_stacks(brokers, tmp_path)]
    if not any(f.startswith("not live") for f in failures):
        failures += [f"acknowledged data: {p}" for p in lost_or_doubled(brokers, report["acked"])]
    failures += [f"shutdown: {p}" for p in stop_all(brokers)]

    if report.get("main_blocked"):
        print(f"the load process's main thread was still busy after the run, in:\n{report['main_blocked']}")
    answers = report["answers"]
    summary = (f"{len(brokers)} broker(s), settled in {settled_s:.1f}s: {sum(answers.values())} answers, "
               f"{sum(len(a) for a in report['acked'].values())} acknowledged records, {report['pids']} producer ids\n"
               f"answers: {dict(sorted(answers.items()))}\nKafka errors: {dict(sorted(report['errors'].items()))}\n"
               f"workers: {report.get('workers')}")
    print(summary)
    logs = "\n".join(f"--- {b.log_path}\n{b.log_tail(30)}" for b in brokers)
    assert not failures, "\n".join(failures[:40]) + f"\n{summary}\nclient log: {load_log}\n{logs}"

    # The run exercised what it claims to: every API got answers.
    for api in ["CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs", "IncrementalAlterConfigs",
                "AlterConfigs", "DeleteRecords", "ListOffsets", "Metadata", "DescribeCluster", "ListGroups",
                "DescribeGroups", "DeleteGroups", "OffsetDelete", "ElectLeaders", "AlterPartitionReassignments",
                "ListPartitionReassignments", "DescribeLogDirs", "ConsumerGroupDescribe", "InitProducerId",
                "Produce", "Fetch", "OffsetForLeaderEpoch", "OffsetCommit", "OffsetFetch", "JoinGroup", "LeaveGroup",
                "ConsumerGroupHeartbeat"]:
        assert answers.get(api, 0) > 0, f"no {api} answered\n{summary}"


def test_one_broker_answers_every_api_from_many_connections_at_once(tmp_path):
    broker = Broker(tmp_path / "data", settings=SETTINGS).start()
    try:
        stress([broker], tmp_path)
    finally:
        broker.kill9()


def test_three_brokers_answer_every_api_from_many_connections_at_once(tmp_path):
    port = cluster_port(3)
    voters = ",".join(f"{i}@127.0.0.1:{port + 1000 + i}" for i in range(3))
    brokers = [Broker(tmp_path / f"b{i}", port=port + i,
                      settings={**SETTINGS, "node.id": str(i), "controller.quorum.voters": voters,
                                "default.replication.factor": "3", "offsets.topic.replication.factor": "3"})
               for i in range(3)]
    try:
        for b in brokers:
            b.start()
        wait_for(lambda: registered_brokers(brokers) == 3, "3 registered brokers", 30,
                 lambda: "\n".join(b.log_tail(20) for b in brokers))
        stress(brokers, tmp_path)
    finally:
        for b in brokers:
            b.kill9()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "load":
        load_main(json.loads(sys.argv[2]))
    else:
        sys.exit(f"usage: {sys.argv[0]} load '<json config>'")
