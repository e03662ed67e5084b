"""Consumer-group integration tests with librdkafka (confluent-kafka Python).

Group members run as separate Python processes, so that one can be killed with SIGKILL.
They run this same file (`python tests/test_librdkafka_groups.py member '<json>'`, see
`member_main`). A member subscribes, appends one "partition offset value" line per record to
its own file, and after each batch commits what it processed synchronously
(enable.auto.commit=false). It also writes a "<out>.log" file of events: ASSIGN/REVOKE/LOST,
COMMIT, COMMITERR <error name>, ERROR <name> (from error_cb) and CLOSED. It stops when
"<out>.stop" exists (closing the consumer, which leaves the group) or after max_seconds.

All expectations were checked against Apache Kafka 4.3.1 (RUNNEL_TEST_BOOTSTRAP=127.0.0.1:49092,
group.initial.rebalance.delay.ms=0). Against our own broker the `broker` fixture sets nothing
special: runnel has no initial rebalance delay.

The helpers at the top (Member, produce_values, wait_group, wait_covered, ...) are also used by
tests/test_franz_go_groups.py, whose members are franz-go processes.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from conftest import admin_client, create_topic, unique_topic

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
MEMBER_MAX_SECONDS = 240  # every member process exits on its own after this
WAIT_S = 60.0  # bound for each "wait until ..." below; a session timeout is 6 s


# ---------------------------------------------------------------------------------------------
# The member process.


def member_main(cfg):
    """Body of one group member process. `cfg` is the JSON dict given by `Member`."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    out_path, topic = cfg["out"], cfg["topic"]
    log = open(out_path + ".log", "a", buffering=1)

    def note(*words):
        log.write(" ".join(str(w) for w in words) + "\n")

    fatal = []

    def on_error(err):
        note("ERROR", err.name(), err.code(), "fatal" if err.fatal() else "-", err.str())
        if err.fatal():
            fatal.append(err)

    pending = {}  # partition -> next offset, processed but not yet committed

    def commit(parts):
        offsets = [TopicPartition(topic, p, pending[p]) for p in parts if p in pending]
        if not offsets:
            return
        try:
            c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            note("COMMITERR", e.args[0].name(), e.args[0].str())
            return
        for tp in offsets:
            if pending.get(tp.partition) == tp.offset:
                del pending[tp.partition]
        note("COMMIT", " ".join(f"{tp.partition}:{tp.offset}" for tp in offsets))

    def parts_of(ps):
        return json.dumps(sorted(p.partition for p in ps))

    def on_assign(_c, ps):
        note("ASSIGN", parts_of(ps))

    def on_revoke(_c, ps):
        note("REVOKE", parts_of(ps))
        revoked = [p.partition for p in ps]
        commit(revoked)  # the generation is still valid while revoking
        for p in revoked:
            pending.pop(p, None)

    def on_lost(_c, ps):
        note("LOST", parts_of(ps))
        for p in ps:
            pending.pop(p.partition, None)

    conf = {
        "bootstrap.servers": cfg["bootstrap"],
        "group.id": cfg["group"],
        "client.id": cfg["name"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 1000,
        "partition.assignment.strategy": cfg["strategy"],
        "error_cb": on_error,
    }
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    conf.update(cfg.get("extra") or {})
    c = Consumer(conf)
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    note("STARTED", os.getpid())
    stop_path = out_path + ".stop"
    deadline = time.monotonic() + cfg["max_seconds"]
    with open(out_path, "a") as out:
        while time.monotonic() < deadline and not os.path.exists(stop_path) and not fatal:
            msgs = c.consume(num_messages=200, timeout=0.3)
            for m in msgs:
                if m.error():
                    # A fatal error (e.g. a fenced static member) arrives as code _FATAL, with the
                    # broker's error only in the text; fatal() is not set on it.
                    is_fatal = m.error().fatal() or m.error().code() == KafkaError._FATAL
                    note("MSGERROR", m.error().name(), "fatal" if is_fatal else "-", m.error().str())
                    if is_fatal:
                        fatal.append(m.error())
                    continue
                out.write(f"{m.partition()} {m.offset()} {m.value().decode()}\n")
                pending[m.partition()] = m.offset() + 1
            out.flush()  # lines reach the OS before the commit: SIGKILL loses nothing committed
            commit(list(pending))
    if fatal:
        note("FATAL", fatal[0].name())
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - closing a fenced consumer may raise
            note("CLOSEERR", repr(e))
        sys.exit(3)
    commit(list(pending))  # retry a commit that failed on the last round
    c.close()
    note("CLOSED")


# ---------------------------------------------------------------------------------------------
# Helpers for the test process (also used by test_franz_go_groups.py).


class Member:
    """One member process. `argv_for(cfg)` builds its command line; the default runs
    `member_main` from this file. Output: `out` (records) and `out.log` (events)."""

    def __init__(self, name, workdir, argv):
        self.name = name
        self.out = pathlib.Path(workdir) / f"{name}.out"
        self.argv = argv
        self.proc = None
        self.stdout_path = pathlib.Path(workdir) / f"{name}.stdout"

    @classmethod
    def librdkafka(cls, name, workdir, bootstrap, group, topic, strategy, instance_id=None, extra=None,
                   max_seconds=MEMBER_MAX_SECONDS):
        m = cls(name, workdir, None)
        cfg = dict(name=name, out=str(m.out), bootstrap=bootstrap, group=group, topic=topic,
                   strategy=strategy, instance_id=instance_id, extra=extra or {}, max_seconds=max_seconds)
        m.argv = [sys.executable, str(pathlib.Path(__file__).resolve()), "member", json.dumps(cfg)]
        return m

    def start(self):
        with open(self.stdout_path, "ab") as so:
            self.proc = subprocess.Popen(self.argv, stdout=so, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s=30.0):
        """Ask the member to leave cleanly (stop file) and wait for it to exit; returns rc."""
        pathlib.Path(str(self.out) + ".stop").touch()
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"member {self.name} did not exit within {timeout_s}s of its stop file\n"
                                 + self.describe())

    def kill9(self):
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def records(self):
        """[(partition, offset, value)] this member processed (re-deliveries included)."""
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        recs = []
        for line in text.splitlines():
            parts = line.split(" ")
            if len(parts) == 3:  # a line cut by SIGKILL has fewer fields
                recs.append((int(parts[0]), int(parts[1]), parts[2]))
        return recs

    def events(self):
        try:
            return pathlib.Path(str(self.out) + ".log").read_text().splitlines()
        except FileNotFoundError:
            return []

    def describe(self):
        def tail(path, n=40):
            try:
                return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-n:])
            except FileNotFoundError:
                return ""
        rc = None if self.proc is None else self.proc.poll()
        return (f"--- member {self.name} rc={rc} records={len(self.records())} ---\n"
                f"{tail(str(self.out) + '.log')}\n--- {self.name} stdout ---\n{tail(self.stdout_path)}\n")


@pytest.fixture
def members():
    """A list the test appends its Members to; every one still running is SIGKILLed at the end."""
    ms = []
    yield ms
    for m in ms:
        m.kill9()


def produce_values(bootstrap, topic, values, partitions=PARTITIONS, timeout_s=60.0):
    """Produce value i to partition i % partitions (acks=all); returns {partition: [offsets]}."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors, placed = [], {}

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            placed.setdefault(msg.partition(), []).append(msg.offset())

    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions, on_delivery=on_delivery)
        p.poll(0)
    left = p.flush(timeout_s)
    assert left == 0 and not errors, f"produce: {left} undelivered, errors {errors[:5]}"
    return placed


def group_description(admin, group, timeout_s=10.0):
    return admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout=timeout_s + 5)


def wait_group(admin, group, n_members, partitions=PARTITIONS, ms=(), timeout_s=WAIT_S):
    """Bounded wait until DescribeGroups shows the group Stable with `n_members` members whose
    assignments together cover `partitions` distinct partitions. Returns the description."""
    from confluent_kafka import ConsumerGroupState

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            d = group_description(admin, group)
        except Exception as e:  # noqa: BLE001 - e.g. coordinator loading; retried
            last = repr(e)
            time.sleep(0.3)
            continue
        assigned = [tp.partition for m in d.members for tp in (m.assignment.topic_partitions or [])]
        last = (d.state, [(m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions or []))
                          for m in d.members])
        if d.state == ConsumerGroupState.STABLE and len(d.members) == n_members \
                and len(assigned) == partitions and len(set(assigned)) == partitions:
            return d
        time.sleep(0.3)
    raise AssertionError(f"group {group} not Stable with {n_members} members covering {partitions} "
                         f"partitions after {timeout_s}s; last: {last}\n" + "".join(m.describe() for m in ms))


def processed_values(ms):
    return {v for m in ms for (_, _, v) in m.records()}


def wait_covered(ms, expected, timeout_s=WAIT_S, what="records"):
    """Bounded wait until the members together processed every value in `expected`."""
    expected = set(expected)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        missing = expected - processed_values(ms)
        if not missing:
            return
        time.sleep(0.2)
    missing = expected - processed_values(ms)
    raise AssertionError(f"{len(missing)} of {len(expected)} {what} never processed after {timeout_s}s, "
                         f"e.g. {sorted(missing)[:5]}\n" + "".join(m.describe() for m in ms))


def wait_for(cond, what, timeout_s=WAIT_S, ms=()):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n" + "".join(m.describe() for m in ms))


def committed_offsets(admin, group, topic=None, partitions=None, timeout_s=15.0, metadata=True):
    """{(topic, partition): (offset, metadata)} from AdminClient.list_consumer_group_offsets.

    With metadata=False the metadata is not read (None). Read it only for metadata that
    librdkafka committed: librdkafka copies the fetched metadata without a terminating NUL,
    and the Python binding reads it as a C string, so metadata from another client (franz-go
    commits its 47-byte member id) comes back with whatever bytes follow it on the heap."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    tps = None if partitions is None else [TopicPartition(topic, p) for p in partitions]
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                            request_timeout=timeout_s)[group]
    res = fut.result(timeout=timeout_s + 5)
    out = {}
    for tp in res.topic_partitions:
        assert tp.error is None, f"offset fetch error for {tp}: {tp.error}"
        out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata if metadata else None)
    return out


def run_join_leave_crash_scenario(bootstrap, topic, group, make_member, ms, per_batch=180):
    """The shared scenario: members A, B, C join; A leaves cleanly; B is SIGKILLed; D joins.
    Records are produced in a batch after each step. `make_member(name)` returns a Member.
    Asserts nothing was skipped, offsets are covered and committed offsets reach the end."""
    admin = admin_client(bootstrap)
    create_topic(admin, topic, PARTITIONS)
    produced = []
    placed = {}

    def produce_batch(b):
        vals = [f"b{b}-{i}" for i in range(per_batch)]
        for p, offs in produce_values(bootstrap, topic, vals).items():
            placed.setdefault(p, []).extend(offs)
        produced.extend(vals)
        return vals

    a, b, c = (make_member(n) for n in ("A", "B", "C"))
    ms.extend([a, b, c])
    for m in (a, b, c):
        m.start()
    wait_group(admin, group, 3, ms=ms)
    produce_batch(0)
    wait_covered(ms, produced, what="batch 0 records")
    wait_for(lambda: all(m.records() for m in (a, b, c)), "each of A, B, C to process a record", ms=ms)

    assert a.stop() == 0, "A did not close cleanly\n" + a.describe()
    wait_group(admin, group, 2, ms=ms)  # a clean leave rebalances at once (LeaveGroup)
    produce_batch(1)
    wait_covered(ms, produced, what="records after A left")

    b.kill9()  # no LeaveGroup: the coordinator expires B after session.timeout.ms
    produce_batch(2)
    wait_covered(ms, produced, what="records after B crashed")
    wait_group(admin, group, 1, ms=ms)

    d = make_member("D")
    ms.append(d)
    d.start()
    wait_group(admin, group, 2, ms=ms)
    produce_batch(3)
    wait_covered(ms, produced, what="records after D joined")

    # Every processed record is committed once the owners have caught up: the committed
    # offset of each partition reaches its end.
    ends = {p: max(offs) + 1 for p, offs in placed.items()}
    assert set(ends) == set(range(PARTITIONS))

    def all_committed():
        got = committed_offsets(admin, group, topic, list(range(PARTITIONS)), metadata=False)
        return all(got[(topic, p)][0] == ends[p] for p in ends)

    wait_for(all_committed, f"committed offsets to reach the log ends {ends}", ms=ms)
    for m in (c, d):
        assert m.stop() == 0, f"{m.name} did not close cleanly\n" + m.describe()

    values = processed_values(ms)
    assert values == set(produced), f"missing {sorted(set(produced) - values)[:5]}, extra {sorted(values - set(produced))[:5]}"
    for p in range(PARTITIONS):
        seen = {o for m in ms for (pp, o, _) in m.records() if pp == p}
        assert seen == set(range(ends[p])), f"partition {p}: offsets seen != 0..{ends[p] - 1}"
        assert sorted(placed[p]) == list(range(ends[p]))
    # Each (partition, offset) always carries the same value, whoever processed it.
    by_po = {}
    for m in ms:
        for (p, o, v) in m.records():
            assert by_po.setdefault((p, o), v) == v, f"{p}@{o} seen as {by_po[(p, o)]} and {v}"
    workers = [m.name for m in ms if m.records()]
    assert len(workers) >= 2, f"only {workers} processed records"
    errors = sorted({line.split(" ")[1] for m in ms for line in m.events()
                     if line.startswith(("COMMITERR", "ERROR", "MSGERROR"))})
    print(f"processed {len(values)} distinct values; per member: "
          f"{[(m.name, len(m.records())) for m in ms]}; errors seen: {errors}")
    return ms


# ---------------------------------------------------------------------------------------------
# Tests.


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_group_join_leave_crash_no_record_skipped(broker, tmp_path, members, strategy):
    """Three librdkafka members share a 6-partition topic; one leaves cleanly (close), one is
    SIGKILLed, a new one joins. Proves the coordinator rebalances on LeaveGroup, expires a crashed
    member after session.timeout.ms, hands its partitions on from the committed offsets, and
    that OffsetCommit/OffsetFetch work: every produced record is processed (none skipped), each
    partition's offsets 0..end-1 are all seen, at least two members did work, and the committed
    offsets reach the log end."""
    topic, group = unique_topic("grp"), unique_topic("g")

    def make(name):
        return Member.librdkafka(name, tmp_path, broker.bootstrap, group, topic, strategy)

    run_join_leave_crash_scenario(broker.bootstrap, topic, group, make, members)



def _wait_assignment(consumer, n, timeout_s=WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        assert msg is None or not msg.error() or msg.error().code() == -191, msg and msg.error()  # -191: _PARTITION_EOF
        if len(consumer.assignment()) == n:
            return
    raise AssertionError(f"no assignment of {n} partitions after {timeout_s}s: {consumer.assignment()}")


def test_committed_offsets_and_group_admin(broker):
    """OffsetCommit with metadata read back by OffsetFetch (Consumer.committed and the admin API,
    for chosen partitions and for the whole group), ListGroups with and without a state filter,
    DescribeGroups (member, client id, assignment, assignor, Stable, then Empty), DeleteGroups
    (NON_EMPTY_GROUP while a member is active, then success, then GROUP_ID_NOT_FOUND), admin
    offset commits (UNKNOWN_MEMBER_ID while the group has members, accepted once it is Empty),
    and a "simple" group that only commits. Every expectation here is what Kafka 4.3 answers."""
    from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions,
                                 KafkaException, TopicPartition)

    bootstrap = broker.bootstrap
    admin = admin_client(bootstrap)
    topic, group = unique_topic("off"), unique_topic("g")
    create_topic(admin, topic, 4)
    produce_values(bootstrap, topic, [str(i) for i in range(40)], partitions=4)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "offsets-client",
                  "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS})
    try:
        c.subscribe([topic])
        _wait_assignment(c, 4)
        long_meta = "m" * 200
        c.commit(offsets=[TopicPartition(topic, 0, 5, "meta-0"), TopicPartition(topic, 1, 10, ""),
                          TopicPartition(topic, 2, 3, long_meta)], asynchronous=False)

        got = c.committed([TopicPartition(topic, p) for p in range(4)], timeout=15)
        assert [(tp.partition, tp.offset, tp.metadata, tp.error) for tp in got] == [
            (0, 5, "meta-0", None), (1, 10, "", None), (2, 3, long_meta, None), (3, -1001, None, None)]

        assert committed_offsets(admin, group) == {
            (topic, 0): (5, "meta-0"), (topic, 1): (10, ""), (topic, 2): (3, long_meta)}
        assert committed_offsets(admin, group, topic, [0, 3]) == {(topic, 0): (5, "meta-0"), (topic, 3): (-1001, None)}

        def listed(states=None):
            kw = {"states": states} if states else {}
            res = admin.list_consumer_groups(request_timeout=15, **kw).result(timeout=20)
            assert not res.errors, res.errors
            return [(g.state, g.is_simple_consumer_group) for g in res.valid if g.group_id == group]

        assert listed() == [(ConsumerGroupState.STABLE, False)]
        assert listed({ConsumerGroupState.STABLE}) == [(ConsumerGroupState.STABLE, False)]
        assert listed({ConsumerGroupState.EMPTY}) == []

        d = group_description(admin, group)
        assert d.state == ConsumerGroupState.STABLE
        assert not d.is_simple_consumer_group
        assert d.partition_assignor == "range"  # librdkafka's default list is "range,roundrobin"
        assert len(d.members) == 1
        m = d.members[0]
        assert m.client_id == "offsets-client"
        assert m.member_id.startswith("offsets-client-"), m.member_id  # Kafka: client id + "-" + UUID
        assert m.group_instance_id is None
        assert sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions) == [(topic, p) for p in range(4)]

        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert ei.value.args[0].name() == "NON_EMPTY_GROUP"

        # An admin commit (generation -1, no member id) into a group with members is refused per
        # partition with UNKNOWN_MEMBER_ID; the request as a whole succeeds.
        res = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 2)])], request_timeout=15)[group].result(timeout=20)
        assert [(tp.partition, tp.error and tp.error.name()) for tp in res.topic_partitions] == [(0, "UNKNOWN_MEMBER_ID")]
        assert committed_offsets(admin, group, topic, [0])[(topic, 0)] == (5, "meta-0")
    finally:
        c.close()  # LeaveGroup: the group becomes Empty at once

    d = group_description(admin, group)
    assert d.state == ConsumerGroupState.EMPTY and d.members == []
    assert listed({ConsumerGroupState.EMPTY}) == [(ConsumerGroupState.EMPTY, False)]
    assert listed({ConsumerGroupState.STABLE}) == []

    res = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 2, "altered"), TopicPartition(topic, 3, 7)])],
        request_timeout=15)[group].result(timeout=20)
    assert [(tp.partition, tp.offset, tp.error) for tp in res.topic_partitions] == [(0, 2, None), (3, 7, None)]
    after = committed_offsets(admin, group)
    assert after[(topic, 0)] == (2, "altered")
    assert after[(topic, 3)][0] == 7 and after[(topic, 3)][1] in (None, "")
    assert after[(topic, 1)] == (10, "") and after[(topic, 2)] == (3, long_meta)

    admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
    # Kafka answers DescribeGroups for a deleted (or never seen) group with state Dead, no error.
    d = group_description(admin, group)
    assert d.state == ConsumerGroupState.DEAD and d.members == []
    assert committed_offsets(admin, group, topic, [0, 1]) == {(topic, 0): (-1001, None), (topic, 1): (-1001, None)}
    assert listed() == []
    with pytest.raises(KafkaException) as ei:
        admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
    assert ei.value.args[0].name() == "GROUP_ID_NOT_FOUND"

    # A group that only commits (never joins) is a "simple" group: Empty, protocol type "".
    simple = unique_topic("simple")
    c2 = Consumer({"bootstrap.servers": bootstrap, "group.id": simple, "enable.auto.commit": False})
    try:
        c2.commit(offsets=[TopicPartition(topic, 1, 4, "s")], asynchronous=False)
        got = c2.committed([TopicPartition(topic, 1)], timeout=15)
        assert [(tp.offset, tp.metadata) for tp in got] == [(4, "s")]
    finally:
        c2.close()
    d = group_description(admin, simple)
    assert d.state == ConsumerGroupState.EMPTY and d.is_simple_consumer_group and d.members == []
    res = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    assert [(g.state, g.is_simple_consumer_group) for g in res.valid if g.group_id == simple] == [
        (ConsumerGroupState.EMPTY, True)]
    admin.delete_consumer_groups([simple], request_timeout=15)[simple].result(timeout=20)


def test_static_membership_rejoin_and_fencing(broker, tmp_path, members):
    """Static membership (KIP-345). On Kafka: a librdkafka static member's close() sends no
    LeaveGroup, so the group keeps it; a restart with the same group.instance.id within the
    session timeout gets a new member id but the same partitions back with no rebalance (the
    dynamic member sees no revoke/assign), and resumes from the committed offsets. A second live
    process with the same instance id takes the slot and the first one is fenced
    (FENCED_INSTANCE_ID, a fatal error in librdkafka)."""
    bootstrap = broker.bootstrap
    admin = admin_client(bootstrap)
    topic, group = unique_topic("static"), unique_topic("g")
    create_topic(admin, topic, PARTITIONS)
    # A long session timeout, as static members use, so a restart is certainly within it.
    slow = {"session.timeout.ms": 30000}

    def make(name, inst):
        return Member.librdkafka(name, tmp_path, bootstrap, group, topic, "range", instance_id=inst, extra=slow)

    a, b = make("A", "inst-a"), make("B", None)
    members.extend([a, b])
    a.start()
    b.start()
    d0 = wait_group(admin, group, 2, ms=members)
    by_inst = {m.group_instance_id: m for m in d0.members}
    assert set(by_inst) == {"inst-a", None}
    a_parts = sorted(tp.partition for tp in by_inst["inst-a"].assignment.topic_partitions)
    b_member_id = by_inst[None].member_id
    first = [f"s0-{i}" for i in range(60)]
    produce_values(bootstrap, topic, first)
    wait_covered(members, first)
    b_events_before = len(b.events())

    assert a.stop() == 0, a.describe()
    d1 = group_description(admin, group)
    assert len(d1.members) == 2, f"static member left on close: {[m.group_instance_id for m in d1.members]}"

    a2 = make("A2", "inst-a")
    members.append(a2)
    a2.start()
    wait_for(lambda: any(e.startswith("ASSIGN") for e in a2.events()), "A2 to get an assignment", ms=members)
    assert [e for e in a2.events() if e.startswith("ASSIGN")] == [f"ASSIGN {json.dumps(a_parts)}"]
    d2 = wait_group(admin, group, 2, ms=members)
    by_inst2 = {m.group_instance_id: m for m in d2.members}
    assert sorted(tp.partition for tp in by_inst2["inst-a"].assignment.topic_partitions) == a_parts
    assert by_inst2["inst-a"].member_id != by_inst["inst-a"].member_id  # a new member id for the same instance
    assert by_inst2[None].member_id == b_member_id
    second = [f"s1-{i}" for i in range(60)]
    produce_values(bootstrap, topic, second)
    wait_covered(members, first + second)
    new_b_events = [e for e in b.events()[b_events_before:] if e.startswith(("ASSIGN", "REVOKE", "LOST"))]
    assert new_b_events == [], f"the dynamic member was rebalanced: {new_b_events}"
    # A committed everything it processed, so A2 resumed after it: nothing from `first` again.
    assert {v for (_, _, v) in a2.records()} <= set(second), "A2 re-read records A had committed"

    # A second live process with the same instance id fences the first.
    a3 = make("A3", "inst-a")
    members.append(a3)
    a3.start()
    wait_for(lambda: a2.proc.poll() is not None, "A2 to be fenced and exit", ms=members)
    assert a2.proc.returncode == 3, a2.describe()
    fatal = [e for e in a2.events() if e.startswith(("MSGERROR", "ERROR"))]
    assert fatal and "fenced" in fatal[0].lower(), a2.describe()
    wait_for(lambda: any(e.startswith("ASSIGN") for e in a3.events()), "A3 to get an assignment", ms=members)
    assert [e for e in a3.events() if e.startswith("ASSIGN")] == [f"ASSIGN {json.dumps(a_parts)}"]
    d3 = wait_group(admin, group, 2, ms=members)
    assert {m.group_instance_id for m in d3.members} == {"inst-a", None}
    assert {m.member_id for m in d3.members if m.group_instance_id is None} == {b_member_id}
    third = [f"s2-{i}" for i in range(60)]
    produce_values(bootstrap, topic, third)
    wait_covered(members, first + second + third)
    assert [e for e in b.events()[b_events_before:] if e.startswith(("ASSIGN", "REVOKE", "LOST"))] == []
    for m in (a3, b):
        assert m.stop() == 0, m.describe()


def commit_and_check_survives(bootstrap, restart):
    """Commit offsets (with metadata) for two groups over 8 partitions, delete a third group,
    call `restart()`, then check every offset and the deletion are still as they were."""
    from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition

    admin = admin_client(bootstrap)
    topic = unique_topic("dur")
    create_topic(admin, topic, 8)
    produce_values(bootstrap, topic, [str(i) for i in range(80)], partitions=8)
    g_sub, g_simple, g_gone = unique_topic("gsub"), unique_topic("gsimple"), unique_topic("ggone")
    expect = {
        g_sub: {p: (p + 1, f"sub-{p}") for p in range(8)},
        g_simple: {p: (10 - p, "") for p in range(0, 8, 2)},
    }

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": g_sub, "enable.auto.commit": False,
                  "session.timeout.ms": SESSION_TIMEOUT_MS})
    try:
        c.subscribe([topic])
        _wait_assignment(c, 8)
        # Two commits: the second overwrites half of the first.
        c.commit(offsets=[TopicPartition(topic, p, 9, "old") for p in range(8)], asynchronous=False)
        c.commit(offsets=[TopicPartition(topic, p, o, m) for p, (o, m) in expect[g_sub].items()], asynchronous=False)
    finally:
        c.close()
    for g in (g_simple, g_gone):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(topic, p, o, m) for p, (o, m) in expect[g_simple].items()],
                     asynchronous=False)
        finally:
            c.close()
    admin.delete_consumer_groups([g_gone], request_timeout=15)[g_gone].result(timeout=20)

    def check():
        for g, offs in expect.items():
            assert committed_offsets(admin, g) == {(topic, p): om for p, om in offs.items()}, g
        assert committed_offsets(admin, g_gone) == {}
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g_sub, "enable.auto.commit": False})
        try:
            got = c.committed([TopicPartition(topic, p) for p in range(8)], timeout=15)
        finally:
            c.close()
        assert {tp.partition: (tp.offset, tp.metadata) for tp in got} == expect[g_sub]
        assert group_description(admin, g_sub).state == ConsumerGroupState.EMPTY
        assert group_description(admin, g_gone).state == ConsumerGroupState.DEAD

    check()
    restart()
    admin = admin_client(bootstrap)  # a fresh client: no cached coordinator connection
    check()


def test_committed_offsets_survive_restart(runnel_broker):
    """Runnel only (it restarts the broker): committed offsets of a group that joined and of a
    simple group, over 8 partitions and with metadata, and the deletion of a third group, all
    survive a clean restart (SIGTERM, start on the same data dir)."""
    commit_and_check_survives(runnel_broker.bootstrap, runnel_broker.restart)


def test_committed_offsets_survive_kill9(runnel_broker):
    """Runnel only: as above, but the broker is killed with SIGKILL right after the commits were
    acknowledged. A commit acknowledged to the client must not be lost."""
    def crash_and_start():
        runnel_broker.kill9()
        runnel_broker.start()

    commit_and_check_survives(runnel_broker.bootstrap, crash_and_start)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "member":
        member_main(json.loads(sys.argv[2]))
    else:
        sys.exit(f"usage: {sys.argv[0]} member '<json config>'")
