//! The group coordinator: consumer groups (the classic protocol and KIP-848's consumer
//! protocol) and committed offsets.
//!
//! State lives in memory and every change that must survive a restart is first written to
//! the internal `__consumer_offsets` log through the [`GroupLog`] trait, which the broker
//! implements over its ordinary partitions (so when partitions are replicated, so are
//! groups). On start, [`Coordinator::load`] replays that log. Neighbours: the broker calls
//! in from its handlers; nothing here touches sockets or files.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. Group commits take the same path: `GroupLog::append` is a
//! `Partition::append` with acks=all on `__consumer_offsets`.

pub mod consumer;
mod coordinator;
pub mod group;
pub mod records;
pub mod share_group;

pub use consumer::{HeartbeatIn, HeartbeatOut, Topics, Tp};
pub use coordinator::{
    Committed, ConsumerGroupSummary, ConsumerMemberSummary, Coordinator, CoordinatorConfig, GroupListing, GroupLog,
    GroupSummary, LogFuture, MemberSummary, Records, Replay, ShareGroupSummary, ShareMemberSummary,
};
pub use group::{JoinRequest, JoinResult, State, SyncResult};
pub use share_group::{ShareHeartbeatIn, ShareHeartbeatOut};
