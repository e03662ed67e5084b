//! InitProducerId (key 22): producer ids for idempotent producers, the epoch bump of
//! KIP-360 when a producer asks to continue with its id after an error, and, with a
//! transactional id, the transaction coordinator's id and epoch (fencing older instances).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use runnel_security::acl::{Operation, ResourceType};

pub fn handle(b: &Arc<Broker>, r: InitProducerIdRequest, _v: i16, ctx: &Ctx) -> Reply {
    let resp = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    let expected = (r.producer_id.0 >= 0).then_some((r.producer_id.0, r.producer_epoch));
    if let Some(id) = r.transactional_id.map(|id| id.0.to_string()) {
        if !ctx.access.transactional_id(Operation::Write, &id) {
            return now(resp.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()));
        }
        let b = b.clone();
        return Box::pin(async move {
            let resp = match b.txn_coordinator.init_producer_id(&id, r.transaction_timeout_ms, expected).await {
                Ok((pid, epoch)) => resp.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch),
                Err(code) => resp.with_error_code(code.code()),
            };
            Some(resp.into())
        });
    }
    // As Kafka 3+: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on
    // some topic.
    let a = &ctx.access;
    if !a.cluster(Operation::IdempotentWrite) && !a.any(Operation::Write, ResourceType::Topic) {
        return now(resp.with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
    }
    if let Some((pid, epoch)) = expected.filter(|(_, epoch)| *epoch >= 0 && *epoch < i16::MAX - 1) {
        return now(resp.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch + 1));
    }
    let b = b.clone();
    Box::pin(async move {
        let resp = match b.allocate_producer_id().await {
            Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
            Err(e) => {
                tracing::error!(error = %e, "allocating a producer id");
                resp.with_error_code(ResponseError::KafkaStorageError.code())
            }
        };
        Some(resp.into())
    })
}
