"""`runnel bench`: the load generator measured against what the broker stored.

Each run is a few seconds against a fresh runnel. The report's counts must equal what the
broker holds (log-end offsets read independently through librdkafka), the consumers must
have read every record, keyed records must land where Kafka's Java partitioner (murmur2)
puts them, and `compare` / `size` must produce their figures.
"""

import json
import os
import subprocess
import threading
import time

from confluent_kafka import Consumer, TopicPartition

from conftest import RUNNEL_BIN, Broker, unique_topic

RUN_TIMEOUT_S = 120


def bench(*args):
    p = subprocess.run([RUNNEL_BIN, "bench", *map(str, args)], capture_output=True, text=True,
                       timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"runnel bench {' '.join(map(str, args))} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def high_watermarks(bootstrap, topic, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("hw")})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


def read_keys(bootstrap, topic, partitions, expected):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("keys"), "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        while len(out) < expected:
            batch = c.consume(1000, timeout=5)
            assert batch, f"only {len(out)} of {expected} records readable"
            out += [(m.partition(), m.key()) for m in batch if not m.error()]
        return out
    finally:
        c.close()


def murmur2(data):
    """Kafka's Java client murmur2 (Utils.murmur2)."""
    m, r = 0x5bd1e995, 24
    h = (0x9747b28c ^ len(data)) & 0xffffffff
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xffffffff
        k ^= k >> r
        k = (k * m) & 0xffffffff
        h = (h * m) & 0xffffffff
        h ^= k
    rest = data[4 * n4:]
    if len(rest) >= 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    h ^= h >> 15
    return h


def test_report_counts_match_what_the_broker_stored(runnel_broker, tmp_path):
    b = runnel_broker
    topic = unique_topic("bench")
    out, svg = tmp_path / "report.json", tmp_path / "chart.svg"
    p = bench("--bootstrap", b.bootstrap, "--topic", topic, "--partitions", 3, "--replication-factor", 1,
              "--duration", 3, "--record-size", "100-400", "--keep-topic", "--json", out, "--svg", svg,
              "--progress", "false")
    r = json.loads(out.read_text())
    produced = r["produce"]["records"]
    assert produced > 1000, p.stdout
    assert r["produce"]["errors"] == {}, r["produce"]["errors"]
    assert r["stored_records"] == produced
    assert sum(high_watermarks(b.bootstrap, topic, 3)) == produced, "the broker holds exactly what was acknowledged"
    assert r["end_to_end"]["records"] == produced, "consumers read every record"
    assert 100 * produced <= r["produce"]["bytes"] <= 400 * produced
    lat = r["produce"]["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert sum(t["produced"] for t in r["timeline"]) == produced
    assert svg.read_text().startswith("<svg") and "throughput" in svg.read_text()
    assert "produce" in p.stdout and "e2e" in p.stdout


def test_a_run_over_tls_reads_back_every_record(tmp_path):
    """Over a TLS listener the consumers read every record the producers got acknowledged: a
    consumer's fetch request must leave the client whole even when nothing is sent after
    it (a TLS stream holds the last record of a write until it is flushed)."""
    b = Broker(tmp_path / "data", args=["--tls"]).start()
    try:
        props = tmp_path / "client.properties"
        props.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                         f"ssl.truststore.location={b.data_dir / 'tls' / 'ca.pem'}\n")
        out = tmp_path / "report.json"
        p = bench("--bootstrap", b.bootstrap, "--scenario", "durable-512", "--replication-factor", 1, "--duration", 3,
                  "--command-config", props, "--json", out, "--progress", "false")
        r = json.loads(out.read_text())
        produced = r["produce"]["records"]
        assert produced > 1000, p.stdout
        assert r["produce"]["errors"] == {}, r["produce"]["errors"]
        assert r["stored_records"] == produced
        assert r["end_to_end"]["records"] == produced, "consumers read every record over TLS"
    finally:
        b.stop()


def test_keyed_compressed_rate_limited_run(runnel_broker, tmp_path):
    b = runnel_broker
    topic = unique_topic("bench")
    out = tmp_path / "report.json"
    bench("--bootstrap", b.bootstrap, "--topic", topic, "--partitions", 4, "--replication-factor", 1,
          "--records", 3000, "--rate", 1500, "--keys", 50, "--compression", "zstd", "--producers", 2,
          "--consumers", 2, "--keep-topic", "--json", out, "--progress", "false")
    r = json.loads(out.read_text())
    assert r["produce"]["records"] == 3000 and r["stored_records"] == 3000
    assert r["end_to_end"]["records"] == 3000
    assert sum(high_watermarks(b.bootstrap, topic, 4)) == 3000
    # At 1500 records/s the run takes about two seconds, not less.
    assert r["elapsed_s"] >= 1.5, r["elapsed_s"]
    for partition, key in read_keys(b.bootstrap, topic, 4, 3000):
        assert key.startswith(b"key-")
        assert partition == (murmur2(key) & 0x7fffffff) % 4, f"{key} in partition {partition}"


def test_acks_zero_and_scenario_flags(runnel_broker, tmp_path):
    b = runnel_broker
    out = tmp_path / "report.json"
    bench("--bootstrap", b.bootstrap, "--scenario", "latency-1k", "--replication-factor", 1, "--duration", 2,
          "--acks", 0, "--json", out, "--progress", "false")
    r = json.loads(out.read_text())
    assert r["workload"]["rate"] == 1000 and r["workload"]["record_bytes"] == [100, 100]
    assert 1500 <= r["produce"]["records"] <= 2100, r["produce"]["records"]
    assert r["stored_records"] == r["produce"]["records"]


def test_compare_two_brokers_and_size(tmp_path):
    a = Broker(tmp_path / "a").start()
    b = Broker(tmp_path / "b").start()
    try:
        out = tmp_path / "compare.json"
        p = bench("compare", "--a", a.bootstrap, "--b", b.bootstrap, "--rounds", 2, "--duration", 1,
                  "--warmup", 0.5, "--pid-a", a.proc.pid, "--pid-b", b.proc.pid,
                  "--replication-factor", 1, "--partitions", 2, "--json", out, "--progress", "false")
        c = json.loads(out.read_text())
        assert len(c["reports_a"]) == 2 and len(c["reports_b"]) == 2
        names = [f["name"] for f in c["figures"]]
        assert "produce records/s" in names and "produce p99 ms" in names
        assert "B/A" in p.stdout
        assert "warm-up: a" in p.stderr and "warm-up: b" in p.stderr
        # The brokers' CPU per GB produced: positive in every run (each broker did work).
        cpu = next(f for f in c["figures"] if f["name"] == "broker CPU s/GB")
        assert len(cpu["a"]) == 2 and all(x > 0 for x in cpu["a"] + cpu["b"]), cpu
        assert len(c["machine_a"]) == 2 and all(m["load_1m"] >= 0 for m in c["machine_a"] + c["machine_b"])
        assert "machine during the runs" in p.stdout
        # Every run began after the page cache's unwritten data was synced, and says how much.
        machines = c["machine_a"] + c["machine_b"]
        assert c["settled"] is True and all(m["unwritten_mb"] >= 0 and m["settle_s"] >= 0 for m in machines)
        assert "written out before it began" in p.stdout and "MB unwritten before the run" in p.stderr
        p = bench("compare", "--a", a.bootstrap, "--b", b.bootstrap, "--rounds", 1, "--duration", 0.5,
                  "--warmup", 0, "--settle", "false", "--replication-factor", 1, "--partitions", 1,
                  "--json", out, "--progress", "false")
        c = json.loads(out.read_text())
        assert c["settled"] is False and all(m["settle_s"] == 0 for m in c["machine_a"] + c["machine_b"])
        assert "not written out" in p.stdout
    finally:
        a.kill9()
        b.kill9()
    p = bench("size", "--per-broker-mb-s", 100, "--target-mb-s", 500, "--broker-hour-price", 0.5, "--json")
    s = json.loads(p.stdout)["output"]
    assert s["brokers"] == 12 and s["brokers_per_domain"] == 4
    assert abs(s["cost_per_hour"] - 6.0) < 1e-9


def test_compare_parks_the_side_not_measured(tmp_path):
    """With --park-cpus, every thread of the side not being measured waits on those CPUs
    while the other runs, goes back before its own run, and both sides end where they
    began; each run reports what the waiting side used meanwhile."""
    a = Broker(tmp_path / "a").start()
    b = Broker(tmp_path / "b").start()
    park = min(os.sched_getaffinity(0))
    homes = {a.proc.pid: os.sched_getaffinity(a.proc.pid), b.proc.pid: os.sched_getaffinity(b.proc.pid)}
    seen = {pid: set() for pid in homes}
    done = threading.Event()

    def watch():
        while not done.is_set():
            for pid in homes:
                # Every thread of the broker, as the kernel has it.
                for tid in os.listdir(f"/proc/{pid}/task"):
                    try:
                        seen[pid].add(frozenset(os.sched_getaffinity(int(tid))))
                    except OSError:
                        pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        out = tmp_path / "parked.json"
        p = bench("compare", "--a", a.bootstrap, "--b", b.bootstrap, "--rounds", 2, "--duration", 1,
                  "--warmup", 0, "--pid-a", a.proc.pid, "--pid-b", b.proc.pid, "--park-cpus", park,
                  "--replication-factor", 1, "--partitions", 2, "--json", out, "--progress", "false")
        done.set()
        watcher.join()
        c = json.loads(out.read_text())
        assert c["parked_on"] == str(park)
        machines = c["machine_a"] + c["machine_b"]
        assert len(machines) == 4 and all(m["other_cpu_s"] >= 0 for m in machines), machines
        # Each run waited (at most 10 s) for the other side to go quiet, after the sync.
        assert all(0 <= m["quiet_s"] <= 11 for m in machines), machines
        assert "for the other side to go quiet" in p.stderr
        assert f"parked on CPUs {park}" in p.stdout and "the other side's brokers used" in p.stderr
        for pid, home in homes.items():
            assert frozenset([park]) in seen[pid], (pid, seen[pid])
            assert frozenset(home) in seen[pid], (pid, seen[pid])
            assert os.sched_getaffinity(pid) == home, "back where it began"
            for tid in os.listdir(f"/proc/{pid}/task"):
                assert os.sched_getaffinity(int(tid)) == home, (pid, tid)
        # Parking needs the brokers of both sides.
        args = ["compare", "--a", a.bootstrap, "--b", b.bootstrap, "--park-cpus", park, "--rounds", 1,
                "--duration", 0.5, "--warmup", 0]
        p = subprocess.run([RUNNEL_BIN, "bench", *map(str, args)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert p.returncode != 0 and "--pid-a" in p.stderr, p.stderr
    finally:
        done.set()
        a.kill9()
        b.kill9()


def test_size_reports_the_traffic_between_regions():
    """RF 3 over 3 regions at 100 MB/s with 2 groups per region: with leaders where the
    writers are and reads from followers, only replication crosses (2 GB per GB produced);
    with leaders spread and reads from leaders, 2/3 of writes and 2/3 of every group's
    reads cross too (6.67 GB per GB)."""
    p = bench("size", "--per-broker-mb-s", 60, "--target-mb-s", 100, "--record-bytes", 1000, "--regions", 3,
              "--groups-per-region", 2, "--inter-region-gb-price", 0.02, "--json")
    out = json.loads(p.stdout)
    here, spread = out["between_regions"], out["between_regions_leaders_spread_reads_from_leaders"]
    assert (here["produce_mb_s"], here["replication_mb_s"], here["consume_mb_s"]) == (0.0, 200.0, 0.0)
    assert abs(here["cost_per_million_records"] - 0.04) < 1e-9
    assert abs(spread["total_mb_s"] - 2000 / 3) < 1e-6 and abs(spread["gb_per_gb_produced"] - 20 / 3) < 1e-9
    p = bench("size", "--per-broker-mb-s", 60, "--target-mb-s", 100, "--regions", 3, "--groups-per-region", 2,
              "--inter-region-gb-price", 0.02)
    assert "between regions: 200.0 MB/s" in p.stdout and "666.7 MB/s" in p.stdout, p.stdout


def test_profile_of_the_broker_while_the_run_goes(runnel_broker, tmp_path):
    """--profile-pid: Linux perf samples the broker for the whole run; the flame graph is
    drawn with the broker's own functions in it, and the report lists the functions that
    took the time, each with a share of it in itself no larger than with what it called."""
    b = runnel_broker
    svg = tmp_path / "profile.svg"
    p = bench("--bootstrap", b.bootstrap, "--partitions", 3, "--replication-factor", 1, "--duration", 3,
              "--progress", "false", "--profile-pid", b.proc.pid, "--profile-svg", svg)
    drawn = svg.read_text()
    assert "<svg" in drawn[:1000] and "runnel_broker::" in drawn, drawn[:1000]
    assert "produce" in p.stdout and "flame graph:" in p.stdout, p.stdout
    rows = [line.split(None, 2) for line in p.stdout.split("profile:", 1)[1].splitlines()
            if line.strip()[:1].isdigit()]
    assert len(rows) >= 5, p.stdout
    for own, total, name in rows:
        assert 0 < float(own) <= float(total) <= 100, (own, total, name)
    assert not list(tmp_path.glob("*.perf.data")), "perf's data is removed once drawn"
