//! The segmented partition log: Kafka RecordBatch v2 bytes on disk, exactly as a Fetch
//! response carries them, in segments named by base offset (`.log`, `.index`,
//! `.timeindex`), with recovery after a crash, retention, DeleteRecords and the
//! idempotent-producer state that is derived from the log.
//!
//! No sockets, no Raft, no async: the broker (and later the Raft driver) drives a [`Log`]
//! by calling it, and decides when to fsync through [`Log::sync_handles`]. Batches handed
//! to [`Log::append`] must already have passed `runnel_wire::BatchHeader::validate_for_append`.

mod cleaner;
mod log;
mod producer;
mod segment;

pub use cleaner::{all_records_keyed, CleanPlan, CleanStats, Cleaned};
pub use log::{AppendError, AppendInfo, Log, LogConfig, ReadError, ReadPlan, SEGMENT_BYTES_MAX};
pub use producer::{ProducerError, ProducerTable};
