//! DeleteGroups (key 42): removes empty groups and their committed offsets; a share
//! group's share-partition state goes with it.

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
                true => delete(&b, &id.0).await.err().map_or(0, |e| e.code()),
            };
            results.push(DeletableGroupResult::default().with_group_id(id).with_error_code(code));
        }
        Some(DeleteGroupsResponse::default().with_results(results).into())
    })
}

async fn delete(b: &Broker, group: &str) -> Result<(), kafka_protocol::error::ResponseError> {
    if let Some(e) = b.group_coordinator.owner_error(group) {
        return Err(e);
    }
    if !b.group_coordinator.delete_share(group)? {
        return b.group_coordinator.delete(group).await;
    }
    // Its state is kept by the share coordinators of its keys: each deletes what it serves.
    for written in b.share_state.delete_group(group) {
        written.await.map_err(|_| kafka_protocol::error::ResponseError::CoordinatorNotAvailable)?;
    }
    Ok(())
}
