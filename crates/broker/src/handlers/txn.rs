//! The transaction coordinator's client APIs: AddPartitionsToTxn (key 24; v4+ is the
//! batched form brokers use, with `verify_only` for KIP-890 checks), AddOffsetsToTxn
//! (key 25) and EndTxn (key 26). Each authorizes, then hands over to `runnel_txn`.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::ProducerId;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    EndTxnRequest, EndTxnResponse,
};
use runnel_security::acl::Operation;
use runnel_wire::TxnEnd;

use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use crate::offsets_log::OFFSETS_TOPIC;

/// One transaction's partitions, checked: the ones to add, and an error per partition
/// when any is refused (then none is added; the others get OPERATION_NOT_ATTEMPTED).
fn check_partitions(b: &Broker, ctx: &Ctx, topics: &[AddPartitionsToTxnTopic]) -> (Vec<(String, i32)>, bool) {
    let mut parts = Vec::new();
    let mut refused = false;
    for t in topics {
        let name = t.name.0.to_string();
        let known = b.catalog.topic(&name);
        for &p in &t.partitions {
            let ok = ctx.access.topic(Operation::Write, &name)
                && known.as_ref().is_some_and(|k| p >= 0 && (p as usize) < k.partitions.len());
            refused |= !ok;
            parts.push((name.clone(), p));
        }
    }
    (parts, refused)
}

/// The per-partition code of a refused add: why this partition was, or that it was not
/// attempted because another one was.
fn refusal(b: &Broker, ctx: &Ctx, topic: &str, p: i32) -> ResponseError {
    if !ctx.access.topic(Operation::Write, topic) {
        ResponseError::TopicAuthorizationFailed
    } else if b.catalog.topic(topic).is_none_or(|t| p < 0 || p as usize >= t.partitions.len()) {
        ResponseError::UnknownTopicOrPartition
    } else {
        ResponseError::OperationNotAttempted
    }
}

fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    code: impl Fn(&str, i32) -> Option<ResponseError>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    let c = code(&t.name.0, p).map_or(0, |c| c.code());
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(c)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(results)
        })
        .collect()
}

/// How [`add_one`] treats the partitions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AddMode {
    /// AddPartitionsToTxn from the producer (transactions version 1).
    Client,
    /// A broker adding what a producer wrote to it (v5, transactions version 2).
    Broker,
    /// A broker checking that they are in the transaction (`verify_only`).
    Verify,
}

/// Adds (or checks) one transaction's partitions; the code for each.
async fn add_one(
    b: &Arc<Broker>,
    ctx: &Ctx,
    id: &str,
    producer_id: i64,
    epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
    mode: AddMode,
) -> Vec<AddPartitionsToTxnTopicResult> {
    if !ctx.access.transactional_id(Operation::Write, id) {
        return topic_results(topics, |_, _| Some(ResponseError::TransactionalIdAuthorizationFailed));
    }
    if mode == AddMode::Verify {
        let c = &b.txn_coordinator;
        return topic_results(topics, |t, p| c.verify(id, producer_id, epoch, &(t.to_string(), p)).err());
    }
    let (parts, refused) = check_partitions(b, ctx, topics);
    if refused {
        return topic_results(topics, |t, p| Some(refusal(b, ctx, t, p)));
    }
    let tv2 = mode == AddMode::Broker;
    let code = b.txn_coordinator.add_partitions(id, producer_id, epoch, &parts, tv2).await.err();
    topic_results(topics, |_, _| code)
}

pub fn add_partitions(b: &Arc<Broker>, r: AddPartitionsToTxnRequest, v: i16, ctx: &Ctx) -> Reply {
    let (b, ctx) = (b.clone(), ctx.clone());
    Box::pin(async move {
        if v <= 3 {
            let id = r.v3_and_below_transactional_id.0.to_string();
            let (pid, epoch) = (r.v3_and_below_producer_id.0, r.v3_and_below_producer_epoch);
            let results = add_one(&b, &ctx, &id, pid, epoch, &r.v3_and_below_topics, AddMode::Client).await;
            return Some(AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results).into());
        }
        // The batched form is for brokers (CLUSTER_ACTION), as in Kafka.
        if !ctx.access.cluster(Operation::ClusterAction) {
            let code = ResponseError::ClusterAuthorizationFailed.code();
            return Some(AddPartitionsToTxnResponse::default().with_error_code(code).into());
        }
        let mut results = Vec::with_capacity(r.transactions.len());
        for t in &r.transactions {
            let id = t.transactional_id.0.to_string();
            let mode = match (t.verify_only, v >= 5) {
                (true, _) => AddMode::Verify,
                (false, true) => AddMode::Broker,
                (false, false) => AddMode::Client,
            };
            let topics = add_one(&b, &ctx, &id, t.producer_id.0, t.producer_epoch, &t.topics, mode).await;
            results.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(t.transactional_id.clone())
                    .with_topic_results(topics),
            );
        }
        Some(AddPartitionsToTxnResponse::default().with_results_by_transaction(results).into())
    })
}

pub fn add_offsets(b: &Arc<Broker>, r: AddOffsetsToTxnRequest, _v: i16, ctx: &Ctx) -> Reply {
    let resp = AddOffsetsToTxnResponse::default();
    let id = r.transactional_id.0.to_string();
    if !ctx.access.transactional_id(Operation::Write, &id) {
        return now(resp.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()));
    }
    if !ctx.access.group(Operation::Read, &r.group_id.0) {
        return now(resp.with_error_code(ResponseError::GroupAuthorizationFailed.code()));
    }
    // The group's offsets partition joins the transaction: its marker settles the
    // offsets the producer commits with the transaction (TxnOffsetCommit).
    let tp = (OFFSETS_TOPIC.to_string(), b.group_coordinator.partition_for(&r.group_id.0));
    let b = b.clone();
    Box::pin(async move {
        let code = match b.txn_coordinator.add_partitions(&id, r.producer_id.0, r.producer_epoch, &[tp], false).await {
            Ok(()) => 0,
            Err(e) => e.code(),
        };
        Some(resp.with_error_code(code).into())
    })
}

/// EndTxn; v5+ is transactions version 2: the epoch is bumped, and the answer carries the
/// producer id and epoch to go on with.
pub fn end(b: &Arc<Broker>, r: EndTxnRequest, v: i16, ctx: &Ctx) -> Reply {
    let resp = EndTxnResponse::default();
    let id = r.transactional_id.0.to_string();
    if !ctx.access.transactional_id(Operation::Write, &id) {
        return now(resp.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()));
    }
    let end = if r.committed { TxnEnd::Commit } else { TxnEnd::Abort };
    let b = b.clone();
    Box::pin(async move {
        let resp = match b.txn_coordinator.end_txn(&id, r.producer_id.0, r.producer_epoch, end, v >= 5).await {
            Ok((pid, epoch)) if v >= 5 => resp.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch),
            Ok(_) => resp,
            Err(e) => resp.with_error_code(e.code()),
        };
        Some(resp.into())
    })
}
