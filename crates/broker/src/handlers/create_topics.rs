//! CreateTopics (key 19): partitions, replication factor or a manual assignment, configs,
//! validate_only, decided by the controller; v5+ answers with the resulting configs.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::config_view::topic_config_entries;
use crate::ctx::{Ctx, Reply};
use crate::errors;

pub fn handle(b: &Arc<Broker>, r: CreateTopicsRequest, v: i16, ctx: &Ctx) -> Reply {
    let access = ctx.access.clone();
    let (default_partitions, default_rf) = {
        let s = b.catalog.settings();
        (s.i64("num.partitions") as i32, s.i64("default.replication.factor") as i16)
    };
    let b = b.clone();
    Box::pin(async move {
        let controller = b.controller().clone();
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
                // Manual assignments, by partition index; the controller checks them (and the
                // replication factor) against the registered brokers.
                let mut assignment: Option<Vec<Vec<i32>>> = None;
                if !t.assignments.is_empty() {
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
                }
                if !access.create_topic(&name) {
                    outcome = Err((ResponseError::TopicAuthorizationFailed, "Authorization failed.".into()));
                }
                let outcome = match outcome {
                    Err(e) => Err(e),
                    Ok(()) => match b.catalog.check_create(&name, partitions, &configs) {
                        Err(e) => Err((errors::catalog(&e), e.to_string())),
                        Ok(()) => controller
                            .create_topic(&name, partitions, rf, assignment, configs.clone(), r.validate_only)
                            .await
                            .map(|id| {
                                res.topic_id = id;
                            }),
                    },
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
