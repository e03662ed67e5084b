"""The official Apache Kafka Java client (4.x) against the broker.

tests/java/build.sh fetches kafka-clients/kafka-tools from Maven Central into .cache/java/lib
and compiles tests/java/src/*.java into .cache/java/classes. ClientCheck then produces, consumes
and verifies records for every compression codec and exercises the Admin client (see the class
comment in tests/java/src/ClientCheck.java for the full list of checks).

Needs JDK 17+ and Maven on PATH; a missing toolchain or a failed build is a test failure.
"""

import subprocess

import pytest

from conftest import CACHE, ROOT, unique_topic

BUILD_SCRIPT = ROOT / "tests" / "java" / "build.sh"
BUILD_TIMEOUT_S = 900          # first run downloads ~45 MB of jars
CLIENT_CHECK_TIMEOUT_S = 600   # outer bound; ClientCheck's own watchdog fires a bit earlier

JAVA_OPTS = ["-XX:+UseSerialGC", "-Xmx768m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


def _text(b):
    """TimeoutExpired carries bytes even when text=True was asked for."""
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def _clip(s, keep=4000):
    """Head and tail of a long log: the first error is usually the interesting one."""
    if len(s) <= 2 * keep:
        return s
    return f"{s[:keep]}\n[... {len(s) - 2 * keep} characters left out ...]\n{s[-keep:]}"


def run_java(java_build_dir, main_class, args, timeout, opts=JAVA_OPTS):
    """Runs one of the compiled test programs (output captured); fails the test, with what
    the program printed, if it overruns `timeout`."""
    classpath = f"{java_build_dir / 'classes'}:{java_build_dir / 'lib'}/*"
    cmd = ["java", *opts, "-cp", classpath, main_class, *map(str, args)]
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, encoding="utf-8", errors="replace",
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{main_class} {' '.join(map(str, args))} timed out after {timeout}s\n"
                    f"--- stdout ---\n{_text(e.stdout)}\n--- stderr ---\n{_clip(_text(e.stderr))}")


@pytest.fixture(scope="session")
def java_build():
    """Runs tests/java/build.sh once per session (a no-op when already built)."""
    try:
        p = subprocess.run(["bash", str(BUILD_SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"tests/java/build.sh timed out after {BUILD_TIMEOUT_S}s\n{_text(e.stdout)}\n{_text(e.stderr)}")
    if p.returncode != 0:
        pytest.fail(f"tests/java/build.sh failed with exit code {p.returncode}\n"
                    f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}")
    return CACHE / "java"


def test_java_client_roundtrip_all_codecs(broker, java_build):
    """Proves the Java producer/consumer/Admin work end to end: for none, gzip, snappy, lz4 and
    zstd, 3000 records with null/empty/large values, duplicate and null headers and explicit
    timestamps come back byte-identical at the offsets the idempotent producer was given, and
    describeTopics, listOffsets (earliest/latest/timestamp/max-timestamp) and deleteTopics agree."""
    args = ["--bootstrap", broker.bootstrap, "--topic-prefix", unique_topic("javacheck"),
            "--records", "3000", "--timeout-s", CLIENT_CHECK_TIMEOUT_S - 30]
    p = run_java(java_build, "ClientCheck", args, CLIENT_CHECK_TIMEOUT_S)
    report = f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{_clip(p.stderr)}"
    if hasattr(broker, "log_tail"):
        report += f"\n--- broker log (tail) ---\n{broker.log_tail()}"
    assert p.returncode == 0, f"ClientCheck exited with {p.returncode}\n{report}"
    assert "ClientCheck OK: 5 codecs x 3000 records" in p.stdout, report
