//! WriteTxnMarkers (key 27): a transaction coordinator ends a producer's transaction on
//! the partitions it wrote to, by writing a commit or abort marker to each (on their
//! leaders). Each marker is a Raft entry like any batch; the answer waits until the markers
//! are committed, and reports each partition's outcome (`txn::write_markers_here`).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use runnel_security::acl::Operation;
use runnel_wire::TxnEnd;

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};

pub fn handle(b: &Arc<Broker>, r: WriteTxnMarkersRequest, _v: i16, ctx: &Ctx) -> Reply {
    let allowed = ctx.access.cluster(Operation::ClusterAction);
    let b = b.clone();
    Box::pin(async move {
        let mut results = Vec::with_capacity(r.markers.len());
        for marker in r.markers {
            let end = if marker.transaction_result { TxnEnd::Commit } else { TxnEnd::Abort };
            let partitions: Vec<(String, i32)> = marker
                .topics
                .iter()
                .flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.0.to_string(), *p)))
                .collect();
            let mut codes = if allowed {
                let (pid, epoch, coordinator_epoch) =
                    (marker.producer_id.0, marker.producer_epoch, marker.coordinator_epoch);
                crate::txn::write_markers_here(&b, pid, epoch, coordinator_epoch, end, &partitions).await
            } else {
                vec![Some(ResponseError::ClusterAuthorizationFailed); partitions.len()]
            }
            .into_iter();
            let topics = marker
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            let code = codes.next().flatten().map_or(0, |c| c.code());
                            WritableTxnMarkerPartitionResult::default().with_partition_index(p).with_error_code(code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default().with_name(t.name).with_partitions(partitions)
                })
                .collect();
            results.push(WritableTxnMarkerResult::default().with_producer_id(marker.producer_id).with_topics(topics));
        }
        Some(WriteTxnMarkersResponse::default().with_markers(results).into())
    })
}
