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
    let Some(share) = b.group_coordinator.describe_share(group)? else {
        return b.group_coordinator.delete(group).await;
    };
    if !share.members.is_empty() {
        return Err(kafka_protocol::error::ResponseError::NonEmptyGroup);
    }
    // Its share-partitions' state, wherever its share coordinators keep it.
    for name in &share.topics {
        if let Some(topic) = b.catalog.topic(name) {
            crate::share::forget_topic(b, group, topic.id, topic.partitions.len()).await?;
        }
    }
    b.group_coordinator.delete_share(group).await.map(|_| ())
}
