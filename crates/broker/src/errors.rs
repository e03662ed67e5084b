//! The one place where subsystem errors become Kafka error codes.

use kafka_protocol::error::ResponseError;
use runnel_storage::{ProducerError, ReadError};
use runnel_wire::BatchError;

use crate::catalog::CatalogError;
use crate::partition::PartitionError;

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

/// An idempotent producer's batch that does not follow its last one.
fn producer(e: &ProducerError) -> ResponseError {
    match e {
        // Kafka answers a produce from a fenced (older) epoch with INVALID_PRODUCER_EPOCH.
        ProducerError::Fenced => ResponseError::InvalidProducerEpoch,
        ProducerError::OutOfOrder { .. } => ResponseError::OutOfOrderSequenceNumber,
    }
}

/// A write or read a partition refused, or a write whose durability it could not confirm.
pub fn partition(e: &PartitionError) -> ResponseError {
    match e {
        PartitionError::NotLeader => ResponseError::NotLeaderOrFollower,
        // Too much uncommitted: the client backs off and retries.
        PartitionError::Busy => ResponseError::RequestTimedOut,
        PartitionError::Producer(p) => producer(p),
        PartitionError::Invalid(_) => ResponseError::CorruptMessage,
        // The write may still commit under the new leader; the retry finds it there.
        PartitionError::LeaderChanged => ResponseError::NotLeaderOrFollower,
        PartitionError::TimedOut(_) => ResponseError::RequestTimedOut,
        PartitionError::OutOfRange { .. } => ResponseError::OffsetOutOfRange,
        PartitionError::Read(e) => read(e),
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
