//! Transactions: the transaction coordinator (transactional ids, producer epochs and
//! fencing, the partitions each transaction wrote to, commit and abort through markers,
//! timeouts), kept in the internal `__transaction_state` topic.
//!
//! Neighbours: the broker's handlers call in (InitProducerId, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions); the broker implements
//! [`TxnHost`] (markers on partition leaders, producer ids) and the log (the same
//! [`runnel_coordinator::GroupLog`] seam the group coordinator writes through). Markers and
//! the last stable offset live in the partition log itself (`runnel_storage`); this crate
//! only decides when to write them.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. A transaction's state changes take the same path into
//! `__transaction_state`, and its markers into each partition.

mod coordinator;
pub mod records;
pub mod state;

pub use coordinator::{BoxFuture, LateHost, MarkerWrite, TxnConfig, TxnCoordinator, TxnHost, TxnListing};
pub use state::{Ending, State, Tp, TxnMeta};
