//! Deterministic simulation of whole brokers' Raft: each node is a real [`Driver`] hosting
//! a few groups over real on-disk logs, the nodes are connected by an in-memory network,
//! and everything runs on one thread under Tokio's paused clock (time moves only when every
//! task waits), so ticks, timeouts and delays cost no wall time and a run depends on its
//! seed alone. From the seed:
//!
//! - the network drops, delays (and so reorders), duplicates and partitions messages (a
//!   node cut off from all or one of its peers, or one direction of a link lost);
//! - nodes crash, their driver task ending wherever it is, even between writing a round and
//!   syncing it, and restart from their directories, at times having lost what they wrote
//!   but had not synced (a power cut);
//! - a node's rounds hold a broker's 2 MiB of entries at most, or a few hundred bytes or
//!   one group's worth, so that rounds are split as a broker's are under load;
//! - disks are slow (a sync takes virtual time while the node goes on taking proposals) or
//!   fail (the sync fails with EIO through `runnel_storage::fault`: the driver's fatal
//!   action fires, the node is taken as crashed, loses what it had not synced, restarts);
//! - clients propose at the leader, directly or through another node (`Driver::forward`),
//!   and logs are trimmed (size retention, DeleteRecords), so restarted replicas often
//!   catch up from a snapshot.
//!
//! Invariants, checked after every ready and every 10 ms of virtual time:
//!
//! - at most one leader per term in each group (Raft §5.2, election safety);
//! - committed prefixes agree byte for byte across replicas: one batch per offset (§5.3,
//!   log matching);
//! - a replica's high watermark never moves back while it runs nor passes its log end, and
//!   a restart finds everything below it still on disk (§5.4, leader completeness);
//! - every acknowledged proposal (its commit wait returned true) is in the final log exactly
//!   once, at its offset;
//! - once the faults stop, every group's replicas converge;
//! - then, with nothing written, the groups go quiet (`replica/quiet.rs`): a whole second
//!   passes with no Raft message at all (only the drivers' liveness pings); and when the
//!   leader of group 1 then crashes for good, its quiet followers notice (the pings stop),
//!   elect a leader within 10 s and acknowledge a write; once the node is back, everything
//!   converges again;
//! - and with one direction of a link from a follower to group 1's leader lost, the leader
//!   acknowledges a write, and group 1 goes quiet without that follower; when the link
//!   heals, the follower is caught up and back in sync, and the group quiet again.
//!
//! `RUNNEL_SIM_SEEDS=n` sets how many seeds run (default 24); `RUNNEL_SIM_SEED=s` runs one.
//! A failure names its seed, and so does any panic, on the process's own stderr: a panic
//! in a driver's task that poisons a lock ends the process (`runnel_sync::stop`, status 70)
//! before the harness could print what it captured, and one that poisons nothing would
//! otherwise end its task unseen; either fails the seed. `tests/sim.rs` drives bare
//! replicas step by step instead.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_raft::driver::{lock, SyncFuture, INBOUND_QUEUE_BYTES_MAX, INBOUND_QUEUE_MAX, ROUND_BYTES_MAX};
use runnel_raft::queue;
use runnel_raft::{
    Disk, Driver, Durability, Fatal, Hooks, Host, Message, Persistence, ProposeError, Replica, ReplicaConfig,
    SyncPolicy, TcpTransport, Transport,
};
use runnel_storage::{fault, LogConfig};
use runnel_wire::batch::Batches;
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use runnel_wire::BatchHeader;
use tokio::sync::oneshot;
use tokio::time::Instant;

const NODES: u64 = 3;
const GROUPS: u64 = 3;
/// The world moves in steps of this much virtual time: faults, clients, checks.
const STEP: Duration = Duration::from_millis(10);
/// Steps with faults, then with writes but no faults, then at most this many quiet ones
/// for the groups to converge.
const FAULT_STEPS: u64 = 2_500;
const CLEAN_STEPS: u64 = 300;
const SETTLE_STEPS_MAX: u64 = 3_000;
/// Bytes of a batch before what its CRC covers from the attributes on: base offset,
/// length, leader epoch, magic, CRC. The rest is the same on every replica.
const BATCH_PREFIX_BYTES: usize = 21;

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Virtual start of the running seed: the drivers' clock reads time since then.
static EPOCH: Mutex<Option<Instant>> = Mutex::new(None);

fn now_ms() -> i64 {
    guard(&EPOCH).map(|e| Instant::now().duration_since(e).as_millis() as i64).unwrap_or(0)
}

fn log_config() -> LogConfig {
    LogConfig { segment_bytes: 4096, retention_bytes: 12 << 10, delete: true, ..LogConfig::default() }
}

fn replica_config(id: u64) -> ReplicaConfig {
    ReplicaConfig::new(id, (1..=NODES).collect())
}

/// The network: what is in flight is a timer task per message.
struct Net {
    rng: StdRng,
    faulty: bool,
    /// Each running node's inbound queue.
    inbound: BTreeMap<u64, queue::Sender>,
    /// Directed links that lose everything: (from, to).
    cut: BTreeSet<(u64, u64)>,
    sent: u64,
    /// Raft messages sent (not liveness pings), by group.
    raft_sent_by_group: BTreeMap<u64, u64>,
    dropped: u64,
}

impl Net {
    fn raft_sent_in(&self, group: u64) -> u64 {
        self.raft_sent_by_group.get(&group).copied().unwrap_or(0)
    }

    /// Raft messages sent (not liveness pings).
    fn raft_sent(&self) -> u64 {
        self.raft_sent_by_group.values().sum()
    }
}

struct SimTransport {
    net: Arc<Mutex<Net>>,
}

impl Transport for SimTransport {
    fn send(&self, group: u64, msg: Message) {
        let mut net = guard(&self.net);
        net.sent += 1;
        if group != runnel_raft::liveness::LIVENESS_GROUP {
            *net.raft_sent_by_group.entry(group).or_default() += 1;
        }
        let copies = if !net.faulty {
            1
        } else if net.rng.gen_bool(0.03) {
            0
        } else if group != runnel_raft::driver::FORWARD_GROUP && net.rng.gen_bool(0.02) {
            // Raft must shrug off a repeated message. A forwarded request is the broker's
            // business to deduplicate, and the one here is not idempotent.
            2
        } else {
            1
        };
        net.dropped += u64::from(copies == 0);
        for _ in 0..copies {
            let delay = match (net.faulty, net.rng.gen_bool(0.1)) {
                (true, true) => ms(net.rng.gen_range(5..150)),
                _ => ms(net.rng.gen_range(0..3)),
            };
            let (net, msg) = (self.net.clone(), msg.clone());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let net = guard(&net);
                if !net.cut.contains(&(msg.from, msg.to)) {
                    if let Some(tx) = net.inbound.get(&msg.to) {
                        tx.try_send((group, msg));
                    }
                }
            });
        }
    }
}

#[derive(Default)]
struct DiskFaults {
    slow_until: Option<Instant>,
    failing: bool,
}

/// How much of each segment file of a node is durable: a synced file's length when its
/// last successful sync began, and a segment's whole length once the log rolled past it (a
/// log syncs a segment before rolling to the next). It outlives the node's restarts, as the
/// page cache outlives a process: what a crashed process wrote and nobody synced can still
/// be lost to a power cut.
type Durable = Arc<Mutex<HashMap<FileId, u64>>>;

/// A file's inode and birth time: inode numbers of deleted segments are soon reused.
type FileId = (u64, u128);

fn file_id(m: &std::fs::Metadata) -> FileId {
    let born = m.created().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    (m.ino(), born.map_or(0, |d| d.as_nanos()))
}

/// A node's disk: real syncs of the real files, after a virtual delay.
struct SimDisk {
    faults: Arc<Mutex<DiskFaults>>,
    durable: Durable,
    rng: Mutex<StdRng>,
}

impl Disk for SimDisk {
    fn sync(&self, files: Vec<Arc<std::fs::File>>, syncfs: bool, evict: Vec<runnel_storage::Written>) -> SyncFuture {
        // A slow disk is modelled in virtual time: `fault::set_sync_delay` sleeps the thread,
        // which here would stop the whole simulated world with it.
        let slow = guard(&self.faults).slow_until.is_some_and(|until| Instant::now() < until);
        let delay = ms(guard(&self.rng).gen_range(if slow { 50..500 } else { 0..3 }));
        // The contract covers what was written before the call.
        let mut lengths = Vec::new();
        for f in &files {
            let Ok(m) = f.metadata() else { continue };
            lengths.push((file_id(&m), m.len()));
            let synced = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).ok();
            if let Some((dir, base)) = synced.as_deref().and_then(|p| Some((p.parent()?, segment_base(p)?))) {
                guard(&self.durable)
                    .extend(segments(dir).filter(|(b, _, _)| *b < base).map(|(_, ino, len)| (ino, len)));
            }
        }
        let (faults, durable) = (self.faults.clone(), self.durable.clone());
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            // The fault switch is process-wide, but one thread runs the whole simulation
            // and nothing awaits in between: it covers this node's sync alone.
            let failing = guard(&faults).failing;
            fault::set_sync_fails(failing);
            let synced = runnel_storage::sync_files(&files, syncfs);
            fault::set_sync_fails(false);
            if synced.is_ok() {
                guard(&durable).extend(lengths);
                evict.iter().for_each(runnel_storage::Written::evict);
            }
            synced
        })
    }
}

/// How far one replica has been checked.
#[derive(Default)]
struct Seen {
    /// Highest high watermark since the node last started.
    high_watermark: i64,
    /// Everything below this offset was compared with what other replicas committed.
    compared: i64,
}

struct Waiting {
    group: u64,
    body: Vec<u8>,
    offset: i64,
    rx: oneshot::Receiver<bool>,
}

/// What every replica has shown so far, and what broke.
#[derive(Default)]
struct World {
    leaders: BTreeMap<(u64, u64), u64>,
    /// By group and base offset: a committed batch's bytes past `BATCH_PREFIX_BYTES`.
    committed: BTreeMap<u64, BTreeMap<i64, Vec<u8>>>,
    seen: BTreeMap<(u64, u64), Seen>,
    waiting: Vec<Waiting>,
    /// (group, base offset, body) of every proposal whose commit wait returned true.
    acked: Vec<(u64, i64, Vec<u8>)>,
    violations: Vec<String>,
}

impl World {
    fn violate(&mut self, what: String) {
        self.violations.push(what);
    }

    fn check(&mut self, node: u64, group: u64, r: &Replica) {
        if r.is_leader() {
            let first = *self.leaders.entry((group, r.term())).or_insert(node);
            if first != node {
                self.violate(format!("group {group}: two leaders in term {}: {first} and {node}", r.term()));
            }
        }
        let hw = r.high_watermark();
        let end = r.log().log_end_offset();
        if hw > end {
            self.violate(format!("node {node} group {group}: high watermark {hw} past the log end {end}"));
        }
        let seen = self.seen.entry((node, group)).or_default();
        if hw < seen.high_watermark {
            let was = seen.high_watermark;
            self.violate(format!("node {node} group {group}: high watermark went back from {was} to {hw}"));
            return;
        }
        seen.high_watermark = hw;
        let mut next = seen.compared.max(r.log().first_batch_offset());
        let committed = self.committed.entry(group).or_default();
        let mut broken = None;
        while next < hw && broken.is_none() {
            let bytes = match r.log().read_range(next, hw, 1 << 20) {
                Ok(b) if !b.is_empty() => b,
                Ok(_) => {
                    broken = Some(format!("nothing readable at {next} below the high watermark {hw}"));
                    break;
                }
                Err(e) => {
                    broken = Some(format!("reading at {next}: {e}"));
                    break;
                }
            };
            for item in Batches::new(&bytes) {
                let (h, range) = match item {
                    Ok(b) => b,
                    Err(e) => {
                        broken = Some(format!("a stored batch does not parse: {e}"));
                        break;
                    }
                };
                if h.base_offset >= hw {
                    next = hw;
                    break;
                }
                if h.base_offset != next {
                    broken = Some(format!("a batch at {} where {next} was expected", h.base_offset));
                    break;
                }
                next = h.next_offset();
                let body = bytes[range][BATCH_PREFIX_BYTES..].to_vec();
                match committed.get(&h.base_offset) {
                    Some(b) if *b != body => broken = Some(format!("offset {} holds a different batch", h.base_offset)),
                    Some(_) => {}
                    None => {
                        committed.insert(h.base_offset, body);
                    }
                }
            }
        }
        seen.compared = next;
        if let Some(b) = broken {
            self.violate(format!("node {node} group {group}: {b}"));
        }
    }
}

/// Proposes a client batch at `r` (if it leads) and returns its commit wait.
fn propose(r: &mut Replica, group: u64, batch: &[u8]) -> Option<Waiting> {
    let h = BatchHeader::parse(batch).expect("the client's batch parses");
    match r.propose_batch(bytes::Bytes::copy_from_slice(batch), &h) {
        Ok(p) => Some(Waiting {
            group,
            body: batch[BATCH_PREFIX_BYTES..].to_vec(),
            offset: p.base_offset,
            rx: r.wait(p.index, p.term, Durability::Committed),
        }),
        Err(ProposeError::NotLeader(_)) | Err(ProposeError::Busy) => None,
        Err(e) => panic!("group {group}: propose: {e:?}"),
    }
}

struct SimHooks {
    node: u64,
    world: Arc<Mutex<World>>,
    /// raft-rs draws election timeouts from the thread's RNG; the simulation sets them from
    /// the seed whenever a replica's term or role changes (which is always in a ready).
    timers: Mutex<Timers>,
    driver: OnceLock<Weak<Driver>>,
}

struct Timers {
    rng: StdRng,
    /// By group: the (term, role) its timeout was last set for.
    set_for: HashMap<u64, (u64, u8)>,
}

impl SimHooks {
    fn set_timer(&self, group: u64, r: &mut Replica) {
        let mut timers = guard(&self.timers);
        let now = (r.term(), r.role() as u8);
        if timers.set_for.get(&group) != Some(&now) {
            let ticks = timers.rng.gen_range(10..20);
            r.set_election_timeout(ticks);
            timers.set_for.insert(group, now);
        }
    }
}

impl Hooks for SimHooks {
    fn after_ready(&self, group: u64, replica: &mut Replica, _high_watermark_moved: bool) {
        self.set_timer(group, replica);
        guard(&self.world).check(self.node, group, replica);
    }

    /// A client's batch forwarded by another node: group id, then the batch.
    fn on_forward(&self, _from: u64, data: &[u8]) {
        let Some(driver) = self.driver.get().and_then(Weak::upgrade) else { return };
        let (group, batch) = data.split_at(8);
        let group = u64::from_be_bytes(group.try_into().expect("8 bytes"));
        let Some(r) = driver.group(group) else { return };
        let waiting = propose(&mut lock(&r), group, batch);
        if let Some(w) = waiting {
            guard(&self.world).waiting.push(w);
            driver.kick(group);
        }
    }
}

struct Node {
    id: u64,
    /// One directory per group, group `g` at `g - 1`.
    dirs: Vec<PathBuf>,
    sync: SyncPolicy,
    /// The page-cache tail (0: none); a small one drops pages in nearly every round.
    cache_tail_bytes: u64,
    /// A round's bytes at most: a broker's, or a few entries' (rounds split often).
    round_bytes_max: u64,
    driver: Option<Arc<Driver>>,
    /// While crashed: when it comes back.
    down_until: Option<Instant>,
    /// When it crashes again soon after a restart (a crash loop, or a power cut following a
    /// crash), and whether the power goes too.
    crash_at: Option<(Instant, bool)>,
    disk: Arc<Mutex<DiskFaults>>,
    durable: Durable,
    /// Set by the driver's fatal action when a sync failed.
    sync_failed: Arc<Mutex<Option<String>>>,
    starts: u64,
}

#[derive(Default)]
struct Stats {
    proposals: u64,
    forwarded: u64,
    crashes: u64,
    power_cuts: u64,
    sync_failures: u64,
    partitions: u64,
    slow_disks: u64,
    deletes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Faults,
    Clean,
    Quiet,
}

struct Sim {
    seed: u64,
    rng: StdRng,
    net: Arc<Mutex<Net>>,
    world: Arc<Mutex<World>>,
    nodes: Vec<Node>,
    cut_until: Option<Instant>,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64, root: &Path) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let net = Net {
            rng: StdRng::seed_from_u64(rng.gen()),
            faulty: true,
            inbound: BTreeMap::new(),
            cut: BTreeSet::new(),
            sent: 0,
            raft_sent_by_group: BTreeMap::new(),
            dropped: 0,
        };
        let nodes = (1..=NODES)
            .map(|id| Node {
                id,
                dirs: (1..=GROUPS).map(|g| root.join(format!("n{id}")).join(format!("g{g}"))).collect(),
                // Several groups share a node's filesystem: one syncfs covers them.
                sync: if rng.gen_bool(0.5) { SyncPolicy::Filesystem } else { SyncPolicy::File },
                cache_tail_bytes: if rng.gen_bool(0.5) { 0 } else { 16 << 10 },
                round_bytes_max: [1, 256, ROUND_BYTES_MAX][rng.gen_range(0..3)],
                driver: None,
                down_until: None,
                crash_at: None,
                disk: Arc::default(),
                durable: Arc::default(),
                sync_failed: Arc::default(),
                starts: 0,
            })
            .collect();
        Sim {
            seed,
            rng,
            net: Arc::new(Mutex::new(net)),
            world: Arc::default(),
            nodes,
            cut_until: None,
            stats: Stats::default(),
        }
    }

    /// Opens the node's replicas from their directories and starts its driver.
    fn start(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.starts += 1;
        let id = node.id;
        let hooks = Arc::new(SimHooks {
            node: id,
            world: self.world.clone(),
            timers: Mutex::new(Timers { rng: StdRng::seed_from_u64(self.rng.gen()), set_for: HashMap::new() }),
            driver: OnceLock::new(),
        });
        let mut replicas = Vec::new();
        for (g, dir) in (1..=GROUPS).zip(&node.dirs) {
            let mut r = Replica::open(dir, log_config(), &replica_config(id), now_ms())
                .unwrap_or_else(|e| panic!("node {id} group {g}: reopening the replica: {e}"));
            let mut world = guard(&self.world);
            let seen = world.seen.entry((id, g)).or_default();
            // The commit index is re-learned from the leader (it is written lazily), but
            // nothing that was committed here may be missing from the disk.
            let (had, end) = (seen.high_watermark, r.log().log_end_offset());
            seen.high_watermark = r.high_watermark();
            if end < had {
                world.violate(format!("node {id} group {g}: a restart lost committed data: log end {end} < {had}"));
            }
            drop(world);
            hooks.set_timer(g, &mut r);
            replicas.push((g, r));
        }
        // Opening a replica syncs what a crash left unsynced in the page cache (or finds it
        // all synced by a clean close or a roll: `RaftLog::open`), so its segments are
        // durable as they now stand.
        let mut durable = guard(&node.durable);
        for dir in &node.dirs {
            durable.extend(segments(dir).map(|(_, file, len)| (file, len)));
        }
        drop(durable);
        *guard(&node.disk) = DiskFaults::default();
        *guard(&node.sync_failed) = None;
        let (sync_failed, world) = (node.sync_failed.clone(), self.world.clone());
        let host = Host {
            disk: Arc::new(SimDisk {
                faults: node.disk.clone(),
                durable: node.durable.clone(),
                rng: Mutex::new(StdRng::seed_from_u64(self.rng.gen())),
            }),
            on_fatal: Arc::new(move |fatal| match fatal {
                Fatal::Sync(e) => *guard(&sync_failed) = Some(e.to_string()),
                Fatal::Panic(m) => guard(&world).violate(format!("node {id}: the driver panicked: {m}")),
                // The simulated disk's writes do not fail; one that does is a bug.
                Fatal::Write(e) => guard(&world).violate(format!("node {id}: a write failed: {e}")),
            }),
        };
        let (tx, rx) = queue::channel(INBOUND_QUEUE_MAX, INBOUND_QUEUE_BYTES_MAX);
        let transport = Arc::new(SimTransport { net: self.net.clone() });
        let persistence = Persistence {
            sync: node.sync,
            cache_tail_bytes: node.cache_tail_bytes,
            round_bytes_max: node.round_bytes_max,
        };
        let driver = Driver::with_transport(id, transport, rx, hooks.clone(), persistence, now_ms, host);
        hooks.driver.set(Arc::downgrade(&driver)).expect("set once");
        for (g, r) in replicas {
            driver.add_group(g, Arc::new(Mutex::new(r)));
        }
        guard(&self.net).inbound.insert(id, tx);
        node.driver = Some(driver);
        node.down_until = None;
    }

    /// Stops the node's driver wherever it is. With `power_cut`, each log also loses some
    /// of what no sync covered.
    async fn crash(&mut self, i: usize, down: Duration, power_cut: bool) {
        let node = &mut self.nodes[i];
        let Some(driver) = node.driver.take() else { return };
        node.crash_at = None;
        guard(&self.net).inbound.remove(&node.id);
        driver.stop().await;
        drop(driver);
        if power_cut {
            let durable = guard(&node.durable);
            for dir in &node.dirs {
                cut_power(dir, &durable, &mut self.rng)
                    .unwrap_or_else(|e| panic!("{}: cutting the power: {e}", dir.display()));
            }
        }
        node.down_until = Some(Instant::now() + down);
        self.stats.crashes += 1;
        self.stats.power_cuts += u64::from(power_cut);
    }

    fn running(&self, i: usize) -> Option<Arc<Driver>> {
        self.nodes[i].driver.clone()
    }

    async fn step(&mut self, phase: Phase) {
        tokio::time::sleep(STEP).await;
        self.assert_no_violation();
        for i in 0..self.nodes.len() {
            let failed = guard(&self.nodes[i].sync_failed).take();
            if failed.is_some() {
                // The driver has stopped: after a failed fsync what is on disk is unknown.
                self.stats.sync_failures += 1;
                let down = ms(self.rng.gen_range(100..2_000));
                self.crash(i, down, true).await;
            }
            if self.nodes[i].down_until.is_some_and(|t| Instant::now() >= t) {
                self.start(i);
                if phase == Phase::Faults && self.rng.gen_bool(0.3) {
                    let at = Instant::now() + ms(self.rng.gen_range(0..300));
                    self.nodes[i].crash_at = Some((at, self.rng.gen_bool(0.7)));
                }
            }
        }
        if phase == Phase::Faults {
            self.faults().await;
        }
        if phase != Phase::Quiet {
            self.client();
            self.trim();
        }
        self.poll_waiting();
        self.scan();
    }

    async fn faults(&mut self) {
        let n = self.nodes.len();
        for i in 0..n {
            if let Some((_, power_cut)) = self.nodes[i].crash_at.filter(|(at, _)| Instant::now() >= *at) {
                self.nodes[i].crash_at = None;
                let down = ms(self.rng.gen_range(200..3_000));
                self.crash(i, down, power_cut).await;
            }
        }
        let down = self.nodes.iter().filter(|n| n.driver.is_none()).count();
        if down == 0 && self.rng.gen_bool(0.002) {
            let i = self.rng.gen_range(0..n);
            let down = ms(self.rng.gen_range(200..3_000));
            let power_cut = self.rng.gen_bool(0.5);
            self.crash(i, down, power_cut).await;
        }
        if self.cut_until.is_some_and(|t| Instant::now() >= t) {
            self.cut_until = None;
            guard(&self.net).cut.clear();
        }
        if self.cut_until.is_none() && self.rng.gen_bool(0.003) {
            let a = self.rng.gen_range(1..=NODES);
            let b = (a + self.rng.gen_range(1..NODES) - 1) % NODES + 1;
            let links: Vec<(u64, u64)> = match self.rng.gen_range(0..3) {
                // Cut off from everyone.
                0 => (1..=NODES).filter(|o| *o != a).flat_map(|o| [(a, o), (o, a)]).collect(),
                // Cut off from one peer.
                1 => vec![(a, b), (b, a)],
                // Hears b but cannot answer.
                _ => vec![(a, b)],
            };
            guard(&self.net).cut.extend(links);
            self.cut_until = Some(Instant::now() + ms(self.rng.gen_range(500..5_000)));
            self.stats.partitions += 1;
        }
        if self.rng.gen_bool(0.002) {
            let i = self.rng.gen_range(0..n);
            let until = Instant::now() + ms(self.rng.gen_range(1_000..4_000));
            guard(&self.nodes[i].disk).slow_until = Some(until);
            self.stats.slow_disks += 1;
        }
        if self.rng.gen_bool(0.0006) {
            let i = self.rng.gen_range(0..n);
            guard(&self.nodes[i].disk).failing = true;
        }
    }

    /// No more faults: the network heals, disks recover, crashed nodes come back.
    fn heal(&mut self) {
        let mut net = guard(&self.net);
        net.faulty = false;
        net.cut.clear();
        drop(net);
        self.cut_until = None;
        for node in &mut self.nodes {
            *guard(&node.disk) = DiskFaults::default();
            node.crash_at = None;
        }
    }

    /// A client writes to a random group through a random node: at the leader directly,
    /// or forwarded to the leader the node knows of.
    fn client(&mut self) {
        if !self.rng.gen_bool(0.3) {
            return;
        }
        let group = self.rng.gen_range(1..=GROUPS);
        let i = self.rng.gen_range(0..self.nodes.len());
        let records = self.rng.gen_range(1..=3);
        let Some(driver) = self.running(i) else { return };
        let Some(r) = driver.group(group) else { return };
        self.stats.proposals += 1;
        let value = format!("seed {} group {group} value {}", self.seed, self.stats.proposals).into_bytes();
        // One to three records, so that DeleteRecords can land inside a batch.
        let mut b = BatchBuilder::new(1_000);
        for _ in 0..records {
            b.push(1_000, None, Some(&value));
        }
        let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
        let mut rep = lock(&r);
        if rep.is_leader() {
            if let Some(w) = propose(&mut rep, group, &batch) {
                drop(rep);
                guard(&self.world).waiting.push(w);
                driver.kick(group);
            }
        } else if let Some(leader) = rep.leader() {
            drop(rep);
            let mut data = group.to_be_bytes().to_vec();
            data.extend_from_slice(&batch);
            driver.forward(leader, data);
            self.stats.forwarded += 1;
        }
    }

    /// Size retention on a random replica; now and then DeleteRecords at a leader.
    fn trim(&mut self) {
        if self.rng.gen_bool(0.03) {
            let i = self.rng.gen_range(0..self.nodes.len());
            let group = self.rng.gen_range(1..=GROUPS);
            if let Some(r) = self.running(i).and_then(|d| d.group(group)) {
                lock(&r).enforce_retention(now_ms()).expect("retention");
            }
        }
        if self.rng.gen_bool(0.005) {
            let group = self.rng.gen_range(1..=GROUPS);
            for i in 0..self.nodes.len() {
                let Some(driver) = self.running(i) else { continue };
                let Some(r) = driver.group(group) else { continue };
                let mut rep = lock(&r);
                let to = rep.high_watermark() - 3;
                if !rep.is_leader() || to <= rep.log().log_start_offset() {
                    continue;
                }
                match rep.propose_delete_records(to) {
                    Ok(_) | Err(ProposeError::NotLeader(_)) | Err(ProposeError::Busy) => {}
                    Err(e) => panic!("group {group}: propose DeleteRecords: {e:?}"),
                }
                drop(rep);
                driver.kick(group);
                self.stats.deletes += 1;
            }
        }
    }

    fn poll_waiting(&mut self) {
        let mut world = guard(&self.world);
        let mut still = Vec::new();
        for mut w in std::mem::take(&mut world.waiting) {
            match w.rx.try_recv() {
                Ok(true) => world.acked.push((w.group, w.offset, w.body)),
                Ok(false) | Err(oneshot::error::TryRecvError::Closed) => {}
                Err(oneshot::error::TryRecvError::Empty) => still.push(w),
            }
        }
        world.waiting = still;
    }

    /// Checks every running replica (between readies: a follower's high watermark also
    /// moves when it learns the commit index).
    fn scan(&mut self) {
        for node in &self.nodes {
            let Some(driver) = &node.driver else { continue };
            for (g, r) in driver.groups() {
                let r = lock(&r);
                guard(&self.world).check(node.id, g, &r);
            }
        }
        self.assert_no_violation();
    }

    fn assert_no_violation(&self) {
        let violation = guard(&self.world).violations.first().cloned();
        if let Some(v) = violation {
            panic!("{v} (at {} ms){}", now_ms(), self.describe());
        }
    }

    /// Every node runs, every group has one leader, and every replica's high watermark is
    /// that leader's log end.
    fn converged(&self) -> bool {
        if self.nodes.iter().any(|n| n.driver.is_none()) || !guard(&self.world).waiting.is_empty() {
            return false;
        }
        (1..=GROUPS).all(|g| {
            let replicas: Vec<_> = self.nodes.iter().filter_map(|n| n.driver.as_ref()?.group(g)).collect();
            let leaders: Vec<i64> =
                replicas.iter().map(|r| lock(r)).filter(|r| r.is_leader()).map(|r| r.log().log_end_offset()).collect();
            leaders.len() == 1 && replicas.iter().all(|r| lock(r).high_watermark() == leaders[0])
        })
    }

    async fn settle(&mut self, when: &str) {
        for _ in 0..SETTLE_STEPS_MAX {
            self.step(Phase::Quiet).await;
            if self.converged() {
                return;
            }
        }
        panic!("the groups did not converge {when}:{}", self.describe());
    }

    /// Quiescence (see the module doc): converged idle groups send no Raft message for a
    /// second; a leader that then crashes for good is replaced within 10 s by its quiet
    /// followers, and the new leader acknowledges a write; then the node comes back.
    async fn quiesce_then_lose_a_leader(&mut self) {
        // The leaders see every member caught up at their next tick, and the followers
        // stop at the leaders' last heartbeat.
        for _ in 0..50 {
            self.step(Phase::Quiet).await;
        }
        let before = guard(&self.net).raft_sent();
        let activity =
            |sim: &Sim| sim.nodes.iter().map(|n| n.driver.as_ref().map(|d| d.activity())).collect::<Vec<_>>();
        let moved = activity(self);
        for _ in 0..100 {
            self.step(Phase::Quiet).await;
        }
        let sent = guard(&self.net).raft_sent() - before;
        assert!(sent == 0, "idle converged groups sent {sent} Raft messages in a second:{}", self.describe());
        // Nothing woke: the drivers' activity stood still (a broker's leader announcements
        // skip their rounds on it).
        assert_eq!(activity(self), moved, "the activity of drivers whose groups are all quiet moved");
        let old = self.leader_of(1).expect("a converged group has a leader");
        self.crash(old, Duration::from_secs(3600), false).await;
        let mut new = None;
        for _ in 0..1_000 {
            self.step(Phase::Quiet).await;
            new = self.leader_of(1);
            if new.is_some() {
                break;
            }
        }
        let Some(new) = new else {
            panic!("the quiet followers of a crashed leader elected no leader in 10 s:{}", self.describe())
        };
        // It campaigned at a tick of its driver, awake.
        let now = activity(self);
        assert!(now[new] > moved[new], "the new leader's driver's activity moved: {moved:?} then {now:?}");
        self.write_acknowledged(new, 1, "after the leader's crash").await;
        self.nodes[old].down_until = Some(Instant::now());
    }

    /// A one-way fault: group 1's leader stops hearing one of its followers, which still
    /// hears it (the follower's pings and answers are lost). The leader's driver takes the
    /// follower's broker for gone. A write is acknowledged by the other two, and group 1
    /// goes quiet without the follower once it has left the in-sync replicas; the leader's
    /// last heartbeat puts the follower to rest too. When the link heals, the follower's
    /// pings wake the leader, which catches it up, and the group goes quiet again with the
    /// follower in sync. (Groups that the follower leads may not go quiet while the fault
    /// lasts: the leader of group 1 takes their leader for gone and asks for votes, in vain,
    /// every election timeout, as a Raft follower cut off from its leader does.)
    async fn quiet_through_a_one_way_fault(&mut self) {
        for _ in 0..50 {
            self.step(Phase::Quiet).await;
        }
        let l = self.leader_of(1).expect("a converged group has a leader");
        let (leader, follower) = (self.nodes[l].id, self.nodes[(l + 1) % self.nodes.len()].id);
        guard(&self.net).cut.insert((follower, leader));
        let group_1 = |sim: &Sim| -> Vec<Arc<Mutex<Replica>>> {
            sim.nodes.iter().filter_map(|n| n.driver.as_ref()?.group(1)).collect()
        };
        let in_sync = |sim: &Sim| lock(&group_1(sim)[l]).in_sync(1_000);
        for _ in 0..1_000 {
            self.step(Phase::Quiet).await;
            if !in_sync(self).contains(&follower) {
                break;
            }
        }
        assert!(!in_sync(self).contains(&follower), "{follower} stayed in sync, unheard, for 10 s:{}", self.describe());
        self.write_acknowledged(l, 1, "with a one-way fault").await;
        let quiet = |sim: &Sim| group_1(sim).iter().all(|r| lock(r).is_quiet());
        for _ in 0..500 {
            self.step(Phase::Quiet).await;
            if quiet(self) {
                break;
            }
        }
        assert!(quiet(self), "group 1 did not go quiet in 5 s without {follower}:{}", self.describe());
        let before = guard(&self.net).raft_sent_in(1);
        for _ in 0..100 {
            self.step(Phase::Quiet).await;
        }
        let sent = guard(&self.net).raft_sent_in(1) - before;
        assert!(sent == 0, "group 1, quiet without {follower}, sent {sent} messages in a second:{}", self.describe());
        assert_eq!(self.leader_of(1), Some(l), "group 1's leader changed");

        guard(&self.net).cut.clear();
        let healed = |sim: &Sim| in_sync(sim).contains(&follower) && quiet(sim);
        for _ in 0..500 {
            self.step(Phase::Quiet).await;
            if healed(self) {
                break;
            }
        }
        assert!(
            healed(self),
            "{follower} was not back in sync with group 1 quiet 5 s after the heal:{}",
            self.describe()
        );
        let replicas = group_1(self);
        assert!(lock(&replicas[l]).has_everything(follower, 0), "{follower} has group 1's whole log");
    }

    /// The node at `i` in `self.nodes` that leads `group`, if one does.
    fn leader_of(&self, group: u64) -> Option<usize> {
        let leads = |n: &Node| n.driver.as_ref().and_then(|d| d.group(group)).is_some_and(|r| lock(&r).is_leader());
        self.nodes.iter().position(leads)
    }

    /// Proposes a write to `group` at node `i`, its leader, and waits up to 5 s for it to be
    /// acknowledged.
    async fn write_acknowledged(&mut self, i: usize, group: u64, when: &str) {
        let acked = guard(&self.world).acked.len();
        let value = format!("seed {} {when}", self.seed).into_bytes();
        let mut b = BatchBuilder::new(1_000);
        b.push(1_000, None, Some(&value));
        let batch = b.finish(CODEC_NONE, ProducerFields::NONE).expect("batch");
        let driver = self.running(i).expect("the leader runs");
        let r = driver.group(group).expect("the group");
        let waiting = propose(&mut lock(&r), group, &batch).expect("the leader takes a write");
        guard(&self.world).waiting.push(waiting);
        driver.kick(group);
        for _ in 0..500 {
            self.step(Phase::Quiet).await;
            if guard(&self.world).acked.len() > acked {
                return;
            }
        }
        panic!("the leader of group {group} acknowledged no write {when} in 5 s:{}", self.describe());
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let Some(driver) = &node.driver else {
                out += &format!("\n{}: down", node.id);
                continue;
            };
            for (g, r) in driver.groups() {
                let r = lock(&r);
                out += &format!(
                    "\n{} group {g}: {:?}{} term {} leader {:?} log {}..{} hw {} raft {}..{} commit {}",
                    node.id,
                    r.role(),
                    if r.is_quiet() { " (quiet)" } else { "" },
                    r.term(),
                    r.leader(),
                    r.log().log_start_offset(),
                    r.log().log_end_offset(),
                    r.high_watermark(),
                    r.store().first(),
                    r.store().last(),
                    r.committed_index(),
                );
            }
        }
        out
    }

    /// A short digest of what was committed, to compare two runs of one seed.
    fn digest(&self) -> u64 {
        let world = guard(&self.world);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (g, batches) in &world.committed {
            for (offset, body) in batches {
                for b in g.to_be_bytes().iter().chain(&offset.to_be_bytes()).chain(body) {
                    h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        h
    }
}

fn segment_base(path: &Path) -> Option<i64> {
    path.file_name()?.to_str()?.strip_suffix(".log")?.parse().ok()
}

/// The log segments in `dir`: (base offset, file, length).
fn segments(dir: &Path) -> impl Iterator<Item = (i64, FileId, u64)> {
    std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| {
        let path = e.ok()?.path();
        let m = std::fs::metadata(&path).ok()?;
        Some((segment_base(&path)?, file_id(&m), m.len()))
    })
}

/// A power cut: the log's active segment, the only one a sync may not have covered, keeps
/// what its last sync covered, plus whatever part of the rest writeback happened to save,
/// which can end inside a batch. A segment no sync has covered yet is new since the last
/// one (a roll, or a snapshot installed: then the batches below the snapshot point, which
/// the log synced as it wrote them, are kept).
fn cut_power(dir: &Path, durable: &HashMap<FileId, u64>, rng: &mut StdRng) -> io::Result<()> {
    let Some((base, file, len)) = segments(dir).max() else { return Ok(()) };
    let kept = match durable.get(&file) {
        Some(d) => (*d).min(len),
        None => {
            let bytes = std::fs::read(dir.join(format!("{base:020}.log")))?;
            let first_offset = snapshot_point(dir)?;
            Batches::new(&bytes)
                .map_while(|b| b.ok())
                .take_while(|(h, _)| h.base_offset < first_offset)
                .last()
                .map_or(0, |(_, range)| range.end as u64)
        }
    };
    let saved = rng.gen_range(kept..=len);
    std::fs::OpenOptions::new().write(true).open(dir.join(format!("{base:020}.log")))?.set_len(saved)
}

/// Where the Raft log starts, from `raft.state` (`v1 term vote commit index term offset`);
/// 0 for a new log whose first state was never put in place.
fn snapshot_point(dir: &Path) -> io::Result<i64> {
    let state = match std::fs::read_to_string(dir.join("raft.state")) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        read => read?,
    };
    let field = state.split_whitespace().nth(6);
    field.and_then(|f| f.parse().ok()).ok_or_else(|| io::Error::other(format!("raft.state: {state:?}")))
}

async fn run_seed(seed: u64) {
    *guard(&EPOCH) = Some(Instant::now());
    let root = tempfile::tempdir().expect("tempdir");
    let mut sim = Sim::new(seed, root.path());
    for i in 0..sim.nodes.len() {
        sim.start(i);
    }
    for _ in 0..FAULT_STEPS {
        sim.step(Phase::Faults).await;
    }
    sim.heal();
    for _ in 0..CLEAN_STEPS {
        sim.step(Phase::Clean).await;
    }
    sim.settle("once the faults stopped").await;
    sim.quiesce_then_lose_a_leader().await;
    sim.settle("once the crashed leader was back").await;
    sim.quiet_through_a_one_way_fault().await;
    sim.settle("once the one-way fault healed").await;
    let world = guard(&sim.world);
    assert!(!world.acked.is_empty(), "nothing was acknowledged in {} proposals", sim.stats.proposals);
    for (group, offset, body) in &world.acked {
        let stored = world.committed.get(group).and_then(|c| c.get(offset));
        assert!(stored == Some(body), "group {group}: acknowledged batch at offset {offset} is missing or different");
    }
    for (group, batches) in &world.committed {
        // Each value is unique, so equal data batches at two offsets would be a duplicate
        // (Raft's own control batches are all alike).
        let mut seen = HashMap::new();
        for (offset, body) in batches {
            let control = i16::from_be_bytes([body[0], body[1]]) & 0x20 != 0;
            if let Some(other) = seen.insert(body, *offset).filter(|_| !control) {
                panic!("group {group}: the same batch is at offsets {other} and {offset}");
            }
        }
    }
    let offsets: usize = world.committed.values().map(|c| c.len()).sum();
    let (terms, acked) = (world.leaders.len(), world.acked.len());
    drop(world);
    let net = guard(&sim.net);
    let s = &sim.stats;
    eprintln!(
        "seed {seed}: {} proposals ({} forwarded), {acked} acknowledged, {offsets} batches committed, {terms} \
         group terms with a leader; {} crashes ({} power cuts, {} failed syncs), {} partitions, {} slow disks, \
         {} DeleteRecords; {} messages, {} dropped; {:.1} s virtual; digest {:016x}",
        s.proposals,
        s.forwarded,
        s.crashes,
        s.power_cuts,
        s.sync_failures,
        s.partitions,
        s.slow_disks,
        s.deletes,
        net.sent,
        net.dropped,
        now_ms() as f64 / 1000.0,
        sim.digest(),
    );
}

/// The seed running now, and whether anything panicked while it ran.
static RUNNING_SEED: AtomicU64 = AtomicU64::new(0);
static PANICKED: AtomicBool = AtomicBool::new(false);

/// Writes every panic, with the running seed, to the process's stderr, which the test
/// harness does not capture: it survives an exit that follows (a poisoned lock stops the
/// process), and a task's panic that nothing awaits still fails its seed.
fn report_panics_uncaptured() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            let seed = RUNNING_SEED.load(Ordering::SeqCst);
            let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
            let _ = writeln!(
                io::stderr().lock(),
                "sim_driver: panic with seed {seed} (rerun: RUNNEL_SIM_SEED={seed}) in thread {thread}: {info}\n{}",
                std::backtrace::Backtrace::force_capture()
            );
            default(info);
        }));
    });
}

/// Turns the process-wide disk faults off, also when a seed fails.
struct ResetFaults;

impl Drop for ResetFaults {
    fn drop(&mut self) {
        fault::set_sync_fails(false);
        fault::set_sync_delay(Duration::ZERO);
    }
}

#[test]
fn drivers_keep_committed_data_through_crashes_partitions_and_disk_faults() {
    let seeds: Vec<u64> = match std::env::var("RUNNEL_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("RUNNEL_SIM_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("RUNNEL_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(24);
            let base: u64 = rand::thread_rng().gen();
            (0..n).map(|i| base.wrapping_add(i)).collect()
        }
    };
    // The disk fault switches are process statics: seeds run one after another, here.
    let _reset = ResetFaults;
    report_panics_uncaptured();
    for seed in seeds {
        RUNNING_SEED.store(seed, Ordering::SeqCst);
        PANICKED.store(false, Ordering::SeqCst);
        let result = std::panic::catch_unwind(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            rt.block_on(run_seed(seed));
        });
        fault::set_sync_fails(false);
        if let Err(e) = result {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("simulation failed with seed {seed} (rerun: RUNNEL_SIM_SEED={seed}): {}", msg.unwrap_or_default());
        }
        assert!(
            !PANICKED.load(Ordering::SeqCst),
            "simulation failed with seed {seed} (rerun: RUNNEL_SIM_SEED={seed}): a task panicked (above)"
        );
    }
}

/// The `Transport` contract, run against the broker's transport and the simulator's (with
/// its faults off): a message reaches the driver it names, as `(group, message)`; one for
/// an unknown peer is dropped; `send` never blocks, however much is queued.
async fn check_transport(transport: &dyn Transport, peer_inbound: &mut queue::Receiver) {
    let m = Message { from: 1, to: 2, term: 7, index: 42, ..Message::default() };
    transport.send(3, Message { to: 99, ..m.clone() });
    transport.send(3, m.clone());
    let got = tokio::time::timeout(Duration::from_secs(10), peer_inbound.recv()).await;
    assert_eq!(got.expect("the message arrives in time"), Some((3, m.clone())));
    let start = std::time::Instant::now();
    for _ in 0..2 * INBOUND_QUEUE_MAX {
        transport.send(3, m.clone());
    }
    assert!(start.elapsed() < Duration::from_secs(10), "send blocked");
}

#[test]
fn transports_keep_the_contract() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let (tx, mut rx) = queue::channel(INBOUND_QUEUE_MAX, INBOUND_QUEUE_BYTES_MAX);
        let net = Net {
            rng: StdRng::seed_from_u64(0),
            faulty: false,
            inbound: BTreeMap::new(),
            cut: BTreeSet::new(),
            sent: 0,
            raft_sent_by_group: BTreeMap::new(),
            dropped: 0,
        };
        let net = Arc::new(Mutex::new(net));
        guard(&net).inbound.insert(2, tx);
        check_transport(&SimTransport { net }, &mut rx).await;

        // A free port for the peer to listen on.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").to_string();
        let (tx, mut rx) = queue::channel(INBOUND_QUEUE_MAX, INBOUND_QUEUE_BYTES_MAX);
        let _peer = TcpTransport::start(Some(&addr), HashMap::new(), tx, Default::default()).await.expect("listen");
        let (tx, _rx) = queue::channel(INBOUND_QUEUE_MAX, INBOUND_QUEUE_BYTES_MAX);
        let transport =
            TcpTransport::start(None, HashMap::from([(2, addr)]), tx, Default::default()).await.expect("dial");
        check_transport(&transport, &mut rx).await;
    });
}
