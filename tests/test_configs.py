"""Topic and broker configs through a real client (librdkafka's AdminClient): a
LogAppendTime topic stamps the broker's clock on every record; dynamic broker settings
changed with IncrementalAlterConfigs are reported as DYNAMIC_BROKER_CONFIG, inherited by
topics without an override, and survive a restart."""

import os
import signal
import time

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from conftest import admin_client, create_topic, unique_topic, wait_for
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)


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


def test_cluster_wide_broker_configs_reach_every_broker(tmp_path, java_build):  # noqa: F811
    """kafka-configs.sh --entity-type brokers --entity-default: the controller commits the
    cluster-wide config, every broker of a 3-broker cluster reports it as
    DYNAMIC_DEFAULT_BROKER_CONFIG (topics inherit it), a broker's own dynamic config still
    wins, a broker killed and restarted has it again, per-broker settings are refused at the
    cluster level, and deleting it brings back the default."""
    from test_cluster import DevCluster
    from test_kafka_tools import Tools

    c = DevCluster(tmp_path)
    try:
        tools = Tools(java_build / "lib", c)
        default = ("--entity-type", "brokers", "--entity-default")
        tools.configs(*default, "--alter", "--add-config", "log.retention.ms=777777")
        topic = unique_topic("clusterdefault")
        create_topic(c.admin, topic, 1)

        def seen(broker, name="log.retention.ms"):
            e = describe(c.admin, ResourceType.BROKER, str(broker))[name]
            return e.value, e.source

        dynamic_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        for broker in range(3):
            wait_for(lambda: seen(broker) == ("777777", dynamic_default), f"broker {broker} has the default", 30)
        t = describe(c.admin, ResourceType.TOPIC, topic)["retention.ms"]
        assert (t.value, t.source) == ("777777", dynamic_default), t
        described = tools.configs(*default, "--describe").stdout
        assert "log.retention.ms=777777" in described, described

        tools.configs("--entity-type", "brokers", "--entity-name", "1", "--alter", "--add-config",
                      "log.retention.ms=555555")
        wait_for(lambda: seen(1) == ("555555", ConfigSource.DYNAMIC_BROKER_CONFIG.value), "broker 1's own value", 30)
        assert seen(2) == ("777777", dynamic_default)

        os.kill(c.pid(2), signal.SIGKILL)
        wait_for(lambda: _answers(c, 2), "broker 2 restarted", 60)
        wait_for(lambda: seen(2) == ("777777", dynamic_default), "broker 2 has the default after a restart", 30)

        refused = tools.configs(*default, "--alter", "--add-config", "fault.disk.full=true", expect_rc=None)
        assert refused.returncode != 0 and "broker id must be specified" in refused.stdout + refused.stderr, refused

        tools.configs(*default, "--alter", "--delete-config", "log.retention.ms")
        wait_for(lambda: seen(2) == ("604800000", ConfigSource.DEFAULT_CONFIG.value), "the default is gone", 30)
    finally:
        c.close()


def _answers(c, broker):
    try:
        return str(broker) in {str(b) for b in c.admin.list_topics(timeout=5).brokers} and \
            describe(c.admin, ResourceType.BROKER, str(broker)) is not None
    except Exception:  # noqa: BLE001  (a broker still starting)
        return False
