//! The multi-Raft driver of one broker: one task runs every group hosted here. It ticks
//! every awake group every 100 ms (a quiet one, idle, is left alone until something wakes
//! it: `replica/quiet.rs`), pings peer brokers so that quiet groups learn of a dead one
//! ([`Liveness`]), steps messages from peers into their groups, and handles their readies
//! in rounds: collect every group with work (writing entries, no fsync), sync all the
//! files written with one `syncfs` (or one fdatasync each), then finish every group and
//! send its messages. A round costs one fsync however many groups it covers, and the next
//! round is written and its sync started while one syncs (pipelined persistence:
//! `rounds.rs`).
//!
//! What the driver needs from outside Raft comes through seams a simulation can replace:
//! peers through a [`Transport`], the disk sync through a [`Disk`], and what to do when it
//! cannot go on through [`Host::on_fatal`]. [`Driver::start`] wires up a broker's (TCP, the
//! blocking pool, exit); `tests/sim_driver.rs` runs several drivers in one process on
//! virtual time. Groups are kept in id order and the loop polls its sources in a fixed
//! order, so a run on a paused single-threaded runtime depends on its inputs alone.

use runnel_sync::{LockExt, RwLockExt};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use raft::eraftpb::Message;
use runnel_storage::{WarmPlan, Written};
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::{error, warn};

use crate::liveness::{ping_incarnation, Heard, Liveness, LIVENESS_GROUP};
use crate::queue;
use crate::replica::Replica;
use crate::rounds::{Round, Rounds, Taken};
use crate::transport::{PeerLinks, TcpTransport, Transport};
use crate::warms::Warms;

/// Interval between Raft ticks; election and heartbeat timeouts count these.
pub const TICK: Duration = Duration::from_millis(100);
/// Inbound messages queued for the driver before new ones are dropped.
pub const INBOUND_QUEUE_MAX: usize = 65_536;
/// Inbound bytes queued for the driver before new messages are dropped (while it waits
/// on a slow disk, say).
pub const INBOUND_QUEUE_BYTES_MAX: usize = 64 << 20;
/// Inbound messages the driver takes off its queue at once.
const INBOUND_BATCH_MAX: usize = 4096;
/// New terms or votes one round stages at most (each holds a file open until the round
/// has synced it); groups past that wait for the next round.
const STAGED_STATES_MAX: usize = 256;
/// Bytes of entries one round writes, about, at most: the groups past it go in the next
/// round, which starts at once if there is room. A round's writes into the page cache and
/// its sync run one after the other, so without a bound a producer's burst of five 1.5 MB
/// requests became one round: 1.5 ms of writing with the disk idle, then 3.5 ms of sync.
/// Bounded, the first part syncs while the rest is written. One broker alone at durable-512
/// (with the evictor, `runnel_storage::evict_later`) sent 1.54M and 1.56M records/s with 1.5
/// and 3 MiB, 1.44M without (means of three to seven alternating runs; docs/bench.md,
/// "Rounds of a few MB"). [`Persistence::round_bytes_max`].
pub const ROUND_BYTES_MAX: u64 = 2 << 20;
/// The batch buffer is kept between rounds up to this many messages; one a burst grew
/// larger (up to 800 KB at [`INBOUND_BATCH_MAX`]) is freed after that round.
const INBOUND_BATCH_KEEP: usize = 256;

/// What the broker does with a group after each ready (with the replica locked).
pub trait Hooks: Send + Sync {
    fn after_ready(&self, group: u64, replica: &mut Replica, high_watermark_moved: bool);
    /// A request another broker forwarded with [`Driver::forward`] (e.g. to the metadata
    /// leader); `from` is its Raft id.
    fn on_forward(&self, from: u64, data: &[u8]);
}

/// Pseudo group id carrying forwarded requests instead of Raft messages.
pub const FORWARD_GROUP: u64 = u64::MAX;

pub use crate::rounds::{SharedReplica, SyncFuture};

/// How a round's written entries reach the disk before they count as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// One `syncfs` for a round that wrote two or more files, else fdatasync
    /// (`log.fsync.scope=filesystem`).
    Filesystem,
    /// One fdatasync per file written (`log.fsync.scope=file`).
    File,
    /// No sync: the OS flushes when it likes (`log.fsync.policy=never`, as Kafka's default).
    Never,
}

/// How a driver persists its groups' logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persistence {
    pub sync: SyncPolicy,
    /// Bytes of the most recently synced log left in the page cache; older synced pages
    /// are dropped after a later round's sync ([`runnel_storage::CacheTail`],
    /// `log.cache.tail.bytes`). 0 leaves the page cache to the kernel. Only with a sync:
    /// unsynced pages cannot be dropped.
    pub cache_tail_bytes: u64,
    /// A round takes no more groups once their entries hold this many bytes; it always
    /// takes one. [`ROUND_BYTES_MAX`] for a broker; the simulation sets it small too, so
    /// that its rounds of a few KB are split.
    pub round_bytes_max: u64,
}

impl From<SyncPolicy> for Persistence {
    fn from(sync: SyncPolicy) -> Persistence {
        Persistence { sync, cache_tail_bytes: 0, round_bytes_max: ROUND_BYTES_MAX }
    }
}

pub fn lock(r: &SharedReplica) -> MutexGuard<'_, Replica> {
    r.lock_or_stop()
}

/// Makes the files a round wrote durable.
///
/// Contract: the future resolves to `Ok` only once everything written to `files` before
/// the call is on stable storage (with `syncfs`, one `syncfs` may cover them all, as in
/// [`runnel_storage::sync_files`]); an error means what reached the disk is unknown, and
/// the driver stops ([`Fatal::Sync`]). Once synced, the ranges in `evict` (synced already,
/// by earlier rounds) may be dropped from the page cache ([`Written::evict`]). The driver
/// awaits it with no replica locked, so proposals and reads go on meanwhile, and may call
/// `sync` again before an earlier future resolved (a round in flight: `rounds.rs`); it
/// takes the results in call order.
pub trait Disk: Send + Sync {
    fn sync(&self, files: Vec<Arc<File>>, syncfs: bool, evict: Vec<Written>) -> SyncFuture;

    /// Drops the ranges in `evict`, synced already, from the page cache, with no sync.
    fn evict(&self, evict: Vec<Written>) -> SyncFuture {
        Box::pin(async move {
            evict.iter().for_each(Written::evict);
            Ok(())
        })
    }

    /// Reads what `plan` covers into the page cache (the bytes are not kept): entries a
    /// leader is about to send a follower behind (`store/warm.rs`). Here, at once.
    fn warm(&self, plan: WarmPlan) -> SyncFuture {
        Box::pin(std::future::ready(plan.warm_up()))
    }
}

/// A broker's disk: [`runnel_storage::sync_files`] on Tokio's blocking pool, so a slow
/// flush holds up no other task. A thread that syncs asks once for a short scheduler slice
/// ([`crate::sched`]), so it starts soon after it is woken even on a busy core.
pub struct BlockingPoolDisk;

impl Disk for BlockingPoolDisk {
    fn sync(&self, files: Vec<Arc<File>>, syncfs: bool, evict: Vec<Written>) -> SyncFuture {
        // Started now, not when first polled: the driver starts a round's sync and goes on
        // writing the next round while it runs.
        let syncing = tokio::task::spawn_blocking(move || {
            crate::sched::short_slice_once();
            let started = std::time::Instant::now();
            let synced = runnel_storage::sync_files(&files, syncfs);
            runnel_metrics::get().flush_time.observe(started.elapsed().as_secs_f64());
            if synced.is_ok() {
                // Off the acknowledgements' path, unless the evictor is that far behind.
                if let Err(evict) = runnel_storage::evict_later(evict) {
                    evict.iter().for_each(Written::evict);
                }
            }
            synced
        });
        Box::pin(async move {
            match syncing.await {
                Ok(synced) => synced,
                // The runtime is shutting down and dropped the sync before it ran: nothing
                // was synced, so nothing is acknowledged, and the driver's task is dropped
                // next. Not a disk failure (which would exit with 70).
                Err(e) if e.is_cancelled() => std::future::pending().await,
                Err(e) => Err(io::Error::other(e)),
            }
        })
    }

    fn evict(&self, evict: Vec<Written>) -> SyncFuture {
        let evict = match runnel_storage::evict_later(evict) {
            Ok(()) => return Box::pin(std::future::ready(Ok(()))),
            Err(evict) => evict,
        };
        let evicting = tokio::task::spawn_blocking(move || evict.iter().for_each(Written::evict));
        Box::pin(async move {
            // Advice only: a runtime shutting down that dropped it loses nothing.
            let _ = evicting.await;
            Ok(())
        })
    }

    fn warm(&self, plan: WarmPlan) -> SyncFuture {
        runnel_metrics::get().disk_read(runnel_metrics::DiskRead::Replicate);
        let reading = tokio::task::spawn_blocking(move || plan.warm_up());
        Box::pin(async move { reading.await.map_err(io::Error::other)? })
    }
}

/// Why a driver cannot go on. Its task has ended, or ends once [`Host::on_fatal`] returns.
#[derive(Debug)]
pub enum Fatal {
    /// Syncing a round's entries failed. The page cache may have dropped the dirty pages:
    /// what is on disk is unknown, so these replicas must not vote or acknowledge again.
    /// A restart recovers the logs and catches up from peers.
    Sync(io::Error),
    /// Writing a round's entries or hard state failed (a full or failing disk): the log may
    /// end in a torn write and raft-rs has handed out that ready for good, so the replica
    /// cannot go on. A restart truncates the torn tail and catches up from peers.
    Write(io::Error),
    /// The driver's task panicked (raft-rs panics on broken invariants), with this message.
    Panic(String),
}

/// What a driver needs from the process around it besides peers and hooks.
/// [`Host::default`] is a broker's: syncs on the blocking pool, and exits the process with
/// status 70 when the driver cannot go on (a broker whose groups no longer step or persist
/// must not linger). A simulation supplies its own.
#[derive(Clone)]
pub struct Host {
    pub disk: Arc<dyn Disk>,
    /// Called once when the driver cannot go on; the driver has logged why.
    pub on_fatal: Arc<dyn Fn(Fatal) + Send + Sync>,
}

impl Default for Host {
    fn default() -> Host {
        Host { disk: Arc::new(BlockingPoolDisk), on_fatal: Arc::new(|_| std::process::exit(70)) }
    }
}

/// The driver's task and the one watching it for a panic.
struct Task {
    run: AbortHandle,
    watch: JoinHandle<()>,
}

pub struct Driver {
    id: u64,
    groups: RwLock<BTreeMap<u64, SharedReplica>>,
    dirty: Mutex<BTreeSet<u64>>,
    wake: Notify,
    transport: Arc<dyn Transport>,
    hooks: Arc<dyn Hooks>,
    sync: SyncPolicy,
    /// Bytes of the newest synced log the page cache keeps ([`Rounds::new`]).
    cache_tail_bytes: u64,
    round_bytes_max: u64,
    now_ms: fn() -> i64,
    host: Host,
    task: Mutex<Option<Task>>,
    /// Marked at every turn of the driver's loop (at least every tick while it runs) with
    /// no round in flight, and whenever a round finishes: a sync that never returns stops it
    /// though the loop goes on turning.
    beat: runnel_sync::Beat,
    /// See [`Driver::activity`].
    activity: AtomicU64,
}

impl Driver {
    /// Listens for peers on `listen` (none for a broker without peers, a cluster of one),
    /// dials `peers` (Raft id -> address) and starts the driver task. Must run inside a
    /// Tokio runtime.
    pub async fn start(
        id: u64,
        listen: Option<&str>,
        peers: HashMap<u64, String>,
        hooks: Arc<dyn Hooks>,
        persistence: Persistence,
        now_ms: fn() -> i64,
        links: PeerLinks,
    ) -> io::Result<Arc<Driver>> {
        let (tx, rx) = queue::channel(INBOUND_QUEUE_MAX, INBOUND_QUEUE_BYTES_MAX);
        let transport = TcpTransport::start(listen, peers, tx, links).await?;
        Ok(Driver::with_transport(id, Arc::new(transport), rx, hooks, persistence, now_ms, Host::default()))
    }

    /// Starts the driver task over any transport: messages to peers go to `transport`,
    /// messages from peers arrive on `inbound` (whose sender the transport feeds, and
    /// whose bound is what the driver queues). Must run inside a Tokio runtime.
    pub fn with_transport(
        id: u64,
        transport: Arc<dyn Transport>,
        inbound: queue::Receiver,
        hooks: Arc<dyn Hooks>,
        persistence: Persistence,
        now_ms: fn() -> i64,
        host: Host,
    ) -> Arc<Driver> {
        let driver = Arc::new(Driver {
            id,
            groups: RwLock::new(BTreeMap::new()),
            dirty: Mutex::new(BTreeSet::new()),
            wake: Notify::new(),
            transport,
            hooks,
            sync: persistence.sync,
            cache_tail_bytes: if persistence.sync == SyncPolicy::Never { 0 } else { persistence.cache_tail_bytes },
            round_bytes_max: persistence.round_bytes_max,
            now_ms,
            host,
            task: Mutex::new(None),
            beat: runnel_sync::Beat::new(),
            activity: AtomicU64::new(0),
        });
        let run = tokio::spawn(driver.clone().run(inbound));
        let abort = run.abort_handle();
        let on_fatal = driver.host.on_fatal.clone();
        let watch = tokio::spawn(async move {
            if let Err(e) = run.await {
                if e.is_panic() {
                    // Stop, as after a failed fsync.
                    error!("raft driver panicked; stopping");
                    on_fatal(Fatal::Panic(panic_message(e.into_panic())));
                }
            }
        });
        *driver.task.lock_or_stop() = Some(Task { run: abort, watch });
        driver
    }

    /// Ends the driver task at once, as a crash would: nothing more is stepped, written,
    /// synced or sent, and the driver lets go of its groups (a restart reopens them from
    /// their directories). The transport is left as it is. Returns once the task is gone;
    /// not to be called from the task itself (a hook).
    pub async fn stop(&self) {
        let task = self.task.lock_or_stop().take();
        if let Some(task) = task {
            task.run.abort();
            let _ = task.watch.await;
        }
        self.groups.write_or_stop().clear();
    }

    /// When the driver last made progress (see the field); the broker's watchdog reads it.
    pub fn beat(&self) -> &runnel_sync::Beat {
        &self.beat
    }

    /// A count that moves at the end of every tick at which a group that may go quiet was
    /// awake. While it stands still, no such group has changed its role, term, members or
    /// in-sync replicas: a quiet group's stand still, and a group that wakes (a message, a
    /// proposal, a peer gone, a new group) is awake at the next tick. Read it before looking
    /// at the groups: a later read that finds it unchanged means nothing moved since. The
    /// broker's leader announcements skip their pass over every partition then.
    pub fn activity(&self) -> u64 {
        self.activity.load(Ordering::Acquire)
    }

    /// How this driver makes its writes durable.
    pub fn sync_policy(&self) -> SyncPolicy {
        self.sync
    }

    pub fn add_group(&self, group: u64, replica: SharedReplica) {
        self.add_groups(vec![(group, replica)]);
    }

    /// Adds groups together: their first readies (a new group's first state, the preferred
    /// leader's election) then share the next rounds and their syncs.
    pub fn add_groups(&self, groups: Vec<(u64, SharedReplica)>) {
        let ids: Vec<u64> = groups.iter().map(|(g, _)| *g).collect();
        self.groups.write_or_stop().extend(groups);
        self.dirty.lock_or_stop().extend(ids);
        self.wake.notify_one();
    }

    pub fn remove_group(&self, group: u64) -> Option<SharedReplica> {
        self.groups.write_or_stop().remove(&group)
    }

    pub fn group(&self, group: u64) -> Option<SharedReplica> {
        self.groups.read_or_stop().get(&group).cloned()
    }

    pub fn groups(&self) -> Vec<(u64, SharedReplica)> {
        self.groups.read_or_stop().iter().map(|(g, r)| (*g, r.clone())).collect()
    }

    /// Asks for the group's ready to be handled soon (after a proposal).
    pub fn kick(&self, group: u64) {
        self.dirty.lock_or_stop().insert(group);
        self.wake.notify_one();
    }

    /// Sends `data` to the broker with Raft id `to`, whose hooks get it (best effort: the
    /// sender retries if it sees no effect).
    pub fn forward(&self, to: u64, data: Vec<u8>) {
        let m = Message { to, from: self.id, context: data.into(), ..Default::default() };
        self.transport.send(FORWARD_GROUP, m);
    }

    /// Messages to the broker with Raft id `id` go to `addr` from now on (a broker that
    /// registered after this one started: a metadata observer, say).
    pub fn add_peer(&self, id: u64, addr: &str) {
        if id != self.id && !addr.is_empty() {
            self.transport.add_peer(id, addr);
        }
    }

    fn send(&self, group: u64, msgs: Vec<Message>) {
        for m in msgs {
            self.transport.send(group, m);
        }
    }

    async fn run(self: Arc<Self>, mut inbound: queue::Receiver) {
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::new();
        // Groups whose clocks run; the others are quiet. Owned by this task.
        let mut awake = BTreeSet::new();
        // A new incarnation at each start: the time, as the driver's clock gives it.
        let mut liveness = Liveness::new(self.id, (self.now_ms)() as u64);
        // Persistence rounds syncing; owned by this task.
        let mut rounds = Rounds::new(self.cache_tail_bytes);
        // Reads of entries for followers behind, under way off this task; owned by it.
        let mut warms = Warms::default();
        loop {
            tokio::select! {
                // In order rather than at random: ticks first, so a flood of messages
                // cannot hold them up, then a finished sync, so that neither can hold up
                // the acknowledgements; and a simulation's run depends on its seed alone.
                biased;
                _ = ticker.tick() => {
                    self.tick(&mut awake, &mut liveness);
                }
                synced = rounds.oldest_synced(), if !rounds.is_empty() => {
                    if let Err(fatal) = self.finish_round(&mut rounds, synced).await {
                        (self.host.on_fatal)(fatal);
                        return;
                    }
                }
                n = inbound.recv_many(&mut batch, INBOUND_BATCH_MAX) => {
                    if n == 0 {
                        return;
                    }
                    let mut touched = Vec::new();
                    let (mut restarted, mut back) = (Vec::new(), Vec::new());
                    for (g, m) in batch.drain(..) {
                        match liveness.heard(m.from, ping_incarnation(g, &m)) {
                            Heard::Restarted => restarted.push(m.from),
                            Heard::Back => back.push(m.from),
                            Heard::Same => {}
                        }
                        if g == LIVENESS_GROUP {
                            continue;
                        }
                        if g == FORWARD_GROUP {
                            // Hooks may propose (and kick), so no driver lock is held here.
                            self.hooks.on_forward(m.from, &m.context);
                        } else if let Some(r) = self.group(g) {
                            let mut rep = lock(&r);
                            if let Err(e) = rep.step(m) {
                                warn!(group = g, error = %e, "raft step");
                            }
                            warms.start(g, &mut rep, |plan| self.host.disk.warm(plan));
                            touched.push(g);
                        }
                    }
                    self.dirty.lock_or_stop().extend(touched);
                    if batch.capacity() > INBOUND_BATCH_KEEP {
                        batch = Vec::new();
                    }
                    for peer in restarted {
                        self.peer_gone(peer, &mut awake);
                    }
                    for peer in back {
                        self.peer_back(peer, &mut awake);
                    }
                }
                (g, low) = warms.next(), if !warms.is_empty() => {
                    // The entries an append waited for are in the page cache: raft-rs sends
                    // it now, and its messages go out with the group's next ready.
                    if let Some(r) = self.group(g) {
                        let mut rep = lock(&r);
                        rep.warmed(low);
                        warms.start(g, &mut rep, |plan| self.host.disk.warm(plan));
                        drop(rep);
                        self.dirty.lock_or_stop().insert(g);
                    }
                }
                _ = self.wake.notified() => {}
            }
            if let Err(fatal) = self.start_rounds(&mut awake, &mut rounds, &mut warms).await {
                (self.host.on_fatal)(fatal);
                return;
            }
            if rounds.is_empty() {
                self.beat.mark();
            }
        }
    }

    /// Ticks the awake groups; a leader whose group is idle goes quiet, and a group gone
    /// quiet leaves the awake set. Then pings the peers, and wakes the quiet groups of
    /// those that went silent.
    fn tick(&self, awake: &mut BTreeSet<u64>, liveness: &mut Liveness) {
        let mut ticked = Vec::new();
        let mut quiet = Vec::new();
        // A group awake that may go quiet (the metadata group never does, so it does not
        // count): `activity` moves once this tick's changes are made.
        let mut active = false;
        for g in awake.iter().copied() {
            let Some(r) = self.group(g) else {
                quiet.push(g);
                continue;
            };
            let mut out = Vec::new();
            let mut rep = lock(&r);
            active |= rep.may_quiesce();
            if rep.tick() {
                ticked.push(g);
            }
            rep.quiesce(|id| liveness.is_live(id), &mut out);
            if rep.is_quiet() {
                quiet.push(g);
            }
            drop(rep);
            self.send(g, out);
        }
        for g in quiet {
            awake.remove(&g);
        }
        if active {
            self.activity.fetch_add(1, Ordering::Release);
        }
        self.dirty.lock_or_stop().extend(ticked);
        for ping in liveness.pings() {
            self.transport.send(LIVENESS_GROUP, ping);
        }
        for peer in liveness.tick() {
            warn!(peer, "raft peer silent; waking the quiet groups it is a member of");
            self.peer_gone(peer, awake);
        }
    }

    /// The broker of Raft id `peer` went silent or restarted: the quiet groups it is a
    /// member of wake (and follow it no more, if it led them).
    fn peer_gone(&self, peer: u64, awake: &mut BTreeSet<u64>) {
        self.wake_quiet(awake, |rep| rep.peer_gone(peer));
    }

    /// The broker of Raft id `peer` is heard from again after a silence: the quiet leaders
    /// of groups it is a member of wake (they may have gone quiet without it).
    fn peer_back(&self, peer: u64, awake: &mut BTreeSet<u64>) {
        self.wake_quiet(awake, |rep| rep.peer_back(peer));
    }

    /// Puts in `awake` every quiet group that `wakes` woke. Quiet, whether or not it is in
    /// the awake set already: a group that went quiet at a tick is put back in it by the
    /// round that hands out that tick's ready, until the next tick, and skipping it there
    /// left it quiet for good.
    fn wake_quiet(&self, awake: &mut BTreeSet<u64>, wakes: impl Fn(&mut Replica) -> bool) {
        for (g, r) in self.groups() {
            let mut rep = lock(&r);
            if rep.is_quiet() && wakes(&mut rep) {
                awake.insert(g);
            }
        }
    }

    /// Starts rounds while there is room and work: collects every dirty group that may be
    /// collected now (writing its entries), and starts one sync for all the files written.
    /// A round that needs no sync and has none before it finishes at once.
    ///
    /// With no round in flight and none to start, the synced pages pushed out of the
    /// page-cache tail go in a round of their own, so they do not wait for the next write.
    async fn start_rounds(
        &self,
        awake: &mut BTreeSet<u64>,
        rounds: &mut Rounds,
        warms: &mut Warms,
    ) -> Result<(), Fatal> {
        while rounds.has_room() {
            let Some(round) = self.collect_round(awake, rounds, warms)? else {
                if rounds.is_empty() && rounds.has_evictions() {
                    let sync = Some(self.host.disk.evict(rounds.take_evictions()));
                    rounds.push(Round { taken: Vec::new(), sync, written: Vec::new() });
                }
                return Ok(());
            };
            rounds.push(round);
            if rounds.len() == 1 && rounds.oldest_needs_no_sync() {
                self.finish_round(rounds, Ok(())).await?;
            }
        }
        Ok(())
    }

    /// Collects the dirty groups into a round, None when none had work. A group held by a
    /// round in flight that may not be collected yet ([`Rounds::may_collect`]) stays dirty.
    fn collect_round(
        &self,
        awake: &mut BTreeSet<u64>,
        rounds: &mut Rounds,
        warms: &mut Warms,
    ) -> Result<Option<Round>, Fatal> {
        let dirty: Vec<u64> = std::mem::take(&mut *self.dirty.lock_or_stop()).into_iter().collect();
        if dirty.is_empty() {
            return Ok(None);
        }
        // Whatever had work may have been woken (a proposal, a message); the next tick
        // drops those that are still quiet.
        awake.extend(dirty.iter().copied());
        let now = (self.now_ms)();
        let mut taken = Vec::new();
        let mut later = Vec::new();
        let mut files = Vec::new();
        let mut written = Vec::new();
        let tail = rounds.keeps_a_tail();
        let mut seen = HashSet::new();
        // Staged terms and votes: synced even without log syncs (Raft needs them).
        let mut states = Vec::new();
        let mut bytes = 0;
        let mut dirty = dirty.into_iter();
        while let Some(g) = dirty.next() {
            // The rest go in the next round: each staged state holds a file open, and a
            // round's sync waits for all of its writes.
            if !taken.is_empty() && (states.len() >= STAGED_STATES_MAX || bytes >= self.round_bytes_max) {
                later.extend(std::iter::once(g).chain(dirty));
                break;
            }
            let Some(r) = self.group(g) else { continue };
            let mut out = Vec::new();
            let mut rep = lock(&r);
            // Reads asked for since the group was last here (a proposal's appends too).
            warms.start(g, &mut rep, |plan| self.host.disk.warm(plan));
            if !rounds.may_collect(g, &rep) {
                later.push(g);
                continue;
            }
            match rep.collect(now, &mut out) {
                Ok(Some(c)) => {
                    bytes += c.bytes();
                    if c.must_sync() {
                        let f = rep.log().sync_handle();
                        if seen.insert(Arc::as_ptr(&f) as usize) {
                            files.push(f);
                        }
                        if tail {
                            rep.log_mut().take_written(&mut written);
                        }
                    }
                    if let Some(f) = c.staged_state() {
                        states.push(f.clone());
                    }
                    drop(rep);
                    taken.push(Taken { group: g, replica: r, collected: c });
                }
                Ok(None) => {}
                Err(e) => {
                    error!(group = g, error = %e, "raft entries could not be written; stopping");
                    return Err(Fatal::Write(e));
                }
            }
            self.send(g, out);
        }
        self.dirty.lock_or_stop().extend(later);
        if taken.is_empty() {
            return Ok(None);
        }
        if self.sync == SyncPolicy::Never {
            files.clear();
        }
        files.extend(states);
        // Log files and staged states alike: one syncfs, or an fdatasync each. Synced pages
        // that earlier rounds pushed out of the page-cache tail go once this sync is done.
        let syncfs = self.sync == SyncPolicy::Filesystem;
        let sync = (!files.is_empty()).then(|| self.host.disk.sync(files, syncfs, rounds.take_evictions()));
        Ok(Some(Round { taken, sync, written }))
    }

    /// Finishes the oldest round once its sync resolved with `synced`: puts staged states in
    /// place, then tells every group its ready is persisted and sends what that released.
    async fn finish_round(&self, rounds: &mut Rounds, synced: io::Result<()>) -> Result<(), Fatal> {
        let Some(round) = rounds.pop(synced.is_ok()) else { return Ok(()) };
        if let Err(e) = synced {
            // After a failed fsync the page cache may have dropped the dirty pages: what is
            // on disk is unknown, so this replica must not vote or ack again. Stop; a
            // restart recovers the log and catches up from peers.
            error!(error = %e, "fsync of raft entries failed; stopping");
            return Err(Fatal::Sync(e));
        }
        self.commit_staged_states(&round.taken).await?;
        let mut again = Vec::with_capacity(round.taken.len());
        for Taken { group: g, replica: r, collected: c } in round.taken {
            let mut out = Vec::new();
            let mut rep = lock(&r);
            let moved = match rep.persisted(c, &mut out) {
                Ok(moved) => moved,
                Err(e) => {
                    error!(group = g, error = %e, "raft state could not be written; stopping");
                    return Err(Fatal::Write(e));
                }
            };
            self.hooks.after_ready(g, &mut rep, moved);
            // Persisting may have unlocked more (a leader's commit, follow-up appends, or
            // reads of entries for them to start).
            if rep.has_ready() || rep.wants_warms() {
                again.push(g);
            }
            drop(rep);
            self.send(g, out);
        }
        self.dirty.lock_or_stop().extend(again);
        self.beat.mark();
        Ok(())
    }
}

impl Driver {
    /// Puts every state the round staged (and synced) in place, then syncs their
    /// directories, so that the new terms and votes are durable before anything that
    /// depends on them leaves ([`Replica::persisted`]).
    async fn commit_staged_states(&self, taken: &[Taken]) -> Result<(), Fatal> {
        let mut dirs = Vec::new();
        for Taken { group: g, replica: r, collected: c } in taken {
            if c.staged_state().is_none() {
                continue;
            }
            let dir = lock(r).commit_staged_state().and_then(|d| d.map(File::open).transpose());
            match dir {
                Ok(Some(d)) => dirs.push(Arc::new(d)),
                Ok(None) => {}
                Err(e) => {
                    error!(group = g, error = %e, "raft state could not be written; stopping");
                    return Err(Fatal::Write(e));
                }
            }
        }
        if dirs.is_empty() {
            return Ok(());
        }
        let syncfs = self.sync == SyncPolicy::Filesystem;
        self.host.disk.sync(dirs, syncfs, Vec::new()).await.map_err(|e| {
            error!(error = %e, "fsync of raft state failed; stopping");
            Fatal::Sync(e)
        })
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload.downcast_ref::<&str>().map(|s| s.to_string()).unwrap_or_default(),
    }
}
