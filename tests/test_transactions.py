"""Transactions and exactly-once with real clients against one broker: the Java client
(TxnCheck, tests/java/src/TxnCheck.java: commit, abort, the last stable offset, fencing,
consume-transform-produce), librdkafka (confluent-kafka) and franz-go (tests/go/txncheck).
"""

import os
import re
import signal
import subprocess
import time

import pytest

from conftest import Broker, admin_client, create_topic, unique_topic, wait_for
from test_franz_go import BUILD_SCRIPT, CACHE, ROOT
from test_java_client import _clip, java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)


@pytest.fixture(scope="session")
def txncheck_bin():
    """tests/go/txncheck, built once per session by tests/go/build.sh."""
    res = subprocess.run([str(BUILD_SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"tests/go/build.sh failed\n{res.stdout}{res.stderr}"
    path = CACHE / "go" / "txncheck"
    assert path.is_file(), f"build.sh succeeded but {path} is missing"
    return path

TXN_CHECK_TIMEOUT_S = 300


@pytest.mark.parametrize("version", [2, 1])
def test_java_transactions_commit_abort_and_fence(broker, java_build, tmp_path, version):  # noqa: F811
    """A transactional producer's commits are read by read_committed consumers and its aborts
    are not; an open transaction holds the last stable offset; a second instance with the same
    transactional id fences the first, whose records are never read as committed; pipelined
    requests of a transactional producer keep their order while the first batches wait for
    the coordinator (to check, or with transactions version 2 to add, the partition); a
    consume-transform-produce loop commits its consumer's offsets with each transaction
    (sendOffsetsToTransaction), one round aborted and redone, and the output holds each input
    exactly once. Both transaction versions: 2, which the broker finalizes by default (the
    producer's epoch moves at every commit and abort, no AddPartitionsToTxn nor
    AddOffsetsToTxn), and 1 (`transaction.version=1`)."""
    if version == 1:
        broker = Broker(tmp_path / "tv1", settings={"transaction.version": "1"}).start()
    try:
        args = ["--bootstrap", broker.bootstrap, "--topic-prefix", unique_topic("txn"),
                "--timeout-s", TXN_CHECK_TIMEOUT_S - 30, "--transaction-version", version]
        p = run_java(java_build, "TxnCheck", args, TXN_CHECK_TIMEOUT_S)
        report = f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{_clip(p.stderr)}"
        if hasattr(broker, "log_tail"):
            report += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
    finally:
        if version == 1:
            broker.kill9()
    assert p.returncode == 0, f"TxnCheck exited with {p.returncode}\n{report}"
    assert "TxnCheck OK: commit/abort, last stable offset, fencing, pipelining, consume-transform-produce" in p.stdout, report


def test_kafka_streams_exactly_once_word_count(broker, java_build, tmp_path):  # noqa: F811
    """A Kafka Streams application with processing.guarantee=exactly_once_v2 (word count: a
    repartition topic and a changelog) counts exactly, and again after a restart with an
    empty state directory (its store rebuilt from the changelog); no count read with
    read_committed ever exceeds the true one (tests/java/src/StreamsCheck.java)."""
    args = ["--bootstrap", broker.bootstrap, "--prefix", unique_topic("streams"), "--state-dir", tmp_path,
            "--timeout-s", 330]
    p = run_java(java_build, "StreamsCheck", args, 360)
    report = f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{_clip(p.stderr)}"
    assert p.returncode == 0, f"StreamsCheck exited with {p.returncode}\n{report}"
    assert "StreamsCheck OK" in p.stdout, report


# ---------------------------------------------------------------------------------------------
# librdkafka (confluent-kafka)

def _rd_producer(bootstrap, txn_id):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 20000, "message.timeout.ms": 20000})


def _rd_read(bootstrap, topic, partitions, committed, group=None):
    """Every value in the topic up to the end a consumer with this isolation sees (the last
    stable offset for read_committed), by partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"reader-{topic}",
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, at_end = {}, set()
        deadline = time.monotonic() + 60
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"reading {topic} timed out: {out}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            out.setdefault(m.partition(), []).append(m.value().decode())
        return out
    finally:
        c.close()


def _count(read, prefix):
    return sum(v.startswith(prefix) for vs in read.values() for v in vs)


def test_librdkafka_transactions_commit_abort_fence_and_offsets(broker):
    """librdkafka's transactional producer: commits are read by read_committed consumers, an
    abort is not; a second instance fences the first; a consume-transform-produce round
    commits its consumer's offsets with the transaction (send_offsets_to_transaction)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic, fenced, src, dst = (unique_topic(f"rdtxn-{s}") for s in ("commit", "fence", "in", "out"))
    for t in (topic, fenced, src, dst):
        create_topic(broker.bootstrap, t, partitions=3)

    p = _rd_producer(broker.bootstrap, topic + "-tx")
    p.init_transactions(30)
    for prefix, commit in (("c1-", True), ("ab-", False), ("c2-", True)):
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, value=f"{prefix}{i}", partition=i % 3)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    committed = _rd_read(broker.bootstrap, topic, 3, committed=True)
    for part in range(3):
        want = [f"{pre}{i}" for pre in ("c1-", "c2-") for i in range(part, 30, 3)]
        assert committed.get(part) == want, (part, committed)
    assert _count(_rd_read(broker.bootstrap, topic, 3, committed=False), "ab-") == 30

    zombie = _rd_producer(broker.bootstrap, fenced + "-tx")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(6):
        zombie.produce(fenced, value=f"zombie-{i}", partition=i % 3)
    zombie.flush(30)
    nxt = _rd_producer(broker.bootstrap, fenced + "-tx")
    nxt.init_transactions(60)
    nxt.begin_transaction()
    for i in range(6):
        nxt.produce(fenced, value=f"next-{i}", partition=i % 3)
    nxt.commit_transaction(30)
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    read = _rd_read(broker.bootstrap, fenced, 3, committed=True)
    assert _count(read, "zombie-") == 0 and _count(read, "next-") == 6, read

    # Consume-transform-produce: 12 records in, each written out once, offsets committed with
    # the transaction.
    plain = __import__("confluent_kafka").Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(12):
        plain.produce(src, value=f"in-{i}", partition=i % 3)
    plain.flush(30)
    group = src + "-group"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([src])
    t = _rd_producer(broker.bootstrap, dst + "-tx")
    t.init_transactions(30)
    done, deadline = 0, time.monotonic() + 90
    while done < 12:
        assert time.monotonic() < deadline, f"consume-transform-produce stalled at {done}"
        msgs = c.consume(12, 0.5)
        if not msgs:
            continue
        t.begin_transaction()
        for m in msgs:
            assert not m.error(), m.error()
            t.produce(dst, value=m.value().decode().replace("in-", "out-"), partition=m.partition())
        t.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        t.commit_transaction(30)
        done += len(msgs)
    c.close()
    out = _rd_read(broker.bootstrap, dst, 3, committed=True)
    assert sorted(v for vs in out.values() for v in vs) == sorted(f"out-{i}" for i in range(12)), out
    admin = admin_client(broker.bootstrap)
    from confluent_kafka import ConsumerGroupTopicPartitions

    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert sum(tp.offset for tp in offsets.topic_partitions) == 12, offsets.topic_partitions


# ---------------------------------------------------------------------------------------------
# franz-go

def test_franz_go_transactions_commit_abort_and_fence(broker, txncheck_bin):
    """franz-go's transactional client: commit, abort, read_committed, fencing
    (tests/go/txncheck/main.go)."""
    res = subprocess.run([str(txncheck_bin), "--bootstrap", broker.bootstrap,
                          "--topic-prefix", unique_topic("franztxn"), "--timeout", "150s"],
                         capture_output=True, text=True, timeout=200)
    out = f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"
    assert res.returncode == 0, out
    assert "PASS txncheck: commit/abort, fencing" in res.stdout, out


# ---------------------------------------------------------------------------------------------
# Three brokers: the transaction coordinator killed mid-transaction

def _txn_coordinator(c, txn_id):
    """The broker coordinating `txn_id` (FindCoordinator key type 1), waiting until one does."""
    import kafka_wire as kw

    def found():
        for b in range(c.brokers):
            try:
                with kw.Conn(f"127.0.0.1:{c.port + b}") as conn:
                    r = conn.request(kw.find_coordinator_v1_request(txn_id, conn.next_correlation_id(), key_type=1))
                    error, _, node = kw.decode_find_coordinator_v1(r)
                    if error == 0:
                        return node + 1
            except OSError:
                continue
        return 0
    return wait_for(found, f"a coordinator for {txn_id}", 60, c.diagnostics) - 1


def _ends(bootstrap, topic, partitions, committed):
    """Each partition's end as a consumer with this isolation sees it (the last stable offset
    for read_committed), asked again, by a new consumer, while leadership moves (bounded)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    deadline = time.monotonic() + 60
    while True:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{topic}",
                      "isolation.level": "read_committed" if committed else "read_uncommitted"})
        try:
            return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            c.close()


def test_transactions_survive_their_coordinator_being_killed(tmp_path):
    """RF 3 everywhere (__transaction_state included). kill -9 of the transaction coordinator
    with a transaction open: the producer's commit goes through the new coordinator (the new
    leader of the id's __transaction_state partition, which read the open transaction back)
    and read_committed sees every record. A second producer abandons its transaction and its
    coordinator is killed: the new one aborts it at its timeout, so the last stable offset
    reaches the high watermark and none of its records is read as committed."""
    from test_cluster import DevCluster, create_rf3

    settings = ["transaction.state.log.num.partitions=4", "offsets.topic.num.partitions=4",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms=500"]
    c = DevCluster(tmp_path, settings=settings)
    try:
        topic = unique_topic("txnkill")
        create_rf3(c, topic, partitions=3)
        txn_id = topic + "-tx"
        p = _rd_producer(c.bootstrap, txn_id)
        p.init_transactions(60)
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, value=f"kept-{i}", partition=i % 3)
        assert p.flush(60) == 0
        victim = _txn_coordinator(c, txn_id)
        os.kill(c.pid(victim), signal.SIGKILL)
        p.commit_transaction(90)
        # EndTxn answers once the commit is prepared; the markers follow (as in Kafka), and a
        # partition the killed broker led gets its marker once it has a leader again.
        wait_for(lambda: _ends(c.bootstrap, topic, 3, True) == _ends(c.bootstrap, topic, 3, False),
                 "the commit's markers written (stable offset at the high watermark)", 90, c.diagnostics)
        read = _rd_read(c.bootstrap, topic, 3, committed=True)
        assert sorted(v for vs in read.values() for v in vs) == sorted(f"kept-{i}" for i in range(30)), read

        # An abandoned transaction (timeout 3 s) whose coordinator dies too.
        wait_for(lambda: c.registered() == c.brokers, "the killed broker back", 60, c.diagnostics)
        from confluent_kafka import Producer

        lost = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": topic + "-abandoned",
                         "transaction.timeout.ms": 3000})
        lost.init_transactions(60)
        lost.begin_transaction()
        for i in range(9):
            lost.produce(topic, value=f"abandoned-{i}", partition=i % 3)
        assert lost.flush(60) == 0
        assert _ends(c.bootstrap, topic, 3, True) != _ends(c.bootstrap, topic, 3, False), "an open transaction"
        victim = _txn_coordinator(c, topic + "-abandoned")
        os.kill(c.pid(victim), signal.SIGKILL)
        wait_for(lambda: _ends(c.bootstrap, topic, 3, True) == _ends(c.bootstrap, topic, 3, False),
                 "the abandoned transaction aborted (stable offset at the high watermark)", 90, c.diagnostics)
        read = _rd_read(c.bootstrap, topic, 3, committed=True)
        assert _count(read, "abandoned-") == 0 and _count(read, "kept-") == 30, read
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# kafka-transactions.sh

TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"


def test_kafka_transactions_tool_lists_describes_and_aborts(java_build, broker):  # noqa: F811
    """kafka-transactions.sh against an open transaction: `list` and `describe` show it
    Ongoing with its partitions (DescribeTransactions, ListTransactions), `describe-producers`
    shows its start offset (DescribeProducers), `find-hanging` lists nothing, and
    `abort` (WriteTxnMarkers) ends it on one partition, so that partition's last stable
    offset reaches its high watermark."""
    from confluent_kafka import Producer

    from test_kafka_tools import Tools

    tools = Tools(java_build / "lib", broker)
    topic = unique_topic("txntool")
    create_topic(broker.bootstrap, topic, partitions=2)
    txn_id = topic + "-tx"
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 120000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=f"open-{i}", partition=i % 2)
    assert p.flush(30) == 0

    listed = tools.run(TRANSACTIONS_TOOL, "list").stdout
    assert re.search(rf"^{re.escape(txn_id)}\s+\d+\s+\d+\s+Ongoing", listed, re.M), listed
    described = tools.run(TRANSACTIONS_TOOL, "describe", "--transactional-id", txn_id).stdout
    assert "Ongoing" in described and f"{topic}-0" in described and f"{topic}-1" in described, described
    producers = tools.run(TRANSACTIONS_TOOL, "describe-producers", "--topic", topic, "--partition", 0).stdout
    row = [line.split() for line in producers.splitlines()[1:] if line.strip()]
    assert len(row) == 1, producers
    start = int(row[0][-1])  # CurrentTransactionStartOffset is the last column
    assert start >= 0, producers
    # The table of hanging transactions: only its header (the open one is known to its
    # coordinator, with this partition in it).
    hanging = tools.run(TRANSACTIONS_TOOL, "find-hanging", "--broker-id", 0).stdout
    assert hanging.splitlines()[0].startswith("Topic") and topic not in hanging, hanging

    ends = lambda committed: _ends(broker.bootstrap, topic, 2, committed)  # noqa: E731
    assert ends(True)[0] < ends(False)[0], "the open transaction holds partition 0's stable offset"
    tools.run(TRANSACTIONS_TOOL, "abort", "--topic", topic, "--partition", 0, "--start-offset", start)
    wait_for(lambda: ends(True)[0] == ends(False)[0], "partition 0 stable after the abort", 30)
    assert ends(True)[1] < ends(False)[1], "partition 1 still held by the open transaction"
    p.abort_transaction(30)
    wait_for(lambda: ends(True) == ends(False), "both partitions stable", 30)
    # The coordinator's abort marker on partition 1 carries its epoch (LatestCoordinatorEpoch,
    # the third column; -1 before any marker), and no transaction is open there.
    producers = tools.run(TRANSACTIONS_TOOL, "describe-producers", "--topic", topic, "--partition", 1).stdout
    row = [line.split() for line in producers.splitlines()[1:] if line.strip()]
    assert len(row) == 1 and int(row[0][2]) >= 0 and row[0][-1] == "None", producers
