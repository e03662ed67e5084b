"""Security with real clients: librdkafka (confluent-kafka) and the Java client over SSL,
with and without client certificates, PEM and PKCS12 stores; a plaintext or garbage client
on a TLS port gets a closed connection and the broker goes on; Metadata answers with the
addresses of the listener a client came through; a rewritten key store is served to new
connections without a restart while a producer keeps sending; `runnel dev --tls` with three
brokers replicates over TLS with mutual TLS between the brokers, whose Raft port refuses
peers without the cluster's certificate; SASL/PLAIN logins on SASL_PLAINTEXT and SASL_SSL."""
import pathlib
import re
import socket
import ssl
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from conftest import CACHE, ROOT, RUNNEL_BIN, Broker, admin_client, cluster_port, free_port, unique_topic, wait_for, wait_for_port
from test_java_client import java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)

STORE_PASSWORD = "runnel-dev"


class TlsBroker(Broker):
    """A `runnel dev --tls` broker (the throwaway CA lands in data/tls)."""

    def __init__(self, data_dir, settings=None):
        super().__init__(data_dir, settings=settings, args=["--tls"])

    @property
    def tls_dir(self):
        return self.data_dir / "tls"

    def rdkafka(self, client_cert=True, **extra):
        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": "ssl",
                "ssl.ca.location": str(self.tls_dir / "ca.pem")}
        if client_cert:
            conf["ssl.certificate.location"] = str(self.tls_dir / "client.crt")
            conf["ssl.key.location"] = str(self.tls_dir / "client.key")
        conf.update(extra)
        return conf


def produce(conf, topic, n, timeout_s=30):
    errors = []
    p = Producer({**conf, "acks": "all", "enable.idempotence": True, "message.timeout.ms": timeout_s * 1000})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    left = p.flush(timeout_s + 5)
    return left, errors


def consume(conf, topic, n, timeout_s=30):
    c = Consumer({**conf, "group.id": unique_topic("g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    values = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                values.append(m.value())
    finally:
        c.close()
    return values


def raw_exchange(port, payload, timeout_s=5.0):
    """Sends bytes on a plain TCP connection; returns what came back before the broker
    closed it (b"" for a close without a word), or None if it stayed open."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(payload)
        got = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return got
                got += chunk
        except socket.timeout:
            return None


API_VERSIONS_V0 = bytes.fromhex("0000000e" "0012" "0000" "00000007" "0004" "74657374")


def test_tls_listener_serves_librdkafka_with_and_without_client_certificates(tmp_path):
    """`runnel dev --tls` prints the client settings; librdkafka produces and consumes over TLS
    both with a client certificate (mutual TLS) and without one (client auth is
    `requested`); a plaintext Kafka request and garbage bytes on the TLS port get a closed
    connection, logged once each, and the broker serves TLS clients afterwards."""
    b = TlsBroker(tmp_path / "data").start()
    try:
        out = b.log_path.read_text()
        assert "security.protocol=SSL" in out and "ssl.ca.location=" in out, out[:2000]
        topic = unique_topic("tls")
        for conf in (b.rdkafka(client_cert=False), b.rdkafka(client_cert=True)):
            left, errors = produce(conf, topic, 50)
            assert (left, errors) == (0, []), b.log_tail()
        assert consume(b.rdkafka(), topic, 100) == [b"v%d" % (i % 50) for i in range(100)]

        reply = raw_exchange(b.port, API_VERSIONS_V0)
        assert reply is not None and b"\x00\x12" not in reply[4:8], f"plaintext request answered: {reply!r}"
        assert raw_exchange(b.port, b"\x16\x03\x01\x00\x05hello-not-tls" * 3) is not None
        wait_for(lambda: b.log_path.read_text().count("TLS handshake failed") >= 2, "handshake failures logged", 10)
        left, errors = produce(b.rdkafka(), topic, 10)
        assert (left, errors) == (0, []), b.log_tail()
    finally:
        assert b.stop() == 0


def test_required_client_auth_refuses_clients_without_a_trusted_certificate(tmp_path):
    """ssl.client.auth=required: a client without a certificate, and one whose certificate
    another CA signed, cannot produce; the one with the cluster CA's certificate can."""
    b = TlsBroker(tmp_path / "data", settings={"ssl.client.auth": "required"}).start()
    other = tmp_path / "other"
    other.mkdir()
    openssl_self_signed(other, "intruder")
    try:
        topic = unique_topic("mtls")
        assert produce(b.rdkafka(), topic, 5) == (0, [])
        for conf in (b.rdkafka(client_cert=False),
                     b.rdkafka(**{"ssl.certificate.location": str(other / "intruder.crt"),
                                  "ssl.key.location": str(other / "intruder.key")})):
            left, errors = produce(conf, topic, 1, timeout_s=5)
            assert left == 1 or errors, "a client without a trusted certificate produced"
        assert consume(b.rdkafka(), topic, 5) == [b"v%d" % i for i in range(5)]
    finally:
        assert b.stop() == 0


def openssl_self_signed(dir_, name, cn="localhost"):
    """A self-signed certificate for localhost/127.0.0.1 with an unencrypted PKCS#8 key."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(dir_ / f"{name}.key"), "-out", str(dir_ / f"{name}.crt"), "-days", "2",
                    "-subj", f"/CN={cn}", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    (dir_ / f"{name}.pem").write_text((dir_ / f"{name}.key").read_text() + (dir_ / f"{name}.crt").read_text())


def served_certificate(port):
    """The subject CN and issuer of the certificate the broker presents now."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            der = s.getpeercert(binary_form=True)
    return ssl.DER_cert_to_PEM_cert(der)


def test_metadata_answers_with_the_addresses_of_the_listener_used(tmp_path):
    """One broker with a PLAINTEXT and an SSL listener (and an advertised name for the SSL
    one): a client that came in through either is given that listener's address."""
    plain, tls_port = free_port(), free_port()
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    openssl_self_signed(certs_dir, "broker")
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls_port}",
        "advertised.listeners": f"SSL://localhost:{tls_port}",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(certs_dir / "broker.pem"),
    }
    b = Broker(tmp_path / "data", port=plain, settings=settings).start()
    try:
        wait_for_port(tls_port)
        md = admin_client(b.bootstrap).list_topics(timeout=10)
        assert [(x.host, x.port) for x in md.brokers.values()] == [("127.0.0.1", plain)]
        tls_conf = {"bootstrap.servers": f"127.0.0.1:{tls_port}", "security.protocol": "ssl",
                    "ssl.ca.location": str(certs_dir / "broker.crt")}
        md = admin_client(tls_conf["bootstrap.servers"], **{k: v for k, v in tls_conf.items()
                                                            if k != "bootstrap.servers"}).list_topics(timeout=10)
        assert [(x.host, x.port) for x in md.brokers.values()] == [("localhost", tls_port)]
        topic = unique_topic("two-listeners")
        assert produce(tls_conf, topic, 5) == (0, [])
        assert consume({"bootstrap.servers": b.bootstrap}, topic, 5) == [b"v%d" % i for i in range(5)]
    finally:
        assert b.stop() == 0


def test_a_rewritten_key_store_is_served_without_a_restart(tmp_path):
    """The broker's PEM key store is replaced (a certificate from a second CA) while a
    librdkafka producer sends over TLS; new connections get the new certificate, and no
    send fails."""
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    openssl_self_signed(certs_dir, "first")
    openssl_self_signed(certs_dir, "second")
    (certs_dir / "both.crt").write_text((certs_dir / "first.crt").read_text() + (certs_dir / "second.crt").read_text())
    live = certs_dir / "live.pem"
    live.write_text((certs_dir / "first.pem").read_text())
    port = free_port()
    b = Broker(tmp_path / "data", port=port, settings={
        "listeners": f"SSL://127.0.0.1:{port}", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(live),
        "ssl.reload.check.interval.ms": "200"}).start()
    try:
        conf = {"bootstrap.servers": b.bootstrap, "security.protocol": "ssl",
                "ssl.ca.location": str(certs_dir / "both.crt")}
        first = (certs_dir / "first.crt").read_text()
        second = (certs_dir / "second.crt").read_text()
        assert served_certificate(port).split() == first.split()
        topic = unique_topic("rotate")
        errors = []
        p = Producer({**conf, "acks": "all", "message.timeout.ms": 30000})
        sent = 0
        for i in range(200):
            p.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: errors.append(err) if err else None)
            sent += 1
            p.poll(0.01)
            if i == 50:
                tmp = certs_dir / "live.tmp"
                tmp.write_text((certs_dir / "second.pem").read_text())
                tmp.rename(live)
        assert p.flush(30) == 0 and errors == []
        wait_for(lambda: served_certificate(port).split() == second.split(), "the new certificate served", 10,
                 b.log_tail)
        assert "TLS key or trust store changed" in b.log_path.read_text()
        # A second producer (a new connection) trusts only the new CA.
        assert produce({**conf, "ssl.ca.location": str(certs_dir / "second.crt")}, topic, 5) == (0, [])
        assert len(consume(conf, topic, sent + 5)) == sent + 5
    finally:
        assert b.stop() == 0


def test_java_client_over_tls_with_pem_and_pkcs12_stores(tmp_path, java_build):  # noqa: F811
    """The Java client: a PEM trust store without a client certificate; then, with
    ssl.client.auth=required, a PKCS12 trust store made by keytool and the PKCS12 client key
    store `runnel dev --tls` wrote. Both produce, read back and see the broker's TLS address."""
    b = TlsBroker(tmp_path / "data", settings={"ssl.client.auth": "required"}).start()
    try:
        tls = b.tls_dir
        truststore = tmp_path / "truststore.p12"
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "runnel-ca", "-file", str(tls / "ca.pem"),
                        "-keystore", str(truststore), "-storetype", "PKCS12", "-storepass", "trust-me"],
                       check=True, capture_output=True)
        pem = tmp_path / "pem.properties"
        pem.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                       f"ssl.truststore.location={tls / 'ca.pem'}\n"
                       "ssl.keystore.type=PEM\n"
                       f"ssl.keystore.location={tls / 'client.pem'}\n")
        p12 = tmp_path / "p12.properties"
        p12.write_text("security.protocol=SSL\nssl.truststore.type=PKCS12\n"
                       f"ssl.truststore.location={truststore}\nssl.truststore.password=trust-me\n"
                       f"ssl.keystore.type=PKCS12\nssl.keystore.location={tls / 'client.p12'}\n"
                       f"ssl.keystore.password={STORE_PASSWORD}\n")
        for props in (pem, p12):
            r = run_java(java_build, "TlsCheck", [b.bootstrap, props, unique_topic("java-tls"), 200], 300)
            report = f"{props.name}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr[-4000:]}\n{b.log_tail()}"
            assert r.returncode == 0, report
            assert f"TlsCheck OK: 200 records, nodes=127.0.0.1:{b.port}" in r.stdout, report
    finally:
        assert b.stop() == 0


def forged_heartbeat_frame(group=0, to=1, sender=2, term=10**6, commit=10**9):
    """A Raft transport frame with one MsgHeartbeat whose commit index is far past any log
    end (raft-rs stops a broker that applies one)."""
    def varint(n):
        out = b""
        while True:
            b = n & 0x7F
            n >>= 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out

    def field(num, value):
        return varint(num << 3) + varint(value)
    msg = field(1, 8) + field(2, to) + field(3, sender) + field(4, term) + field(8, commit)
    body = group.to_bytes(8, "big") + len(msg).to_bytes(4, "big") + msg
    return len(body).to_bytes(4, "big") + body


def tls_handshake(port, ca, cert=None, key=None):
    """Connects with TLS to 127.0.0.1:port; returns None when the server took us, else the
    error. With TLS 1.3 a refused client certificate shows on the first read."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert:
        ctx.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.settimeout(1.0)
                try:
                    if s.recv(1) == b"":
                        return "closed"
                except socket.timeout:
                    return None
                return None
    except (ssl.SSLError, OSError) as e:
        return repr(e)


def test_dev_tls_cluster_of_three_replicates_over_tls(tmp_path):
    """`runnel dev --brokers 3 --tls`: every broker listens with TLS only and the brokers talk
    to each other over mutual TLS; an RF3 topic takes acks=all writes from librdkafka and
    reads them back, and Metadata lists the three TLS addresses. On the internal (Raft) port
    a client without a certificate, or with one from another CA, is refused, and a forged
    heartbeat sent in plaintext changes nothing: the brokers keep running and serving."""
    port = cluster_port(3)
    data = tmp_path / "cluster"
    log = open(tmp_path / "cluster.log", "w")
    proc = subprocess.Popen([RUNNEL_BIN, "dev", "--brokers", "3", "--tls", "--port", str(port),
                             "--data-dir", str(data)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for i in range(3):
            wait_for_port(port + i, proc=proc)
        tls = data / "tls"
        conf = {"bootstrap.servers": ",".join(f"127.0.0.1:{port + i}" for i in range(3)),
                "security.protocol": "ssl", "ssl.ca.location": str(tls / "ca.pem")}
        admin = admin_client(conf["bootstrap.servers"], **{k: v for k, v in conf.items() if k != "bootstrap.servers"})

        def brokers():
            try:
                return sorted((x.host, x.port) for x in admin.list_topics(timeout=5).brokers.values())
            except KafkaException:
                return []
        wait_for(lambda: brokers() == [("127.0.0.1", port + i) for i in range(3)], "three TLS brokers", 60,
                 lambda: pathlib.Path(log.name).read_text()[-3000:])
        topic = unique_topic("tls-rf3")
        for f in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)]).values():
            f.result(30)
        assert produce(conf, topic, 300) == (0, [])
        got = consume(conf, topic, 300)
        assert sorted(got) == sorted(b"v%d" % i for i in range(300))
        assert re.search(r"security.protocol=ssl", pathlib.Path(log.name).read_text())

        raft = port + 1000
        other = tmp_path / "other"
        other.mkdir()
        openssl_self_signed(other, "intruder", cn="127.0.0.1")
        assert tls_handshake(raft, tls / "ca.pem") is not None, "no client certificate got in"
        assert tls_handshake(raft, tls / "ca.pem", other / "intruder.crt", other / "intruder.key") is not None
        assert tls_handshake(raft, tls / "ca.pem", tls / "broker.crt", tls / "broker.key") is None
        with socket.create_connection(("127.0.0.1", raft), timeout=5) as s:
            s.sendall(forged_heartbeat_frame())
            s.settimeout(5)
            try:
                s.recv(100)
            except (socket.timeout, ConnectionResetError):
                pass
        wait_for(lambda: pathlib.Path(log.name).read_text().count("peer TLS handshake failed") >= 3,
                 "the refused peers logged", 10, lambda: pathlib.Path(log.name).read_text()[-3000:])
        assert proc.poll() is None
        assert "exited" not in pathlib.Path(log.name).read_text()
        assert produce(conf, topic, 30) == (0, [])
        assert len(consume(conf, topic, 330)) == 330
    finally:
        proc.terminate()
        proc.wait(timeout=30)


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob \\"quoted\\" secret";')


def sasl_broker(tmp_path):
    """One broker with a SASL_PLAINTEXT and a SASL_SSL listener (a self-signed certificate
    in tmp_path/certs); PLAIN with the users alice and bob. Returns (broker, SASL_SSL port,
    certificates directory)."""
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    openssl_self_signed(certs_dir, "broker")
    plain, tls_port = free_port(), free_port()
    settings = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{tls_port}",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs_dir / "broker.pem")}
    b = Broker(tmp_path / "data", port=plain, settings=settings).start()
    wait_for_port(tls_port)
    return b, tls_port, certs_dir


def sasl_conf(bootstrap, user, password, protocol="sasl_plaintext", **extra):
    return {"bootstrap.servers": bootstrap, "security.protocol": protocol, "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": password, **extra}


def login_error(conf):
    """What librdkafka reports when it cannot log in (None if it produced)."""
    errors = []
    p = Producer({**conf, "message.timeout.ms": 5000, "error_cb": lambda e: errors.append(e)})
    p.produce(unique_topic("denied"), value=b"x")
    left = p.flush(10)
    auth = [e for e in errors if e.code() == -169]  # _AUTHENTICATION
    return auth[0].str() if auth else (None if left == 0 else f"{left} left, errors {errors}")


def frame(key, version, correlation, body, client_id=b"t"):
    payload = (key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True) + correlation.to_bytes(4, "big")
               + len(client_id).to_bytes(2, "big") + client_id + body)
    return len(payload).to_bytes(4, "big") + payload


def test_sasl_plain_logs_in_the_jaas_users_and_nobody_else(tmp_path):
    """SASL/PLAIN on SASL_PLAINTEXT and SASL_SSL listeners, users from the listener's JAAS
    configuration: librdkafka logs in as alice (and as bob, whose password has quotes) and
    produces and consumes, and kcat reads the topic over SASL_SSL; a wrong password and an unknown user get the same authentication
    failure; a request before the login, an unknown mechanism and an oversized first frame
    close the connection; passwords never reach the log."""
    b, tls_port, certs_dir = sasl_broker(tmp_path)
    try:
        topic = unique_topic("sasl")
        alice = sasl_conf(b.bootstrap, "alice", "alice-secret")
        assert produce(alice, topic, 20) == (0, [])
        bob_tls = sasl_conf(f"127.0.0.1:{tls_port}", "bob", 'bob "quoted" secret', "sasl_ssl",
                            **{"ssl.ca.location": str(certs_dir / "broker.crt")})
        assert produce(bob_tls, topic, 20) == (0, [])
        assert len(consume(alice, topic, 40)) == 40
        kcat = subprocess.run(["kcat", "-b", f"127.0.0.1:{tls_port}", "-X", "security.protocol=SASL_SSL",
                               "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice",
                               "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={certs_dir / 'broker.crt'}",
                               "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True, text=True,
                              timeout=60)
        assert kcat.returncode == 0 and kcat.stdout.split().count("v19") == 2, kcat.stdout + kcat.stderr

        wrong = login_error(sasl_conf(b.bootstrap, "alice", "nope"))
        unknown = login_error(sasl_conf(b.bootstrap, "mallory", "alice-secret"))
        assert wrong and "Invalid username or password" in wrong, wrong
        assert unknown and "Invalid username or password" in unknown, unknown

        # Metadata before any login: closed without an answer.
        assert raw_exchange(b.port, frame(3, 0, 1, (0).to_bytes(4, "big"))) == b""
        # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM (33) listing PLAIN, then closed.
        mech = b"SCRAM-SHA-1"
        reply = raw_exchange(b.port, frame(17, 1, 7, len(mech).to_bytes(2, "big") + mech))
        assert reply is not None and reply[4:8] == (7).to_bytes(4, "big"), reply
        assert int.from_bytes(reply[8:10], "big") == 33 and b"PLAIN" in reply[10:], reply
        # A first frame past sasl.server.max.receive.size (512 KiB): closed before it is read.
        assert raw_exchange(b.port, (600_000).to_bytes(4, "big") + b"\0" * 100) == b""
        log = b.log_path.read_text()
        assert "principal=User:alice" in log and "principal=User:bob" in log
        assert "alice-secret" not in log and "quoted" not in log
    finally:
        assert b.stop() == 0


def test_java_client_logs_in_with_sasl_plain_over_tls(tmp_path, java_build):  # noqa: F811
    """The Java client with security.protocol=SASL_SSL and sasl.mechanism=PLAIN (its JAAS
    line) produces and reads back; with a wrong password it fails with an authentication
    error."""
    b, tls_port, certs_dir = sasl_broker(tmp_path)
    try:
        def props(password):
            p = tmp_path / f"sasl-{password}.properties"
            p.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                         f'username="alice" password="{password}";\n'
                         f"ssl.truststore.type=PEM\nssl.truststore.location={certs_dir / 'broker.crt'}\n")
            return p
        bootstrap = f"127.0.0.1:{tls_port}"
        r = run_java(java_build, "TlsCheck", [bootstrap, props("alice-secret"), unique_topic("java-sasl"), 100], 300)
        report = f"--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr[-4000:]}\n{b.log_tail()}"
        assert r.returncode == 0 and f"TlsCheck OK: 100 records, nodes=127.0.0.1:{tls_port}" in r.stdout, report
        r = run_java(java_build, "TlsCheck", [bootstrap, props("wrong"), unique_topic("java-sasl"), 1], 300)
        assert r.returncode != 0 and "SaslAuthenticationException" in r.stdout + r.stderr, r.stderr[-3000:]
    finally:
        assert b.stop() == 0


def test_scram_users_made_with_kafka_configs_log_in(tmp_path, java_build):  # noqa: F811
    """SCRAM-SHA-256 and SCRAM-SHA-512 with credentials in the metadata log: kafka-configs.sh
    (through the PLAINTEXT listener) adds alice's credentials and describes them; librdkafka
    logs in with both mechanisms on SASL_PLAINTEXT and the Java client with SCRAM-SHA-512 on
    SASL_SSL, franz-go with SCRAM-SHA-256 on SASL_SSL (and a wrong password refused); a
    wrong password and an unknown user fail alike; after kafka-configs.sh
    deletes the SHA-256 credential, that login fails and the SHA-512 one still works; the
    credentials outlive a restart."""
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    openssl_self_signed(certs_dir, "broker")
    admin_port, sasl_port, tls_port = free_port(), free_port(), free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{admin_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                             f"SASL_SSL://127.0.0.1:{tls_port}",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs_dir / "broker.pem")}
    b = Broker(tmp_path / "data", port=admin_port, settings=settings).start()
    classpath = f"{java_build / 'lib'}/*"

    def configs(*args):
        cmd = ["java", "-XX:+UseSerialGC", "-cp", classpath, "kafka.admin.ConfigCommand",
               "--bootstrap-server", b.bootstrap, "--entity-type", "users", *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"{args}\n{p.stdout}\n{p.stderr[-3000:]}\n{b.log_tail()}"
        return p.stdout

    def scram(mechanism, user, password):
        return {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "sasl_plaintext",
                "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
    try:
        wait_for_port(sasl_port)
        wait_for_port(tls_port)
        configs("--entity-name", "alice", "--alter", "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=alice-256],SCRAM-SHA-512=[password=alice-512]")
        described = configs("--entity-name", "alice", "--describe")
        assert "SCRAM-SHA-256=iterations=8192" in described and "SCRAM-SHA-512=iterations=4096" in described, described

        topic = unique_topic("scram")
        assert produce(scram("SCRAM-SHA-256", "alice", "alice-256"), topic, 10) == (0, [])
        assert produce(scram("SCRAM-SHA-512", "alice", "alice-512"), topic, 10) == (0, [])
        for bad in (scram("SCRAM-SHA-512", "alice", "alice-256"), scram("SCRAM-SHA-512", "mallory", "alice-512")):
            err = login_error(bad)
            assert err and "invalid credentials" in err, err

        props = tmp_path / "scram.properties"
        props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                         'username="alice" password="alice-512";\n'
                         f"ssl.truststore.type=PEM\nssl.truststore.location={certs_dir / 'broker.crt'}\n")
        r = run_java(java_build, "TlsCheck", [f"127.0.0.1:{tls_port}", props, unique_topic("java-scram"), 50], 300)
        assert r.returncode == 0 and "TlsCheck OK: 50 records" in r.stdout, f"{r.stdout}\n{r.stderr[-4000:]}"

        seccheck = CACHE / "go" / "seccheck"
        build = subprocess.run(["bash", str(ROOT / "tests" / "go" / "build.sh")], capture_output=True, text=True,
                               timeout=600)
        assert build.returncode == 0, build.stdout + build.stderr
        go = [str(seccheck), "--bootstrap", f"127.0.0.1:{tls_port}", "--ca", str(certs_dir / "broker.crt"),
              "--mechanism", "SCRAM-SHA-256", "--user", "alice", "--timeout", "60s"]
        r = subprocess.run(go + ["--password", "alice-256", "--topic", unique_topic("franz-scram"), "--records", "50"],
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
        r = subprocess.run(go + ["--password", "wrong", "--topic", "x", "--expect-auth-failure"],
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr

        configs("--entity-name", "alice", "--alter", "--delete-config", "SCRAM-SHA-256")
        assert "invalid credentials" in (login_error(scram("SCRAM-SHA-256", "alice", "alice-256")) or "")
        b.restart()
        wait_for_port(sasl_port)
        described = configs("--entity-name", "alice", "--describe")
        assert "SCRAM-SHA-256" not in described and "SCRAM-SHA-512=iterations=4096" in described, described
        assert produce(scram("SCRAM-SHA-512", "alice", "alice-512"), topic, 10) == (0, [])
        assert len(consume(scram("SCRAM-SHA-512", "alice", "alice-512"), topic, 30)) == 30
        assert "alice-512" not in b.log_path.read_text()
    finally:
        assert b.stop() == 0


def b64url(b):
    import base64
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class JwtIssuer:
    """An RSA key made with openssl, its JWKS file, and RS256 tokens signed with it."""

    def __init__(self, dir_):
        self.key = dir_ / "idp.key"
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                        "-out", str(self.key)], check=True, capture_output=True)
        modulus = subprocess.run(["openssl", "rsa", "-in", str(self.key), "-noout", "-modulus"], check=True,
                                 capture_output=True, text=True).stdout.strip().split("=", 1)[1]
        n = bytes.fromhex(modulus)
        self.jwks = dir_ / "jwks.json"
        self.jwks.write_text('{"keys":[{"kty":"RSA","kid":"k1","use":"sig","alg":"RS256",'
                             f'"n":"{b64url(n)}","e":"{b64url((65537).to_bytes(3, "big"))}"}}]}}')

    def token(self, claims, kid="k1"):
        import json
        header = b64url(json.dumps({"alg": "RS256", "kid": kid, "typ": "JWT"}).encode())
        payload = b64url(json.dumps(claims).encode())
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                             input=f"{header}.{payload}".encode(), check=True, capture_output=True).stdout
        return f"{header}.{payload}.{b64url(sig)}"


def test_oauthbearer_tokens_are_checked_against_the_jwks(tmp_path):
    """SASL/OAUTHBEARER with a JWKS file: librdkafka's token (RS256, our issuer and audience,
    not expired) logs in as its `sub` and produces and consumes; an expired token, one for
    another audience and one signed by another key are refused, and the reason is logged."""
    idp = JwtIssuer(tmp_path)
    port = free_port()
    b = Broker(tmp_path / "data", port=port, settings={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{idp.jwks}",
        "sasl.oauthbearer.expected.issuer": "https://idp.example",
        "sasl.oauthbearer.expected.audience": "kafka",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"}).start()

    def conf(claims, issuer=idp):
        now = int(time.time())
        claims = {"iss": "https://idp.example", "aud": "kafka", "iat": now, "exp": now + 600, **claims}
        token = issuer.token(claims)
        return {"bootstrap.servers": b.bootstrap, "security.protocol": "sasl_plaintext",
                "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": lambda _: (token, time.time() + 600, "svc")}
    try:
        topic = unique_topic("oauth")
        assert produce(conf({"sub": "svc-orders"}), topic, 20) == (0, [])
        assert len(consume(conf({"sub": "svc-orders"}), topic, 20)) == 20
        other_key = tmp_path / "other"
        other_key.mkdir()
        for bad in (conf({"sub": "svc", "exp": int(time.time()) - 3600}), conf({"sub": "svc", "aud": "billing"}),
                    conf({"sub": "svc"}, issuer=JwtIssuer(other_key))):
            err = login_error(bad)
            assert err and "not valid" in err, err
        log = b.log_path.read_text()
        assert "principal=User:svc-orders" in log
        for why in ("the token has expired", "wrong audience", "no key of the JWKS verifies"):
            assert why in log, why
    finally:
        assert b.stop() == 0
