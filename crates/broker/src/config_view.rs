//! Configs as DescribeConfigs and CreateTopics show them: each with its effective value,
//! where that came from (topic override, dynamic or static broker setting, default) and,
//! when asked, its synonyms.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsSynonym};

use crate::config::{Kind, Settings, DYNAMIC_SETTINGS, SETTINGS};
use crate::kafka_settings::KAFKA_SETTINGS;
use crate::topic_config::TOPIC_CONFIGS;

fn str_bytes(s: &str) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.to_string())
}

/// Config sources, as DescribeConfigs v1+ reports them.
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;
pub const SOURCE_DYNAMIC_GROUP: i8 = 8;

fn broker_source(settings: &Settings, name: &str) -> i8 {
    if settings.is_dynamic(name) {
        SOURCE_DYNAMIC_BROKER
    } else if settings.is_cluster_default(name) {
        SOURCE_DYNAMIC_DEFAULT_BROKER
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
        .filter(|c| keys.is_none_or(|k| k.iter().any(|k| k == c.name)))
        .filter(|c| !c.internal || overrides.contains_key(c.name))
        .map(|c| {
            let name = c.name;
            let (broker_value, broker_src) = match c.synonym {
                Some(syn) => (settings.get(syn), broker_source(settings, syn)),
                None => (c.default, SOURCE_DEFAULT),
            };
            let (value, source) = match overrides.get(name) {
                Some(v) => (v.as_str(), SOURCE_DYNAMIC_TOPIC),
                None => (broker_value, broker_src),
            };
            let mut e = entry(name, value, source, false, c.kind.code(), v);
            if synonyms {
                if let Some(o) = overrides.get(name) {
                    e.synonyms.push(synonym(name, o, SOURCE_DYNAMIC_TOPIC));
                }
                if let Some(syn) = c.synonym {
                    if broker_src != SOURCE_DEFAULT {
                        e.synonyms.push(synonym(syn, broker_value, broker_src));
                    }
                    let default = crate::config::setting(syn).map(|(_, d)| d).unwrap_or("");
                    e.synonyms.push(synonym(syn, default, SOURCE_DEFAULT));
                }
            }
            e
        })
        .collect()
}

/// A group's configs: its override, else the broker setting that defaults it (KIP-848).
pub fn group_entries(
    overrides: &BTreeMap<String, String>,
    settings: &Settings,
    keys: Option<&[String]>,
    synonyms: bool,
    v: i16,
) -> Vec<DescribeConfigsResourceResult> {
    crate::group_configs::GROUP_CONFIGS
        .iter()
        .filter(|c| keys.is_none_or(|k| k.iter().any(|k| k == c.name)))
        .map(|c| {
            let (default, default_src) = match c.synonym {
                Some(syn) => (settings.get(syn), broker_source(settings, syn)),
                None => (c.default_value(settings), SOURCE_DEFAULT),
            };
            let (value, source) = match overrides.get(c.name) {
                Some(o) => (o.as_str(), SOURCE_DYNAMIC_GROUP),
                None => (default, default_src),
            };
            let mut e = entry(c.name, value, source, false, c.kind.code(), v);
            if synonyms {
                if let Some(o) = overrides.get(c.name) {
                    e.synonyms.push(synonym(c.name, o, SOURCE_DYNAMIC_GROUP));
                }
                e.synonyms.push(synonym(c.synonym.unwrap_or(c.name), default, default_src));
            }
            e
        })
        .collect()
}

/// The cluster-wide dynamic broker configs (DescribeConfigs of the broker resource "",
/// `--entity-default`): only those set, as Kafka lists them.
pub fn cluster_default_entries(
    defaults: &BTreeMap<String, String>,
    keys: Option<&[String]>,
    synonyms: bool,
    v: i16,
) -> Vec<DescribeConfigsResourceResult> {
    defaults
        .iter()
        .filter(|(name, _)| keys.is_none_or(|k| k.iter().any(|k| k == *name)))
        .map(|(name, value)| {
            let kind = crate::config::setting(name).map_or(crate::config::Kind::Str, |(k, _)| k);
            let mut e = entry(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER, false, kind.code(), v);
            if synonyms {
                e.synonyms.push(synonym(name, value, SOURCE_DYNAMIC_DEFAULT_BROKER));
            }
            e
        })
        .collect()
}

/// This broker's settings: Runnel's own, then Kafka's that Runnel takes with no effect. A
/// password is reported as sensitive, without its value, as Kafka does.
pub fn broker_entries(settings: &Settings, keys: Option<&[String]>, v: i16) -> Vec<DescribeConfigsResourceResult> {
    let own = |name: &str| SETTINGS.iter().any(|(n, _, _)| *n == name);
    SETTINGS
        .iter()
        .chain(KAFKA_SETTINGS.iter().filter(|(name, _, _)| !own(name)))
        .filter(|(name, _, _)| keys.is_none_or(|k| k.iter().any(|k| k == name)))
        .map(|(name, kind, _)| {
            let read_only = !DYNAMIC_SETTINGS.contains(name);
            let mut e = entry(name, settings.get(name), broker_source(settings, name), read_only, kind.code(), v);
            if *kind == Kind::Password {
                e.value = None;
                e.is_sensitive = true;
            }
            e
        })
        .collect()
}
