//! OffsetFetch (key 9): committed offsets of one group (v1–7) or of many (v8+), for the
//! listed partitions or, when the topic list is null, for every partition with a commit.
//! A partition without a commit answers offset -1 and no error. A group this broker does
//! not coordinate (now) gets the group-level error (per partition before v2).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};

use super::{str_bytes, topic_name};
use crate::authz::Access;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

/// (topic, partition, offset, leader epoch, metadata, error code).
type Row = (String, i32, i64, i32, String, i16);

/// Committed offsets per requested partition (or all), grouped by topic in request order.
/// As Kafka: the group needs DESCRIBE; of its topics, those the client may not describe are
/// left out of an answer for all of them and refused one by one when asked for.
/// With `require_stable` (v7+, what read_committed consumers send), a partition with an
/// offset committed in a transaction that has not ended is UNSTABLE_OFFSET_COMMIT (the
/// consumer retries).
fn lookup(
    b: &Broker,
    access: &Access,
    group: &str,
    wanted: Option<Vec<(String, i32)>>,
    require_stable: bool,
) -> Result<Vec<(String, Vec<Row>)>, ResponseError> {
    if !access.group(Operation::Describe, group) {
        return Err(ResponseError::GroupAuthorizationFailed);
    }
    let found = b.group_coordinator.fetch(group, wanted.as_deref())?;
    let unstable = match require_stable {
        true => b.group_coordinator.unstable(group, &found.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()),
        false => Vec::new(),
    };
    let mut by_topic: Vec<(String, Vec<Row>)> = Vec::new();
    for ((topic, partition), committed) in found {
        let allowed = access.topic(Operation::Describe, &topic);
        if !allowed && wanted.is_none() {
            continue;
        }
        let stable = !unstable.iter().any(|(t, p)| *t == topic && *p == partition);
        let (offset, epoch, meta, error) = match committed {
            _ if !allowed => (-1, -1, String::new(), ResponseError::TopicAuthorizationFailed.code()),
            _ if !stable => (-1, -1, String::new(), ResponseError::UnstableOffsetCommit.code()),
            Some(c) => (c.offset, c.leader_epoch, c.metadata, 0),
            None => (-1, -1, String::new(), 0),
        };
        let row = (topic.clone(), partition, offset, epoch, meta, error);
        match by_topic.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, rows)) => rows.push(row),
            None => by_topic.push((topic, vec![row])),
        }
    }
    Ok(by_topic)
}

pub fn handle(b: &Arc<Broker>, r: OffsetFetchRequest, v: i16, ctx: &Ctx) -> Reply {
    if v >= 8 {
        let groups = r
            .groups
            .into_iter()
            .map(|g| {
                let wanted = g.topics.map(|ts| {
                    ts.iter().flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.0.to_string(), *p))).collect()
                });
                let found = lookup(b, &ctx.access, &g.group_id.0, wanted, r.require_stable);
                let error = found.as_ref().err().map_or(0, |e| e.code());
                let topics = found
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(t, rows)| {
                        let partitions = rows
                            .into_iter()
                            .map(|(_, p, offset, epoch, meta, error)| {
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(p)
                                    .with_error_code(error)
                                    .with_committed_offset(offset)
                                    .with_committed_leader_epoch(epoch)
                                    .with_metadata(Some(str_bytes(&meta)))
                            })
                            .collect();
                        OffsetFetchResponseTopics::default().with_name(topic_name(&t)).with_partitions(partitions)
                    })
                    .collect();
                OffsetFetchResponseGroup::default().with_group_id(g.group_id).with_topics(topics).with_error_code(error)
            })
            .collect();
        return now(OffsetFetchResponse::default().with_groups(groups));
    }
    let wanted = r
        .topics
        .map(|ts| ts.iter().flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.0.to_string(), *p))).collect());
    let found = match lookup(b, &ctx.access, &r.group_id.0, wanted.clone(), v >= 7 && r.require_stable) {
        Ok(found) => found,
        Err(e) if v >= 2 => return now(OffsetFetchResponse::default().with_error_code(e.code())),
        // No group-level error before v2: every requested partition carries it.
        Err(e) => {
            let mut topics: Vec<OffsetFetchResponseTopic> = Vec::new();
            for (t, p) in wanted.unwrap_or_default() {
                let part = OffsetFetchResponsePartition::default()
                    .with_partition_index(p)
                    .with_committed_offset(-1)
                    .with_error_code(e.code());
                match topics.iter_mut().find(|x| x.name.0.as_str() == t) {
                    Some(x) => x.partitions.push(part),
                    None => topics.push(
                        OffsetFetchResponseTopic::default().with_name(topic_name(&t)).with_partitions(vec![part]),
                    ),
                }
            }
            return now(OffsetFetchResponse::default().with_topics(topics));
        }
    };
    let topics = found
        .into_iter()
        .map(|(t, rows)| {
            let partitions = rows
                .into_iter()
                .map(|(_, p, offset, epoch, meta, error)| {
                    let mut e = OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(error)
                        .with_committed_offset(offset)
                        .with_metadata(Some(str_bytes(&meta)));
                    if v >= 5 {
                        e.committed_leader_epoch = epoch;
                    }
                    e
                })
                .collect();
            OffsetFetchResponseTopic::default().with_name(topic_name(&t)).with_partitions(partitions)
        })
        .collect();
    now(OffsetFetchResponse::default().with_topics(topics))
}
