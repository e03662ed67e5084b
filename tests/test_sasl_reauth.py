"""SASL re-authentication (KIP-368, connections.max.reauth.ms): SaslAuthenticate answers with
the session's lifetime; a client that logs in again on the same connection before it ends
goes on, as the same principal only; a request after the end closes the connection; and
librdkafka and the Java client, which log in again by themselves, produce across several
lifetimes without a failed send."""
import re
import socket
import struct
import time

from confluent_kafka import Producer

from conftest import Broker, free_port, unique_topic, wait_for_port
from test_java_client import java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
LIFETIME_MS = 1500


def reauth_broker(tmp_path):
    port = free_port()
    b = Broker(tmp_path / "data", port=port, settings={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": str(LIFETIME_MS)}).start()
    wait_for_port(port)
    return b


def logins_per_connection(b):
    """{client address: logins on that connection}, from the broker's log."""
    counts = {}
    for m in re.finditer(r"authenticated peer=(\S+)", b.log_path.read_text()):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


class Raw:
    """A client speaking the protocol by hand: v1 SaslHandshake and SaslAuthenticate, v1
    Metadata (all non-flexible)."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def request(self, key, version, body):
        self.correlation += 1
        header = struct.pack(">hhih", key, version, self.correlation, 1) + b"t"
        payload = header + body
        self.s.sendall(struct.pack(">i", len(payload)) + payload)
        size = self.s.recv(4, socket.MSG_WAITALL)
        if len(size) < 4:
            return None  # closed
        data = self.s.recv(struct.unpack(">i", size)[0], socket.MSG_WAITALL)
        assert struct.unpack(">i", data[:4])[0] == self.correlation
        return data[4:]

    def login(self, user, password):
        """(error code, session lifetime in ms) of a PLAIN login."""
        mech = b"PLAIN"
        hs = self.request(17, 1, struct.pack(">h", len(mech)) + mech)
        assert hs is not None and struct.unpack(">h", hs[:2])[0] == 0, hs
        token = b"\0" + user.encode() + b"\0" + password.encode()
        r = self.request(36, 1, struct.pack(">i", len(token)) + token)
        if r is None:
            return None
        error = struct.unpack(">h", r[:2])[0]
        n = struct.unpack(">h", r[2:4])[0]
        at = 4 + max(n, 0)
        auth_len = struct.unpack(">i", r[at:at + 4])[0]
        at += 4 + max(auth_len, 0)
        return error, struct.unpack(">q", r[at:at + 8])[0]

    def metadata(self):
        return self.request(3, 1, struct.pack(">i", -1))

    def closed(self):
        try:
            return self.s.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return True


def test_logins_expire_and_are_renewed_on_the_same_connection(tmp_path):
    b = reauth_broker(tmp_path)
    try:
        # Renewed in time, the connection goes on past the first lifetime.
        c = Raw(b.port)
        assert c.login("alice", "alice-secret") == (0, LIFETIME_MS)
        assert c.metadata() is not None
        time.sleep(LIFETIME_MS / 2000)
        assert c.login("alice", "alice-secret") == (0, LIFETIME_MS)
        time.sleep(LIFETIME_MS / 2000 + 0.3)
        assert c.metadata() is not None, "closed although the login was renewed"

        # Not renewed: the first request after the end closes the connection.
        late = Raw(b.port)
        assert late.login("alice", "alice-secret") == (0, LIFETIME_MS)
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        assert late.metadata() is None

        # Renewed as someone else: refused, and closed.
        other = Raw(b.port)
        assert other.login("alice", "alice-secret") == (0, LIFETIME_MS)
        error, _ = other.login("bob", "bob-secret")
        assert error == 58, error  # SASL_AUTHENTICATION_FAILED
        assert other.closed()
        log = b.log_path.read_text()
        assert "login expired" in log
    finally:
        assert b.stop() == 0


def test_real_clients_log_in_again_by_themselves(tmp_path, java_build):  # noqa: F811
    b = reauth_broker(tmp_path)
    try:
        topic = unique_topic("reauth")
        errors = []
        p = Producer({"bootstrap.servers": b.bootstrap, "security.protocol": "sasl_plaintext",
                      "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                      "acks": "all"})
        # About four lifetimes of sends on the same connections.
        for i in range(60):
            p.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
            p.poll(0)
            time.sleep(0.1)
        assert p.flush(30) == 0 and errors == [], errors
        assert max(logins_per_connection(b).values()) >= 4, logins_per_connection(b)

        # The Java client, sending one record at a time for a few lifetimes.
        props = tmp_path / "alice.properties"
        props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                         'username="alice" password="alice-secret";\n')
        before = logins_per_connection(b)
        started = time.monotonic()
        r = run_java(java_build, "TlsCheck", [b.bootstrap, props, unique_topic("java-reauth"), 1500], 300)
        took = time.monotonic() - started
        assert r.returncode == 0 and "TlsCheck OK: 1500 records" in r.stdout, f"{r.stdout}\n{r.stderr[-3000:]}"
        java = {peer: n for peer, n in logins_per_connection(b).items() if peer not in before}
        if took > 3 * LIFETIME_MS / 1000:
            assert max(java.values()) >= 2, f"the Java client did not log in again in {took:.1f} s: {java}"
    finally:
        assert b.stop() == 0
