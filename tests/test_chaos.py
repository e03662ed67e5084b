"""`runnel chaos` on a 3-broker cluster that it starts itself: the verify workload
(idempotent acks=all producers, assigned consumers and a consumer group) runs while
leaders and followers are killed (-9), stopped cleanly and paused, their disks fill up, their clocks jump, then, in network namespaces, a leader
and a whole region are cut off, also while other faults are in force. Every acknowledged value must be read back once, where it
was acknowledged; the availability chart must show each fault. The checker must fail
loudly on a history with a planted loss or a group that skipped records. `runnel dev
--regions 3 --inter-region-latency` must put real latency (a userspace delayer on NFQUEUE)
between regions, and none within one. The namespace tests need root (and the latency ones
iptables-legacy and a kernel with NFQUEUE): they are skipped, saying why, without.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import RUNNEL_BIN, cluster_port, wait_for, wait_for_port


def netns_unavailable():
    """Why network namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces: ip netns, tc)"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    return f"needs iproute2: no {', '.join(missing)}" if missing else None


def latency_unavailable():
    """Why latency between namespaces cannot be had here: no namespaces, no iptables-legacy,
    or a kernel without the NFQUEUE target or nfnetlink_queue (tried in a throwaway
    namespace)."""
    why = netns_unavailable()
    if why:
        return why
    if shutil.which("iptables-legacy") is None:
        return "needs iptables-legacy (Debian: apt-get install iptables)"
    ns = f"runnel-probe-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, timeout=30)
    try:
        p = subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy", "-w", "10", "-t", "mangle", "-A",
                            "PREROUTING", "-s", "10.231.0.32/27", "-j", "NFQUEUE", "--queue-num", "1"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            return f"this kernel has no NFQUEUE target (iptables-legacy: {p.stderr.strip()})"
        p = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/netfilter/nfnetlink_queue"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            return "this kernel has no nfnetlink_queue (CONFIG_NETFILTER_NETLINK_QUEUE)"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    return None


def host_leftovers(tag):
    """Namespaces and links of the namespaces tagged `tag` still on the host."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, timeout=30).stdout
    return [line for line in (netns + links).splitlines()
            if f"runnel-{tag}-" in line or f"rnbr{tag} " in line or f"rnh{tag}" in line]
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)


def chaos(tmp_path, *args, timeout=300):
    port = cluster_port(3)
    report, history, chart = tmp_path / "report.json", tmp_path / "history.json", tmp_path / "chart.svg"
    logs = tmp_path / "logs"
    cmd = [RUNNEL_BIN, "chaos", "--port", port, "--data-dir", tmp_path / "data", "--logs", logs, "--json", report,
           "--history", history, "--chart", chart, *args]
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    tails = "\n".join(f"--- {f.name}\n" + "\n".join(f.read_text().splitlines()[-15:])
                      for f in sorted(logs.glob("*.log"))) if logs.exists() else ""
    assert p.returncode == 0, f"chaos exited {p.returncode}\n{p.stdout}\n{p.stderr}\n{tails}"
    assert "no anomalies" in p.stdout, p.stdout
    return p.stdout, json.loads(report.read_text()), json.loads(history.read_text()), chart.read_text()


def verify_check(path):
    return subprocess.run([RUNNEL_BIN, "verify", "--check-history", str(path)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_kill_and_pause_of_leaders_and_followers_lose_nothing(tmp_path):
    schedule = "5:kill-leader:3,14:pause-leader:4,24:kill-follower:3,33:pause-follower:4"
    out, report, history, chart = chaos(
        tmp_path, "--duration", 45, "--partitions", 3, "--producers", 2, "--rate", 60, "--schedule", schedule)
    assert report["counts"] == {} and report["sends_failed"] == 0, report
    assert report["sends_ok"] >= 2 * 60 * 5 * 45 * 0.8, report
    faults = [f["fault"] for f in history["faults"]]
    assert [f.split(" ")[0] for f in faults] == ["kill-leader", "pause-leader", "kill-follower", "pause-follower"], out
    assert all(f["end_ms"] > f["start_ms"] for f in history["faults"])
    # Assigned consumers, the group and the final reader all read.
    [(group, members)] = history["groups"].items()
    assert members, history["groups"]
    kinds = {(o["kind"], o["outcome"]) for o in history["ops"]}
    assert {("Send", "Ok"), ("Poll", "Ok"), ("Commit", "Ok")} <= kinds, kinds
    # Each fault is on the chart, shaded and labelled.
    assert chart.lstrip().startswith("<svg") and chart.rstrip().endswith("</svg>")
    for f in faults:
        assert f in chart, f

    # The checker is handed the same history with a planted loss: an acknowledged value
    # removed from every read.
    lost = json.loads(json.dumps(history))
    acked = next(s for s in lost["sends"] if s["outcome"] == "Ok")
    for p in lost["polls"]:
        p["records"] = [r for r in p["records"] if r[2] != acked["value"]]
    (tmp_path / "lost.json").write_text(json.dumps(lost))
    p = verify_check(tmp_path / "lost.json")
    assert p.returncode != 0 and "lost-write: 1" in p.stdout, p.stdout + p.stderr

    # ... and with the group never having delivered one record below others it delivered.
    skipped = json.loads(json.dumps(history))
    ids = set(members)
    group_reads = [(p, r) for p in skipped["polls"] if p["consumer"] in ids for r in p["records"]]
    partition, offset, _ = group_reads[len(group_reads) // 2][1]
    for p in skipped["polls"]:
        if p["consumer"] in ids:
            p["records"] = [r for r in p["records"] if (r[0], r[1]) != (partition, offset)]
    (tmp_path / "skipped.json").write_text(json.dumps(skipped))
    p = verify_check(tmp_path / "skipped.json")
    assert p.returncode != 0 and "group-skipped: 1" in p.stdout, p.stdout + p.stderr

    p = verify_check(tmp_path / "history.json")
    assert p.returncode == 0 and "no anomalies" in p.stdout, p.stdout + p.stderr


def test_full_disks_and_clock_jumps_lose_nothing(tmp_path):
    """A leader's and a follower's disk fill up mid-write (half of a batch written, then
    ENOSPC): each stops at once (exit 70, its log ends torn) and is started again by chaos
    once the fault ends; a leader's and then a follower's wall clock jump an hour back.
    Nothing acknowledged is lost."""
    schedule = "5:disk-full-leader:3,13:clock-jump-leader:4,21:disk-full-follower:3,29:clock-jump-follower:3"
    out, report, history, _ = chaos(
        tmp_path, "--duration", 36, "--partitions", 3, "--rate", 60, "--schedule", schedule,
        "--clock-jump-ms", "-3600000")
    assert report["counts"] == {} and report["sends_failed"] == 0, report
    faults = [f["fault"].split(" ")[0] for f in history["faults"]]
    assert faults == ["disk-full-leader", "clock-jump-leader", "disk-full-follower", "clock-jump-follower"], out
    logs = "".join(f.read_text() for f in (tmp_path / "logs").glob("*.log"))
    assert logs.count("raft entries could not be written; stopping") >= 2, "both full disks stopped their broker"


def test_clean_stops_of_leaders_and_followers_lose_nothing(tmp_path):
    """Rolling restarts: a leader, a follower, then a leader again are stopped with SIGTERM
    while the workload writes, and started again once each fault ends. Each stop is clean
    (exit 0 within --stop-within-ms, its logs closed, writing only what changed since the
    start), and nothing acknowledged is lost across the restarts."""
    schedule = "5:stop-leader:3,14:stop-follower:3,23:stop-leader:3"
    out, report, history, chart = chaos(
        tmp_path, "--duration", 32, "--partitions", 6, "--rate", 60, "--schedule", schedule,
        "--stop-within-ms", 30000)
    assert report["counts"] == {} and report["sends_failed"] == 0, report
    faults = [f["fault"] for f in history["faults"]]
    assert [f.split(" ")[0] for f in faults] == ["stop-leader", "stop-follower", "stop-leader"], out
    assert all(re.search(r"stopped in \d+\.\d+s$", f) for f in faults), faults
    assert "failed stop" not in out and "unexpected exit" not in out, out
    for f in faults:
        assert f in chart, f
    # Each stopped broker moved its leaderships off and closed its logs: once per stop, and
    # once more at the run's end.
    stopped = [int(re.search(r"\(broker (\d+)\)", f).group(1)) for f in faults]
    for b in set(stopped):
        log = (tmp_path / "logs" / f"broker-{b}.log").read_text()
        for line in ("controlled shutdown: leaderships moved", "logs closed"):
            assert log.count(line) >= stopped.count(b) + 1, (b, line, log[-2000:])


def test_isolated_leader_and_region_in_network_namespaces_lose_nothing(tmp_path):
    """Each broker in its own network namespace, one per region; the links of a leader,
    then of a whole region, are taken down and brought back, while a follower's clock is
    off by ten minutes from the schedule's first second to after both: faults of a schedule
    overlap, each applied at its start and healed at its own end, and a fault at 0 s finds
    the workload's topic (the schedule counts from when the workload runs)."""
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    schedule = "0:clock-jump-follower:20,4:isolate-leader:4,12:isolate-region:5"
    out, report, history, chart = chaos(
        tmp_path, "--duration", 30, "--regions", 3, "--partitions", 3, "--rate", 60, "--schedule", schedule)
    assert report["counts"] == {} and report["sends_failed"] == 0, report
    assert "faults injected: 3 (0 skipped)" in out, out
    faults = [f["fault"] for f in history["faults"]]
    assert [f.split(" ")[0] for f in faults] == ["clock-jump-follower", "isolate-leader", "isolate-region"], out
    clock, leader, region = history["faults"]
    assert clock["start_ms"] < leader["start_ms"] < leader["end_ms"] < region["start_ms"] < region["end_ms"] \
        < clock["end_ms"], history["faults"]
    assert re.search(r"listening on 10\.231\.\d+\.\d+:", out), "brokers ran in namespaces"
    # Service resumed: sends were acknowledged in the last seconds of the run.
    end = history["duration_ms"]
    assert any(o["kind"] == "Send" and o["outcome"] == "Ok" and o["start_ms"] > end - 3000 for o in history["ops"])


def test_region_latency_overlapping_a_region_loss_injects_both(tmp_path):
    """The schedule users reported: latency added between regions (the NFQUEUE delayer's
    delay raised, on top of the always-on --inter-region-latency) from the schedule's first
    second, and a whole region cut off while it is in force. Both are applied, the isolation
    healed at its own end inside the latency's window, and nothing acknowledged is lost."""
    why = latency_unavailable()
    if why:
        pytest.skip(f"latency between regions: {why}")
    out, report, history, _ = chaos(
        tmp_path, "--duration", 26, "--regions", 3, "--partitions", 3, "--rate", 60, "--inter-region-latency", "10ms",
        "--latency-ms", 20, "--schedule", "0:region-latency:20,4:isolate-region:6")
    assert "faults injected: 2 (0 skipped)" in out, out
    assert report["counts"] == {} and report["sends_failed"] == 0, report
    assert [f["fault"].split(" ")[0] for f in history["faults"]] == ["region-latency", "isolate-region"], out
    latency, region = history["faults"]
    assert latency["start_ms"] < region["start_ms"] < region["end_ms"] < latency["end_ms"], history["faults"]
    assert "+20 ms each way (25 ms each way in all)" in latency["fault"], latency


# One TCP connect is one round trip: the minimum of several, once the broker listens.
CONNECT_MS = """
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 30
while True:
    try:
        socket.create_connection((host, port), timeout=2).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
best = None
for _ in range(7):
    s = socket.socket()
    s.settimeout(5)
    t = time.perf_counter()
    s.connect((host, port))
    ms = (time.perf_counter() - t) * 1000
    s.close()
    best = ms if best is None else min(best, ms)
    time.sleep(0.05)
print(f"{best:.3f}")
"""


def connect_ms(namespace, host, port):
    p = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", CONNECT_MS, host, str(port)],
                       capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"connect from {namespace} to {host}:{port}: {p.stderr}"
    return float(p.stdout.strip())


def mangle_rules():
    """The host's own mangle table."""
    return subprocess.run(["iptables-legacy", "-t", "mangle", "-S"], capture_output=True, text=True,
                          timeout=30).stdout


def test_dev_regions_have_real_latency_between_them(tmp_path):
    """`runnel dev --brokers 3 --regions 3 --inter-region-latency 40ms`: a client in region
    0's namespace reaches region 0's broker at once and region 1's after one round trip of
    40 ms (20 ms each way, at each receiver's ingress); SIGTERM removes every namespace and
    leaves no delaying rule in the host's netfilter."""
    why = latency_unavailable()
    if why:
        pytest.skip(f"latency between regions: {why}")
    port = cluster_port(3)
    out_path, err_path = tmp_path / "dev.out", tmp_path / "dev.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        dev = subprocess.Popen([RUNNEL_BIN, "dev", "--brokers", "3", "--regions", "3", "--inter-region-latency", "40ms",
                                "--port", str(port), "--data-dir", str(tmp_path / "data")],
                               stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    tag = None
    try:
        def printed():
            text = out_path.read_text()
            return text if "bootstrap:" in text or dev.poll() is not None else None
        text = wait_for(printed, "runnel dev printing its regions", 30,
                        lambda: out_path.read_text() + err_path.read_text()[-3000:])
        assert dev.poll() is None and "runs on loopback" not in text, text + err_path.read_text()[-3000:]
        assert "40 ms round trip (20 ms each way) between regions" in text, text
        tag = re.search(r"ip netns exec runnel-(\d+)-r0 ", text).group(1)
        brokers = {int(b): (host, int(p)) for b, host, p in re.findall(r"broker (\d+) at ([\d.]+):(\d+)", text)}
        assert re.search(r"region r0 \S+: broker 0 at ", text) and re.search(r"region r1 \S+: broker 1 at ", text), text
        near = connect_ms(f"runnel-{tag}-r0", *brokers[0])
        far = connect_ms(f"runnel-{tag}-r0", *brokers[1])
        print(f"TCP connect from region 0's clients: to region 0 {near:.2f} ms, to region 1 {far:.2f} ms")
        assert near < 10, f"same region: {near} ms"
        assert far >= 35, f"another region: {far} ms"
        assert "NFQUEUE" not in mangle_rules(), "the delaying rules are in the namespaces, never the host's"
    finally:
        dev.send_signal(signal.SIGTERM)
        dev.wait(timeout=60)
    assert dev.returncode == 0, err_path.read_text()[-3000:]
    assert host_leftovers(tag) == [], "runnel dev removes its namespaces, links and bridge on SIGTERM"
    assert "NFQUEUE" not in mangle_rules(), mangle_rules()


def test_attached_to_a_dev_cluster(tmp_path):
    """`runnel chaos --attach` breaks a cluster that `runnel dev --brokers 3` runs: it finds
    each broker's process by its port, and dev starts a killed or stopped broker again."""
    port = cluster_port(3)
    log = open(tmp_path / "dev.log", "w")
    dev = subprocess.Popen([RUNNEL_BIN, "dev", "--brokers", "3", "--port", str(port), "--data-dir",
                            str(tmp_path / "data")], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        for i in range(3):
            wait_for_port(port + i, proc=dev)
        report = tmp_path / "report.json"
        p = subprocess.run([RUNNEL_BIN, "chaos", "--attach", "--bootstrap", f"127.0.0.1:{port}", "--duration", "20",
                            "--schedule", "4:kill-leader:2,11:pause-follower:3,16:stop-leader:2", "--json", str(report)],
                           capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        log.flush()
        assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n{(tmp_path / 'dev.log').read_text()[-3000:]}"
        assert "no anomalies" in p.stdout and "faults injected: 3 (0 skipped)" in p.stdout, p.stdout
        r = json.loads(report.read_text())
        assert r["counts"] == {} and r["sends_failed"] == 0, r
        faults = [f["fault"].split(" ")[0] for f in r["faults"]]
        assert faults == ["kill-leader", "pause-follower", "stop-leader"], r["faults"]
        # dev started the killed and the stopped broker again: five brokers started in all.
        assert len(re.findall(r"broker \d pid \d+", (tmp_path / "dev.log").read_text())) == 5
    finally:
        dev.terminate()
        dev.wait(timeout=30)
        log.close()


class ApacheKafka:
    """A 3-node Apache Kafka cluster in KRaft mode (each node broker and controller), run from
    the jars tests/java/build.sh put in .cache/java/lib: clients on P..P+2, controllers on
    P+1000..P+1002, node ids 1..3. Every node is a JVM of its own session, as Kafka's scripts
    start them, so `runnel chaos --attach` has to find and restart them through /proc."""

    def __init__(self, lib_dir, tmp_path):
        self.port = cluster_port(3)
        self.dir = tmp_path / "kafka"
        self.dir.mkdir()
        self.classpath = f"{lib_dir}/*"
        self.bootstrap = ",".join(f"127.0.0.1:{self.port + i}" for i in range(3))

    def java(self, main, *args):
        return ["java", "-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", f"-Dkafka.logs.dir={self.dir}",
                "-cp", self.classpath, main, *map(str, args)]

    def start(self):
        voters = ",".join(f"{i + 1}@127.0.0.1:{self.port + 1000 + i}" for i in range(3))
        cluster_id = subprocess.run(self.java("kafka.tools.StorageTool", "random-uuid"), capture_output=True,
                                    text=True, timeout=60, check=True).stdout.strip().splitlines()[-1]
        for i in range(3):
            props = self.dir / f"node{i + 1}.properties"
            props.write_text("\n".join([
                "process.roles=broker,controller", f"node.id={i + 1}", f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port + i},CONTROLLER://127.0.0.1:{self.port + 1000 + i}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port + i}",
                "inter.broker.listener.name=PLAINTEXT", "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.dir / f'data{i + 1}'}", "offsets.topic.replication.factor=3",
                "transaction.state.log.replication.factor=3", "share.coordinator.state.topic.replication.factor=3",
                "group.initial.rebalance.delay.ms=0", "num.io.threads=2", "num.network.threads=2", ""]))
            subprocess.run(self.java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", props),
                           capture_output=True, text=True, timeout=60, check=True)
        for i in range(3):
            out = open(self.dir / f"node{i + 1}.out", "a")
            subprocess.Popen(self.java("kafka.Kafka", self.dir / f"node{i + 1}.properties"), stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        for i in range(3):
            wait_for_port(self.port + i, timeout_s=90)

    def pids(self):
        """Every live process of this cluster (also those started again by someone else)."""
        mine = str(self.dir).encode()
        out = []
        for d in pathlib.Path("/proc").iterdir():
            try:
                if d.name.isdigit() and mine in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
        return out

    def stop(self):
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def tail(self):
        return "\n".join(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-20:])
                         for f in sorted(self.dir.glob("node*.out")))


def test_attached_to_apache_kafka_the_same_workload_and_faults(tmp_path, java_build):
    """The workload, the checker and the process faults are not Runnel's alone: `runnel chaos
    --attach` kills a leader, stops a follower (SIGTERM: Kafka's controlled shutdown) and
    pauses one of a 3-node Apache Kafka cluster, starts the killed and the stopped JVM again
    from their /proc command lines (nobody supervises them), finds no
    anomaly, and skips the disk fault (Kafka has no fault hooks) instead of pretending."""
    kafka = ApacheKafka(java_build / "lib", tmp_path)
    try:
        kafka.start()
        report = tmp_path / "report.json"
        p = subprocess.run([RUNNEL_BIN, "chaos", "--attach", "--bootstrap", kafka.bootstrap, "--duration", "30",
                            "--partitions", "3", "--replication-factor", "3", "--rate", "60", "--json", str(report),
                            "--schedule", "4:kill-leader:3,11:stop-follower:3,20:pause-follower:3,26:slow-disk-follower:2"],
                           capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, f"{p.stdout}\n{p.stderr}\n{kafka.tail()}"
        assert "no anomalies" in p.stdout and "faults injected: 3 (1 skipped)" in p.stdout, p.stdout
        assert re.search(r"slow-disk-follower skipped: broker \d has no fault.disk.sync.delay.ms", p.stdout), p.stdout
        assert len(re.findall(r"broker \d pid \d+ started again", p.stdout)) == 2, p.stdout
        assert "failed stop" not in p.stdout, p.stdout
        r = json.loads(report.read_text())
        assert r["counts"] == {} and r["sends_failed"] == 0 and r["sends_ok"] > 0, r
        faults = [f["fault"].split(" ")[0] for f in r["faults"]]
        assert faults == ["kill-leader", "stop-follower", "pause-follower"], r["faults"]
        assert len(kafka.pids()) == 3, "the killed and the stopped node run again"
    finally:
        kafka.stop()


def test_transactions_under_leader_and_follower_faults_lose_nothing(tmp_path):
    """The transactional workload (`--transactional`: each producer writes one value to each
    of two partitions per transaction, every fifth aborted; the first producer with
    transactions version 1, the second with version 2; a copier reads what they commit and
    copies it exactly once, committing its offsets in the same transactions; every reader,
    the final one included, reads with read_committed) while the copier's transaction
    coordinator is killed, its group's coordinator paused, and partition leaders killed and
    paused: every committed transaction is read whole, no value of a transaction that never
    committed is read, none is read in part, nothing twice, and every value below the
    copier's committed offsets is copied exactly once. The checker must also flag a planted
    aborted read and a planted partial transaction."""
    schedule = "5:kill-coordinator:3,12:kill-leader:3,20:pause-coordinator:4,29:pause-leader:4"
    out, report, history, _ = chaos(
        tmp_path, "--duration", 38, "--partitions", 3, "--producers", 2, "--rate", 10, "--transactional",
        "--schedule", schedule, timeout=400)
    faults = [f["fault"].split(" ")[0] for f in history["faults"]]
    assert faults == ["kill-coordinator", "kill-leader", "pause-coordinator", "pause-leader"], out
    copier = history["copier"]["group"]
    assert history["faults"][0]["fault"].endswith(f" of {copier}"), history["faults"]  # its transactional id
    assert history["faults"][2]["fault"].endswith(f" of {copier}"), history["faults"]  # its group
    assert report["counts"] == {}, report
    committed, aborted, unknown = report["txns"]
    assert committed >= 2 * 10 * 38 * 0.5 and aborted >= committed // 8, report["txns"]
    # Producer 0 runs transactions version 1, producer 1 version 2 (KIP-890 part 2): both commit.
    per_producer = [sum(1 for t in history["txns"] if t["producer"] == i and t["outcome"] == "Ok") for i in (0, 1)]
    assert min(per_producer) >= 10 * 38 * 0.4, per_producer
    # The copier (consume-transform-produce, exactly once) kept up: most committed values
    # are below its group's committed offsets, each with exactly one copy (checked above:
    # no copy-lost, copy-duplicated or copy-uncommitted anomaly).
    inputs = sum(len(t["values"]) for t in history["txns"] if t["outcome"] == "Ok" and t["producer"] < 2)
    assert report["copied"] >= inputs * 0.8, (report["copied"], inputs)
    assert "copier:" in out, out
    assert "transactions:" in out, out

    txn_values = {v for t in history["txns"] for v in t["values"]}
    never = next(t for t in history["txns"] if t["outcome"] == "Failed")
    done = next(t for t in history["txns"] if t["outcome"] == "Ok" and len(t["values"]) == 2)
    # A value of a transaction that never committed, read.
    planted = json.loads(json.dumps(history))
    final = next(p for p in planted["polls"] if p["consumer"] in planted["final_readers"])
    final["records"].append([0, 10**9, never["values"][0]])
    (tmp_path / "aborted.json").write_text(json.dumps(planted))
    p = verify_check(tmp_path / "aborted.json")
    assert p.returncode != 0 and "failed-write-read: 1" in p.stdout, p.stdout + p.stderr
    # Half of a committed transaction gone from every read.
    planted = json.loads(json.dumps(history))
    for p in planted["polls"]:
        p["records"] = [r for r in p["records"] if r[2] != done["values"][1]]
    (tmp_path / "partial.json").write_text(json.dumps(planted))
    p = verify_check(tmp_path / "partial.json")
    assert p.returncode != 0 and "partial-transaction: 1" in p.stdout, p.stdout + p.stderr
    assert txn_values, history["txns"][:3]
