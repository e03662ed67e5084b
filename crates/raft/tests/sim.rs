//! Deterministic simulation of a Raft group over real on-disk logs: a simulated network
//! that drops, delays, duplicates and partitions messages, and replicas that crash and
//! restart from their directories. Invariants are checked after every step:
//!
//! - at most one leader per term;
//! - one batch per offset: every replica's committed prefix agrees byte for byte;
//! - committed data is never lost: a replica's high watermark never moves back, and what
//!   was committed stays in every replica's log once it reached it;
//! - every acknowledged (committed) proposal is in the final log, once, at its offset.
//!
//! Logs are trimmed as they go (size retention on every replica, DeleteRecords through the
//! leader), so lagging and restarted replicas often catch up from a snapshot.
//!
//! `RUNNEL_SIM_SEEDS=n` sets how many seeds run (default 24); `RUNNEL_SIM_SEED=s` runs one.
//! A failure names its seed.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_raft::{Durability, Message, ProposeError, Replica, ReplicaConfig, StateRole};
use runnel_storage::LogConfig;
use runnel_wire::batch::Batches;
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use runnel_wire::BatchHeader;
use tokio::sync::oneshot;

const NODES: u64 = 3;
const STEPS: usize = 600;

struct Node {
    dir: PathBuf,
    replica: Option<Replica>,
    /// (term, role) when the election timeout was last set from the seed.
    timer_for: (u64, u8),
    /// Highest high watermark seen, and how far its log has been compared.
    hw_seen: i64,
}

struct InFlight {
    deliver_at: usize,
    msg: Message,
}

struct Sim {
    rng: StdRng,
    step: usize,
    nodes: Vec<Node>,
    net: Vec<InFlight>,
    /// Node isolated from the others until the given step.
    isolated: Option<(u64, usize)>,
    leaders: HashMap<u64, u64>,
    /// Committed batches by base offset: the CRC-covered bytes (offset and epoch aside).
    committed: BTreeMap<i64, Vec<u8>>,
    /// Proposals waiting for their outcome: (payload, base offset, receiver).
    waiting: Vec<(Vec<u8>, i64, oneshot::Receiver<bool>)>,
    acked: Vec<(Vec<u8>, i64)>,
    proposals: usize,
    deletes: usize,
}

fn config(id: u64) -> ReplicaConfig {
    ReplicaConfig::new(id, (1..=NODES).collect())
}

fn open(dir: &std::path::Path, id: u64) -> Replica {
    let log = LogConfig { segment_bytes: 4096, retention_bytes: 12 << 10, delete: true, ..LogConfig::default() };
    Replica::open(dir, log, &config(id), 0).expect("open replica")
}

impl Sim {
    fn new(seed: u64, root: &std::path::Path) -> Sim {
        let nodes = (1..=NODES)
            .map(|id| {
                let dir = root.join(format!("n{id}"));
                Node { replica: Some(open(&dir, id)), dir, timer_for: (u64::MAX, 0), hw_seen: 0 }
            })
            .collect();
        Sim {
            rng: StdRng::seed_from_u64(seed),
            step: 0,
            nodes,
            net: Vec::new(),
            isolated: None,
            leaders: HashMap::new(),
            committed: BTreeMap::new(),
            waiting: Vec::new(),
            acked: Vec::new(),
            proposals: 0,
            deletes: 0,
        }
    }

    fn cut(&self, a: u64, b: u64) -> bool {
        matches!(self.isolated, Some((n, until)) if self.step < until && (n == a || n == b) && a != b)
    }

    fn send(&mut self, msgs: Vec<Message>, faults: bool) {
        for msg in msgs {
            if faults && self.rng.gen_bool(0.05) {
                continue;
            }
            let delay = if faults { self.rng.gen_range(0..4) } else { 0 };
            if faults && self.rng.gen_bool(0.02) {
                self.net.push(InFlight { deliver_at: self.step + delay + 1, msg: msg.clone() });
            }
            self.net.push(InFlight { deliver_at: self.step + delay, msg });
        }
    }

    fn run_step(&mut self, faults: bool, propose: bool) {
        // Faults: crash-restart, isolation.
        if faults && self.rng.gen_bool(0.01) {
            let i = self.rng.gen_range(0..NODES as usize);
            let node = &mut self.nodes[i];
            node.replica = None;
            let r = open(&node.dir, i as u64 + 1);
            // The commit index is re-learned from the leader, but nothing that was
            // committed here may be missing from the disk.
            assert!(r.log().log_end_offset() >= node.hw_seen, "node {} lost committed data in a restart", i + 1);
            node.hw_seen = r.high_watermark();
            node.replica = Some(r);
            node.timer_for = (u64::MAX, 0);
        }
        if faults && self.isolated.is_none_or(|(_, until)| self.step >= until) && self.rng.gen_bool(0.01) {
            let n = self.rng.gen_range(1..=NODES);
            let len = self.rng.gen_range(10..60);
            self.isolated = Some((n, self.step + len));
        }
        // Deliver what is due.
        let due: Vec<InFlight> = {
            let step = self.step;
            let (due, later) = std::mem::take(&mut self.net).into_iter().partition(|m| m.deliver_at <= step);
            self.net = later;
            due
        };
        for m in due {
            if self.cut(m.msg.from, m.msg.to) {
                continue;
            }
            if let Some(r) = self.nodes[(m.msg.to - 1) as usize].replica.as_mut() {
                let _ = r.step(m.msg);
            }
        }
        // Ticks every other step, timers from the seed.
        for i in 0..self.nodes.len() {
            let timeout = self.rng.gen_range(10..20);
            let node = &mut self.nodes[i];
            let r = node.replica.as_mut().expect("replica");
            let now = (r.term(), r.role() as u8);
            if now != node.timer_for {
                r.set_election_timeout(timeout);
                node.timer_for = now;
            }
            if self.step.is_multiple_of(2) {
                r.tick();
            }
        }
        // A client proposes at whoever thinks it leads.
        if propose && self.rng.gen_bool(0.5) {
            let leader = self.nodes.iter_mut().filter_map(|n| n.replica.as_mut()).find(|r| r.is_leader());
            if let Some(r) = leader {
                self.proposals += 1;
                let payload = format!("value-{}", self.proposals).into_bytes();
                // One to three records, so that DeleteRecords can land inside a batch.
                let mut b = BatchBuilder::new(1_000);
                for _ in 0..self.rng.gen_range(1..=3) {
                    b.push(1_000, None, Some(&payload));
                }
                let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
                let h = BatchHeader::parse(&batch).expect("header");
                match r.propose_batch(batch.clone().into(), &h) {
                    Ok(p) => {
                        let rx = r.wait(p.index, p.term, Durability::Committed);
                        self.waiting.push((batch[21..].to_vec(), p.base_offset, rx));
                    }
                    Err(ProposeError::NotLeader(_)) | Err(ProposeError::Busy) => {}
                    Err(e) => panic!("propose: {e:?}"),
                }
            }
        }
        // Trimming: size retention on one replica; now and then DeleteRecords at the leader.
        if self.rng.gen_bool(0.05) {
            let i = self.rng.gen_range(0..self.nodes.len());
            let r = self.nodes[i].replica.as_mut().expect("replica");
            r.enforce_retention(0).expect("retention");
        }
        if propose && self.rng.gen_bool(0.01) {
            let leader = self.nodes.iter_mut().filter_map(|n| n.replica.as_mut()).find(|r| r.is_leader());
            if let Some(r) = leader {
                let to = r.high_watermark() - 3;
                if to > r.log().log_start_offset() {
                    self.deletes += 1;
                    match r.propose_delete_records(to) {
                        Ok(_) | Err(ProposeError::NotLeader(_)) | Err(ProposeError::Busy) => {}
                        Err(e) => panic!("propose DeleteRecords: {e:?}"),
                    }
                }
            }
        }
        // Ready handling: collect, "sync", persisted; until quiet.
        for i in 0..self.nodes.len() {
            for _ in 0..8 {
                let mut out = Vec::new();
                let r = self.nodes[i].replica.as_mut().expect("replica");
                let Some(c) = r.collect(0, &mut out).expect("collect") else { break };
                r.persisted(c, &mut out).expect("persisted");
                self.send(out, faults);
            }
        }
        self.check();
        self.step += 1;
    }

    fn check(&mut self) {
        for node in &mut self.nodes {
            let r = node.replica.as_ref().expect("replica");
            if r.is_leader() {
                let prev = self.leaders.insert(r.term(), r.id());
                assert!(prev.is_none_or(|p| p == r.id()), "two leaders in term {}: {prev:?} and {}", r.term(), r.id());
            }
            let hw = r.high_watermark();
            assert!(hw >= node.hw_seen, "node {} high watermark went back from {} to {hw}", r.id(), node.hw_seen);
            node.hw_seen = hw;
            // Compare everything below the high watermark with what others committed.
            // From the first batch on disk: DeleteRecords may start the log inside it.
            let mut next = r.log().first_batch_offset();
            while next < hw {
                let bytes = r.log().read_range(next, hw, usize::MAX >> 1).expect("read");
                assert!(!bytes.is_empty(), "node {}: nothing readable at {next} below hw {hw}", r.id());
                for item in Batches::new(&bytes) {
                    let (h, range) = item.expect("stored batch parses");
                    if h.base_offset >= hw {
                        break;
                    }
                    assert_eq!(h.base_offset, next, "node {}: gap before offset {}", r.id(), h.base_offset);
                    next = h.next_offset();
                    let body = bytes[range][21..].to_vec();
                    match self.committed.get(&h.base_offset) {
                        Some(b) => {
                            assert!(*b == body, "node {}: offset {} holds a different batch", r.id(), h.base_offset)
                        }
                        None => {
                            self.committed.insert(h.base_offset, body);
                        }
                    }
                }
            }
        }
        let mut still = Vec::new();
        for (payload, offset, mut rx) in std::mem::take(&mut self.waiting) {
            match rx.try_recv() {
                Ok(true) => self.acked.push((payload, offset)),
                Ok(false) => {}
                Err(oneshot::error::TryRecvError::Empty) => still.push((payload, offset, rx)),
                Err(oneshot::error::TryRecvError::Closed) => {}
            }
        }
        self.waiting = still;
    }
}

fn run_seed(seed: u64) {
    let root = tempfile::tempdir().expect("tempdir");
    let mut sim = Sim::new(seed, root.path());
    for _ in 0..STEPS {
        sim.run_step(true, true);
    }
    // Heal: a clean stretch with writes, then a quiet one to let every replica catch up.
    sim.isolated = None;
    for i in 0..300 {
        sim.run_step(false, i < 100);
    }
    let hws: Vec<i64> = sim.nodes.iter().map(|n| n.replica.as_ref().expect("replica").high_watermark()).collect();
    let states: Vec<String> = sim
        .nodes
        .iter()
        .map(|n| {
            let r = n.replica.as_ref().expect("replica");
            format!(
                "{}: {:?} term {} log {}..{} raft {}..{} commit {} applied {}",
                r.id(),
                r.role(),
                r.term(),
                r.log().log_start_offset(),
                r.log().log_end_offset(),
                r.store().first(),
                r.store().last(),
                r.committed_index(),
                r.applied_index()
            )
        })
        .collect();
    assert!(hws.iter().all(|h| *h == hws[0]), "replicas did not converge: {hws:?}\n{}", states.join("\n"));
    assert!(!sim.acked.is_empty(), "nothing was acknowledged in {} proposals", sim.proposals);
    for (payload, offset) in &sim.acked {
        let stored = sim.committed.get(offset);
        assert!(stored == Some(payload), "acknowledged batch at offset {offset} is missing or different");
    }
    eprintln!(
        "seed {seed}: {} proposals, {} acknowledged, {} terms with a leader, {} offsets committed, \
         {} DeleteRecords, log starts {:?}",
        sim.proposals,
        sim.acked.len(),
        sim.leaders.len(),
        hws[0],
        sim.deletes,
        sim.nodes.iter().map(|n| n.replica.as_ref().expect("replica").log().log_start_offset()).collect::<Vec<_>>()
    );
    // Each payload is unique, so equal data batches at two offsets would be a duplicate
    // (Raft's no-op control batches are all alike).
    let mut seen = HashMap::new();
    for (offset, body) in &sim.committed {
        let control = i16::from_be_bytes([body[0], body[1]]) & 0x20 != 0;
        if control {
            continue;
        }
        if let Some(other) = seen.insert(body.clone(), *offset) {
            panic!("the same batch is at offsets {other} and {offset}");
        }
    }
}

#[test]
fn raft_groups_keep_committed_data_under_faults() {
    let seeds: Vec<u64> = match std::env::var("RUNNEL_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("RUNNEL_SIM_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("RUNNEL_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(24);
            let base: u64 = rand::thread_rng().gen();
            (0..n).map(|i| base.wrapping_add(i)).collect()
        }
    };
    for seed in seeds {
        let result = std::panic::catch_unwind(|| run_seed(seed));
        if let Err(e) = result {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("simulation failed with seed {seed} (rerun: RUNNEL_SIM_SEED={seed}): {}", msg.unwrap_or_default());
        }
    }
}

/// Three replicas under `root` with an election timeout of 10 ticks, node 1 elected.
fn led_by_node_1(root: &std::path::Path) -> Vec<Replica> {
    let mut nodes: Vec<Replica> = (1..=NODES).map(|id| open(&root.join(format!("n{id}")), id)).collect();
    for r in nodes.iter_mut() {
        r.set_election_timeout(10);
    }
    for _ in 0..20 {
        nodes[0].tick();
        pump(&mut nodes, None);
    }
    assert!(nodes[0].is_leader(), "node 1 leads");
    nodes
}

/// Proposes one record whose value is `value` at the leader `r`.
fn propose_value(r: &mut Replica, value: &str) {
    let mut b = BatchBuilder::new(1_000);
    b.push(1_000, None, Some(value.as_bytes()));
    let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
    let h = BatchHeader::parse(&batch).expect("header");
    r.propose_batch(batch.into(), &h).expect("propose");
}

/// Hands out every ready of every replica (collected and persisted at once) and delivers
/// the messages, except those to or from `cut`, until nothing moves.
fn pump(nodes: &mut [Replica], cut: Option<u64>) {
    for _ in 0..1_000 {
        let mut msgs = Vec::new();
        for r in nodes.iter_mut() {
            while let Some(c) = r.collect(0, &mut msgs).expect("collect") {
                r.persisted(c, &mut msgs).expect("persisted");
            }
        }
        if msgs.is_empty() {
            return;
        }
        for m in msgs {
            if cut.is_none_or(|n| n != m.to && n != m.from) {
                let _ = nodes[(m.to - 1) as usize].step(m);
            }
        }
    }
    panic!("the replicas did not go quiet");
}

/// A follower that installed a leader's snapshot, and whose sync of it has not ended, may
/// reach its election timeout meanwhile (a slow disk). Raft then reads the entries between
/// what it applied and the snapshot, looking for configuration changes; the log no longer
/// holds them, and raft-rs stopped the process on it (`vendor/raft/PATCHED.md`).
#[test]
fn a_follower_may_campaign_before_its_snapshot_is_synced() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = led_by_node_1(root.path());
    // Node 3 cut off, the other two commit and then delete what node 3 lacks.
    for i in 0..20 {
        propose_value(&mut nodes[0], &format!("value-{i}"));
        pump(&mut nodes, Some(3));
    }
    let hw = nodes[0].high_watermark();
    nodes[0].propose_delete_records(hw).expect("propose DeleteRecords");
    pump(&mut nodes, Some(3));
    assert_eq!(nodes[0].log().log_start_offset(), hw, "the leader deleted its records");
    // Back in touch: the leader's heartbeat finds node 3 behind and sends a snapshot.
    let mut snapshot = None;
    for _ in 0..20 {
        nodes[0].tick();
        let mut msgs = Vec::new();
        for r in nodes.iter_mut() {
            while let Some(c) = r.collect(0, &mut msgs).expect("collect") {
                if r.id() == 3 && r.log().log_start_offset() == hw {
                    snapshot = Some(c);
                    break;
                }
                r.persisted(c, &mut msgs).expect("persisted");
            }
        }
        if snapshot.is_some() {
            break;
        }
        for m in msgs {
            let _ = nodes[(m.to - 1) as usize].step(m);
        }
    }
    let snapshot = snapshot.expect("node 3 installed a snapshot");
    // Its sync has not ended, and its election timeout passes.
    let term = nodes[2].term();
    for _ in 0..40 {
        nodes[2].tick();
    }
    assert!(nodes[2].term() > term || nodes[2].role() != StateRole::Follower, "node 3 campaigned");
    let mut out = Vec::new();
    nodes[2].persisted(snapshot, &mut out).expect("persisted");
    for _ in 0..40 {
        for r in nodes.iter_mut() {
            r.tick();
        }
        pump(&mut nodes, None);
    }
    let leader = nodes.iter().find(|r| r.is_leader()).expect("a leader");
    let hw = leader.high_watermark();
    for r in &nodes {
        assert_eq!(r.high_watermark(), hw, "node {} caught up", r.id());
        assert_eq!(
            r.log().log_start_offset(),
            nodes[0].log().log_start_offset(),
            "node {} starts where the leader does",
            r.id()
        );
    }
}

/// A quiet follower stays quiet when another follower's broker goes (its leader still
/// stands and sends nothing, so a clock woken for it would only start an election); the
/// leader wakes, and so does the follower when its leader's broker goes, campaigning within
/// an election timeout. The driver's simulation found the first: a follower woken by a fellow
/// follower's restart asked for votes a second later, its leader alive and quiet.
#[test]
fn only_the_leader_and_the_followers_of_a_gone_broker_wake() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = led_by_node_1(root.path());
    quiesce(&mut nodes, 0);
    assert!(nodes.iter().all(|r| r.is_quiet()), "the group went quiet");
    let term = nodes[1].term();

    // Node 3's broker goes: node 2 stays quiet through three election timeouts.
    assert!(!nodes[1].peer_gone(3), "a follower of node 1 does not wake for node 3");
    for _ in 0..30 {
        nodes[1].tick();
        pump(&mut nodes, None);
    }
    assert!(nodes[1].is_quiet() && nodes[1].term() == term && nodes[1].role() == StateRole::Follower);
    assert!(nodes[0].peer_gone(3), "the leader wakes for a member");
    assert!(!nodes[0].is_quiet());

    // Node 1's broker goes: node 2 wakes and campaigns within one election timeout (its
    // clock randomized between one and two), not two.
    assert!(nodes[1].peer_gone(1), "a follower of node 1 wakes when node 1 goes");
    assert!(!nodes[1].peer_gone(4), "not a member");
    for _ in 0..10 {
        nodes[1].tick();
    }
    assert!(nodes[1].term() > term || nodes[1].role() != StateRole::Follower, "node 2 campaigned");
}

/// Ticks the leader `nodes[leader]` until it sees every member caught up and goes quiet,
/// and delivers its last heartbeats.
fn quiesce(nodes: &mut [Replica], leader: usize) {
    for _ in 0..5 {
        nodes[leader].tick();
        pump(nodes, None);
        let mut out = Vec::new();
        if nodes[leader].quiesce(|_| true, &mut out) {
            for m in out {
                let _ = nodes[(m.to - 1) as usize].step(m);
            }
            pump(nodes, None);
            return;
        }
    }
    panic!("node {} did not go quiet", leader + 1);
}

/// A follower that keeps entries of an earlier term past its leader's log goes quiet with
/// the leader. A partition group's new leader whose log is all committed appends no empty
/// entry (`vendor/raft/PATCHED.md`), so such entries stay until its first proposal. The
/// driver's simulation found a follower kept awake by them: its quiet leader sent nothing,
/// and it asked for votes every election timeout.
#[test]
fn a_follower_with_entries_past_its_leaders_log_goes_quiet() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = led_by_node_1(root.path());
    // Cut off, node 1 appends two entries no one else gets; nodes 2 and 3 elect a leader,
    // whose log is all committed.
    for i in 0..2 {
        propose_value(&mut nodes[0], &format!("lost-{i}"));
        pump(&mut nodes, Some(1));
    }
    let mut leader = None;
    for _ in 0..100 {
        nodes[1].tick();
        nodes[2].tick();
        pump(&mut nodes, Some(1));
        leader = nodes[1..].iter().position(|r| r.is_leader()).map(|i| i + 1);
        if leader.is_some() {
            break;
        }
    }
    let leader = leader.expect("nodes 2 and 3 elected a leader");
    // Back in touch: node 1 follows, its two entries past the new leader's log end.
    for _ in 0..5 {
        nodes[leader].tick();
        pump(&mut nodes, None);
    }
    assert_eq!(nodes[0].leader(), Some(leader as u64 + 1));
    assert!(
        nodes[0].log().log_end_offset() > nodes[leader].log().log_end_offset(),
        "node 1 keeps the entries it alone appended"
    );
    quiesce(&mut nodes, leader);
    assert!(nodes.iter().all(|r| r.is_quiet()), "the group went quiet, node 1 too");
    let term = nodes[0].term();
    for _ in 0..30 {
        for r in nodes.iter_mut() {
            r.tick();
        }
        pump(&mut nodes, None);
    }
    assert!(nodes.iter().all(|r| r.is_quiet() && r.term() == term), "no election in three timeouts");
}

/// A leader goes quiet without a member whose broker is gone, once that member is out of
/// the in-sync replicas, and not without a majority; its last heartbeat tells the member
/// left out to commit only what it is known to share (the simulation found a member that
/// took entries of its own for committed when told the leader's last index); the member's
/// return wakes the leader, which catches it up and goes quiet again with it.
#[test]
fn a_leader_goes_quiet_without_a_member_whose_broker_is_gone() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut nodes = led_by_node_1(root.path());
    let without_3 = |id: u64| id != 3;
    // Node 3 gone: a record it does not get, and a second for node 2's in-sync replicas.
    propose_value(&mut nodes[0], "while node 3 is away");
    pump(&mut nodes, Some(3));
    let mut out = Vec::new();
    assert!(!nodes[0].quiesce(without_3, &mut out), "node 3 is in sync still");
    for _ in 0..25 {
        nodes[0].tick();
        pump(&mut nodes, Some(3));
    }
    assert_eq!(nodes[0].in_sync(u64::MAX), vec![1, 2], "node 3 left the in-sync replicas");
    assert!(!nodes[0].quiesce(|id| id == 1, &mut out), "no majority");
    assert!(nodes[0].quiesce(without_3, &mut out), "quiet without node 3");
    let committed = nodes[0].committed_index();
    for m in out {
        if m.to == 3 {
            assert!(m.commit < committed, "node 3 is told to commit {} of {committed}", m.commit);
        } else {
            let _ = nodes[(m.to - 1) as usize].step(m);
        }
    }
    pump(&mut nodes, Some(3));
    assert!(nodes[0].is_quiet() && nodes[1].is_quiet());
    assert!(nodes[2].high_watermark() < nodes[0].high_watermark());
    // Node 3 back: the leader wakes, catches it up, and goes quiet again with it.
    assert!(!nodes[1].peer_back(3), "a follower does not wake");
    assert!(nodes[0].peer_back(3) && !nodes[0].is_quiet());
    for _ in 0..5 {
        nodes[0].tick();
        pump(&mut nodes, None);
    }
    assert_eq!(nodes[2].high_watermark(), nodes[0].high_watermark(), "node 3 caught up");
    assert_eq!(nodes[0].in_sync(u64::MAX), vec![1, 2, 3]);
    quiesce(&mut nodes, 0);
    assert!(nodes.iter().all(|r| r.is_quiet()));
}
