//! DescribeShareGroupOffsets (key 90, KIP-932): for each share group (sent to its
//! coordinator), the start offset (SPSO) of each of its share-partitions, read from the
//! share coordinator that keeps it; -1 for a partition the group has not read yet. With no
//! topics named, every partition the group has read of the topics its members subscribe to
//! or were assigned. Version 1 adds each partition's lag (KIP-1226): the records below the
//! high watermark not yet delivered for good (acknowledged or archived).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup as Group, DescribeShareGroupOffsetsResponsePartition as Partition,
    DescribeShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::{DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse};
use runnel_security::acl::Operation;
use runnel_share::state_key;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};

pub fn handle(b: &Arc<Broker>, r: DescribeShareGroupOffsetsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let b = b.clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        let mut groups = Vec::with_capacity(r.groups.len());
        for g in r.groups {
            let id = g.group_id.0.to_string();
            let out = Group::default().with_group_id(g.group_id.clone());
            if !access.group(Operation::Describe, &id) {
                groups.push(out.with_error_code(ResponseError::GroupAuthorizationFailed.code()));
                continue;
            }
            let summary = match b.group_coordinator.describe_share(&id) {
                Ok(s) => s,
                Err(e) => {
                    groups.push(out.with_error_code(e.code()));
                    continue;
                }
            };
            // (topic name, partitions asked for: None for all of them).
            let wanted: Vec<(String, Option<Vec<i32>>)> = match &g.topics {
                Some(topics) => {
                    topics.iter().map(|t| (t.topic_name.0.to_string(), Some(t.partitions.clone()))).collect()
                }
                None => summary.iter().flat_map(|s| s.topics.iter().map(|n| (n.clone(), None))).collect(),
            };
            let mut topics = Vec::new();
            for (name, partitions) in wanted {
                if !access.topic(Operation::Describe, &name) {
                    continue;
                }
                let Some(topic) = b.catalog.topic(&name) else {
                    let parts = partitions.unwrap_or_default().into_iter().map(|p| {
                        Partition::default()
                            .with_partition_index(p)
                            .with_start_offset(-1)
                            .with_leader_epoch(-1)
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    });
                    topics.push(Topic::default().with_topic_name(topic_name(&name)).with_partitions(parts.collect()));
                    continue;
                };
                let all: Vec<i32> = (0..topic.partitions.len() as i32).collect();
                // Asked for all: those the group has read.
                let only_read = partitions.is_none();
                let mut parts = Vec::new();
                for p in partitions.unwrap_or(all) {
                    let out = Partition::default().with_partition_index(p).with_start_offset(-1).with_leader_epoch(-1);
                    let Some(part) = topic.partitions.get(p as usize) else {
                        parts.push(out.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                        continue;
                    };
                    let (_, leader_epoch) = b.partition_leader(part);
                    match crate::share_state::read(&b, &state_key(&id, topic.id, p)).await {
                        Ok(Some(s)) => parts.push(
                            out.with_start_offset(s.start).with_leader_epoch(leader_epoch).with_lag(lag(part, &s)),
                        ),
                        Ok(None) if only_read => {}
                        Ok(None) => parts.push(out),
                        Err(e) => parts
                            .push(out.with_error_code(e.code()).with_error_message(Some(str_bytes(&e.to_string())))),
                    }
                }
                topics.push(
                    Topic::default().with_topic_name(topic_name(&name)).with_topic_id(topic.id).with_partitions(parts),
                );
            }
            groups.push(out.with_topics(topics));
        }
        Some(DescribeShareGroupOffsetsResponse::default().with_groups(groups).into())
    })
}

/// Records from the start offset to the high watermark not acknowledged or archived yet;
/// -1 when this broker has no replica of the partition to know its high watermark.
fn lag(part: &crate::partition::Partition, s: &runnel_share::Snapshot) -> i64 {
    if part.is_remote() {
        return -1;
    }
    let done: i64 = s
        .batches
        .iter()
        .filter(|b| matches!(b.state, runnel_share::RecordState::Acknowledged | runnel_share::RecordState::Archived))
        .map(|b| b.last - b.first + 1)
        .sum();
    (part.high_watermark() - s.start - done).max(0)
}
