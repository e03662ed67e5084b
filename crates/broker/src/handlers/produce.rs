//! Produce (key 0): validate every batch (CRC, magic, counts, size), check the idempotent
//! producer's sequence, append, and answer per `acks`: 0 not at all, 1 after the append,
//! -1 (all) once group commit has fsynced the data (with `log.fsync.policy=always`).

use std::borrow::Cow;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use runnel_wire::batch::HEADER_BYTES;
use runnel_wire::{BatchHeader, Batches};

use super::str_bytes;
use crate::broker::Broker;
use crate::catalog::Topic;
use crate::dispatch::Reply;
use crate::errors;
use crate::partition::Partition;
use crate::topic_config;

struct Accepted {
    partition: Arc<Partition>,
    log_end_offset: i64,
}

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
        if rules.compact && !runnel_storage::all_records_keyed(&h, bytes).unwrap_or(false) {
            return Err((ResponseError::InvalidRecord, "Compacted topic cannot accept message without key.".into()));
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

pub fn handle(b: &Arc<Broker>, r: ProduceRequest, v: i16) -> Reply {
    let now_ms = crate::now_ms();
    let acks = r.acks;
    let mut accepted: Vec<Accepted> = Vec::new();
    // Replicated partitions: (topic index, partition index, acknowledgement to wait for).
    let mut waits: Vec<(usize, usize, tokio::sync::oneshot::Receiver<bool>)> = Vec::new();
    let mut kicks: Vec<u64> = Vec::new();
    let mut responses = Vec::with_capacity(r.topic_data.len());
    for t in r.topic_data {
        let topic = if v >= 13 { b.catalog.topic_by_id(t.topic_id) } else { b.catalog.topic(&t.name.0) };
        let rules = topic.as_ref().map(|t| rules(b, t));
        let mut parts = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let mut res = PartitionProduceResponse::default().with_index(p.index).with_base_offset(-1);
            let outcome = (|| {
                if !matches!(acks, -1..=1) {
                    return Err((ResponseError::InvalidRequiredAcks, format!("acks={acks} is not -1, 0 or 1")));
                }
                if r.transactional_id.is_some() {
                    return Err((
                        ResponseError::TransactionalIdAuthorizationFailed,
                        "transactions are not supported yet".into(),
                    ));
                }
                let (Some(topic), Some(rules)) = (&topic, &rules) else {
                    let code =
                        if v >= 13 { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
                    return Err((code, "This server does not host this topic-partition.".into()));
                };
                let Some(part) = topic.partitions.get(p.index as usize) else {
                    return Err((
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.".into(),
                    ));
                };
                if let Some(e) = part.leader_error() {
                    return Err((e, "This broker is not the partition leader.".into()));
                }
                let records = p.records.as_deref().unwrap_or_default();
                let batches = validate(records, rules, now_ms)?;
                if let Some((replica, group)) = part.replica() {
                    let mut rep = runnel_raft::driver::lock(replica);
                    let mut proposed = Vec::with_capacity(batches.len());
                    for (bytes, h) in &batches {
                        proposed.push(rep.propose_batch(bytes, h).map_err(errors::propose)?);
                    }
                    let (first, last) = (proposed[0], proposed[proposed.len() - 1]);
                    let durability = match acks {
                        0 => None,
                        1 => Some(runnel_raft::Durability::Local),
                        _ => Some(runnel_raft::Durability::Committed),
                    };
                    if let Some(d) = durability {
                        waits.push((responses.len(), parts.len(), rep.wait(last.index, last.term, d)));
                    }
                    let start = rep.log().log_start_offset();
                    drop(rep);
                    kicks.push(group);
                    return Ok((first.base_offset, start, rules.log_append_time));
                }
                let refs: Vec<(&[u8], BatchHeader)> = batches.iter().map(|(bytes, h)| (bytes.as_ref(), *h)).collect();
                let infos = part.append(&refs, now_ms).map_err(|e| (errors::append(&e), e.to_string()))?;
                accepted.push(Accepted { partition: part.clone(), log_end_offset: part.log_end_offset() });
                Ok((infos[0].base_offset, part.log_start_offset(), rules.log_append_time))
            })();
            match outcome {
                Ok((base_offset, log_start_offset, log_append_time)) => {
                    res.base_offset = base_offset;
                    res.log_append_time_ms = if log_append_time { now_ms } else { -1 };
                    if v >= 5 {
                        res.log_start_offset = log_start_offset;
                    }
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
    let items: Vec<_> = accepted.into_iter().map(|a| (a.partition, a.log_end_offset)).collect();
    if let Some(cluster) = b.cluster.get() {
        for g in kicks {
            cluster.kick(g);
        }
    }
    let broker = b.clone();
    let timeout = std::time::Duration::from_millis(r.timeout_ms.max(0) as u64);
    Box::pin(async move {
        for (ti, pi, rx) in waits {
            let code = match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(true)) => None,
                // Leadership moved before the entry committed; it may still commit under the
                // new leader, and the (idempotent) producer's retry finds it there.
                Ok(_) => Some(ResponseError::NotLeaderOrFollower),
                Err(_) => Some(ResponseError::RequestTimedOut),
            };
            if let Some(code) = code {
                let pr = &mut responses[ti].partition_responses[pi];
                pr.error_code = code.code();
                pr.base_offset = -1;
            }
        }
        match &broker.flusher {
            None => {
                for (p, end) in &items {
                    p.advance_high_watermark(*end);
                }
                broker.data_arrived.notify_waiters();
            }
            Some(f) if acks == -1 && !items.is_empty() => {
                if let Err(e) = f.flush(items).await {
                    // Durability unknown: fail every partition this request wrote.
                    tracing::warn!(error = %e, "acks=all produce not acknowledged");
                    for tr in &mut responses {
                        for pr in &mut tr.partition_responses {
                            if pr.error_code == 0 {
                                pr.error_code = errors::flush_failed().code();
                            }
                        }
                    }
                }
            }
            Some(f) if !items.is_empty() => f.flush_in_background(items).await,
            Some(_) => {}
        }
        if acks == 0 {
            return None;
        }
        Some(ProduceResponse::default().with_responses(responses).into())
    })
}
