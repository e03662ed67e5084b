//! AlterPartitionReassignments (key 45, v0–1) and ListPartitionReassignments (key 46, v0),
//! as `kafka-reassign-partitions` uses them. The controller records each move in the
//! metadata log; the partition's leader carries it out by Raft configuration changes
//! (`crate::reassign`). While a partition moves, Metadata lists its target replicas then
//! those leaving, and ListPartitionReassignments names the replicas being added and removed.
//! A single broker has nothing to move replicas to: only its own id is a valid target.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use runnel_security::acl::Operation;

pub fn alter(b: &Arc<Broker>, r: AlterPartitionReassignmentsRequest, _v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::Alter) {
        let denied = ResponseError::ClusterAuthorizationFailed;
        return crate::ctx::now(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(denied.code())
                .with_error_message(Some(str_bytes("Cluster authorization failed."))),
        );
    }
    let b = b.clone();
    Box::pin(async move {
        let controller = b.controller().clone();
        let mut topics = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let target: Option<Vec<i32>> = p.replicas.map(|ids| ids.into_iter().map(|id| id.0).collect());
                let outcome =
                    controller.reassign(&t.name.0, p.partition_index, target, r.allow_replication_factor_change).await;
                partitions.push(answer(p.partition_index, outcome));
            }
            topics.push(ReassignableTopicResponse::default().with_name(t.name).with_partitions(partitions));
        }
        Some(
            AlterPartitionReassignmentsResponse::default()
                .with_allow_replication_factor_change(r.allow_replication_factor_change)
                .with_responses(topics)
                .into(),
        )
    })
}

fn answer(partition: i32, outcome: Result<(), (ResponseError, String)>) -> ReassignablePartitionResponse {
    let res = ReassignablePartitionResponse::default().with_partition_index(partition);
    match outcome {
        Ok(()) => res,
        Err((code, msg)) => res.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
    }
}

pub fn list(b: &Arc<Broker>, r: ListPartitionReassignmentsRequest, _v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.cluster(Operation::Describe) {
        let denied = ResponseError::ClusterAuthorizationFailed;
        return crate::ctx::now(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(denied.code())
                .with_error_message(Some(str_bytes("Cluster authorization failed."))),
        );
    }
    let moving = b.controller().reassignments();
    let wanted = |topic: &str, p: i32| match &r.topics {
        None => true,
        Some(ts) => ts.iter().any(|t| &*t.name.0 == topic && t.partition_indexes.contains(&p)),
    };
    let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
    for ((topic, p), m) in moving.into_iter().filter(|((t, p), _)| wanted(t, *p)) {
        let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
        let adding = m.target.iter().copied().filter(|x| !m.original.contains(x)).collect();
        let removing = m.original.iter().copied().filter(|x| !m.target.contains(x)).collect();
        let ongoing = OngoingPartitionReassignment::default()
            .with_partition_index(p)
            .with_replicas(ids(m.listed()))
            .with_adding_replicas(ids(adding))
            .with_removing_replicas(ids(removing));
        match topics.iter_mut().find(|t| *t.name.0 == *topic) {
            Some(t) => t.partitions.push(ongoing),
            None => topics
                .push(OngoingTopicReassignment::default().with_name(topic_name(&topic)).with_partitions(vec![ongoing])),
        }
    }
    crate::ctx::now(ListPartitionReassignmentsResponse::default().with_topics(topics))
}
