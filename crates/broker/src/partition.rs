//! A partition as the broker sees it: the storage log behind a lock, plus the high
//! watermark. This is the seam where replication slots in: today the high watermark
//! advances when the local fsync covers a write; with Raft it advances on commit.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use runnel_storage::{AppendError, AppendInfo, Log, ReadError, ReadPlan};
use runnel_wire::BatchHeader;

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    log: Mutex<Log>,
    /// Offsets below this are durable (per the fsync policy) and visible to consumers.
    high_watermark: AtomicI64,
    /// Mirrors of the log's bounds, readable without the lock.
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
}

impl Partition {
    pub fn new(topic: Arc<str>, index: i32, log: Log) -> Partition {
        // On open, everything recovered from disk was fsynced (or survived the crash), so
        // it is all committed.
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        Partition {
            topic,
            index,
            log: Mutex::new(log),
            high_watermark: AtomicI64::new(end),
            log_start_offset: AtomicI64::new(start),
            log_end_offset: AtomicI64::new(end),
        }
    }

    pub fn log(&self) -> MutexGuard<'_, Log> {
        // A panic while holding the lock is a bug that already crashed a request; the log
        // itself stays consistent (appends are single writes), so keep serving.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    /// Appends validated batches in order under one lock; returns each batch's outcome.
    /// Stops at the first failure (later batches of the same request are not written).
    pub fn append(&self, batches: &[(&[u8], BatchHeader)], now_ms: i64) -> Result<Vec<AppendInfo>, AppendError> {
        let mut log = self.log();
        let mut out = Vec::with_capacity(batches.len());
        for (bytes, h) in batches {
            out.push(log.append(bytes, h, now_ms)?);
        }
        self.log_end_offset.store(log.log_end_offset(), Ordering::Release);
        Ok(out)
    }

    /// Moves the high watermark up to `offset` (never down, never past the log end).
    pub fn advance_high_watermark(&self, offset: i64) {
        let offset = offset.min(self.log_end_offset());
        self.high_watermark.fetch_max(offset, Ordering::AcqRel);
    }

    pub fn read(&self, offset: i64, max_bytes: usize, min_one: bool) -> Result<ReadPlan, ReadError> {
        self.log().read(offset, max_bytes, self.high_watermark(), min_one)
    }

    /// Re-reads the bounds after an operation that moved the log start.
    pub fn refresh_bounds(&self, log: &Log) {
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        self.log_end_offset.store(log.log_end_offset(), Ordering::Release);
    }
}
