//! DeleteRecords (key 21): move a partition's log start offset forward; -1 means "up to
//! the high watermark". Whole segments below the new start are deleted from disk.
//!
//! The partition's leader checks the offset; the move is committed through the metadata
//! log (an entry in the partition's own log would take an offset, which Kafka's
//! DeleteRecords does not), every replica moves its log start as it applies it, and the
//! answer waits until it is applied here (up to the request's timeout).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use crate::errors;
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: DeleteRecordsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let b = b.clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        let deadline = Duration::from_millis(r.timeout_ms.max(0) as u64);
        let controller = b.controller().clone();
        let mut out = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let allowed = access.topic(Operation::Delete, &t.name.0);
            let topic = b.catalog.topic(&t.name.0);
            let mut results = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let res = DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(-1);
                if !allowed {
                    results.push(res.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
                    continue;
                }
                let Some(part) = topic.as_ref().and_then(|t| t.partitions.get(p.partition_index as usize)) else {
                    results.push(res.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                    continue;
                };
                let outcome = match part.delete_records_target(p.offset) {
                    Err(e) => Err(errors::partition(&e)),
                    Ok(None) => Ok(part.log_start_offset()),
                    Ok(Some(offset)) => {
                        let done = controller.delete_records(&part.topic, part.index, offset);
                        match tokio::time::timeout(deadline, done).await {
                            // Applied here: this replica's log start has moved.
                            Ok(Ok(())) => Ok(part.log_start_offset().max(offset)),
                            Ok(Err((code, _))) => Err(code),
                            Err(_) => Err(ResponseError::RequestTimedOut),
                        }
                    }
                };
                results.push(match outcome {
                    Ok(low) => res.with_low_watermark(low),
                    Err(code) => res.with_error_code(code.code()),
                });
            }
            out.push(DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(results));
        }
        Some(DeleteRecordsResponse::default().with_topics(out).into())
    })
}
