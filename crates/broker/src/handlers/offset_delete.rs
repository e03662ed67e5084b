//! OffsetDelete (key 47): deletes a group's committed offsets for some partitions, unless
//! the group's active members subscribe to that topic (GROUP_SUBSCRIBED_TO_TOPIC).

use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use kafka_protocol::error::ResponseError;
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: OffsetDeleteRequest, _v: i16, ctx: &Ctx) -> Reply {
    let b = b.clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        // As Kafka: DELETE on the group; READ on a topic, else its partitions are refused.
        if !access.group(Operation::Delete, &r.group_id.0) {
            let denied = ResponseError::GroupAuthorizationFailed;
            return Some(OffsetDeleteResponse::default().with_error_code(denied.code()).into());
        }
        let readable = |t: &str| access.topic(Operation::Read, t);
        let wanted: Vec<(String, i32)> = r
            .topics
            .iter()
            .filter(|t| readable(&t.name.0))
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index)))
            .collect();
        let mut results = match b.group_coordinator.delete_offsets(&r.group_id.0, &wanted).await {
            Ok(list) => list.into_iter(),
            Err(e) => return Some(OffsetDeleteResponse::default().with_error_code(e.code()).into()),
        };
        let topics = r
            .topics
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let code = match readable(&t.name.0) {
                            false => ResponseError::TopicAuthorizationFailed.code(),
                            true => results.next().and_then(|r| r.err()).map_or(0, |e| e.code()),
                        };
                        OffsetDeleteResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions)
            })
            .collect();
        Some(OffsetDeleteResponse::default().with_topics(topics).into())
    })
}
