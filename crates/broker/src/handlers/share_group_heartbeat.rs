//! ShareGroupHeartbeat (key 76, KIP-932): join a share group, stay in it, change its
//! subscription or leave it; the coordinator answers with the member's epoch and, when it
//! changed, its assignment (the partitions it reads, which other members may read too).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use runnel_coordinator::ShareHeartbeatIn;
use runnel_security::acl::Operation;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinators::CatalogTopics;
use crate::ctx::{now, Ctx, Reply};

pub fn handle(b: &Arc<Broker>, r: ShareGroupHeartbeatRequest, _v: i16, ctx: &Ctx) -> Reply {
    let group = r.group_id.0.to_string();
    let configs = b.controller().group_configs(&group);
    let interval = crate::group_configs::value(&configs, &b.catalog.settings(), "share.heartbeat.interval.ms") as i32;
    let resp = ShareGroupHeartbeatResponse::default().with_heartbeat_interval_ms(interval);
    let fail = |code: ResponseError, msg: &str| {
        now(resp
            .clone()
            .with_error_code(code.code())
            .with_error_message(Some(str_bytes(msg)))
            .with_member_id(Some(r.member_id.clone())))
    };
    if r.member_id.is_empty() {
        return fail(ResponseError::InvalidRequest, "MemberId can't be empty.");
    }
    if r.member_epoch < -1 {
        return fail(ResponseError::InvalidRequest, "MemberEpoch is invalid.");
    }
    // As Kafka: READ on the group, and DESCRIBE on every topic subscribed to.
    if !ctx.access.group(Operation::Read, &group) {
        return fail(ResponseError::GroupAuthorizationFailed, "Group authorization failed.");
    }
    let hidden = r.subscribed_topic_names.iter().flatten().find(|t| !ctx.access.topic(Operation::Describe, &t.0));
    if let Some(t) = hidden {
        return fail(ResponseError::TopicAuthorizationFailed, &format!("Unauthorized topics: {}", t.0.as_str()));
    }
    let req = ShareHeartbeatIn {
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        rack_id: r.rack_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.client_id.clone(),
        client_host: format!("/{}", ctx.peer.ip()),
        subscribed: r.subscribed_topic_names.as_ref().map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
    };
    let (b, member_id) = (b.clone(), r.member_id.clone());
    Box::pin(async move {
        let resp = match b.group_coordinator.share_heartbeat(&group, req, &CatalogTopics(&b)).await {
            Err((code, msg)) => resp
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(&msg)))
                .with_member_id(Some(member_id)),
            Ok(out) => {
                let assignment = out.assignment.map(|tps| {
                    Assignment::default().with_topic_partitions(
                        super::by_topic(tps)
                            .into_iter()
                            .map(|(id, parts)| TopicPartitions::default().with_topic_id(id).with_partitions(parts))
                            .collect(),
                    )
                });
                resp.with_member_id(Some(str_bytes(&out.member_id)))
                    .with_member_epoch(out.member_epoch)
                    .with_assignment(assignment)
            }
        };
        Some(resp.into())
    })
}
