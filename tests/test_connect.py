"""Kafka Connect 4.3.1 in distributed mode against Runnel (jars from Maven Central, fetched
by tests/java/build.sh into .cache/java/connect-lib):

- the worker creates its config, offset and status topics (compacted, which it checks) and
  joins its group; its REST API lists the FileStream connectors;
- a FileStreamSource connector copies a file into a topic and a FileStreamSink connector
  copies the topic into another file: the two files end up the same, both RUNNING;
- the worker is stopped, lines are added, a new worker starts: it finds both connectors
  in the config topic, the source resumes from the offset it stored and the sink from its
  group's committed offset, so the output is the input again, with no line twice."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

from confluent_kafka.admin import ConfigResource, ResourceType

from conftest import stop_process, admin_client, free_port, unique_topic, wait_for
from test_java_client import java_build  # noqa: F401  (session fixture: fetches the Connect jars too)

LINES = 1000


def rest(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST" if body else "GET",
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def ready(port):
    try:
        return "version" in rest(port, "/")
    except (OSError, urllib.error.URLError, ValueError):
        return False  # not listening yet, or 404 until the worker has joined


class Worker:
    def __init__(self, java_build, tmp_path, bootstrap, group, port):
        props = tmp_path / "worker.properties"
        props.write_text("\n".join([
            f"bootstrap.servers={bootstrap}",
            f"group.id={group}",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.storage.StringConverter",
            f"config.storage.topic={group}-configs",
            f"offset.storage.topic={group}-offsets",
            f"status.storage.topic={group}-status",
            "config.storage.replication.factor=1",
            "offset.storage.replication.factor=1",
            "status.storage.replication.factor=1",
            "offset.flush.interval.ms=500",
            "plugin.discovery=service_load",
            f"listeners=http://127.0.0.1:{port}",
        ]) + "\n")
        self.log_path = tmp_path / "connect.log"
        self.log = open(self.log_path, "ab")
        self.port = port
        self.proc = subprocess.Popen(
            ["java", "-XX:+UseSerialGC", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
             "-cp", f"{java_build / 'connect-lib'}/*", "org.apache.kafka.connect.cli.ConnectDistributed", str(props)],
            cwd=tmp_path, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(lambda: self.proc.poll() is None and ready(port), "the Connect worker's REST API", 120, self.tail)

    def tail(self):
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-60:])

    def stop(self):
        stop_process(self.proc)
        self.log.close()


def lines(path):
    return path.read_text().splitlines() if path.exists() else []


def test_connect_distributed_round_trips_a_file_through_a_restart(broker, java_build, tmp_path):  # noqa: F811
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"line {i}\n" for i in range(LINES)))
    topic, group, port = unique_topic("connect"), unique_topic("connect-cluster"), free_port()
    worker = Worker(java_build, tmp_path, broker.bootstrap, group, port)
    try:
        plugins = {p["class"] for p in rest(port, "/connector-plugins")}
        assert {"org.apache.kafka.connect.file.FileStreamSourceConnector",
                "org.apache.kafka.connect.file.FileStreamSinkConnector"} <= plugins, plugins
        admin = admin_client(broker.bootstrap)
        for kind in ("configs", "offsets", "status"):
            res = ConfigResource(ResourceType.TOPIC, f"{group}-{kind}")
            policy = admin.describe_configs([res])[res].result(timeout=30)["cleanup.policy"].value
            assert policy == "compact", (kind, policy)

        rest(port, "/connectors", {"name": "src", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source), "topic": topic}})
        rest(port, "/connectors", {"name": "sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink), "topics": topic}})
        wait_for(lambda: len(lines(sink)) >= LINES, f"{LINES} lines through Connect", 90, worker.tail)
        assert lines(sink) == lines(source)
        for name in ("src", "sink"):
            status = rest(port, f"/connectors/{name}/status")
            assert status["connector"]["state"] == "RUNNING", status
            assert [t["state"] for t in status["tasks"]] == ["RUNNING"], status
        # Let the source's offset reach the offsets topic before the worker stops.
        time.sleep(2)
    finally:
        worker.stop()

    with open(source, "a") as f:
        f.write("".join(f"line {i}\n" for i in range(LINES, LINES + 500)))
    worker = Worker(java_build, tmp_path, broker.bootstrap, group, port)
    try:
        assert sorted(rest(port, "/connectors")) == ["sink", "src"]
        wait_for(lambda: len(lines(sink)) >= LINES + 500, "the new lines after a restart", 90, worker.tail)
        time.sleep(1)  # anything read twice would arrive now
        assert lines(sink) == lines(source), "the restarted connectors resumed where they stopped"
    finally:
        worker.stop()
    assert os.path.getsize(sink) == os.path.getsize(source)
