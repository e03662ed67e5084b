"""Geo-distribution pieces on a 3-broker cluster (`runnel dev --brokers 3`, broker i in zone
dev-i): socket buffer settings on client and broker-to-broker connections, and a topic's
leader preference followed, fallen back from and restored."""

import os
import re
import shutil
import signal
import socket
import subprocess

import pytest

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from conftest import unique_topic, wait_for, wait_for_topic
from test_cluster import DevCluster

BUFFER = 393216  # bytes; Linux reports twice what was asked (the rest is its bookkeeping)


def socket_buffers(port):
    """(receive, send) kernel buffer sizes of the established TCP connections whose local
    port is `port`, as `ss` shows them."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return [(int(rb), int(tb)) for rb, tb in re.findall(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)", out)]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_socket_buffer_settings_apply_to_client_and_raft_connections(tmp_path):
    c = DevCluster(tmp_path, settings=[f"socket.send.buffer.bytes={BUFFER}", f"socket.receive.buffer.bytes={BUFFER}"])
    try:
        with socket.create_connection(("127.0.0.1", c.port)):
            wait_for(lambda: socket_buffers(c.port), "the client connection", 10)
            # Ours, and the test harness's admin client's when it picked broker 0.
            client = socket_buffers(c.port)
            assert client and all(b == (2 * BUFFER, 2 * BUFFER) for b in client), client
        # Raft traffic: broker 0's listener at port + 1000, dialled by its two peers.
        raft = socket_buffers(c.port + 1000)
        assert len(raft) >= 2 and all(b == (2 * BUFFER, 2 * BUFFER) for b in raft), raft
    finally:
        c.close()


def test_leaders_follow_the_topics_leader_preference_fall_back_and_return(tmp_path):
    """leader.preference=zone:dev-2,zone:dev-0: every partition is led from zone dev-2 (its
    replica there placed first); with broker 2 paused, from dev-0 (the next listed), not
    dev-1; back in dev-2 once broker 2 returns; and a changed preference moves them."""
    c = DevCluster(tmp_path, settings=["leader.imbalance.check.interval.seconds=1"])
    try:
        topic, partitions = unique_topic("pref"), 3
        new = NewTopic(topic, partitions, 3, config={"leader.preference": "zone:dev-2,zone:dev-0"})
        c.admin.create_topics([new], operation_timeout=30)[topic].result(timeout=30)
        wait_for_topic(c.admin, topic, partitions)
        assert all(replicas[0] == 2 for _, replicas in c.seen_by(0, topic).values()), c.seen_by(0, topic)

        def led_by(broker):
            return lambda: set(c.leaders_seen_by(0, topic).values()) == {broker}

        wait_for(led_by(2), "every partition led from zone dev-2", 30, c.diagnostics)
        os.kill(c.pid(2), signal.SIGSTOP)
        try:
            wait_for(led_by(0), "leaders in zone dev-0 (the next preference) while dev-2 is down", 30,
                     c.diagnostics)
        finally:
            os.kill(c.pid(2), signal.SIGCONT)
        wait_for(led_by(2), "leaders back in zone dev-2", 30, c.diagnostics)

        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("leader.preference", "zone:dev-1", incremental_operation=AlterConfigOpType.SET)])
        c.admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        wait_for(led_by(1), "leaders moved to zone dev-1 after the change", 30, c.diagnostics)
    finally:
        c.close()


def test_a_bad_leader_preference_is_refused(tmp_path):
    c = DevCluster(tmp_path)
    try:
        topic = unique_topic("pref")
        new = NewTopic(topic, 1, 3, config={"leader.preference": "us-east1"})
        with pytest.raises(Exception, match="leader.preference"):
            c.admin.create_topics([new], operation_timeout=30)[topic].result(timeout=30)
    finally:
        c.close()
