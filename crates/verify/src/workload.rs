//! The queue workload that records a history for the checker: producers send unique
//! values (idempotent, acks=all, one request in flight, a request retried with the same
//! sequence numbers until it is answered, as a Kafka producer does), consumers read every
//! partition from the start while the workload runs, and after it a final reader reads
//! every partition from the start to the end. Faults (kill -9, pause, ...) are injected
//! from outside while it runs; every connection error is survived by reconnecting.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{BrokerId, FetchRequest, ProduceRequest};
use runnel_bench::client::Connection;
use runnel_bench::cluster::{init_producer_id, topic_name, Cluster, FETCH_VERSION, PRODUCE_VERSION};
use runnel_bench::consumer::{for_each_record, value_stamp};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use tokio::sync::watch;

use crate::checker::{History, Outcome, Poll, Send};

#[derive(Debug, Clone)]
pub struct VerifyConfig {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub producers: usize,
    pub consumers: usize,
    /// Values per produce request.
    pub batch: usize,
    /// Requests per second per producer.
    pub rate: f64,
    pub duration: Duration,
    /// How long one request is retried before its outcome is called unknown.
    pub retry_for: Duration,
}

/// The final reader's consumer id in the history.
pub const FINAL_READER: usize = usize::MAX;

/// Connects (retrying while the cluster is down) to `bootstrap`.
async fn connect(bootstrap: &str, client_id: &str, until: Instant) -> Option<Arc<Connection>> {
    loop {
        match Connection::connect(bootstrap, client_id, 1).await {
            Ok(c) => return Some(c),
            Err(_) if Instant::now() < until => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => return None,
        }
    }
}

async fn call_with_timeout<R: kafka_protocol::protocol::Request>(
    conn: &Connection,
    req: &R,
    version: i16,
) -> Result<R::Response> {
    tokio::time::timeout(Duration::from_secs(15), conn.call(req, version)).await.context("request timed out")?
}

async fn init_producer(conn: &Connection) -> Result<(i64, i16)> {
    let answer = tokio::time::timeout(Duration::from_secs(15), init_producer_id(conn)).await;
    match answer.context("request timed out")?? {
        (0, id, epoch) => Ok((id, epoch)),
        (code, _, _) => anyhow::bail!("InitProducerId: error code {code}"),
    }
}

fn retriable(code: i16) -> bool {
    matches!(
        ResponseError::try_from_code(code),
        Some(
            ResponseError::NotLeaderOrFollower
                | ResponseError::LeaderNotAvailable
                | ResponseError::RequestTimedOut
                | ResponseError::NotEnoughReplicas
                | ResponseError::NotEnoughReplicasAfterAppend
                | ResponseError::KafkaStorageError
                | ResponseError::UnknownTopicOrPartition
                | ResponseError::CoordinatorLoadInProgress
        )
    )
}

/// One producer: values `index << 40 | n`, partitions in turn, until the deadline.
async fn produce(cfg: Arc<VerifyConfig>, index: usize, deadline: Instant) -> Vec<Send> {
    let client_id = format!("runnel-verify-producer-{index}");
    let mut sends = Vec::new();
    let mut conn: Option<Arc<Connection>> = None;
    let mut producer: Option<(i64, i16)> = None;
    let mut sequence: HashMap<i32, i32> = HashMap::new();
    let mut n: u64 = 0;
    let start = Instant::now();
    let mut request = 0u64;
    while Instant::now() < deadline {
        let due = start + Duration::from_secs_f64(request as f64 / cfg.rate.max(0.1));
        tokio::time::sleep_until(due.into()).await;
        request += 1;
        let partition = (request % cfg.partitions as u64) as i32;
        let values: Vec<u64> = (0..cfg.batch as u64).map(|k| ((index as u64) << 40) | (n + k)).collect();
        n += cfg.batch as u64;
        let give_up = Instant::now() + cfg.retry_for;
        let mut outcome: Option<(Outcome, Option<i64>)> = None;
        // The batch is built once a producer id is known and then resent unchanged.
        let mut built: Option<ProduceRequest> = None;
        while outcome.is_none() {
            if Instant::now() > give_up {
                outcome = Some((Outcome::Unknown, None));
                break;
            }
            if conn.is_none() {
                conn = connect(&cfg.bootstrap, &client_id, give_up).await;
                if conn.is_none() {
                    continue;
                }
            }
            let c = conn.clone().expect("connected above");
            if producer.is_none() {
                match init_producer(&c).await {
                    Ok(p) => {
                        producer = Some(p);
                        sequence.clear();
                    }
                    Err(_) => {
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let (pid, epoch) = producer.expect("initialised above");
            let req = built.get_or_insert_with(|| {
                let seq = *sequence.get(&partition).unwrap_or(&0);
                let mut b = BatchBuilder::new(0);
                for v in &values {
                    b.push(0, None, Some(&v.to_be_bytes()));
                }
                let fields = ProducerFields { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
                let records = b.finish(CODEC_NONE, fields).expect("an uncompressed batch always encodes");
                ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
                    TopicProduceData::default().with_name(topic_name(&cfg.topic)).with_partition_data(vec![
                        PartitionProduceData::default().with_index(partition).with_records(Some(Bytes::from(records))),
                    ]),
                ])
            });
            match call_with_timeout(&c, req, PRODUCE_VERSION).await {
                Err(_) => {
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(resp) => {
                    let p = resp.responses.first().and_then(|t| t.partition_responses.first());
                    match p.map(|p| (p.error_code, p.base_offset)) {
                        Some((0, base)) => outcome = Some((Outcome::Ok, Some(base))),
                        Some((code, _)) if retriable(code) => tokio::time::sleep(Duration::from_millis(100)).await,
                        _ => outcome = Some((Outcome::Failed, None)),
                    }
                }
            }
        }
        let (o, base) = outcome.expect("loop ends with an outcome");
        match o {
            Outcome::Ok => {
                *sequence.entry(partition).or_default() += cfg.batch as i32;
            }
            // The producer's sequence state is unknown now: start over with a new id.
            _ => producer = None,
        }
        for (k, v) in values.iter().enumerate() {
            sends.push(Send { producer: index, partition, value: *v, outcome: o, offset: base.map(|b| b + k as i64) });
        }
    }
    sends
}

/// Reads `partitions` from offset 0 until `stop` says to, or (with `ends`) until every
/// partition reaches its end offset.
async fn consume(
    cfg: Arc<VerifyConfig>,
    id: usize,
    partitions: Vec<i32>,
    mut stop: watch::Receiver<bool>,
    ends: Option<BTreeMap<i32, i64>>,
    deadline: Instant,
) -> Vec<Poll> {
    let client_id = format!("runnel-verify-consumer-{id}");
    let mut polls = Vec::new();
    let mut position: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
    let mut conn: Option<Arc<Connection>> = None;
    loop {
        if let Some(ends) = &ends {
            if position.iter().all(|(p, o)| *o >= ends[p]) {
                break;
            }
        } else if *stop.borrow_and_update() {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        if conn.is_none() {
            conn = connect(&cfg.bootstrap, &client_id, deadline).await;
            continue;
        }
        let c = conn.clone().expect("connected above");
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(200)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(topic_name(&cfg.topic)).with_partitions(
                position
                    .iter()
                    .map(|(p, o)| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_fetch_offset(*o)
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect(),
            )]);
        let resp = match call_with_timeout(&c, &req, FETCH_VERSION).await {
            Ok(r) => r,
            Err(_) => {
                conn = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut records = Vec::new();
        for t in resp.responses {
            for p in t.partitions {
                let Some(data) = p.records.filter(|_| p.error_code == 0) else { continue };
                let partition = p.partition_index;
                let mut got = Vec::new();
                let read = for_each_record(&data, position[&partition], |offset, v| {
                    got.push((partition, offset, value_stamp(v).unwrap_or(u64::MAX)));
                });
                // A fetch with an undecodable batch is dropped whole and read again.
                if let Ok(Some(next)) = read {
                    position.insert(partition, next);
                    records.extend(got);
                }
            }
        }
        if !records.is_empty() {
            polls.push(Poll { consumer: id, records });
        }
    }
    polls
}

/// Runs the workload against the cluster and returns its history.
pub async fn run(cfg: VerifyConfig) -> Result<History> {
    let cfg = Arc::new(cfg);
    let mut cluster = Cluster::connect(&cfg.bootstrap).await?;
    cluster
        .create_topic(&cfg.topic, cfg.partitions, cfg.replication_factor, &BTreeMap::new())
        .await
        .with_context(|| format!("creating {}", cfg.topic))?;
    let layout = cluster.layout(&cfg.topic).await?;
    let start = Instant::now();
    let deadline = start + cfg.duration;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut consumers = Vec::new();
    for c in 0..cfg.consumers {
        let mine: Vec<i32> = (0..cfg.partitions).filter(|p| *p as usize % cfg.consumers.max(1) == c).collect();
        if !mine.is_empty() {
            // Live consumers stop with the producers; the bound covers a last retried request.
            let bound = deadline + cfg.retry_for + Duration::from_secs(5);
            consumers.push(tokio::spawn(consume(cfg.clone(), c, mine, stop_rx.clone(), None, bound)));
        }
    }
    let producers: Vec<_> = (0..cfg.producers).map(|i| tokio::spawn(produce(cfg.clone(), i, deadline))).collect();
    let mut history = History::default();
    for p in producers {
        history.sends.extend(p.await.context("producer task")?);
    }
    let _ = stop_tx.send(true);
    for c in consumers {
        history.polls.extend(c.await.context("consumer task")?);
    }
    // The final read: every partition from the start to the end as it is now.
    let ends_deadline = Instant::now() + Duration::from_secs(60);
    let ends = loop {
        let mut cluster = match Cluster::connect(&cfg.bootstrap).await {
            Ok(c) => c,
            Err(_) if Instant::now() < ends_deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let layout = cluster.layout(&cfg.topic).await.unwrap_or(layout.clone());
        match cluster.end_offsets(&layout).await {
            Ok(e) => break e,
            Err(_) if Instant::now() < ends_deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e),
        }
    };
    let ends: BTreeMap<i32, i64> = ends.iter().enumerate().map(|(p, e)| (p as i32, *e)).collect();
    let all: Vec<i32> = (0..cfg.partitions).collect();
    let (_tx, rx) = watch::channel(false);
    let final_polls =
        consume(cfg.clone(), FINAL_READER, all, rx, Some(ends), Instant::now() + Duration::from_secs(120)).await;
    history.polls.extend(final_polls);
    history.final_readers.insert(FINAL_READER);
    Ok(history)
}
