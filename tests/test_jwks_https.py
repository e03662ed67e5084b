"""OAUTHBEARER with the JWKS at an https:// endpoint, as identity providers serve it: the
broker fetches it at start over TLS, trusting the ssl.truststore.* options of the
OAuthBearerLoginModule JAAS line (as Kafka does); librdkafka's token logs in; when the
provider rotates its key, a token signed with the new key (a key id the broker lacks)
makes the broker fetch the JWKS again, and then logs in; a broker that does not trust the
endpoint's certificate does not start, and says why."""
import http.server
import ssl
import subprocess
import threading
import time

from conftest import RUNNEL_BIN, Broker, free_port, unique_topic, wait_for
from test_security import JwtIssuer, login_error, produce


def idp_certificate(d):
    """A CA (idp-ca.crt) and the endpoint's certificate for 127.0.0.1 signed by it
    (idp-tls.crt, idp-tls.key)."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-keyout", str(d / "idp-ca.key"), "-out", str(d / "idp-ca.crt"), "-days", "2",
        "-subj", "/CN=idp test CA")
    run("req", *ec, "-keyout", str(d / "idp-tls.key"), "-out", str(d / "idp-tls.csr"), "-subj", "/CN=localhost")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", str(d / "idp-tls.csr"), "-CA", str(d / "idp-ca.crt"), "-CAkey", str(d / "idp-ca.key"),
        "-CAcreateserial", "-out", str(d / "idp-tls.crt"), "-days", "2", "-extfile", str(d / "ext.cnf"))


class JwksServer:
    """An HTTPS server on 127.0.0.1 answering GET /jwks.json with `self.body`."""

    def __init__(self, certs_dir, body):
        self.body, self.requests = body, 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                owner.requests += 1
                data = owner.body.encode()
                self.send_response(200 if self.path == "/jwks.json" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs_dir / "idp-tls.crt", certs_dir / "idp-tls.key")
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_jwks_over_https_is_fetched_trusted_and_refreshed(tmp_path):
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    idp_certificate(certs_dir)
    first_dir, second_dir = tmp_path / "k1", tmp_path / "k2"
    first_dir.mkdir()
    second_dir.mkdir()
    first, second = JwtIssuer(first_dir), JwtIssuer(second_dir)
    server = JwksServer(certs_dir, first.jwks.read_text())
    port = free_port()
    trust = f'ssl.truststore.type="PEM" ssl.truststore.location="{certs_dir / "idp-ca.crt"}"'
    settings = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": f"https://127.0.0.1:{server.port}/jwks.json",
        "sasl.oauthbearer.expected.audience": "kafka",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            f"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required {trust};"}
    b = Broker(tmp_path / "data", port=port, settings=settings).start()

    def conf(issuer, kid):
        now = int(time.time())
        token = issuer.token({"sub": "svc", "aud": "kafka", "iat": now, "exp": now + 600}, kid=kid)
        return {"bootstrap.servers": b.bootstrap, "security.protocol": "sasl_plaintext",
                "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": lambda _: (token, time.time() + 600, "svc")}
    try:
        assert server.requests == 1, "the JWKS was not fetched at start"
        topic = unique_topic("jwks-https")
        assert produce(conf(first, "k1"), topic, 5) == (0, [])

        # The provider rotates to a new key: the first token with its key id is refused and
        # makes the broker fetch again (at most every 10 s); then the new key logs in.
        server.body = second.jwks.read_text().replace('"k1"', '"k2"')

        def logs_in():
            return login_error(conf(second, "k2")) is None
        wait_for(logs_in, "a login with the rotated key", 60, b.log_tail)
        assert server.requests >= 2
        assert "JWKS refreshed" in b.log_path.read_text()
    finally:
        assert b.stop() == 0
        server.close()

    # Without the trust options, the endpoint's self-signed certificate is not trusted.
    server = JwksServer(certs_dir, first.jwks.read_text())
    try:
        untrusting = {**settings, "sasl.oauthbearer.jwks.endpoint.url": f"https://127.0.0.1:{server.port}/jwks.json",
                      "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                          "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"}
        args = [RUNNEL_BIN, "dev", "--port", str(free_port()), "--data-dir", str(tmp_path / "data2")]
        for k, v in untrusting.items():
            args += ["--set", f"{k}={v}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, "started without trusting the JWKS endpoint"
        assert "JWKS" in r.stderr and ("certificate" in r.stderr.lower() or "UnknownIssuer" in r.stderr), r.stderr[-2000:]
    finally:
        server.close()
