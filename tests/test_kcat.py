"""kcat, librdkafka's command-line client, works against the broker unchanged: metadata
listing (-L), keyed produce (-P -K), and consume from the beginning to the end (-C -e)
with offsets, keys and values intact."""

import shutil
import subprocess

from confluent_kafka.admin import AdminClient, NewTopic

from conftest import unique_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(*args, stdin=None):
    assert KCAT, "kcat is not installed (scripts/test.sh installs it from Debian's packages)"
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=60, check=True)


def test_kcat_metadata_produce_consume(broker):
    bs = broker.bootstrap
    topic = unique_topic("kcat")
    admin = AdminClient({"bootstrap.servers": bs})  # must outlive its futures
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(timeout=30)

    meta = kcat("-b", bs, "-L", "-t", topic).stdout
    assert f'topic "{topic}" with 2 partitions' in meta, meta

    lines = [f"k{i}:value {i}" for i in range(300)]
    kcat("-b", bs, "-t", topic, "-P", "-K:", "-p", "1", "-X", "acks=all", stdin="\n".join(lines) + "\n")
    out = kcat("-b", bs, "-t", topic, "-C", "-p", "1", "-o", "beginning", "-e", "-f", "%o|%k|%s\n").stdout
    assert out.splitlines() == [f"{i}|k{i}|value {i}" for i in range(300)], out[:2000]
    # The other partition is empty: consuming it to the end yields nothing.
    assert kcat("-b", bs, "-t", topic, "-C", "-p", "0", "-o", "beginning", "-e").stdout == ""
