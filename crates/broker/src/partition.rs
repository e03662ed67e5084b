//! A partition as the broker sees it. Three kinds:
//!
//! - **local** (single-broker mode): the storage log behind a lock; the high watermark
//!   advances when group commit's fsync covers a write;
//! - **replicated**: this broker holds one replica of the partition's Raft group; the log
//!   lives inside the replica and the high watermark is Raft's commit;
//! - **remote**: the partition's replicas are on other brokers.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kafka_protocol::error::ResponseError;
use runnel_raft::{driver, Replica, SharedReplica};
use runnel_storage::{AppendError, AppendInfo, Log, ReadError, ReadPlan};
use runnel_wire::BatchHeader;

/// A single-broker partition: the log, and what readers need without its lock.
struct Local {
    log: Mutex<Log>,
    /// Offsets below this are durable (per the fsync policy) and visible to consumers.
    high_watermark: AtomicI64,
    /// Mirrors of the log's bounds.
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
}

enum Kind {
    Local(Box<Local>),
    Replicated { replica: SharedReplica, group: u64 },
    Remote,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    kind: Kind,
    /// Broker ids holding a replica (leader first when it was assigned); empty for local.
    pub replicas: Vec<i32>,
}

/// The log of a hosted partition, locked (directly, or through its Raft replica).
pub enum LogGuard<'a> {
    Local(MutexGuard<'a, Log>),
    Replica(MutexGuard<'a, Replica>),
}

impl Deref for LogGuard<'_> {
    type Target = Log;
    fn deref(&self) -> &Log {
        match self {
            LogGuard::Local(g) => g,
            LogGuard::Replica(g) => g.log(),
        }
    }
}

impl DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut Log {
        match self {
            LogGuard::Local(g) => g,
            LogGuard::Replica(g) => g.log_mut(),
        }
    }
}

/// Raft ids are broker ids + 1 (Raft reserves 0).
pub fn broker_of(raft_id: u64) -> i32 {
    raft_id as i32 - 1
}

impl Partition {
    pub fn new(topic: Arc<str>, index: i32, log: Log) -> Partition {
        // On open, everything recovered from disk was fsynced (or survived the crash), so
        // it is all committed.
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        let local = Local {
            log: Mutex::new(log),
            high_watermark: AtomicI64::new(end),
            log_start_offset: AtomicI64::new(start),
            log_end_offset: AtomicI64::new(end),
        };
        Partition { topic, index, kind: Kind::Local(Box::new(local)), replicas: Vec::new() }
    }

    pub fn replicated(
        topic: Arc<str>,
        index: i32,
        replicas: Vec<i32>,
        replica: SharedReplica,
        group: u64,
    ) -> Partition {
        Partition { topic, index, kind: Kind::Replicated { replica, group }, replicas }
    }

    pub fn remote(topic: Arc<str>, index: i32, replicas: Vec<i32>) -> Partition {
        Partition { topic, index, kind: Kind::Remote, replicas }
    }

    /// The log if this broker hosts the partition.
    pub fn log(&self) -> Option<LogGuard<'_>> {
        match &self.kind {
            // A panic while holding the lock is a bug that already crashed a request; the
            // log itself stays consistent (appends are single writes), so keep serving.
            Kind::Local(l) => Some(LogGuard::Local(l.log.lock().unwrap_or_else(|p| p.into_inner()))),
            Kind::Replicated { replica, .. } => Some(LogGuard::Replica(driver::lock(replica))),
            Kind::Remote => None,
        }
    }

    /// The log of a single-broker partition (retention, cleaning and group commit work on
    /// these directly; a replicated log changes only through Raft).
    pub fn local_log(&self) -> Option<MutexGuard<'_, Log>> {
        match &self.kind {
            Kind::Local(l) => Some(l.log.lock().unwrap_or_else(|p| p.into_inner())),
            _ => None,
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self.kind, Kind::Local(_))
    }

    /// A partition of the cluster this broker holds no replica of.
    pub fn is_remote(&self) -> bool {
        matches!(self.kind, Kind::Remote)
    }

    pub fn replica(&self) -> Option<(&SharedReplica, u64)> {
        match &self.kind {
            Kind::Replicated { replica, group } => Some((replica, *group)),
            _ => None,
        }
    }

    /// Why this broker cannot serve the partition as its leader, if it cannot.
    pub fn leader_error(&self) -> Option<ResponseError> {
        match &self.kind {
            Kind::Local(_) => None,
            Kind::Replicated { replica, .. } if driver::lock(replica).is_leader() => None,
            _ => Some(ResponseError::NotLeaderOrFollower),
        }
    }

    /// (leader broker id or -1, leader epoch) as this broker knows them.
    pub fn leader(&self, me: i32) -> (i32, i32) {
        match &self.kind {
            Kind::Local(_) => (me, 0),
            Kind::Replicated { replica, .. } => {
                let r = driver::lock(replica);
                (r.leader().map_or(-1, broker_of), r.term() as i32)
            }
            Kind::Remote => (-1, -1),
        }
    }

    /// OffsetForLeaderEpoch: the largest epoch at most `epoch` and the offset where it
    /// ended (the start of the next epoch, or the log end); (-1, -1) when there is none.
    pub fn epoch_end_offset(&self, epoch: i32) -> (i32, i64) {
        match &self.kind {
            Kind::Local(l) => {
                let log = l.log.lock().unwrap_or_else(|p| p.into_inner());
                if epoch >= log.leader_epoch() {
                    (log.leader_epoch(), log.log_end_offset())
                } else {
                    (-1, -1)
                }
            }
            Kind::Replicated { replica, .. } => {
                let r = driver::lock(replica);
                match r.store().end_offset_for_epoch(epoch.max(0) as u64) {
                    Some((term, end)) => (term as i32, end),
                    None => (-1, -1),
                }
            }
            Kind::Remote => (-1, -1),
        }
    }

    /// Offsets below this are visible to consumers (0 when the partition is remote).
    pub fn high_watermark(&self) -> i64 {
        match &self.kind {
            Kind::Local(l) => l.high_watermark.load(Ordering::Acquire),
            Kind::Replicated { replica, .. } => driver::lock(replica).high_watermark(),
            Kind::Remote => 0,
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        match &self.kind {
            Kind::Local(l) => l.log_start_offset.load(Ordering::Acquire),
            Kind::Replicated { replica, .. } => driver::lock(replica).log().log_start_offset(),
            Kind::Remote => 0,
        }
    }

    pub fn log_end_offset(&self) -> i64 {
        match &self.kind {
            Kind::Local(l) => l.log_end_offset.load(Ordering::Acquire),
            Kind::Replicated { replica, .. } => driver::lock(replica).log().log_end_offset(),
            Kind::Remote => 0,
        }
    }

    /// Appends validated batches to a local log in order under one lock; returns each
    /// batch's outcome. Stops at the first failure (later batches are not written).
    pub fn append(&self, batches: &[(&[u8], BatchHeader)], now_ms: i64) -> Result<Vec<AppendInfo>, AppendError> {
        let Kind::Local(l) = &self.kind else {
            return Err(AppendError::Io(std::io::Error::other("not a local partition")));
        };
        let mut log = l.log.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(batches.len());
        for (bytes, h) in batches {
            out.push(log.append(bytes, h, now_ms)?);
        }
        l.log_end_offset.store(log.log_end_offset(), Ordering::Release);
        Ok(out)
    }

    /// Moves a local partition's high watermark up to `offset` (never down, never past the
    /// log end).
    pub fn advance_high_watermark(&self, offset: i64) {
        if let Kind::Local(l) = &self.kind {
            let offset = offset.min(l.log_end_offset.load(Ordering::Acquire));
            l.high_watermark.fetch_max(offset, Ordering::AcqRel);
        }
    }

    pub fn read(&self, offset: i64, max_bytes: usize, min_one: bool) -> Result<ReadPlan, ReadError> {
        let hw = self.high_watermark();
        match self.log() {
            Some(log) => log.read(offset, max_bytes, hw, min_one),
            None => Err(ReadError::Io(std::io::Error::other("partition not hosted here"))),
        }
    }

    /// Re-reads a local log's bounds after an operation that moved its start.
    pub fn refresh_bounds(&self, log: &Log) {
        if let Kind::Local(l) = &self.kind {
            l.log_start_offset.store(log.log_start_offset(), Ordering::Release);
            l.log_end_offset.store(log.log_end_offset(), Ordering::Release);
        }
    }

    /// Clean shutdown of whatever this broker holds of the partition.
    pub fn close(&self) -> std::io::Result<()> {
        match &self.kind {
            Kind::Local(l) => l.log.lock().unwrap_or_else(|p| p.into_inner()).close(),
            Kind::Replicated { replica, .. } => driver::lock(replica).close(),
            Kind::Remote => Ok(()),
        }
    }
}
