"""ACLs with real clients and Kafka's own tool: a broker with authorizer.class.name set to
StandardAuthorizer, SASL/PLAIN users admin (a super user), alice and bob. kafka-acls.sh
(AclCommand, logged in as admin) adds, lists and removes ACLs; the Java client and
librdkafka get Kafka's authorization errors for produce, consume and group join, and
Metadata hides the topics a user may not describe; a DENY beats an ALLOW; the ACLs outlive a
restart; without an authorizer, CreateAcls answers SECURITY_DISABLED."""
import subprocess

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, NewTopic,
                                   ResourcePatternType, ResourceType)

from conftest import Broker, admin_client, free_port, unique_topic, wait_for, wait_for_port
from test_java_client import java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def acl_broker(tmp_path, **extra):
    port = free_port()
    settings = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin", **extra}
    b = Broker(tmp_path / "data", port=port, settings=settings).start()
    wait_for_port(port)
    return b


def conf(b, user, **extra):
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def java_props(tmp_path, user):
    p = tmp_path / f"{user}.properties"
    p.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                 "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                 f'username="{user}" password="{USERS[user]}";\n')
    return p


def produce_error(c, topic):
    """The error librdkafka reports for one produced record (None when it was written)."""
    return delivery_error(Producer({**c, "message.timeout.ms": 10000, "enable.idempotence": False, "acks": "all"}),
                          topic, None)


def delivery_error(p, topic, partition):
    """The error of one record sent by `p` (None when it was written). librdkafka reports a
    refusal in the delivery report, or straight from produce() when its metadata already says
    the topic is not authorized: which one depends on whether that metadata arrived first."""
    got = []
    kwargs = {} if partition is None else {"partition": partition}
    try:
        p.produce(topic, value=b"from-librdkafka", on_delivery=lambda err, msg: got.append(err), **kwargs)
    except KafkaException as e:
        return e.args[0]
    p.flush(20)
    assert got, "no delivery report"
    return got[0]


def consume_error(c, topic, group):
    """The first error librdkafka's consumer in `group` reports before it reads a record
    (None when it read one)."""
    consumer = Consumer({**c, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                return m.error()
            return None
        return "no record and no error within 30 s"
    finally:
        consumer.close()


def test_kafka_acls_grant_and_deny_what_clients_may_do(tmp_path, java_build):  # noqa: F811
    b = acl_broker(tmp_path)
    classpath = f"{java_build / 'lib'}/*"
    admin_props = java_props(tmp_path, "admin")

    def acls(*args):
        cmd = ["java", "-XX:+UseSerialGC", "-cp", classpath, "org.apache.kafka.tools.AclCommand",
               "--bootstrap-server", b.bootstrap, "--command-config", str(admin_props), *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"{args}\n{p.stdout}\n{p.stderr[-3000:]}\n{b.log_tail()}"
        return p.stdout

    def java_check(user, topic, group):
        r = run_java(java_build, "AclCheck", [b.bootstrap, java_props(tmp_path, user), topic, group], 180)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
        return dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)

    try:
        topic, hidden, group = unique_topic("acl"), unique_topic("acl-hidden"), unique_topic("acl-group")
        admin = admin_client(b.bootstrap, **{k: v for k, v in conf(b, "admin").items() if k != "bootstrap.servers"})
        for t in (topic, hidden):
            admin.create_topics([NewTopic(t, 1, 1)])[t].result(timeout=30)

        # Nobody but the super user may do anything yet.
        assert produce_error(conf(b, "alice"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        acls("--add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
             "--topic", topic)
        acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group)
        listed = acls("--list", "--topic", topic)
        assert "User:alice" in listed and "WRITE" in listed and "READ" in listed, listed

        # alice: writes and reads her topic in her group; READ implies DESCRIBE, so Metadata
        # lists it, and only it.
        assert produce_error(conf(b, "alice"), topic) is None
        assert consume_error(conf(b, "alice"), topic, group) is None
        alice_admin = admin_client(b.bootstrap, **{k: v for k, v in conf(b, "alice").items()
                                                  if k != "bootstrap.servers"})
        seen = set(alice_admin.list_topics(timeout=10).topics)
        assert topic in seen and hidden not in seen, seen
        assert produce_error(conf(b, "alice"), hidden).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        other_group = consume_error(conf(b, "alice"), topic, unique_topic("not-hers"))
        assert other_group and other_group.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, other_group
        assert java_check("alice", topic, group) == {"produce": "OK", "consume": "OK"}

        # bob has no ACL at all: Metadata refuses him the topic before anything else.
        assert produce_error(conf(b, "bob"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert java_check("bob", topic, group) == {"produce": "TopicAuthorizationException",
                                                   "consume": "TopicAuthorizationException"}

        # A DENY beats the ALLOW.
        acls("--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
        acls("--add", "--deny-principal", "User:alice", "--operation", "Read", "--group", group)
        assert produce_error(conf(b, "alice"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        denied = consume_error(conf(b, "alice"), topic, group)
        assert denied and denied.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, denied
        assert java_check("alice", topic, group) == {"produce": "TopicAuthorizationException",
                                                     "consume": "GroupAuthorizationException"}

        # The ACLs are in the metadata log.
        b.restart()
        wait_for_port(b.port)
        listed = acls("--list")
        assert listed.count("User:alice") == 5, listed
        assert produce_error(conf(b, "alice"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        # Removing the DENYs gives alice her rights back; the Admin API lists and deletes too.
        acls("--remove", "--force", "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
        acls("--remove", "--force", "--deny-principal", "User:alice", "--operation", "Read", "--group", group)
        assert produce_error(conf(b, "alice"), topic) is None
        admin = admin_client(b.bootstrap, **{k: v for k, v in conf(b, "admin").items() if k != "bootstrap.servers"})
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        assert len(admin.describe_acls(everything).result(timeout=30)) == 3
        deleted = admin.delete_acls([everything])[everything].result(timeout=30)
        assert len(deleted) == 3, deleted
        assert acls("--list").strip() == "", "every ACL deleted"

        # alice may not change ACLs.
        alice_admin = admin_client(b.bootstrap, **{k: v for k, v in conf(b, "alice").items()
                                                  if k != "bootstrap.servers"})
        grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.ALL, AclPermissionType.ALLOW)
        try:
            alice_admin.create_acls([grant])[grant].result(timeout=30)
            raise AssertionError("alice created an ACL")
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, e
    finally:
        assert b.stop() == 0


def test_prefixed_acls_hosts_and_allow_everyone_if_no_acl_found(tmp_path):
    """A PREFIXED ALLOW covers every topic whose name starts with it; an ACL for another
    host does not apply; with allow.everyone.if.no.acl.found, a topic with no ACL is open
    and one with an ACL is not."""
    b = acl_broker(tmp_path, **{"allow.everyone.if.no.acl.found": "true"})
    try:
        admin = admin_client(b.bootstrap, **{k: v for k, v in conf(b, "admin").items() if k != "bootstrap.servers"})
        prefix = unique_topic("pay")
        mine, other, elsewhere = f"{prefix}-orders", unique_topic("open"), unique_topic("far")
        for t in (mine, other, elsewhere):
            admin.create_topics([NewTopic(t, 1, 1)])[t].result(timeout=30)
        bindings = [
            AclBinding(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, elsewhere, ResourcePatternType.LITERAL, "User:alice", "10.9.9.9",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
        ]
        for f in admin.create_acls(bindings).values():
            f.result(timeout=30)
        assert produce_error(conf(b, "alice"), mine) is None
        assert produce_error(conf(b, "bob"), mine).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_error(conf(b, "bob"), other) is None, "no ACL on it: open to everyone"
        assert produce_error(conf(b, "alice"), elsewhere).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        assert b.stop() == 0


def test_without_an_authorizer_acl_requests_answer_security_disabled(tmp_path):
    b = Broker(tmp_path / "data").start()
    try:
        admin = admin_client(b.bootstrap)
        grant = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
        try:
            admin.create_acls([grant])[grant].result(timeout=30)
            raise AssertionError("created an ACL without an authorizer")
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.SECURITY_DISABLED, e
        # And everything else works as before.
        topic = unique_topic("noauth")
        assert produce_error({"bootstrap.servers": b.bootstrap}, topic) is None
    finally:
        assert b.stop() == 0


def test_an_acl_made_through_one_broker_is_enforced_by_every_broker(tmp_path):
    """Three brokers, PLAINTEXT (every client is User:ANONYMOUS) and
    allow.everyone.if.no.acl.found, so that anyone may change ACLs until one is on the
    cluster. A DENY of WRITE made through broker 0 reaches the metadata log: every broker
    lists it, and then no longer lists the topic (it has an ACL now, and none allows
    DESCRIBE) and refuses produce to it."""
    from test_cluster import BROKERS, DevCluster

    c = DevCluster(tmp_path, settings=["authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                       "allow.everyone.if.no.acl.found=true"])
    try:
        topic = unique_topic("acl-cluster")
        c.admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=30)
        assert produce_error({"bootstrap.servers": c.bootstrap}, topic) is None
        deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                          AclOperation.WRITE, AclPermissionType.DENY)
        first = admin_client(f"127.0.0.1:{c.port}")
        first.create_acls([deny])[deny].result(timeout=30)
        for b in range(BROKERS):
            one = admin_client(f"127.0.0.1:{c.port + b}")
            everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                          AclOperation.ANY, AclPermissionType.ANY)
            # Applied on the broker that took it before the answer; on the others, soon after.
            wait_for(lambda: one.describe_acls(everything).result(timeout=30) == [deny], f"the ACL on broker {b}", 30)
            assert topic not in one.list_topics(timeout=10).topics
        for partition in range(3):
            p = Producer({"bootstrap.servers": c.bootstrap, "message.timeout.ms": 10000})
            err = delivery_error(p, topic, partition)
            assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (partition, err)
    finally:
        c.close()


def test_a_client_certificate_is_the_principal_as_the_mapping_rules_name_it(tmp_path):
    """`runnel dev --tls` requests client certificates; its client certificate's subject is
    CN=client. ssl.principal.mapping.rules turns that into User:CLIENT, a super user: with the
    certificate librdkafka may write, without it (User:ANONYMOUS) it may not, until an ACL
    made with the certificate allows ANONYMOUS."""
    from test_security import TlsBroker

    b = TlsBroker(tmp_path / "data", settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*)$/$1/U,DEFAULT",
        "super.users": "User:CLIENT"}).start()
    try:
        topic = unique_topic("cert-principal")
        assert produce_error(b.rdkafka(), topic) is None
        assert produce_error(b.rdkafka(client_cert=False), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        admin = admin_client(b.bootstrap, **{k: v for k, v in b.rdkafka().items() if k != "bootstrap.servers"})
        grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW)
        admin.create_acls([grant])[grant].result(timeout=30)
        assert produce_error(b.rdkafka(client_cert=False), topic) is None
    finally:
        assert b.stop() == 0
