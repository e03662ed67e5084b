"""Transactions and exactly-once with real clients: the Java client's transactional producer
(commit, abort, the last stable offset, fencing) against one broker.

TxnCheck (tests/java/src/TxnCheck.java, built by tests/java/build.sh) runs the checks; its
class comment lists them.
"""

from conftest import unique_topic
from test_java_client import _clip, java_build, run_java  # noqa: F401  (session fixture: builds .cache/java)

TXN_CHECK_TIMEOUT_S = 300


def test_java_transactions_commit_abort_and_fence(broker, java_build):  # noqa: F811
    """A transactional producer's commits are read by read_committed consumers and its aborts
    are not; an open transaction holds the last stable offset; a second instance with the same
    transactional id fences the first, whose records are never read as committed; a
    consume-transform-produce loop commits its consumer's offsets with each transaction
    (sendOffsetsToTransaction), one round aborted and redone, and the output holds each input
    exactly once."""
    args = ["--bootstrap", broker.bootstrap, "--topic-prefix", unique_topic("txn"),
            "--timeout-s", TXN_CHECK_TIMEOUT_S - 30]
    p = run_java(java_build, "TxnCheck", args, TXN_CHECK_TIMEOUT_S)
    report = f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{_clip(p.stderr)}"
    if hasattr(broker, "log_tail"):
        report += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
    assert p.returncode == 0, f"TxnCheck exited with {p.returncode}\n{report}"
    assert "TxnCheck OK: commit/abort, last stable offset, fencing, consume-transform-produce" in p.stdout, report
