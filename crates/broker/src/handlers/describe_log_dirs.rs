//! DescribeLogDirs (key 35, v1–4): this broker's one log directory and the size of each
//! partition replica it holds there (`kafka-log-dirs`, and `kafka-reassign-partitions`,
//! which reads where replicas live). Volume totals are not reported (-1, as Kafka does when
//! it cannot tell).

use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: DescribeLogDirsRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::Describe) {
        // As Kafka: no log dirs, and (v3+) the error.
        let mut resp = DescribeLogDirsResponse::default();
        if v >= 3 {
            resp.error_code = kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code();
        }
        return now(resp);
    }
    let wanted = |topic: &str, p: i32| match &r.topics {
        None => true,
        Some(ts) => ts.iter().any(|t| &*t.topic.0 == topic && t.partitions.contains(&p)),
    };
    let mut topics = Vec::new();
    for t in b.catalog.topics_snapshot() {
        let partitions: Vec<DescribeLogDirsPartition> = t
            .partitions
            .iter()
            .filter(|p| wanted(&t.name, p.index))
            .filter_map(|p| {
                let size = p.with_log(|log| log.size_bytes())? as i64;
                Some(DescribeLogDirsPartition::default().with_partition_index(p.index).with_partition_size(size))
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(DescribeLogDirsTopic::default().with_name(topic_name(&t.name)).with_partitions(partitions));
        }
    }
    let dir = b.config.data_dir.canonicalize().unwrap_or_else(|_| b.config.data_dir.clone());
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&dir.to_string_lossy()))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1);
    now(DescribeLogDirsResponse::default().with_results(vec![result]))
}
