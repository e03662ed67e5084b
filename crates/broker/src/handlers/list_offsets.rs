//! ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3, KIP-734),
//! earliest-local (-4) and latest-tiered (-5, KIP-405), or the first offset whose record
//! timestamp is at or after a given time, found by decoding the batch that holds it. With
//! read_committed, the last stable offset stands for the high watermark.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::records::RecordBatchDecoder;
use runnel_security::acl::Operation;

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use crate::errors;
use crate::partition::{Isolation, Partition};
use runnel_metrics::DiskRead;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// (offset, timestamp) of the first record in `batch` matching `pick`, among offsets in
/// [from, below).
fn find_record(batch: Vec<u8>, from: i64, below: i64, pick: impl Fn(i64) -> bool) -> Option<(i64, i64)> {
    let mut buf = Bytes::from(batch);
    let set = RecordBatchDecoder::decode(&mut buf).ok()?;
    set.records
        .iter()
        .filter(|r| r.offset >= from && r.offset < below)
        .find(|r| pick(r.timestamp))
        .map(|r| (r.offset, r.timestamp))
}

/// `isolation`: with read_committed, nothing at or past the last stable offset is found.
pub(crate) fn lookup(p: &Partition, ts: i64, isolation: Isolation) -> Result<(i64, i64), ResponseError> {
    let hw = match isolation {
        Isolation::ReadUncommitted => p.high_watermark(),
        Isolation::ReadCommitted => p.last_stable_offset(),
    };
    let start = p.log_start_offset();
    let io = |e: std::io::Error| {
        tracing::error!(topic = %p.topic, partition = p.index, error = %e, "ListOffsets");
        ResponseError::KafkaStorageError
    };
    Ok(match ts {
        LATEST => (hw, -1),
        EARLIEST | EARLIEST_LOCAL => (start, -1),
        LATEST_TIERED => (-1, -1),
        MAX_TIMESTAMP => {
            // Planned under the partition's lock, read without it.
            let plan = p.with_log(|log| log.batch_with_max_timestamp()).ok_or(ResponseError::NotLeaderOrFollower)?;
            let batch = plan.map(|plan| plan.execute()).transpose().map_err(io)?.flatten();
            batch
                .and_then(|b| {
                    let max = runnel_wire::BatchHeader::parse(&b).ok()?.max_timestamp;
                    find_record(b, start, hw, |t| t == max)
                })
                .unwrap_or((-1, -1))
        }
        ts if ts >= 0 => {
            let plan = p.with_log(|log| log.batch_for_timestamp(ts)).ok_or(ResponseError::NotLeaderOrFollower)?;
            let batch = plan.map(|plan| plan.execute()).transpose().map_err(io)?.flatten();
            batch.and_then(|b| find_record(b, start, hw, |t| t >= ts)).unwrap_or((-1, -1))
        }
        _ => return Err(ResponseError::InvalidRequest),
    })
}

pub fn handle(b: &Arc<Broker>, r: ListOffsetsRequest, v: i16, ctx: &Ctx) -> Reply {
    let by_time = r.topics.iter().flat_map(|t| &t.partitions).any(|p| p.timestamp >= 0 || p.timestamp == MAX_TIMESTAMP);
    if !by_time {
        return now(answer(b, r, v, &ctx.access));
    }
    // A lookup by time reads batch headers and a batch from the segment files: on the
    // blocking pool, as every read that might wait for the disk (`disk_reads.rs`).
    let (b, access) = (b.clone(), ctx.access.clone());
    Box::pin(async move {
        let failed = failed(&r);
        let broker = b.clone();
        let read = move || Ok(answer(&broker, r, v, &access));
        match b.disk_reads.run(DiskRead::ByTime, read).await {
            Ok(resp) => Some(resp.into()),
            Err(e) => {
                tracing::error!(error = %e, "ListOffsets by time");
                Some(failed.into())
            }
        }
    })
}

/// Every partition of `r` answered with KAFKA_STORAGE_ERROR.
fn failed(r: &ListOffsetsRequest) -> ListOffsetsResponse {
    let code = ResponseError::KafkaStorageError.code();
    let topics = r.topics.iter().map(|t| {
        let partitions = t.partitions.iter().map(|p| {
            ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_offset(-1)
                .with_timestamp(-1)
                .with_error_code(code)
        });
        ListOffsetsTopicResponse::default().with_name(t.name.clone()).with_partitions(partitions.collect())
    });
    ListOffsetsResponse::default().with_topics(topics.collect())
}

fn answer(b: &Broker, r: ListOffsetsRequest, v: i16, access: &crate::authz::Access) -> ListOffsetsResponse {
    let isolation = Isolation::from_kafka(if v >= 2 { r.isolation_level } else { 0 });
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let topic = b.catalog.topic(&t.name.0);
            let allowed = access.topic(Operation::Describe, &t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut res = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_offset(-1)
                        .with_timestamp(-1);
                    if !allowed {
                        return res.with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let Some(part) = topic.as_ref().and_then(|t| t.partitions.get(p.partition_index as usize)) else {
                        return res.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    if let Some(e) = part.leader_error() {
                        return res.with_error_code(errors::partition(&e).code());
                    }
                    let (_, epoch) = part.leader();
                    if p.current_leader_epoch > epoch {
                        return res.with_error_code(ResponseError::UnknownLeaderEpoch.code());
                    }
                    if p.current_leader_epoch >= 0 && p.current_leader_epoch < epoch {
                        return res.with_error_code(ResponseError::FencedLeaderEpoch.code());
                    }
                    match lookup(part, p.timestamp, isolation) {
                        Ok((offset, timestamp)) => {
                            res.offset = offset;
                            res.timestamp = timestamp;
                            if v >= 4 {
                                res.leader_epoch = if offset >= 0 { epoch } else { -1 };
                            }
                            res
                        }
                        Err(code) => res.with_error_code(code.code()),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
