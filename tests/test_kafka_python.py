"""kafka-python (the pure-Python client, pinned in tests/requirements.txt) against Runnel:
its admin client creates and describes a topic (Metadata, DescribeConfigs,
DescribeTopicPartitions, ListConfigResources); its producer (acks=all, idempotent, none
and gzip) writes keyed records with headers to three partitions; two consumers of one
group share the partitions after a rebalance, read every record (at least once, each offset
its own record), commit, and the group's committed offsets are the partitions' ends; a consumer that
joins the group afterwards starts from those offsets and reads nothing again."""

import time
import warnings

import pytest

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with importlib APIs Python deprecates.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import CommitFailedError

from conftest import unique_topic

# ... and again when it first encodes a request.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PARTITIONS = 3
PER_CODEC = 300


def consumer(bootstrap, group):
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000,
                         max_poll_records=100, request_timeout_ms=30000)


def test_kafka_python_produces_consumes_in_a_group_and_commits(broker):
    topic, group = unique_topic("kpy"), unique_topic("kpy-group")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1,
                                      topic_configs={"retention.ms": "86400000"})])
        assert topic in admin.list_topics()
        described = admin.describe_topics([topic])
        assert [len(t["partitions"]) for t in described] == [PARTITIONS], described
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert "86400000" in repr(configs), configs
        listed = admin.list_config_resources(["TOPIC", "BROKER"])
        assert topic in listed["topic"] and listed["broker"], listed
        pages = admin.describe_topic_partitions([topic], response_partition_limit=2)
        assert topic in repr(pages), pages

        sent = {}
        for codec in (None, "gzip"):
            p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                              compression_type=codec, linger_ms=5)
            futures = []
            for i in range(PER_CODEC):
                key = b"%s-%d" % ((codec or "none").encode(), i)
                value = b"value %d " % i * (1 + i % 5)
                futures.append((key, value, p.send(topic, key=key, value=value, partition=i % PARTITIONS,
                                                    headers=[("n", str(i).encode())])))
            p.flush(30)
            for key, value, f in futures:
                md = f.get(timeout=30)
                sent[(md.partition, md.offset)] = (key, value)
            p.close(timeout=10)
        assert len(sent) == 2 * PER_CODEC

        # Two members: the first takes every partition, the second joins and the group
        # rebalances; between them every record is read. A commit that meets the rebalance
        # fails (CommitFailedError, as against Kafka) and its records may be read again by
        # the new owner: at least once, never a different record at an offset.
        a = consumer(broker.bootstrap, group)
        a.subscribe([topic])
        got = {}

        def drain(c):
            for tp, records in c.poll(timeout_ms=500).items():
                for r in records:
                    assert got.get((tp.partition, r.offset), (r.key, r.value)) == (r.key, r.value)
                    assert dict(r.headers)["n"].isdigit()
                    got[(tp.partition, r.offset)] = (r.key, r.value)

        def commit(c):
            try:
                c.commit()
                return True
            except CommitFailedError:
                return False

        deadline = time.monotonic() + 90
        while len(got) < 100 and time.monotonic() < deadline:
            drain(a)
        commit(a)
        b = consumer(broker.bootstrap, group)
        b.subscribe([topic])
        members = (a, b)
        # Until everything is read, both members own partitions, and both commits went through.
        committed = False
        while not (len(got) == len(sent) and all(c.assignment() for c in members) and committed) \
                and time.monotonic() < deadline:
            for c in members:
                drain(c)
            committed = all([commit(c) for c in members])
        assert got == sent, f"read {len(got)} of {len(sent)}"
        owned = [len(c.assignment()) for c in members]
        assert committed, "the members' last commits did not go through"
        for c in members:
            c.close()
        assert sum(owned) == PARTITIONS and all(owned), f"partitions per member after the rebalance: {owned}"

        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = admin.list_group_offsets(group)[group]
        probe = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        ends = probe.end_offsets(tps)
        probe.close()
        assert {tp: committed[tp].offset for tp in tps} == ends, (committed, ends)

        # A later member starts where the group left off: nothing is read again.
        c = consumer(broker.bootstrap, group)
        c.subscribe([topic])
        until = time.monotonic() + 8
        again = []
        while time.monotonic() < until:
            for records in c.poll(timeout_ms=500).values():
                again.extend(records)
        positions = {tp: c.position(tp) for tp in c.assignment()}
        c.close()
        assert again == [], [(r.partition, r.offset) for r in again]
        assert positions == ends, (positions, ends)

        groups = admin.describe_groups([group])
        assert group in repr(groups) and "Empty" in repr(groups), groups
        admin.delete_topics([topic])
    finally:
        admin.close()
