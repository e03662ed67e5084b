//! Wire-level building blocks shared by storage, the broker and the client: Kafka
//! RecordBatch v2 headers (parse, validate, patch offsets, CRC-32C), request framing limits,
//! and frames encoded in pieces that share their records instead of copying them.
//!
//! Nothing here touches sockets or files, and nothing here trusts its input: every parser
//! returns a typed error instead of panicking, because these bytes come from clients and
//! from disk. The Kafka message codec itself is the `kafka-protocol` crate; this crate
//! holds what that crate leaves to the broker, plus a batch builder and the record codecs
//! for the places that write batches themselves.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs (validates with this crate's `BatchHeader`) → `Partition::append` →
//! Raft driver (append, replicate, batched fsync) → commit → response.

pub mod batch;
pub mod build;
pub mod marker;
pub mod pieces;
pub mod records;

pub use batch::{BatchError, BatchHeader, Batches};
pub use marker::TxnEnd;
