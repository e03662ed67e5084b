// Runnel's web console (docs/console.md). Reads this broker's admin API (/v1/brokers,
// /v1/partitions, /v1/groups) and /metrics every 2 s and draws four pages, chosen by the
// URL's hash: #/cluster, #/topics, #/groups, #/throughput. Every value from the cluster
// enters the page as text (textContent, attributes), never as markup.
"use strict";

const REFRESH_MS = 2000;
const TIMEOUT_MS = 3000;
const GROUPS_TIMEOUT_MS = 8000; // /v1/groups asks other brokers, 3 s each at most
const HISTORY_MS = 5 * 60 * 1000; // the throughput charts' span
const MAX_CHIPS = 60; // replica chips drawn per broker; beyond, a topic gets one chip
const FOLD_OVER = 12; // a topic with more replicas on a broker gets one chip there
const MAX_LISTED = 100; // under-replicated partitions listed; more are counted
const PAGES = ["cluster", "topics", "groups", "throughput"];
const SVG = "http://www.w3.org/2000/svg";

const state = {
  brokers: null,
  partitions: null,
  groups: null,
  failed: null, // why the last refresh failed, or null
  updated: null,
  samples: [], // [{t, totals: {bytesIn, bytesOut, recordsIn}, topics: {name: {...}}}]
  rates: [], // [{t, bytesIn, bytesOut, recordsIn}] per second, between successive samples
  topicRates: {},
};

// ---------- DOM helpers ----------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.setAttribute("class", v);
    else node.setAttribute(k, String(v));
  }
}

function append(node, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function dash(v) {
  return v === null || v === undefined ? "–" : String(v);
}

function hasLeader(p) {
  return p.leader !== null && p.leader !== undefined && p.leader >= 0;
}

// ---------- fetching ----------

async function fetchWithTimeout(path, ms) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), ms);
  try {
    const r = await fetch(path, { signal: ctl.signal, cache: "no-store" });
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    return r;
  } catch (e) {
    throw new Error(e.name === "AbortError" ? `${path}: no answer in ${ms} ms` : e.message || String(e));
  } finally {
    clearTimeout(timer);
  }
}

async function getJson(path, ms) {
  return (await fetchWithTimeout(path, ms)).json();
}

async function refresh() {
  const page = currentPage();
  const jobs = [
    getJson("/v1/brokers", TIMEOUT_MS).then((v) => (state.brokers = v)),
    getJson("/v1/partitions", TIMEOUT_MS).then((v) => (state.partitions = v)),
    fetchWithTimeout("/metrics", TIMEOUT_MS).then((r) => r.text()).then(addSample),
  ];
  if (page === "groups" || state.groups === null) {
    jobs.push(getJson("/v1/groups", GROUPS_TIMEOUT_MS).then((v) => (state.groups = v)));
  }
  const results = await Promise.allSettled(jobs);
  const failed = results.find((r) => r.status === "rejected");
  state.failed = failed ? failed.reason.message : null;
  if (!failed) state.updated = new Date();
  render();
}

async function loop() {
  try {
    await refresh();
  } catch (e) {
    state.failed = String(e);
    render();
  }
  setTimeout(loop, REFRESH_MS);
}

// ---------- metrics ----------

// The counters the throughput page follows: {metric name: key}.
const COUNTERS = {
  kafka_server_brokertopicmetrics_bytesin_total: "bytesIn",
  kafka_server_brokertopicmetrics_bytesout_total: "bytesOut",
  kafka_server_brokertopicmetrics_messagesin_total: "recordsIn",
};

// Minimal text-format parsing: `name{label="v",...} value`, comments skipped.
function parseMetrics(text) {
  const totals = { bytesIn: 0, bytesOut: 0, recordsIn: 0 };
  const topics = {};
  for (const line of text.split("\n")) {
    if (line === "" || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || !(m[1] in COUNTERS)) continue;
    const key = COUNTERS[m[1]];
    const value = Number(m[4]);
    if (!Number.isFinite(value)) continue;
    totals[key] += value;
    const t = /(?:^|,)topic="((?:[^"\\]|\\.)*)"/.exec(m[3] || "");
    if (t) {
      const name = t[1].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      topics[name] = topics[name] || { bytesIn: 0, bytesOut: 0, recordsIn: 0 };
      topics[name][key] += value;
    }
  }
  return { totals, topics };
}

function addSample(text) {
  const now = Date.now();
  const { totals, topics } = parseMetrics(text);
  const prev = state.samples[state.samples.length - 1];
  state.samples.push({ t: now, totals, topics });
  if (state.samples.length > 2) state.samples.shift();
  if (!prev) return;
  const secs = (now - prev.t) / 1000;
  if (secs <= 0) return;
  const rate = (a, b) => Math.max(0, (a - b) / secs); // a restarted broker's counters fall
  state.rates.push({
    t: now,
    bytesIn: rate(totals.bytesIn, prev.totals.bytesIn),
    bytesOut: rate(totals.bytesOut, prev.totals.bytesOut),
    recordsIn: rate(totals.recordsIn, prev.totals.recordsIn),
  });
  while (state.rates.length && state.rates[0].t < now - HISTORY_MS) state.rates.shift();
  state.topicRates = {};
  for (const [name, c] of Object.entries(topics)) {
    const p = prev.topics[name] || { bytesIn: 0, bytesOut: 0, recordsIn: 0 };
    state.topicRates[name] = {
      bytesIn: rate(c.bytesIn, p.bytesIn),
      bytesOut: rate(c.bytesOut, p.bytesOut),
      recordsIn: rate(c.recordsIn, p.recordsIn),
    };
  }
}

function human(n, unit) {
  const steps = ["", "k", "M", "G", "T"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < steps.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n.toFixed(n >= 100 || i === 0 ? 0 : 1)} ${steps[i]}${unit}`;
}

// ---------- pages ----------

function currentPage() {
  const name = (location.hash || "").replace(/^#\/?/, "");
  return PAGES.includes(name) ? name : "cluster";
}

function render() {
  const page = currentPage();
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("current", a.dataset.page === page);
  }
  const status = document.getElementById("status");
  if (state.failed) {
    status.dataset.state = "down";
    status.textContent = "broker not answering";
    status.title = state.failed;
  } else if (state.updated) {
    status.dataset.state = "ok";
    status.textContent = `updated ${state.updated.toLocaleTimeString()}`;
    status.title = "";
  }
  const root = { cluster: clusterPage, topics: topicsPage, groups: groupsPage, throughput: throughputPage }[page]();
  document.getElementById("page").replaceChildren(root);
}

// By topic, internal topics (`__consumer_offsets`, ...) last, then by partition.
function byTopicPartition(a, b) {
  const ia = a.topic.startsWith("__"), ib = b.topic.startsWith("__");
  if (ia !== ib) return ia ? 1 : -1;
  return a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition;
}

function loading(id) {
  return el("section", { id, "data-page": id, "data-loaded": "false" }, el("p", { class: "none" }, "loading…"));
}

// Cluster: failure domains nested (region ⊃ zone ⊃ rack ⊃ broker), a missing level skipped.
function clusterPage() {
  if (!state.brokers || !state.partitions) return loading("cluster");
  const parts = state.partitions.slice().sort(byTopicPartition);
  const urps = parts.filter((p) => p.under_replicated || !hasLeader(p));
  const down = state.brokers.filter((b) => b.fenced);
  const root = el("section", { id: "cluster", "data-page": "cluster", "data-loaded": "true" });
  root.append(
    el("h2", {}, "Cluster"),
    el("div", { class: "summary" },
      `${state.brokers.length} brokers (${down.length} down), ${parts.length} partitions, `,
      el("span", { class: urps.length ? "urp" : null, id: "urp-count", "data-count": urps.length },
        `${urps.length} under-replicated`)),
    el("div", { id: "domains" }, nest(state.brokers.slice().sort((a, b) => a.id - b.id), ["region", "zone", "rack"], parts)),
  );
  const list = el("section", { id: "under-replicated", "data-count": urps.length },
    el("h2", {}, "Under-replicated partitions"));
  if (!urps.length) list.append(el("p", { class: "none" }, "none"));
  else {
    list.append(el("ul", { class: "urps" }, urps.slice(0, MAX_LISTED).map((p) => el("li", {
      class: "urp", "data-topic": p.topic, "data-partition": p.partition, "data-under-replicated": "true",
    }, `${p.topic}-${p.partition}: leader ${hasLeader(p) ? p.leader : "none"}, in sync `,
    p.replicas.filter((r) => r.in_sync).map((r) => r.broker).join(", ") || "none",
    ", out of sync ", p.replicas.filter((r) => !r.in_sync).map((r) => r.broker).join(", ") || "none"))));
    if (urps.length > MAX_LISTED) list.append(el("p", { class: "none" }, `and ${urps.length - MAX_LISTED} more`));
  }
  root.append(list);
  return root;
}

function nest(brokers, levels, parts) {
  if (!levels.length) return brokers.map((b) => brokerBox(b, parts));
  const [level, ...rest] = levels;
  const groups = new Map();
  const without = [];
  for (const b of brokers) {
    const v = b.location && b.location[level];
    if (v === null || v === undefined || v === "") without.push(b);
    else {
      if (!groups.has(v)) groups.set(v, []);
      groups.get(v).push(b);
    }
  }
  const out = [];
  for (const [name, members] of [...groups.entries()].sort()) {
    out.push(el("div", { class: `domain ${level}`, [`data-${level}`]: name },
      el("div", { class: "label" }, `${level} ${name}`), nest(members, rest, parts)));
  }
  return out.concat(nest(without, rest, parts));
}

function replicaRole(p, id) {
  const r = p.replicas.find((x) => x.broker === id);
  return p.leader === id ? "leader" : r && r.in_sync ? "follower" : "out-of-sync";
}

function brokerBox(b, parts) {
  const leads = parts.filter((p) => p.leader === b.id);
  const holds = parts.filter((p) => p.replicas.some((r) => r.broker === b.id));
  const loc = b.location || {};
  const box = el("div", {
    class: b.fenced ? "broker down" : "broker",
    "data-broker-id": b.id,
    "data-state": b.fenced ? "fenced" : "up",
    "data-zone": loc.zone, "data-region": loc.region, "data-rack": loc.rack,
    "data-leaders": leads.length, "data-replicas": holds.length,
  },
  el("div", { class: "name" }, `broker ${b.id}`),
  el("div", { class: "addr" }, `${b.host}:${b.port}`),
  el("div", { class: "badges" },
    b.controller ? el("span", { class: "badge controller" }, "controller") : null,
    b.fenced ? el("span", { class: "badge fenced" }, "down (fenced)") : null,
    b.draining ? el("span", { class: "badge draining" }, `draining (${b.draining})`) : null),
  el("div", { class: "counts" }, `leads ${leads.length} · holds ${holds.length} replicas`));
  const chips = el("div", { class: "chips" });
  const byTopic = new Map();
  for (const p of holds) {
    if (!byTopic.has(p.topic)) byTopic.set(p.topic, []);
    byTopic.get(p.topic).push(p);
  }
  let drawn = 0;
  for (const [topic, ps] of byTopic) {
    const roles = ps.map((p) => [p, replicaRole(p, b.id)]);
    if (topic.startsWith("__") || ps.length > FOLD_OVER || drawn + ps.length > MAX_CHIPS) {
      // Many partitions (an internal topic's 50): one chip for the topic.
      const led = roles.filter(([, r]) => r === "leader").length;
      const behind = roles.filter(([, r]) => r === "out-of-sync").length;
      chips.append(el("span", {
        class: `replica topic-summary${behind ? " out-of-sync" : ""}`, "data-topic": topic,
        "data-leaders": led, "data-replicas": ps.length, "data-out-of-sync": behind,
        title: `${topic}: ${ps.length} replicas here, ${led} leading, ${behind} out of sync`,
      }, `${topic} ×${ps.length} (★${led}${behind ? ` ✗${behind}` : ""})`));
      drawn += 1;
      continue;
    }
    for (const [p, kind] of roles) {
      chips.append(el("span", {
        class: `replica ${kind}`, "data-topic": p.topic, "data-partition": p.partition, "data-role": kind,
        title: `${p.topic}-${p.partition}: ${kind}`,
      }, `${p.topic}-${p.partition}${kind === "leader" ? " ★" : kind === "out-of-sync" ? " ✗" : ""}`));
      drawn += 1;
    }
  }
  box.append(chips);
  return box;
}

// Topics: each topic's partitions with leader and replicas, in sync or not.
function topicsPage() {
  if (!state.partitions) return loading("topics");
  const root = el("section", { id: "topics", "data-page": "topics", "data-loaded": "true" }, el("h2", {}, "Topics"));
  const topics = new Map();
  for (const p of state.partitions.slice().sort(byTopicPartition)) {
    if (!topics.has(p.topic)) topics.set(p.topic, []);
    topics.get(p.topic).push(p);
  }
  if (!topics.size) root.append(el("p", { class: "none" }, "no topics"));
  for (const [name, parts] of topics) {
    const urp = parts.filter((p) => p.under_replicated || !hasLeader(p)).length;
    root.append(el("section", { class: "topic", "data-topic": name, "data-partitions": parts.length, "data-under-replicated": urp },
      el("h3", {}, name, " ", el("span", { class: urp ? "urp" : "none" },
        `${parts.length} partitions${urp ? `, ${urp} under-replicated` : ""}`)),
      el("table", {},
        el("tr", {}, el("th", {}, "partition"), el("th", {}, "leader"), el("th", {}, "epoch"), el("th", {}, "replicas (✓ in sync, ✗ not)")),
        parts.map((p) => el("tr", {
          class: "partition", "data-topic": p.topic, "data-partition": p.partition,
          "data-leader": hasLeader(p) ? p.leader : "none",
          "data-under-replicated": String(Boolean(p.under_replicated || !hasLeader(p))),
        },
        el("td", {}, p.partition),
        el("td", { class: "leader" }, hasLeader(p) ? p.leader : "none"),
        el("td", {}, dash(p.leader_epoch)),
        el("td", {}, p.replicas.map((r) => el("span", {
          class: `replica ${r.in_sync ? "in-sync" : "out-of-sync"}${r.broker === p.leader ? " leader" : ""}`,
          "data-broker-id": r.broker, "data-in-sync": String(r.in_sync),
        }, `${r.broker} ${r.in_sync ? "✓" : "✗"}`))))))));
  }
  return root;
}

// Groups: state, coordinator, members, lag, and per partition committed/end/lag.
function groupsPage() {
  if (!state.groups) return loading("groups");
  const root = el("section", { id: "groups", "data-page": "groups", "data-loaded": "true" }, el("h2", {}, "Consumer groups"));
  const unreachable = state.groups.unreachable || [];
  if (unreachable.length) {
    root.append(el("p", { class: "note", id: "unreachable", "data-brokers": unreachable.join(",") },
      `not answering, their groups are missing: broker ${unreachable.join(", ")}`));
  }
  const groups = (state.groups.groups || []).slice().sort((a, b) => (a.group < b.group ? -1 : a.group > b.group ? 1 : 0));
  if (!groups.length) root.append(el("p", { class: "none" }, "no groups"));
  for (const g of groups) {
    root.append(el("section", {
      class: "group", "data-group": g.group, "data-state": g.state, "data-lag": dash(g.lag), "data-coordinator": g.coordinator,
    },
    el("h3", {}, g.group),
    el("div", { class: "summary" },
      `type ${dash(g.type)} · state ${dash(g.state)} · coordinator ${dash(g.coordinator)} · members ${dash(g.members)} · lag `,
      el("span", { class: "lag" }, dash(g.lag))),
    el("table", {},
      el("tr", {}, el("th", {}, "topic"), el("th", {}, "partition"), el("th", {}, "committed"), el("th", {}, "end"), el("th", {}, "lag")),
      (g.partitions || []).slice().sort(byTopicPartition).map((p) => el("tr", {
        class: "group-partition", "data-topic": p.topic, "data-partition": p.partition, "data-lag": dash(p.lag),
      }, el("td", {}, p.topic), el("td", {}, p.partition), el("td", {}, dash(p.committed)), el("td", {}, dash(p.end)),
      el("td", {}, dash(p.lag)))))));
  }
  return root;
}

// Throughput: this broker's rates from two successive /metrics scrapes, over the last minutes.
function throughputPage() {
  const last = state.rates[state.rates.length - 1];
  const root = el("section", {
    id: "throughput", "data-page": "throughput", "data-loaded": String(Boolean(last)), "data-points": state.rates.length,
  }, el("h2", {}, "Throughput (this broker)"));
  if (!last) {
    root.append(el("p", { class: "none" }, "waiting for a second scrape of /metrics…"));
    return root;
  }
  const rate = (id, label, v, unit) => el("span", { class: "rate", id, "data-value": v.toFixed(1) },
    `${label} `, el("span", { class: "v" }, `${human(v, unit)}/s`));
  root.append(
    el("div", { class: "rates" },
      rate("rate-bytes-in", "bytes in", last.bytesIn, "B"),
      rate("rate-bytes-out", "bytes out", last.bytesOut, "B"),
      rate("rate-records-in", "records in", last.recordsIn, "")),
    chart("chart-bytes", "bytes/s", [["bytesIn", "bytes in", "series-bytes-in"], ["bytesOut", "bytes out", "series-bytes-out"]], "B"),
    chart("chart-records", "records/s", [["recordsIn", "records in", "series-records-in"]], ""),
  );
  const names = Object.keys(state.topicRates).sort();
  if (names.length) {
    root.append(el("table", { id: "topic-rates" },
      el("tr", {}, el("th", {}, "topic"), el("th", {}, "bytes in/s"), el("th", {}, "bytes out/s"), el("th", {}, "records in/s")),
      names.map((n) => {
        const r = state.topicRates[n];
        return el("tr", { "data-topic": n, "data-bytes-in": r.bytesIn.toFixed(1) },
          el("td", {}, n), el("td", {}, human(r.bytesIn, "B")), el("td", {}, human(r.bytesOut, "B")), el("td", {}, human(r.recordsIn, "")));
      })));
  }
  return root;
}

function chart(id, title, series, unit) {
  const W = 900, H = 220, L = 70, R = 10, T = 24, B = 24;
  const now = Date.now();
  const max = Math.max(1, ...state.rates.flatMap((p) => series.map(([k]) => p[k])));
  const x = (t) => L + ((t - (now - HISTORY_MS)) / HISTORY_MS) * (W - L - R);
  const y = (v) => H - B - (v / max) * (H - T - B);
  const node = svg("svg", { id, class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  for (const f of [0, 0.5, 1]) {
    node.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(max * f), y2: y(max * f) }),
      svg("text", { x: 4, y: y(max * f) + 4 }, `${human(max * f, unit)}/s`));
  }
  node.append(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }),
    svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
    svg("text", { x: L, y: H - 6 }, "−5 min"), svg("text", { x: W - R - 24, y: H - 6 }, "now"));
  series.forEach(([key, label, cls], i) => {
    const points = state.rates.map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
    node.append(svg("polyline", { class: cls, points, "data-series": key }),
      svg("text", { x: L + 10 + i * 110, y: 14, class: cls }, label));
  });
  return node;
}

window.addEventListener("hashchange", () => {
  render();
  if (currentPage() === "groups") refresh();
});
render();
loop();
