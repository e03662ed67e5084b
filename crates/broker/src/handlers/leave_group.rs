//! LeaveGroup (key 13): one member (v0–2) or a batch of members by id or instance id
//! (v3+, KIP-345) leave; the rest of the group rebalances.

use std::sync::Arc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: LeaveGroupRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.group(Operation::Read, &r.group_id.0) {
        let denied = kafka_protocol::error::ResponseError::GroupAuthorizationFailed;
        return crate::ctx::now(LeaveGroupResponse::default().with_error_code(denied.code()));
    }
    let b = b.clone();
    Box::pin(async move {
        let members: Vec<(String, Option<String>)> = if v >= 3 {
            r.members
                .iter()
                .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|s| s.to_string())))
                .collect()
        } else {
            vec![(r.member_id.to_string(), None)]
        };
        let resp = match b.group_coordinator.leave(&r.group_id.0, &members).await {
            Err(e) => LeaveGroupResponse::default().with_error_code(e.code()),
            Ok(results) if v >= 3 => {
                let members = r
                    .members
                    .into_iter()
                    .zip(results)
                    .map(|(m, res)| {
                        MemberResponse::default()
                            .with_member_id(m.member_id)
                            .with_group_instance_id(m.group_instance_id)
                            .with_error_code(res.err().map_or(0, |e| e.code()))
                    })
                    .collect();
                LeaveGroupResponse::default().with_members(members)
            }
            Ok(results) => LeaveGroupResponse::default()
                .with_error_code(results.into_iter().next().and_then(|r| r.err()).map_or(0, |e| e.code())),
        };
        Some(resp.into())
    })
}
