"""Share groups (KIP-932) with the two non-Java share consumers: librdkafka's (through
confluent-kafka's ShareConsumer) and franz-go's (kgo.ShareGroup, driven by tests/go/sharecheck).

test_share_groups.py does the same with the Java KafkaShareConsumer; the brokers here run with
its short locks and sessions (SHARE_SETTINGS, the same values). Every group first gets
share.auto.offset.reset=earliest through IncrementalAlterConfigs on a GROUP resource (librdkafka's
AdminClient, franz-go's kmsg request), so records produced before the consumers joined count.

To check the expectations against Apache Kafka, start it as test_share_groups.py describes and
run with RUNNEL_TEST_BOOTSTRAP=127.0.0.1:29092. RUNNEL_SHARE_CLIENT_DEBUG=1 turns on librdkafka's
debug=cgrp,fetch,protocol (in the test's captured log) and franz-go's debug log (in the failure
report). No test asserts on how long anything takes; every wait is bounded.
"""

import json
import logging
import os
import subprocess
import time

import pytest

from conftest import CACHE, Broker, External, admin_client, create_topic, free_port, unique_topic, wait_for
from test_franz_go import clientcheck_bin  # noqa: F401  (session fixture: runs tests/go/build.sh)
from test_share_groups import SHARE_SETTINGS as SHORT_SETTINGS

# The short sessions of test_share_groups.py, with Kafka's 30 s lock: no test here waits for a
# lock to expire, and a consumer slowed down by a busy machine must not lose its records to
# another before it acknowledges them.
SHARE_SETTINGS = {**SHORT_SETTINGS, "group.share.record.lock.duration.ms": "30000"}
DEBUG = os.environ.get("RUNNEL_SHARE_CLIENT_DEBUG", "") not in ("", "0")
QUIET_S = 1.5  # how long consumers keep polling after completion, to see duplicates arrive
SHARECHECK = CACHE / "go" / "sharecheck"


@pytest.fixture
def share_broker(tmp_path):
    """A fresh runnel with SHARE_SETTINGS, or RUNNEL_TEST_BOOTSTRAP if set."""
    ext = os.environ.get("RUNNEL_TEST_BOOTSTRAP")
    if ext:
        yield External(ext)
        return
    b = Broker(tmp_path / "data", settings=SHARE_SETTINGS).start()
    yield b
    b.kill9()


def log_tail(broker):
    """The broker's log tail (ours only), without its start-up lines about coordinators."""
    if not hasattr(broker, "log_tail"):
        return ""
    lines = [line for line in broker.log_tail(400).splitlines() if "coordinating the" not in line]
    return "\n--- broker log (tail) ---\n" + "\n".join(lines[-30:])


# ------------------------------------------------------------------------------ librdkafka


def set_earliest(bootstrap, group):
    """share.auto.offset.reset=earliest on the group (IncrementalAlterConfigs, GROUP resource),
    until DescribeConfigs reads it back (Kafka applies group configs asynchronously)."""
    set_reset(bootstrap, group, "earliest")


def set_reset(bootstrap, group, value):
    """share.auto.offset.reset=`value` on the group, as set_earliest does."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = admin_client(bootstrap)
    entry = ConfigEntry("share.auto.offset.reset", value, incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        f.result(timeout=15)
    configs = {}

    def applied():
        for f in admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values():
            configs.update({k: v.value for k, v in f.result(timeout=15).items()})
        return configs.get("share.auto.offset.reset") == value

    wait_for(applied, f"share.auto.offset.reset={value} described", 15, lambda: str(configs), interval_s=0.2)


def produce(bootstrap, topic, keys, partitions):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for k in keys:
        p.produce(topic, key=k, value=k, partition=int(k[1:]) % partitions)
    assert p.flush(30) == 0, "records left unsent"


class Fences(logging.Handler):
    """Collects librdkafka's log lines saying the member was fenced (debug=cgrp logs each:
    "member fenced - rejoining"), for `share_consumer(..., fences=...)`."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        line = record.getMessage()
        if "fenced" in line.lower():
            self.lines.append(line)


def share_consumer(bootstrap, group, client_id, topic, fences=None, **extra):
    from confluent_kafka import ShareConsumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id, **extra}
    debug = ["cgrp", "fetch", "protocol"] if DEBUG else ["cgrp"] if fences else []
    if debug:
        log = logging.getLogger(f"rdkafka.{client_id}")
        log.setLevel(logging.DEBUG)
        if fences is not None:
            log.addHandler(fences)
        conf["debug"] = ",".join(debug)
        conf["logger"] = log
    c = ShareConsumer(conf)
    c.subscribe([topic])
    return c


class Tally:
    """What the share consumers got: (key, consumer, delivery count) per delivery, and errors."""

    def __init__(self):
        self.deliveries, self.errors = [], []

    def take(self, consumer_name, messages):
        out = []
        for m in messages:
            if m.error():
                self.errors.append(f"{consumer_name}: {m.error()}")
                continue
            self.deliveries.append((m.key().decode(), consumer_name, m.delivery_count()))
            out.append(m)
        return out

    def times(self):
        t = {}
        for k, _, _ in self.deliveries:
            t[k] = t.get(k, 0) + 1
        return t

    def counts(self):
        c = {}
        for _, _, dc in self.deliveries:
            c[dc] = c.get(dc, 0) + 1
        return c

    def per_consumer(self):
        c = {}
        for _, name, _ in self.deliveries:
            c[name] = c.get(name, 0) + 1
        return c

    def summary(self):
        return (f"deliveries={len(self.deliveries)} distinct={len(self.times())} counts={self.counts()} "
                f"per_consumer={self.per_consumer()} errors={self.errors[:10]} "
                f"repeated={sorted(k for k, n in self.times().items() if n > 1)[:20]}")


def commit_errors(result):
    """commit_sync's {TopicPartition: None | KafkaException} as a list of the failures."""
    return [f"{tp.topic}-{tp.partition}: {e}" for tp, e in (result or {}).items() if e is not None]


def test_librdkafka_two_share_consumers_get_every_record_once(share_broker):
    """Two librdkafka share consumers in one group (implicit acknowledgement) on a 6-partition
    topic, the records produced in batches while both poll: together they get each of the 200
    records exactly once, with delivery count 1, and both get some. Neither is ever fenced: a
    member heartbeating with the epoch it was last given keeps its membership (the coordinator
    answers with the new epoch and assignment when another member joined)."""
    n, partitions = 200, 6
    topic = unique_topic("rdk-share")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, partitions)
    set_earliest(share_broker.bootstrap, group)
    keys = [f"k{i}" for i in range(n)]
    tally, commit_errs, fences = Tally(), [], Fences()
    consumers = {name: share_consumer(share_broker.bootstrap, group, name, topic, fences)
                 for name in ("rdk-a", "rdk-b")}
    try:
        batches = [keys[i:i + 20] for i in range(0, n, 20)]

        def step():
            if batches:
                produce(share_broker.bootstrap, topic, batches.pop(0), partitions)
            for name, c in consumers.items():
                tally.take(name, c.poll(0.5))
            per = tally.per_consumer()
            return not batches and len(tally.times()) == n and len(per) == 2

        wait_for(step, "every record, both consumers with some", 40, tally.summary, interval_s=0)
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            for name, c in consumers.items():
                tally.take(name, c.poll(0.3))
        for c in consumers.values():
            commit_errs += commit_errors(c.commit_sync(15))
    finally:
        for c in consumers.values():
            c.close()
    detail = f"{tally.summary()}\nfenced: {fences.lines[:6]}" + log_tail(share_broker)
    assert fences.lines == [], detail
    assert sorted(tally.times()) == sorted(keys), detail
    assert len(tally.deliveries) == n, detail
    assert tally.counts() == {1: n}, detail
    assert tally.errors == [] and commit_errs == [], (commit_errs, detail)


def test_librdkafka_share_group_reset_by_duration_starts_at_the_first_recent_record(tmp_path):
    """share.auto.offset.reset=by_duration:PT1H: a new share-partition starts at the first record
    stamped within the last hour (ListOffsets' rule; the lookup runs on the blocking pool,
    counted as runnel_log_disk_reads_total{reason="ByTime"}). Of 8 records stamped 3 hours ago
    and 8 stamped now, a librdkafka share consumer gets the 8 recent ones, and no old one."""
    from confluent_kafka import Producer

    from test_page_cache_tail import disk_reads

    admin = free_port()
    broker = Broker(tmp_path / "data", settings={**SHARE_SETTINGS, "admin.listeners": f"http://127.0.0.1:{admin}"})
    broker.start()
    try:
        topic = unique_topic("rdk-share-dur")
        group = f"{topic}-g"
        create_topic(broker.bootstrap, topic, 1)
        set_reset(broker.bootstrap, group, "by_duration:PT1H")
        now_ms = int(time.time() * 1000)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(8):
            p.produce(topic, key=f"old{i}", value=b"x", timestamp=now_ms - 3 * 3600 * 1000)
            assert p.flush(30) == 0, "records left unsent"
        for i in range(8):
            p.produce(topic, key=f"new{i}", value=b"x", timestamp=now_ms)
            assert p.flush(30) == 0, "records left unsent"
        before = disk_reads(admin)
        tally = Tally()
        c = share_consumer(broker.bootstrap, group, "rdk-dur", topic)
        try:
            def step():
                tally.take("rdk-dur", c.poll(0.5))
                return len(tally.times()) >= 8

            wait_for(step, "the 8 recent records", 30, tally.summary, interval_s=0)
            deadline = time.monotonic() + QUIET_S
            while time.monotonic() < deadline:
                tally.take("rdk-dur", c.poll(0.3))
        finally:
            c.close()
        detail = tally.summary() + log_tail(broker)
        assert sorted(tally.times()) == sorted(f"new{i}" for i in range(8)), detail
        assert tally.errors == [], detail
        after = disk_reads(admin)
        assert after.get("ByTime", 0) > before.get("ByTime", 0), (before, after)
    finally:
        broker.kill9()


def test_librdkafka_explicit_release_reject_accept(share_broker):
    """share.acknowledgement.mode=explicit, one consumer, 60 records on 3 partitions: on first
    delivery keys with index % 3 == 0 are RELEASEd, index % 5 == 1 (and not % 3 == 0) REJECTed,
    the rest ACCEPTed (commit_sync after every poll). The 20 released come back exactly once,
    with delivery count 2 (then accepted); the rejected and accepted ones never come back."""
    from confluent_kafka import AcknowledgeType

    n, partitions = 60, 3
    topic = unique_topic("rdk-share-x")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, partitions)
    set_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, [f"k{i}" for i in range(n)], partitions)
    tally, commit_errs, unexpected = Tally(), [], []
    released, rejected, accepted_first, redelivered = set(), set(), set(), set()
    c = share_consumer(share_broker.bootstrap, group, "rdk-explicit", topic, **{"share.acknowledgement.mode": "explicit"})

    def poll_once(timeout_s):
        for m in tally.take("x", c.poll(timeout_s)):
            k, dc = m.key().decode(), m.delivery_count()
            i = int(k[1:])
            first = k not in released | rejected | accepted_first
            if first and dc == 1 and i % 3 == 0:
                released.add(k)
                c.acknowledge(m, AcknowledgeType.RELEASE)
            elif first and dc == 1 and i % 5 == 1:
                rejected.add(k)
                c.acknowledge(m, AcknowledgeType.REJECT)
            elif first and dc == 1:
                accepted_first.add(k)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            elif k in released and k not in redelivered and dc == 2:
                redelivered.add(k)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            else:
                unexpected.append((k, dc))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        commit_errs.extend(commit_errors(c.commit_sync(15)))

    def state():
        return (f"released={len(released)} rejected={len(rejected)} accepted_first={len(accepted_first)} "
                f"redelivered={len(redelivered)} unexpected={unexpected[:10]} commit_errors={commit_errs[:5]} "
                + tally.summary())

    try:
        wait_for(lambda: poll_once(0.5) or (len(tally.times()) == n and redelivered == released and released),
                 "every record, and every released one again", 30, state, interval_s=0)
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            poll_once(0.3)
    finally:
        c.close()
    detail = state() + log_tail(share_broker)
    assert (len(released), len(rejected), len(accepted_first)) == (20, 8, 32), detail
    assert redelivered == released and unexpected == [], detail
    assert tally.counts() == {1: 60, 2: 20}, detail
    assert tally.errors == [] and commit_errs == [], detail


def test_librdkafka_implicit_mode_consumes_everything_and_the_acks_stick(share_broker):
    """Default (implicit) acknowledgement, one consumer, 50 records on 3 partitions: every record
    arrives once with delivery count 1; commit_sync accepts the last poll's records (librdkafka
    2.16's close() alone sends no acknowledgement for them: its final ShareAcknowledge is empty,
    and the broker then rightly releases them). A new consumer in the group then gets only the 5
    records produced after that, not one of the 50."""
    n, partitions = 50, 3
    topic = unique_topic("rdk-share-i")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, partitions)
    set_earliest(share_broker.bootstrap, group)
    produce(share_broker.bootstrap, topic, [f"k{i}" for i in range(n)], partitions)
    first = Tally()
    c = share_consumer(share_broker.bootstrap, group, "rdk-implicit-1", topic)
    try:
        wait_for(lambda: first.take("1", c.poll(0.5)) is not None and len(first.times()) == n,
                 "all 50 records", 30, first.summary, interval_s=0)
        errs = commit_errors(c.commit_sync(15))
    finally:
        c.close()
    detail = first.summary() + log_tail(share_broker)
    assert len(first.deliveries) == n and first.counts() == {1: n} and first.errors == [], detail
    assert errs == [], (errs, detail)

    late = [f"k{i}" for i in range(n, n + 5)]
    second = Tally()
    c = share_consumer(share_broker.bootstrap, group, "rdk-implicit-2", topic)
    try:
        produce(share_broker.bootstrap, topic, late, partitions)
        wait_for(lambda: second.take("2", c.poll(0.5)) is not None and len(second.times()) >= len(late),
                 "the 5 new records", 30, second.summary, interval_s=0)
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            second.take("2", c.poll(0.3))
        errs = commit_errors(c.commit_sync(15))
    finally:
        c.close()
    detail = second.summary() + log_tail(share_broker)
    assert sorted(k for k, _, _ in second.deliveries) == sorted(late), detail
    assert second.counts() == {1: 5} and second.errors == [] and errs == [], (errs, detail)


# ------------------------------------------------------------------------------ franz-go


@pytest.fixture(scope="session")
def sharecheck_bin(clientcheck_bin):  # noqa: F811  (the imported fixture: runs tests/go/build.sh, which builds sharecheck too)
    assert SHARECHECK.is_file(), f"tests/go/build.sh succeeded but {SHARECHECK} is missing"
    return SHARECHECK


def sharecheck(binary, broker, mode, topic, group, records, *extra, timeout_s=25):
    args = [str(binary), "--bootstrap", broker.bootstrap, "--mode", mode, "--topic", topic, "--group", group,
            "--records", str(records), "--timeout-s", str(timeout_s), "--quiet-ms", str(int(QUIET_S * 1000)),
            *map(str, extra)] + (["--debug"] if DEBUG else [])
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"sharecheck did not exit within {timeout_s + 60}s\n{e.stdout or ''}\n{(e.stderr or '')[-6000:]}")
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    report = (f"sharecheck {mode} exited with {p.returncode}\n--- stdout ---\n{p.stdout}\n"
              f"--- stderr (tail) ---\n{p.stderr[-6000:]}" + log_tail(broker))
    if p.returncode != 0 or not result or result.get("ok") is not True:
        pytest.fail(report)
    return result, report


def test_franz_go_two_share_consumers_get_every_record_once(share_broker, sharecheck_bin):
    """Two franz-go share consumers in one group on a 6-partition topic, 200 records produced in
    batches while both poll, accepted implicitly (the next poll; at the end MarkAcks + FlushAcks):
    every record once with delivery count 1, both consumers got some and were assigned
    partitions, no heartbeat was answered FENCED_MEMBER_EPOCH, DescribeShareGroupOffsets shows lag
    0 on every partition, and the group is Empty once both closed."""
    topic = unique_topic("franz-share")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 6)
    r, report = sharecheck(sharecheck_bin, share_broker, "consume", topic, group, 200, "--clients", 2)
    assert r["group_configs"]["share.auto.offset.reset"] == "earliest", report
    assert r["heartbeats_fenced"] == 0, report
    assert (r["deliveries"], r["distinct"], r["duplicates"], r["missing"]) == (200, 200, 0, None), report
    assert r["delivery_counts"] == {"1": 200}, report
    assert all(v > 0 for v in r["per_client"].values()) and len(r["per_client"]) == 2, report
    assert not r["ack_errors"] and not r["fetch_errors"] and not r["unexpected"], report
    members = r["group_while_members"]
    assert members["state"] == "Stable" and len(members["members"]) == 2, report
    assigned = sorted(tp for m in members["members"] for tp in m["assignment"])
    assert assigned == sorted(f"{topic}-{p}" for p in range(6)), report
    assert r["offsets"]["all_lag_0"] and len(r["offsets"]["partitions"]) == 6, report
    assert r["group_after_close"]["state"] == "Empty", report


def test_franz_go_release_reject_accept(share_broker, sharecheck_bin):
    """One franz-go share consumer acknowledging each record explicitly (Record.Ack), 60 records on
    3 partitions: index % 3 == 0 RELEASEd on first delivery, % 5 == 1 REJECTed, the rest
    ACCEPTed. The 20 released come back exactly once with delivery count 2, nothing else comes
    back, and afterwards the lag is 0 on every partition."""
    topic = unique_topic("franz-share-x")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 3)
    r, report = sharecheck(sharecheck_bin, share_broker, "release", topic, group, 60)
    assert (r["released"], r["rejected"], r["accepted_first"], r["redelivered"]) == (20, 8, 32, 20), report
    assert r["distinct"] == 60 and r["deliveries"] == 80 and r["missing"] is None, report
    assert r["delivery_counts"] == {"1": 60, "2": 20}, report
    assert not r["unexpected"] and not r["ack_errors"] and not r["fetch_errors"], report
    assert r["offsets"]["all_lag_0"] and len(r["offsets"]["partitions"]) == 3, report
    assert r["group_after_close"]["state"] == "Empty", report
