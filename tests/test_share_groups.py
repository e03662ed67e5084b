"""Share groups (KIP-932) with the official Apache Kafka Java client (4.x) against the broker.

ShareCheck (tests/java/src/ShareCheck.java, built by tests/java/build.sh) runs KafkaShareConsumers
with share.acknowledgement.mode=explicit (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge),
a KafkaProducer and the Admin client (group configs with IncrementalAlterConfigs/DescribeConfigs
on GROUP resources, describeShareGroups = ShareGroupDescribe, listShareGroupOffsets =
DescribeShareGroupOffsets). Each run prints one JSON line that the tests assert on.
kafka-share-groups.sh is org.apache.kafka.tools.consumer.group.ShareGroupCommand from kafka-tools.

The brokers run with short acquisition locks and sessions (SHARE_SETTINGS) so that lock expiry
tests stay short. To check the expectations against Apache Kafka (../shared/peers/kafka), start
it with the same settings and point the client-level tests at it:

    cd ../shared/peers/kafka
    EXTRA_BROKER_PROPS="$(printf '%s\\n' group.share.min.record.lock.duration.ms=1000 \\
        group.share.record.lock.duration.ms=3000 group.share.min.session.timeout.ms=6000 \\
        group.share.session.timeout.ms=6000 group.share.min.heartbeat.interval.ms=1000 \\
        group.share.heartbeat.interval.ms=1000)" ./start-cluster.sh 1 29092
    RUNNEL_TEST_BOOTSTRAP=127.0.0.1:29092 pytest tests/test_share_groups.py

(there the broker-level delivery count limit is Kafka's default, 5, and the 3-broker test, which
kills runnel processes, is skipped). No test asserts on how long anything takes; every wait is
bounded.
"""

import json
import os
import re
import signal
import subprocess

import pytest

from conftest import ROOT, Broker, External, create_topic, unique_topic, wait_for
from test_java_client import _clip, java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)
from test_kafka_tools import Tools

# Short-lived JVMs on a small machine: favour startup time over throughput.
JAVA_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
LOCK_MS = 3000
SHARE_SETTINGS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.min.session.timeout.ms": "6000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.heartbeat.interval.ms": "1000",
}
BROKER_DELIVERY_LIMIT = 4      # set on our broker for the broker-level limit test
KAFKA_DELIVERY_LIMIT = 5       # Kafka's default, on an external broker
CHECK_TIMEOUT_S = 90           # ShareCheck's own deadline; its watchdog fires 60 s later


def external():
    return os.environ.get("RUNNEL_TEST_BOOTSTRAP")


def start_broker(tmp_path, name, **extra):
    return Broker(tmp_path / name, settings={**SHARE_SETTINGS, **extra}).start()


@pytest.fixture
def share_broker(tmp_path):
    """A fresh runnel with SHARE_SETTINGS, or RUNNEL_TEST_BOOTSTRAP if set."""
    if external():
        yield External(external())
        return
    b = start_broker(tmp_path, "data")
    yield b
    b.kill9()


def sharecheck(java_build_dir, bootstrap, mode, *args, broker=None, timeout_s=CHECK_TIMEOUT_S,  # noqa: F811
               expect_ok=True):
    """Runs `ShareCheck bootstrap mode args...` and returns its JSON line as a dict; fails the
    test with everything it printed (and the broker's log tail) unless it exited 0 with ok."""
    p = run_java(java_build_dir, "ShareCheck", [bootstrap, mode, *args, "--timeout-s", timeout_s],
                 timeout_s + 90, opts=JAVA_OPTS)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    if expect_ok and (p.returncode != 0 or not result or result.get("ok") is not True):
        report = f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{_clip(p.stderr)}"
        if broker is not None and hasattr(broker, "log_tail"):
            report += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
        elif broker is not None and hasattr(broker, "diagnostics"):
            report += f"\n--- cluster log (tail) ---\n{broker.diagnostics()}"
        pytest.fail(f"ShareCheck {mode} {' '.join(map(str, args))} exited with {p.returncode}\n{report}")
    return result


# ------------------------------------------------------------------------------ Java client


def test_group_config_share_auto_offset_reset_reads_back(share_broker, java_build):  # noqa: F811
    """IncrementalAlterConfigs on a GROUP resource sets share.auto.offset.reset=earliest (for a
    group that does not exist yet); DescribeConfigs of the group shows it as DYNAMIC_GROUP_CONFIG
    and the other share group configs with the broker's values (the lock duration the broker
    was started with, Kafka's default delivery count limit 5). Invalid values (an unknown reset
    strategy, a lock duration below the broker's minimum, a delivery count limit above its
    maximum, a config groups do not have) are refused with InvalidConfigurationException and
    change nothing."""
    group = unique_topic("share-cfg")
    r = sharecheck(java_build, share_broker.bootstrap, "earliest", group, broker=share_broker)
    configs = r["configs"]
    assert configs["share.auto.offset.reset"] == {"value": "earliest", "source": "DYNAMIC_GROUP_CONFIG"}, configs
    for name in ("share.record.lock.duration.ms", "share.delivery.count.limit", "share.session.timeout.ms",
                 "share.heartbeat.interval.ms", "share.isolation.level"):
        assert name in configs, f"{name} not described: {sorted(configs)}"
    assert configs["share.record.lock.duration.ms"]["value"] == str(LOCK_MS), configs
    assert configs["share.delivery.count.limit"]["value"] == "5", configs
    assert configs["share.isolation.level"]["value"] == "read_uncommitted", configs
    assert set(r["refused"].values()) == {"InvalidConfigurationException"}, r["refused"]
    assert len(r["refused"]) == 4, r["refused"]


def test_consumers_in_one_share_group_get_every_record_once(share_broker, java_build):  # noqa: F811
    """300 records over 6 partitions, three share consumers in one group accepting every record:
    every key arrives exactly once (delivery count 1), the acknowledgements succeed, and
    afterwards the group is Empty with no lag on any partition (DescribeShareGroupOffsets)."""
    topic = unique_topic("share-consume")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 6)
    r = sharecheck(java_build, share_broker.bootstrap, "consume", topic, group, 300, 3, broker=share_broker)
    assert (r["deliveries"], r["distinct"], r["duplicates"], r["missing"]) == (300, 300, 0, 0), json.dumps(r)
    assert r["delivery_counts"] == {"1": 300}, r
    assert r["commit_errors"] == 0, r
    assert sum(r["per_consumer"].values()) == 300, r

    def settled():
        d = sharecheck(java_build, share_broker.bootstrap, "describe", group, broker=share_broker)["group"]
        return d if d["state"] == "Empty" and len(d["offsets"]) == 6 and all(
            o["lag"] == 0 for o in d["offsets"].values()) else None

    wait_for(settled, "the group Empty with lag 0 on every partition", 60,
             lambda: json.dumps(sharecheck(java_build, share_broker.bootstrap, "describe", group)))


def test_released_records_come_back_rejected_ones_never(share_broker, java_build):  # noqa: F811
    """On first delivery the consumer RELEASEs keys with index % 3 == 0, REJECTs those with
    index % 5 == 1 (and not % 3 == 0) and ACCEPTs the rest: the 20 released come back exactly
    once more with delivery count 2 (then accepted), nothing else is ever delivered again."""
    topic = unique_topic("share-release")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 3)
    r = sharecheck(java_build, share_broker.bootstrap, "release", topic, group, 60, broker=share_broker)
    assert (r["released"], r["rejected"], r["accepted_first"]) == (20, 8, 32), r
    assert r["distinct"] == 60 and r["redelivered"] == 20, r
    assert r["delivery_counts"] == {"1": 60, "2": 20}, r
    assert r["unexpected"] == [] and r["missing_keys"] == [] and r["commit_errors"] == 0, r


@pytest.mark.parametrize("where,lock_ms", [
    pytest.param("broker", LOCK_MS, id="broker-lock-duration"),
    pytest.param("group", 2000, id="group-config-lock-duration"),
])
def test_unacknowledged_records_go_to_another_member_when_the_lock_expires(
        share_broker, java_build, where, lock_ms):  # noqa: F811
    """Member A takes records and acknowledges none of them, but stays in the group (it does
    not poll again; its background thread heartbeats until max.poll.interval.ms, 300 s). Member B of the same group (one
    partition, shared by both) gets every record; those A holds only once their acquisition
    lock expired (not before half the lock duration after A had them) and with delivery count
    2. The lock duration is the broker's group.share.record.lock.duration.ms or the group config
    share.record.lock.duration.ms, and ShareFetch tells the client (acquisitionLockTimeoutMs)."""
    topic = unique_topic("share-expire")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 1)
    args = [topic, group, 50, lock_ms] + (["group"] if where == "group" else [])
    r = sharecheck(java_build, share_broker.bootstrap, "expire", *args, broker=share_broker)
    assert r["a_took"] > 0 and r["a_delivery_counts"] == [1], r
    assert r["b_got"] == 50 and r["b_got_a_keys"] == r["a_took"], r
    assert r["b_delivery_counts_of_a_keys"] == [2], json.dumps(r)
    assert r["a_lock_timeout_ms"] == lock_ms, r
    assert r["redelivered_after_ms"] >= lock_ms // 2, r
    idle = r["group_while_a_idle"]
    assert idle["state"] == "Stable", idle
    assert sorted(m["client_id"] for m in idle["members"]) == ["sharecheck-expire-a", "sharecheck-expire-b"], idle
    assert all(m["assignment"] == [f"{topic}-0"] for m in idle["members"]), idle


@pytest.mark.parametrize("where", ["broker", "group"])
def test_delivery_count_limit_archives_records(tmp_path, java_build, where):  # noqa: F811
    """A consumer RELEASEs every delivery: each record is delivered exactly L times (delivery
    counts 1..L), then archived: nothing arrives in the following seconds. L is the broker's
    group.share.delivery.count.limit or the group config share.delivery.count.limit."""
    if external():
        b = External(external())
        limit = KAFKA_DELIVERY_LIMIT if where == "broker" else 3
    elif where == "broker":
        limit = BROKER_DELIVERY_LIMIT
        b = start_broker(tmp_path, "data", **{"group.share.delivery.count.limit": str(limit)})
    else:
        limit = 3
        b = start_broker(tmp_path, "data")
    try:
        topic = unique_topic("share-limit")
        group = f"{topic}-g"
        create_topic(b.bootstrap, topic, 2)
        args = [topic, group, 20, limit] + (["group"] if where == "group" else [])
        r = sharecheck(java_build, b.bootstrap, "limit", *args, broker=b)
        assert r["distinct"] == 20 and r["max_delivery_count"] == limit, r
        assert r["times_delivered"] == {str(limit): 20}, r
        assert r["delivery_counts"] == {str(i): 20 for i in range(1, limit + 1)}, r
        assert r["after_complete"] == 0 and r["unexpected"] == [], r
    finally:
        if isinstance(b, Broker):
            b.kill9()


def test_read_committed_group_skips_aborted_transactions(share_broker, java_build):  # noqa: F811
    """A group with share.isolation.level=read_committed is handed the records of committed
    transactions only: 20 committed around 10 aborted, all 20 arrive once, no aborted one."""
    topic = unique_topic("share-txn")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 1)
    r = sharecheck(java_build, share_broker.bootstrap, "committed", topic, group, broker=share_broker)
    assert (r["distinct"], r["duplicates"], r["missing"]) == (20, 0, 0), r
    assert r["excluded_delivered"] == {}, r


def test_new_group_starts_at_the_log_end(share_broker, java_build):  # noqa: F811
    """Without group configs share.auto.offset.reset is latest (DescribeConfigs says so, as a
    default): records produced before the group's share partitions were initialized are never
    delivered, all those produced afterwards are, once each."""
    topic = unique_topic("share-latest")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 3)
    r = sharecheck(java_build, share_broker.bootstrap, "latest", topic, group, 30, broker=share_broker)
    assert r["reset_config"]["value"] == "latest", r
    assert r["old_delivered"] == [] and r["new_delivered"] == 30 and r["repeated"] == [], r


# ------------------------------------------------------------------------------ kafka-share-groups.sh


class Member:
    """A background `ShareCheck member` process accepting everything; touching its stop file
    makes it close() and exit."""

    def __init__(self, java_build_dir, workdir, bootstrap, topic, group, client_id):  # noqa: F811
        self.stop_file = workdir / f"{client_id}.stop"
        self.stdout_path = workdir / f"{client_id}.stdout"
        self.stderr_path = workdir / f"{client_id}.stderr"
        classpath = f"{java_build_dir / 'classes'}:{java_build_dir / 'lib'}/*"
        cmd = ["java", *JAVA_OPTS, "-cp", classpath, "ShareCheck", bootstrap, "member", topic, group, client_id,
               240, self.stop_file, "--timeout-s", 240]
        with open(self.stdout_path, "wb") as so, open(self.stderr_path, "wb") as se:
            self.proc = subprocess.Popen(list(map(str, cmd)), cwd=ROOT, stdout=so, stderr=se,
                                         stdin=subprocess.DEVNULL)

    def report(self):
        return (f"--- member (rc {self.proc.poll()}) stdout ---\n{self.stdout_path.read_text(errors='replace')}"
                f"\n--- member stderr ---\n{_clip(self.stderr_path.read_text(errors='replace'))}")

    def stop(self, timeout_s=60):
        self.stop_file.touch()
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"member did not exit within {timeout_s}s\n{self.report()}")
        assert rc == 0, self.report()
        return json.loads(self.stdout_path.read_text().strip().splitlines()[-1])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def sg(tools, *args):
    """kafka-share-groups args...; stdout + stderr (the tool splits its messages over both)."""
    p = tools.run(SHARE_GROUPS, *args)
    return p.stdout + p.stderr


def table(out, first_column="GROUP"):
    """The rows of a whitespace-separated table whose header starts with `first_column`, as dicts
    keyed by the header's names (not for --state: a name there has a space in it)."""
    rows, header = [], None
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == first_column:
            header = cols
        elif cols and header and len(cols) == len(header):
            rows.append(dict(zip(header, cols)))
    return rows


def offsets_table(tools, group):
    out = sg(tools, "--describe", "--group", group)
    return {int(r["PARTITION"]): r for r in table(out)}, out


def group_state(tools, group):
    """--describe --state as (state, member count)."""
    out = sg(tools, "--describe", "--group", group, "--state")
    m = re.search(rf"^{re.escape(group)}\s+\S+\s+\(\d+\)\s+(\S+)\s+(\d+)\s*$", out, re.M)
    assert m, f"no state row for {group} in:\n{out}"
    return m.group(1), int(m.group(2))


def test_kafka_share_groups_tool(share_broker, java_build, tmp_path):  # noqa: F811
    """kafka-share-groups.sh (ListGroups with the share type, ShareGroupDescribe,
    DescribeShareGroupOffsets, ListOffsets): after a consumer accepted 10 records per partition
    and left, and 3 more per partition were produced, --list shows the group (--list --state as
    Empty), --describe shows every partition with LAG 3 and a START-OFFSET no further than the
    10 accepted (Kafka's persisted start offset may trail the acknowledgements), --describe
    --state shows Empty with 0 members and --describe --members no active members. While a
    member runs: --describe --members shows it (client id, 3 partitions, the assignment),
    --describe --state Stable with 1 member, --describe LAG 0 once it accepted the 9 new records,
    with START-OFFSET between 10 and 13. After it left the group is Empty again; an unknown group
    is not found."""
    tools = Tools(java_build / "lib", share_broker)
    topic = unique_topic("share-tool")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 3)
    r = sharecheck(java_build, share_broker.bootstrap, "consume", topic, group, 30, 1, broker=share_broker)
    assert r["distinct"] == 30 and r["duplicates"] == 0, r
    sharecheck(java_build, share_broker.bootstrap, "produce", topic, 9, 30, broker=share_broker)

    assert group in sg(tools, "--list").split()
    out = sg(tools, "--list", "--state")
    assert re.search(rf"^{re.escape(group)}\s+Empty\s*$", out, re.M), out

    def lag_is(lag, low, high):
        def ok():
            rows, out = offsets_table(tools, group)
            good = sorted(rows) == [0, 1, 2] and all(
                row["TOPIC"] == topic and row["LAG"] == str(lag) and low <= int(row["START-OFFSET"]) <= high
                for row in rows.values())
            return rows if good else None
        return ok

    wait_for(lag_is(3, 0, 10), "--describe: LAG 3, START-OFFSET <= 10 on every partition", 30,
             lambda: offsets_table(tools, group)[1])
    assert group_state(tools, group) == ("Empty", 0)
    out = sg(tools, "--describe", "--group", group, "--members")
    assert f"Share group '{group}' has no active members." in out, out

    member = Member(java_build, tmp_path, share_broker.bootstrap, topic, group, "tool-m1")
    try:
        def member_row():
            rows = table(sg(tools, "--describe", "--group", group, "--members"))
            return rows if len(rows) == 1 and rows[0]["#PARTITIONS"] == "3" else None

        rows = wait_for(member_row, "--describe --members: one member with 3 partitions", 60,
                        lambda: sg(tools, "--describe", "--group", group, "--members") + member.report())
        row = rows[0]
        assert row["GROUP"] == group and row["CLIENT-ID"] == "tool-m1", rows
        assert row["ASSIGNMENT"] == f"{topic}:0,1,2", rows
        assert row["CONSUMER-ID"] not in ("", "-"), rows
        assert group_state(tools, group) == ("Stable", 1)
        wait_for(lag_is(0, 10, 13), "--describe: LAG 0 once the member accepted the new records", 60,
                 lambda: offsets_table(tools, group)[1] + member.report())
        res = member.stop()
        assert res["received"] == 9 and res["commit_errors"] == 0, res
    finally:
        member.kill()
    wait_for(lambda: group_state(tools, group) == ("Empty", 0), "the group Empty after the member left", 30)

    out = sg(tools, "--describe", "--group", f"{group}-nobody")
    assert re.search(r"GroupIdNotFoundException|not found|does not exist", out), out


def test_kafka_share_groups_reset_delete_offsets_and_delete(share_broker, java_build, tmp_path):  # noqa: F811
    """kafka-share-groups.sh on an empty group (AlterShareGroupOffsets, DeleteShareGroupOffsets,
    DeleteGroups): after 20 records over 2 partitions were accepted, --reset-offsets --to-earliest
    moves every START-OFFSET back to 0 and the group reads all 20 again, each for the first time
    (delivery count 1); --delete-offsets forgets the topic's state (nothing left to describe);
    --delete removes the group from --list. A group with a member is not reset."""
    tools = Tools(java_build / "lib", share_broker)
    topic = unique_topic("share-reset")
    group = f"{topic}-g"
    create_topic(share_broker.bootstrap, topic, 2)
    r = sharecheck(java_build, share_broker.bootstrap, "consume", topic, group, 20, 1, broker=share_broker)
    assert r["distinct"] == 20 and r["duplicates"] == 0, r
    wait_for(lambda: group_state(tools, group) == ("Empty", 0), "the group Empty after its member left", 30)

    out = sg(tools, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    rows, described = offsets_table(tools, group)
    assert sorted(rows) == [0, 1] and all(row["START-OFFSET"] == "0" for row in rows.values()), out + described
    assert all(row["LAG"] == "10" for row in rows.values()), described

    none = tmp_path / "none.txt"
    none.write_text("")
    again = sharecheck(java_build, share_broker.bootstrap, "drain", topic, group, 20, 1, none, broker=share_broker)
    assert again["distinct"] == 20 and again["duplicates"] == 0, again
    assert again["delivery_counts"] == {"1": 20}, again
    wait_for(lambda: group_state(tools, group) == ("Empty", 0), "the group Empty after the second member left", 30)

    out = sg(tools, "--delete-offsets", "--group", group, "--topic", topic)
    assert "Error" not in out and "Exception" not in out, out
    rows, described = offsets_table(tools, group)
    assert rows == {}, described

    out = sg(tools, "--delete", "--group", group)
    assert "Error" not in out and "Exception" not in out, out
    assert group not in sg(tools, "--list").split()

    member = Member(java_build, tmp_path, share_broker.bootstrap, topic, group, "reset-m1")
    try:
        def joined():
            out = sg(tools, "--describe", "--group", group, "--state")
            return re.search(rf"^{re.escape(group)}\s+\S+\s+\(\d+\)\s+Stable\s+1\s*$", out, re.M)

        wait_for(joined, "a member in the group (re-created)", 60, member.report)
        p = tools.run(SHARE_GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute",
                      expect_rc=1)
        assert f"Share group '{group}' is not empty." in p.stderr, p.stdout + p.stderr
        member.stop()
    finally:
        member.kill()


def test_share_group_and_its_state_survive_a_kill9(tmp_path, java_build):  # noqa: F811
    """A single broker killed with kill -9 and started again: the share group is still listed
    (Empty), its partitions keep their start offsets (the 20 records accepted before the kill),
    and a new member of the group reads only the 10 records produced after them."""
    if external():
        pytest.skip("kills the broker")
    b = start_broker(tmp_path, "restart")
    try:
        tools = Tools(java_build / "lib", b)
        topic = unique_topic("share-restart")
        group = f"{topic}-g"
        create_topic(b.bootstrap, topic, 2)
        r = sharecheck(java_build, b.bootstrap, "consume", topic, group, 20, 1, broker=b)
        assert r["distinct"] == 20 and r["duplicates"] == 0, r
        sharecheck(java_build, b.bootstrap, "produce", topic, 10, 20, broker=b)
        b.kill9()
        b.start()
        wait_for(lambda: group in sg(tools, "--list").split(), "the group listed after the restart", 60, b.log_tail)
        rows, out = offsets_table(tools, group)
        assert sorted(rows) == [0, 1], out
        assert all(row["START-OFFSET"] == "10" and row["LAG"] == "5" for row in rows.values()), out
        accepted = tmp_path / "accepted.txt"
        accepted.write_text("\n".join(f"k{i}" for i in range(20)) + "\n")
        again = sharecheck(java_build, b.bootstrap, "drain", topic, group, 30, 1, accepted, broker=b)
        assert again["distinct"] == 10 and again["duplicates"] == 0 and again["missing"] == 0, again
        assert again["excluded_delivered"] == {}, again
    finally:
        b.kill9()


# ------------------------------------------------------------------------------ 3-broker failover


def test_acknowledged_records_stay_acknowledged_when_the_leader_is_killed(tmp_path, java_build):  # noqa: F811
    """A 3-broker cluster, a replication-factor-3 topic with one partition (its leader keeps the
    share partition's state). A consumer accepts 40 of 120 records (commitSync) and crashes
    (halt, no close) holding the rest acquired and unacknowledged; then the partition's leader is
    killed with SIGKILL and 60 more records are produced. Two new consumers in the group then get
    every other record (the held ones at least once, after their locks expired or the crashed
    member was dropped), never one of the 40 accepted, and none twice after a successful
    acknowledgement."""
    if external():
        pytest.skip("kills runnel processes: needs our own cluster")
    from test_cluster import DevCluster, create_rf3

    c = DevCluster(tmp_path, settings=[f"{k}={v}" for k, v in SHARE_SETTINGS.items()])
    try:
        topic = unique_topic("share-failover")
        group = f"{topic}-g"
        create_rf3(c, topic, 1)
        sharecheck(java_build, c.bootstrap, "produce", topic, 120, broker=c)
        some = sharecheck(java_build, c.bootstrap, "consume-some", topic, group, 40, broker=c)
        accepted = some["accepted"]
        assert len(accepted) == 40 and len(set(accepted)) == 40, some

        leader = c.known_leader(topic)
        os.kill(c.pid(leader), signal.SIGKILL)
        # `runnel dev` restarts it; the producer and consumers find whichever broker leads now.
        sharecheck(java_build, c.bootstrap, "produce", topic, 60, 120, broker=c, timeout_s=120)

        accepted_file = tmp_path / "accepted.txt"
        accepted_file.write_text("".join(k + "\n" for k in accepted))
        r = sharecheck(java_build, c.bootstrap, "drain", topic, group, 180, 2, accepted_file, broker=c,
                       timeout_s=150)
        assert r["excluded_delivered"] == {}, f"accepted records delivered again: {r}"
        assert r["expected"] == 140 and r["missing"] == 0, r
        if r["commit_errors"] == 0:
            assert r["duplicates"] == 0, r

        def settled():
            d = sharecheck(java_build, c.bootstrap, "describe", group)["group"]
            return d if d["offsets"].get(f"{topic}-0", {}).get("lag") == 0 else None

        wait_for(settled, "lag 0 after the drain", 60,
                 lambda: json.dumps(sharecheck(java_build, c.bootstrap, "describe", group)) + c.diagnostics())
    finally:
        c.close()
