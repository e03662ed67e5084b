"""`runnel topic`, `runnel group` and `runnel cluster` (Kafka protocol, `--bootstrap`) against
a live 3-broker cluster: topics created, listed, described with their partitions and the
configs set on them, configs altered and removed, deleted; groups listed and described with
the lag of each partition (checked against offsets committed by librdkafka), an idle group's
offsets moved to latest, earliest, an offset and a time, the group deleted; the cluster's
brokers by rack with the controller, and a paused broker showing as fenced with its
partitions under-replicated."""

import os
import signal
import subprocess

from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import RUNNEL_BIN, unique_topic, wait_for
from test_cluster import DevCluster


def runnel(c, *args, check=True, bootstrap=None):
    cmd = [RUNNEL_BIN, *map(str, args), "--bootstrap", bootstrap or c.bootstrap]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout}\n{p.stderr}"
    return p


def lags(c, group):
    """{(topic, partition): (committed, end, lag)} and the total from `runnel group describe`."""
    out = runnel(c, "group", "describe", group).stdout
    rows, total = {}, None
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[1].isdigit():
            rows[(parts[0], int(parts[1]))] = tuple(int(x) for x in parts[2:])
        if line.startswith("total lag"):
            total = int(line.split()[-1])
    return rows, total


def test_topic_group_and_cluster_commands(tmp_path):
    c = DevCluster(tmp_path, settings=["replica.lag.time.max.ms=3000", "auto.create.topics.enable=false"])
    try:
        topic = unique_topic("cli")
        p = runnel(c, "topic", "create", topic, "--partitions", 3, "--replication-factor", 3,
                   "--config", "retention.ms=3600000")
        assert f"created topic {topic}" in p.stdout
        p = runnel(c, "topic", "create", topic, "--partitions", 3, check=False)
        assert p.returncode != 0 and "TopicAlreadyExists" in p.stderr, p.stderr

        def listed():
            rows = [line.split() for line in runnel(c, "topic", "list").stdout.splitlines()]
            return [r for r in rows if r[0] == topic]
        assert wait_for(listed, "the topic listed", 30) == [[topic, "3", "3"]]

        def described_ok():
            out = runnel(c, "topic", "describe", topic).stdout
            return out if out.count(" ok") == 3 else None
        out = wait_for(described_ok, "three partitions led and in sync", 30, c.diagnostics)
        assert "retention.ms=3600000" in out, out
        runnel(c, "topic", "alter-config", topic, "--set", "cleanup.policy=compact", "--delete", "retention.ms")
        out = runnel(c, "topic", "describe", topic).stdout
        assert "cleanup.policy=compact" in out and "retention.ms" not in out, out
        runnel(c, "topic", "alter-config", topic, "--delete", "cleanup.policy")
        p = runnel(c, "topic", "describe", "no-such-topic", check=False)
        assert p.returncode != 0 and "UnknownTopicOrPartition" in p.stderr, p.stderr

        # 100 records per partition; a group commits offset 10 on each.
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(300):
            producer.produce(topic, key=str(i).encode(), value=b"v", partition=i % 3)
        assert producer.flush(30) == 0
        group = unique_topic("group")
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, q, 10) for q in range(3)], asynchronous=False)
        consumer.close()

        listing = runnel(c, "group", "list").stdout
        assert any(line.split()[:2] == [group, "Empty"] for line in listing.splitlines()), listing
        rows, total = lags(c, group)
        assert rows == {(topic, q): (10, 100, 90) for q in range(3)} and total == 270, (rows, total)

        for to, committed in [("latest", 100), ("earliest", 0), ("42", 42), ("@0", 0), ("@99999999999999", 100)]:
            p = runnel(c, "group", "seek", group, "--topic", topic, "--to", to)
            rows, total = lags(c, group)
            assert rows == {(topic, q): (committed, 100, 100 - committed) for q in range(3)}, (to, rows, p.stdout)
        p = runnel(c, "group", "seek", group, "--topic", topic, "--to", "-3", check=False)
        assert p.returncode != 0

        # A group with a member: its offsets are the member's, seek and delete are refused.
        member = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
        member.subscribe([topic])
        try:
            wait_for(lambda: member.poll(0.5) or member.assignment(), "the member assigned", 30)
            assert " member(s)" in runnel(c, "group", "describe", group).stdout
            p = runnel(c, "group", "seek", group, "--topic", topic, "--to", "earliest", check=False)
            assert p.returncode != 0, p.stdout
            p = runnel(c, "group", "delete", group, check=False)
            assert p.returncode != 0 and "NonEmptyGroup" in p.stderr, p.stderr
        finally:
            member.close()

        runnel(c, "group", "delete", group)
        assert group not in runnel(c, "group", "list").stdout

        # (__consumer_offsets, created by the commit above, may still be electing leaders.)
        out = wait_for(lambda: (lambda o: o if "0 under-replicated, 0 offline" in o else None)(
            runnel(c, "cluster", "status").stdout), "every partition led and in sync", 30, c.diagnostics)
        for b in range(3):
            assert f"rack dev-{b}" in out and f"broker   {b} 127.0.0.1:{c.port + b}" in out, out
        assert "controller" in out, out

        # A paused broker: fenced, and the partitions it held under-replicated.
        others = f"127.0.0.1:{c.port},127.0.0.1:{c.port + 1}"
        os.kill(c.pid(2), signal.SIGSTOP)
        try:
            def degraded():
                out = runnel(c, "cluster", "status", bootstrap=others).stdout
                return out if "fenced" in out and f"{topic}: 3 under-replicated (partitions 0,1,2)" in out else None
            out = wait_for(degraded, "broker 2 fenced and its partitions under-replicated", 60, c.diagnostics)
            assert "0 offline" in out, out
        finally:
            os.kill(c.pid(2), signal.SIGCONT)

        runnel(c, "topic", "delete", topic)
        wait_for(lambda: not listed(), "the topic gone", 30)
    finally:
        c.close()
