//! Heartbeat (key 12): keeps a member's session alive; tells it when to rejoin.

use std::sync::Arc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: HeartbeatRequest, v: i16, ctx: &Ctx) -> Reply {
    if !ctx.access.group(Operation::Read, &r.group_id.0) {
        let denied = kafka_protocol::error::ResponseError::GroupAuthorizationFailed;
        return now(HeartbeatResponse::default().with_error_code(denied.code()));
    }
    let instance = if v >= 3 { r.group_instance_id.as_ref().map(|s| s.as_str()) } else { None };
    let code = match b.group_coordinator.heartbeat(&r.group_id.0, r.generation_id, &r.member_id, instance) {
        Ok(()) => 0,
        Err(e) => e.code(),
    };
    now(HeartbeatResponse::default().with_error_code(code))
}
