"""Sarama (github.com/IBM/sarama, Go) client integration test.

Runs tests/go/saramacheck (built by tests/go/build.sh with the other Go programs) against the `broker` fixture.
The program does all the checking itself, with every client at protocol version 4.0, acks=all
and the idempotent producer (one in-flight request): it creates a 3-partition topic with
ClusterAdmin and sees it in ListTopics and DescribeTopics; for every codec (none, gzip, snappy,
lz4, zstd) it produces 300 records with keys, values and a header through a SyncProducer and
checks each got an offset (rising in send order, 0..n-1 per partition); it consumes them all in
a consumer group (range assignor, oldest offset, manual commit) and verifies every
key/value/header comes back exactly once in per-partition order; after the group is closed,
ListConsumerGroupOffsets must return committed offsets equal to the partition end offsets
(ListOffsets latest); finally it deletes the topic. It exits 0 with a PASS line, or non-zero
with a FAIL line naming the step and what differed.

A build failure is a test failure, not a skip: Go and the module cache are expected here.
"""

import subprocess

import pytest

from conftest import CACHE, unique_topic
from test_franz_go import clientcheck_bin  # noqa: F401  (session fixture: runs tests/go/build.sh, which builds saramacheck too)

SARAMACHECK = CACHE / "go" / "saramacheck"
RUN_TIMEOUT_S = 270  # the program bounds itself with --timeout below this


@pytest.fixture(scope="session")
def saramacheck_bin(clientcheck_bin):  # noqa: F811  (the imported fixture)
    assert SARAMACHECK.is_file(), f"tests/go/build.sh succeeded but {SARAMACHECK} is missing"
    return SARAMACHECK


def test_sarama_saramacheck(broker, saramacheck_bin):
    args = [
        str(saramacheck_bin),
        "--bootstrap", broker.bootstrap,
        "--topic-prefix", unique_topic("sarama"),
        "--timeout", f"{RUN_TIMEOUT_S - 30}s",
    ]
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"saramacheck did not exit within {RUN_TIMEOUT_S}s\n"
            f"--- stdout ---\n{e.stdout or ''}\n--- stderr ---\n{e.stderr or ''}"
            + _broker_log(broker)
        )
    # Shown by pytest for passing tests with -s / -rA, and always on failure.
    print(res.stdout)
    assert res.returncode == 0, (
        f"saramacheck exited with {res.returncode}: {' '.join(args)}\n"
        f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}" + _broker_log(broker)
    )
    lines = res.stdout.splitlines()
    assert lines and lines[-1].startswith("PASS saramacheck:"), f"exit 0 but no final PASS line:\n{res.stdout}"


def _broker_log(broker):
    """The tail of runnel's log when we started it (External brokers have none)."""
    tail = getattr(broker, "log_tail", None)
    return f"\n--- broker log (tail) ---\n{tail(80)}" if tail else ""
