"""`runnel verify` against a broker that is killed (kill -9) and restarted while the workload
runs: every acknowledged value is read back, once, at the offset it was acknowledged at, and
in order. Then the checker is handed the recorded history with a planted loss and a planted
duplicate, and must fail loudly on each.
"""

import json
import subprocess
import time

from conftest import RUNNEL_BIN

DURATION_S = 15
KILLS = 3


def verify(*args, timeout=180):
    return subprocess.run([RUNNEL_BIN, "verify", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_no_anomaly_across_kill9_and_planted_anomalies_are_caught(runnel_broker, tmp_path):
    b = runnel_broker
    report, history = tmp_path / "report.json", tmp_path / "history.json"
    args = ["--bootstrap", b.bootstrap, "--duration", DURATION_S, "--partitions", 3, "--producers", 2,
            "--consumers", 2, "--rate", 100, "--json", report, "--history", history]
    run = subprocess.Popen([RUNNEL_BIN, "verify", *map(str, args)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        for _ in range(KILLS):
            time.sleep(DURATION_S / (KILLS + 1))
            b.kill9()
            time.sleep(0.5)
            b.start()
        out, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, f"verify exited {run.returncode}\n{out}\n{err}\n{b.log_tail()}"
    assert "no anomalies" in out, out
    r = json.loads(report.read_text())
    assert r["counts"] == {} and r["sends_failed"] == 0, r
    # Two producers at 100 requests/s of 5 values for 15 s: the outages cost retries, not
    # values (requests are retried until answered).
    assert r["sends_ok"] >= 10000, r
    assert r["records_read"] >= 2 * r["sends_ok"], "live consumers and the final reader read everything"

    h = json.loads(history.read_text())
    final = [p for p in h["polls"] if p["consumer"] in h["final_readers"]]
    assert final, "the history has the final read"

    # Planted loss: an acknowledged value disappears from the final read.
    lost = json.loads(history.read_text())
    acked = next(s for s in lost["sends"] if s["outcome"] == "Ok")
    for p in lost["polls"]:
        p["records"] = [rec for rec in p["records"] if rec[2] != acked["value"]]
    (tmp_path / "lost.json").write_text(json.dumps(lost))
    p = verify("--check-history", tmp_path / "lost.json")
    assert p.returncode != 0 and "lost-write: 1" in p.stdout, p.stdout + p.stderr

    # Planted duplicate: a value read a second time at a new offset.
    dup = json.loads(history.read_text())
    last = dup["polls"][-1]
    partition, offset, value = last["records"][0]
    last["records"].append([partition, 10**9, value])
    (tmp_path / "dup.json").write_text(json.dumps(dup))
    p = verify("--check-history", tmp_path / "dup.json")
    assert p.returncode != 0 and "duplicate: 1" in p.stdout, p.stdout + p.stderr

    # The untouched history checks clean.
    p = verify("--check-history", history)
    assert p.returncode == 0 and "no anomalies" in p.stdout, p.stdout + p.stderr
