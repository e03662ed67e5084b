//! A partition as the broker sees it, and the one seam every writer and reader goes
//! through: [`Partition::append`] (produce, offset commits), [`Partition::delete_records`]
//! and [`Partition::read`]. Nothing above this file touches Raft.
//!
//! A partition is either hosted here (this broker holds one replica of its Raft group; a
//! single broker is a cluster of one, so each of its partitions is a one-voter group) or
//! remote (every replica is on other brokers). An append is a proposal to the group: the
//! leader stamps offsets, replicas write and fsync, a majority commits, and the high
//! watermark (the end of what is committed and on this replica's disk) moves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use runnel_raft::{driver, Driver, Durability, ProposeError, Replica, SharedReplica};
use runnel_storage::{AbortedTxn, CleanStats, Log, ProducerError, ReadError, ReadPlan};
use runnel_wire::{BatchHeader, TxnEnd};
use tokio::sync::oneshot;

use crate::replica_selector::{ClientPlace, LazyPlace};

/// A hosted partition: its replica, its Raft group id and the driver that runs it.
#[derive(Clone)]
struct Hosted {
    replica: SharedReplica,
    group: u64,
    driver: Arc<Driver>,
    /// Set once this replica has served consumers as a follower (logged the first time).
    served_as_follower: Arc<AtomicBool>,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    hosted: Option<Hosted>,
    /// Broker ids holding a replica (the preferred leader first).
    pub replicas: Vec<i32>,
}

/// What a write waits for before it is answered (Kafka's `acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=0: nothing.
    None,
    /// acks=1: on the leader's disk.
    Leader,
    /// acks=all: committed, on a majority of disks.
    All,
}

impl Acks {
    /// Kafka's `acks` field; None for a value Kafka refuses.
    pub fn from_kafka(acks: i16) -> Option<Acks> {
        match acks {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }
}

/// Why a partition could not take a write or serve a read (`errors::partition` maps these
/// to Kafka's codes).
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("This broker is not the partition leader.")]
    NotLeader,
    #[error("Too much data is waiting to be committed.")]
    Busy,
    #[error("producer state: {0:?}")]
    Producer(ProducerError),
    #[error("{0}")]
    Invalid(String),
    /// Leadership moved before the write committed: it may still commit under the new
    /// leader, where an idempotent producer's retry finds it.
    #[error("leadership moved before the write committed")]
    LeaderChanged,
    #[error("not durable within {0} ms")]
    TimedOut(u128),
    #[error("offset {offset} is outside [{log_start_offset}, {high_watermark}]")]
    OutOfRange { offset: i64, log_start_offset: i64, high_watermark: i64 },
    #[error("read: {0}")]
    Read(#[from] ReadError),
}

impl From<ProposeError> for PartitionError {
    fn from(e: ProposeError) -> PartitionError {
        match e {
            ProposeError::NotLeader(_) => PartitionError::NotLeader,
            ProposeError::Busy => PartitionError::Busy,
            ProposeError::Producer(p) => PartitionError::Producer(p),
            ProposeError::Invalid(msg) => PartitionError::Invalid(msg),
        }
    }
}

/// A write the partition took: where it went, and the wait for its durability.
pub struct Appended {
    pub base_offset: i64,
    pub log_start_offset: i64,
    durable: Option<oneshot::Receiver<bool>>,
}

impl Appended {
    /// Resolves once the write is as durable as its acks asked (at once for acks=0), or
    /// fails when it cannot be (leadership moved) or did not get there in `timeout`.
    pub async fn durable(self, timeout: Duration) -> Result<(), PartitionError> {
        let Some(rx) = self.durable else { return Ok(()) };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(true)) => Ok(()),
            Ok(_) => Err(PartitionError::LeaderChanged),
            Err(_) => Err(PartitionError::TimedOut(timeout.as_millis())),
        }
    }
}

/// Which records a read may return (Kafka's `isolation_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Everything below the high watermark.
    ReadUncommitted,
    /// Everything below the last stable offset, with the aborted transactions listed.
    ReadCommitted,
}

impl Isolation {
    pub fn from_kafka(level: i8) -> Isolation {
        if level == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }
}

/// One read of a partition, taken under one lock: the bounds a fetch reports and what to
/// read (carried out without the lock).
pub struct Read {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub plan: Result<ReadPlan, ReadError>,
    /// With read_committed: the aborted transactions from the read's offset up to the last
    /// stable offset (the caller keeps those the records it returns reach).
    pub aborted: Vec<AbortedTxn>,
    /// This replica, a follower, serves consumers for the first time (worth a log line).
    pub first_follower_read: bool,
}

impl Partition {
    pub fn hosted(
        topic: Arc<str>,
        index: i32,
        replicas: Vec<i32>,
        replica: SharedReplica,
        group: u64,
        driver: Arc<Driver>,
    ) -> Partition {
        let served_as_follower = Arc::new(AtomicBool::new(false));
        Partition { topic, index, hosted: Some(Hosted { replica, group, driver, served_as_follower }), replicas }
    }

    pub fn remote(topic: Arc<str>, index: i32, replicas: Vec<i32>) -> Partition {
        Partition { topic, index, hosted: None, replicas }
    }

    /// The same partition with another replica list (a reassignment moved it).
    pub fn relisted(&self, replicas: Vec<i32>) -> Partition {
        Partition { topic: self.topic.clone(), index: self.index, hosted: self.hosted.clone(), replicas }
    }

    /// A partition of the cluster this broker holds no replica of.
    pub fn is_remote(&self) -> bool {
        self.hosted.is_none()
    }

    /// The replica and its Raft group, for the cluster's own loops (leadership, moves).
    pub(crate) fn replica(&self) -> Option<(&SharedReplica, u64)> {
        self.hosted.as_ref().map(|h| (&h.replica, h.group))
    }

    /// The Raft group of the replica hosted here (what a long poll on it waits for).
    pub fn group(&self) -> Option<u64> {
        self.hosted.as_ref().map(|h| h.group)
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, Replica>> {
        self.hosted.as_ref().map(|h| driver::lock(&h.replica))
    }

    /// Has the driver handle the group's ready soon (after a proposal).
    fn kick(&self) {
        if let Some(h) = &self.hosted {
            h.driver.kick(h.group);
        }
    }

    /// Runs `f` on the log if this broker hosts the partition.
    pub fn with_log<T>(&self, f: impl FnOnce(&Log) -> T) -> Option<T> {
        self.lock().map(|r| f(r.log()))
    }

    /// Changes the log's settings (never its contents: those change only through Raft).
    pub fn configure_log(&self, config: runnel_storage::LogConfig) {
        if let Some(mut r) = self.lock() {
            r.log_mut().set_config(config);
        }
    }

    /// The term this replica leads in, once its high watermark covers everything earlier
    /// leaders committed (so reading up to it reads the whole committed log); else None.
    pub fn current_leader_term(&self) -> Option<u64> {
        let r = self.lock()?;
        r.leader_current().then(|| r.term())
    }

    /// Why this broker cannot serve the partition as its leader, if it cannot.
    pub fn leader_error(&self) -> Option<PartitionError> {
        match self.lock() {
            Some(r) if r.is_leader() => None,
            _ => Some(PartitionError::NotLeader),
        }
    }

    /// (leader broker id or -1, leader epoch) as this broker's replica knows them.
    pub fn leader(&self) -> (i32, i32) {
        match self.lock() {
            Some(r) => (r.leader().map_or(-1, runnel_controller::broker_of), r.term() as i32),
            None => (-1, -1),
        }
    }

    /// Leader only: the replicas in sync (Metadata's `isr_nodes`), by broker id.
    pub fn in_sync(&self, lag_ticks: u64) -> Option<Vec<i32>> {
        let r = self.lock()?;
        r.is_leader().then(|| r.in_sync(lag_ticks).into_iter().map(runnel_controller::broker_of).collect())
    }

    /// OffsetForLeaderEpoch: the largest epoch at most `epoch` and the offset where it
    /// ended (the start of the next epoch, or the log end); (-1, -1) when there is none.
    pub fn epoch_end_offset(&self, epoch: i32) -> (i32, i64) {
        self.lock()
            .and_then(|r| r.store().end_offset_for_epoch(epoch.max(0) as u64))
            .map_or((-1, -1), |(term, end)| (term as i32, end))
    }

    /// Offsets below this are visible to consumers (0 when the partition is remote).
    pub fn high_watermark(&self) -> i64 {
        self.lock().map_or(0, |r| r.high_watermark())
    }

    pub fn log_start_offset(&self) -> i64 {
        self.lock().map_or(0, |r| r.log().log_start_offset())
    }

    /// Proposes validated batches, in order, to the partition's Raft group (leader only).
    /// Stops at the first refused batch; the earlier ones stay proposed. The answer's
    /// [`Appended::durable`] waits for what `acks` asks.
    pub fn append(&self, batches: &[(Bytes, BatchHeader)], acks: Acks) -> Result<Appended, PartitionError> {
        let mut r = self.lock().ok_or(PartitionError::NotLeader)?;
        let mut first = None;
        let mut last = None;
        for (bytes, h) in batches {
            let p = match r.propose_batch(bytes.clone(), h) {
                Ok(p) => p,
                Err(e) => {
                    if first.is_some() {
                        // The earlier batches are proposed: their group must not wait for
                        // a tick it may never get (a quiet group does not tick).
                        drop(r);
                        self.kick();
                    }
                    return Err(e.into());
                }
            };
            first.get_or_insert(p);
            last = Some(p);
        }
        let (Some(first), Some(last)) = (first, last) else {
            return Err(PartitionError::Invalid("no record batch to append".into()));
        };
        let durable = match acks {
            Acks::None => None,
            Acks::Leader => Some(r.wait(last.index, last.term, Durability::Local)),
            Acks::All => Some(r.wait(last.index, last.term, Durability::Committed)),
        };
        let log_start_offset = r.log().log_start_offset();
        drop(r);
        self.kick();
        Ok(Appended { base_offset: first.base_offset, log_start_offset, durable })
    }

    /// DeleteRecords on the leader: the offset to move the log start to (-1: the high
    /// watermark), or None when the log already starts there; the metadata log carries the
    /// move to every replica (`Cluster::delete_records`, then [`Partition::raise_log_start`]).
    pub fn delete_records_target(&self, offset: i64) -> Result<Option<i64>, PartitionError> {
        let r = self.lock().filter(|r| r.is_leader()).ok_or(PartitionError::NotLeader)?;
        let (hw, start) = (r.high_watermark(), r.log().log_start_offset());
        let offset = if offset == -1 { hw } else { offset };
        if offset < 0 || offset > hw {
            return Err(PartitionError::OutOfRange { offset, log_start_offset: start, high_watermark: hw });
        }
        Ok(Some(offset).filter(|o| *o > start))
    }

    /// Moves this replica's log start to `offset` (DeleteRecords, as the metadata log holds
    /// it), as far as it has applied now and the rest as it applies more. Deletes segments:
    /// call off the async workers.
    pub fn raise_log_start(&self, offset: i64) {
        let Some(mut r) = self.lock() else { return };
        match r.raise_log_start(offset) {
            Ok(Some(start)) => {
                tracing::info!(topic = %self.topic, partition = self.index, log_start_offset = start, "records deleted")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "deleting records"),
        }
    }

    /// What a consumer's fetch from `offset` reads on the leader (at most `max_bytes`, or
    /// the first batch whole when `min_one`), with the bounds it reports, under one lock.
    /// With `any_replica` (a consumer that may fetch from followers, KIP-392), any replica
    /// serves it, up to what that replica knows to be committed: its high watermark, which
    /// follows the leader's commit index as appends and heartbeats carry it.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        isolation: Isolation,
        any_replica: bool,
    ) -> Result<Read, PartitionError> {
        let r = self.lock().filter(|r| any_replica || r.is_leader()).ok_or(PartitionError::NotLeader)?;
        let first_follower_read = !r.is_leader() && self.first_follower_read();
        let high_watermark = r.high_watermark();
        let log = r.log();
        let last_stable_offset = log.last_stable_offset(high_watermark);
        let (upper, aborted) = match isolation {
            Isolation::ReadUncommitted => (high_watermark, Vec::new()),
            Isolation::ReadCommitted => (last_stable_offset, log.aborted_transactions(offset, last_stable_offset)),
        };
        Ok(Read {
            high_watermark,
            last_stable_offset,
            log_start_offset: log.log_start_offset(),
            plan: log.read(offset, max_bytes, upper, min_one),
            aborted,
            first_follower_read,
        })
    }

    /// True the first time this replica serves consumers as a follower.
    fn first_follower_read(&self) -> bool {
        self.hosted.as_ref().is_some_and(|h| !h.served_as_follower.swap(true, Ordering::Relaxed))
    }

    /// Leader only: the replica a consumer at `place` reading from `fetch_offset` should
    /// read from instead of this leader (KIP-392's `preferred_read_replica`), if any. The
    /// place is resolved only on a leader, after the replica's lock is released.
    pub fn preferred_read_replica<F>(&self, place: &LazyPlace<F>, fetch_offset: i64) -> Option<i32>
    where
        F: Fn() -> Option<ClientPlace>,
    {
        let (leader, ends): (i32, Vec<(i32, i64)>) = {
            let r = self.lock().filter(|r| r.is_leader())?;
            let ends = r.voter_ends().into_iter().map(|(id, end)| (runnel_controller::broker_of(id), end));
            (runnel_controller::broker_of(r.id()), ends.collect())
        };
        place.get()?.preferred(leader, &ends, fetch_offset)
    }

    /// Offsets below this are stable: every transaction there has ended and its marker is
    /// committed (0 when the partition is remote).
    pub fn last_stable_offset(&self) -> i64 {
        self.lock().map_or(0, |r| r.log().last_stable_offset(r.high_watermark()))
    }

    /// Ends `producer_id`'s transaction on this partition (leader only): writes its commit
    /// or abort marker; [`Appended::durable`] waits for it to commit.
    pub fn write_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        end: TxnEnd,
    ) -> Result<Appended, PartitionError> {
        let mut r = self.lock().ok_or(PartitionError::NotLeader)?;
        let p = r.propose_marker(producer_id, producer_epoch, coordinator_epoch, end, crate::now_ms())?;
        let durable = Some(r.wait(p.index, p.term, Durability::Committed));
        let log_start_offset = r.log().log_start_offset();
        drop(r);
        self.kick();
        Ok(Appended { base_offset: p.base_offset, log_start_offset, durable })
    }

    /// Whether the producer's transaction at `epoch` is open here, counting batches
    /// proposed and not yet written (so a transaction's later batches need no new check
    /// with its coordinator). One open at an older epoch does not count: with transactions
    /// version 2 the next transaction's epoch is higher, and may start before the last
    /// one's marker is here.
    pub fn in_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.lock().is_some_and(|r| r.in_transaction(producer_id, epoch))
    }

    /// Producers with a transaction open on this partition, and its first offset.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.lock().map(|r| r.log().open_transactions()).unwrap_or_default()
    }

    /// Time and size retention of this replica; the new log start if it moved.
    pub fn enforce_retention(&self, now_ms: i64) -> std::io::Result<Option<i64>> {
        match self.lock() {
            Some(mut r) => r.enforce_retention(now_ms),
            None => Ok(None),
        }
    }

    /// One compaction pass if the log's policy wants one: planned and swapped under the
    /// lock, carried out without it (call off the async workers).
    pub fn compact(&self, now_ms: i64) -> std::io::Result<Option<CleanStats>> {
        let Some(plan) = self.lock().and_then(|r| r.clean_plan(now_ms)) else { return Ok(None) };
        let cleaned = plan.execute(now_ms)?;
        match self.lock() {
            Some(mut r) => r.clean_swap(cleaned, now_ms),
            None => Ok(None),
        }
    }

    /// Clean shutdown of whatever this broker holds of the partition.
    pub fn close(&self) -> std::io::Result<()> {
        match self.lock() {
            Some(mut r) => r.close(),
            None => Ok(()),
        }
    }

    /// [`Partition::close`] in steps, for many partitions at once
    /// ([`runnel_raft::replica::Replica::close_stage`]): the files to sync first.
    pub fn close_stage(&self) -> std::io::Result<Vec<Arc<std::fs::File>>> {
        match self.lock() {
            Some(mut r) => r.close_stage(),
            None => Ok(Vec::new()),
        }
    }

    /// The directory to sync last, for a hosted partition whose close put a file in place.
    pub fn close_commit(&self) -> std::io::Result<Option<std::path::PathBuf>> {
        match self.lock() {
            Some(mut r) => r.close_commit(),
            None => Ok(None),
        }
    }
}
