//! Multi-Raft for Runnel: each partition's replica set is one raft-rs group whose log is
//! the partition's Kafka log ([`store::RaftLog`]); [`replica::Replica`] drives one group
//! without doing I/O itself, so a broker can batch disk syncs and network sends across
//! thousands of groups, and the simulator can run a whole cluster from one seed.
//! [`driver::Driver`] runs every group of a broker; it reaches peers through a
//! [`transport::Transport`] and the disk through a [`driver::Disk`], so the simulator can
//! run whole drivers too (docs/simulation.md).
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` (proposes to a [`Replica`]) → the [`Driver`]
//! (append, replicate, one fsync per round) → commit (the high watermark moves) → response.

pub mod driver;
pub mod liveness;
mod offsets;
pub mod queue;
pub mod replica;
mod rounds;
pub mod sched;
mod snapshot_data;
pub mod store;
pub mod transport;
mod warms;

pub use driver::{Disk, Driver, Fatal, Hooks, Host, Persistence, SharedReplica, SyncPolicy};
pub use raft::eraftpb::{ConfChangeType, Message};
pub use raft::StateRole;
pub use replica::{Collected, Durability, Member, ProposeError, Proposed, Replica, ReplicaConfig};
pub use store::RaftLog;
pub use transport::{Envelope, PeerLinks, PeerTls, SocketBuffers, TcpTransport, Transport};
