//! TxnOffsetCommit (key 28): offsets committed in a producer's transaction (Kafka's
//! `sendOffsetsToTransaction`), sent to the group's coordinator after AddOffsetsToTxn put
//! the group's offsets partition into the transaction (v5+, transactions version 2: the
//! commit puts it there itself). They take effect when the
//! transaction commits (`Coordinator::txn_commit`, `Coordinator::complete_txn`).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use runnel_security::acl::Operation;

use crate::broker::Broker;
use crate::ctx::{Ctx, Reply};
use crate::offsets_log::OFFSETS_TOPIC;

pub fn handle(b: &Arc<Broker>, r: TxnOffsetCommitRequest, v: i16, ctx: &Ctx) -> Reply {
    let (b, ctx) = (b.clone(), ctx.clone());
    Box::pin(async move {
        let group = r.group_id.0.to_string();
        let id = r.transactional_id.0.to_string();
        // As Kafka: the transactional id, then the group, refuse every partition; a topic
        // refuses its own.
        let all = if !ctx.access.transactional_id(Operation::Write, &id) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !ctx.access.group(Operation::Read, &group) {
            Some(ResponseError::GroupAuthorizationFailed)
        } else {
            None
        };
        let mut codes: Vec<Vec<Option<ResponseError>>> = Vec::with_capacity(r.topics.len());
        let mut offsets = Vec::new();
        for t in &r.topics {
            let topic = b.catalog.topic(&t.name.0);
            let allowed = ctx.access.topic(Operation::Read, &t.name.0);
            let mut per = Vec::with_capacity(t.partitions.len());
            for p in &t.partitions {
                let exists = topic.as_ref().is_some_and(|t| (p.partition_index as usize) < t.partitions.len());
                per.push(match (all, allowed, exists) {
                    (Some(code), _, _) => Some(code),
                    (None, false, _) => Some(ResponseError::TopicAuthorizationFailed),
                    (None, true, false) => Some(ResponseError::UnknownTopicOrPartition),
                    (None, true, true) => {
                        offsets.push((
                            t.name.0.to_string(),
                            p.partition_index,
                            p.committed_offset,
                            if v >= 2 { p.committed_leader_epoch } else { -1 },
                            p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default(),
                        ));
                        None
                    }
                });
            }
            codes.push(per);
        }
        let outcome = if offsets.is_empty() { Ok(Vec::new()) } else { commit(&b, &r, &id, &group, v, offsets).await };
        let mut results = outcome.as_ref().map(|list| list.clone().into_iter()).unwrap_or_default();
        let topics = r
            .topics
            .iter()
            .zip(codes)
            .map(|(t, per)| {
                let partitions = t
                    .partitions
                    .iter()
                    .zip(per)
                    .map(|(p, code)| {
                        let code = match (&outcome, code) {
                            (_, Some(code)) => code.code(),
                            (Err(e), None) => e.code(),
                            (Ok(_), None) => results.next().and_then(|r| r.err()).map_or(0, |e| e.code()),
                        };
                        TxnOffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                TxnOffsetCommitResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions)
            })
            .collect();
        Some(TxnOffsetCommitResponse::default().with_topics(topics).into())
    })
}

/// Checks that the group's offsets partition is in the transaction, or adds it with v5+
/// (KIP-890, when this commit would open the producer's transaction there), then commits.
async fn commit(
    b: &Arc<Broker>,
    r: &TxnOffsetCommitRequest,
    id: &str,
    group: &str,
    v: i16,
    offsets: Vec<(String, i32, i64, i32, String)>,
) -> Result<Vec<Result<(), ResponseError>>, ResponseError> {
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    let p = b.group_coordinator.partition_for(group);
    let part = b.catalog.topic(OFFSETS_TOPIC).and_then(|t| t.partitions.get(p as usize).cloned());
    if part.is_some_and(|part| !part.is_remote() && !part.in_transaction(pid, epoch)) {
        let tp = (OFFSETS_TOPIC.to_string(), p);
        if v >= 5 {
            // Transactions version 2: no AddOffsetsToTxn came first; the commit adds the
            // group's offsets partition to the transaction itself. A transaction still
            // ending after the retries is answered as a loading coordinator (retriable).
            crate::txn::add(b, id, pid, epoch, vec![tp]).await.map_err(|e| match e {
                ResponseError::ConcurrentTransactions => ResponseError::CoordinatorLoadInProgress,
                e => e,
            })?;
        } else {
            crate::txn::verify(b, id, pid, epoch, tp).await?;
        }
    }
    let (generation, member, instance) = match v >= 3 {
        true => (r.generation_id, r.member_id.as_str(), r.group_instance_id.as_ref().map(|s| s.as_str())),
        false => (-1, "", None),
    };
    b.group_coordinator.txn_commit(group, pid, epoch, generation, member, instance, offsets).await
}
