//! DeleteRecords (key 21): move a partition's log start offset forward; -1 means "up to
//! the high watermark". Whole segments below the new start are deleted from disk.
//!
//! A single broker moves its log at once. A replicated partition's leader proposes the new
//! start to the partition's Raft group; every replica moves its log once the entry commits,
//! and the answer waits for that (up to the request's timeout).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use tokio::sync::oneshot;

use crate::broker::Broker;
use crate::dispatch::Reply;
use crate::partition::Partition;

/// A partition's answer: known now, or once its Raft entry commits.
enum Outcome {
    Done(DeleteRecordsPartitionResult),
    Committing { result: DeleteRecordsPartitionResult, offset: i64, committed: oneshot::Receiver<bool> },
}

pub fn handle(b: &Arc<Broker>, r: DeleteRecordsRequest, _v: i16) -> Reply {
    let mut kicks = Vec::new();
    let topics: Vec<_> = r
        .topics
        .into_iter()
        .map(|t| {
            let topic = b.catalog.topic(&t.name.0);
            let partitions: Vec<Outcome> = t
                .partitions
                .into_iter()
                .map(|p| {
                    let res = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    match topic.as_ref().and_then(|t| t.partitions.get(p.partition_index as usize)) {
                        Some(part) => delete(part, p.offset, res, &mut kicks),
                        None => Outcome::Done(res.with_error_code(ResponseError::UnknownTopicOrPartition.code())),
                    }
                })
                .collect();
            (t.name, partitions)
        })
        .collect();
    if let Some(cluster) = b.cluster.get() {
        for group in kicks {
            cluster.kick(group);
        }
    }
    let timeout = Duration::from_millis(r.timeout_ms.max(0) as u64);
    Box::pin(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(topics.len());
        for (name, partitions) in topics {
            let mut results = Vec::with_capacity(partitions.len());
            for o in partitions {
                results.push(match o {
                    Outcome::Done(res) => res,
                    Outcome::Committing { result, offset, committed } => {
                        match tokio::time::timeout_at(deadline, committed).await {
                            Ok(Ok(true)) => result.with_low_watermark(offset),
                            Ok(_) => result.with_error_code(ResponseError::NotLeaderOrFollower.code()),
                            Err(_) => result.with_error_code(ResponseError::RequestTimedOut.code()),
                        }
                    }
                });
            }
            out.push(DeleteRecordsTopicResult::default().with_name(name).with_partitions(results));
        }
        Some(DeleteRecordsResponse::default().with_topics(out).into())
    })
}

fn delete(part: &Partition, offset: i64, res: DeleteRecordsPartitionResult, kicks: &mut Vec<u64>) -> Outcome {
    let hw = part.high_watermark();
    let offset = if offset == -1 { hw } else { offset };
    if offset < 0 || offset > hw {
        return Outcome::Done(res.with_error_code(ResponseError::OffsetOutOfRange.code()));
    }
    if let Some((replica, group)) = part.replica() {
        let mut r = runnel_raft::driver::lock(replica);
        if !r.is_leader() {
            return Outcome::Done(res.with_error_code(ResponseError::NotLeaderOrFollower.code()));
        }
        let start = r.log().log_start_offset();
        if offset <= start {
            return Outcome::Done(res.with_low_watermark(start));
        }
        return match r.propose_delete_records(offset) {
            Ok(p) => {
                kicks.push(group);
                let committed = r.wait(p.index, p.term, runnel_raft::Durability::Committed);
                Outcome::Committing { result: res, offset, committed }
            }
            Err(e) => Outcome::Done(res.with_error_code(crate::errors::propose(e).0.code())),
        };
    }
    let Some(mut log) = part.local_log() else {
        return Outcome::Done(res.with_error_code(ResponseError::NotLeaderOrFollower.code()));
    };
    match log.delete_records_before(offset) {
        Ok(start) => {
            part.refresh_bounds(&log);
            Outcome::Done(res.with_low_watermark(start))
        }
        Err(e) => {
            tracing::error!(topic = %part.topic, partition = part.index, error = %e, "DeleteRecords");
            Outcome::Done(res.with_error_code(ResponseError::KafkaStorageError.code()))
        }
    }
}
