//! DeleteRecords (key 21): move a partition's log start offset forward; -1 means "up to
//! the high watermark". Whole segments below the new start are deleted from disk.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::broker::Broker;
use crate::dispatch::{now, Reply};

pub fn handle(b: &Arc<Broker>, r: DeleteRecordsRequest, _v: i16) -> Reply {
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let topic = b.catalog.topic(&t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let res = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let Some(part) = topic.as_ref().and_then(|t| t.partitions.get(p.partition_index as usize)) else {
                        return res.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let hw = part.high_watermark();
                    let offset = if p.offset == -1 { hw } else { p.offset };
                    if offset < 0 || offset > hw {
                        return res.with_error_code(ResponseError::OffsetOutOfRange.code());
                    }
                    // A replicated log would need the new start agreed through Raft.
                    let Some(mut log) = part.local_log() else {
                        return res.with_error_code(ResponseError::PolicyViolation.code());
                    };
                    match log.delete_records_before(offset) {
                        Ok(start) => {
                            part.refresh_bounds(&log);
                            res.with_low_watermark(start)
                        }
                        Err(e) => {
                            tracing::error!(topic = %part.topic, partition = part.index, error = %e, "DeleteRecords");
                            res.with_error_code(ResponseError::KafkaStorageError.code())
                        }
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    now(DeleteRecordsResponse::default().with_topics(topics))
}
