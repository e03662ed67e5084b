//! IncrementalAlterConfigs (key 44: SET, DELETE, APPEND, SUBTRACT per config) and the
//! older AlterConfigs (key 33: replace every override of a resource), for topics and for
//! the broker's dynamic settings.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use super::str_bytes;
use crate::broker::Broker;
use crate::config::{check_value, setting, Kind, DYNAMIC_SETTINGS};
use crate::dispatch::Reply;
use crate::errors;
use crate::handlers::describe_configs::{is_this_broker, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::topic_config;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

type Outcome = Result<(), (ResponseError, String)>;

fn invalid(msg: String) -> (ResponseError, String) {
    (ResponseError::InvalidConfig, msg)
}

fn kind_of(resource_type: i8, name: &str) -> Option<Kind> {
    match resource_type {
        RESOURCE_TOPIC => topic_config::lookup(name).map(|(_, k)| k),
        _ => setting(name).map(|(k, _)| k),
    }
}

/// Applies one incremental operation to a map of overrides.
fn apply(map: &mut BTreeMap<String, String>, resource_type: i8, name: &str, op: i8, value: Option<&str>) -> Outcome {
    if op == OP_DELETE && !map.contains_key(name) {
        // Nothing to delete, whatever the name (tools clear settings they may have set, such
        // as kafka-reassign-partitions' replication throttles, which Runnel does not have).
        return Ok(());
    }
    let kind = kind_of(resource_type, name).ok_or_else(|| invalid(format!("Unknown config name: {name}")))?;
    match op {
        OP_SET => {
            let v = value.ok_or_else(|| invalid(format!("Null value for {name}")))?;
            map.insert(name.to_string(), v.to_string());
        }
        OP_DELETE => {
            map.remove(name);
        }
        OP_APPEND | OP_SUBTRACT => {
            if kind != Kind::List {
                return Err(invalid(format!("Config {name} is not a list; APPEND and SUBTRACT need a list")));
            }
            let v = value.ok_or_else(|| invalid(format!("Null value for {name}")))?;
            let mut items: Vec<String> = map
                .get(name)
                .map(|s| s.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
                .unwrap_or_default();
            for item in v.split(',').filter(|s| !s.is_empty()) {
                if op == OP_APPEND && !items.iter().any(|i| i == item) {
                    items.push(item.to_string());
                }
                if op == OP_SUBTRACT {
                    items.retain(|i| i != item);
                }
            }
            map.insert(name.to_string(), items.join(","));
        }
        other => return Err((ResponseError::InvalidRequest, format!("Unknown config operation {other}"))),
    }
    Ok(())
}

fn validate(resource_type: i8, map: &BTreeMap<String, String>) -> Outcome {
    for (k, v) in map {
        match resource_type {
            RESOURCE_TOPIC => topic_config::validate(k, v).map_err(invalid)?,
            _ => {
                if !DYNAMIC_SETTINGS.contains(&k.as_str()) {
                    return Err(invalid(format!("Cannot update {k} while the broker runs; set it in the config file")));
                }
                let (kind, _) = setting(k).ok_or_else(|| invalid(format!("Unknown config name: {k}")))?;
                check_value(kind, v).map_err(|e| invalid(format!("Invalid value {v} for {k}: {e}")))?;
            }
        }
    }
    Ok(())
}

type Decided = Result<Altered, (ResponseError, String)>;

/// What became of a resource's change.
enum Altered {
    Done,
    /// A topic's change, for the controller to apply to its copy and commit.
    Topic(String, TopicChange),
    /// This broker's new dynamic settings, to persist and apply.
    Broker(BTreeMap<String, String>),
}

/// A topic config change as the request states it, so that the controller applies it to
/// the current overrides (two incremental changes sent to different brokers both count).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub(crate) struct TopicChange {
    /// AlterConfigs: the operations replace every override.
    replace: bool,
    /// (name, operation, value).
    ops: Vec<(String, i8, Option<String>)>,
}

impl TopicChange {
    /// The overrides after this change, validated.
    pub(crate) fn applied_to(
        &self,
        current: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
        let mut map = if self.replace { BTreeMap::new() } else { current.clone() };
        for (name, op, value) in &self.ops {
            apply(&mut map, RESOURCE_TOPIC, name, *op, value.as_deref())?;
        }
        validate(RESOURCE_TOPIC, &map)?;
        Ok(map)
    }
}

/// Computes the new override map for a resource with `change`, validates it and, unless
/// `validate_only`, returns it to apply (a topic's through the controller).
fn alter(
    b: &Broker,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    stated: TopicChange,
    change: impl FnOnce(&mut BTreeMap<String, String>) -> Outcome,
) -> Decided {
    match resource_type {
        RESOURCE_TOPIC => {
            let topic = b
                .catalog
                .topic(name)
                .ok_or_else(|| (ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist.")))?;
            let mut map = topic.configs.clone();
            change(&mut map)?;
            validate(resource_type, &map)?;
            if validate_only {
                return Ok(Altered::Done);
            }
            // Checked here against this broker's copy; applied by the controller to its own.
            Ok(Altered::Topic(name.to_string(), stated))
        }
        RESOURCE_BROKER if is_this_broker(b, name) => {
            let mut map = b.catalog.settings().dynamic().clone();
            change(&mut map)?;
            validate(resource_type, &map)?;
            Ok(if validate_only { Altered::Done } else { Altered::Broker(map) })
        }
        RESOURCE_BROKER => Err((ResponseError::InvalidRequest, format!("Unexpected broker id {name}"))),
        other => Err((ResponseError::InvalidRequest, format!("Unsupported resource type {other}"))),
    }
}

pub fn incremental(b: &Arc<Broker>, r: IncrementalAlterConfigsRequest, _v: i16) -> Reply {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as Res;
    let items = r
        .resources
        .into_iter()
        .map(|res| {
            let stated = TopicChange {
                replace: false,
                ops: res
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), c.config_operation, c.value.as_ref().map(|v| v.to_string())))
                    .collect(),
            };
            let outcome = alter(b, res.resource_type, res.resource_name.as_str(), r.validate_only, stated, |map| {
                for c in &res.configs {
                    apply(
                        map,
                        res.resource_type,
                        c.name.as_str(),
                        c.config_operation,
                        c.value.as_ref().map(|v| v.as_str()),
                    )?;
                }
                Ok(())
            });
            (Res::default().with_resource_type(res.resource_type).with_resource_name(res.resource_name), outcome)
        })
        .collect();
    finish(
        b,
        items,
        |out: Res, code, msg| out.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
        |all| IncrementalAlterConfigsResponse::default().with_responses(all).into(),
    )
}

pub fn legacy(b: &Arc<Broker>, r: AlterConfigsRequest, _v: i16) -> Reply {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as Res;
    let items = r
        .resources
        .into_iter()
        .map(|res| {
            let stated = TopicChange {
                replace: true,
                ops: res
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), OP_SET, c.value.as_ref().map(|v| v.to_string())))
                    .collect(),
            };
            let outcome = alter(b, res.resource_type, res.resource_name.as_str(), r.validate_only, stated, |map| {
                map.clear();
                for c in &res.configs {
                    apply(map, res.resource_type, c.name.as_str(), OP_SET, c.value.as_ref().map(|v| v.as_str()))?;
                }
                Ok(())
            });
            (Res::default().with_resource_type(res.resource_type).with_resource_name(res.resource_name), outcome)
        })
        .collect();
    finish(
        b,
        items,
        |out: Res, code, msg| out.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg))),
        |all| AlterConfigsResponse::default().with_responses(all).into(),
    )
}

/// Answers once every topic change that the controller must commit is applied here, and
/// every broker change is persisted; everything else was decided already.
fn finish<R: Send + 'static>(
    b: &Arc<Broker>,
    items: Vec<(R, Decided)>,
    fail: fn(R, ResponseError, String) -> R,
    build: fn(Vec<R>) -> kafka_protocol::messages::ResponseKind,
) -> Reply {
    let b = b.clone();
    Box::pin(async move {
        let mut out = Vec::with_capacity(items.len());
        for (res, outcome) in items {
            let outcome = match outcome {
                Ok(Altered::Topic(name, change)) => b.cluster().alter_topic_configs(&name, change).await,
                Ok(Altered::Broker(map)) => {
                    b.catalog.set_broker_configs(map).await.map_err(|e| (errors::catalog(&e), e.to_string()))
                }
                Ok(Altered::Done) => Ok(()),
                Err(e) => Err(e),
            };
            out.push(match outcome {
                Ok(()) => res,
                Err((code, msg)) => fail(res, code, msg),
            });
        }
        Some(build(out))
    })
}
