//! The one place where subsystem errors become Kafka error codes.

use kafka_protocol::error::ResponseError;
use runnel_storage::{AppendError, ProducerError, ReadError};
use runnel_wire::BatchError;

use crate::catalog::CatalogError;

pub fn catalog(e: &CatalogError) -> ResponseError {
    match e {
        CatalogError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        CatalogError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        CatalogError::InvalidTopic(_) => ResponseError::InvalidTopicException,
        CatalogError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        CatalogError::InvalidConfig(_) => ResponseError::InvalidConfig,
        CatalogError::Storage(_) => ResponseError::KafkaStorageError,
    }
}

pub fn append(e: &AppendError) -> ResponseError {
    match e {
        // Kafka answers a produce from a fenced (older) epoch with INVALID_PRODUCER_EPOCH.
        AppendError::Producer(ProducerError::Fenced) => ResponseError::InvalidProducerEpoch,
        AppendError::Producer(ProducerError::OutOfOrder { .. }) => ResponseError::OutOfOrderSequenceNumber,
        AppendError::Io(_) => ResponseError::KafkaStorageError,
    }
}

pub fn read(e: &ReadError) -> ResponseError {
    match e {
        ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        ReadError::Io(_) => ResponseError::KafkaStorageError,
    }
}

/// Malformed batches, as Kafka 4's log validator reports them: bytes that fail the CRC,
/// framing or an unknown magic are CORRUPT_MESSAGE; a well-formed batch whose contents are
/// inconsistent (counts, old message formats) is INVALID_RECORD.
pub fn batch(e: &BatchError) -> ResponseError {
    match e {
        BatchError::BadCount { .. } | BatchError::BadRecords { .. } | BatchError::BadMagic(0 | 1) => {
            ResponseError::InvalidRecord
        }
        BatchError::Truncated { .. }
        | BatchError::BadLength(_)
        | BatchError::BadMagic(_)
        | BatchError::BadCrc { .. }
        | BatchError::BadCompression(_) => ResponseError::CorruptMessage,
    }
}

/// A flush (fsync) that failed leaves the write's fate unknown; like a Raft write that was
/// interrupted, that is a timeout to the client, which then retries (idempotently).
pub fn flush_failed() -> ResponseError {
    ResponseError::KafkaStorageError
}

/// A proposal to a partition's Raft group that was refused.
pub fn propose(e: runnel_raft::ProposeError) -> (ResponseError, String) {
    use runnel_raft::ProposeError as P;
    match e {
        P::NotLeader(_) => (ResponseError::NotLeaderOrFollower, "This broker is not the partition leader.".into()),
        P::Busy => (ResponseError::RequestTimedOut, "Too much data is waiting to be committed.".into()),
        P::Producer(p) => {
            let e = AppendError::Producer(p);
            (append(&e), e.to_string())
        }
        P::Invalid(msg) => (ResponseError::CorruptMessage, msg),
    }
}
