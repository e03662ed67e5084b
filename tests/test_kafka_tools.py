"""Apache Kafka's own command-line tools against the broker.

The tools are run as plain Java classes from the jars tests/java/build.sh put in .cache/java/lib
(the same classes bin/kafka-*.sh call), so these tests need JDK 17+ and Maven, nothing else:

    kafka-topics.sh              org.apache.kafka.tools.TopicCommand
    kafka-console-producer.sh    org.apache.kafka.tools.ConsoleProducer
    kafka-console-consumer.sh    org.apache.kafka.tools.consumer.ConsoleConsumer
    kafka-configs.sh             kafka.admin.ConfigCommand
    kafka-delete-records.sh      org.apache.kafka.tools.DeleteRecordsCommand
    kafka-get-offsets.sh         org.apache.kafka.tools.GetOffsetShell
    kafka-broker-api-versions.sh org.apache.kafka.tools.BrokerApiVersionsCommand

Every test asserts on what the tool prints, not only on its exit code.
"""

import json
import re
import subprocess

import pytest
from confluent_kafka.admin import AdminClient

from conftest import ROOT, unique_topic, wait_for
from test_java_client import _text, java_build  # noqa: F401  (session fixture: builds .cache/java)

TOOL_TIMEOUT_S = 120
# Short-lived JVMs on a small machine: favour startup time over throughput.
JAVA_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]

TOPICS = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONFIGS = "kafka.admin.ConfigCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"


class Tools:
    """Runs Kafka tool classes against one bootstrap address, with a timeout on every call."""

    def __init__(self, lib_dir, broker):
        self.classpath = f"{lib_dir}/*"
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.created = []

    def run(self, main_class, *args, stdin=None, expect_rc=0, timeout=TOOL_TIMEOUT_S):
        """Runs `main_class --bootstrap-server B args...`; fails the test (with the tool's
        output) if it times out or, unless expect_rc is None, exits with another code."""
        cmd = ["java", *JAVA_OPTS, "-cp", self.classpath, main_class,
               "--bootstrap-server", self.bootstrap, *map(str, args)]
        try:
            p = subprocess.run(cmd, input=stdin, capture_output=True, encoding="utf-8", errors="replace",
                               timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{main_class} {' '.join(map(str, args))} timed out after {timeout}s\n"
                        f"--- stdout ---\n{_text(e.stdout)}\n--- stderr ---\n{_text(e.stderr)}{self._log()}")
        if expect_rc is not None and p.returncode != expect_rc:
            pytest.fail(f"{main_class} {' '.join(map(str, args))} exited with {p.returncode}, expected {expect_rc}\n"
                        f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}{self._log()}")
        return p

    def _log(self):
        if hasattr(self.broker, "log_tail"):
            return f"\n--- broker log (tail) ---\n{self.broker.log_tail()}"
        return ""

    # Thin wrappers named after the shell scripts.
    def topics(self, *args, **kw):
        return self.run(TOPICS, *args, **kw)

    def configs(self, *args, **kw):
        return self.run(CONFIGS, *args, **kw)

    def produce(self, topic, lines, *args):
        return self.run(PRODUCER, "--topic", topic, *args, stdin="".join(line + "\n" for line in lines))

    def consume(self, topic, *args):
        return self.run(CONSUMER, "--topic", topic, "--timeout-ms", 30000, *args)

    def offsets(self, topic, time_spec):
        """GetOffsetShell --time <spec> as {partition: offset}."""
        out = self.run(GET_OFFSETS, "--topic", topic, "--time", time_spec).stdout
        result = {}
        for line in out.splitlines():
            m = re.fullmatch(rf"{re.escape(topic)}:(\d+):(-?\d+)", line.strip())
            assert m, f"unexpected GetOffsetShell line {line!r} in:\n{out}"
            result[int(m.group(1))] = int(m.group(2))
        return result

    def create_topic(self, topic, partitions, *args):
        """kafka-topics --create, then wait until every partition's leader serves ListOffsets
        (GetOffsetShell retries until then): producing into a partition whose leader does not
        host it yet can wedge the idempotent producer on Apache Kafka."""
        self.created.append(topic)
        p = self.topics("--create", "--topic", topic, "--partitions", partitions, "--replication-factor", 1, *args)
        assert f"Created topic {topic}." in p.stdout, p.stdout
        assert self.offsets(topic, -1) == {i: 0 for i in range(partitions)}

    def cleanup(self):
        """Best-effort removal of this test's topics (matters on a shared external broker)."""
        if self.created:
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap})  # keep alive until done
                futures = admin.delete_topics(self.created, operation_timeout=10, request_timeout=15)
                for f in futures.values():
                    f.exception(timeout=20)
            except Exception:  # noqa: BLE001  (cleanup must not mask the test's own result)
                pass


@pytest.fixture
def tools(java_build, broker):  # noqa: F811  (java_build is the imported fixture)
    t = Tools(java_build / "lib", broker)
    yield t
    t.cleanup()


def wait_until(predicate, what):
    """Metadata may trail a completed admin call: poll (15 s at most) until it shows."""
    return wait_for(predicate, what, 15.0, interval_s=0.3)


def broker_ids(bootstrap):
    """Broker ids from Metadata, read with librdkafka (independent of the tools under test)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return sorted(md.brokers)


def describe_partitions(tools, topic):
    """kafka-topics --describe parsed into (header line, {partition: {field: value}})."""
    out = tools.topics("--describe", "--topic", topic).stdout
    header = next((line for line in out.splitlines() if line.startswith(f"Topic: {topic}\t")), None)
    assert header is not None, f"no topic header line in:\n{out}"
    parts = {}
    for line in out.splitlines():
        if line.startswith("\tTopic:"):
            fields = dict(f.split(": ", 1) for f in line.strip("\t").split("\t") if ": " in f)
            parts[int(fields["Partition"])] = fields
    return header, parts


# ---------------------------------------------------------------------------------- kafka-topics


def test_topics_create_list_describe_alter_delete(tools):
    """kafka-topics: --create (with a topic config) shows up in --list and --describe with the
    right partition count, replication factor, config and a live leader per partition; creating it
    again fails with 'already exists'; --alter --partitions grows it; --delete removes it and
    --describe then reports it missing."""
    topic = unique_topic("tools-topics")
    leader_ids = {str(i) for i in broker_ids(tools.bootstrap)}
    tools.create_topic(topic, 2, "--config", "retention.ms=86400000")

    dup = tools.topics("--create", "--topic", topic, "--partitions", 2, "--replication-factor", 1, expect_rc=1)
    assert "already exists" in dup.stdout + dup.stderr, dup.stdout + dup.stderr

    listed = tools.topics("--list").stdout.splitlines()
    assert topic in listed, f"{topic} not in --list output: {listed}"

    header, parts = describe_partitions(tools, topic)
    assert "PartitionCount: 2\t" in header and "ReplicationFactor: 1\t" in header, header
    assert re.search(r"TopicId: [A-Za-z0-9_-]{22}\t", header), f"no base64 topic id in: {header}"
    assert "retention.ms=86400000" in header, f"topic config missing from Configs: {header}"
    assert sorted(parts) == [0, 1], parts
    for p, fields in parts.items():
        assert fields["Leader"] in leader_ids, f"partition {p} leader {fields['Leader']} not a broker {leader_ids}"
        assert fields["Replicas"] == fields["Leader"] and fields["Isr"] == fields["Leader"], fields

    tools.topics("--alter", "--topic", topic, "--partitions", 4)
    wait_until(lambda: sorted(describe_partitions(tools, topic)[1]) == [0, 1, 2, 3],
               f"{topic} described with partitions 0..3 after --alter --partitions 4")
    header, _ = describe_partitions(tools, topic)
    assert "PartitionCount: 4\t" in header, header

    tools.topics("--delete", "--topic", topic)
    wait_until(lambda: topic not in tools.topics("--list").stdout.splitlines(), f"{topic} gone from --list")
    missing = tools.topics("--describe", "--topic", topic, expect_rc=1)
    assert "does not exist" in missing.stdout + missing.stderr, missing.stdout + missing.stderr


def test_topics_describe_pages_through_describe_topic_partitions(tools):
    """kafka-topics --describe asks with DescribeTopicPartitions (KIP-966: its lines carry the
    Elr fields Metadata has not); answers of at most 2 partitions each still give every
    partition of two 5-partition topics, once, in order."""
    prefix = unique_topic("tools-pages")
    for t in ("a", "b"):
        tools.create_topic(f"{prefix}-{t}", 5)
    out = tools.topics("--describe", "--topic", f"{re.escape(prefix)}-.*", "--partition-size-limit-per-response", 2).stdout
    lines = [line for line in out.splitlines() if line.startswith("\tTopic:")]
    seen = [(f["Topic"], int(f["Partition"])) for f in
            (dict(x.split(": ", 1) for x in line.strip("\t").split("\t") if ": " in x) for line in lines)]
    assert sorted(seen) == [(f"{prefix}-{t}", p) for t in ("a", "b") for p in range(5)], out
    assert len(seen) == 10, out
    assert all("\tElr: " in line for line in lines), out


# ------------------------------------------------------------- console producer / consumer


def test_console_producer_and_consumer_roundtrip(tools):
    """kafka-console-producer with parse.key writes keyed lines (including an empty value and
    non-ASCII text); kafka-console-consumer --partition P --from-beginning reads exactly those
    back, each partition at offsets 0..n-1 in input order; --partition/--offset starts reading at
    the requested offset of that partition. (Without --partition the console consumer joins a
    consumer group; that mode is covered with the consumer-group tests.)"""
    topic = unique_topic("tools-console")
    tools.create_topic(topic, 2)
    # Distinct keys; one empty value; non-ASCII text must come back byte-identical.
    records = [(f"key-{i}", "" if i == 4 else f"value {i} ✓") for i in range(12)]
    tools.produce(topic, [f"{k}:{v}" for k, v in records],
                  "--reader-property", "parse.key=true", "--reader-property", "key.separator=:")

    lines = []
    for partition, end in sorted(tools.offsets(topic, "-1").items()):
        if end == 0:
            continue
        out = tools.consume(topic, "--partition", partition, "--from-beginning", "--max-messages", end,
                            "--formatter-property", "print.partition=true",
                            "--formatter-property", "print.offset=true",
                            "--formatter-property", "print.key=true",
                            "--formatter-property", "key.separator=|")
        assert f"Processed a total of {end} messages" in out.stderr, out.stderr
        lines += out.stdout.splitlines()
    by_partition = {}
    for line in lines:
        m = re.fullmatch(r"Partition:(\d+)\|Offset:(\d+)\|([^|]*)\|(.*)", line)
        assert m, f"unexpected console consumer line {line!r} in:\n{out.stdout}"
        by_partition.setdefault(int(m.group(1)), []).append((int(m.group(2)), m.group(3), m.group(4)))
    got = sorted((k, v) for recs in by_partition.values() for _, k, v in recs)
    assert got == sorted(records), f"consumed {got}\nproduced {sorted(records)}"
    order = [k for k, _ in records]
    for p, recs in by_partition.items():
        assert [o for o, _, _ in recs] == list(range(len(recs))), f"partition {p} offsets: {recs}"
        keys = [k for _, k, _ in recs]
        assert keys == sorted(keys, key=order.index), f"partition {p} not in produce order: {keys}"

    # Read one partition from offset 1 (no group): exactly the rest of that partition.
    p, recs = max(by_partition.items(), key=lambda kv: len(kv[1]))
    assert len(recs) >= 2, by_partition
    out = tools.consume(topic, "--partition", p, "--offset", 1, "--max-messages", len(recs) - 1,
                        "--formatter-property", "print.offset=true",
                        "--formatter-property", "print.key=true")
    expected = [f"Offset:{o}\t{k}\t{v}" for o, k, v in recs[1:]]
    assert out.stdout.splitlines() == expected, f"got:\n{out.stdout}\nexpected:\n" + "\n".join(expected)


def test_console_headers_roundtrip(tools):
    """Record headers survive the console tools: parse.headers on the producer, print.headers
    on the consumer, with a duplicated header key kept in order."""
    topic = unique_topic("tools-headers")
    tools.create_topic(topic, 1)
    tools.produce(topic, ["h1:a,h2:b,h1:c\tk1:v1", "h3:x\tk2:v2"],
                  "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
                  "--reader-property", "parse.headers=true")
    out = tools.consume(topic, "--partition", 0, "--from-beginning", "--max-messages", 2,
                        "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true")
    assert out.stdout.splitlines() == ["h1:a,h2:b,h1:c\tk1\tv1", "h3:x\tk2\tv2"], out.stdout


# ---------------------------------------------------------------------------------- kafka-configs


def test_configs_topic_add_and_delete(tools):
    """kafka-configs on a topic: --describe lists no dynamic retention.ms at first;
    --alter --add-config sets it and --describe shows the new value (as a dynamic topic config);
    --describe --all includes standard topic configs; --alter --delete-config removes it again
    (it falls back to the default); an unknown config name is rejected."""
    topic = unique_topic("tools-configs")
    tools.create_topic(topic, 1)
    entity = ["--entity-type", "topics", "--entity-name", topic]

    out = tools.configs(*entity, "--describe").stdout
    assert f"Dynamic configs for topic {topic} are:" in out, out
    assert "retention.ms=" not in out, out

    out = tools.configs(*entity, "--alter", "--add-config", "retention.ms=123456789").stdout
    assert f"Completed updating config for topic {topic}." in out, out
    out = wait_until(lambda: (o := tools.configs(*entity, "--describe").stdout) and "retention.ms=123456789" in o and o,
                     "retention.ms=123456789 in kafka-configs --describe")
    assert re.search(r"^  retention\.ms=123456789 sensitive=false synonyms=\{", out, re.M), out

    out = tools.configs(*entity, "--describe", "--all").stdout
    assert f"All configs for topic {topic} are:" in out, out
    for name in ("retention.ms=123456789", "cleanup.policy=delete", "max.message.bytes=", "segment.bytes="):
        assert f"  {name}" in out, f"{name} missing from --describe --all:\n{out}"

    out = tools.configs(*entity, "--alter", "--delete-config", "retention.ms").stdout
    assert f"Completed updating config for topic {topic}." in out, out
    wait_until(lambda: "retention.ms=" not in tools.configs(*entity, "--describe").stdout,
               "retention.ms gone from the dynamic topic configs")
    out = tools.configs(*entity, "--describe", "--all").stdout
    m = re.search(r"^  retention\.ms=(-?\d+) ", out, re.M)
    assert m and m.group(1) != "123456789", f"retention.ms should be back to its default:\n{out}"

    bad = tools.configs(*entity, "--alter", "--add-config", "no.such.config=1", expect_rc=1)
    assert "InvalidConfigurationException" in bad.stdout + bad.stderr, bad.stdout + bad.stderr


def test_configs_describe_broker(tools):
    """kafka-configs on a broker: --entity-name <id> --describe works (dynamic configs, possibly
    none), --describe --all lists the broker's effective configs with their values, and the
    cluster-wide default entity can be described."""
    ids = broker_ids(tools.bootstrap)
    assert ids, "Metadata returned no brokers"
    bid = ids[0]
    entity = ["--entity-type", "brokers", "--entity-name", bid]

    out = tools.configs(*entity, "--describe").stdout
    assert f"Dynamic configs for broker {bid} are:" in out, out

    out = tools.configs(*entity, "--describe", "--all").stdout
    assert f"All configs for broker {bid} are:" in out, out
    for name in ("num.partitions", "message.max.bytes", "auto.create.topics.enable", "log.retention.hours"):
        assert re.search(rf"^  {re.escape(name)}=\S+ sensitive=false", out, re.M), \
            f"{name} missing from broker --describe --all:\n{out}"
    assert re.search(r"^  message\.max\.bytes=\d+ ", out, re.M), out

    out = tools.configs("--entity-type", "brokers", "--entity-default", "--describe").stdout
    assert "Default configs for brokers in the cluster are:" in out, out


# ------------------------------------------------------------- kafka-delete-records / get-offsets


def test_delete_records_then_get_offsets(tools, tmp_path):
    """kafka-delete-records with an offset JSON moves each partition's low watermark (an explicit
    offset, and -1 meaning 'up to the high watermark'); GetOffsetShell --time -2 then reports the
    new earliest offsets while --time -1 is unchanged, and the console consumer reading the
    partition from the beginning starts at the new earliest offset."""
    topic = unique_topic("tools-delrec")
    tools.create_topic(topic, 2)
    tools.produce(topic, [f"key-{i}:value-{i}" for i in range(20)],
                  "--reader-property", "parse.key=true", "--reader-property", "key.separator=:")

    latest = tools.offsets(topic, -1)
    assert sorted(latest) == [0, 1] and sum(latest.values()) == 20, latest
    assert tools.offsets(topic, -2) == {0: 0, 1: 0}
    big, small = sorted(latest, key=lambda p: -latest[p])
    assert latest[big] >= 4, latest

    spec = {"version": 1, "partitions": [{"topic": topic, "partition": big, "offset": 3},
                                         {"topic": topic, "partition": small, "offset": -1}]}
    spec_file = tmp_path / "delete-records.json"
    spec_file.write_text(json.dumps(spec))
    out = tools.run(DELETE_RECORDS, "--offset-json-file", spec_file).stdout
    assert "Records delete operation completed:" in out, out
    assert f"partition: {topic}-{big}\tlow_watermark: 3" in out, out
    assert f"partition: {topic}-{small}\tlow_watermark: {latest[small]}" in out, out

    assert tools.offsets(topic, -2) == {big: 3, small: latest[small]}
    assert tools.offsets(topic, -1) == latest

    out = tools.consume(topic, "--partition", big, "--from-beginning", "--max-messages", 1,
                        "--formatter-property", "print.offset=true")
    assert out.stdout.startswith("Offset:3\tvalue-"), out.stdout

    # Deleting beyond the high watermark is refused per partition (reported, not thrown).
    spec_file.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": big, "offset": latest[big] + 5}]}))
    out = tools.run(DELETE_RECORDS, "--offset-json-file", spec_file).stdout
    assert f"partition: {topic}-{big}\terror:" in out and "OffsetOutOfRangeException" in out, out
    assert tools.offsets(topic, -2) == {big: 3, small: latest[small]}


# ------------------------------------------------------------------ kafka-broker-api-versions

# APIs the Java client and the tools above need; each must be usable by the 4.x client.
# (The consumer-group APIs join this list with the consumer-group capability.)
REQUIRED_APIS = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "ApiVersions", "CreateTopics", "DeleteTopics",
    "DeleteRecords", "InitProducerId", "OffsetForLeaderEpoch", "DescribeConfigs", "CreatePartitions",
    "IncrementalAlterConfigs", "DescribeCluster",
]


def test_broker_api_versions(tools):
    """kafka-broker-api-versions: the broker is listed under its id, and every API the client and
    tools rely on has a version range overlapping the 4.x client's ('usable', not UNSUPPORTED)."""
    out = tools.run(API_VERSIONS).stdout
    ids = broker_ids(tools.bootstrap)
    assert re.search(rf"\(id: {ids[0]} rack: ", out), out
    for api in REQUIRED_APIS:
        m = re.search(rf"^\t{api}\(\d+\): (.*?),?$", out, re.M)
        assert m, f"{api} not advertised by the broker:\n{out}"
        assert "usable:" in m.group(1), f"{api}: {m.group(1)} (the Java 4.x client cannot use it)"
