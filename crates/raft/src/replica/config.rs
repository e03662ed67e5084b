//! How a replica is opened and how it behaves.

/// Timing and identity of a replica. Ticks are driven by the caller (100 ms in a broker).
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// This replica's Raft id (a broker's node id + 1: Raft reserves 0).
    pub id: u64,
    /// The group's voters when it is created; an existing replica keeps its own record.
    pub voters: Vec<u64>,
    pub election_tick: usize,
    pub heartbeat_tick: usize,
    /// Committed entries with data are handed to the caller ([`crate::Replica::take_applied`]):
    /// the metadata group needs them, partition groups do not.
    pub deliver_committed: bool,
    /// Bound on bytes proposed but not committed; proposals past it are refused.
    pub max_uncommitted_bytes: u64,
    /// An idle group goes quiet (see `replica/quiet.rs`); the metadata group never does.
    pub quiesce: bool,
    /// Whatever the replica's files hold is already on disk: the caller synced their
    /// filesystem after they were last written (a broker does, once, as it starts). A log
    /// whose tail was not synced before a crash then needs no sync of its own to open.
    pub tail_synced: bool,
}

impl ReplicaConfig {
    pub fn new(id: u64, voters: Vec<u64>) -> ReplicaConfig {
        ReplicaConfig {
            id,
            voters,
            election_tick: 10,
            // Three heartbeats per shortest election timeout. Idle groups cost in
            // proportion: at 10k partitions per broker, every tick was 28% of a core.
            heartbeat_tick: 3,
            deliver_committed: false,
            max_uncommitted_bytes: 256 << 20,
            quiesce: true,
            tail_synced: false,
        }
    }
}
