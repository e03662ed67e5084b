//! The queue workload that records a history for the checker: producers send unique
//! values (idempotent, acks=all, one request in flight, a request retried with the same
//! sequence numbers until it is answered, as a Kafka producer does), consumers read every
//! partition from the start while the workload runs, and after it a final reader reads
//! every partition from the start to the end. With `transactional`, the producers write
//! in transactions (`txn`), a copier copies what they commit exactly once (`copier`), and
//! every reader reads with read_committed. Faults (kill -9, pause, ...) are injected
//! from outside while it runs; every connection error is survived by reconnecting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, InitProducerIdRequest, ListOffsetsRequest, ProduceRequest,
};
use runnel_client::{
    topic_name, wall_ms, CREATE_TOPICS_VERSION, INIT_PRODUCER_ID_VERSION, LIST_OFFSETS_VERSION, PRODUCE_VERSION,
};
use runnel_wire::build::{BatchBuilder, ProducerFields, CODEC_NONE};
use tokio::sync::watch;

use crate::config::{ClientRegion, VerifyConfig};
use crate::fetch::fetch_round;
use crate::group;
use crate::history::{in_region, History, Op, OpKind, Outcome, Poll, Send};
use crate::router::{retriable, Router};

/// The final reader's consumer id in the history.
pub const FINAL_READER: usize = usize::MAX;

/// Milliseconds since `t0`, for the timeline.
pub(crate) fn ms_since(t0: Instant) -> u64 {
    t0.elapsed().as_millis() as u64
}

/// One producer's sends to one partition: values `index << 40 | partition << 32 | n`, at
/// `rate / partitions` requests a second, until the deadline. Each request goes to the
/// partition's leader and is retried, unchanged, until answered or `retry_for` has passed.
/// Partitions are produced to independently (as a Kafka producer batches per partition),
/// so a partition without a leader stalls only its own sends.
async fn produce(
    cfg: Arc<VerifyConfig>,
    index: usize,
    partition: i32,
    t0: Instant,
    deadline: Instant,
) -> (Vec<Send>, Vec<Op>) {
    let process = in_region(format!("producer-{index}-p{partition}"), cfg.region_of(index));
    let client_id = format!("runnel-verify-{process}");
    let mut router = Router::new(&cfg.bootstrap, &cfg.topic, &client_id, cfg.request_timeout)
        .in_region(cfg.region_of(index), &cfg.broker_regions);
    let mut sends = Vec::new();
    let mut ops = Vec::new();
    let mut producer: Option<(i64, i16)> = None;
    let mut sequence: i32 = 0;
    let mut n: u64 = 0;
    let start = Instant::now();
    let rate = (cfg.rate / cfg.partitions.max(1) as f64).max(0.01);
    let mut request = 0u64;
    while Instant::now() < deadline {
        // Partitions start spread over the first interval rather than all at once.
        let due = start + Duration::from_secs_f64((request as f64 + partition as f64 / cfg.partitions as f64) / rate);
        tokio::time::sleep_until(due.into()).await;
        if Instant::now() >= deadline {
            break;
        }
        request += 1;
        let values: Vec<u64> =
            (0..cfg.batch as u64).map(|k| ((index as u64) << 40) | ((partition as u64) << 32) | (n + k)).collect();
        n += cfg.batch as u64;
        let began = Instant::now();
        let give_up = began + cfg.retry_for;
        let mut outcome: Option<(Outcome, Option<i64>)> = None;
        // The batch is built once a producer id is known and then resent unchanged.
        let mut built: Option<ProduceRequest> = None;
        while outcome.is_none() {
            if Instant::now() > give_up {
                outcome = Some((Outcome::Unknown, None));
                break;
            }
            if producer.is_none() {
                let req = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(-1);
                match router.call_any(&req, INIT_PRODUCER_ID_VERSION).await {
                    Ok(r) if r.error_code == 0 => {
                        producer = Some((r.producer_id.0, r.producer_epoch));
                        sequence = 0;
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            let Some(leader) = router.leader(partition).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let (pid, epoch) = producer.expect("initialised above");
            let req = built.get_or_insert_with(|| {
                let seq = sequence;
                // CreateTime now: a record stamped 0 is past any time retention, and a
                // broker that applies it (Apache Kafka does) deletes the history under test.
                let now = wall_ms();
                let mut b = BatchBuilder::new(now);
                for v in &values {
                    b.push(now, None, Some(&v.to_be_bytes()));
                }
                let fields = ProducerFields { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
                let records = b.finish(CODEC_NONE, fields).expect("an uncompressed batch always encodes");
                ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
                    TopicProduceData::default().with_name(topic_name(&cfg.topic)).with_partition_data(vec![
                        PartitionProduceData::default().with_index(partition).with_records(Some(Bytes::from(records))),
                    ]),
                ])
            });
            match router.call_at(&leader, req, PRODUCE_VERSION).await {
                Err(_) => {
                    router.leader_moved(Some(&leader)).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(resp) => {
                    let p = resp.responses.first().and_then(|t| t.partition_responses.first());
                    match p.map(|p| (p.error_code, p.base_offset)) {
                        Some((0, base)) => outcome = Some((Outcome::Ok, Some(base))),
                        Some((code, _)) if retriable(code) => {
                            router.leader_moved(None).await;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        _ => outcome = Some((Outcome::Failed, None)),
                    }
                }
            }
        }
        let (o, base) = outcome.expect("loop ends with an outcome");
        match o {
            Outcome::Ok => {
                sequence += cfg.batch as i32;
            }
            // The producer's sequence state is unknown now: start over with a new id.
            _ => producer = None,
        }
        ops.push(Op {
            kind: OpKind::Send,
            process: process.clone(),
            start_ms: began.duration_since(t0).as_millis() as u64,
            latency_ms: began.elapsed().as_millis() as u64,
            outcome: o,
        });
        for (k, v) in values.iter().enumerate() {
            sends.push(Send { producer: index, partition, value: *v, outcome: o, offset: base.map(|b| b + k as i64) });
        }
    }
    (sends, ops)
}

/// Reads `partitions` from offset 0 until `stop` says to, or (with `ends`) until every
/// partition reaches its end offset.
async fn consume(
    cfg: Arc<VerifyConfig>,
    id: usize,
    partitions: Vec<i32>,
    mut stop: watch::Receiver<bool>,
    ends: Option<BTreeMap<i32, i64>>,
    t0: Instant,
    deadline: Instant,
) -> (Vec<Poll>, Vec<Op>, BTreeMap<String, u64>) {
    // The final reader reads from the leaders, wherever they are.
    let region = if id == FINAL_READER { None } else { cfg.region_of(id) };
    let process =
        if id == FINAL_READER { "final-reader".to_string() } else { in_region(format!("consumer-{id}"), region) };
    let mut router = Router::new(&cfg.bootstrap, &cfg.topic, &format!("runnel-verify-{process}"), cfg.request_timeout)
        .in_region(region, &cfg.broker_regions);
    let mut polls = Vec::new();
    let mut ops = Vec::new();
    let mut position: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
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
        let mut records = Vec::new();
        fetch_round(&mut router, &cfg.topic, &mut position, &mut records, &process, t0, &mut ops, cfg.transactional)
            .await;
        if !records.is_empty() {
            polls.push(Poll { consumer: id, records });
        }
    }
    let fetched = router.fetched_by_region(&cfg.broker_regions);
    (polls, ops, fetched)
}

/// How long after its first attempt the run's topic is created again on
/// INVALID_REPLICATION_FACTOR, whatever the metadata lists: a cluster that has just started
/// registers and unfences its brokers within seconds. A replication factor the cluster
/// cannot hold fails after this.
const FORMING: Duration = Duration::from_secs(15);

/// Creates the run's topic and waits until every partition has a leader.
async fn create_topic(router: &mut Router, cfg: &VerifyConfig) -> Result<()> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut attempts = 0;
    loop {
        let t = CreatableTopic::default()
            .with_name(topic_name(&cfg.topic))
            .with_num_partitions(cfg.partitions)
            .with_replication_factor(cfg.replication_factor);
        let req = CreateTopicsRequest::default().with_topics(vec![t]).with_timeout_ms(30_000);
        attempts += 1;
        let code = match router.call_any(&req, CREATE_TOPICS_VERSION).await {
            Ok(r) => r.topics.first().map(|t| t.error_code).unwrap_or(-1),
            Err(_) => -1,
        };
        let exists = ResponseError::TopicAlreadyExists.code();
        // An earlier attempt that timed out may have created it.
        if code == 0 || (code == exists && attempts > 1) {
            break;
        }
        // A cluster just started may not have registered and unfenced enough brokers, in
        // enough regions, yet: its controller answers INVALID_REPLICATION_FACTOR until it has.
        // The metadata a broker serves may already list them all (a clean-clone CI run of a
        // cluster in network namespaces met this), so the answer is retried for a while
        // after the first attempt whatever the metadata says, and for as long as the
        // metadata lists fewer brokers than the replication factor.
        let forming = code == ResponseError::InvalidReplicationFactor.code()
            && (started.elapsed() < FORMING
                || (router.refresh().await.is_ok() && router.broker_count() < cfg.replication_factor.max(1) as usize));
        if code != -1 && !retriable(code) && !forming {
            bail!("creating {}: error code {code}", cfg.topic);
        }
        if Instant::now() > deadline {
            bail!("creating {}: no broker succeeded within 60 s", cfg.topic);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    loop {
        let _ = router.refresh().await;
        let mut all = true;
        for p in 0..cfg.partitions {
            all &= router.leader(p).await.is_some();
        }
        if all {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("topic {} has no leader for every partition", cfg.topic);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Where the final read ends. The log end offsets; for the transactional workload, the
/// last stable offsets once they reach the log ends (every transaction ended: the
/// coordinators abort those their producers left open, after the transaction timeout),
/// waited for at most a minute.
async fn final_offsets(router: &mut Router, cfg: &VerifyConfig) -> Result<BTreeMap<i32, i64>> {
    if !cfg.transactional {
        return end_offsets(router, cfg.partitions, 0).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stable = end_offsets(router, cfg.partitions, 1).await?;
        let ends = end_offsets(router, cfg.partitions, 0).await?;
        if stable == ends || Instant::now() > deadline {
            return Ok(stable);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each partition's log end offset (`isolation` 0) or last stable offset (1), asked of its
/// leader; retried for a minute.
async fn end_offsets(router: &mut Router, partitions: i32, isolation: i8) -> Result<BTreeMap<i32, i64>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ends = BTreeMap::new();
    while (ends.len() as i32) < partitions {
        if Instant::now() > deadline {
            bail!("no end offset for every partition within 60 s");
        }
        for p in 0..partitions {
            if ends.contains_key(&p) {
                continue;
            }
            let Some(addr) = router.leader(p).await else { continue };
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(isolation)
                .with_topics(vec![ListOffsetsTopic::default().with_name(topic_name(router.topic())).with_partitions(
                    vec![ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1)],
                )]);
            let answer = router.call_at(&addr, &req, LIST_OFFSETS_VERSION).await;
            match answer.ok().as_ref().and_then(|r| r.topics.first()).and_then(|t| t.partitions.first()) {
                Some(r) if r.error_code == 0 => {
                    ends.insert(p, r.offset);
                }
                _ => router.leader_moved(Some(&addr)).await,
            }
        }
        if (ends.len() as i32) < partitions {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(ends)
}

/// Runs the workload against the cluster and returns its history. Times on the timeline
/// count from `t0`.
pub async fn run(cfg: VerifyConfig, t0: Instant) -> Result<History> {
    let cfg = Arc::new(cfg);
    let mut router = Router::new(&cfg.bootstrap, &cfg.topic, "runnel-verify-admin", cfg.request_timeout);
    create_topic(&mut router, &cfg).await?;
    let start = Instant::now();
    let deadline = start + cfg.duration;
    // Live consumers stop with the producers; the bound covers a last retried request.
    let bound = deadline + cfg.retry_for + Duration::from_secs(5);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut consumers = Vec::new();
    for c in 0..cfg.consumers {
        let mine: Vec<i32> = (0..cfg.partitions).filter(|p| *p as usize % cfg.consumers.max(1) == c).collect();
        if !mine.is_empty() {
            let region = cfg.region_of(c).map_or(String::new(), |r| r.name.clone());
            consumers.push((tokio::spawn(consume(cfg.clone(), c, mine, stop_rx.clone(), None, t0, bound)), region));
        }
    }
    // Without regions one group; with them, one group per region, its members there.
    let groups: Vec<(String, Option<ClientRegion>)> = if cfg.regions.is_empty() {
        vec![(cfg.group.clone(), None)]
    } else {
        cfg.regions.iter().map(|r| (format!("{}-{}", cfg.group, r.name), Some(r.clone()))).collect()
    };
    let mut members = Vec::new();
    for (k, (group, region)) in groups.iter().enumerate() {
        for g in 0..cfg.group_consumers {
            let index = k * cfg.group_consumers + g;
            let member = group::member(cfg.clone(), index, group.clone(), region.clone(), stop_rx.clone(), t0, bound);
            members.push((group.clone(), tokio::spawn(member)));
        }
    }
    let mut history = History::default();
    if cfg.transactional {
        let producers: Vec<_> =
            (0..cfg.producers).map(|i| tokio::spawn(crate::txn::produce(cfg.clone(), i, t0, deadline))).collect();
        let copier = tokio::spawn(crate::copier::run(cfg.clone(), cfg.producers, t0, deadline));
        for p in producers {
            let (sends, ops, txns) = p.await.context("transactional producer task")?;
            history.sends.extend(sends);
            history.ops.extend(ops);
            history.txns.extend(txns);
        }
        let (sends, ops, txns, copier) = copier.await.context("copier task")?;
        history.sends.extend(sends);
        history.ops.extend(ops);
        history.txns.extend(txns);
        history.copier = Some(copier);
    } else {
        let producers: Vec<_> = (0..cfg.producers)
            .flat_map(|i| (0..cfg.partitions).map(move |p| (i, p)))
            .map(|(i, p)| tokio::spawn(produce(cfg.clone(), i, p, t0, deadline)))
            .collect();
        for p in producers {
            let (sends, ops) = p.await.context("producer task")?;
            history.sends.extend(sends);
            history.ops.extend(ops);
        }
    }
    history.duration_ms = ms_since(t0);
    let _ = stop_tx.send(true);
    for (c, region) in consumers {
        let (polls, ops, fetched) = c.await.context("consumer task")?;
        history.polls.extend(polls);
        history.ops.extend(ops);
        history.add_fetched(&region, fetched);
    }
    for (group, m) in members {
        let (polls, ops, ids, fetched) = m.await.context("group consumer task")?;
        history.polls.extend(polls);
        history.ops.extend(ops);
        let region = groups.iter().find(|(g, _)| *g == group).and_then(|(_, r)| r.as_ref());
        history.add_fetched(region.map_or("", |r| r.name.as_str()), fetched);
        history.groups.entry(group).or_default().extend(ids);
    }
    // The final read: every partition from the start to the end as it is now.
    let ends = final_offsets(&mut router, &cfg).await?;
    let all: Vec<i32> = (0..cfg.partitions).collect();
    let (_tx, rx) = watch::channel(false);
    let (final_polls, _, _) =
        consume(cfg.clone(), FINAL_READER, all, rx, Some(ends), t0, Instant::now() + Duration::from_secs(120)).await;
    history.polls.extend(final_polls);
    history.final_readers.insert(FINAL_READER);
    history.ops.sort_by_key(|o| o.start_ms);
    Ok(history)
}
