//! The Kafka-protocol broker: listener and connections, the API table, one handler file
//! per Kafka API, the topic catalog, partitions (the one seam to Raft), the replica
//! manager that opens and closes them as the controller decides, and fetch sessions.
//!
//! The produce path, in seven hops: `connection` (framing, in-order responses) →
//! `dispatch` (API table) → `handlers/produce.rs` (validate) → `Partition::append` →
//! Raft driver (append, replicate, batched fsync) → commit → response.
//!
//! Neighbours: `runnel-wire` (batch validation), `runnel-storage` (the partition log),
//! `runnel-raft` (replication, reached only through `partition` and `replica_manager`),
//! `runnel-controller` (metadata; it reaches this crate only through the `Host` that
//! `replica_manager` implements), `runnel-coordinator` (consumer groups, stored through
//! `offsets_log`). The binary crate `runnel` parses the command line and calls
//! [`server::run`].

mod arrivals;
mod authz;
pub mod broker;
pub mod catalog;
pub mod config;
pub mod config_change;
mod config_view;
pub mod connection;
mod coordinators;
mod ctx;
mod disk_reads;
mod dispatch;
pub mod drain;
mod errors;
mod fetch_session;
mod group_configs;
mod handlers;
mod inflight;
mod kafka_settings;
mod kind;
mod memory;
pub mod metrics;
pub mod offsets_log;
mod out_frame;
pub mod partition;
mod preferred_leader;
mod quota;
mod reassign;
pub mod replica_manager;
mod replica_selector;
mod sasl_gate;
mod sendfile;
pub mod server;
mod share;
mod share_session;
mod share_state;
pub mod topic_config;
mod txn;
mod txn_peers;
pub mod watchdog;

pub use broker::Broker;
pub use config::{BrokerConfig, Settings};

/// Wall-clock milliseconds since the Unix epoch (Kafka timestamps), as
/// `fault.clock.offset.ms` may have shifted them.
pub fn now_ms() -> i64 {
    runnel_sync::clock::wall_ms()
}
