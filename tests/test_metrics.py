"""The admin listener (`admin.listeners`): its Prometheus metrics (docs/metrics.md), scraped
from a live 3-broker cluster under load with a real client and parsed with Prometheus'
own Python parser: counts move as the work does (bytes in grows with produce, bytes out
with fetch), errors are counted by request and Kafka error name, and the state gauges
follow the cluster (one active controller, a paused follower makes its partition
under-replicated on the leader, and the count goes back to 0 once it has caught up; a
group's lag is what was produced after its last commit); and its admin API (docs/admin.md):
health, readiness, the brokers with their failure domains, partitions with their leader and
replicas in and out of sync."""

import json
import os
import re
import signal
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import ROOT, cluster_port, unique_topic, wait_for, wait_for_topic
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


def admin_get(c, broker, path):
    """(HTTP status, body: parsed JSON, or text) of GET path on broker's admin listener."""
    url = f"http://127.0.0.1:{c.port + ADMIN_OFFSET + broker}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            status, body, kind = r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, body, kind = e.code, e.read().decode(), e.headers.get("Content-Type", "")
    return status, (json.loads(body) if kind.startswith("application/json") else body)


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
        # (A first send may find the new partition's leader still being elected: failed.)
        produced = value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic)
        failed = ("kafka_server_brokertopicmetrics_failedproducerequests_total", frozenset({"topic": topic}.items()))
        assert produced > 0 and failed in s and s[failed] < produced, s
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

        # The admin API: every broker live and ready; the brokers with their failure domains
        # and one controller; the partition with its leader and replicas, all in sync.
        for b in range(BROKERS):
            assert admin_get(c, b, "/health") == (200, "ok\n")
            wait_for(lambda: admin_get(c, b, "/ready")[0] == 200, f"broker {b} ready", 30, c.diagnostics)
        status, brokers = admin_get(c, leader, "/v1/brokers")
        assert status == 200 and [x["id"] for x in brokers] == list(range(BROKERS)), brokers
        assert all(x["location"] == {"zone": f"dev-{x['id']}"} and not x["fenced"] for x in brokers), brokers
        assert sum(x["controller"] for x in brokers) == 1, brokers
        status, parts = admin_get(c, follower_of(c, leader), f"/v1/partitions?topic={topic}")
        assert status == 200 and len(parts) == 1, parts
        assert parts[0]["leader"] == leader and parts[0]["partition"] == 0 and not parts[0]["under_replicated"], parts
        assert sorted(r["broker"] for r in parts[0]["replicas"]) == list(range(BROKERS)), parts
        assert all(r["in_sync"] and r["location"]["zone"] == f"dev-{r['broker']}" for r in parts[0]["replicas"])
        assert admin_get(c, leader, "/nope")[0] == 404

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
            # (The offsets topic's partitions may have counted first: wait for this one.)
            parts = wait_for(lambda: [p for p in admin_get(c, leader, f"/v1/partitions?topic={topic}")[1]
                                      if p["under_replicated"]], "the partition listed under-replicated", 30,
                             c.diagnostics)
            assert [r["broker"] for r in parts[0]["replicas"] if not r["in_sync"]] == [follower], parts
        finally:
            os.kill(c.pid(follower), signal.SIGCONT)
        wait_for(lambda: value(scrape(c, leader), under) == 0, "no under-replicated partition again", 60,
                 c.diagnostics)
        wait_for(lambda: admin_get(c, follower, "/ready")[0] == 200, "the resumed follower ready", 60, c.diagnostics)
        assert value(scrape(c, leader), "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) >= 650
        # The group committed the 600 it read (on close) and 50 more were produced since:
        # its coordinator reports a lag of 50 on the partition.
        lag = "kafka_consumergroup_lag"
        wait_for(lambda: total(c, lag, group=topic, topic=topic, partition="0") == 50, "a group lag of 50", 30,
                 c.diagnostics)

        # The Grafana dashboard in the repository graphs only metrics the brokers have.
        names = {name for b in range(BROKERS) for (name, _) in scrape(c, b)}
        dashboard = json.loads((ROOT / "deploy" / "grafana" / "runnel.json").read_text())
        used = {m for p in dashboard["panels"] for t in p["targets"]
                for m in re.findall(r"\b(?:kafka|runnel)_[a-z0-9_]+", t["expr"])}
        assert len(used) >= 15 and used <= names, f"not served: {sorted(used - names)}"
    finally:
        c.close()


def follower_of(c, leader):
    return next(b for b in range(BROKERS) if b != leader)
