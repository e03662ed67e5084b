//! What a run of the queue workload recorded: every send with its outcome and
//! acknowledged offset, every poll with the records it returned, every timed operation, and
//! the faults injected meanwhile. `workload` and `group` write it; `checker`, `impact` and
//! `chart` read it. It is also the JSON a run saves (`--history`), so old histories
//! must keep parsing (new fields are `#[serde(default)]`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Ok,
    Failed,
    Unknown,
}

/// One produce of one value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Send {
    pub producer: usize,
    pub partition: i32,
    pub value: u64,
    pub outcome: Outcome,
    /// The offset the broker acknowledged (Ok sends only).
    pub offset: Option<i64>,
}

/// One transaction of the transactional workload: its values (one send each) and how it
/// ended: `Ok` committed, `Failed` never committed (aborted, or fenced before its commit
/// was asked), `Unknown` (the commit was asked and not answered).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TxnRecord {
    pub producer: usize,
    pub values: Vec<u64>,
    pub outcome: Outcome,
}

/// Marks a copy written by the transactional workload's copier (`copier`): no producer's
/// value has it.
pub const COPY_BIT: u64 = 1 << 63;
/// The bits of a copy that hold the value it copies.
pub const COPIED_MASK: u64 = (1 << 48) - 1;

/// The value a copy copies, if `v` is one.
pub fn copied(v: u64) -> Option<u64> {
    (v & COPY_BIT != 0).then_some(v & COPIED_MASK)
}

/// What the copier leaves for the checker: its group and the offsets the group committed
/// once the run was over (what the copies must account for).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CopierRecord {
    pub group: String,
    pub committed: BTreeMap<i32, i64>,
}

/// One poll of one consumer: the records it got, in the order it got them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Poll {
    pub consumer: usize,
    /// (partition, offset, value)
    pub records: Vec<(i32, i64, u64)>,
}

/// What a timed operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// One produce request (of `batch` values), retries included.
    Send,
    /// One fetch.
    Poll,
    /// One offset commit of a group consumer.
    Commit,
}

/// One operation on the timeline: when it started, how long it took, how it ended. The
/// availability chart is drawn from these.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Op {
    pub kind: OpKind,
    /// Who ran it: `producer-0`, `consumer-1`, `group-0`...
    pub process: String,
    /// Milliseconds from the start of the run.
    pub start_ms: u64,
    pub latency_ms: u64,
    pub outcome: Outcome,
}

/// A fault that was in force from `start_ms` to `end_ms` (from the start of the run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultWindow {
    /// What was done, e.g. `kill -9 leader (broker 1)`.
    pub fault: String,
    pub start_ms: u64,
    pub end_ms: u64,
    /// After a fault that cut brokers off: how the cluster came back, measured from the heal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
    /// While the fault held (a drill's region cut): how soon after it started a metadata
    /// change committed through the brokers outside it, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_write_ms: Option<u64>,
}

/// How a cluster came back after brokers were cut off and let back in, in milliseconds from
/// the heal (None: not within the run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    /// Until every replica on those brokers had everything that was committed at the heal
    /// (its high watermark, as a fetch from it reports, reached the leader's of then).
    pub caught_up_ms: Option<u64>,
    /// Until every partition was led by its preferred leader (the first of its replicas).
    pub leaders_back_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    /// In the order each producer issued them (per producer, order matters).
    pub sends: Vec<Send>,
    /// In the order each consumer made them (per consumer, order matters).
    pub polls: Vec<Poll>,
    /// Consumers whose reads cover every partition from the log start to its end after the
    /// workload stopped.
    pub final_readers: BTreeSet<usize>,
    /// Consumer group → the consumer ids (one per member and assignment) that read for it.
    #[serde(default)]
    pub groups: BTreeMap<String, BTreeSet<usize>>,
    /// Every timed operation (histories written before timing existed have none).
    #[serde(default)]
    pub ops: Vec<Op>,
    /// Faults injected while the workload ran.
    #[serde(default)]
    pub faults: Vec<FaultWindow>,
    /// How long the workload ran, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// The transactional workload's transactions (their values are in `sends` too, each
    /// with its transaction's outcome).
    #[serde(default)]
    pub txns: Vec<TxnRecord>,
    /// The transactional workload's copier (consume-transform-produce), if it ran.
    #[serde(default)]
    pub copier: Option<CopierRecord>,
    /// Bytes of records the live consumers and group members read: client region → the
    /// region of the broker read from → bytes (without regions, both are empty strings).
    #[serde(default)]
    pub fetched: BTreeMap<String, BTreeMap<String, u64>>,
}

impl History {
    /// Adds what a client in `region` read, per broker region.
    pub fn add_fetched(&mut self, region: &str, by_region: BTreeMap<String, u64>) {
        let mine = self.fetched.entry(region.to_string()).or_default();
        for (r, bytes) in by_region {
            *mine.entry(r).or_default() += bytes;
        }
    }

    /// Bytes consumers read from brokers outside their own region, and in all.
    pub fn cross_region_fetched(&self) -> (u64, u64) {
        let mut cross = 0;
        let mut all = 0;
        for (client, by) in &self.fetched {
            for (broker, bytes) in by {
                all += bytes;
                if broker != client {
                    cross += bytes;
                }
            }
        }
        (cross, all)
    }
}

/// A process name with the region it runs in (`producer-0-p1@us-east`), which the
/// per-region figures of a fault read back.
pub fn in_region(process: String, region: Option<&crate::config::ClientRegion>) -> String {
    match region {
        Some(r) => format!("{process}@{}", r.name),
        None => process,
    }
}

/// The region of a process named by [`in_region`].
pub fn region_of(process: &str) -> Option<&str> {
    process.rsplit_once('@').map(|(_, r)| r)
}
