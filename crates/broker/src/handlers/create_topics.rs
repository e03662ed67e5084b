//! CreateTopics (key 19): partitions, replication factor (a single broker can only hold
//! one replica), configs, validate_only; v5+ answers with the resulting configs.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::catalog::CatalogError;
use crate::dispatch::Reply;
use crate::errors;
use crate::handlers::describe_configs::topic_config_entries;

pub fn handle(b: &Arc<Broker>, r: CreateTopicsRequest, v: i16) -> Reply {
    let (default_partitions, default_rf) = {
        let s = b.catalog.settings();
        (s.i64("num.partitions") as i32, s.i64("default.replication.factor") as i16)
    };
    let b = b.clone();
    Box::pin(async move {
        let cluster = b.cluster.get().cloned();
        let brokers = if cluster.is_some() { i16::MAX } else { 1i16 };
        let mut topics = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let res = {
                let name = t.name.0.to_string();
                let mut res = CreatableTopicResult::default().with_name(t.name.clone());
                let partitions = if !t.assignments.is_empty() {
                    t.assignments.len() as i32
                } else if t.num_partitions == -1 {
                    default_partitions
                } else {
                    t.num_partitions
                };
                let rf = if !t.assignments.is_empty() {
                    t.assignments[0].broker_ids.len() as i16
                } else if t.replication_factor == -1 {
                    default_rf
                } else {
                    t.replication_factor
                };
                let mut configs = BTreeMap::new();
                let mut outcome: Result<(), (ResponseError, String)> = Ok(());
                for c in &t.configs {
                    match &c.value {
                        Some(val) => {
                            configs.insert(c.name.to_string(), val.to_string());
                        }
                        None => {
                            outcome = Err((
                                ResponseError::InvalidConfig,
                                format!("Null value for config {}", c.name.as_str()),
                            ))
                        }
                    }
                }
                if rf < 1 || rf > brokers {
                    outcome = Err((
                    ResponseError::InvalidReplicationFactor,
                    format!("Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {brokers} broker(s) are registered."),
                ));
                }
                let me = b.node_id();
                // Manual assignments, by partition index; the controller checks them against
                // the registered brokers.
                let mut assignment: Option<Vec<Vec<i32>>> = None;
                if cluster.is_some() && !t.assignments.is_empty() {
                    let mut by_index = vec![None; t.assignments.len()];
                    for a in &t.assignments {
                        match by_index.get_mut(a.partition_index as usize) {
                            Some(slot @ None) => *slot = Some(a.broker_ids.iter().map(|id| id.0).collect()),
                            _ => {
                                outcome = Err((
                                    ResponseError::InvalidReplicaAssignment,
                                    "Partitions in a replica assignment must be 0..n, each once".into(),
                                ))
                            }
                        }
                    }
                    assignment = by_index.into_iter().collect();
                } else if cluster.is_none() && t.assignments.iter().any(|a| a.broker_ids.iter().any(|id| id.0 != me)) {
                    outcome = Err((
                        ResponseError::InvalidReplicaAssignment,
                        "Assignment names a broker that does not exist".into(),
                    ));
                }
                let outcome = match (outcome, &cluster) {
                    (Err(e), _) => Err(e),
                    (Ok(()), Some(cl)) => match b.catalog.check_create(&name, partitions, &configs) {
                        Err(e) => Err((errors::catalog(&e), e.to_string())),
                        Ok(()) => cl
                            .create_topic(&name, partitions, rf, assignment, configs.clone(), r.validate_only)
                            .await
                            .map(|id| {
                                res.topic_id = id;
                            }),
                    },
                    (Ok(()), None) => {
                        let done = if r.validate_only {
                            b.catalog.check_create(&name, partitions, &configs)
                        } else {
                            b.catalog.create_topic(&name, partitions, configs.clone()).map(|topic| {
                                res.topic_id = topic.id;
                            })
                        };
                        done.map_err(|e: CatalogError| (errors::catalog(&e), e.to_string()))
                    }
                };
                match outcome {
                    Ok(()) => {
                        if v >= 5 {
                            res.num_partitions = partitions;
                            res.replication_factor = rf;
                            let settings = b.catalog.settings();
                            let entries = topic_config_entries(&configs, &settings, None, false, v)
                                .into_iter()
                                .map(|e| {
                                    CreatableTopicConfigs::default()
                                        .with_name(e.name)
                                        .with_value(e.value)
                                        .with_read_only(e.read_only)
                                        .with_config_source(e.config_source)
                                        .with_is_sensitive(false)
                                })
                                .collect();
                            res.configs = Some(entries);
                        }
                        if v < 7 {
                            res.topic_id = uuid::Uuid::nil();
                        }
                    }
                    Err((code, msg)) => {
                        res.error_code = code.code();
                        res.error_message = Some(str_bytes(&msg));
                        res.topic_id = uuid::Uuid::nil();
                    }
                }
                res
            };
            topics.push(res);
        }
        Some(CreateTopicsResponse::default().with_topics(topics).into())
    })
}
