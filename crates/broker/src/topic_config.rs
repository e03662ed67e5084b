//! Topic-level configs: which ones exist, their broker-level defaults (synonyms), how they
//! are validated, and how they turn into a storage `LogConfig`.

use std::collections::BTreeMap;

use runnel_storage::LogConfig;

use crate::config::{check_value, Kind, Settings};

/// (topic config, broker synonym, kind). The broker synonym supplies the default.
pub const TOPIC_CONFIGS: &[(&str, &str, Kind)] = &[
    ("cleanup.policy", "log.cleanup.policy", Kind::List),
    ("compression.type", "compression.type", Kind::Str),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms", Kind::Long),
    ("index.interval.bytes", "log.index.interval.bytes", Kind::Int),
    ("max.message.bytes", "message.max.bytes", Kind::Int),
    ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", Kind::Long),
    ("message.timestamp.type", "log.message.timestamp.type", Kind::Str),
    ("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", Kind::Double),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", Kind::Long),
    ("min.insync.replicas", "min.insync.replicas", Kind::Int),
    ("retention.bytes", "log.retention.bytes", Kind::Long),
    ("retention.ms", "log.retention.ms", Kind::Long),
    ("segment.bytes", "log.segment.bytes", Kind::Int),
    ("segment.ms", "log.roll.ms", Kind::Long),
    ("unclean.leader.election.enable", "unclean.leader.election.enable", Kind::Bool),
    // Cluster mode: create the topic even when one failure domain would hold a majority
    // of a partition's replicas.
    ("placement.unsafe.allow", "placement.unsafe.allow", Kind::Bool),
    // Where the topic's leaders should be: failure domains in order (region:us-east1,...),
    // or none (runnel_controller::leader_preference).
    ("leader.preference", "leader.preference", Kind::List),
];

pub fn lookup(name: &str) -> Option<(&'static str, Kind)> {
    TOPIC_CONFIGS.iter().find(|(n, _, _)| *n == name).map(|(_, syn, k)| (*syn, *k))
}

/// Validates one topic config value; the error text goes back to the client.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let (_, kind) = lookup(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    check_value(kind, value).map_err(|e| format!("Invalid value {value} for configuration {name}: {e}"))?;
    let int = || value.parse::<i64>().unwrap_or(0);
    let ok = match name {
        "cleanup.policy" => cleanup_policy(value).is_some(),
        "min.cleanable.dirty.ratio" => value.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)),
        "delete.retention.ms" | "min.compaction.lag.ms" => int() >= 0,
        "max.compaction.lag.ms" => int() >= 1,
        "compression.type" => value == "producer",
        "message.timestamp.type" => matches!(value, "CreateTime" | "LogAppendTime"),
        "segment.bytes" => (1024..=runnel_storage::SEGMENT_BYTES_MAX as i64).contains(&int()),
        "segment.ms" | "index.interval.bytes" => int() >= 1,
        "max.message.bytes" => int() >= 0,
        "min.insync.replicas" => int() >= 1,
        "retention.ms" | "retention.bytes" => int() >= -1,
        "leader.preference" => runnel_controller::leader_preference::parse(value).is_ok(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        let why = match name {
            "cleanup.policy" => " (expected delete, compact or both)",
            "compression.type" => " (the broker stores batches as the producer compressed them; use producer)",
            "leader.preference" => " (expected none, or failure domains in order: region:us-east1,region:us-west1)",
            _ => "",
        };
        Err(format!("Invalid value {value} for configuration {name}{why}"))
    }
}

/// The effective value of a topic config: the topic's override, else the broker's.
pub fn effective<'a>(name: &str, overrides: &'a BTreeMap<String, String>, broker: &'a Settings) -> &'a str {
    match overrides.get(name) {
        Some(v) => v,
        None => broker.get(lookup(name).map(|(syn, _)| syn).unwrap_or(name)),
    }
}

/// (delete, compact) from a `cleanup.policy` list; None if it names anything else or
/// nothing at all.
pub fn cleanup_policy(value: &str) -> Option<(bool, bool)> {
    let (mut delete, mut compact) = (false, false);
    for p in value.split(',').map(str::trim) {
        match p {
            "delete" => delete = true,
            "compact" => compact = true,
            _ => return None,
        }
    }
    (delete || compact).then_some((delete, compact))
}

pub fn log_config(overrides: &BTreeMap<String, String>, broker: &Settings) -> LogConfig {
    let num = |name: &str| effective(name, overrides, broker).parse::<i64>().unwrap_or(-1);
    let (delete, compact) = cleanup_policy(effective("cleanup.policy", overrides, broker)).unwrap_or((true, false));
    LogConfig {
        delete,
        compact,
        min_cleanable_dirty_ratio: effective("min.cleanable.dirty.ratio", overrides, broker).parse().unwrap_or(0.5),
        delete_retention_ms: num("delete.retention.ms").max(0),
        min_compaction_lag_ms: num("min.compaction.lag.ms").max(0),
        max_compaction_lag_ms: num("max.compaction.lag.ms").max(1),
        segment_bytes: num("segment.bytes").max(1024) as u64,
        segment_ms: num("segment.ms").max(1),
        retention_ms: num("retention.ms"),
        retention_bytes: num("retention.bytes"),
        index_interval_bytes: num("index.interval.bytes").max(1) as u64,
    }
}
