"""The admin listener's Prometheus metrics (`admin.listeners`, docs/metrics.md), scraped
from a live 3-broker cluster under load with a real client and parsed with Prometheus'
own Python parser: counts move as the work does (bytes in grows with produce, bytes out
with fetch), errors are counted by request and Kafka error name, and the state gauges
follow the cluster (one active controller, a paused follower makes its partition
under-replicated on the leader, and the count goes back to 0 once it has caught up)."""

import os
import signal
import urllib.request

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import cluster_port, unique_topic, wait_for, wait_for_topic
from test_cluster import BROKERS, DevCluster

ADMIN_OFFSET = 2000


def scrape(c, broker):
    """{(sample name, frozenset(labels)): value} from broker's /metrics."""
    url = f"http://127.0.0.1:{c.port + ADMIN_OFFSET + broker}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text"), r.headers["Content-Type"]
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0)


def total(c, name, **labels):
    return sum(value(scrape(c, b), name, **labels) for b in range(BROKERS))


def test_metrics_follow_the_cluster(tmp_path):
    port = cluster_port(BROKERS)
    c = DevCluster(tmp_path, port=port, settings=[f"admin.listeners=http://127.0.0.1:{port + ADMIN_OFFSET}",
                                                  "auto.create.topics.enable=false"])
    try:
        topic = unique_topic("metrics")
        c.admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        wait_for_topic(c.admin, topic, 1)
        leader = c.known_leader(topic)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
        value_bytes = b"x" * 200
        for _ in range(500):
            p.produce(topic, value_bytes)
        assert p.flush(30) == 0

        # Counted on the leader, under Kafka's names.
        s = scrape(c, leader)
        assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 500, s
        bytes_in = value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
        assert bytes_in >= 500 * 200, bytes_in
        assert value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) > 0
        assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
        assert value(s, "kafka_network_requestmetrics_requests_total", request="Produce") > 0
        assert value(s, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") > 0
        assert value(s, "kafka_server_replicamanager_leadercount") >= 1
        assert value(s, "kafka_server_replicamanager_partitioncount") >= 1
        assert value(s, "kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") >= 1
        # Every replica fsyncs what it stores.
        for b in range(BROKERS):
            assert value(scrape(c, b), "runnel_log_flush_seconds_count") > 0, f"broker {b} counted no fsync"
        assert total(c, "kafka_controller_kafkacontroller_activecontrollercount") == 1

        # More produced: bytes in grows.
        for _ in range(100):
            p.produce(topic, value_bytes)
        assert p.flush(30) == 0
        grown = value(scrape(c, leader), "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
        assert grown >= bytes_in + 100 * 200, (bytes_in, grown)

        # Consumed: bytes out, wherever the fetches went.
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
        cons.subscribe([topic])
        got = []
        wait_for(lambda: got.extend(m for m in cons.consume(100, 1) if not m.error()) or len(got) >= 600,
                 "the 600 records back", 60, c.diagnostics, 0)
        cons.close()
        assert total(c, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= 600 * 200

        # An error, by request and Kafka's error name: Metadata for a topic that does not
        # exist (and is not created on the way).
        missing = unique_topic("missing")
        meta = c.admin.list_topics(topic=missing, timeout=10)
        assert meta.topics[missing].error is not None
        name = "kafka_network_requestmetrics_errors_total"
        assert total(c, name, request="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION") >= 1

        # A paused follower: the leader counts its partition under-replicated, and not once
        # the follower is back and caught up.
        follower = next(b for b in range(BROKERS) if b != leader)
        under = "kafka_server_replicamanager_underreplicatedpartitions"
        assert value(scrape(c, leader), under) == 0
        os.kill(c.pid(follower), signal.SIGSTOP)
        try:
            for _ in range(50):
                p.produce(topic, value_bytes)
            assert p.flush(30) == 0
            wait_for(lambda: value(scrape(c, leader), under) >= 1, "the leader to count an under-replicated partition",
                     30, c.diagnostics)
        finally:
            os.kill(c.pid(follower), signal.SIGCONT)
        wait_for(lambda: value(scrape(c, leader), under) == 0, "no under-replicated partition again", 60,
                 c.diagnostics)
        assert value(scrape(c, leader), "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) >= 650
    finally:
        c.close()

