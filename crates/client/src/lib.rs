//! The Kafka client Runnel's own tools share: `runnel bench` (crates/bench), `runnel verify`
//! and `runnel chaos` (crates/verify), and `runnel decommission` (crates/runnel). It speaks
//! the Kafka protocol to any Kafka-compatible cluster, so the tools measure and check
//! Runnel and Apache Kafka with exactly the same code.
//!
//! What belongs here is protocol-client code: a pipelined connection with request/response
//! framing (`connection`), the request versions spoken, cluster metadata and topic layout,
//! topic admin and log-end offsets (`cluster`), and reading records out of fetched data
//! (`records`). What to send and how to judge the answers (load generation, histories,
//! checkers) belongs to the tools. Depends on `runnel-wire` only, never on the broker.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. This crate is the client at the far end of the first hop.

mod admin;
mod cluster;
mod connection;
mod netns;
mod records;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

pub use admin::{BrokerInfo, ConfigEntry, GroupListing, MemberInfo, PartitionInfo, TopicInfo, Tp};
pub use cluster::{init_producer_id, Cluster, TopicLayout};
pub use connection::{use_tls, Connection, Writer};
pub use netns::Netns;
pub use records::{for_each_committed_record, for_each_record, value_stamp};

/// Request versions the tools speak; both Apache Kafka 4.x and Runnel accept them.
pub const METADATA_VERSION: i16 = 12;
pub const PRODUCE_VERSION: i16 = 9;
pub const FETCH_VERSION: i16 = 12;
pub const LIST_OFFSETS_VERSION: i16 = 7;
pub const CREATE_TOPICS_VERSION: i16 = 7;
pub const DELETE_TOPICS_VERSION: i16 = 5;
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;
pub const FIND_COORDINATOR_VERSION: i16 = 3;
pub const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 3;
pub const END_TXN_VERSION: i16 = 3;

pub fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Milliseconds since the Unix epoch: a record's CreateTime.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
