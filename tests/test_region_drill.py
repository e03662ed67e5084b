"""The region-loss drill, shortened: `runnel chaos --drill region-loss` with 9 brokers in 3
regions, each region in network namespaces with 30 ms between regions, producers
(idempotent, acks=all) and a consumer group in every region reading from their own region
(client.rack), and one region (brokers and clients) cut off for a third of the run. Nothing
acknowledged may be lost (RPO 0) and the checker must find no anomaly; the drill's figures
must all be there (metadata stayed writable during the cut, the cut-off replicas caught up
and leadership came back within the run), and consumers must have read almost everything
from their own region. Runs as root with
iptables-legacy and NFQUEUE (the latency); skipped, saying why, without."""

import json
import subprocess

import pytest

from conftest import RUNNEL_BIN, cluster_port
from test_chaos import host_leftovers, latency_unavailable


def test_region_loss_drill_over_latency_loses_nothing(tmp_path):
    why = latency_unavailable()
    if why:
        pytest.skip(f"the region-loss drill needs namespaces with latency: {why}")
    port = cluster_port(9)
    drill, report, logs = tmp_path / "drill.json", tmp_path / "report.json", tmp_path / "logs"
    cmd = [RUNNEL_BIN, "chaos", "--drill", "region-loss", "--brokers", 9, "--regions", 3,
           "--inter-region-latency", "30ms", "--partitions", 9, "--producers", 3, "--consumers", 3,
           "--group-consumers", 1, "--rate", 60, "--duration", 45, "--port", port,
           "--set", "leader.imbalance.check.interval.seconds=5",
           "--data-dir", tmp_path / "data", "--logs", logs, "--json", report, "--drill-json", drill,
           "--chart", tmp_path / "chart.svg"]
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL)
    tails = "\n".join(f"--- {f.name}\n" + "\n".join(f.read_text().splitlines()[-10:])
                      for f in sorted(logs.glob("*.log"))) if logs.exists() else ""
    assert p.returncode == 0, f"chaos exited {p.returncode}\n{p.stdout}\n{p.stderr}\n{tails}"
    assert "no anomalies" in p.stdout and "faults injected: 1 (0 skipped)" in p.stdout, p.stdout
    d = json.loads(drill.read_text())
    assert d["rpo_lost_acknowledged"] == 0 and d["acknowledged"] > 0, d
    surviving = {r for r, _ in d["rto_ms"]}
    assert len(surviving) == 2 and d["region_cut"] not in surviving, d
    assert {r for r, _ in d["groups_committed_again_ms"]} == surviving, d
    # Nine brokers: five metadata voters, two, two and one per region, so a majority
    # survives any region's loss and a topic can be created during the cut.
    assert d["metadata_written_during_cut_ms"] is not None, f"metadata was not writable during the cut: {d}"
    assert d["caught_up_after_heal_ms"] is not None, f"the cut-off replicas did not catch up within the run: {d}"
    assert d["leaders_back_after_heal_ms"] is not None, f"leadership did not come back within the run: {d}"
    # Reads stay in their region: only what a region's consumers read while their own
    # replica was missing (the cut region's, before the cut took them too) comes from afar.
    assert d["bytes_read"] > 0 and d["bytes_read_across_regions"] < d["bytes_read"] / 4, d
    assert all(f.get("regions") for f in json.loads(report.read_text())["faults"]), "per-region figures missing"
    assert "region-loss drill, region" in p.stdout and "RPO: 0 acknowledged writes lost" in p.stdout, p.stdout
    tag = p.stdout.split("on bridge rnbr", 1)[1].split(" ", 1)[0] if "on bridge rnbr" in p.stdout else None
    if tag:
        assert host_leftovers(tag) == [], "namespaces or links left behind"
