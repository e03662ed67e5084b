"""Consumer-group integration tests with franz-go (kgo + kadm).

Members are processes of tests/go/groupcheck (built by tests/go/build.sh through the
`clientcheck_bin` fixture of test_franz_go.py, which builds both Go programs). The scenario
and its checks are shared with the librdkafka test (test_librdkafka_groups.py).
"""

import subprocess

import pytest

from conftest import CACHE, admin_client, create_topic, unique_topic
from test_franz_go import clientcheck_bin  # noqa: F401 - the session fixture that runs build.sh
from test_librdkafka_groups import MEMBER_MAX_SECONDS, Member, members, run_join_leave_crash_scenario  # noqa: F401

GROUPCHECK = CACHE / "go" / "groupcheck"


@pytest.fixture(scope="session")
def groupcheck_bin(clientcheck_bin):  # noqa: F811 - the imported fixture
    assert GROUPCHECK.is_file(), f"build.sh succeeded but {GROUPCHECK} is missing"
    return GROUPCHECK


def franz_member(binary, name, workdir, bootstrap, group, topic, balancer):
    m = Member(name, workdir, None)
    m.argv = [str(binary), "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--out", str(m.out),
              "--balancer", balancer, "--max-seconds", str(MEMBER_MAX_SECONDS)]
    return m


@pytest.mark.parametrize("balancer", ["range", "cooperative-sticky"])
def test_franz_go_group_join_leave_crash_no_record_skipped(broker, tmp_path, members, groupcheck_bin, balancer):
    """Three franz-go members share a 6-partition topic; one leaves cleanly (Close sends
    LeaveGroup), one is SIGKILLed, a new one joins. Proves, for franz-go's range and
    cooperative-sticky balancers (the latter rebalances incrementally, in two JoinGroup rounds),
    that no record is skipped: every produced value is processed, each partition's offsets
    0..end-1 are all seen, at least two members did work, and the committed offsets reach the
    log end."""
    topic, group = unique_topic("fgrp"), unique_topic("fg")

    def make(name):
        return franz_member(groupcheck_bin, name, tmp_path, broker.bootstrap, group, topic, balancer)

    run_join_leave_crash_scenario(broker.bootstrap, topic, group, make, members)


def test_franz_go_offset_delete(broker, groupcheck_bin):
    """OffsetDelete (API 47, via kadm.DeleteOffsets), which confluent-kafka Python does not
    expose: on an Empty group it removes one partition's commit and keeps the others; while a
    member is subscribed to the topic it is refused with GROUP_SUBSCRIBED_TO_TOPIC; for an
    unknown group the answer is GROUP_ID_NOT_FOUND."""
    topic, group = unique_topic("fdel"), unique_topic("fdg")
    create_topic(admin_client(broker.bootstrap), topic, 3)
    args = [str(groupcheck_bin), "--mode", "offsetdelete", "--bootstrap", broker.bootstrap,
            "--group", group, "--topic", topic]
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:  # subprocess.run kills the child on timeout
        pytest.fail(f"groupcheck --mode offsetdelete did not exit in 120s\n{e.stdout or ''}{e.stderr or ''}")
    print(res.stdout)
    assert res.returncode == 0 and res.stdout.splitlines()[-1:] == ["PASS offsetdelete"], (
        f"rc={res.returncode}\n--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr[-4000:]}")
