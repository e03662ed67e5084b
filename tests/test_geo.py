"""Geo-distribution pieces on a 3-broker cluster (`runnel dev --brokers 3`): socket buffer
settings on client and broker-to-broker connections."""

import re
import shutil
import socket
import subprocess

import pytest

from conftest import wait_for
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
            assert socket_buffers(c.port) == [(2 * BUFFER, 2 * BUFFER)]
        # Raft traffic: broker 0's listener at port + 1000, dialled by its two peers.
        raft = socket_buffers(c.port + 1000)
        assert len(raft) >= 2 and all(b == (2 * BUFFER, 2 * BUFFER) for b in raft), raft
    finally:
        c.close()
