"""Client quotas with Kafka's tool and a real client: kafka-configs.sh sets, describes and
deletes producer_byte_rate, consumer_byte_rate and request_percentage for a client id (and
a user); librdkafka with that client id is throttled (throttle_time_ms in the answers, reported to its
throttle callback) and slowed towards its rate, while a client without a quota is not;
bad quota configs get Kafka's errors. The measuring window is made short
(quota.window.num=3 of 1 s) so that the test is short; the only timing check is a lower
bound (throttled sends take at least some seconds), which a slow machine cannot break."""
import subprocess
import time

from confluent_kafka import Consumer, Producer

from conftest import Broker, unique_topic
from test_java_client import java_build  # noqa: F401  (session fixture: builds .cache/java)

RATE = 20_000  # bytes per second
RECORDS, RECORD_BYTES = 200, 1000


def send(bootstrap, topic, client_id, records=RECORDS):
    """Produces `records` records of RECORD_BYTES as fast as the broker lets it: (seconds it
    took, throttle times reported)."""
    throttles = []
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 4096,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=b"%05d" % i + b"x" * (RECORD_BYTES - 5))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0, "not every record was delivered"
    return time.monotonic() - started, throttles


def read(bootstrap, topic, client_id):
    """Reads the RECORDS records back in a group: (records read, throttle times reported)."""
    throttles = []
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": unique_topic("g"),
                  "auto.offset.reset": "earliest", "max.partition.fetch.bytes": 16384,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 120
    try:
        while got < RECORDS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
        # Throttle reports come with later answers too.
        for _ in range(4):
            c.poll(0.5)
    finally:
        c.close()
    return got, throttles


def test_kafka_configs_quotas_throttle_a_client_to_its_rate(tmp_path, java_build):  # noqa: F811
    b = Broker(tmp_path / "data", settings={"quota.window.num": "3", "quota.window.size.seconds": "1"}).start()
    classpath = f"{java_build / 'lib'}/*"

    def configs(*args, ok=True):
        cmd = ["java", "-XX:+UseSerialGC", "-cp", classpath, "kafka.admin.ConfigCommand",
               "--bootstrap-server", b.bootstrap, *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert (p.returncode == 0) == ok, f"{args}\n{p.stdout}\n{p.stderr[-3000:]}\n{b.log_tail()}"
        return p.stdout + p.stderr

    try:
        configs("--entity-type", "clients", "--entity-name", "slow", "--alter", "--add-config",
                f"producer_byte_rate={RATE},consumer_byte_rate={RATE}")
        described = configs("--entity-type", "clients", "--entity-name", "slow", "--describe")
        assert f"producer_byte_rate={RATE}" in described and f"consumer_byte_rate={RATE}" in described, described
        configs("--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
                "request_percentage=50,producer_byte_rate=1048576")
        described = configs("--entity-type", "users", "--entity-name", "alice", "--describe")
        assert "request_percentage=50" in described and "producer_byte_rate=1048576" in described, described
        refused = configs("--entity-type", "clients", "--entity-name", "slow", "--alter", "--add-config",
                          "producer_byte_rate=-5", ok=False)
        assert "must be positive" in refused or "InvalidRequestException" in refused, refused

        # 200 KB against 20 KB/s with 2 s of credit: about 8 s; unthrottled, well under one.
        topic = unique_topic("quota")
        took, throttles = send(b.bootstrap, topic, "slow")
        assert throttles and max(throttles) > 0, "no throttle reported"
        assert took >= 4, f"200 KB at a 20 KB/s quota took {took:.1f} s"
        print(f"200 KB at a 20 KB/s quota: {took:.1f} s, {len(throttles)} throttles up to {max(throttles):.2f} s")
        _, free = send(b.bootstrap, unique_topic("quota-free"), "fast")
        assert not [t for t in free if t > 0], f"a client without a quota was throttled: {free}"

        # request_percentage: a client allowed 0.001 % of a thread (10 us of handling a
        # second) is throttled after a few requests.
        configs("--entity-type", "clients", "--entity-name", "busy", "--alter", "--add-config",
                "request_percentage=0.001")
        _, busy = send(b.bootstrap, unique_topic("quota-busy"), "busy", records=20)
        assert busy and max(busy) > 0, "no throttle reported under request_percentage"

        got, throttles = read(b.bootstrap, topic, "slow")
        assert got == RECORDS
        assert throttles and max(throttles) > 0, "no consumer throttle reported"

        configs("--entity-type", "clients", "--entity-name", "slow", "--alter", "--delete-config",
                "producer_byte_rate,consumer_byte_rate")
        described = configs("--entity-type", "clients", "--entity-name", "slow", "--describe")
        assert "producer_byte_rate" not in described, described
        b.restart()
        described = configs("--entity-type", "users", "--entity-name", "alice", "--describe")
        assert "request_percentage=50" in described, f"quotas lost across a restart: {described}"
    finally:
        assert b.stop() == 0
