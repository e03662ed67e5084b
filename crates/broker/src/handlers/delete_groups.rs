//! DeleteGroups (key 42): removes empty groups and their committed offsets.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: DeleteGroupsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let b = b.clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        let mut results = Vec::with_capacity(r.groups_names.len());
        for id in r.groups_names {
            let code = match access.group(Operation::Delete, &id.0) {
                false => kafka_protocol::error::ResponseError::GroupAuthorizationFailed.code(),
                true => b.group_coordinator.delete(&id.0).await.err().map_or(0, |e| e.code()),
            };
            results.push(DeletableGroupResult::default().with_group_id(id).with_error_code(code));
        }
        Some(DeleteGroupsResponse::default().with_results(results).into())
    })
}
