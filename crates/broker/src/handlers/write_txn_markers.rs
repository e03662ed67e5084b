//! WriteTxnMarkers (key 27): the transaction coordinator ends a producer's transaction on
//! the partitions it wrote to, by writing a commit or abort marker to each (on their
//! leaders). Each marker is a Raft entry like any batch; the answer waits until every
//! marker of the request is committed, and reports each partition's outcome.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use runnel_security::acl::Operation;
use runnel_wire::TxnEnd;

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use crate::errors;

/// How long a marker may take to commit before its partition answers REQUEST_TIMED_OUT
/// (the request has no timeout of its own; the coordinator retries).
const MARKER_COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

pub fn handle(b: &Arc<Broker>, r: WriteTxnMarkersRequest, _v: i16, ctx: &Ctx) -> Reply {
    let allowed = ctx.access.cluster(Operation::ClusterAction);
    // Every marker proposed first, then every commit awaited: the partitions' groups
    // replicate them in parallel.
    let mut results = Vec::with_capacity(r.markers.len());
    let mut waits = Vec::new();
    for (m, marker) in r.markers.iter().enumerate() {
        let end = if marker.transaction_result { TxnEnd::Commit } else { TxnEnd::Abort };
        let mut topics = Vec::with_capacity(marker.topics.len());
        for (t, topic) in marker.topics.iter().enumerate() {
            let found = b.catalog.topic(&topic.name.0);
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            for (p, &index) in topic.partition_indexes.iter().enumerate() {
                let code = if !allowed {
                    ResponseError::ClusterAuthorizationFailed.code()
                } else {
                    match found.as_ref().and_then(|f| f.partitions.get(index as usize)) {
                        None => ResponseError::UnknownTopicOrPartition.code(),
                        Some(part) => match part.write_marker(
                            marker.producer_id.0,
                            marker.producer_epoch,
                            marker.coordinator_epoch,
                            end,
                        ) {
                            Ok(appended) => {
                                waits.push(((m, t, p), appended));
                                0
                            }
                            Err(e) => errors::partition(&e).code(),
                        },
                    }
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default().with_partition_index(index).with_error_code(code),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default().with_name(topic.name.clone()).with_partitions(partitions),
            );
        }
        results.push(WritableTxnMarkerResult::default().with_producer_id(marker.producer_id).with_topics(topics));
    }
    if waits.is_empty() {
        return now(WriteTxnMarkersResponse::default().with_markers(results));
    }
    Box::pin(async move {
        for ((m, t, p), appended) in waits {
            if let Err(e) = appended.durable(MARKER_COMMIT_TIMEOUT).await {
                results[m].topics[t].partitions[p].error_code = errors::partition(&e).code();
            }
        }
        Some(WriteTxnMarkersResponse::default().with_markers(results).into())
    })
}
