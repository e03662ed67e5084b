"""Operating a live 3-broker cluster (docs/admin.md): the admin API's write side through
`runnel admin` (drain a broker's leaderships away and back, move one partition's leadership,
the log filter at run time, the brokers' state), and a rolling restart of every broker while
the official Java client produces (acks=all, idempotent) and a consumer group reads: each
broker drains itself on SIGTERM (controlled shutdown), restarts, catches up and takes its
preferred leaderships back; no send fails and nothing acknowledged is lost."""

import base64
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, NewTopic, ResourcePatternType,
                                  ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from conftest import RUNNEL_BIN, cluster_port, unique_topic, wait_for, wait_for_topic
from test_cluster import BROKERS, DevCluster
from test_java_client import java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)

ADMIN_OFFSET = 2000
PARTITIONS = 6


def start_cluster(tmp_path):
    port = cluster_port(BROKERS)
    return DevCluster(tmp_path, port=port, settings=[f"admin.listeners=http://127.0.0.1:{port + ADMIN_OFFSET}",
                                                     "auto.create.topics.enable=false"])


def admin_url(c, broker):
    return f"http://127.0.0.1:{c.port + ADMIN_OFFSET + broker}"


def runnel_admin(c, broker, *args, check=True, timeout=120):
    """`runnel admin SUBCOMMAND --admin URL ...` against one broker's admin listener."""
    cmd = [RUNNEL_BIN, "admin", args[0], "--admin", admin_url(c, broker), *map(str, args[1:])]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout}\n{p.stderr}"
    return p


def get(c, broker, path):
    """(status, JSON) of GET path."""
    try:
        with urllib.request.urlopen(admin_url(c, broker) + path, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None, None


def leaders(c, broker, topic):
    """{partition: leader} as broker's admin API shows them."""
    status, parts = get(c, broker, f"/v1/partitions?topic={topic}")
    assert status == 200, parts
    return {p["partition"]: p["leader"] for p in parts}


def preferred(c, topic):
    status, parts = get(c, 0, f"/v1/partitions?topic={topic}")
    assert status == 200, parts
    return {p["partition"]: p["replicas"][0]["broker"] for p in parts}


def make_topic(c, prefix):
    topic = unique_topic(prefix)
    c.admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    wait_for_topic(c.admin, topic, PARTITIONS)
    want = preferred(c, topic)
    wait_for(lambda: all(leaders(c, b, topic) == want for b in range(BROKERS)), "preferred leaders everywhere", 30,
             c.diagnostics)
    return topic, want


def test_groups_of_every_coordinator_with_lag(tmp_path):
    """/v1/groups on one broker lists the groups every broker coordinates (asked of their
    admin APIs), each with its coordinator and, per partition, committed offset, end and lag."""
    c = start_cluster(tmp_path)
    try:
        topic = unique_topic("lag")
        c.admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        wait_for_topic(c.admin, topic, 3)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(300):
            p.produce(topic, str(i).encode(), partition=i % 3)
        assert p.flush(30) == 0
        # Group g commits offset 40 + 5g on every partition, so its lag is known.
        names = [unique_topic("g") for _ in range(8)]
        for g, name in enumerate(names):
            consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": name, "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(topic, q, 40 + 5 * g) for q in range(3)], asynchronous=False)
            consumer.close()

        def listed():
            status, body = get(c, 0, "/v1/groups")
            assert status == 200, body
            return body if {g["group"] for g in body["groups"]} >= set(names) else None
        body = wait_for(listed, "every group listed", 30, c.diagnostics)
        assert body["unreachable"] == [], body
        groups = {g["group"]: g for g in body["groups"] if g["group"] in names}
        for g, name in enumerate(names):
            view = groups[name]
            assert view["state"] == "Empty" and view["members"] == 0, view
            assert [(q["partition"], q["committed"], q["end"], q["lag"]) for q in view["partitions"]] == \
                [(q, 40 + 5 * g, 100, 60 - 5 * g) for q in range(3)], view
            assert view["lag"] == 3 * (60 - 5 * g), view
        assert len({v["coordinator"] for v in groups.values()}) > 1, "all eight groups on one coordinator"
        for b in range(BROKERS):
            status, local = get(c, b, "/v1/groups?scope=local")
            assert all(v["coordinator"] == b for v in local["groups"]), local
    finally:
        c.close()


def test_drain_undrain_transfer_and_log_level(tmp_path):
    c = start_cluster(tmp_path)
    try:
        topic, want = make_topic(c, "ops")
        ours = [p for p, b in want.items() if b == 1]
        assert ours, want

        # Drained through broker 2's API: broker 1 leads nothing, and the drain shows it.
        p = runnel_admin(c, 2, "drain", "--broker", 1, "--timeout-s", 60)
        assert "broker 1: drained" in p.stdout, p.stdout
        for b in range(BROKERS):
            wait_for(lambda: 1 not in leaders(c, b, topic).values(), f"broker {b} sees broker 1 lead nothing", 30,
                     c.diagnostics)
        status, view = get(c, 0, "/v1/brokers/1/drain")
        assert status == 200 and view["draining"] == "maintenance" and view["done"] and view["leaders"] == 0, view
        p = runnel_admin(c, 0, "brokers")
        assert "maintenance" in p.stdout, p.stdout
        # No broker hands leadership to a drained one, even when asked to.
        p = runnel_admin(c, 0, "transfer", "--topic", topic, "--partition", ours[0], "--to", 1, check=False)
        assert p.returncode != 0 and "drained" in p.stderr, (p.stdout, p.stderr)

        # Undrained: it takes its preferred leaderships back.
        p = runnel_admin(c, 0, "undrain", "--broker", 1)
        assert "may lead again" in p.stdout
        wait_for(lambda: leaders(c, 0, topic) == want, "preferred leaders back after undrain", 30, c.diagnostics)
        view = wait_for(lambda: (lambda v: v if v["leaders"] == len(ours) else None)(get(c, 2, "/v1/brokers/1/drain")[1]),
                        "broker 2 to see broker 1 lead its partitions again", 30, c.diagnostics)
        assert view["draining"] is None and not view["done"], view

        # One partition's leadership moved by hand, answered once done.
        q = next(p for p, b in want.items() if b == 0)
        p = runnel_admin(c, 2, "transfer", "--topic", topic, "--partition", q, "--to", 2)
        assert f"{topic}-{q}: led by 2" in p.stdout, p.stdout
        assert leaders(c, 0, topic)[q] in (2, 0)  # 0 again once the periodic rebalance runs
        for bad, why in [(("--partition", q, "--to", 7), "not a replica"),
                         (("--partition", PARTITIONS, "--to", 1), "no partition"),
                         (("--partition=-1", "--to", 1), "no partition")]:
            p = runnel_admin(c, 0, "transfer", "--topic", topic, *bad, check=False)
            assert p.returncode != 0 and why in p.stderr, (bad, p.stderr)
        p = runnel_admin(c, 0, "transfer", "--topic", "no-such-topic", "--partition", 0, "--to", 1, check=False)
        assert p.returncode != 0 and "does not exist" in p.stderr, p.stderr
        assert get(c, 0, "/v1/brokers/9/drain")[0] == 404

        # The log filter, read and changed at run time; a bad one is refused.
        assert runnel_admin(c, 1, "log-level").stdout.strip() == "info"
        assert runnel_admin(c, 1, "log-level", "info,runnel_broker=debug").stdout.strip() == "runnel_broker=debug,info"
        p = runnel_admin(c, 1, "log-level", "=[[", check=False)
        assert p.returncode != 0 and "400" in p.stderr, p.stderr
        assert runnel_admin(c, 1, "log-level").stdout.strip() == "runnel_broker=debug,info"
    finally:
        c.close()


def ready(c, broker):
    return get(c, broker, "/ready")[0] == 200


def test_rolling_restart_with_java_producer_and_group(tmp_path, java_build):  # noqa: F811
    c = start_cluster(tmp_path)
    try:
        topic, want = make_topic(c, "roll")
        stop_file, roll_file = tmp_path / "stop", tmp_path / "roll"
        args = ["--bootstrap", c.bootstrap, "--topic", topic, "--group", "roll-group", "--rate", 200,
                "--stop-file", stop_file, "--roll-file", roll_file, "--max-s", 240, "--drain-s", 60]
        classpath = f"{java_build / 'classes'}:{java_build / 'lib'}/*"
        out = open(tmp_path / "rollcheck.out", "w+")
        err = open(tmp_path / "rollcheck.err", "w+")
        java = subprocess.Popen(["java", "-XX:+UseSerialGC", "-Xmx256m", "-cp", classpath, "RollCheck",
                                 *map(str, args)], stdout=out, stderr=err)
        try:
            time.sleep(8)  # the producer and the group at work before the roll
            roll_start = int(time.time() * 1000)
            for b in range(BROKERS):
                old = c.pid(b)
                os.kill(old, signal.SIGTERM)
                wait_for(lambda: c.pid(b) != old, f"broker {b} started again", 60, c.diagnostics)
                wait_for(lambda: ready(c, b), f"broker {b} ready again", 90, c.diagnostics)
                mine = {p for p, x in want.items() if x == b}
                wait_for(lambda: all(leaders(c, b, topic).get(p) == b for p in mine),
                         f"broker {b} leads its preferred partitions again", 60, c.diagnostics)
            roll_end = int(time.time() * 1000)
            roll_file.write_text(f"{roll_start} {roll_end}\n")
            time.sleep(3)
            stop_file.write_text("stop\n")
            java.wait(timeout=180)
        finally:
            if java.poll() is None:
                java.kill()
        out.seek(0)
        err.seek(0)
        text = out.read()
        assert java.returncode == 0, f"RollCheck exited {java.returncode}\n{text}\n{err.read()[-4000:]}"
        report = json.loads(text.strip().splitlines()[-1])
        print(f"rolling restart of {BROKERS} brokers in {(roll_end - roll_start) / 1000:.1f} s: {report}")
        assert report["failed"] == 0, report
        assert report["acked"] == report["sent"] > 1000, report
        assert report["missing"] == 0, report
        assert report["roll_records"] > 0 and report["roll_p99_ms"] >= 0, report

        # Each stop drained the broker first: every leadership had moved before it went.
        log = (tmp_path / "cluster.log").read_text()
        drained = [line for line in log.splitlines() if "controlled shutdown: leaderships moved" in line]
        assert len(drained) == BROKERS, drained
        assert all("movable_after=0" in line for line in drained), drained
    finally:
        c.close()


def request(c, broker, method, path, user=None, password=None, body=None):
    """(status, headers, body text) of one admin API request, with Basic credentials."""
    req = urllib.request.Request(admin_url(c, broker) + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def test_admin_api_authentication_and_authorization(tmp_path):
    """admin.authentication=basic: the probes and /metrics stay open; everything else asks
    for a user the SCRAM credentials verify (401 otherwise), and authorizes it on the
    cluster: DESCRIBE to read, ALTER to change (403 otherwise); `runnel admin --user` and
    the groups of other brokers (credentials passed on) work."""
    port = cluster_port(BROKERS)
    c = DevCluster(tmp_path, port=port, settings=[
        f"admin.listeners=http://127.0.0.1:{port + ADMIN_OFFSET}", "admin.authentication=basic",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS;User:admin"])
    try:
        users = {"admin": "admin-secret", "viewer": "viewer-secret", "nobody": "nobody-secret"}
        done = c.admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), pw.encode())
            for user, pw in users.items()])
        for f in done.values():
            f.result(30)
        grant = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:viewer", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        for f in c.admin.create_acls([grant]).values():
            f.result(30)

        for path in ["/health", "/ready", "/metrics"]:
            wait_for(lambda: request(c, 0, "GET", path)[0] == 200, f"{path} open", 30, c.diagnostics)
        status, headers, _ = request(c, 0, "GET", "/v1/brokers")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), status
        assert request(c, 0, "GET", "/console/")[0] == 401
        assert request(c, 0, "GET", "/v1/brokers", "viewer", "wrong")[0] == 401
        assert request(c, 0, "GET", "/v1/brokers", "ghost", "viewer-secret")[0] == 401

        def described(user):
            return request(c, 1, "GET", "/v1/brokers", user, users[user])[0] == 200
        wait_for(lambda: described("viewer"), "the viewer's ACL applied", 30, c.diagnostics)
        assert request(c, 1, "GET", "/v1/brokers", "nobody", users["nobody"])[0] == 403
        status, _, body = request(c, 1, "POST", "/v1/brokers/2/drain", "viewer", users["viewer"])
        assert status == 403 and "may not Alter" in body, (status, body)
        status, _, body = request(c, 1, "PUT", "/v1/log-level", "viewer", users["viewer"], {"filter": "debug"})
        assert status == 403, (status, body)

        wait_for(lambda: request(c, 0, "GET", "/v1/brokers", "admin", users["admin"])[0] == 200,
                 "broker 0 to know the admin user", 30, c.diagnostics)
        env = dict(os.environ, RUNNEL_ADMIN_PASSWORD=users["admin"])
        cmd = [RUNNEL_BIN, "admin", "drain", "--admin", admin_url(c, 0), "--user", "admin", "--broker", "2"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0 and "broker 2: drained" in p.stdout, (p.stdout, p.stderr)
        p = subprocess.run([RUNNEL_BIN, "admin", "undrain", "--admin", admin_url(c, 0), "--broker", "2"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and "401" in p.stderr, p.stderr
        cmd = [RUNNEL_BIN, "admin", "undrain", "--admin", admin_url(c, 0), "--user", "admin", "--broker", "2"]
        assert subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env).returncode == 0

        status, _, body = request(c, 0, "GET", "/v1/groups", "viewer", users["viewer"])
        assert status == 200 and json.loads(body)["unreachable"] == [], body
    finally:
        c.close()


def test_decommission_through_the_admin_api(tmp_path):
    """POST /v1/brokers/3/decommission on a 4-broker cluster moves every replica off broker 3
    (an RF 3 topic's and __consumer_offsets'), and GET shows the progress until it is done:
    then no partition lists broker 3 and each still has three replicas."""
    port = cluster_port(4)
    c = DevCluster(tmp_path, brokers=4, port=port,
                   settings=[f"admin.listeners=http://127.0.0.1:{port + ADMIN_OFFSET}"])
    try:
        topic = unique_topic("decom")
        c.admin.create_topics([NewTopic(topic, 4, 3)])[topic].result(30)
        wait_for_topic(c.admin, topic, 4)
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        consumer.close()

        def holds():
            status, view = get(c, 0, "/v1/brokers/3/decommission")
            assert status == 200, view
            return view
        before = holds()
        assert before["remaining"] > 0 and not before["done"], before
        status, _, body = request(c, 1, "POST", "/v1/brokers/3/decommission")
        started = json.loads(body)
        assert status == 200 and started["started"] > 0, (status, body)
        seen = [before["remaining"]]

        def done():
            view = holds()
            seen.append(view["remaining"])
            return view["done"]
        wait_for(done, "broker 3 emptied", 120, c.diagnostics)
        assert seen[0] > 0 and seen[-1] == 0, seen
        for t in (topic, "__consumer_offsets"):
            parts = c.admin.list_topics(t, timeout=10).topics[t].partitions.values()
            assert all(3 not in q.replicas and len(q.replicas) == 3 for q in parts), [q.replicas for q in parts]
        assert get(c, 0, "/v1/brokers/9/decommission")[0] == 404
    finally:
        c.close()
