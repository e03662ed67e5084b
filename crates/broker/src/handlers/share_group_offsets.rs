//! AlterShareGroupOffsets (key 91) and DeleteShareGroupOffsets (key 92), KIP-932: sent to a
//! share group's coordinator while the group has no members (`kafka-share-groups.sh
//! --reset-offsets`, `--delete-offsets`). Altering gives a share-partition a new start
//! offset and nothing in flight; deleting forgets its state (the group starts it again by
//! `share.auto.offset.reset`). Each new state is written with a higher state epoch, so a
//! partition leader still holding the old one in memory is fenced on its next write and
//! reads the new one back.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition as AlteredPartition, AlterShareGroupOffsetsResponseTopic as AlteredTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as DeletedTopic;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
};
use runnel_security::acl::Operation;
use runnel_share::{state_key, Snapshot};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};

pub fn alter(b: &Arc<Broker>, r: AlterShareGroupOffsetsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let group = r.group_id.0.to_string();
    if !ctx.access.group(Operation::Read, &group) {
        return now(
            AlterShareGroupOffsetsResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code())
        );
    }
    let names: Vec<String> = r.topics.iter().map(|t| t.topic_name.0.to_string()).collect();
    let readable: Vec<bool> = names.iter().map(|n| ctx.access.topic(Operation::Read, n)).collect();
    let b = b.clone();
    Box::pin(async move {
        // Readies the group (created empty if new, refused with members) and records the topics.
        if let Err(e) = b.group_coordinator.share_offsets_change(&group, &names, &[]).await {
            return Some(AlterShareGroupOffsetsResponse::default().with_error_code(e.code()).into());
        }
        let mut responses = Vec::with_capacity(r.topics.len());
        for (t, may_read) in r.topics.into_iter().zip(readable) {
            let topic = b.catalog.topic(&t.topic_name.0);
            let mut out = AlteredTopic::default().with_topic_name(t.topic_name.clone());
            if let Some(topic) = &topic {
                out.topic_id = topic.id;
            }
            for p in t.partitions {
                let code = match &topic {
                    _ if !may_read => Err(ResponseError::TopicAuthorizationFailed),
                    None => Err(ResponseError::UnknownTopicOrPartition),
                    Some(topic) if p.partition_index < 0 || p.partition_index as usize >= topic.partitions.len() => {
                        Err(ResponseError::UnknownTopicOrPartition)
                    }
                    Some(_) if p.start_offset < 0 => Err(ResponseError::InvalidRequest),
                    Some(topic) => set_start(&b, &group, topic.id, p.partition_index, p.start_offset).await,
                };
                let mut part = AlteredPartition::default().with_partition_index(p.partition_index);
                if let Err(e) = code {
                    part = part.with_error_code(e.code()).with_error_message(Some(str_bytes(&e.to_string())));
                }
                out.partitions.push(part);
            }
            responses.push(out);
        }
        Some(AlterShareGroupOffsetsResponse::default().with_responses(responses).into())
    })
}

/// A share-partition starts again at `offset`, nothing in flight.
async fn set_start(b: &Broker, group: &str, topic: uuid::Uuid, p: i32, offset: i64) -> Result<(), ResponseError> {
    let key = state_key(group, topic, p);
    let epoch = crate::share_state::read(b, &key).await?.map_or(0, |s| s.state_epoch);
    let snapshot = Snapshot { state_epoch: epoch + 1, start: offset, batches: Vec::new() };
    crate::share_state::write(b, &key, snapshot).await?;
    b.shares.forget(&(group.to_string(), topic, p));
    Ok(())
}

pub fn delete(b: &Arc<Broker>, r: DeleteShareGroupOffsetsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let group = r.group_id.0.to_string();
    if !ctx.access.group(Operation::Read, &group) {
        return now(
            DeleteShareGroupOffsetsResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code())
        );
    }
    let names: Vec<String> = r.topics.iter().map(|t| t.topic_name.0.to_string()).collect();
    let readable: Vec<bool> = names.iter().map(|n| ctx.access.topic(Operation::Read, n)).collect();
    let b = b.clone();
    Box::pin(async move {
        if let Err(e) = b.group_coordinator.share_offsets_change(&group, &[], &names).await {
            return Some(DeleteShareGroupOffsetsResponse::default().with_error_code(e.code()).into());
        }
        let mut responses = Vec::with_capacity(r.topics.len());
        for (t, may_read) in r.topics.into_iter().zip(readable) {
            let topic = b.catalog.topic(&t.topic_name.0);
            let mut out = DeletedTopic::default().with_topic_name(t.topic_name.clone());
            let done = match &topic {
                _ if !may_read => Err(ResponseError::TopicAuthorizationFailed),
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(topic) => {
                    out.topic_id = topic.id;
                    crate::share::forget_topic(&b, &group, topic.id, topic.partitions.len()).await
                }
            };
            if let Err(e) = done {
                out = out.with_error_code(e.code()).with_error_message(Some(str_bytes(&e.to_string())));
            }
            responses.push(out);
        }
        Some(DeleteShareGroupOffsetsResponse::default().with_responses(responses).into())
    })
}
