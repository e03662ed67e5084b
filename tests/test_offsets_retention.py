"""Offset retention (offsets.retention.minutes, KIP-211), through librdkafka.

A group that only commits loses each offset a retention period after its commit, and the
group itself goes once it has no offsets left; a group whose member is still subscribed
keeps its offsets. The shortest retention Kafka's setting allows is one minute, so this
test waits a little over a minute.
"""

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import Broker, create_topic, unique_topic


def committed(bootstrap, group, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def test_offsets_of_an_idle_group_expire_and_the_group_goes(tmp_path):
    b = Broker(tmp_path / "retention", settings={"offsets.retention.minutes": "1",
                                                 "offsets.retention.check.interval.ms": "1000"}).start()
    try:
        topic = unique_topic("ret")
        create_topic(b.bootstrap, topic, 1)
        idle, active = unique_topic("idle"), unique_topic("active")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": idle, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        c.close()
        # A live member subscribed to the topic keeps its group's offset past retention.
        live = Consumer({"bootstrap.servers": b.bootstrap, "group.id": active, "enable.auto.commit": False,
                         "session.timeout.ms": 10000})
        live.subscribe([topic])
        deadline = time.monotonic() + 20
        while not live.assignment() and time.monotonic() < deadline:
            live.poll(0.2)
        assert live.assignment()
        live.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        assert committed(b.bootstrap, idle, topic) == 3
        deadline = time.monotonic() + 100
        while committed(b.bootstrap, idle, topic) == 3 and time.monotonic() < deadline:
            live.poll(1.0)
        assert committed(b.bootstrap, idle, topic) < 0, "the idle group's offset expired"
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
        assert not listed.errors, listed.errors
        groups = [g.group_id for g in listed.valid]
        assert idle not in groups, "a group with no members and no offsets is deleted"
        assert active in groups
        live.poll(0.5)
        assert live.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
        live.close()
        # Expiry is durable: the idle group stays gone after a restart.
        b.restart()
        assert committed(b.bootstrap, idle, topic) < 0
    finally:
        b.kill9()
