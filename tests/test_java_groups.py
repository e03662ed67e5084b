"""Consumer groups with the official Apache Kafka Java client (4.x) against the broker.

GroupCheck (tests/java/src/GroupCheck.java, built by tests/java/build.sh) is run as separate
processes: `member` is one group member that appends every record it processes to a file as
"partition offset value" and commits after each poll (at-least-once); `produce` writes values
v<i> to partition i mod P; `committed` prints the group's committed and log-end offsets.

The scenario test runs for the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, with
the eager range assignor and the incremental cooperative-sticky one) and for the KIP-848
consumer protocol (ConsumerGroupHeartbeat, server-side assignor).

Against Apache Kafka start the broker with group.initial.rebalance.delay.ms=0. With the consumer
protocol a crashed member is only fenced after the broker's group.consumer.session.timeout.ms
(45 s by default on Kafka), so the bounded waits below allow for that.
"""

import re
import signal
import subprocess
import time

import pytest

from conftest import ROOT, create_topic, unique_topic, wait_for
from test_java_client import java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)

# Short-lived JVMs on a small machine: favour startup time over throughput.
JAVA_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
TOOL_TIMEOUT_S = 120
PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
# Long enough for a consumer-protocol member to be fenced after a crash on Kafka's default
# 45 s group.consumer.session.timeout.ms, plus rebalancing and catching up.
CATCH_UP_TIMEOUT_S = 150
MEMBER_MAX_SECONDS = 420


def groupcheck(java_build_dir, *args, timeout=TOOL_TIMEOUT_S, expect_ok=True):  # noqa: F811
    """Runs a one-shot GroupCheck subcommand; fails the test with its output unless it printed
    its OK line and exited 0."""
    p = run_java(java_build_dir, "GroupCheck", args, timeout, opts=JAVA_OPTS)
    if expect_ok and (p.returncode != 0 or "GroupCheck " not in p.stdout or " OK:" not in p.stdout):
        pytest.fail(f"GroupCheck {' '.join(map(str, args))} exited with {p.returncode}\n"
                    f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr[-6000:]}")
    return p


def produce(java_build_dir, bootstrap, topic, count, start=0):  # noqa: F811
    """Values v<start>..v<start+count-1>, value i to partition i mod partition count."""
    p = groupcheck(java_build_dir, "produce", "--bootstrap", bootstrap, "--topic", topic,
                   "--count", count, "--start", start)
    assert f"GroupCheck produce OK: {count} records" in p.stdout, p.stdout
    return p.stdout


def committed_offsets(java_build_dir, bootstrap, group, topic):  # noqa: F811
    """{partition: (committed offset or -1, log end offset)} from Admin listConsumerGroupOffsets
    and listOffsets(latest)."""
    out = groupcheck(java_build_dir, "committed", "--bootstrap", bootstrap, "--group", group,
                     "--topic", topic).stdout
    result = {}
    for line in out.splitlines():
        m = re.fullmatch(r"partition (\d+) committed (-?\d+) end (\d+)", line.strip())
        if m:
            result[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    assert result, f"no partition lines in:\n{out}"
    return result


class Member:
    """One `GroupCheck member` process. Its records go to <dir>/<name>.out, its stdout/stderr to
    <name>.stdout / <name>.stderr; touching <name>.out.stop asks it to finish and leave."""

    def __init__(self, java_build_dir, workdir, name, bootstrap, group, topic, protocol, assignor=None,  # noqa: F811
                 extra=()):
        self.name = name
        self.out = workdir / f"{name}.out"
        self.stop_file = workdir / f"{name}.out.stop"
        self.stdout_path = workdir / f"{name}.stdout"
        self.stderr_path = workdir / f"{name}.stderr"
        classpath = f"{java_build_dir / 'classes'}:{java_build_dir / 'lib'}/*"
        cmd = ["java", *JAVA_OPTS, "-cp", classpath, "GroupCheck", "member",
               "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--out", str(self.out),
               "--client-id", name, "--protocol", protocol, "--max-seconds", MEMBER_MAX_SECONDS,
               "--session-timeout-ms", SESSION_TIMEOUT_MS, *extra]
        if assignor:
            cmd += ["--assignor", assignor]
        self.out.touch()
        with open(self.stdout_path, "wb") as so, open(self.stderr_path, "wb") as se:
            self.proc = subprocess.Popen(list(map(str, cmd)), cwd=ROOT, stdout=so, stderr=se,
                                         stdin=subprocess.DEVNULL)

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def stdout(self):
        return self.stdout_path.read_text(errors="replace")

    def report(self):
        return (f"--- {self.name} (rc {self.proc.poll()}) stdout ---\n{self.stdout()}"
                f"\n--- {self.name} stderr (tail) ---\n{self.stderr()[-4000:]}")

    def assignment(self):
        """The member's current partitions per its last rebalance callback (None before one)."""
        found = re.findall(r"assignment now \[([0-9,]*)\]", self.stderr())
        if not found:
            return None
        return {int(x) for x in found[-1].split(",") if x}

    def records(self, allow_torn_tail=False):
        """[(partition, offset, value)] from the output file. A SIGKILLed member may have been
        killed in the middle of a line; only then is a torn last line tolerated."""
        text = self.out.read_text(errors="replace")
        lines = text.split("\n")
        tail = lines.pop()  # "" if the file ends with a newline
        result = []
        for line in lines:
            m = re.fullmatch(r"(\d+) (\d+) (v\d+)", line)
            assert m, f"{self.name}: malformed line {line!r} in {self.out}"
            result.append((int(m.group(1)), int(m.group(2)), m.group(3)))
        assert tail == "" or allow_torn_tail, f"{self.name}: unterminated last line {tail!r}"
        return result

    def alive(self):
        return self.proc.poll() is None

    def request_stop(self):
        self.stop_file.touch()

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)

    def kill9(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def wait_ok(self, timeout_s=60):
        """Waits (bounded) for a graceful exit; asserts exit code 0 and the OK summary."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            pytest.fail(f"{self.name} did not exit within {timeout_s}s\n{self.report()}")
        assert rc == 0, f"{self.name} exited with {rc}\n{self.report()}"
        assert f"GroupCheck member OK: {self.name} processed" in self.stdout(), self.report()
        return self.stdout()


@pytest.fixture
def members(java_build, tmp_path):  # noqa: F811
    """Factory for Member processes; every one still running at teardown is SIGKILLed."""
    started = []

    def start(name, *args, **kwargs):
        m = Member(java_build, tmp_path, name, *args, **kwargs)
        started.append(m)
        return m

    yield start
    for m in started:
        try:
            m.kill9()
        except Exception:  # noqa: BLE001  (teardown must not mask the test's result)
            pass


PROTOCOLS = [
    pytest.param("classic", "range", id="classic-range"),
    pytest.param("classic", "cooperative-sticky", id="classic-cooperative-sticky"),
    pytest.param("consumer", None, id="consumer-kip848"),
]


@pytest.mark.parametrize("protocol,assignor", PROTOCOLS)
def test_group_survives_crash_leave_and_join(broker, java_build, members, protocol, assignor):  # noqa: F811
    """Proves group membership, partition assignment, offset commit and offset fetch work together
    through member churn: three members share a 6-partition topic and together own every
    partition; records are produced in three steps while one member is SIGKILLed (its partitions
    must move once its session expires), one leaves gracefully on SIGTERM (close() -> leave) and a
    new member joins and gets partitions. In the end the union of what all members processed
    contains every produced value, each partition's offsets 0..end-1 are all covered (no record
    skipped, a duplicate (partition, offset) always carries the same value), at least two members
    processed data, some partition was processed by more than one member (it was reassigned), the
    newcomer processed data, and the group's committed offsets equal the log-end offsets."""
    topic = unique_topic("grp-scenario")
    group = f"{topic}-g"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    args = (broker.bootstrap, group, topic, protocol, assignor)
    step = 600
    total = 3 * step

    def report(all_members):
        text = "\n".join(m.report() for m in all_members)
        if hasattr(broker, "log_tail"):
            text += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
        return text

    def processed(all_members, crashed=()):
        seen = {}
        for m in all_members:
            for p, o, v in m.records(allow_torn_tail=m in crashed):
                seen.setdefault(v, set()).add((p, o))
        return seen

    m1, m2, m3 = (members(n, *args) for n in ("m1", "m2", "m3"))
    initial = [m1, m2, m3]
    wait_for(lambda: all(m.assignment() for m in initial)
             and set().union(*(m.assignment() for m in initial)) == set(range(PARTITIONS)),
             "3 members each own partitions and together own all 6", 90, lambda: report(initial))

    # Step 1: everyone is consuming.
    produce(java_build, broker.bootstrap, topic, step, 0)
    wait_for(lambda: len(processed(initial)) >= step, f"v0..v{step - 1} processed", CATCH_UP_TIMEOUT_S,
             lambda: report(initial))

    # Step 2: crash m1, stop m2 gracefully (SIGTERM -> close() -> leave), a newcomer joins.
    m1.kill9()
    produce(java_build, broker.bootstrap, topic, step, step)
    m2.terminate()
    m2.wait_ok(timeout_s=60)
    assert "stopped by SIGTERM" in m2.stdout(), m2.report()
    m4 = members("m4", *args)
    everyone = [m1, m2, m3, m4]
    wait_for(lambda: m4.assignment(), "the new member m4 gets partitions", CATCH_UP_TIMEOUT_S,
             lambda: report(everyone))

    # Step 3: the rest, then wait (bounded) until the survivors have processed everything.
    produce(java_build, broker.bootstrap, topic, step, 2 * step)
    wait_for(lambda: len(processed(everyone, crashed=[m1])) >= total, f"all {total} values processed",
             CATCH_UP_TIMEOUT_S, lambda: report(everyone))

    # Stop the survivors one after the other, so that whatever m3 leaves behind is picked up
    # (and committed) by m4 before m4 itself goes.
    m3.request_stop()
    m3.wait_ok(timeout_s=90)
    m4.request_stop()
    m4.wait_ok(timeout_s=90)
    for m in (m3, m4):
        assert "stopped by stop-file" in m.stdout(), m.report()

    # Every value, and every offset of every partition, processed at least once.
    seen = processed(everyone, crashed=[m1])
    expected = {f"v{i}" for i in range(total)}
    missing = sorted(expected - set(seen), key=lambda v: int(v[1:]))
    assert not missing, f"{len(missing)} values never processed, e.g. {missing[:20]}\n{report(everyone)}"
    assert set(seen) == expected, f"unexpected values: {sorted(set(seen) - expected)[:20]}"

    offsets = committed_offsets(java_build, broker.bootstrap, group, topic)
    assert sorted(offsets) == list(range(PARTITIONS)), offsets
    assert sum(end for _, end in offsets.values()) == total, offsets
    by_partition = {}
    where = {}
    for m in everyone:
        for p, o, v in m.records(allow_torn_tail=m is m1):
            assert where.setdefault((p, o), v) == v, \
                f"partition {p} offset {o} read as {where[(p, o)]} and as {v} ({m.name})"
            assert int(v[1:]) % PARTITIONS == p, f"{v} was produced to partition {int(v[1:]) % PARTITIONS}, read from {p}"
            by_partition.setdefault(p, set()).add(o)
    for p, (_, end) in offsets.items():
        gaps = sorted(set(range(end)) - by_partition.get(p, set()))
        assert not gaps, f"partition {p}: offsets never processed (end {end}): {gaps[:20]}"
        assert max(by_partition[p]) == end - 1, f"partition {p}: offsets beyond the end {end}"

    # Work was shared and moved.
    readers = {m.name: {p for p, _, _ in m.records(allow_torn_tail=m is m1)} for m in everyone}
    active = [n for n, ps in readers.items() if ps]
    assert len(active) >= 2, f"only {active} processed records: {readers}"
    moved = [p for p in range(PARTITIONS) if sum(p in ps for ps in readers.values()) >= 2]
    assert moved, f"no partition was processed by more than one member: {readers}"
    assert readers["m4"], f"the newcomer m4 processed nothing: {readers}\n{m4.report()}"

    # Everything processed was committed: the group's offsets are at the log end.
    lagging = {p: c for p, (c, end) in offsets.items() if c != end}
    assert not lagging, f"committed offsets behind the log end: {offsets}\n{report(everyone)}"


@pytest.mark.parametrize("restart", ["sigterm", "kill9"])
def test_consumer_protocol_members_keep_their_partitions_across_a_broker_restart(
        runnel_broker, java_build, members, restart):  # noqa: F811
    """KIP-848 group state (members, epochs, assignments) is in __consumer_offsets: after the
    broker restarts (clean stop, or kill -9), the members' next heartbeats are accepted as they
    are, so nobody loses or is given partitions (no rebalance callback fires), and everything
    produced afterwards is processed and committed."""
    b = runnel_broker
    topic = unique_topic("kip848-restart")
    group = f"{topic}-g"
    create_topic(b.bootstrap, topic, PARTITIONS)
    args = (b.bootstrap, group, topic, "consumer", None)
    m1, m2 = members("m1", *args), members("m2", *args)
    both = [m1, m2]

    def report():
        return "\n".join(m.report() for m in both) + f"\n--- broker log (tail) ---\n{b.log_tail()}"

    def settled():
        a1, a2 = m1.assignment(), m2.assignment()
        return a1 and a2 and a1 | a2 == set(range(PARTITIONS)) and not a1 & a2

    wait_for(settled, "2 members split all 6 partitions", 90, report)
    produce(java_build, b.bootstrap, topic, 300, 0)
    wait_for(lambda: sum(len(m.records()) for m in both) >= 300, "first 300 processed", CATCH_UP_TIMEOUT_S, report)
    callbacks = [m.stderr().count("assignment now") for m in both]
    assignments = [m.assignment() for m in both]

    if restart == "kill9":
        b.kill9()
        b.start()
    else:
        b.restart()
    produce(java_build, b.bootstrap, topic, 300, 300)
    wait_for(lambda: {v for m in both for _, _, v in m.records()} >= {f"v{i}" for i in range(600)},
             "all 600 processed after the restart", CATCH_UP_TIMEOUT_S, report)
    # Fetching resumes before the first heartbeat after the restart (every 5 s): give both
    # members two heartbeats with the restarted broker before judging their assignments.
    time.sleep(12)
    assert [m.assignment() for m in both] == assignments, report()
    assert [m.stderr().count("assignment now") for m in both] == callbacks, \
        f"a rebalance callback fired across the restart\n{report()}"
    for m in both:
        m.request_stop()
        m.wait_ok(timeout_s=90)
    offsets = committed_offsets(java_build, b.bootstrap, group, topic)
    assert all(c == end for c, end in offsets.values()) and sum(end for _, end in offsets.values()) == 600, offsets


def test_consumer_protocol_regex_subscription(broker, java_build, members):  # noqa: F811
    """KIP-848 broker-side regex (SubscriptionPattern): the member gets the partitions of every
    topic the pattern matches, none of the others, and a matching topic created while it runs
    is picked up without restarting it."""
    base = unique_topic("re")
    a, b, other, later = f"{base}-a", f"{base}-b", f"other-{base}", f"{base}-later"
    for t in (a, b, other):
        create_topic(broker.bootstrap, t, 2)
    group = f"{base}-g"
    m = members("m1", broker.bootstrap, group, a, "consumer", None, extra=("--pattern", f"{base}-.*"))

    def report():
        text = m.report()
        if hasattr(broker, "log_tail"):
            text += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
        return text

    values = lambda: {v for _, _, v in m.records()}  # noqa: E731
    produce(java_build, broker.bootstrap, a, 50, 0)
    produce(java_build, broker.bootstrap, b, 50, 1000)
    produce(java_build, broker.bootstrap, other, 50, 2000)
    wanted = {f"v{i}" for i in range(50)} | {f"v{i}" for i in range(1000, 1050)}
    wait_for(lambda: values() >= wanted, "records of both matching topics processed", CATCH_UP_TIMEOUT_S, report)

    create_topic(broker.bootstrap, later, 2)
    produce(java_build, broker.bootstrap, later, 50, 3000)
    wanted |= {f"v{i}" for i in range(3000, 3050)}
    wait_for(lambda: values() >= wanted, "the topic created later is consumed too", CATCH_UP_TIMEOUT_S, report)
    m.request_stop()
    m.wait_ok(timeout_s=90)
    assert not {v for v in values() if 2000 <= int(v[1:]) < 3000}, f"records of {other} were consumed\n{report()}"
