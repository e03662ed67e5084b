//! Transactions on this broker: the transaction coordinator's host (producer ids, and
//! markers written on the partitions' leaders, here or on other brokers), what a
//! partition leader asks the coordinator before it takes a transaction's first batch
//! (KIP-890: is the partition in it, or, with transactions version 2, add it), and what
//! brokers send each other for both over the Raft transport's `T` channel (mutual TLS
//! when the internal listener has it). Delivery there is best effort (a message sent to a
//! peer just after it restarted can be lost with the connection it went out on): a
//! request not answered in time counts as failed, and the coordinator retries markers
//! until they land. A retried marker may land twice; the second closes nothing (the
//! transaction it ended is no longer open there), and Raft keeps it before anything the
//! producer writes after the coordinator has seen every marker land.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use runnel_txn::{BoxFuture, MarkerWrite, Tp, TxnHost};
use runnel_wire::TxnEnd;
use tokio::sync::mpsc;
use tracing::warn;

use crate::broker::Broker;
use crate::coordinators::{self, Kind};
use crate::errors;
use crate::offsets_log::{OFFSETS_TOPIC, TXN_TOPIC};
use crate::txn_peers::{self, TxnMessage};

/// How long a marker may take to commit on its partition before the round counts it as
/// not written (the coordinator writes it again in its next round).
const MARKER_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a partition's leader elsewhere has to answer for markers: it answers within
/// [`MARKER_COMMIT_TIMEOUT`], so only a lost request or answer waits this long.
const MARKER_ASK_TIMEOUT: Duration = Duration::from_secs(7);
/// How long a peer has to answer a verification.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Attaches this broker to its transaction coordinator (as its [`TxnHost`]) and starts
/// handling what peers send about transactions.
pub fn attach(b: &Arc<Broker>) {
    b.txn_host.attach(Arc::new(BrokerTxnHost { broker: Arc::downgrade(b) }));
    if let Some(inbox) = b.txn_inbox.lock().ok().and_then(|mut i| i.take()) {
        tokio::spawn(peer_loop(Arc::downgrade(b), inbox));
    }
}

/// The coordinator's view of this broker.
struct BrokerTxnHost {
    broker: Weak<Broker>,
}

impl BrokerTxnHost {
    fn broker(&self) -> Option<Arc<Broker>> {
        self.broker.upgrade()
    }
}

impl TxnHost for BrokerTxnHost {
    fn write_markers(&self, w: MarkerWrite) -> BoxFuture<Vec<(Tp, String)>> {
        let b = self.broker();
        Box::pin(async move {
            match b {
                Some(b) => write_markers(&b, w).await,
                None => w.partitions.into_iter().map(|tp| (tp, "the broker is stopping".to_string())).collect(),
            }
        })
    }

    fn allocate_producer_id(&self) -> BoxFuture<Result<i64, String>> {
        let b = self.broker();
        Box::pin(async move {
            match b {
                Some(b) => b.allocate_producer_id().await.map_err(|e| e.to_string()),
                None => Err("the broker is stopping".into()),
            }
        })
    }

    fn coordinator_epoch(&self, partition: i32) -> Option<i32> {
        let b = self.broker()?;
        let topic = b.catalog.topic(TXN_TOPIC)?;
        let term = topic.partitions.get(partition as usize)?.current_leader_term()?;
        i32::try_from(term).ok()
    }
}

/// Writes markers on the partitions' leaders: those led here directly, the others through
/// their leaders. Returns the partitions not written, with why.
async fn write_markers(b: &Arc<Broker>, mut w: MarkerWrite) -> Vec<(Tp, String)> {
    let mut here: Vec<Tp> = Vec::new();
    let mut elsewhere: BTreeMap<i32, Vec<Tp>> = BTreeMap::new();
    let mut failed = Vec::new();
    for tp in std::mem::take(&mut w.partitions) {
        let part = b.catalog.topic(&tp.0).and_then(|t| t.partitions.get(tp.1 as usize).cloned());
        let Some(part) = part else {
            continue; // the topic was deleted: nothing to end there
        };
        match b.partition_leader(&part).0 {
            leader if leader == b.node_id() => here.push(tp),
            leader if leader >= 0 => elsewhere.entry(leader).or_default().push(tp),
            _ => failed.push((tp, "no leader".to_string())),
        }
    }
    // Each leader asked in a task of its own, all at once.
    let remote: Vec<_> = elsewhere
        .into_iter()
        .map(|(leader, partitions)| {
            let b = b.clone();
            let w = MarkerWrite { partitions, ..w.clone() };
            tokio::spawn(async move {
                let answer = b
                    .txn_peers
                    .ask(b.replicas.driver(), leader, MARKER_ASK_TIMEOUT, |req| TxnMessage::WriteMarkers {
                        req,
                        producer_id: w.producer_id,
                        producer_epoch: w.producer_epoch,
                        coordinator_epoch: w.coordinator_epoch,
                        commit: w.end == TxnEnd::Commit,
                        partitions: w.partitions.clone(),
                    })
                    .await;
                match answer {
                    Some(TxnMessage::MarkersWritten { failed, .. }) => failed,
                    _ => w.partitions.into_iter().map(|tp| (tp, format!("broker {leader} did not answer"))).collect(),
                }
            })
        })
        .collect();
    let codes = write_markers_here(b, w.producer_id, w.producer_epoch, w.coordinator_epoch, w.end, &here).await;
    failed.extend(failures(here, codes));
    for task in remote {
        match task.await {
            Ok(f) => failed.extend(f),
            Err(e) => warn!(error = %e, "a marker request to a peer failed"),
        }
    }
    failed
}

/// The partitions whose markers were not written, with why (a partition that no longer
/// exists has nothing to end, so it counts as written).
fn failures(partitions: Vec<Tp>, codes: Vec<Option<ResponseError>>) -> Vec<(Tp, String)> {
    partitions
        .into_iter()
        .zip(codes)
        .filter_map(|(tp, code)| match code {
            None | Some(ResponseError::UnknownTopicOrPartition) => None,
            Some(code) => Some((tp, format!("{code:?}"))),
        })
        .collect()
}

/// Writes the markers on partitions led here and waits for them to commit. One result per
/// partition, in order: None when written, else Kafka's error (UNKNOWN_TOPIC_OR_PARTITION
/// for a partition that does not exist).
pub async fn write_markers_here(
    b: &Broker,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    end: TxnEnd,
    partitions: &[Tp],
) -> Vec<Option<ResponseError>> {
    let mut results = Vec::with_capacity(partitions.len());
    let mut waits = Vec::new();
    for (i, (topic, index)) in partitions.iter().enumerate() {
        let part = b.catalog.topic(topic).and_then(|t| t.partitions.get(*index as usize).cloned());
        results.push(match part {
            None => Some(ResponseError::UnknownTopicOrPartition),
            Some(part) => match part.write_marker(producer_id, producer_epoch, coordinator_epoch, end) {
                Ok(appended) => {
                    waits.push((i, appended));
                    None
                }
                Err(e) => Some(errors::partition(&e)),
            },
        });
    }
    for (i, appended) in waits {
        match appended.durable(MARKER_COMMIT_TIMEOUT).await {
            // On the group's offsets partition, the group coordinator (this partition's
            // leader) settles the offsets committed in the transaction.
            Ok(()) if partitions[i].0 == OFFSETS_TOPIC => {
                b.group_coordinator.complete_txn(partitions[i].1, producer_id, end == TxnEnd::Commit)
            }
            Ok(()) => {}
            Err(e) => results[i] = Some(errors::partition(&e)),
        }
    }
    results
}

/// What a partition leader (or group coordinator) asks a transaction's coordinator.
enum Ask {
    /// Is the partition in the open transaction? (transactions version 1)
    Verify(Tp),
    /// Add these partitions to it (version 2: the producer sends no AddPartitionsToTxn).
    Add(Vec<Tp>),
}

/// Asks the transaction's coordinator, here or on its broker; the coordinator's own error,
/// or COORDINATOR_NOT_AVAILABLE when it cannot be asked now.
async fn ask_coordinator(
    b: &Arc<Broker>,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    ask: Ask,
) -> Result<(), ResponseError> {
    let info = coordinators::locate(b, Kind::Transactions, transactional_id)
        .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
    let c = &b.txn_coordinator;
    if info.id == b.node_id() {
        return match ask {
            Ask::Verify(tp) => c.verify(transactional_id, producer_id, epoch, &tp),
            Ask::Add(parts) => c.add_partitions(transactional_id, producer_id, epoch, &parts, true).await,
        };
    }
    let id = transactional_id.to_string();
    let asked = b.txn_peers.ask(b.replicas.driver(), info.id, VERIFY_TIMEOUT, |req| match ask {
        Ask::Verify(partition) => {
            TxnMessage::Verify { req, transactional_id: id, producer_id, producer_epoch: epoch, partition }
        }
        Ask::Add(partitions) => {
            TxnMessage::Add { req, transactional_id: id, producer_id, producer_epoch: epoch, partitions }
        }
    });
    match asked.await {
        Some(TxnMessage::Verified { error: 0, .. }) => Ok(()),
        Some(TxnMessage::Verified { error, .. }) => {
            Err(ResponseError::try_from_code(error).unwrap_or(ResponseError::UnknownServerError))
        }
        _ => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// A coordinator's refusal as a produce answers it, as Kafka does: INVALID_PRODUCER_EPOCH
/// for a fenced producer, INVALID_TXN_STATE when the partition is not in the transaction,
/// NOT_ENOUGH_REPLICAS (retriable, and no metadata refresh) when the coordinator cannot
/// answer now.
fn for_produce(e: ResponseError) -> ResponseError {
    match e {
        ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
        ResponseError::InvalidTxnState | ResponseError::InvalidProducerIdMapping => ResponseError::InvalidTxnState,
        _ => ResponseError::NotEnoughReplicas,
    }
}

/// KIP-890 part 1: before a partition leader takes the first batch of a producer's
/// transaction, the transaction's coordinator must have the partition in it (so a late or
/// stray write cannot open a transaction that nobody will end). Answered as a produce
/// answers it.
pub async fn verify(
    b: &Arc<Broker>,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    tp: Tp,
) -> Result<(), ResponseError> {
    ask_coordinator(b, transactional_id, producer_id, epoch, Ask::Verify(tp)).await.map_err(for_produce)
}

/// KIP-890 part 2 (transactions version 2): a produce (v12+) or TxnOffsetCommit (v5+)
/// that opens the producer's transaction on a partition adds the partition itself.
/// CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written)
/// and a loading coordinator are retried every `add.partitions.to.txn.retry.backoff.ms`
/// for at most `add.partitions.to.txn.retry.backoff.max.ms`; the coordinator's error
/// otherwise.
pub async fn add(
    b: &Arc<Broker>,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    parts: Vec<Tp>,
) -> Result<(), ResponseError> {
    let s = &b.config.settings;
    let backoff = Duration::from_millis(s.i64("add.partitions.to.txn.retry.backoff.ms").clamp(1, 10_000) as u64);
    let most = Duration::from_millis(s.i64("add.partitions.to.txn.retry.backoff.max.ms").clamp(0, 60_000) as u64);
    let give_up = tokio::time::Instant::now() + most;
    loop {
        match ask_coordinator(b, transactional_id, producer_id, epoch, Ask::Add(parts.clone())).await {
            Err(ResponseError::ConcurrentTransactions | ResponseError::CoordinatorLoadInProgress)
                if tokio::time::Instant::now() + backoff <= give_up =>
            {
                tokio::time::sleep(backoff).await
            }
            answer => return answer,
        }
    }
}

/// [`add`] for a produce, answered as a produce answers it.
pub async fn add_for_produce(
    b: &Arc<Broker>,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    parts: Vec<Tp>,
) -> Result<(), ResponseError> {
    add(b, transactional_id, producer_id, epoch, parts).await.map_err(for_produce)
}

/// Handles what peers send about transactions.
async fn peer_loop(broker: Weak<Broker>, mut inbox: mpsc::Receiver<(u64, Vec<u8>)>) {
    while let Some((from, data)) = inbox.recv().await {
        let Some(b) = broker.upgrade() else { return };
        let msg = match serde_json::from_slice::<TxnMessage>(&data) {
            Ok(msg) => msg,
            Err(e) => {
                warn!(from, error = %e, "unreadable transaction message from a peer");
                continue;
            }
        };
        if msg.reply_to().is_some() {
            b.txn_peers.answer(msg);
            continue;
        }
        let to = runnel_controller::broker_of(from);
        match msg {
            TxnMessage::WriteMarkers { req, producer_id, producer_epoch, coordinator_epoch, commit, partitions } => {
                tokio::spawn(async move {
                    let end = if commit { TxnEnd::Commit } else { TxnEnd::Abort };
                    let codes =
                        write_markers_here(&b, producer_id, producer_epoch, coordinator_epoch, end, &partitions).await;
                    let reply = TxnMessage::MarkersWritten { req, failed: failures(partitions, codes) };
                    txn_peers::send(b.replicas.driver(), to, &reply);
                });
            }
            TxnMessage::Verify { req, transactional_id, producer_id, producer_epoch, partition } => {
                let error = match b.txn_coordinator.verify(&transactional_id, producer_id, producer_epoch, &partition) {
                    Ok(()) => 0,
                    Err(e) => e.code(),
                };
                txn_peers::send(b.replicas.driver(), to, &TxnMessage::Verified { req, error });
            }
            TxnMessage::Add { req, transactional_id, producer_id, producer_epoch, partitions } => {
                tokio::spawn(async move {
                    let c = &b.txn_coordinator;
                    let error =
                        match c.add_partitions(&transactional_id, producer_id, producer_epoch, &partitions, true).await
                        {
                            Ok(()) => 0,
                            Err(e) => e.code(),
                        };
                    txn_peers::send(b.replicas.driver(), to, &TxnMessage::Verified { req, error });
                });
            }
            TxnMessage::ShareRead { req, key } => {
                let reply = crate::share_state::answer_read(&b, req, &key);
                txn_peers::send(b.replicas.driver(), to, &reply);
            }
            TxnMessage::ShareWrite { req, key, state } => {
                tokio::spawn(async move {
                    let reply = crate::share_state::answer_write(&b, req, &key, Some(&state)).await;
                    txn_peers::send(b.replicas.driver(), to, &reply);
                });
            }
            TxnMessage::ShareDelete { req, key } => {
                tokio::spawn(async move {
                    let reply = crate::share_state::answer_write(&b, req, &key, None).await;
                    txn_peers::send(b.replicas.driver(), to, &reply);
                });
            }
            TxnMessage::MarkersWritten { .. } | TxnMessage::Verified { .. } | TxnMessage::ShareState { .. } => {}
        }
    }
}
