"""Hard limits and the watchdog (docs/limits.md): what one client may take from a broker is
bounded, and a broker that stops making progress exits instead of hanging.

  * max.connections.per.ip (and its overrides): a connection over the limit is closed at
    once; closing one lets the next in.
  * queued.max.request.bytes: the broker holds no more bytes of requests read and not yet
    answered than the bound (clients that send a large frame slowly wait in TCP instead of
    in the broker's memory); a flood of large produce requests is served through it and
    everything acknowledged is there afterwards.
  * watchdog.timeout.ms: a broker whose Raft driver is stuck (an fsync that never returns,
    made with the disk fault hook) logs what is stuck and exits with code 70; a broker
    stopped with SIGSTOP for longer than the timeout is not a hang.
"""

import signal
import socket
import threading
import time

import pytest

import kafka_wire as kw
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from conftest import Broker, admin_client, create_topic, unique_topic, wait_for


def api_versions_ok(bootstrap, timeout_s=5.0):
    try:
        with kw.Conn(bootstrap, timeout_s=timeout_s) as c:
            return c.api_versions(0)["error_code"] == 0
    except (OSError, ConnectionError):
        return False


def set_broker_config(bootstrap, name, value):
    admin = admin_client(bootstrap)
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(name, value, incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)


def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def admitted_conn(bootstrap):
    """A connection that ApiVersions answers. The probe that saw the broker's port open may
    still count against the per-address limit for a moment, so a refused one is retried."""
    deadline = time.monotonic() + 10
    while True:
        c = kw.Conn(bootstrap)
        try:
            assert c.api_versions(0)["error_code"] == 0
            return c
        except (OSError, ConnectionError):
            c.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_max_connections_per_ip_and_overrides(tmp_path):
    b = Broker(tmp_path / "data", settings={"max.connections.per.ip": "3"}).start()
    try:
        conns = [admitted_conn(b.bootstrap) for _ in range(3)]
        extra = kw.Conn(b.bootstrap)
        assert extra.closed_by_peer(timeout_s=5), "a 4th connection from 127.0.0.1 was kept open"
        extra.close()
        conns.pop().close()

        def admitted():
            try:
                with kw.Conn(b.bootstrap, timeout_s=2) as c:
                    return c.api_versions(0)["error_code"] == 0
            except (OSError, ConnectionError):
                return False

        wait_for(admitted, "a connection once one of the three closed", 10)
        for c in conns:
            c.close()
    finally:
        assert b.stop() == 0
    assert "max.connections.per.ip reached" in b.log_tail(200)

    # An override raises the limit for one address.
    b.settings.update({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:5"})
    b.start()
    try:
        conns = [admitted_conn(b.bootstrap) for _ in range(5)]
        extra = kw.Conn(b.bootstrap)
        assert extra.closed_by_peer(timeout_s=5)
        for c in conns + [extra]:
            c.close()
    finally:
        assert b.stop() == 0


FLOOD_CONNECTIONS = 8
FLOOD_FRAMES = 8  # per connection
FRAME_VALUE_BYTES = 900_000
POOL_BYTES = 4 << 20
SLOW_CLIENTS = 80
SLOW_FRAME_BYTES = 1 << 20


def test_queued_request_bytes_bound_memory_under_a_flood(tmp_path):
    """queued.max.request.bytes at 4 MiB. (1) A frame larger than the bound closes its
    connection. (2) 80 clients each send all but the last byte of a 1 MiB request: the broker
    reads at most 4 MiB of them, so its RSS grows by a fraction of the 80 MiB offered (without
    the bound it holds every partial frame). (3) A pipelined flood of 900 KB produce requests
    while every fsync takes 300 ms: every request is answered through the bound and every
    acknowledged record is readable."""
    b = Broker(tmp_path / "data", settings={"queued.max.request.bytes": str(POOL_BYTES),
                                            "connections.max.idle.ms": "4000"}).start()
    try:
        topic = unique_topic("flood")
        create_topic(b.bootstrap, topic, partitions=4)
        with kw.Conn(b.bootstrap) as c:
            c.send_raw(kw.i32(POOL_BYTES + 1) + b"\0" * 64)
            assert c.closed_by_peer(timeout_s=5)
        assert api_versions_ok(b.bootstrap)

        before = rss_kb(b.proc.pid)
        slow = []
        try:
            for _ in range(SLOW_CLIENTS):
                s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
                s.setblocking(False)
                slow.append(s)
                payload = kw.i32(SLOW_FRAME_BYTES) + b"x" * (SLOW_FRAME_BYTES - 1)
                sent = 0
                deadline = time.monotonic() + 0.2
                while sent < len(payload) and time.monotonic() < deadline:
                    try:
                        sent += s.send(payload[sent:])
                    except BlockingIOError:
                        time.sleep(0.005)
            time.sleep(2.0)
            grown_kb = rss_kb(b.proc.pid) - before
            offered_kb = SLOW_CLIENTS * SLOW_FRAME_BYTES // 1024
            assert grown_kb < offered_kb // 3, f"RSS grew by {grown_kb} KB with {offered_kb} KB of partial frames"
        finally:
            for s in slow:
                s.close()
        # The room is taken while those frames are unfinished (requests wait, as in Kafka
        # when its pool is exhausted); once their clients are gone the broker serves again.
        wait_for(lambda: api_versions_ok(b.bootstrap, timeout_s=2), "room once the partial frames are gone", 30)
        # A frame left unfinished for connections.max.idle.ms closes its connection.
        with socket.create_connection(("127.0.0.1", b.port), timeout=15) as s:
            s.sendall(kw.i32(1000) + b"x" * 10)
            assert s.recv(1) == b"", "a connection that never finished its frame is closed"

        set_broker_config(b.bootstrap, "fault.disk.sync.delay.ms", "300")
        results = []
        lock = threading.Lock()
        value = b"v" * FRAME_VALUE_BYTES

        def flood(i):
            acked = 0
            try:
                with kw.Conn(b.bootstrap, timeout_s=60) as c:
                    for n in range(FLOOD_FRAMES):
                        batch = kw.record_batch([(f"k{i}-{n}".encode(), value)])
                        c.send_raw(kw.frame(kw.produce_v9_request(topic, i % 4, batch, c.next_correlation_id())))
                    for _ in range(FLOOD_FRAMES):
                        r = kw.Reader(c.recv_frame())
                        r.i32()
                        r.tags()
                        resp = kw.decode_produce_v9(r)
                        if resp["topics"][0]["partitions"][0]["error_code"] == 0:
                            acked += 1
            except (OSError, ConnectionError) as e:
                with lock:
                    results.append(("error", i, repr(e)))
                return
            with lock:
                results.append(("acked", i, acked))

        threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(FLOOD_CONNECTIONS)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 90
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "produce flood still waiting after 90 s"
        errors = [r for r in results if r[0] == "error"]
        assert not errors, errors
        acked = sum(r[2] for r in results)
        assert acked == FLOOD_CONNECTIONS * FLOOD_FRAMES, results
        set_broker_config(b.bootstrap, "fault.disk.sync.delay.ms", None)
        with kw.Conn(b.bootstrap) as c:
            total = 0
            for p in range(4):
                r = c.request(kw.list_offsets_v1_request(topic, p, kw.LATEST, c.next_correlation_id()))
                total += kw.decode_list_offsets_v1(r)["topics"][0]["partitions"][0]["offset"]
        assert total == acked
    finally:
        assert b.stop() == 0


def test_watchdog_stops_a_broker_whose_raft_driver_is_stuck(tmp_path):
    b = Broker(tmp_path / "data", settings={"watchdog.timeout.ms": "1500"}).start()
    topic = unique_topic("stuck")
    create_topic(b.bootstrap, topic)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
    p.produce(topic, b"before")
    assert p.flush(30) == 0

    # SIGSTOP for twice the timeout is not a hang: the broker goes on after SIGCONT.
    b.proc.send_signal(signal.SIGSTOP)
    time.sleep(3.5)
    b.proc.send_signal(signal.SIGCONT)
    time.sleep(3.0)
    assert b.proc.poll() is None, b.log_tail(40)
    assert api_versions_ok(b.bootstrap)

    # An fsync that takes a minute: the Raft driver waits in it and stops going round.
    set_broker_config(b.bootstrap, "fault.disk.sync.delay.ms", "60000")
    p.produce(topic, b"stuck")
    p.poll(0)
    try:
        code = b.proc.wait(timeout=30)
    except Exception:
        b.kill9()
        raise AssertionError("the watchdog did not stop a broker whose Raft driver was stuck:\n" + b.log_tail(60))
    assert code == 70, b.log_tail(60)
    log = b.log_tail(400)
    assert "watchdog: the broker is not making progress" in log, log
    assert "raft driver" in log and "waiting in" in log, log
    assert "Produce" in log, "the report lists the request in flight:\n" + log

    # Started again (faults end with the process), it serves what it acknowledged.
    b.start()
    try:
        p2 = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
        p2.produce(topic, b"after")
        assert p2.flush(30) == 0
        with kw.Conn(b.bootstrap) as c:
            r = c.request(kw.list_offsets_v1_request(topic, 0, kw.LATEST, c.next_correlation_id()))
            end = kw.decode_list_offsets_v1(r)["topics"][0]["partitions"][0]["offset"]
        assert end >= 2, "the record acknowledged before the stall is kept"
    finally:
        assert b.stop() == 0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_max_size_turns_away_a_member_past_it(tmp_path, protocol):
    """group.max.size (classic) and group.consumer.max.size (KIP-848) with librdkafka
    consumers: two members share the partitions, the third gets GROUP_MAX_SIZE_REACHED (a
    fatal error for a KIP-848 member, as librdkafka treats it), and the two are unaffected."""
    b = Broker(tmp_path / "data", settings={"group.max.size": "2", "group.consumer.max.size": "2"}).start()
    consumers = []
    try:
        topic = unique_topic("gms")
        create_topic(b.bootstrap, topic, partitions=4)
        errors = {0: [], 1: [], 2: []}
        for i in range(3):
            config = {"bootstrap.servers": b.bootstrap, "group.id": f"g-{protocol}", "group.protocol": protocol,
                      "error_cb": lambda e, i=i: errors[i].append(e)}
            if protocol == "classic":
                config["session.timeout.ms"] = 6000
            c = Consumer(config)
            c.subscribe([topic])
            consumers.append(c)
            if i < 2:
                # The third joins once the first two are members (each poll serves a rebalance).
                wait_for(lambda: [m.poll(0.1) for m in consumers] and c.assignment(), f"member {i} is assigned", 30)

        def third_refused():
            for c in consumers:
                m = c.poll(0.1)
                if m is not None and m.error() is not None:
                    errors[consumers.index(c)].append(m.error())
            return [e for e in errors[2] if e.code() == KafkaError.GROUP_MAX_SIZE_REACHED
                    or (e.code() == KafkaError._FATAL and "maximum size" in e.str())]
        wait_for(third_refused, "the third member is refused", 30, lambda: f"errors: {errors}")
        assert consumers[2].assignment() == []
        wait_for(lambda: [c.poll(0.1) for c in consumers[:2]] and
                 sorted(len(c.assignment()) for c in consumers[:2]) == [2, 2],
                 "the two members share the partitions", 30)
        assert not errors[0] and not errors[1], f"members inside the bound saw errors: {errors}"
    finally:
        for c in consumers:
            try:
                c.close()
            except Exception:  # noqa: BLE001 (a fatally failed KIP-848 consumer may refuse)
                pass
        b.stop()
