"""franz-go (Go) client integration test.

Builds tests/go/clientcheck (kgo + kadm) with tests/go/build.sh and runs it against the
`broker` fixture. The program does all the checking itself: for every codec (none, gzip,
snappy, lz4, zstd) it creates a topic, produces with the idempotent producer and acks=all,
reads everything back and verifies keys, values, headers, timestamps and offsets, then
exercises ListOffsets, DeleteRecords, metadata, CreatePartitions, Describe/Incremental-
AlterConfigs and DeleteTopics. It exits 0 with a PASS line, or non-zero with a FAIL line
naming the step and what differed.

A build failure is a test failure, not a skip: Go and the module cache are expected here.
"""

import os
import subprocess

import pytest

from conftest import CACHE, ROOT, unique_topic

BUILD_SCRIPT = ROOT / "tests" / "go" / "build.sh"
CLIENTCHECK = CACHE / "go" / "clientcheck"
BUILD_TIMEOUT_S = 600  # a cold build downloads modules and compiles franz-go
RUN_TIMEOUT_S = 300  # the program bounds itself with --timeout below this


@pytest.fixture(scope="session")
def clientcheck_bin():
    """Path to the built clientcheck binary (built once per session)."""
    try:
        res = subprocess.run(
            [str(BUILD_SCRIPT)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"tests/go/build.sh did not finish in {BUILD_TIMEOUT_S}s\n{e.stdout or ''}{e.stderr or ''}")
    if res.returncode != 0:
        pytest.fail(f"tests/go/build.sh failed with exit code {res.returncode}\n{res.stdout}{res.stderr}")
    assert CLIENTCHECK.is_file(), f"build.sh succeeded but {CLIENTCHECK} is missing"
    return CLIENTCHECK


def test_franz_go_clientcheck(broker, clientcheck_bin):
    args = [
        str(clientcheck_bin),
        "--bootstrap", broker.bootstrap,
        "--topic-prefix", unique_topic("franz"),
        "--records", os.environ.get("RUNNEL_FRANZ_RECORDS", "3000"),
        "--timeout", f"{RUN_TIMEOUT_S - 30}s",
    ]
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"clientcheck did not exit within {RUN_TIMEOUT_S}s\n"
            f"--- stdout ---\n{e.stdout or ''}\n--- stderr ---\n{e.stderr or ''}"
            + _broker_log(broker)
        )
    # Shown by pytest for passing tests with -s / -rA, and always on failure.
    print(res.stdout)
    assert res.returncode == 0, (
        f"clientcheck exited with {res.returncode}: {' '.join(args)}\n"
        f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}" + _broker_log(broker)
    )
    lines = res.stdout.splitlines()
    assert lines and lines[-1].startswith("PASS "), f"exit 0 but no final PASS line:\n{res.stdout}"


def _broker_log(broker):
    """The tail of runnel's log when we started it (External brokers have none)."""
    tail = getattr(broker, "log_tail", None)
    return f"\n--- broker log (tail) ---\n{tail(80)}" if tail else ""
