//! Produce (key 0): validate every batch (CRC, magic, counts, size, the topic's rules),
//! append it through [`Partition::append`] (which checks the idempotent producer's
//! sequence and proposes to the partition's Raft group), and answer per `acks`: 0 not at
//! all, 1 once on the leader's disk, -1 (all) once committed on a majority of disks.
//! A transactional producer's first batch on a partition waits for its transaction
//! coordinator to confirm the partition is in the transaction (KIP-890 part 1) or, from
//! v12 (transactions version 2), to add it there (part 2).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use runnel_security::acl::Operation;
use runnel_wire::batch::HEADER_BYTES;
use runnel_wire::{BatchHeader, Batches};

use super::str_bytes;
use crate::broker::Broker;
use crate::catalog::Topic;
use crate::ctx::{Ctx, Reply};
use crate::errors;
use crate::partition::{Acks, Appended};
use crate::topic_config;

/// Per-topic settings that shape validation, read once per request.
struct TopicRules {
    max_message_bytes: usize,
    log_append_time: bool,
    /// A compacted topic needs a key on every record.
    compact: bool,
    /// The codec and level batches are stored with (`compression.type`), or None to keep
    /// the producer's.
    compression: Option<(i16, Option<i32>)>,
    /// CreateTime records must lie in [now - before, now + after].
    before_max_ms: i64,
    after_max_ms: i64,
    /// acks=all needs this many in-sync replicas (Kafka's ISR, as Metadata lists it).
    min_insync: usize,
}

fn rules(b: &Broker, t: &Topic) -> TopicRules {
    let s = b.catalog.settings();
    let get = |name: &str| topic_config::effective(name, &t.configs, &s).trim();
    TopicRules {
        max_message_bytes: get("max.message.bytes").parse().unwrap_or(1_048_588),
        log_append_time: get("message.timestamp.type") == "LogAppendTime",
        compact: topic_config::cleanup_policy(get("cleanup.policy")).is_some_and(|(_, compact)| compact),
        compression: topic_config::compression(&t.configs, &s),
        before_max_ms: get("message.timestamp.before.max.ms").parse().unwrap_or(i64::MAX),
        after_max_ms: get("message.timestamp.after.max.ms").parse().unwrap_or(i64::MAX),
        min_insync: get("min.insync.replicas").parse().unwrap_or(1),
    }
}

/// Why a partition's records were refused: the partition's error, its message, and the
/// records that caused it (KIP-467: index among the partition's records, message).
struct Refusal {
    code: ResponseError,
    message: String,
    records: Vec<(i32, String)>,
}

impl From<(ResponseError, String)> for Refusal {
    fn from((code, message): (ResponseError, String)) -> Refusal {
        Refusal { code, message, records: Vec::new() }
    }
}

/// A batch ready to append: a slice of the request's records unless the broker rewrote it
/// (recompression, LogAppendTime).
type Validated = (Bytes, BatchHeader);

/// A batch is proposed as a slice of its request (not copied) only when it is at least this
/// fraction (1/N) of the request's records; a smaller one is copied, which is cheap. A Raft
/// entry keeps its whole buffer alive, for as long as it waits in a slow peer's queue,
/// which counts only the entry: so a queued entry keeps at most N times its size alive.
const SHARED_SHARE_MAX: usize = 16;

/// Validates a partition's records into batches ready to append. Records are decoded only
/// when a rule needs them: a compacted topic (keys), a timestamp bound the batch header
/// cannot settle, or a `compression.type` other than the batch's.
/// `transactional`: the request names a transactional id, so transactional batches are
/// taken (control batches never are: only the broker writes markers).
fn validate(records: &Bytes, rules: &TopicRules, transactional: bool, now_ms: i64) -> Result<Vec<Validated>, Refusal> {
    let mut out = Vec::new();
    let (lowest, highest) = (now_ms.saturating_sub(rules.before_max_ms), now_ms.saturating_add(rules.after_max_ms));
    // The index of each batch's first record among the partition's records.
    let mut first_index = 0i32;
    let mut bad: Vec<(i32, String)> = Vec::new();
    let mut bad_timestamp = false;
    for item in Batches::new(records) {
        let (_, range) = item.map_err(|e| (errors::batch(&e), e.to_string()))?;
        let bytes = &records[range.clone()];
        let h = BatchHeader::validate_for_append(bytes).map_err(|e| (errors::batch(&e), e.to_string()))?;
        if bytes.len() > rules.max_message_bytes {
            return Err(too_large(bytes.len(), rules).into());
        }
        if h.is_control() {
            return Err((ResponseError::InvalidRecord, "control batches are written by the broker only".into()).into());
        }
        if h.is_transactional() && !(transactional && h.has_producer_id()) {
            let msg = "a transactional batch needs a transactional id and a producer id";
            return Err((ResponseError::InvalidRecord, msg.into()).into());
        }
        let check_time = !rules.log_append_time && (rules.before_max_ms < i64::MAX || h.max_timestamp > highest);
        let recompress = rules.compression.filter(|(codec, _)| *codec != h.compression());
        let mut batch = Cow::Borrowed(bytes);
        if rules.compact || check_time || recompress.is_some() {
            // Undecodable, or over the decompression bound (a compression bomb).
            let decoded = runnel_storage::records_of(&h, bytes)
                .map_err(|e| (ResponseError::CorruptMessage, format!("records cannot be read: {e}")))?;
            for (i, r) in decoded.iter().enumerate() {
                let index = first_index.saturating_add(i as i32);
                if rules.compact && r.key.is_none() {
                    bad.push((index, "Compacted topic cannot accept message without key.".into()));
                }
                // As Kafka: NO_TIMESTAMP (-1) is not checked.
                if check_time && r.timestamp != -1 && !(lowest..=highest).contains(&r.timestamp) {
                    bad_timestamp = true;
                    bad.push((
                        index,
                        format!(
                            "Timestamp {} of message with offset {} is out of range. The timestamp should be within [{lowest}, {highest}]",
                            r.timestamp, r.offset
                        ),
                    ));
                }
            }
            if let Some((codec, level)) = recompress {
                let rebuilt = runnel_wire::records::rebuild(&h, bytes, decoded.iter().map(|r| r.raw), codec, level)
                    .map_err(|e| (ResponseError::CorruptMessage, format!("records cannot be recompressed: {e}")))?;
                if rebuilt.len() > rules.max_message_bytes {
                    return Err(too_large(rebuilt.len(), rules).into());
                }
                batch = Cow::Owned(rebuilt);
            }
        }
        first_index = first_index.saturating_add(h.records_count.max(0));
        if rules.log_append_time {
            set_log_append_time(batch.to_mut(), now_ms);
        }
        let validated = match batch {
            Cow::Borrowed(_) => (records.slice(range), h),
            Cow::Owned(b) => {
                let h = BatchHeader::parse(&b).map_err(|e| (errors::batch(&e), e.to_string()))?;
                (Bytes::from(b), h)
            }
        };
        out.push(validated);
    }
    if !bad.is_empty() {
        // As Kafka's LogValidator: one refusal for the whole batch, naming each bad record.
        let (code, message) = match bad_timestamp {
            true => {
                (ResponseError::InvalidTimestamp, "One or more records have been rejected due to invalid timestamp")
            }
            false => (ResponseError::InvalidRecord, "One or more records have been rejected"),
        };
        return Err(Refusal { code, message: message.into(), records: bad });
    }
    if out.is_empty() {
        return Err((ResponseError::CorruptMessage, "no record batch in partition data".to_string()).into());
    }
    Ok(out)
}

fn too_large(bytes: usize, rules: &TopicRules) -> (ResponseError, String) {
    let max = rules.max_message_bytes;
    (ResponseError::MessageTooLarge, format!("batch of {bytes} bytes exceeds max.message.bytes {max}"))
}

/// LogAppendTime: the broker's clock replaces the batch's max timestamp; the timestamp
/// type bit tells consumers to use it for every record. The CRC covers both, so redo it.
fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    assert!(batch.len() >= HEADER_BYTES, "validated batch");
    let attrs = i16::from_be_bytes([batch[21], batch[22]]) | 0x08;
    batch[21..23].copy_from_slice(&attrs.to_be_bytes());
    batch[35..43].copy_from_slice(&now_ms.to_be_bytes());
    runnel_wire::batch::put_crc(batch);
}

/// The (topic, partition, producer id, epoch) of each partition where this request would
/// open a producer's transaction: its first batch is transactional and the producer has
/// no transaction open there at that epoch yet. The coordinator is asked about those
/// first (KIP-890). Topics the principal may not write are left to the append to refuse.
fn opening_transactions(b: &Broker, r: &ProduceRequest, v: i16, ctx: &Ctx) -> Vec<(String, i32, i64, i16)> {
    let mut out = Vec::new();
    for t in &r.topic_data {
        let topic = if v >= 13 { b.catalog.topic_by_id(t.topic_id) } else { b.catalog.topic(&t.name.0) };
        let Some(topic) = topic.filter(|t| ctx.access.topic(Operation::Write, &t.name)) else { continue };
        for p in &t.partition_data {
            let first = p.records.as_deref().and_then(|r| Batches::new(r).next()).and_then(Result::ok);
            let Some((h, _)) = first.filter(|(h, _)| h.is_transactional() && h.has_producer_id()) else { continue };
            let Some(part) = topic.partitions.get(p.index as usize) else { continue };
            if !part.is_remote() && !part.in_transaction(h.producer_id, h.producer_epoch) {
                out.push((topic.name.to_string(), p.index, h.producer_id, h.producer_epoch));
            }
        }
    }
    out
}

/// Asks the coordinator about the partitions this request opens transactions on: v12+
/// (transactions version 2) adds them to the transaction, older versions check they were
/// added (AddPartitionsToTxn). The partitions it refuses, with the code to answer.
async fn open_transactions(
    b: &Arc<Broker>,
    transactional_id: &str,
    v: i16,
    opening: Vec<(String, i32, i64, i16)>,
) -> HashMap<(String, i32), ResponseError> {
    let mut refused = HashMap::new();
    if v < 12 {
        for (topic, partition, producer_id, epoch) in opening {
            let tp = (topic, partition);
            if let Err(code) = crate::txn::verify(b, transactional_id, producer_id, epoch, tp.clone()).await {
                refused.insert(tp, code);
            }
        }
        return refused;
    }
    // One request is one producer's: one add for all its partitions (per epoch, should
    // batches disagree).
    let mut by_producer: BTreeMap<(i64, i16), Vec<(String, i32)>> = BTreeMap::new();
    for (topic, partition, producer_id, epoch) in opening {
        by_producer.entry((producer_id, epoch)).or_default().push((topic, partition));
    }
    for ((producer_id, epoch), parts) in by_producer {
        if let Err(code) = crate::txn::add_for_produce(b, transactional_id, producer_id, epoch, parts.clone()).await {
            refused.extend(parts.into_iter().map(|tp| (tp, code)));
        }
    }
    refused
}

impl TopicRules {
    /// Whether these rules make the broker read the records (a compacted topic,
    /// recompression, a lower timestamp bound): decompressing and recompressing is CPU work
    /// for a blocking thread, not for the async workers.
    fn read_records(&self) -> bool {
        self.compact || self.compression.is_some() || self.before_max_ms < i64::MAX
    }
}

/// Each of the request's topics as this broker knows it, with its rules: looked up once,
/// in the request's order.
type Resolved = Vec<Option<(Arc<Topic>, TopicRules)>>;

fn resolve(b: &Broker, r: &ProduceRequest, v: i16) -> Resolved {
    r.topic_data
        .iter()
        .map(|t| {
            let topic = if v >= 13 { b.catalog.topic_by_id(t.topic_id) } else { b.catalog.topic(&t.name.0) };
            topic.map(|t| {
                let rules = rules(b, &t);
                (t, rules)
            })
        })
        .collect()
}

pub fn handle(b: &Arc<Broker>, r: ProduceRequest, v: i16, ctx: &Ctx) -> Reply {
    let transactional_id = r.transactional_id.as_ref().map(|id| id.0.to_string());
    let opening = match &transactional_id {
        Some(id) if !ctx.access.transactional_id(Operation::Write, id) => {
            let resolved = resolve(b, &r, v);
            return append(b, r, resolved, v, ctx, Refused::all(ResponseError::TransactionalIdAuthorizationFailed));
        }
        Some(_) => opening_transactions(b, &r, v, ctx),
        None => Vec::new(),
    };
    let resolved = resolve(b, &r, v);
    let blocking = resolved.iter().flatten().any(|(_, rules)| rules.read_records());
    if opening.is_empty() && !blocking && !ctx.deferred.busy() {
        return append(b, r, resolved, v, ctx, Refused::new());
    }
    // This append waits (for the coordinator, for a blocking thread, or behind an earlier
    // append of this connection that does): it runs in the reply, after the earlier
    // replies (ctx::Deferred).
    let held = ctx.deferred.hold();
    let (b, ctx) = (b.clone(), ctx.clone());
    Box::pin(async move {
        let mut refused = Refused::new();
        if !opening.is_empty() {
            let id = transactional_id.as_deref().unwrap_or_default();
            refused.partitions = open_transactions(&b, id, v, opening).await;
        }
        let reply = if blocking {
            let (b, ctx) = (b.clone(), ctx.clone());
            match tokio::task::spawn_blocking(move || append(&b, r, resolved, v, &ctx, refused)).await {
                Ok(reply) => reply,
                Err(e) => {
                    tracing::error!(error = %e, "produce validation failed; no answer, the client retries");
                    return None;
                }
            }
        } else {
            append(&b, r, resolved, v, &ctx, refused)
        };
        drop(held);
        reply.await
    })
}

/// Partitions (or the whole request) refused before any append.
struct Refused {
    all: Option<ResponseError>,
    partitions: HashMap<(String, i32), ResponseError>,
}

impl Refused {
    fn new() -> Refused {
        Refused { all: None, partitions: HashMap::new() }
    }

    fn all(code: ResponseError) -> Refused {
        Refused { all: Some(code), partitions: HashMap::new() }
    }

    fn get(&self, topic: &str, partition: i32) -> Option<ResponseError> {
        self.all.or_else(|| self.partitions.get(&(topic.to_string(), partition)).copied())
    }
}

fn append(b: &Arc<Broker>, r: ProduceRequest, resolved: Resolved, v: i16, ctx: &Ctx, refused: Refused) -> Reply {
    let now_ms = crate::now_ms();
    let transactional = r.transactional_id.is_some();
    let acks = Acks::from_kafka(r.acks);
    // Accepted writes: (topic index, partition index, the write's durability wait).
    let mut waits: Vec<(usize, usize, Appended)> = Vec::new();
    let mut responses = Vec::with_capacity(r.topic_data.len());
    let mut bytes = 0usize;
    let request_records: usize =
        r.topic_data.iter().flat_map(|t| &t.partition_data).map(|p| p.records.as_ref().map_or(0, |b| b.len())).sum();
    for (t, found) in r.topic_data.into_iter().zip(resolved) {
        let (topic, rules) = found.map_or((None, None), |(t, rules)| (Some(t), Some(rules)));
        // By the name the request gives, known or not; v13 names topics by id, and an
        // unknown id is UNKNOWN_TOPIC_ID.
        let may_write = match &topic {
            Some(t) => ctx.access.topic(Operation::Write, &t.name),
            None => v >= 13 || ctx.access.topic(Operation::Write, &t.name.0),
        };
        // This topic's counters, looked up once (only for a topic that exists).
        let counted = topic.as_ref().map(|t| runnel_metrics::get().topic(&t.name));
        let mut parts = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let mut res = PartitionProduceResponse::default().with_index(p.index).with_base_offset(-1);
            bytes += p.records.as_ref().map_or(0, |r| r.len());
            let outcome = (|| -> Result<_, Refusal> {
                let Some(acks) = acks else {
                    return Err(
                        (ResponseError::InvalidRequiredAcks, format!("acks={} is not -1, 0 or 1", r.acks)).into()
                    );
                };
                if let Some(code) = refused.get(topic.as_ref().map_or(&t.name.0, |t| &t.name), p.index) {
                    let msg = match code {
                        ResponseError::InvalidTxnState => "the partition is not in the producer's transaction",
                        ResponseError::InvalidProducerEpoch => {
                            "the producer is fenced: a newer one has its transactional id"
                        }
                        ResponseError::TransactionalIdAuthorizationFailed => "Transactional Id authorization failed.",
                        _ => "the transaction's coordinator did not confirm the partition",
                    };
                    return Err((code, msg.to_string()).into());
                }
                if !may_write {
                    return Err(
                        (ResponseError::TopicAuthorizationFailed, "Topic authorization failed.".to_string()).into()
                    );
                }
                let (Some(topic), Some(rules)) = (&topic, &rules) else {
                    let code =
                        if v >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
                    return Err((code, "This server does not host this topic-partition.".to_string()).into());
                };
                if crate::offsets_log::is_internal(&topic.name) {
                    // As Kafka: clients never write internal topics (the group coordinator
                    // appends to them through the partition, not through Produce).
                    return Err((
                        ResponseError::InvalidTopicException,
                        format!("Cannot append to internal topic {}", topic.name),
                    )
                        .into());
                }
                let Some(part) = topic.partitions.get(p.index as usize) else {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.".to_string(),
                    )
                        .into());
                };
                if let Some(e) = part.leader_error() {
                    return Err((errors::partition(&e), e.to_string()).into());
                }
                if acks == Acks::All && rules.min_insync > 1 {
                    // As Kafka: acks=all is refused while fewer replicas than
                    // min.insync.replicas are in sync (Raft alone would take a majority).
                    let lag_ticks = crate::replica_manager::isr_lag_ticks(&b.catalog.settings());
                    let isr = b.partition_isr(part, lag_ticks);
                    if isr.len() < rules.min_insync {
                        let msg = format!(
                            "The size of the current ISR {isr:?} is insufficient to satisfy the min.isr requirement of {} for partition {}-{}",
                            rules.min_insync, topic.name, p.index
                        );
                        return Err((ResponseError::NotEnoughReplicas, msg).into());
                    }
                }
                let records = p.records.clone().unwrap_or_default();
                let mut batches = validate(&records, rules, transactional, now_ms)?;
                for (batch, _) in &mut batches {
                    if batch.len().saturating_mul(SHARED_SHARE_MAX) < request_records {
                        *batch = Bytes::copy_from_slice(batch);
                    }
                }
                let appended =
                    part.append(&batches, acks).map_err(|e| Refusal::from((errors::partition(&e), e.to_string())))?;
                let records: i64 = batches.iter().map(|(_, h)| h.records_count.max(0) as i64).sum();
                Ok((appended, rules.log_append_time, records))
            })();
            if let Some(m) = &counted {
                m.produce_requests.inc();
            }
            match outcome {
                Ok((appended, log_append_time, records)) => {
                    if let Some(m) = &counted {
                        m.bytes_in.inc_by(p.records.as_ref().map_or(0, |r| r.len()) as u64);
                        m.messages_in.inc_by(records as u64);
                    }
                    res.base_offset = appended.base_offset;
                    res.log_append_time_ms = if log_append_time { now_ms } else { -1 };
                    if v >= 5 {
                        res.log_start_offset = appended.log_start_offset;
                    }
                    waits.push((responses.len(), parts.len(), appended));
                }
                Err(Refusal { code, message: msg, records }) => {
                    if let Some(m) = &counted {
                        m.failed_produce_requests.inc();
                    }
                    res.error_code = code.code();
                    if v >= 8 {
                        res.error_message = Some(str_bytes(&msg));
                        res.record_errors = records
                            .iter()
                            .map(|(index, why)| {
                                BatchIndexAndErrorMessage::default()
                                    .with_batch_index(*index)
                                    .with_batch_index_error_message(Some(str_bytes(why)))
                            })
                            .collect();
                    }
                    tracing::debug!(topic = %t.name.0.as_str(), partition = p.index, ?code, %msg, "produce refused");
                }
            }
            parts.push(res);
        }
        let mut tr = TopicProduceResponse::default().with_partition_responses(parts);
        if v >= 13 {
            tr.topic_id = t.topic_id;
        } else {
            tr.name = t.name;
        }
        responses.push(tr);
    }
    // As Kafka: what was produced counts against the client's producer_byte_rate quota,
    // whatever became of it; over the quota, the answer says how long the connection is
    // muted for.
    let quotas = &ctx.quotas;
    let throttle_ms: i64 = match quotas.is_empty() {
        true => 0,
        false => b.quotas.record(quotas, &ctx.quota_client(), crate::quota::PRODUCE, bytes as f64, now_ms),
    };
    ctx.mute.set(throttle_ms);
    let mute = ctx.mute.clone();
    let timeout = Duration::from_millis(r.timeout_ms.max(0) as u64);
    let waiting = (acks == Some(Acks::All) && !waits.is_empty())
        .then(|| runnel_metrics::get().delayed(runnel_metrics::Delayed::Produce));
    Box::pin(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        for (ti, pi, appended) in waits {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Err(e) = appended.durable(left).await {
                let pr = &mut responses[ti].partition_responses[pi];
                pr.error_code = errors::partition(&e).code();
                pr.base_offset = -1;
            }
        }
        drop(waiting);
        if acks == Some(Acks::None) {
            return None;
        }
        // The connection's mute: this request's byte-rate throttle, or a longer one
        // (request_percentage, counted once the request was handled).
        let throttle_time_ms = mute.remaining_ms();
        Some(ProduceResponse::default().with_responses(responses).with_throttle_time_ms(throttle_time_ms).into())
    })
}
