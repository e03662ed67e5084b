"""The metadata quorum's voters and observers on `runnel dev --brokers 5 --controller-voters 3`:
brokers 0-2 vote, brokers 3 and 4 follow the metadata log as observers (Raft learners).
Kafka's own `kafka-metadata-quorum` tool shows them; observers host replicas and serve
clients; metadata stays writable with one voter down and is not with two (observers do
not count towards the quorum); an observer that restarts catches up again."""

import os
import re
import signal
import subprocess

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import ROOT, unique_topic, wait_for, wait_for_topic
from test_cluster import DevCluster
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)

QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
JAVA_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m"]
VOTERS, OBSERVERS = {0, 1, 2}, {3, 4}


def quorum(java_build, bootstrap, *args):  # noqa: F811
    """Runs kafka-metadata-quorum describe ARGS; its stdout."""
    cmd = ["java", *JAVA_OPTS, "-cp", f"{java_build / 'lib'}/*", QUORUM, "--bootstrap-server", bootstrap,
           "describe", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, f"{' '.join(args)} exited with {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return p.stdout


def replication(java_build, bootstrap):  # noqa: F811
    """{node id: (status, lag)} from describe --replication."""
    rows = {}
    for line in quorum(java_build, bootstrap, "--replication").splitlines():
        f = line.split()
        if len(f) >= 7 and f[0].isdigit():
            rows[int(f[0])] = (f[-1], int(f[3]))
    return rows


def status(java_build, bootstrap):  # noqa: F811
    """{field: value} from describe --status."""
    out = quorum(java_build, bootstrap, "--status")
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+):\s+(.*)$", out, re.M)}


def create(bootstrap, topic, timeout_s, assignment=None):
    """Creates a topic through `bootstrap` alone; raises if it is not created in time."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    new = NewTopic(topic, 1, replica_assignment=assignment) if assignment else NewTopic(topic, 1, 3)
    admin.create_topics([new], operation_timeout=timeout_s, request_timeout=timeout_s)[topic].result(
        timeout=timeout_s + 5)


def test_voters_and_observers(tmp_path, java_build):  # noqa: F811
    c = DevCluster(tmp_path, brokers=5, args=["--controller-voters", "3"])
    observer = f"127.0.0.1:{c.port + 3}"
    stopped = []
    try:
        # Kafka's tool, asked through an observer: three voters, two observers, none behind.
        def members_caught_up():
            rows = replication(java_build, observer)
            roles = {i: s for i, (s, _) in rows.items()}
            return ({i for i, s in roles.items() if s in ("Leader", "Follower")} == VOTERS
                    and {i for i, s in roles.items() if s == "Observer"} == OBSERVERS
                    and all(lag == 0 for _, lag in rows.values()))

        wait_for(members_caught_up, "voters 0-2 and observers 3-4 caught up", 30, c.diagnostics, 1)
        st = status(java_build, observer)
        assert int(st["LeaderId"]) in VOTERS, st
        assert [int(i) for i in re.findall(r'"id": (\d+)', st["CurrentVoters"])] == sorted(VOTERS), st
        assert sorted(int(i) for i in re.findall(r'"id": (\d+)', st["CurrentObservers"])) == sorted(OBSERVERS), st
        assert "CONTROLLER://127.0.0.1:" in st["CurrentVoters"], st

        # Observers hold replicas and serve: a partition led by observer 3, through it alone.
        topic = unique_topic("observed")
        create(observer, topic, 30, assignment=[[3, 4, 0]])
        wait_for_topic(c.admin, topic, 1)
        wait_for(lambda: c.leaders_seen_by(4, topic) == {0: 3}, "observer 3 to lead the partition", 30,
                 c.diagnostics)
        p = Producer({"bootstrap.servers": observer, "acks": "all", "enable.idempotence": True})
        for i in range(100):
            p.produce(topic, str(i).encode())
        assert p.flush(30) == 0
        cons = Consumer({"bootstrap.servers": observer, "group.id": topic, "auto.offset.reset": "earliest"})
        cons.subscribe([topic])
        got = []
        wait_for(lambda: got.extend(m.value() for m in cons.consume(100, 1) if not m.error()) or len(got) >= 100,
                 "the 100 records back", 60, c.diagnostics, 0)
        cons.close()
        assert got == [str(i).encode() for i in range(100)]

        # The controller stops: another voter takes over and metadata stays writable.
        leader = int(st["LeaderId"])
        os.kill(c.pid(leader), signal.SIGSTOP)
        stopped.append(leader)
        wait_for(lambda: int(status(java_build, observer)["LeaderId"]) not in (leader, -1),
                 "a new metadata leader among the other voters", 60, c.diagnostics, 1)
        create(observer, unique_topic("one-voter-down"), 30)

        # A second voter stops: one voter and two observers are no majority of the voters.
        second = min(VOTERS - {leader})
        os.kill(c.pid(second), signal.SIGSTOP)
        stopped.append(second)
        try:
            create(observer, unique_topic("no-quorum"), 8)
            raise AssertionError("a topic was created with two of the three voters stopped")
        except KafkaException as e:
            # No controller to decide, or one that cannot commit: the request times out.
            assert e.args[0].code() in (KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
                                        KafkaError.NOT_CONTROLLER), e

        for b in stopped:
            os.kill(c.pid(b), signal.SIGCONT)
        stopped.clear()
        create(observer, unique_topic("quorum-back"), 60)

        # An observer killed and restarted (runnel dev restarts it) catches up again.
        old = c.pid(4)
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: c.pid(4) != old, "broker 4 restarted", 30, c.diagnostics)
        create(observer, unique_topic("while-4-restarts"), 30)
        wait_for(lambda: replication(java_build, observer).get(4) == ("Observer", 0),
                 "the restarted observer caught up", 60, c.diagnostics, 1)
        wait_for(lambda: c.registered() == 5, "five brokers listed", 30, c.diagnostics)
    finally:
        for b in stopped:
            os.kill(c.pid(b), signal.SIGCONT)
        c.close()
