"""Topic and broker configs through a real client (librdkafka's AdminClient): a
LogAppendTime topic stamps the broker's clock on every record; dynamic broker settings
changed with IncrementalAlterConfigs are reported as DYNAMIC_BROKER_CONFIG, inherited by
topics without an override, and survive a restart."""

import time

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from conftest import admin_client, create_topic, unique_topic


def describe(admin, rtype, name):
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(timeout=30)


def test_log_append_time_topic_uses_the_broker_clock(broker):
    admin = admin_client(broker.bootstrap)
    topic = unique_topic("lat")
    create_topic(admin, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    old = 1_000_000_000_000  # 2001: the producer's timestamp must be replaced
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    before = int(time.time() * 1000)
    for i in range(20):
        p.produce(topic, value=b"v%d" % i, timestamp=old)
    assert p.flush(30) == 0
    after = int(time.time() * 1000)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.timestamp())
    finally:
        c.close()
    assert len(got) == 20
    for ts_type, ts in got:
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000, (ts, before, after)


def test_dynamic_broker_config_is_inherited_and_survives_restart(runnel_broker):
    b = runnel_broker
    admin = admin_client(b.bootstrap)
    topic = unique_topic("dyn")
    create_topic(admin, topic, 1)
    broker_id = str(next(iter(admin.list_topics(timeout=10).brokers)))
    res = ConfigResource(ResourceType.BROKER, broker_id,
                         incremental_configs=[ConfigEntry("log.retention.ms", "123456",
                                                          incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)

    def check(admin):
        entry = describe(admin, ResourceType.BROKER, broker_id)["log.retention.ms"]
        assert entry.value == "123456" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, entry
        t = describe(admin, ResourceType.TOPIC, topic)["retention.ms"]
        assert t.value == "123456", f"topic without override inherits the broker value: {t}"

    check(admin)
    # A setting that needs a restart is refused, not silently ignored.
    bad = ConfigResource(ResourceType.BROKER, broker_id,
                         incremental_configs=[ConfigEntry("socket.request.max.bytes", "1000",
                                                          incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([bad])[bad].result(timeout=30)
        raise AssertionError("a static setting was accepted at run time")
    except Exception as e:  # KafkaException(INVALID_CONFIG)
        assert "INVALID_CONFIG" in str(e) or "Cannot update" in str(e), e
    b.restart()
    check(admin_client(b.bootstrap))
