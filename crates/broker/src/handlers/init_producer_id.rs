//! InitProducerId (key 22): producer ids for idempotent producers, and the epoch bump of
//! KIP-360 when a producer asks to continue with its id after an error.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::{Operation, ResourceType};

pub fn handle(b: &Arc<Broker>, r: InitProducerIdRequest, _v: i16, ctx: &Ctx) -> Reply {
    let resp = InitProducerIdResponse::default();
    // As Kafka 3+: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on
    // some topic.
    let a = &ctx.access;
    if !a.cluster(Operation::IdempotentWrite) && !a.any(Operation::Write, ResourceType::Topic) {
        return now(resp.with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
    }
    if r.transactional_id.is_some() {
        // Transactions are a later capability; refuse clearly rather than pretend.
        return now(resp.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()));
    }
    let bump =
        r.producer_id.0 >= 0 && r.producer_id.0 != -1 && r.producer_epoch >= 0 && r.producer_epoch < i16::MAX - 1;
    if bump {
        return now(resp.with_producer_id(r.producer_id).with_producer_epoch(r.producer_epoch + 1));
    }
    let b = b.clone();
    Box::pin(async move {
        let resp = match b.catalog.allocate_producer_id().await {
            // Each broker allocates from its own range (node id + 1 in the high bits), so
            // ids never collide across brokers.
            Ok(id) => resp.with_producer_id(ProducerId(id | ((b.node_id() as i64 + 1) << 40))).with_producer_epoch(0),
            Err(e) => {
                tracing::error!(error = %e, "allocating a producer id");
                resp.with_error_code(ResponseError::KafkaStorageError.code())
            }
        };
        Some(resp.into())
    })
}
