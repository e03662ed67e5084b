"""Topic and broker configs through a real client (librdkafka's AdminClient): a
LogAppendTime topic stamps the broker's clock on every record; dynamic broker settings
changed with IncrementalAlterConfigs are reported as DYNAMIC_BROKER_CONFIG, inherited by
topics without an override, and survive a restart."""

import os
import signal
import subprocess
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


def test_a_server_properties_written_for_kafka_starts_runnel(tmp_path, java_build):  # noqa: F811
    """Every broker config Kafka 4.3 defines (its KafkaConfig, read by ConfigCheck
    broker-defs), at Kafka's default, in one server.properties: `runnel serve` starts with it,
    DescribeConfigs lists every one of them (passwords as sensitive, without a value), and
    Kafka's names for what Runnel names otherwise take effect: broker.id is the node id,
    log.dir the data directory, broker.rack the rack clients see. A typo is still refused."""
    from test_java_client import run_java
    from conftest import RUNNEL_BIN, free_port, wait_for_port

    defs = run_java(java_build, "ConfigCheck", ["broker-defs"], 120)
    assert defs.returncode == 0, defs.stderr
    rows = [line.split("\t") for line in defs.stdout.splitlines()]
    assert len(rows) > 300, len(rows)
    ours = {"listeners", "advertised.listeners", "log.dir", "log.dirs", "node.id", "broker.id", "broker.rack",
            "process.roles", "controller.listener.names", "controller.quorum.voters",
            "controller.quorum.bootstrap.servers", "listener.security.protocol.map", "inter.broker.listener.name",
            "early.start.listeners"}
    port = free_port()
    lines = [f"listeners=PLAINTEXT://127.0.0.1:{port}", "broker.id=7", f"log.dir={tmp_path / 'kafka-logs'}",
             "broker.rack=rack-a"]
    for name, kind, default in rows:
        if name not in ours and (default or kind in ("STRING", "LIST", "CLASS", "PASSWORD")):
            lines.append(f"{name}={default}")
    props = tmp_path / "server.properties"
    props.write_text("\n".join(lines) + "\n")

    typo = subprocess.run([RUNNEL_BIN, "serve", "--config", str(props), "--set", "num.io.thread=8"],
                          capture_output=True, text=True, timeout=30)
    assert typo.returncode != 0 and "num.io.thread" in typo.stderr, typo.stderr

    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([RUNNEL_BIN, "serve", "--config", str(props)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc=proc)
        admin = admin_client(f"127.0.0.1:{port}")
        md = admin.list_topics(timeout=10)
        assert list(md.brokers) == [7], md.brokers
        entries = describe(admin, ResourceType.BROKER, "7")
        missing = [name for name, _, _ in rows if name not in entries]
        assert not missing, f"DescribeConfigs leaves out {missing}"
        for name, kind, _ in rows:
            if kind == "PASSWORD":
                assert entries[name].is_sensitive and entries[name].value is None, entries[name]
        assert entries["num.io.threads"].value == "8"
        assert (tmp_path / "kafka-logs").is_dir(), "log.dir is the data directory"
        rack = subprocess.run([RUNNEL_BIN, "cluster", "status", "--bootstrap", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=30)
        assert "rack-a" in rack.stdout, rack.stdout + rack.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def test_broker_settings_behind_topic_configs_are_checked_as_kafka_checks_them(runnel_broker, tmp_path):
    """A broker setting that topic configs default to is checked with the topic config's
    validator, as Kafka's broker checks it: at start-up (log.segment.bytes below 1 MiB,
    an unknown compression.type) and when changed at run time; log.retention.ms, which
    Kafka leaves unchecked at the broker, is taken."""
    from conftest import RUNNEL_BIN, free_port

    for bad, said in [("log.segment.bytes=8192", "no less than 1048576"), ("compression.type=brotli", "one of")]:
        p = subprocess.run([RUNNEL_BIN, "dev", "--port", str(free_port()), "--data-dir", str(tmp_path / "never"), "--set", bad],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode != 0 and said in p.stderr, (bad, p.stderr)
    admin = admin_client(runnel_broker.bootstrap)
    broker_id = str(next(iter(admin.list_topics(timeout=10).brokers)))

    def alter(name, value):
        res = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        try:
            admin.incremental_alter_configs([res])[res].result(timeout=30)
            return "OK"
        except Exception as e:  # noqa: BLE001  (KafkaException carrying the broker's error)
            return str(e)

    assert "INVALID_CONFIG" in alter("log.cleaner.min.cleanable.ratio", "1.5")
    assert "INVALID_CONFIG" in alter("message.max.bytes", "-1")
    assert alter("log.retention.ms", "-5") == "OK"
