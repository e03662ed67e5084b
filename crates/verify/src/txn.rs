//! The transactional workload's producers (`--transactional`): each is a transactional
//! producer with its own transactional id that, at `rate` transactions a second, writes one
//! value to each of two partitions and commits, or (every fifth transaction) aborts. It
//! speaks the protocol as Kafka's producer does: FindCoordinator, InitProducerId (again
//! after any fatal error, which fences and aborts what was open), AddPartitionsToTxn,
//! transactional produce with sequence numbers, EndTxn, each retried while the error is
//! retriable. Every other producer uses transactions version 2 (KIP-890 part 2) instead:
//! no AddPartitionsToTxn (Produce v12 adds the partition), and EndTxn v5, whose answer
//! gives the epoch of the next transaction. Every transaction is recorded with how it
//! ended, and each of its values as a send with that outcome: a committed one must be read
//! whole, a never-committed one never, and one whose commit went unanswered whole or not at
//! all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ProduceRequest,
    ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use runnel_client::{
    topic_name, wall_ms, ADD_PARTITIONS_TO_TXN_VERSION, END_TXN_VERSION, FIND_COORDINATOR_VERSION,
    INIT_PRODUCER_ID_VERSION, PRODUCE_VERSION,
};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};

use crate::config::VerifyConfig;
use crate::history::{Op, OpKind, Outcome, Send, TxnRecord};
use crate::router::{retriable, Router};

/// The coordinator aborts a transaction its producer left open after this long.
const TXN_TIMEOUT_MS: i32 = 10_000;
/// Every this many transactions, one is aborted on purpose.
const ABORT_EVERY: u64 = 5;
/// Transactions version 2: the first versions of Produce and EndTxn that are.
const PRODUCE_VERSION_TV2: i16 = 12;
const END_TXN_VERSION_TV2: i16 = 5;

/// What a step's error means to the producer.
pub(crate) enum Step<T> {
    Done(T),
    /// Ask again (after looking the coordinator or leader up again).
    Retry,
    /// The producer must start over with InitProducerId (fenced, or its state is unknown).
    Fatal,
}

pub(crate) struct Producer {
    cfg: Arc<VerifyConfig>,
    pub(crate) router: Router,
    txn_id: String,
    coordinator: Option<String>,
    /// (producer id, epoch) once initialised.
    pub(crate) id: Option<(i64, i16)>,
    /// Next sequence number per partition, for the current epoch.
    sequences: HashMap<i32, i32>,
    /// Transactions version 2.
    tv2: bool,
}

fn retriable_txn(code: i16) -> bool {
    retriable(code) || code == ResponseError::ConcurrentTransactions.code()
}

impl Producer {
    /// A transactional producer with its own router (`process` names its connections),
    /// as client `index` placed in its region (its namespace, `client.rack`, its region's
    /// brokers asked first), like the other clients.
    pub(crate) fn new(cfg: Arc<VerifyConfig>, index: usize, process: &str, txn_id: String, tv2: bool) -> Producer {
        let router = Router::new(&cfg.bootstrap, &cfg.topic, &format!("runnel-verify-{process}"), cfg.request_timeout)
            .in_region(cfg.region_of(index), &cfg.broker_regions);
        Producer { cfg, router, txn_id, coordinator: None, id: None, sequences: HashMap::new(), tv2 }
    }

    pub(crate) fn txn_id(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.txn_id.clone()))
    }

    async fn coordinator(&mut self) -> Option<String> {
        if self.coordinator.is_none() {
            let req =
                FindCoordinatorRequest::default().with_key(StrBytes::from_string(self.txn_id.clone())).with_key_type(1);
            match self.router.call_any(&req, FIND_COORDINATOR_VERSION).await {
                Ok(r) if r.error_code == 0 => self.coordinator = Some(format!("{}:{}", r.host.as_str(), r.port)),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        self.coordinator.clone()
    }

    fn lose_coordinator(&mut self) {
        if let Some(c) = self.coordinator.take() {
            self.router.drop_conn(&c);
        }
    }

    /// Sends a request to the coordinator; `code` reads the answer's error.
    async fn call_coordinator<R: kafka_protocol::protocol::Request>(
        &mut self,
        req: &R,
        version: i16,
        code: impl Fn(&R::Response) -> i16,
    ) -> Step<R::Response> {
        let Some(addr) = self.coordinator().await else { return Step::Retry };
        match self.router.call_at(&addr, req, version).await {
            Err(_) => {
                self.lose_coordinator();
                Step::Retry
            }
            Ok(r) => match code(&r) {
                0 => Step::Done(r),
                c if retriable_txn(c) => {
                    if c != ResponseError::ConcurrentTransactions.code() {
                        self.lose_coordinator();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Step::Retry
                }
                _ => Step::Fatal,
            },
        }
    }

    pub(crate) async fn init(&mut self, give_up: Instant) -> bool {
        while Instant::now() < give_up {
            let req = InitProducerIdRequest::default()
                .with_transactional_id(Some(self.txn_id()))
                .with_transaction_timeout_ms(TXN_TIMEOUT_MS)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            if let Step::Done(r) = self.call_coordinator(&req, INIT_PRODUCER_ID_VERSION, |r| r.error_code).await {
                self.id = Some((r.producer_id.0, r.producer_epoch));
                self.sequences.clear();
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    async fn add_partitions(&mut self, parts: &[i32], give_up: Instant) -> Step<()> {
        let Some((pid, epoch)) = self.id else { return Step::Fatal };
        if self.tv2 {
            return Step::Done(()); // the produce adds them
        }
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(self.txn_id())
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name(&self.cfg.topic))
                .with_partitions(parts.to_vec())]);
        let worst = |r: &kafka_protocol::messages::AddPartitionsToTxnResponse| {
            let codes = r.results_by_topic_v3_and_below.iter().flat_map(|t| &t.results_by_partition);
            codes.map(|p| p.partition_error_code).find(|c| *c != 0).unwrap_or(0)
        };
        while Instant::now() < give_up {
            match self.call_coordinator(&req, ADD_PARTITIONS_TO_TXN_VERSION, worst).await {
                Step::Retry => continue,
                other => return other.map(|_| ()),
            }
        }
        Step::Fatal
    }

    /// Produces `value` to `partition` in the transaction; the acknowledged offset.
    pub(crate) async fn produce(&mut self, partition: i32, value: u64, give_up: Instant) -> Step<i64> {
        let Some((pid, epoch)) = self.id else { return Step::Fatal };
        let seq = *self.sequences.get(&partition).unwrap_or(&0);
        let now = wall_ms();
        let mut b = BatchBuilder::new(now);
        b.push(now, None, Some(&value.to_be_bytes()));
        let fields = ProducerFields { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
        let records = b.finish_transactional(CODEC_NONE, fields).expect("an uncompressed batch always encodes");
        let req = ProduceRequest::default()
            .with_transactional_id(Some(self.txn_id()))
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(&self.cfg.topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(Bytes::from(records)))])]);
        while Instant::now() < give_up {
            let Some(leader) = self.router.leader(partition).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let version = if self.tv2 { PRODUCE_VERSION_TV2 } else { PRODUCE_VERSION };
            match self.router.call_at(&leader, &req, version).await {
                Err(_) => {
                    self.router.leader_moved(Some(&leader)).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(resp) => {
                    let p = resp.responses.first().and_then(|t| t.partition_responses.first());
                    match p.map(|p| (p.error_code, p.base_offset)) {
                        Some((0, base)) => {
                            self.sequences.insert(partition, seq.wrapping_add(1));
                            return Step::Done(base);
                        }
                        Some((code, _)) if retriable(code) => {
                            self.router.leader_moved(None).await;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        _ => return Step::Fatal,
                    }
                }
            }
        }
        // Unanswered: whether it landed is unknown, so the producer's state is too.
        Step::Fatal
    }

    /// EndTxn, retried; Ok(true) when the coordinator answered success, Ok(false) when it
    /// refused, Err(()) when no answer came (`answered_all` tells whether every attempt was
    /// answered, so a refusal after a lost attempt is no proof). With version 2, success
    /// moves the producer to the epoch (or producer id) the answer gives.
    pub(crate) async fn end(&mut self, commit: bool, give_up: Instant) -> (Option<bool>, bool) {
        let Some((pid, epoch)) = self.id else { return (Some(false), true) };
        let req = EndTxnRequest::default()
            .with_transactional_id(self.txn_id())
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit);
        let mut answered_all = true;
        let version = if self.tv2 { END_TXN_VERSION_TV2 } else { END_TXN_VERSION };
        while Instant::now() < give_up {
            let Some(addr) = self.coordinator().await else { continue };
            match self.router.call_at(&addr, &req, version).await {
                Err(_) => {
                    answered_all = false;
                    self.lose_coordinator();
                }
                Ok(r) if r.error_code == 0 => {
                    if self.tv2 {
                        self.id = Some((r.producer_id.0, r.producer_epoch));
                        self.sequences.clear();
                    }
                    return (Some(true), answered_all);
                }
                Ok(r) if retriable_txn(r.error_code) => {
                    if r.error_code != ResponseError::ConcurrentTransactions.code() {
                        self.lose_coordinator();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(_) => return (Some(false), answered_all),
            }
        }
        (None, false)
    }
}

/// How a transaction ended, from its EndTxn: `commit` whether a commit was asked (rather
/// than an abort, or nothing), `ended` and `answered_all` what [`Producer::end`] returned.
pub(crate) fn txn_outcome(commit: bool, ended: Option<bool>, answered_all: bool) -> Outcome {
    match ended {
        Some(true) if commit => Outcome::Ok,
        // A commit refused although every attempt was answered was never committed.
        Some(false) if commit && answered_all => Outcome::Failed,
        _ if commit => Outcome::Unknown,
        // Never asked to commit: it cannot commit (the next epoch aborts it at once).
        _ => Outcome::Failed,
    }
}

/// Records one ended transaction of producer `index`: its op on the timeline (`process`,
/// from `began`, times from `t0`), each of its values as a send with the transaction's
/// outcome (the acknowledged offset kept only when it committed), and the transaction.
#[allow(clippy::type_complexity)]
pub(crate) fn record_txn(
    index: usize,
    (process, t0, began): (&str, Instant, Instant),
    written: &[(i32, u64, Option<i64>)],
    outcome: Outcome,
    (sends, ops, txns): (&mut Vec<Send>, &mut Vec<Op>, &mut Vec<TxnRecord>),
) {
    ops.push(Op {
        kind: OpKind::Send,
        process: process.to_string(),
        start_ms: began.duration_since(t0).as_millis() as u64,
        latency_ms: began.elapsed().as_millis() as u64,
        outcome,
    });
    for &(partition, value, offset) in written {
        let offset = if outcome == Outcome::Ok { offset } else { None };
        sends.push(Send { producer: index, partition, value, outcome, offset });
    }
    txns.push(TxnRecord { producer: index, values: written.iter().map(|w| w.1).collect(), outcome });
}

impl<T> Step<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U> {
        match self {
            Step::Done(t) => Step::Done(f(t)),
            Step::Retry => Step::Retry,
            Step::Fatal => Step::Fatal,
        }
    }
}

/// One transactional producer (`index`): transactions at `cfg.rate` a second until the
/// deadline. Values are `index << 40 | 1 << 39 | n` (bit 39 marks transactional values).
pub(crate) async fn produce(
    cfg: Arc<VerifyConfig>,
    index: usize,
    t0: Instant,
    deadline: Instant,
) -> (Vec<Send>, Vec<Op>, Vec<TxnRecord>) {
    let process = crate::history::in_region(format!("txn-producer-{index}"), cfg.region_of(index));
    let mut p = Producer::new(cfg.clone(), index, &process, format!("{}-txn-{index}", cfg.topic), index % 2 == 1);
    let (mut sends, mut ops, mut txns) = (Vec::new(), Vec::new(), Vec::new());
    let rate = cfg.rate.max(0.01);
    let start = Instant::now();
    let mut n: u64 = 0;
    let mut number: u64 = 0;
    while Instant::now() < deadline {
        tokio::time::sleep_until((start + Duration::from_secs_f64(number as f64 / rate)).into()).await;
        if Instant::now() >= deadline {
            break;
        }
        let began = Instant::now();
        let give_up = began + cfg.retry_for;
        if p.id.is_none() && !p.init(give_up).await {
            continue;
        }
        let parts = [(number % cfg.partitions as u64) as i32, ((number + 1) % cfg.partitions as u64) as i32];
        let parts: Vec<i32> = if parts[0] == parts[1] { vec![parts[0]] } else { parts.to_vec() };
        let want_commit = number % ABORT_EVERY != ABORT_EVERY - 1;
        number += 1;
        let mut written: Vec<(i32, u64, Option<i64>)> = Vec::new();
        let mut healthy = matches!(p.add_partitions(&parts, give_up).await, Step::Done(()));
        if healthy {
            for &partition in &parts {
                let value = ((index as u64) << 40) | (1 << 39) | n;
                n += 1;
                match p.produce(partition, value, give_up).await {
                    Step::Done(offset) => written.push((partition, value, Some(offset))),
                    _ => {
                        // It may have landed: a value of a transaction that must not commit.
                        written.push((partition, value, None));
                        healthy = false;
                        break;
                    }
                }
            }
        }
        let commit = healthy && want_commit;
        let (ended, answered_all) = if healthy { p.end(commit, give_up).await } else { (None, true) };
        let outcome = txn_outcome(commit, ended, answered_all);
        // The producer goes on only after a clean end; otherwise a new epoch fences the old.
        if ended != Some(true) {
            p.id = None;
        }
        let timing = (process.as_str(), t0, began);
        record_txn(index, timing, &written, outcome, (&mut sends, &mut ops, &mut txns));
    }
    (sends, ops, txns)
}
