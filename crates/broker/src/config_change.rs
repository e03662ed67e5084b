//! Changes to config overrides as IncrementalAlterConfigs and AlterConfigs state them
//! (SET, DELETE, APPEND, SUBTRACT), validated: used by the handlers on this broker's copy
//! and by the controller on its own (through the broker's `Host`).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use runnel_controller::TopicConfigChange;

use crate::config::{check_value, setting, Kind, DYNAMIC_SETTINGS};
use crate::topic_config;

/// ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_GROUP: i8 = 32;

pub const OP_SET: i8 = 0;
pub const OP_DELETE: i8 = 1;
pub const OP_APPEND: i8 = 2;
pub const OP_SUBTRACT: i8 = 3;

pub(crate) type Outcome = Result<(), (ResponseError, String)>;

fn invalid(msg: String) -> (ResponseError, String) {
    (ResponseError::InvalidConfig, msg)
}

fn kind_of(resource_type: i8, name: &str) -> Option<Kind> {
    match resource_type {
        RESOURCE_TOPIC => topic_config::lookup(name),
        RESOURCE_GROUP => crate::group_configs::lookup(name).map(|c| c.kind),
        _ => setting(name).map(|(k, _)| k).or_else(|| {
            crate::config::dynamic_listener_ssl(name).map(|(_, key)| setting(key).map_or(Kind::Str, |(k, _)| k))
        }),
    }
}

/// Applies one incremental operation to a map of overrides.
pub(crate) fn apply(
    map: &mut BTreeMap<String, String>,
    resource_type: i8,
    name: &str,
    op: i8,
    value: Option<&str>,
) -> Outcome {
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

pub(crate) fn validate(resource_type: i8, map: &BTreeMap<String, String>) -> Outcome {
    if resource_type == RESOURCE_TOPIC {
        return topic_config::validate_all(map).map_err(invalid);
    }
    for (k, v) in map {
        if crate::config::dynamic_listener_ssl(k).is_some() {
            continue; // checked by loading the stores (see alter_configs)
        }
        if !DYNAMIC_SETTINGS.contains(&k.as_str()) {
            return Err(invalid(format!("Cannot update {k} while the broker runs; set it in the config file")));
        }
        let (kind, _) = setting(k).ok_or_else(|| invalid(format!("Unknown config name: {k}")))?;
        check_value(kind, v).map_err(|e| invalid(format!("Invalid value {v} for {k}: {e}")))?;
        topic_config::check_broker_setting(k, v).map_err(invalid)?;
    }
    Ok(())
}

/// A topic's overrides after `change`, validated.
pub fn topic_configs_after(
    current: &BTreeMap<String, String>,
    change: &TopicConfigChange,
) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
    let mut map = if change.replace { BTreeMap::new() } else { current.clone() };
    for (name, op, value) in &change.ops {
        apply(&mut map, RESOURCE_TOPIC, name, *op, value.as_deref())?;
    }
    validate(RESOURCE_TOPIC, &map)?;
    Ok(map)
}
