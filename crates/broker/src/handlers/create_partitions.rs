//! CreatePartitions (key 37): grow a topic's partition count (never shrink). The
//! controller places the new partitions' replicas and commits them to the
//! metadata log; every broker opens its replicas of them as it applies the record.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use kafka_protocol::error::ResponseError;
use runnel_security::acl::Operation;

pub fn handle(b: &Arc<Broker>, r: CreatePartitionsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let controller = b.controller().clone();
    let access = ctx.access.clone();
    Box::pin(async move {
        let mut results = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let assignment = t
                .assignments
                .map(|a| a.into_iter().map(|p| p.broker_ids.into_iter().map(|id| id.0).collect()).collect());
            let res = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            if !access.topic(Operation::Alter, &t.name.0) {
                let denied = ResponseError::TopicAuthorizationFailed;
                results.push(
                    res.with_error_code(denied.code()).with_error_message(Some(str_bytes("Authorization failed."))),
                );
                continue;
            }
            results.push(match controller.create_partitions(&t.name.0, t.count, assignment, r.validate_only).await {
                Ok(()) => res,
                Err((code, msg)) => res.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
            });
        }
        Some(CreatePartitionsResponse::default().with_results(results).into())
    })
}
