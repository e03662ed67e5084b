//! ConsumerGroupHeartbeat (key 68, KIP-848): join, stay, change subscription, acknowledge
//! revocations and leave, all in one request; the coordinator answers with the member's
//! epoch and, when it changed, its assignment.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use runnel_coordinator::HeartbeatIn;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinators::CatalogTopics;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: ConsumerGroupHeartbeatRequest, v: i16, ctx: &Ctx) -> Reply {
    let interval = b.group_coordinator.consumer_heartbeat_interval_ms();
    let fail = |code: ResponseError, msg: &str| {
        now(ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code.code())
            .with_error_message(Some(str_bytes(msg)))
            .with_member_id(Some(r.member_id.clone()))
            .with_heartbeat_interval_ms(interval))
    };
    if v >= 1 && r.member_id.is_empty() {
        return fail(ResponseError::InvalidRequest, "MemberId can't be empty.");
    }
    // As Kafka: READ on the group, and DESCRIBE on every topic subscribed to by name.
    if !ctx.access.group(Operation::Read, &r.group_id.0) {
        return fail(ResponseError::GroupAuthorizationFailed, "Group authorization failed.");
    }
    let hidden = r.subscribed_topic_names.iter().flatten().find(|t| !ctx.access.topic(Operation::Describe, &t.0));
    if let Some(t) = hidden {
        return fail(ResponseError::TopicAuthorizationFailed, &format!("Unauthorized topics: {}", t.0.as_str()));
    }
    let req = HeartbeatIn {
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        instance_id: r.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: r.rack_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: format!("/{}", ctx.peer.ip()),
        subscribed: r.subscribed_topic_names.as_ref().map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
        regex: r.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        assignor: r.server_assignor.as_ref().map(|s| s.to_string()),
        owned: r
            .topic_partitions
            .as_ref()
            .map(|tps| tps.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p))).collect()),
        session_timeout: std::time::Duration::ZERO,
        rebalance_timeout: (r.rebalance_timeout_ms >= 0)
            .then(|| std::time::Duration::from_millis(r.rebalance_timeout_ms as u64)),
    };
    let (b, group, member_id) = (b.clone(), r.group_id.0.to_string(), r.member_id.clone());
    Box::pin(async move {
        let resp = match b.group_coordinator.consumer_heartbeat(&group, req, &CatalogTopics(&b)).await {
            Err((code, msg)) => ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(&msg)))
                .with_member_id(Some(member_id))
                .with_heartbeat_interval_ms(interval),
            Ok(out) => {
                let assignment = out.assignment.map(|tps| {
                    Assignment::default().with_topic_partitions(
                        super::by_topic(tps)
                            .into_iter()
                            .map(|(id, parts)| TopicPartitions::default().with_topic_id(id).with_partitions(parts))
                            .collect(),
                    )
                });
                ConsumerGroupHeartbeatResponse::default()
                    .with_member_id(Some(str_bytes(&out.member_id)))
                    .with_member_epoch(out.member_epoch)
                    .with_heartbeat_interval_ms(interval)
                    .with_assignment(assignment)
            }
        };
        Some(resp.into())
    })
}
