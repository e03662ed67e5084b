//! What `kafka-transactions.sh` and the Admin client ask about transactions:
//! DescribeTransactions (key 65) and ListTransactions (key 66) from the transaction
//! coordinators, DescribeProducers (key 61) from partition leaders. (Its `abort` command
//! writes a marker with WriteTxnMarkers.)

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use runnel_security::acl::Operation;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::ctx::{now, Ctx, Reply};
use crate::errors;

pub fn describe_transactions(b: &Arc<Broker>, r: DescribeTransactionsRequest, _v: i16, ctx: &Ctx) -> Reply {
    let states = r
        .transactional_ids
        .into_iter()
        .map(|id| {
            let out = TransactionState::default().with_transactional_id(id.clone()).with_producer_id(ProducerId(-1));
            if !ctx.access.transactional_id(Operation::Describe, &id.0) {
                return out.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            }
            match b.txn_coordinator.describe(&id.0) {
                Err(e) => out.with_error_code(e.code()),
                Ok(None) => out.with_error_code(ResponseError::TransactionalIdNotFound.code()),
                Ok(Some(m)) => {
                    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for (t, p) in &m.partitions {
                        topics.entry(t).or_default().push(*p);
                    }
                    out.with_transaction_state(str_bytes(m.state.kafka_name()))
                        .with_transaction_timeout_ms(m.timeout_ms)
                        .with_transaction_start_time_ms(m.start_ms)
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_producer_epoch(m.producer_epoch)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(t, ps)| TopicData::default().with_topic(topic_name(t)).with_partitions(ps))
                                .collect(),
                        )
                }
            }
        })
        .collect();
    now(DescribeTransactionsResponse::default().with_transaction_states(states))
}

const STATES: [&str; 6] = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"];

pub fn list_transactions(b: &Arc<Broker>, r: ListTransactionsRequest, v: i16, ctx: &Ctx) -> Reply {
    let resp = ListTransactionsResponse::default();
    let (known, unknown): (Vec<_>, Vec<_>) = r.state_filters.iter().partition(|s| STATES.contains(&s.as_str()));
    let states: Vec<String> = known.iter().map(|s| s.to_string()).collect();
    let pids: Vec<i64> = r.producer_id_filters.iter().map(|p| p.0).collect();
    // A pattern from the network: its compiled size is bounded (1 MiB).
    let compile = |p: &str| regex::RegexBuilder::new(&format!("^(?:{p})$")).size_limit(1 << 20).build();
    let pattern = match r.transactional_id_pattern.as_ref().filter(|_| v >= 2).map(|p| compile(p)) {
        Some(Err(_)) => return now(resp.with_error_code(ResponseError::InvalidRegularExpression.code())),
        Some(Ok(re)) => Some(re),
        None => None,
    };
    let since = (v >= 1 && r.duration_filter >= 0).then(|| crate::now_ms().saturating_sub(r.duration_filter));
    // A cluster answers from every coordinator: the Admin client asks each broker.
    if states.is_empty() && !unknown.is_empty() {
        let unknown = unknown.into_iter().cloned().collect();
        return now(resp.with_unknown_state_filters(unknown));
    }
    let listed = b
        .txn_coordinator
        .list(&states, &pids)
        .into_iter()
        .filter(|t| ctx.access.transactional_id(Operation::Describe, &t.transactional_id))
        .filter(|t| pattern.as_ref().is_none_or(|re| re.is_match(&t.transactional_id)))
        .filter(|t| since.is_none_or(|since| t.start_ms >= 0 && t.start_ms <= since))
        .map(|t| {
            Listed::default()
                .with_transactional_id(TransactionalId(str_bytes(&t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(str_bytes(t.state.kafka_name()))
        })
        .collect();
    now(resp.with_transaction_states(listed).with_unknown_state_filters(unknown.into_iter().cloned().collect()))
}

pub fn describe_producers(b: &Arc<Broker>, r: DescribeProducersRequest, _v: i16, ctx: &Ctx) -> Reply {
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let allowed = ctx.access.topic(Operation::Read, &t.name.0);
            let topic = b.catalog.topic(&t.name.0);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let out = PartitionResponse::default().with_partition_index(index);
                    if !allowed {
                        return out.with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let Some(part) = topic.as_ref().and_then(|t| t.partitions.get(index as usize)) else {
                        return out.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    if let Some(e) = part.leader_error() {
                        return out.with_error_code(errors::partition(&e).code());
                    }
                    let producers = part.with_log(|log| log.producers()).unwrap_or_default();
                    out.with_active_producers(
                        producers
                            .into_iter()
                            .map(|p| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(p.producer_id))
                                    .with_producer_epoch(p.epoch as i32)
                                    .with_last_sequence(p.last_sequence)
                                    .with_last_timestamp(p.last_timestamp)
                                    .with_coordinator_epoch(p.coordinator_epoch)
                                    .with_current_txn_start_offset(p.current_txn_start_offset)
                            })
                            .collect(),
                    )
                })
                .collect();
            TopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    now(DescribeProducersResponse::default().with_topics(topics))
}
