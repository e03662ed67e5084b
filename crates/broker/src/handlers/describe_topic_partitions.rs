//! DescribeTopicPartitions (key 75, KIP-966): the partitions of the topics asked for (or of
//! every topic the client may describe), in name order, at most
//! min(`response_partition_limit`, `max.request.partition.size.limit`) partitions per
//! answer, with a cursor where the next answer starts. Kafka 4's AdminClient
//! `describeTopics` and `kafka-topics.sh --describe` use it in place of Metadata.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
use runnel_security::acl::Operation;

use super::metadata::topic_entry;
use super::topic_name;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};

pub fn handle(b: &Arc<Broker>, r: DescribeTopicPartitionsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let broker_limit = b.catalog.settings().get("max.request.partition.size.limit").parse::<i32>().unwrap_or(2000);
    let limit = match r.response_partition_limit {
        n if n > 0 => n.min(broker_limit),
        _ => broker_limit,
    }
    .max(1) as usize;
    // Every topic, or those named: in name order, without repeats.
    let names: Vec<(String, bool)> = if r.topics.is_empty() {
        b.catalog
            .topics_snapshot()
            .iter()
            .filter(|t| ctx.access.topic(Operation::Describe, &t.name))
            .map(|t| (t.name.to_string(), false))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    } else {
        r.topics.iter().map(|t| (t.name.0.to_string(), true)).collect::<BTreeSet<_>>().into_iter().collect()
    };
    let (from_topic, from_partition) = match &r.cursor {
        Some(c) => (Some(c.topic_name.0.to_string()), c.partition_index.max(0)),
        None => (None, 0),
    };
    let live: BTreeSet<i32> = b.controller().live_brokers().iter().map(|i| i.id).collect();
    let mut topics = Vec::new();
    let mut left = limit;
    let mut next_cursor = None;
    for (name, named) in names {
        if from_topic.as_ref().is_some_and(|from| name < *from) {
            continue;
        }
        let first = if from_topic.as_deref() == Some(name.as_str()) { from_partition } else { 0 };
        let entry = DescribeTopicPartitionsResponseTopic::default().with_name(Some(topic_name(&name)));
        if named && !ctx.access.topic(Operation::Describe, &name) {
            topics.push(entry.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
            continue;
        }
        let Some(t) = b.catalog.topic(&name) else {
            topics.push(entry.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
            continue;
        };
        if left == 0 {
            next_cursor = Some(Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(first));
            break;
        }
        let meta = topic_entry(b, &t, 12);
        let mut partitions = Vec::new();
        for p in meta.partitions.into_iter().filter(|p| p.partition_index >= first) {
            if left == 0 {
                next_cursor =
                    Some(Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(p.partition_index));
                break;
            }
            left -= 1;
            let offline: Vec<BrokerId> = p.replica_nodes.iter().filter(|r| !live.contains(&r.0)).copied().collect();
            partitions.push(
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(p.error_code)
                    .with_partition_index(p.partition_index)
                    .with_leader_id(p.leader_id)
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(p.replica_nodes)
                    .with_isr_nodes(p.isr_nodes)
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
                    .with_offline_replicas(offline),
            );
        }
        topics.push(
            entry
                .with_topic_id(t.id)
                .with_is_internal(crate::offsets_log::is_internal(&t.name))
                .with_partitions(partitions),
        );
        if next_cursor.is_some() {
            break;
        }
    }
    now(DescribeTopicPartitionsResponse::default().with_topics(topics).with_next_cursor(next_cursor))
}
