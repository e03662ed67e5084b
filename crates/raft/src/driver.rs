//! The multi-Raft driver of one broker: one task runs every group hosted here. It ticks
//! them all every 100 ms, steps messages from peers into them, and handles their readies
//! in rounds: collect every group with work (writing entries, no fsync), sync all the
//! files written with one `syncfs` (or one fdatasync each), then finish every group and
//! send its messages. A round costs one fsync however many groups it covers.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use raft::eraftpb::Message;
use tokio::sync::{mpsc, Notify};
use tracing::{error, warn};

use crate::replica::Replica;
use crate::transport::{Envelope, Transport};

/// Interval between Raft ticks; election and heartbeat timeouts count these.
pub const TICK: Duration = Duration::from_millis(100);
/// Inbound messages queued for the driver before new ones are dropped.
pub const INBOUND_QUEUE_MAX: usize = 65_536;

/// What the broker does with a group after each ready (with the replica locked).
pub trait Hooks: Send + Sync {
    fn after_ready(&self, group: u64, replica: &mut Replica, high_watermark_moved: bool);
    /// A request another broker forwarded with [`Driver::forward`] (e.g. to the metadata
    /// leader); `from` is its Raft id.
    fn on_forward(&self, from: u64, data: &[u8]);
}

/// Pseudo group id carrying forwarded requests instead of Raft messages.
pub const FORWARD_GROUP: u64 = u64::MAX;

pub type SharedReplica = Arc<Mutex<Replica>>;

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

pub fn lock(r: &SharedReplica) -> MutexGuard<'_, Replica> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Driver {
    id: u64,
    groups: RwLock<HashMap<u64, SharedReplica>>,
    dirty: Mutex<HashSet<u64>>,
    wake: Notify,
    transport: Transport,
    hooks: Arc<dyn Hooks>,
    sync: SyncPolicy,
    now_ms: fn() -> i64,
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
        sync: SyncPolicy,
        now_ms: fn() -> i64,
    ) -> io::Result<Arc<Driver>> {
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE_MAX);
        let transport = Transport::start(listen, peers, tx).await?;
        let driver = Arc::new(Driver {
            id,
            groups: RwLock::new(HashMap::new()),
            dirty: Mutex::new(HashSet::new()),
            wake: Notify::new(),
            transport,
            hooks,
            sync,
            now_ms,
        });
        let run = tokio::spawn(driver.clone().run(rx));
        tokio::spawn(async move {
            if let Err(e) = run.await {
                if e.is_panic() {
                    // A broker whose groups no longer step or persist must not linger
                    // (raft-rs panics on broken invariants): stop, as after a failed fsync.
                    error!("raft driver panicked; stopping");
                    std::process::exit(70);
                }
            }
        });
        Ok(driver)
    }

    pub fn add_group(&self, group: u64, replica: SharedReplica) {
        self.groups.write().unwrap_or_else(|p| p.into_inner()).insert(group, replica);
        self.kick(group);
    }

    pub fn remove_group(&self, group: u64) -> Option<SharedReplica> {
        self.groups.write().unwrap_or_else(|p| p.into_inner()).remove(&group)
    }

    pub fn group(&self, group: u64) -> Option<SharedReplica> {
        self.groups.read().unwrap_or_else(|p| p.into_inner()).get(&group).cloned()
    }

    pub fn groups(&self) -> Vec<(u64, SharedReplica)> {
        self.groups.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(g, r)| (*g, r.clone())).collect()
    }

    /// Asks for the group's ready to be handled soon (after a proposal).
    pub fn kick(&self, group: u64) {
        self.dirty.lock().unwrap_or_else(|p| p.into_inner()).insert(group);
        self.wake.notify_one();
    }

    /// Sends `data` to the broker with Raft id `to`, whose hooks get it (best effort: the
    /// sender retries if it sees no effect).
    pub fn forward(&self, to: u64, data: Vec<u8>) {
        let m = Message { to, from: self.id, context: data.into(), ..Default::default() };
        self.transport.send(FORWARD_GROUP, m);
    }

    fn send(&self, group: u64, msgs: Vec<Message>) {
        for m in msgs {
            self.transport.send(group, m);
        }
    }

    async fn run(self: Arc<Self>, mut inbound: mpsc::Receiver<Envelope>) {
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::new();
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    let groups = self.groups();
                    let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
                    for (g, r) in groups {
                        if lock(&r).tick() {
                            dirty.insert(g);
                        }
                    }
                }
                n = inbound.recv_many(&mut batch, 4096) => {
                    if n == 0 {
                        return;
                    }
                    let mut touched = Vec::new();
                    for (g, m) in batch.drain(..) {
                        if g == FORWARD_GROUP {
                            // Hooks may propose (and kick), so no driver lock is held here.
                            self.hooks.on_forward(m.from, &m.context);
                        } else if let Some(r) = self.group(g) {
                            if let Err(e) = lock(&r).step(m) {
                                warn!(group = g, error = %e, "raft step");
                            }
                            touched.push(g);
                        }
                    }
                    self.dirty.lock().unwrap_or_else(|p| p.into_inner()).extend(touched);
                }
                _ = self.wake.notified() => {}
            }
            self.handle_readies().await;
        }
    }

    async fn handle_readies(&self) {
        loop {
            let dirty: Vec<u64> =
                std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner())).into_iter().collect();
            if dirty.is_empty() {
                return;
            }
            let now = (self.now_ms)();
            let mut collected = Vec::new();
            let mut files = Vec::new();
            let mut seen = HashSet::new();
            for g in dirty {
                let Some(r) = self.group(g) else { continue };
                let mut out = Vec::new();
                let mut rep = lock(&r);
                match rep.collect(now, &mut out) {
                    Ok(Some(c)) => {
                        if c.must_sync() {
                            let f = rep.log().sync_handle();
                            if seen.insert(Arc::as_ptr(&f) as usize) {
                                files.push(f);
                            }
                        }
                        drop(rep);
                        collected.push((g, r, c));
                    }
                    Ok(None) => {}
                    Err(e) => error!(group = g, error = %e, "raft ready could not be written"),
                }
                self.send(g, out);
            }
            if collected.is_empty() {
                return;
            }
            if !files.is_empty() && self.sync != SyncPolicy::Never {
                let syncfs = self.sync == SyncPolicy::Filesystem;
                let synced = tokio::task::spawn_blocking(move || runnel_storage::sync_files(&files, syncfs)).await;
                let failure = match synced {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(e) = failure {
                    // After a failed fsync the page cache may have dropped the dirty pages:
                    // what is on disk is unknown, so this replica must not vote or ack
                    // again. Stop; a restart recovers the log and catches up from peers.
                    error!(error = %e, "fsync of raft entries failed; stopping");
                    std::process::exit(70);
                }
            }
            let mut again = Vec::with_capacity(collected.len());
            for (g, r, c) in collected {
                let mut out = Vec::new();
                let mut rep = lock(&r);
                let moved = rep.persisted(c, &mut out);
                self.hooks.after_ready(g, &mut rep, moved);
                // Persisting may have unlocked more (a leader's commit, follow-up appends).
                if rep.has_ready() {
                    again.push(g);
                }
                drop(rep);
                self.send(g, out);
            }
            self.dirty.lock().unwrap_or_else(|p| p.into_inner()).extend(again);
        }
    }
}
