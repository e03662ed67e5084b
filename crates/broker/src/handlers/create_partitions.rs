//! CreatePartitions (key 37): grow a topic's partition count (never shrink). In cluster
//! mode the controller places the new partitions' replicas and commits them to the
//! metadata log; every broker opens its replicas of them as it applies the record.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::dispatch::{now, Reply};
use crate::errors;

pub fn handle(b: &Arc<Broker>, r: CreatePartitionsRequest, _v: i16) -> Reply {
    if let Some(cluster) = b.cluster.get().cloned() {
        return Box::pin(async move {
            let mut results = Vec::with_capacity(r.topics.len());
            for t in r.topics {
                let assignment = t
                    .assignments
                    .map(|a| a.into_iter().map(|p| p.broker_ids.into_iter().map(|id| id.0).collect()).collect());
                let res = CreatePartitionsTopicResult::default().with_name(t.name.clone());
                results.push(match cluster.create_partitions(&t.name.0, t.count, assignment, r.validate_only).await {
                    Ok(()) => res,
                    Err((code, msg)) => res.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
                });
            }
            Some(CreatePartitionsResponse::default().with_results(results).into())
        });
    }
    let me = b.node_id();
    let results = r
        .topics
        .into_iter()
        .map(|t| {
            let res = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let bad_assignment = t.assignments.iter().flatten().any(|a| a.broker_ids.iter().any(|id| id.0 != me));
            let outcome = if bad_assignment {
                Err((
                    ResponseError::InvalidReplicaAssignment,
                    "Assignment names a broker that does not exist".to_string(),
                ))
            } else if r.validate_only {
                b.catalog
                    .check_add_partitions(&t.name.0, t.count)
                    .map(|_| ())
                    .map_err(|e| (errors::catalog(&e), e.to_string()))
            } else {
                b.catalog.add_partitions(&t.name.0, t.count).map_err(|e| (errors::catalog(&e), e.to_string()))
            };
            match outcome {
                Ok(()) => res,
                Err((code, msg)) => res.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
            }
        })
        .collect();
    now(CreatePartitionsResponse::default().with_results(results))
}
