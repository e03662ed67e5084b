"""Admin requests and producer-id allocation racing from many connections never hang a broker.

A single broker once deadlocked for good when CreateTopics (holding the topic store's lock,
then taking the producer-id lock) raced InitProducerId (the same two locks the other way
round): both async workers blocked, every client timed out and SIGTERM could not stop it.
Topics now live in the Raft metadata log and producer ids have their own owner; this test
runs topic creation, deletion, partition creation and InitProducerId together from many
connections for a bounded time, then checks that every request was answered and that the
broker still answers and stops cleanly.
"""

import threading
import time

from confluent_kafka.admin import NewPartitions, NewTopic

from conftest import admin_client
from kafka_wire import Conn, header_v1, i32, i16

WORKERS = 4
RUN_S = 8.0
OPS_MAX = 60  # per worker and kind, so the run is bounded in count as well as time


def init_producer_id(conn):
    """InitProducerId v0 without a transactional id: (error_code, producer_id)."""
    payload = header_v1(22, 0, conn.next_correlation_id()) + i16(-1) + i32(60000)
    r = conn.request(payload)
    r.i32()  # throttle time
    error, pid = r.i16(), r.i64()
    return error, pid


def test_admin_requests_racing_producer_ids_never_hang_the_broker(runnel_broker):
    bootstrap = runnel_broker.bootstrap
    deadline = time.monotonic() + RUN_S
    errors = []
    answered = {"create": 0, "delete": 0, "partitions": 0, "pid": 0}
    pids = set()
    lock = threading.Lock()

    def admin_worker(w):
        admin = admin_client(bootstrap)
        for i in range(OPS_MAX):
            if time.monotonic() > deadline:
                return
            topic = f"race-{w}-{i}"
            try:
                admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=15)[topic].result(timeout=20)
                with lock:
                    answered["create"] += 1
                admin.create_partitions([NewPartitions(topic, 3)], request_timeout=15)[topic].result(timeout=20)
                with lock:
                    answered["partitions"] += 1
                admin.delete_topics([topic], request_timeout=15)[topic].result(timeout=20)
                with lock:
                    answered["delete"] += 1
            except Exception as e:  # a Kafka error is an answer; a timeout is a hang
                if "timed out" in str(e).lower() or "timeout" in str(e).lower():
                    errors.append(f"admin worker {w}: {e}")
                    return

    def pid_worker(w):
        with Conn(bootstrap, timeout_s=15) as conn:
            for _ in range(OPS_MAX * 20):
                if time.monotonic() > deadline:
                    return
                try:
                    error, pid = init_producer_id(conn)
                except OSError as e:
                    errors.append(f"InitProducerId worker {w}: no answer ({e})")
                    return
                if error != 0:
                    errors.append(f"InitProducerId worker {w}: error {error}")
                    return
                with lock:
                    answered["pid"] += 1
                    if pid in pids:
                        errors.append(f"producer id {pid} handed out twice")
                    pids.add(pid)

    threads = [threading.Thread(target=admin_worker, args=(w,)) for w in range(WORKERS)]
    threads += [threading.Thread(target=pid_worker, args=(w,)) for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=RUN_S + 60)
    assert not any(t.is_alive() for t in threads), f"a worker is stuck; answered so far {answered}"
    assert not errors, f"{errors[:5]}\n{runnel_broker.log_tail()}"
    assert answered["create"] > 0 and answered["delete"] > 0 and answered["partitions"] > 0, answered
    assert answered["pid"] > WORKERS, answered

    # Still serving: a new topic can be created and described, and SIGTERM stops it.
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic("after-race", 2, 1)], request_timeout=15)["after-race"].result(timeout=20)
    md = admin.list_topics("after-race", timeout=10)
    assert len(md.topics["after-race"].partitions) == 2
    assert runnel_broker.stop() == 0, runnel_broker.log_tail()
