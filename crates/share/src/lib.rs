//! Share groups (KIP-932): the state of a share-partition and where it is kept.
//!
//! A share group's members read the same partitions together, each record handed to one
//! member at a time under a time-limited lock, and acknowledged one by one. For each
//! (group, topic, partition) the partition's leader keeps a [`SharePartition`]: the share
//! start offset (SPSO), the records in flight after it with their state and delivery
//! count, and the end of what was handed out (SPEO). Every acknowledgement is made durable
//! before the client hears of it: the partition's [`Snapshot`] is written to the internal
//! topic `__share_group_state` by the share coordinator ([`StateStore`]), the leader of the
//! state partition the key hashes to. A new partition leader reads the snapshot back, so a
//! leader change loses no acknowledgement (locks are not kept: records acquired at the time
//! become available again, as in Kafka).
//!
//! Neighbours: the broker's handlers (ShareFetch, ShareAcknowledge) drive the partition
//! state with records they read from the log; nothing here touches sockets or files.

mod partition;
mod snapshot;
mod store;

pub use partition::{Ack, Acquired, Limits, SharePartition};
pub use snapshot::{RecordState, Snapshot, SnapshotError, StateBatch};
pub use store::{state_key, StateStore};
