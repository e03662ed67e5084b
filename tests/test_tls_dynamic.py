"""Kafka's dynamic listener.name.<l>.ssl.* broker configs: IncrementalAlterConfigs (through
the Admin API) points a TLS listener at a new key store while a producer sends; new
connections get the new certificate and no send fails; a key store that does not load is
refused with INVALID_CONFIG and the old one stays; the new one is still served after a
restart, from the persisted dynamic config."""
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from conftest import Broker, admin_client, free_port, unique_topic, wait_for_port
from test_security import consume, openssl_self_signed, served_certificate


def test_a_listener_takes_a_new_key_store_through_incremental_alter_configs(tmp_path):
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    openssl_self_signed(certs_dir, "first")
    openssl_self_signed(certs_dir, "second")
    (certs_dir / "both.crt").write_text((certs_dir / "first.crt").read_text() + (certs_dir / "second.crt").read_text())
    plain, port = free_port(), free_port()
    b = Broker(tmp_path / "data", port=plain, settings={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{port}",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(certs_dir / "first.pem")}).start()
    admin = admin_client(b.bootstrap)

    def alter(location):
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("listener.name.ssl.ssl.keystore.location", str(location),
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    try:
        wait_for_port(port)
        first, second = ((certs_dir / f"{n}.crt").read_text() for n in ("first", "second"))
        assert served_certificate(port).split() == first.split()
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "ssl",
                "ssl.ca.location": str(certs_dir / "both.crt")}
        topic = unique_topic("dynamic-tls")
        errors = []
        p = Producer({**conf, "acks": "all", "message.timeout.ms": 30000})
        for i in range(200):
            p.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: errors.append(err) if err else None)
            p.poll(0.01)
            if i == 50:
                alter(certs_dir / "second.pem")
        assert p.flush(30) == 0 and errors == []
        assert served_certificate(port).split() == second.split(), "the new key store is not served"

        try:
            alter(certs_dir / "missing.pem")
            raise AssertionError("a key store that does not exist was accepted")
        except KafkaException as e:
            assert e.args[0].code() == 40, e  # INVALID_CONFIG
        assert served_certificate(port).split() == second.split()

        b.restart()
        wait_for_port(port)
        assert served_certificate(port).split() == second.split(), "the dynamic key store was lost on restart"
        assert len(consume({**conf, "ssl.ca.location": str(certs_dir / "second.crt")}, topic, 200)) == 200
    finally:
        assert b.stop() == 0
