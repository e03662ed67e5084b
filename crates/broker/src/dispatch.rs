//! The table of every Kafka API this broker serves, with its version range, and the one
//! `match` that routes a decoded request to its handler (one file per API in `handlers/`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::handlers;

/// A handler's answer: a future so that produce (waiting for fsync) and fetch (long
/// polling) can finish later, while the connection keeps reading and answers in order.
/// `None` means no response is sent (produce with acks=0).
pub type Reply = Pin<Box<dyn Future<Output = Option<ResponseKind>> + Send>>;

/// Who sent a request: what JoinGroup records as a member's client id and host.
pub struct Ctx {
    pub client_id: String,
    pub peer: std::net::SocketAddr,
}

pub fn now(resp: impl Into<ResponseKind>) -> Reply {
    let resp = resp.into();
    Box::pin(std::future::ready(Some(resp)))
}

/// (API, min version, max version). Minimums follow Kafka 4.x, which dropped older ones.
pub const APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

pub fn supported(key: ApiKey, version: i16) -> bool {
    APIS.iter().any(|(k, min, max)| *k == key && (*min..=*max).contains(&version))
}

pub fn dispatch(
    broker: &Arc<Broker>,
    header: &RequestHeader,
    request: RequestKind,
    peer: std::net::SocketAddr,
) -> Reply {
    let v = header.request_api_version;
    let ctx = Ctx { client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(), peer };
    let b = broker.clone();
    match request {
        RequestKind::ApiVersions(r) => handlers::api_versions::handle(&b, r, v),
        RequestKind::Metadata(r) => handlers::metadata::handle(&b, r, v),
        RequestKind::Produce(r) => handlers::produce::handle(&b, r, v),
        RequestKind::Fetch(r) => handlers::fetch::handle(b, r, v),
        RequestKind::ListOffsets(r) => handlers::list_offsets::handle(&b, r, v),
        RequestKind::CreateTopics(r) => handlers::create_topics::handle(&b, r, v),
        RequestKind::DeleteTopics(r) => handlers::delete_topics::handle(&b, r, v),
        RequestKind::CreatePartitions(r) => handlers::create_partitions::handle(&b, r, v),
        RequestKind::DeleteRecords(r) => handlers::delete_records::handle(&b, r, v),
        RequestKind::ElectLeaders(r) => handlers::elect_leaders::handle(&b, r, v),
        RequestKind::AlterPartitionReassignments(r) => handlers::partition_reassignments::alter(&b, r, v),
        RequestKind::ListPartitionReassignments(r) => handlers::partition_reassignments::list(&b, r, v),
        RequestKind::InitProducerId(r) => handlers::init_producer_id::handle(&b, r, v),
        RequestKind::OffsetForLeaderEpoch(r) => handlers::offset_for_leader_epoch::handle(&b, r, v),
        RequestKind::DescribeConfigs(r) => handlers::describe_configs::handle(&b, r, v),
        RequestKind::IncrementalAlterConfigs(r) => handlers::alter_configs::incremental(&b, r, v),
        RequestKind::AlterConfigs(r) => handlers::alter_configs::legacy(&b, r, v),
        RequestKind::DescribeCluster(r) => handlers::describe_cluster::handle(&b, r, v),
        RequestKind::DescribeLogDirs(r) => handlers::describe_log_dirs::handle(&b, r, v),
        RequestKind::FindCoordinator(r) => handlers::find_coordinator::handle(&b, r, v),
        RequestKind::JoinGroup(r) => handlers::join_group::handle(&b, r, v, &ctx),
        RequestKind::SyncGroup(r) => handlers::sync_group::handle(&b, r, v),
        RequestKind::Heartbeat(r) => handlers::heartbeat::handle(&b, r, v),
        RequestKind::LeaveGroup(r) => handlers::leave_group::handle(&b, r, v),
        RequestKind::OffsetCommit(r) => handlers::offset_commit::handle(&b, r, v),
        RequestKind::OffsetFetch(r) => handlers::offset_fetch::handle(&b, r, v),
        RequestKind::DescribeGroups(r) => handlers::describe_groups::handle(&b, r, v),
        RequestKind::ListGroups(r) => handlers::list_groups::handle(&b, r, v),
        RequestKind::DeleteGroups(r) => handlers::delete_groups::handle(&b, r, v),
        RequestKind::OffsetDelete(r) => handlers::offset_delete::handle(&b, r, v),
        RequestKind::ConsumerGroupHeartbeat(r) => handlers::consumer_group_heartbeat::handle(&b, r, v, &ctx),
        RequestKind::ConsumerGroupDescribe(r) => handlers::consumer_group_describe::handle(&b, r, v),
        other => {
            // `supported` gates decoding, so only a table/match mismatch lands here.
            unreachable!("API {:?} is in the table but has no handler", std::mem::discriminant(&other))
        }
    }
}
