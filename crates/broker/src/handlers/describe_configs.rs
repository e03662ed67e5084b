//! DescribeConfigs (key 32): topic configs (override, else the broker's value, with where
//! it came from) and broker settings.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::config::{Settings, DYNAMIC_SETTINGS, SETTINGS};
use crate::dispatch::{now, Reply};
use crate::topic_config::TOPIC_CONFIGS;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// Config sources, as DescribeConfigs v1+ reports them.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

fn broker_source(settings: &Settings, name: &str) -> i8 {
    if settings.is_dynamic(name) {
        SOURCE_DYNAMIC_BROKER
    } else if settings.is_explicit(name) {
        SOURCE_STATIC_BROKER
    } else {
        SOURCE_DEFAULT
    }
}

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default().with_name(str_bytes(name)).with_value(Some(str_bytes(value))).with_source(source)
}

fn entry(name: &str, value: &str, source: i8, read_only: bool, kind_code: i8, v: i16) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_read_only(read_only)
        .with_config_source(source)
        .with_is_sensitive(false);
    if v >= 3 {
        e.config_type = kind_code;
    }
    e
}

/// The effective topic configs, optionally only `keys`, with synonyms when asked.
pub fn topic_config_entries(
    overrides: &BTreeMap<String, String>,
    settings: &Settings,
    keys: Option<&[String]>,
    synonyms: bool,
    v: i16,
) -> Vec<DescribeConfigsResourceResult> {
    TOPIC_CONFIGS
        .iter()
        .filter(|(name, _, _)| keys.is_none_or(|k| k.iter().any(|k| k == name)))
        .map(|(name, broker_name, kind)| {
            let broker_value = settings.get(broker_name);
            let (value, source) = match overrides.get(*name) {
                Some(v) => (v.as_str(), SOURCE_DYNAMIC_TOPIC),
                None => (broker_value, broker_source(settings, broker_name)),
            };
            let mut e = entry(name, value, source, false, kind.code(), v);
            if synonyms {
                if let Some(o) = overrides.get(*name) {
                    e.synonyms.push(synonym(name, o, SOURCE_DYNAMIC_TOPIC));
                }
                let bs = broker_source(settings, broker_name);
                if bs != SOURCE_DEFAULT {
                    e.synonyms.push(synonym(broker_name, broker_value, bs));
                }
                let default = crate::config::setting(broker_name).map(|(_, d)| d).unwrap_or("");
                e.synonyms.push(synonym(broker_name, default, SOURCE_DEFAULT));
            }
            e
        })
        .collect()
}

fn broker_entries(settings: &Settings, keys: Option<&[String]>, v: i16) -> Vec<DescribeConfigsResourceResult> {
    SETTINGS
        .iter()
        .filter(|(name, _, _)| keys.is_none_or(|k| k.iter().any(|k| k == name)))
        .map(|(name, kind, _)| {
            let read_only = !DYNAMIC_SETTINGS.contains(name);
            entry(name, settings.get(name), broker_source(settings, name), read_only, kind.code(), v)
        })
        .collect()
}

/// Whether `name` names this broker ("" is the cluster-wide default entity).
pub fn is_this_broker(b: &Broker, name: &str) -> bool {
    name.is_empty() || name.parse::<i32>().ok() == Some(b.node_id())
}

pub fn handle(b: &Arc<Broker>, r: DescribeConfigsRequest, v: i16) -> Reply {
    let settings = b.catalog.settings().clone();
    let results = r
        .resources
        .into_iter()
        .map(|res| {
            let keys: Option<Vec<String>> = res.configuration_keys.map(|k| k.iter().map(|s| s.to_string()).collect());
            let out = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            let fail = |out: DescribeConfigsResult, code: ResponseError, msg: String| {
                out.with_error_code(code.code()).with_error_message(Some(str_bytes(&msg)))
            };
            let name = res.resource_name.as_str();
            match res.resource_type {
                RESOURCE_TOPIC => match b.catalog.topic(name) {
                    Some(t) => out.with_configs(topic_config_entries(
                        &t.configs,
                        &settings,
                        keys.as_deref(),
                        r.include_synonyms,
                        v,
                    )),
                    None => {
                        fail(out, ResponseError::UnknownTopicOrPartition, format!("Topic '{name}' does not exist."))
                    }
                },
                RESOURCE_BROKER if is_this_broker(b, name) => {
                    out.with_configs(broker_entries(&settings, keys.as_deref(), v))
                }
                RESOURCE_BROKER => fail(out, ResponseError::InvalidRequest, format!("Unexpected broker id {name}")),
                other => fail(out, ResponseError::InvalidRequest, format!("Unsupported resource type {other}")),
            }
        })
        .collect();
    now(DescribeConfigsResponse::default().with_results(results))
}
