//! Runnel's controller, which every broker runs: the metadata Raft log
//! (`__cluster_metadata-0`, Raft group 0 over `controller.quorum.voters`, or this broker
//! alone in a cluster of one), the image each broker rebuilds from it, and the frontend
//! that decides changes. Only the metadata leader proposes; other brokers forward their
//! calls to it (KIP-590).
//!
//! The broker reaches the controller through [`Controller`]'s methods; the controller
//! reaches the broker only through the [`Host`] trait, whose `apply` carries out each
//! committed record's [`Effect`] (open or close replicas, new configs, DeleteRecords) off
//! the async workers, in log order.
//!
//! The produce path does not pass through here; it is, in seven hops: connection →
//! dispatch → `handlers/produce.rs` → `Partition::append` → Raft driver (append,
//! replicate, batched fsync) → commit → response. The controller only decides where
//! partitions live.
//!
//! - `records`: the metadata records and controller messages (JSON).
//! - `image`: the state replayed from the log and the effect of each record.
//! - `controller`: the metadata replica, apply loop, inbox and request frontend.
//! - `decide`: the controller's checks and the record each call commits.
//! - `placement`: replicas over nested failure domains; `leader_preference`: where a
//!   topic's leaders should be.
//! - `sessions`: registration, heartbeats, fencing, and observers joining the metadata
//!   group as learners; `quorum`: the quorum as DescribeQuorum shows it.

mod controller;
mod decide;
mod host;
mod image;
pub mod leader_preference;
mod placement;
mod quorum;
mod records;
mod sessions;

pub use controller::{Controller, ControllerConfig, Outcome, CONTROLLER_CHANNEL, INBOX_MAX};
pub use host::{Effect, Host, Limits};
pub use placement::{place, placement_risk, replace_broker, Assignment};
pub use records::{
    broker_of, first_request_id, parse_location, parse_voters, raft_group, raft_id, send_on_channel, BrokerInfo, Drain,
    Endpoint, Moving, QuorumMember, QuorumState, RaftGroupId, TopicConfigChange, META_GROUP,
};
