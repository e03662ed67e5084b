//! JoinGroup (key 11): a member joins (or rejoins) a classic group and waits until the
//! rebalance's join phase completes; the leader gets every member's metadata.

use std::sync::Arc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use runnel_coordinator::JoinRequest;

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use kafka_protocol::error::ResponseError;
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: JoinGroupRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.group(Operation::Read, &r.group_id.0) {
        let mut resp = JoinGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code())
            .with_generation_id(-1);
        resp.protocol_name = if v >= 7 { None } else { Some(str_bytes("")) };
        return crate::ctx::now(resp);
    }
    let b = b.clone();
    let req = JoinRequest {
        member_id: r.member_id.to_string(),
        instance_id: if v >= 5 { r.group_instance_id.as_ref().map(|s| s.to_string()) } else { None },
        client_id: ctx.client_id.clone(),
        client_host: format!("/{}", ctx.peer.ip()),
        session_timeout_ms: r.session_timeout_ms,
        rebalance_timeout_ms: if v >= 1 { r.rebalance_timeout_ms } else { r.session_timeout_ms },
        protocol_type: r.protocol_type.to_string(),
        protocols: r.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member_id: v >= 4,
    };
    let group = r.group_id.0.to_string();
    Box::pin(async move {
        let res = b.group_coordinator.join(&group, req).await;
        let members = res
            .members
            .into_iter()
            .map(|(id, inst, metadata)| {
                JoinGroupResponseMember::default()
                    .with_member_id(str_bytes(&id))
                    .with_group_instance_id(if v >= 5 { inst.as_deref().map(str_bytes) } else { None })
                    .with_metadata(metadata)
            })
            .collect();
        let mut resp = JoinGroupResponse::default()
            .with_error_code(res.error)
            .with_generation_id(res.generation)
            .with_leader(str_bytes(&res.leader))
            .with_member_id(str_bytes(&res.member_id))
            .with_members(members);
        // Before v7 the protocol name is a non-null string; v7 added the (nullable) type.
        resp.protocol_name = Some(str_bytes(res.protocol_name.as_deref().unwrap_or_default()));
        if v >= 9 {
            resp.skip_assignment = res.skip_assignment;
        }
        if v >= 7 {
            resp.protocol_type = res.protocol_type.as_deref().map(str_bytes);
            resp.protocol_name = res.protocol_name.as_deref().map(str_bytes);
        }
        Some(resp.into())
    })
}
