//! DescribeQuorum (key 55, v0–2): the metadata quorum, `__cluster_metadata-0`, as
//! `kafka-metadata-quorum.sh describe --status` and `--replication` show it: the leader,
//! its epoch and high watermark, the voters (`controller.quorum.voters`) and the observers
//! (every other broker, a learner of the metadata group) with their log end offsets and
//! when the leader last heard from them. Any broker answers; the leader knows the figures.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, TopicName};
use runnel_controller::QuorumMember;
use runnel_security::acl::Operation;

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};

const METADATA_TOPIC: &str = "__cluster_metadata";

pub fn handle(b: &Arc<Broker>, r: DescribeQuorumRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::Describe) {
        return now(DescribeQuorumResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
    }
    let asked = |t: &kafka_protocol::messages::describe_quorum_request::TopicData| {
        t.topic_name.0.as_str() == METADATA_TOPIC && t.partitions.iter().all(|p| p.partition_index == 0)
    };
    if r.topics.len() != 1 || !r.topics.iter().all(asked) || r.topics[0].partitions.len() != 1 {
        // As Kafka: only the metadata partition has a quorum to describe.
        return now(DescribeQuorumResponse::default().with_error_code(ResponseError::InvalidRequest.code()));
    }
    let b = b.clone();
    let internal = b.config.internal.name.clone();
    Box::pin(async move {
        let cl = b.controller().clone();
        let partition = PartitionData::default().with_partition_index(0);
        let partition = match cl.describe_quorum().await {
            Ok(q) => partition
                .with_leader_id(BrokerId(q.leader))
                .with_leader_epoch(q.epoch)
                .with_high_watermark(q.high_watermark)
                .with_current_voters(q.voters.iter().map(replica_state).collect())
                .with_observers(q.observers.iter().map(replica_state).collect()),
            Err((code, message)) => partition
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(&message)))
                .with_leader_id(BrokerId(-1))
                .with_leader_epoch(-1)
                .with_high_watermark(-1),
        };
        let mut resp = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(str_bytes(METADATA_TOPIC)))
            .with_partitions(vec![partition])]);
        if v >= 2 {
            // The voters' endpoints: their Raft listeners, under the internal listener's name.
            let voters = cl.voters.clone();
            resp.nodes = cl
                .brokers()
                .into_iter()
                .filter(|info| voters.contains(&info.id))
                .filter_map(|info| {
                    let (host, port) = info.raft.rsplit_once(':')?;
                    let listener = Listener::default()
                        .with_name(str_bytes(&internal))
                        .with_host(str_bytes(host.trim_matches(['[', ']'])))
                        .with_port(port.parse().ok()?);
                    Some(Node::default().with_node_id(BrokerId(info.id)).with_listeners(vec![listener]))
                })
                .collect();
        }
        Some(resp.into())
    })
}

fn replica_state(m: &QuorumMember) -> ReplicaState {
    ReplicaState::default()
        .with_replica_id(BrokerId(m.id))
        .with_log_end_offset(m.log_end_offset)
        .with_last_fetch_timestamp(m.last_fetch_ms)
        .with_last_caught_up_timestamp(m.last_caught_up_ms)
}
