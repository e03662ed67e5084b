//! Produce (key 0): validate every batch (CRC, magic, counts, size, the topic's rules),
//! append it through [`Partition::append`] (which checks the idempotent producer's
//! sequence and proposes to the partition's Raft group), and answer per `acks`: 0 not at
//! all, 1 once on the leader's disk, -1 (all) once committed on a majority of disks.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
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
}

fn rules(b: &Broker, t: &Topic) -> TopicRules {
    let s = b.catalog.settings();
    TopicRules {
        max_message_bytes: topic_config::effective("max.message.bytes", &t.configs, &s).parse().unwrap_or(1_048_588),
        log_append_time: topic_config::effective("message.timestamp.type", &t.configs, &s) == "LogAppendTime",
        compact: topic_config::cleanup_policy(topic_config::effective("cleanup.policy", &t.configs, &s))
            .is_some_and(|(_, compact)| compact),
    }
}

/// A batch ready to append: borrowed from the request unless LogAppendTime rewrote it.
type Validated<'a> = (Cow<'a, [u8]>, BatchHeader);

/// Validates a partition's records into batches ready to append (copied only when
/// LogAppendTime rewrites the timestamp).
fn validate<'a>(
    records: &'a [u8],
    rules: &TopicRules,
    now_ms: i64,
) -> Result<Vec<Validated<'a>>, (ResponseError, String)> {
    let mut out = Vec::new();
    for item in Batches::new(records) {
        let (_, range) = item.map_err(|e| (errors::batch(&e), e.to_string()))?;
        let bytes = &records[range];
        let h = BatchHeader::validate_for_append(bytes).map_err(|e| (errors::batch(&e), e.to_string()))?;
        if bytes.len() > rules.max_message_bytes {
            return Err((
                ResponseError::MessageTooLarge,
                format!("batch of {} bytes exceeds max.message.bytes {}", bytes.len(), rules.max_message_bytes),
            ));
        }
        if h.is_control() || h.is_transactional() {
            return Err((ResponseError::InvalidRecord, "transactional and control batches are not accepted".into()));
        }
        if rules.compact {
            match runnel_storage::all_records_keyed(&h, bytes) {
                Ok(true) => {}
                Ok(false) => {
                    let msg = "Compacted topic cannot accept message without key.";
                    return Err((ResponseError::InvalidRecord, msg.into()));
                }
                // Undecodable or over the decompression bound (a compression bomb).
                Err(e) => return Err((ResponseError::CorruptMessage, format!("records cannot be read: {e}"))),
            }
        }
        if rules.log_append_time {
            let mut owned = bytes.to_vec();
            set_log_append_time(&mut owned, now_ms);
            let h = BatchHeader::parse(&owned).map_err(|e| (errors::batch(&e), e.to_string()))?;
            out.push((Cow::Owned(owned), h));
        } else {
            out.push((Cow::Borrowed(bytes), h));
        }
    }
    if out.is_empty() {
        return Err((ResponseError::CorruptMessage, "no record batch in partition data".into()));
    }
    Ok(out)
}

/// LogAppendTime: the broker's clock replaces the batch's max timestamp; the timestamp
/// type bit tells consumers to use it for every record. The CRC covers both, so redo it.
fn set_log_append_time(batch: &mut [u8], now_ms: i64) {
    assert!(batch.len() >= HEADER_BYTES, "validated batch");
    let attrs = i16::from_be_bytes([batch[21], batch[22]]) | 0x08;
    batch[21..23].copy_from_slice(&attrs.to_be_bytes());
    batch[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

pub fn handle(b: &Arc<Broker>, r: ProduceRequest, v: i16, ctx: &Ctx) -> Reply {
    let now_ms = crate::now_ms();
    let acks = Acks::from_kafka(r.acks);
    // Accepted writes: (topic index, partition index, the write's durability wait).
    let mut waits: Vec<(usize, usize, Appended)> = Vec::new();
    let mut responses = Vec::with_capacity(r.topic_data.len());
    let mut bytes = 0usize;
    for t in r.topic_data {
        let topic = if v >= 13 { b.catalog.topic_by_id(t.topic_id) } else { b.catalog.topic(&t.name.0) };
        let rules = topic.as_ref().map(|t| rules(b, t));
        // By the name the request gives, known or not; v13 names topics by id, and an
        // unknown id is UNKNOWN_TOPIC_ID.
        let may_write = match &topic {
            Some(t) => ctx.access.topic(Operation::Write, &t.name),
            None => v >= 13 || ctx.access.topic(Operation::Write, &t.name.0),
        };
        let mut parts = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let mut res = PartitionProduceResponse::default().with_index(p.index).with_base_offset(-1);
            bytes += p.records.as_ref().map_or(0, |r| r.len());
            let outcome = (|| {
                let Some(acks) = acks else {
                    return Err((ResponseError::InvalidRequiredAcks, format!("acks={} is not -1, 0 or 1", r.acks)));
                };
                if r.transactional_id.is_some() {
                    return Err((
                        ResponseError::TransactionalIdAuthorizationFailed,
                        "transactions are not supported yet".into(),
                    ));
                }
                if !may_write {
                    return Err((ResponseError::TopicAuthorizationFailed, "Topic authorization failed.".into()));
                }
                let (Some(topic), Some(rules)) = (&topic, &rules) else {
                    let code =
                        if v >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
                    return Err((code, "This server does not host this topic-partition.".into()));
                };
                if &*topic.name == crate::offsets_log::OFFSETS_TOPIC {
                    // As Kafka: clients never write internal topics (the group coordinator
                    // appends to them through the partition, not through Produce).
                    return Err((
                        ResponseError::InvalidTopicException,
                        format!("Cannot append to internal topic {}", topic.name),
                    ));
                }
                let Some(part) = topic.partitions.get(p.index as usize) else {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.".into(),
                    ));
                };
                if let Some(e) = part.leader_error() {
                    return Err((errors::partition(&e), e.to_string()));
                }
                let records = p.records.as_deref().unwrap_or_default();
                let batches = validate(records, rules, now_ms)?;
                let refs: Vec<(&[u8], BatchHeader)> = batches.iter().map(|(bytes, h)| (bytes.as_ref(), *h)).collect();
                let appended = part.append(&refs, acks).map_err(|e| (errors::partition(&e), e.to_string()))?;
                Ok((appended, rules.log_append_time))
            })();
            match outcome {
                Ok((appended, log_append_time)) => {
                    res.base_offset = appended.base_offset;
                    res.log_append_time_ms = if log_append_time { now_ms } else { -1 };
                    if v >= 5 {
                        res.log_start_offset = appended.log_start_offset;
                    }
                    waits.push((responses.len(), parts.len(), appended));
                }
                Err((code, msg)) => {
                    res.error_code = code.code();
                    if v >= 8 {
                        res.error_message = Some(str_bytes(&msg));
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
        if acks == Some(Acks::None) {
            return None;
        }
        // The connection's mute: this request's byte-rate throttle, or a longer one
        // (request_percentage, counted once the request was handled).
        let throttle_time_ms = mute.remaining_ms();
        Some(ProduceResponse::default().with_responses(responses).with_throttle_time_ms(throttle_time_ms).into())
    })
}
