//! Multi-Raft for Runnel: each partition's replica set is one raft-rs group whose log is
//! the partition's Kafka log ([`store::RaftLog`]); [`replica::Replica`] drives one group
//! without doing I/O itself, so a broker can batch disk syncs and network sends across
//! thousands of groups, and the simulator can run a whole cluster from one seed.

pub mod driver;
pub mod replica;
pub mod store;
pub mod transport;

pub use driver::{Driver, Hooks, SharedReplica, SyncPolicy};
pub use raft::eraftpb::{ConfChangeType, Message};
pub use raft::StateRole;
pub use replica::{Collected, Durability, ProposeError, Proposed, Replica, ReplicaConfig};
pub use store::RaftLog;
