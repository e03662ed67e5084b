//! SyncGroup (key 14): the leader hands in the assignment; every member waits for its part.

use std::sync::Arc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: SyncGroupRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.group(Operation::Read, &r.group_id.0) {
        let denied = kafka_protocol::error::ResponseError::GroupAuthorizationFailed;
        return crate::ctx::now(SyncGroupResponse::default().with_error_code(denied.code()));
    }
    let b = b.clone();
    Box::pin(async move {
        let assignments = r.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect();
        let instance = if v >= 3 { r.group_instance_id.as_ref().map(|s| s.to_string()) } else { None };
        let res = b
            .group_coordinator
            .sync(&r.group_id.0, r.generation_id, &r.member_id, instance.as_deref(), assignments)
            .await;
        let mut resp = SyncGroupResponse::default().with_error_code(res.error).with_assignment(res.assignment);
        if v >= 5 {
            resp.protocol_type = res.protocol_type.as_deref().map(str_bytes);
            resp.protocol_name = res.protocol_name.as_deref().map(str_bytes);
        }
        Some(resp.into())
    })
}
