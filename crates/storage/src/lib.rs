//! The segmented partition log: Kafka RecordBatch v2 bytes on disk, exactly as a Fetch
//! response carries them, in segments named by base offset (`.log`, `.index`,
//! `.timeindex`), with recovery after a crash, retention, DeleteRecords and the
//! idempotent-producer state that is derived from the log.
//!
//! No sockets, no Raft, no async: the broker (and later the Raft driver) drives a [`Log`]
//! by calling it, and decides when to fsync through [`Log::sync_handles`]. Batches handed
//! to [`Log::append`] must already have passed `runnel_wire::BatchHeader::validate_for_append`.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (appends to this crate's [`Log`],
//! where the producer-state checks run; replicates; batched fsync) → commit → response.

mod cleaner;
mod config;
pub mod fault;
mod log;
mod producer;
mod read;
mod segment;
mod tail;

pub use cleaner::{all_records_keyed, records_of, CleanPlan, CleanStats, Cleaned, RecordRef, Records};
pub use log::{AppendError, AppendInfo, Log, LogConfig, ReadError, SEGMENT_BYTES_MAX};
pub use producer::{AbortedTxn, ProducerError, ProducerInfo, ProducerTable};
pub use read::{FileSlice, ReadPlan, Span, TimestampRead, WarmPlan};
pub use tail::{evict_later, in_page_cache, CacheTail, Written};

/// Makes everything written to `files` so far durable: one `syncfs` when `syncfs` is set
/// and there are two or more files (one journal commit for all of them), else an
/// fdatasync per file. Since Linux 5.8 syncfs reports writeback errors as fsync does.
pub fn sync_files(files: &[std::sync::Arc<std::fs::File>], syncfs: bool) -> std::io::Result<()> {
    fault::before_sync()?;
    if syncfs && files.len() >= 2 {
        return sync_filesystem(&files[0]);
    }
    for f in files {
        f.sync_data()?;
    }
    Ok(())
}

/// Makes everything written to the filesystem that holds `file` durable (`syncfs`).
pub fn sync_filesystem(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: syncfs only reads the descriptor, which `file` keeps open.
    if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
