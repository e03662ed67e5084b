//! The Kafka-protocol broker: listener and connections, the API table, one handler file
//! per Kafka API, the topic catalog, partitions, group commit and fetch sessions.
//!
//! Neighbours: `runnel-wire` (batch validation), `runnel-storage` (the partition log),
//! `runnel-coordinator` (consumer groups, stored through `offsets_log`), `runnel-raft`
//! (replication; `cluster` holds the metadata quorum in cluster mode).
//! The binary crate `runnel` parses the command line and calls [`server::run`].

pub mod broker;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod connection;
mod coordinators;
mod dispatch;
mod errors;
mod fetch_session;
mod handlers;
pub mod offsets_log;
pub mod partition;
mod reassign;
pub(crate) mod rebalance;
pub mod server;
pub mod topic_config;

pub use broker::Broker;
pub use config::{BrokerConfig, Settings};

/// Wall-clock milliseconds since the Unix epoch (Kafka timestamps).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
