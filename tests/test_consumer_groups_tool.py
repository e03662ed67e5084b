"""kafka-consumer-groups (org.apache.kafka.tools.consumer.group.ConsumerGroupCommand) against the
broker, with groups made by the official Java consumer (GroupCheck, see test_java_groups.py).

The tool's calls: --list is ListGroups (v5 with a type filter for --list --type/--state),
--describe is DescribeGroups (classic groups) / ConsumerGroupDescribe (consumer-protocol groups)
plus OffsetFetch and ListOffsets(latest) for LOG-END-OFFSET, --reset-offsets is DescribeGroups +
ListOffsets + OffsetCommit, --delete-offsets is OffsetDelete, --delete is DeleteGroups, all routed
through FindCoordinator(GROUP). The tool exits 0 even when it prints "Error: ...", so every test
asserts on what it prints.
"""

import re

import pytest

from conftest import unique_topic
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)
from conftest import wait_for
from test_java_groups import committed_offsets, members, produce  # noqa: F401  (fixture)
from test_kafka_tools import Tools, tools  # noqa: F401  (fixture)

GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PARTITIONS = 3


def cg(tools, *args, **kw):  # noqa: F811
    """kafka-consumer-groups args...; returns stdout + stderr (the tool splits messages across both)."""
    p = tools.run(GROUPS, *args, **kw)
    return p.stdout + p.stderr


def table(out, first_column="GROUP"):
    """The rows of the whitespace-separated table whose header starts with `first_column`, as
    dicts keyed by the header's column names. (Not for --state: its header has a space in a name.)"""
    rows, header = [], None
    for line in out.splitlines():
        cols = line.split()
        if not cols:
            header = None if rows else header
            continue
        if cols[0] == first_column:
            header = cols
            continue
        if header and not line.startswith(("Error", "Consumer group", "[")) and len(cols) == len(header):
            rows.append(dict(zip(header, cols)))
    return rows


def describe_offsets(tools, group):  # noqa: F811
    """--describe --group G as {(topic, partition): row}."""
    out = cg(tools, "--describe", "--group", group)
    return {(r["TOPIC"], int(r["PARTITION"])): r for r in table(out)}, out


def describe_state(tools, group):  # noqa: F811
    """--describe --state as (assignment strategy, state, member count)."""
    out = cg(tools, "--describe", "--group", group, "--state")
    m = re.search(rf"^{re.escape(group)}\s+\S+\s+\(\d+\)\s+(\S+)\s+(\S+)\s+(\d+)\s*$", out, re.M)
    assert m, f"no state row for {group} in:\n{out}"
    return m.group(1), m.group(2), int(m.group(3))


def listed_groups(tools):  # noqa: F811
    return cg(tools, "--list").split()


def consume_and_commit(members, bootstrap, group, topic, count, name, protocol="classic", reset="earliest"):  # noqa: F811
    """A GroupCheck member that processes exactly `count` records, commits, leaves the group and
    exits; returns its [(partition, offset, value)]."""
    m = members(name, bootstrap, group, topic, protocol,
                extra=["--exit-after-records", count, "--auto-offset-reset", reset, "--max-seconds", 120])
    out = m.wait_ok(timeout_s=180)
    assert f"processed {count} records" in out, m.report()
    return m.records()


def test_list_and_describe_lag(tools, java_build, members):  # noqa: F811
    """After a member committed 10 records per partition and left, and 3 more per partition were
    produced: --list shows the group; --describe shows for every partition CURRENT-OFFSET 10,
    LOG-END-OFFSET 13 and LAG 3 with no consumer; --describe --state shows Empty with 0 members;
    --list --state / --type show the group as Empty / Classic. A group nobody created is not
    described ('does not exist' / not found)."""
    topic = unique_topic("cg-lag")
    group = f"{topic}-g"
    tools.create_topic(topic, PARTITIONS)
    produce(java_build, tools.bootstrap, topic, 30)
    consume_and_commit(members, tools.bootstrap, group, topic, 30, "lag1")
    produce(java_build, tools.bootstrap, topic, 9, 30)

    assert group in listed_groups(tools)
    rows, out = describe_offsets(tools, group)
    assert sorted(rows) == [(topic, p) for p in range(PARTITIONS)], out
    for p in range(PARTITIONS):
        r = rows[(topic, p)]
        assert (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == ("10", "13", "3"), out
        assert r["CONSUMER-ID"] == "-", out
    assert f"Consumer group '{group}' has no active members." in out, out
    assert describe_state(tools, group)[1:] == ("Empty", 0)

    out = cg(tools, "--list", "--state")
    assert re.search(rf"^{re.escape(group)}\s+Empty\s*$", out, re.M), out
    out = cg(tools, "--list", "--type")
    assert re.search(rf"^{re.escape(group)}\s+Classic\s*$", out, re.M), out

    out = cg(tools, "--describe", "--group", f"{group}-nobody")
    assert re.search(r"GroupIdNotFoundException|does not exist|not found", out), out


@pytest.mark.parametrize("protocol,strategy,group_type", [
    pytest.param("classic", "range", "Classic", id="classic"),
    pytest.param("consumer", "uniform", "Consumer", id="consumer-kip848"),
])
def test_describe_running_member(tools, java_build, members, protocol, strategy, group_type):  # noqa: F811
    """While one GroupCheck member owns all partitions: --describe --members lists it (consumer id
    derived from its client id for classic, host, client id, 3 partitions; --verbose shows its
    assignment), --describe --state shows Stable with 1 member and the assignor, --describe shows
    the member on every partition with LAG 0 once it caught up, --list --type shows the group's
    type. The coordinator refuses to change an active group: --reset-offsets ('inactive'),
    --delete-offsets of the subscribed topic (GroupSubscribedToTopic) and --delete (GroupNotEmpty).
    After the member leaves the group is Empty."""
    topic = unique_topic(f"cg-live-{protocol}")
    group = f"{topic}-g"
    tools.create_topic(topic, PARTITIONS)
    produce(java_build, tools.bootstrap, topic, 12)
    m = members("live1", tools.bootstrap, group, topic, protocol)
    wait_for(lambda: m.assignment() == set(range(PARTITIONS)), "live1 owns all partitions", 60, m.report)

    def caught_up():
        rows, out = describe_offsets(tools, group)
        ok = (sorted(rows) == [(topic, p) for p in range(PARTITIONS)]
              and all(r["CURRENT-OFFSET"] == "4" and r["LAG"] == "0" for r in rows.values()))
        return ok and (rows, out)
    rows, out = wait_for(caught_up, "--describe shows every partition at offset 4 with lag 0", 60,
                         lambda: describe_offsets(tools, group)[1])
    for r in rows.values():
        assert r["CLIENT-ID"] == "live1" and r["CONSUMER-ID"] != "-" and r["HOST"] != "-", out

    out = cg(tools, "--describe", "--group", group, "--members")
    mrows = table(out)
    assert len(mrows) == 1, out
    r = mrows[0]
    assert r["GROUP"] == group and r["CLIENT-ID"] == "live1" and r["#PARTITIONS"] == str(PARTITIONS), out
    assert "127.0.0.1" in r["HOST"], out
    if protocol == "classic":
        assert r["CONSUMER-ID"].startswith("live1-"), out
    out = cg(tools, "--describe", "--group", group, "--members", "--verbose")
    assert f"{topic}:0,1,2" in out, out

    assert describe_state(tools, group) == (strategy, "Stable", 1)
    out = cg(tools, "--list", "--type")
    assert re.search(rf"^{re.escape(group)}\s+{group_type}\s*$", out, re.M), out

    out = cg(tools, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert f"Assignments can only be reset if the group '{group}' is inactive" in out, out
    out = cg(tools, "--delete-offsets", "--group", group, "--topic", topic)
    assert out.count("GroupSubscribedToTopicException") == PARTITIONS, out
    out = cg(tools, "--delete", "--group", group)
    assert "GroupNotEmptyException" in out, out
    assert committed_offsets(java_build, tools.bootstrap, group, topic) == {p: (4, 4) for p in range(PARTITIONS)}

    m.request_stop()
    m.wait_ok(timeout_s=60)
    wait_for(lambda: describe_state(tools, group)[1:] == ("Empty", 0), "the group is Empty after the member left", 30)


def test_reset_offsets(tools, java_build, members):  # noqa: F811
    """--reset-offsets on an inactive group: --to-earliest --execute sets every partition to 0
    (--describe shows CURRENT-OFFSET 0 and LAG 10) and a fresh member with auto.offset.reset=none
    (so it must find committed offsets) resumes from offset 0 and reads all 30 records again;
    --dry-run changes nothing; --to-offset on one partition and --shift-by on another change only
    those partitions; a shift below the start is clamped to the earliest offset."""
    topic = unique_topic("cg-reset")
    group = f"{topic}-g"
    tools.create_topic(topic, PARTITIONS)
    produce(java_build, tools.bootstrap, topic, 30)
    consume_and_commit(members, tools.bootstrap, group, topic, 30, "reset1")
    assert committed_offsets(java_build, tools.bootstrap, group, topic) == {p: (10, 10) for p in range(PARTITIONS)}

    out = cg(tools, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert {(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)} == \
        {(topic, str(p), "0") for p in range(PARTITIONS)}, out
    assert committed_offsets(java_build, tools.bootstrap, group, topic) == {p: (10, 10) for p in range(PARTITIONS)}

    out = cg(tools, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert {(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)} == \
        {(topic, str(p), "0") for p in range(PARTITIONS)}, out
    rows, out = describe_offsets(tools, group)
    assert {k: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for k, r in rows.items()} == \
        {(topic, p): ("0", "10", "10") for p in range(PARTITIONS)}, out

    recs = consume_and_commit(members, tools.bootstrap, group, topic, 30, "reset2", reset="none")
    first = {}
    for p, o, _ in recs:
        first.setdefault(p, o)
    assert first == {p: 0 for p in range(PARTITIONS)}, f"did not resume from 0: {first}"
    assert sorted(v for _, _, v in recs) == sorted(f"v{i}" for i in range(30)), recs
    assert committed_offsets(java_build, tools.bootstrap, group, topic) == {p: (10, 10) for p in range(PARTITIONS)}

    out = cg(tools, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", 4, "--execute")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)] == [("1", "4")], out
    out = cg(tools, "--reset-offsets", "--group", group, "--topic", f"{topic}:2", "--shift-by", -3, "--execute")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)] == [("2", "7")], out
    assert committed_offsets(java_build, tools.bootstrap, group, topic) == {0: (10, 10), 1: (4, 10), 2: (7, 10)}
    rows, out = describe_offsets(tools, group)
    assert {p: rows[(topic, p)]["LAG"] for p in range(PARTITIONS)} == {0: "0", 1: "6", 2: "3"}, out

    out = cg(tools, "--reset-offsets", "--group", group, "--topic", f"{topic}:2", "--shift-by", -100, "--execute")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)] == [("2", "0")], out
    assert committed_offsets(java_build, tools.bootstrap, group, topic)[2] == (0, 10)


def test_delete_offsets_and_delete_group(tools, java_build, members):  # noqa: F811
    """--delete-offsets --topic A removes the group's offsets for every partition of A (reported
    Successful per partition) and leaves its offsets for topic B alone (--describe then shows only
    B); --delete removes the group, after which --list no longer shows it, describing it fails and
    deleting it again reports GroupIdNotFound."""
    topic_a = unique_topic("cg-del-a")
    topic_b = unique_topic("cg-del-b")
    group = f"{topic_a}-g"
    for t in (topic_a, topic_b):
        tools.create_topic(t, PARTITIONS)
        produce(java_build, tools.bootstrap, t, 9)
    consume_and_commit(members, tools.bootstrap, group, topic_a, 9, "del1")
    consume_and_commit(members, tools.bootstrap, group, topic_b, 9, "del2")
    rows, out = describe_offsets(tools, group)
    assert sorted(rows) == sorted((t, p) for t in (topic_a, topic_b) for p in range(PARTITIONS)), out

    out = cg(tools, "--delete-offsets", "--group", group, "--topic", topic_a)
    assert f"Request succeeded for deleting offsets from group {group}." in out, out
    assert {(r["TOPIC"], r["PARTITION"], r["STATUS"]) for r in table(out, "TOPIC")} == \
        {(topic_a, str(p), "Successful") for p in range(PARTITIONS)}, out
    assert committed_offsets(java_build, tools.bootstrap, group, topic_a) == {p: (-1, 3) for p in range(PARTITIONS)}
    assert committed_offsets(java_build, tools.bootstrap, group, topic_b) == {p: (3, 3) for p in range(PARTITIONS)}
    rows, out = describe_offsets(tools, group)
    assert sorted(rows) == [(topic_b, p) for p in range(PARTITIONS)], out

    assert group in listed_groups(tools)
    out = cg(tools, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out, out
    wait_for(lambda: group not in listed_groups(tools), f"{group} gone from --list", 15)
    out = cg(tools, "--describe", "--group", group)
    assert re.search(r"GroupIdNotFoundException|does not exist|not found", out), out
    out = cg(tools, "--delete", "--group", group)
    assert "GroupIdNotFoundException" in out, out
    assert committed_offsets(java_build, tools.bootstrap, group, topic_b) == {p: (-1, 3) for p in range(PARTITIONS)}


def test_committed_offsets_survive_restart(runnel_broker, java_build, members):  # noqa: F811
    """Committed offsets are durable: after a group committed offsets (then one partition was reset
    to a distinct value) and more records were produced, a clean broker restart keeps the group
    listed, keeps every committed offset (Admin listConsumerGroupOffsets and --describe agree, with
    the same lag) and a fresh member with auto.offset.reset=none resumes exactly at the committed
    offsets. (Needs to restart the broker, so it always runs against runnel.)"""
    tools = Tools(java_build / "lib", runnel_broker)  # noqa: F811
    b = runnel_broker
    topic = unique_topic("cg-restart")
    group = f"{topic}-g"
    tools.create_topic(topic, PARTITIONS)
    produce(java_build, b.bootstrap, topic, 30)
    consume_and_commit(members, b.bootstrap, group, topic, 30, "rs1")
    out = cg(tools, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", 6, "--execute")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)] == [("1", "6")], out
    produce(java_build, b.bootstrap, topic, 6, 30)
    expected = {0: (10, 12), 1: (6, 12), 2: (10, 12)}
    assert committed_offsets(java_build, b.bootstrap, group, topic) == expected
    before, _ = describe_offsets(tools, group)

    b.restart()

    assert committed_offsets(java_build, b.bootstrap, group, topic) == expected, b.log_tail()
    assert group in listed_groups(tools)
    after, out = describe_offsets(tools, group)
    assert {k: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for k, r in after.items()} == \
        {k: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for k, r in before.items()}, out
    assert describe_state(tools, group)[1:] == ("Empty", 0)

    recs = consume_and_commit(members, b.bootstrap, group, topic, 2 + 6 + 2, "rs2", reset="none")
    first = {}
    for p, o, _ in recs:
        first.setdefault(p, o)
    assert first == {p: c for p, (c, _) in expected.items()}, f"did not resume at the committed offsets: {first}"
    assert committed_offsets(java_build, b.bootstrap, group, topic) == {p: (12, 12) for p in range(PARTITIONS)}
