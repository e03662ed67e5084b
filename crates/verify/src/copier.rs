//! The transactional workload's consume-transform-produce step (`--transactional`): one
//! exactly-once copier, as a Kafka Streams task runs. It reads the topic with
//! `read_committed` from its group's committed offsets, and in one transaction writes a
//! copy of every value it read (to the same partition) and commits the offsets it read up
//! to (TxnOffsetCommit), then commits the transaction, or, every fifth time, aborts it and
//! reads the same values again. It uses transactions version 2 (KIP-890: Produce v12 and
//! TxnOffsetCommit v5 add their partitions, EndTxn v5 moves the epoch). After a fatal error
//! it starts over with InitProducerId (which aborts what it left open) from the offsets its
//! group has committed.
//!
//! Exactly once means: once the run is over, every value below the group's committed
//! offsets has exactly one copy in the log, and no copy exists of a value at or past them
//! (`checker`). A copy is `COPY_BIT | attempt << 48 | value`: unique to the attempt (so an
//! aborted copy and its redo are told apart), and naming the value it copies.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, OffsetFetchRequest, ProducerId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use runnel_client::{topic_name, FIND_COORDINATOR_VERSION};

use crate::config::VerifyConfig;
use crate::fetch::fetch_round;
use crate::history::{copied, CopierRecord, Op, Send, TxnRecord, COPIED_MASK, COPY_BIT};
use crate::router::retriable;
use crate::txn::{record_txn, txn_outcome, Producer, Step};

/// Every this many copier transactions, one is aborted on purpose.
const ABORT_EVERY: u64 = 5;
const TXN_EVERY: Duration = Duration::from_millis(100);
/// Transactions version 2 (KIP-447 members, KIP-890 implicit add).
const TXN_OFFSET_COMMIT_VERSION: i16 = 5;
const OFFSET_FETCH_VERSION: i16 = 7;

fn copy_of(value: u64, attempt: u64) -> u64 {
    COPY_BIT | ((attempt & 0x7fff) << 48) | (value & COPIED_MASK)
}

struct Copier {
    p: Producer,
    topic: String,
    group: String,
    partitions: i32,
    group_coordinator: Option<String>,
}

impl Copier {
    fn group_id(&self) -> GroupId {
        GroupId(StrBytes::from_string(self.group.clone()))
    }

    async fn group_coordinator(&mut self) -> Option<String> {
        if self.group_coordinator.is_none() {
            let req =
                FindCoordinatorRequest::default().with_key(StrBytes::from_string(self.group.clone())).with_key_type(0);
            match self.p.router.call_any(&req, FIND_COORDINATOR_VERSION).await {
                Ok(r) if r.error_code == 0 => self.group_coordinator = Some(format!("{}:{}", r.host.as_str(), r.port)),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        self.group_coordinator.clone()
    }

    fn lose_group_coordinator(&mut self) {
        if let Some(c) = self.group_coordinator.take() {
            self.p.router.drop_conn(&c);
        }
    }

    /// The group's committed offsets, stable (no transaction of it still open: asked with
    /// require_stable, retried while UNSTABLE_OFFSET_COMMIT); 0 where none is.
    async fn committed(&mut self, give_up: Instant) -> Option<BTreeMap<i32, i64>> {
        let req = OffsetFetchRequest::default().with_group_id(self.group_id()).with_require_stable(true).with_topics(
            Some(vec![OffsetFetchRequestTopic::default()
                .with_name(topic_name(&self.topic))
                .with_partition_indexes((0..self.partitions).collect())]),
        );
        while Instant::now() < give_up {
            let Some(addr) = self.group_coordinator().await else { continue };
            let r = match self.p.router.call_at(&addr, &req, OFFSET_FETCH_VERSION).await {
                Ok(r) => r,
                Err(_) => {
                    self.lose_group_coordinator();
                    continue;
                }
            };
            let codes = std::iter::once(r.error_code)
                .chain(r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)));
            match codes.filter(|c| *c != 0).max() {
                None => {
                    let mut out: BTreeMap<i32, i64> = (0..self.partitions).map(|p| (p, 0)).collect();
                    for p in r.topics.iter().flat_map(|t| &t.partitions).filter(|p| p.committed_offset >= 0) {
                        out.insert(p.partition_index, p.committed_offset);
                    }
                    return Some(out);
                }
                Some(code) => {
                    if !retriable(code) && code != kafka_protocol::error::ResponseError::UnstableOffsetCommit.code() {
                        return None;
                    }
                    self.lose_group_coordinator();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        None
    }

    /// TxnOffsetCommit of `positions` in the open transaction.
    async fn commit_offsets(&mut self, positions: &BTreeMap<i32, i64>, give_up: Instant) -> Step<()> {
        let Some((pid, epoch)) = self.p.id else { return Step::Fatal };
        let partitions = positions
            .iter()
            .map(|(p, o)| TxnOffsetCommitRequestPartition::default().with_partition_index(*p).with_committed_offset(*o))
            .collect();
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(self.p.txn_id())
            .with_group_id(self.group_id())
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(topic_name(&self.topic))
                .with_partitions(partitions)]);
        while Instant::now() < give_up {
            let Some(addr) = self.group_coordinator().await else { continue };
            match self.p.router.call_at(&addr, &req, TXN_OFFSET_COMMIT_VERSION).await {
                Err(_) => self.lose_group_coordinator(),
                Ok(r) => {
                    let code = r.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).find(|c| *c != 0);
                    match code {
                        None => return Step::Done(()),
                        Some(c)
                            if retriable(c)
                                || c == kafka_protocol::error::ResponseError::ConcurrentTransactions.code() =>
                        {
                            self.lose_group_coordinator();
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Some(_) => return Step::Fatal,
                    }
                }
            }
        }
        Step::Fatal
    }
}

/// The copier, as producer `index` of the history: transactions until the deadline, then
/// the group's committed offsets once every transaction of it has ended.
pub(crate) async fn run(
    cfg: Arc<VerifyConfig>,
    index: usize,
    t0: Instant,
    deadline: Instant,
) -> (Vec<Send>, Vec<Op>, Vec<TxnRecord>, CopierRecord) {
    let process = crate::history::in_region("copier".to_string(), cfg.region_of(index));
    let p = Producer::new(cfg.clone(), index, &process, format!("{}-copier", cfg.topic), true);
    let group = format!("{}-copier", cfg.topic);
    let mut c = Copier {
        p,
        topic: cfg.topic.clone(),
        group: group.clone(),
        partitions: cfg.partitions,
        group_coordinator: None,
    };
    let (mut sends, mut ops, mut txns) = (Vec::new(), Vec::new(), Vec::new());
    // Where the next transaction reads from: the committed offsets, or past the last commit.
    let mut positions: Option<BTreeMap<i32, i64>> = None;
    let mut attempt: u64 = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(TXN_EVERY).await;
        let give_up = Instant::now() + cfg.retry_for;
        if c.p.id.is_none() && !c.p.init(give_up).await {
            continue;
        }
        let committed = match positions.take() {
            Some(p) => p,
            None => match c.committed(give_up).await {
                Some(p) => p,
                None => continue,
            },
        };
        let mut read_to = committed.clone();
        let mut records = Vec::new();
        fetch_round(&mut c.p.router, &cfg.topic, &mut read_to, &mut records, &process, t0, &mut ops, true).await;
        let inputs: Vec<(i32, u64)> = records
            .iter()
            .filter(|(_, _, v)| copied(*v).is_none() && *v != u64::MAX)
            .map(|(p, _, v)| (*p, *v))
            .collect();
        if read_to == committed {
            positions = Some(committed);
            continue;
        }
        attempt += 1;
        let want_commit = !attempt.is_multiple_of(ABORT_EVERY);
        let began = Instant::now();
        let mut written: Vec<(i32, u64, Option<i64>)> = Vec::new();
        let mut healthy = true;
        for &(partition, value) in &inputs {
            let copy = copy_of(value, attempt);
            match c.p.produce(partition, copy, give_up).await {
                Step::Done(offset) => written.push((partition, copy, Some(offset))),
                _ => {
                    written.push((partition, copy, None));
                    healthy = false;
                    break;
                }
            }
        }
        healthy = healthy && matches!(c.commit_offsets(&read_to, give_up).await, Step::Done(()));
        let commit = healthy && want_commit;
        let (ended, answered_all) = if healthy { c.p.end(commit, give_up).await } else { (None, true) };
        let outcome = txn_outcome(commit, ended, answered_all);
        if ended != Some(true) {
            c.p.id = None; // the next init fences this epoch and aborts what it left open
        }
        // After a clean commit, read on from where it committed; otherwise ask the group.
        positions = (ended == Some(true) && commit).then_some(read_to);
        let timing = (process.as_str(), t0, began);
        record_txn(index, timing, &written, outcome, (&mut sends, &mut ops, &mut txns));
    }
    // Every transaction of the copier ended (a new epoch aborts one left open), then the
    // offsets its group committed, stable.
    let give_up = Instant::now() + Duration::from_secs(60);
    let committed = if c.p.id.is_some() || c.p.init(give_up).await {
        c.committed(give_up).await.unwrap_or_default()
    } else {
        BTreeMap::new()
    };
    (sends, ops, txns, CopierRecord { group, committed })
}
