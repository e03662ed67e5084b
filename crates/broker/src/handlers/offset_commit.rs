//! OffsetCommit (key 8): committed offsets, written durably to `__consumer_offsets` before
//! the answer. Members must belong to the current generation; a consumer outside any group
//! (generation -1) may commit while the group has no members.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: OffsetCommitRequest, v: i16, ctx: &Ctx) -> Reply {
    let b = b.clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        // As Kafka: READ on the group, else every partition is refused with the group's
        // error; READ on each topic, else its partitions are refused.
        if !access.group(Operation::Read, &r.group_id.0) {
            let denied = ResponseError::GroupAuthorizationFailed.code();
            let topics = r
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t.partitions.iter().map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(denied)
                    });
                    OffsetCommitResponseTopic::default().with_name(t.name).with_partitions(partitions.collect())
                })
                .collect();
            return Some(OffsetCommitResponse::default().with_topics(topics).into());
        }
        // Partitions of topics that do not exist are refused one by one, as Kafka does.
        let mut known = Vec::new();
        let mut codes: Vec<Vec<i16>> = Vec::new();
        for t in &r.topics {
            let topic = b.catalog.topic(&t.name.0);
            let allowed = access.topic(Operation::Read, &t.name.0);
            let mut per = Vec::new();
            for p in &t.partitions {
                if !allowed {
                    per.push(ResponseError::TopicAuthorizationFailed.code());
                    continue;
                }
                let exists = topic.as_ref().is_some_and(|t| (p.partition_index as usize) < t.partitions.len());
                if exists {
                    known.push((
                        t.name.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        if v >= 6 { p.committed_leader_epoch } else { -1 },
                        p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default(),
                    ));
                    per.push(0);
                } else {
                    per.push(ResponseError::UnknownTopicOrPartition.code());
                }
            }
            codes.push(per);
        }
        let instance = if v >= 7 { r.group_instance_id.as_ref().map(|s| s.as_str()) } else { None };
        let outcome = b
            .group_coordinator
            .commit(&r.group_id.0, r.generation_id_or_member_epoch, &r.member_id, instance, known)
            .await;
        let mut results = match &outcome {
            Ok(list) => list.iter().map(|res| res.err().map_or(0, |e| e.code())).collect::<Vec<_>>().into_iter(),
            Err(_) => Vec::new().into_iter(),
        };
        let topics = r
            .topics
            .into_iter()
            .zip(codes)
            .map(|(t, per)| {
                let partitions = t
                    .partitions
                    .iter()
                    .zip(per)
                    .map(|(p, code)| {
                        let code = match (&outcome, code) {
                            (_, c) if c != 0 => c,
                            (Err(e), _) => e.code(),
                            (Ok(_), _) => results.next().unwrap_or(0),
                        };
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                OffsetCommitResponseTopic::default().with_name(t.name).with_partitions(partitions)
            })
            .collect();
        Some(OffsetCommitResponse::default().with_topics(topics).into())
    })
}
