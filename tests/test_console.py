"""The web console (docs/console.md), served by the admin listener, in headless Chromium
(Debian's chromium and chromium-driver, driven by Selenium): against a live 3-broker
cluster, each page loads and shows what the admin API and metrics say (the brokers in
their zones, the topic's partitions with leaders and in-sync replicas, a group with its
lag, nonzero bytes in while a producer writes), and the pages react to a broker being
paused: the console of another broker shows it down (fenced) and the partitions
under-replicated, the paused broker's own console says it is not answering. A screenshot
of each page is kept in .cache/artifacts/console/."""

import os
import shutil
import signal
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from conftest import ROOT, cluster_port, unique_topic, wait_for, wait_for_topic
from test_cluster import BROKERS, DevCluster

ADMIN_OFFSET = 2000
ARTIFACTS = ROOT / ".cache" / "artifacts" / "console"
RECORDS_PER_PARTITION = 100
COMMITTED = 10


def chromium():
    """A headless Chromium under Selenium, with Debian's binaries (nothing downloaded)."""
    browser = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    missing = [p for p in (browser, driver) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"Chromium is needed for the console test and is missing ({', '.join(missing)}): "
                    "apt-get install chromium chromium-driver (scripts/test.sh installs them as root)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is missing: pip install -r tests/requirements.txt")
    options = Options()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--no-first-run"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    d.set_page_load_timeout(30)
    return d


def console(c, broker, page):
    return f"http://127.0.0.1:{c.port + ADMIN_OFFSET + broker}/console/#/{page}"


def q(d, css):
    """The elements matching css, as [{attribute: value}] plus their text (read in one go)."""
    return d.execute_script("""
        return Array.from(document.querySelectorAll(arguments[0])).map(e => {
          const o = {text: e.textContent};
          for (const a of e.attributes) o[a.name] = a.value;
          return o;
        });""", css)


def shot(d, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    assert d.save_screenshot(str(path)), path
    assert path.stat().st_size > 1000, (path, path.stat().st_size)
    print(f"screenshot: {path}")
    return path


def open_page(d, c, broker, page):
    d.get(console(c, broker, page))
    wait_for(lambda: q(d, f"#{page}[data-loaded=true]"), f"the {page} page to load", 30,
             lambda: d.execute_script("return document.body.innerText"))


def test_console_shows_the_cluster_and_follows_a_broker_stopping(tmp_path):
    d = chromium()
    port = cluster_port(BROKERS)
    c = DevCluster(tmp_path, port=port, settings=[f"admin.listeners=http://127.0.0.1:{port + ADMIN_OFFSET}",
                                                  "auto.create.topics.enable=false"])
    paused = None
    try:
        admin0 = f"http://127.0.0.1:{port + ADMIN_OFFSET}"
        # `/` leads to the console; the assets are served, uncached.
        with urllib.request.urlopen(admin0 + "/", timeout=10) as r:
            assert r.url.endswith("/console/") and r.headers["Content-Type"].startswith("text/html"), r.url
            assert "console.js" in r.read().decode()
        with urllib.request.urlopen(admin0 + "/console/console.js", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/javascript")
            assert r.headers["Cache-Control"] == "no-cache"

        topic = unique_topic("console")
        group = unique_topic("console-group")
        c.admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        wait_for_topic(c.admin, topic, 3)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(3 * RECORDS_PER_PARTITION):
            p.produce(topic, b"v" * 100, partition=i % 3)
        assert p.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(topic, q_, COMMITTED) for q_ in range(3)], asynchronous=False)
        consumer.close()

        # Cluster: the three brokers, each in its zone, all up, the topic's leaders on them.
        open_page(d, c, 0, "cluster")

        def brokers_up():
            bs = q(d, "#cluster .domain.zone .broker[data-broker-id]")
            chips = q(d, f"#cluster .replica.leader[data-topic='{topic}']")
            urps = q(d, f"#under-replicated li.urp[data-topic='{topic}']")
            return len(bs) == BROKERS and all(b["data-state"] == "up" for b in bs) and len(chips) == 3 and not urps and bs
        bs = wait_for(brokers_up, "3 brokers up with the topic's 3 leaders, in sync", 30,
                      lambda: d.execute_script("return document.body.innerText"))
        assert sorted((int(b["data-broker-id"]), b["data-zone"]) for b in bs) == [(i, f"dev-{i}") for i in range(BROKERS)]
        for b in bs:  # every broker holds a replica of each of the 3 partitions
            assert len(q(d, f".broker[data-broker-id='{b['data-broker-id']}'] .replica[data-topic='{topic}']")) == 3
        shot(d, "cluster")

        # Topics: the topic's partitions, each with a leader and 3 in-sync replicas.
        open_page(d, c, 0, "topics")

        def partitions():
            rows = q(d, f"#topics tr.partition[data-topic='{topic}']")
            ok = len(rows) == 3 and all(r["data-leader"] in {"0", "1", "2"} and r["data-under-replicated"] == "false"
                                        for r in rows)
            return ok and rows
        rows = wait_for(partitions, "the topic's 3 partitions with leaders", 30)
        assert sorted(int(r["data-partition"]) for r in rows) == [0, 1, 2]
        assert len(q(d, f"#topics tr.partition[data-topic='{topic}'] .replica.in-sync")) == 9
        shot(d, "topics")

        # Groups: the committed offsets and the lag behind the end.
        open_page(d, c, 0, "groups")
        lag = 3 * (RECORDS_PER_PARTITION - COMMITTED)
        g = wait_for(lambda: [x for x in q(d, f"#groups .group[data-group='{group}']") if x["data-lag"] == str(lag)],
                     f"group {group} with lag {lag}", 30, lambda: d.execute_script("return document.body.innerText"))
        assert str(lag) in g[0]["text"]
        parts = q(d, f"#groups .group[data-group='{group}'] tr.group-partition")
        assert sorted((int(x["data-partition"]), x["data-lag"]) for x in parts) == \
            [(i, str(RECORDS_PER_PARTITION - COMMITTED)) for i in range(3)], parts
        shot(d, "groups")

        # Throughput: bytes in counted by a leader; its console charts them while a producer writes.
        leader = int(rows[0]["data-leader"])
        stop = threading.Event()

        def produce():
            while not stop.is_set():
                for i in range(30):
                    p.produce(topic, b"w" * 100, partition=int(rows[0]["data-partition"]))
                p.poll(0)
                time.sleep(0.05)
            p.flush(10)
        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        try:
            open_page(d, c, leader, "throughput")
            rate = wait_for(lambda: [float(x["data-value"]) for x in q(d, "#rate-bytes-in") if float(x["data-value"]) > 0],
                            "a nonzero bytes-in rate", 30)
            wait_for(lambda: int(q(d, "#throughput")[0]["data-points"]) >= 3, "3 points on the charts", 30)
            assert len(q(d, "#chart-bytes polyline[data-series=bytesIn]")[0]["points"].split()) >= 3
            assert q(d, f"#topic-rates tr[data-topic='{topic}']")
            print(f"bytes in on broker {leader}: {rate[0]:.0f} B/s")
            shot(d, "throughput")
        finally:
            stop.set()
            writer.join(15)

        # A broker paused: its own console says it is not answering, another's shows it down.
        paused = next(b for b in range(BROKERS) if b != 0)
        first = d.current_window_handle
        d.switch_to.new_window("tab")
        open_page(d, c, paused, "cluster")
        os.kill(c.pid(paused), signal.SIGSTOP)
        wait_for(lambda: q(d, "#status[data-state=down]"), "the paused broker's console to say so", 30)
        assert "broker not answering" in q(d, "#status")[0]["text"]
        shot(d, "not-answering")
        d.close()
        d.switch_to.window(first)
        open_page(d, c, 0, "cluster")

        def shows_it_down():
            b = q(d, f".broker[data-broker-id='{paused}'][data-state=fenced]")
            urps = q(d, f"#under-replicated li.urp[data-topic='{topic}']")
            return b and len(urps) == 3 and (b, urps)
        b, urps = wait_for(shows_it_down, f"broker {paused} down and the topic's partitions under-replicated", 60,
                           lambda: d.execute_script("return document.body.innerText"))
        assert "down" in b[0]["text"] and "down" in b[0]["class"]
        shot(d, "cluster-broker-down")
        open_page(d, c, 0, "topics")
        urp_rows = wait_for(lambda: [r for r in q(d, f"#topics tr.partition[data-topic='{topic}']")
                                     if r["data-under-replicated"] == "true"], "under-replicated rows", 30)
        assert len(urp_rows) == 3
        out = q(d, f"#topics tr.partition[data-topic='{topic}'] .replica.out-of-sync")
        assert {x["data-broker-id"] for x in out} == {str(paused)}, out
        shot(d, "topics-broker-down")
    finally:
        if paused is not None:
            os.kill(c.pid(paused), signal.SIGCONT)
        d.quit()
        c.close()
