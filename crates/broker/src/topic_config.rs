//! Topic-level configs: every one Apache Kafka 4.3 documents (its `LogConfig`), with
//! Kafka's types, defaults (through the broker synonym where Kafka has one) and validators,
//! plus Runnel's own; how they turn into a storage `LogConfig`. `docs/configs.md` says
//! which behave here and which are accepted with no effect.

use std::collections::BTreeMap;

use runnel_storage::LogConfig;

use crate::config::{check_value, Kind, Settings};

/// How a value is checked beyond its type: Kafka's `ConfigDef` validators.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    Any,
    AtLeast(i64),
    Between(i64, i64),
    /// A double in [0, 1].
    Ratio,
    /// `compression.gzip.level`: 1 to 9, or -1 (zlib's default).
    GzipLevel,
    OneOf(&'static [&'static str]),
    /// A non-empty list of these.
    ListOf(&'static [&'static str]),
    /// `*`, or `partition:broker` pairs (the replication throttle lists).
    Throttled,
    /// Runnel's `leader.preference` (runnel_controller::leader_preference).
    LeaderPreference,
}

pub struct TopicConfig {
    pub name: &'static str,
    /// The broker setting that gives the default (Kafka's server synonym), if any.
    pub synonym: Option<&'static str>,
    pub kind: Kind,
    /// The default when there is no synonym.
    pub default: &'static str,
    pub check: Check,
    /// Kafka's internal configs: accepted, not listed by DescribeConfigs unless set.
    pub internal: bool,
}

const fn c(name: &'static str, synonym: &'static str, kind: Kind, check: Check) -> TopicConfig {
    TopicConfig { name, synonym: Some(synonym), kind, default: "", check, internal: false }
}

const fn fixed(name: &'static str, kind: Kind, default: &'static str, check: Check) -> TopicConfig {
    TopicConfig { name, synonym: None, kind, default, check, internal: false }
}

pub const CODECS: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

/// Every topic config, in Kafka's order of names.
pub const TOPIC_CONFIGS: &[TopicConfig] = &[
    c("cleanup.policy", "log.cleanup.policy", Kind::List, Check::ListOf(&["compact", "delete"])),
    c("compression.gzip.level", "compression.gzip.level", Kind::Int, Check::GzipLevel),
    c("compression.lz4.level", "compression.lz4.level", Kind::Int, Check::Between(1, 17)),
    c("compression.type", "compression.type", Kind::Str, Check::OneOf(CODECS)),
    c("compression.zstd.level", "compression.zstd.level", Kind::Int, Check::Between(-131072, 22)),
    c("delete.retention.ms", "log.cleaner.delete.retention.ms", Kind::Long, Check::AtLeast(0)),
    c("file.delete.delay.ms", "log.segment.delete.delay.ms", Kind::Long, Check::AtLeast(0)),
    c("flush.messages", "log.flush.interval.messages", Kind::Long, Check::AtLeast(1)),
    c("flush.ms", "log.flush.interval.ms", Kind::Long, Check::AtLeast(0)),
    fixed("follower.replication.throttled.replicas", Kind::List, "", Check::Throttled),
    c("index.interval.bytes", "log.index.interval.bytes", Kind::Int, Check::AtLeast(0)),
    fixed("leader.replication.throttled.replicas", Kind::List, "", Check::Throttled),
    c("local.retention.bytes", "log.local.retention.bytes", Kind::Long, Check::AtLeast(-2)),
    c("local.retention.ms", "log.local.retention.ms", Kind::Long, Check::AtLeast(-2)),
    c("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", Kind::Long, Check::AtLeast(1)),
    c("max.message.bytes", "message.max.bytes", Kind::Int, Check::AtLeast(0)),
    c("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", Kind::Long, Check::AtLeast(0)),
    c("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", Kind::Long, Check::AtLeast(0)),
    c(
        "message.timestamp.type",
        "log.message.timestamp.type",
        Kind::Str,
        Check::OneOf(&["CreateTime", "LogAppendTime"]),
    ),
    c("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", Kind::Double, Check::Ratio),
    c("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", Kind::Long, Check::AtLeast(0)),
    c("min.insync.replicas", "min.insync.replicas", Kind::Int, Check::AtLeast(1)),
    c("preallocate", "log.preallocate", Kind::Bool, Check::Any),
    fixed("remote.log.copy.disable", Kind::Bool, "false", Check::Any),
    fixed("remote.log.delete.on.disable", Kind::Bool, "false", Check::Any),
    fixed("remote.storage.enable", Kind::Bool, "false", Check::Any),
    c("retention.bytes", "log.retention.bytes", Kind::Long, Check::Any),
    c("retention.ms", "log.retention.ms", Kind::Long, Check::AtLeast(-1)),
    c(
        "segment.bytes",
        "log.segment.bytes",
        Kind::Int,
        Check::Between(1 << 20, runnel_storage::SEGMENT_BYTES_MAX as i64),
    ),
    c("segment.index.bytes", "log.index.size.max.bytes", Kind::Int, Check::AtLeast(4)),
    c("segment.jitter.ms", "log.roll.jitter.ms", Kind::Long, Check::AtLeast(0)),
    c("segment.ms", "log.roll.ms", Kind::Long, Check::AtLeast(1)),
    c("unclean.leader.election.enable", "unclean.leader.election.enable", Kind::Bool, Check::Any),
    // Kafka's internal override of segment.bytes, below its 1 MiB floor (for tests).
    TopicConfig {
        name: "internal.segment.bytes",
        synonym: None,
        kind: Kind::Int,
        default: "",
        check: Check::Between(1024, runnel_storage::SEGMENT_BYTES_MAX as i64),
        internal: true,
    },
    // Runnel's. Cluster mode: create the topic even when one failure domain would hold a
    // majority of a partition's replicas.
    c("placement.unsafe.allow", "placement.unsafe.allow", Kind::Bool, Check::Any),
    // Where the topic's leaders should be: failure domains in order (region:us-east1,...),
    // or none.
    c("leader.preference", "leader.preference", Kind::List, Check::LeaderPreference),
];

pub fn config(name: &str) -> Option<&'static TopicConfig> {
    TOPIC_CONFIGS.iter().find(|c| c.name == name)
}

pub fn lookup(name: &str) -> Option<Kind> {
    config(name).map(|c| c.kind)
}

/// Validates one topic config value; the error text goes back to the client.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let c = config(name).ok_or_else(|| format!("Unknown topic config name: {name}"))?;
    let value = value.trim();
    // As Kafka's ConfigDef: booleans in any case.
    let lowered = value.to_ascii_lowercase();
    let typed = if c.kind == Kind::Bool { lowered.as_str() } else { value };
    check_value(c.kind, typed).map_err(|e| format!("Invalid value {value} for configuration {name}: {e}"))?;
    let int = || value.parse::<i64>().unwrap_or(0);
    let why: Option<String> = match c.check {
        Check::Any => None,
        Check::AtLeast(min) => (int() < min).then(|| format!("Value must be at least {min}")),
        Check::Between(lo, hi) => {
            (!(lo..=hi).contains(&int())).then(|| format!("Value must be no less than {lo} and no more than {hi}"))
        }
        Check::Ratio => (!value.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)))
            .then(|| "Value must be no less than 0 and no more than 1".to_string()),
        Check::GzipLevel => (!matches!(int(), -1 | 1..=9)).then(|| "Value must be between 1 and 9, or -1".to_string()),
        Check::OneOf(allowed) => {
            (!allowed.contains(&value)).then(|| format!("String must be one of: {}", allowed.join(", ")))
        }
        Check::ListOf(allowed) => list_error(name, value, allowed),
        Check::Throttled => (!throttled_ok(value)).then(|| {
            "must be the literal '*' or a list of replicas in the following format: \
             [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                .to_string()
        }),
        Check::LeaderPreference => runnel_controller::leader_preference::parse(value)
            .err()
            .map(|_| "expected none, or failure domains in order: region:us-east1,region:us-west1".to_string()),
    };
    if name == "remote.storage.enable" && typed == "true" {
        // As a Kafka broker without tiered storage (remote.log.storage.system.enable=false).
        return Err(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
                .into(),
        );
    }
    match why {
        None => Ok(()),
        Some(why) => Err(format!("Invalid value {value} for configuration {name}: {why}")),
    }
}

/// Kafka's ValidList: items from `allowed`, none empty, none twice; the empty list is
/// allowed (`cleanup.policy=` keeps every record: no deletion, no compaction).
fn list_error(name: &str, value: &str, allowed: &[&str]) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        return Some(format!("Configuration '{name}' values must not be empty."));
    }
    if items.iter().enumerate().any(|(i, item)| items[..i].contains(item)) {
        return Some(format!("Configuration '{name}' values must not be duplicated."));
    }
    items.iter().any(|i| !allowed.contains(i)).then(|| format!("String must be one of: {}", allowed.join(", ")))
}

fn throttled_ok(value: &str) -> bool {
    let value = value.trim();
    value == "*"
        || value.is_empty()
        || value.split(',').all(|pair| {
            let Some((p, b)) = pair.trim().split_once(':') else { return false };
            p.parse::<u32>().is_ok() && b.parse::<u32>().is_ok()
        })
}

/// Validates a topic's overrides, each and together (Kafka's cross-config rules).
pub fn validate_all(map: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in map {
        validate(k, v)?;
    }
    let long = |name: &str, default: i64| map.get(name).and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(default);
    let (min_lag, max_lag) = (long("min.compaction.lag.ms", 0), long("max.compaction.lag.ms", i64::MAX));
    if min_lag > max_lag {
        return Err(format!(
            "conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
        ));
    }
    Ok(())
}

/// Broker settings that Kafka's broker definitions leave unchecked, though their topic
/// configs are checked.
const UNCHECKED_AT_BROKER: &[&str] =
    &["log.roll.ms", "log.roll.jitter.ms", "log.retention.ms", "log.flush.interval.ms"];

/// Checks a broker setting that a topic config takes its default from as Kafka's broker
/// checks it: with the topic config's validator (`log.segment.bytes` at least 1 MiB,
/// `compression.type` one of the codecs, ...). Other settings pass.
pub fn check_broker_setting(name: &str, value: &str) -> Result<(), String> {
    if UNCHECKED_AT_BROKER.contains(&name) {
        return Ok(());
    }
    match TOPIC_CONFIGS.iter().find(|c| c.synonym == Some(name)) {
        Some(c) => validate(c.name, value)
            .map_err(|e| e.replace(&format!("configuration {}", c.name), &format!("configuration {name}"))),
        None => Ok(()),
    }
}

/// [`check_broker_setting`] for every broker setting given (file, --set, dynamic).
pub fn check_broker_settings(s: &Settings) -> Result<(), String> {
    s.given().try_for_each(|(name, value)| check_broker_setting(name, value))
}

/// The effective value of a topic config: the topic's override, else the broker's.
pub fn effective<'a>(name: &str, overrides: &'a BTreeMap<String, String>, broker: &'a Settings) -> &'a str {
    if let Some(v) = overrides.get(name) {
        return v;
    }
    match config(name) {
        Some(TopicConfig { synonym: Some(syn), .. }) => broker.get(syn),
        Some(c) => c.default,
        None => broker.get(name),
    }
}

/// (delete, compact) from a `cleanup.policy` list (empty: neither); None if it names
/// anything else.
pub fn cleanup_policy(value: &str) -> Option<(bool, bool)> {
    let (mut delete, mut compact) = (false, false);
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p {
            "delete" => delete = true,
            "compact" => compact = true,
            _ => return None,
        }
    }
    Some((delete, compact))
}

/// What a batch is stored as: Kafka's codec id and level, or None to keep the producer's.
pub fn compression(overrides: &BTreeMap<String, String>, broker: &Settings) -> Option<(i16, Option<i32>)> {
    use runnel_wire::build::{CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};
    let level = |name: &str| effective(name, overrides, broker).trim().parse::<i32>().ok();
    match effective("compression.type", overrides, broker).trim() {
        "uncompressed" => Some((CODEC_NONE, None)),
        "gzip" => Some((CODEC_GZIP, level("compression.gzip.level"))),
        "snappy" => Some((CODEC_SNAPPY, None)),
        "lz4" => Some((CODEC_LZ4, level("compression.lz4.level"))),
        "zstd" => Some((CODEC_ZSTD, level("compression.zstd.level"))),
        _ => None,
    }
}

pub fn log_config(overrides: &BTreeMap<String, String>, broker: &Settings) -> LogConfig {
    let num = |name: &str| effective(name, overrides, broker).trim().parse::<i64>().unwrap_or(-1);
    let (delete, compact) = cleanup_policy(effective("cleanup.policy", overrides, broker)).unwrap_or((true, false));
    let segment_bytes = match overrides.get("internal.segment.bytes").and_then(|v| v.trim().parse::<i64>().ok()) {
        Some(internal) => internal,
        None => num("segment.bytes"),
    };
    LogConfig {
        delete,
        compact,
        min_cleanable_dirty_ratio: effective("min.cleanable.dirty.ratio", overrides, broker)
            .trim()
            .parse()
            .unwrap_or(0.5),
        delete_retention_ms: num("delete.retention.ms").max(0),
        min_compaction_lag_ms: num("min.compaction.lag.ms").max(0),
        max_compaction_lag_ms: num("max.compaction.lag.ms").max(1),
        segment_bytes: segment_bytes.max(1024) as u64,
        segment_ms: num("segment.ms").max(1),
        segment_jitter_ms: num("segment.jitter.ms").max(0),
        retention_ms: num("retention.ms"),
        retention_bytes: num("retention.bytes"),
        index_interval_bytes: num("index.interval.bytes").max(1) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_with_a_synonym_has_a_broker_setting() {
        for c in TOPIC_CONFIGS {
            if let Some(syn) = c.synonym {
                assert!(crate::config::setting(syn).is_some(), "{} needs broker setting {syn}", c.name);
                let default = crate::config::setting(syn).map(|(_, d)| d).unwrap_or_default();
                assert!(validate(c.name, default).is_ok(), "{}: its default {default} must validate", c.name);
            }
        }
    }

    #[test]
    fn kafka_validators() {
        assert!(validate("segment.bytes", "1048575").is_err());
        assert!(validate("segment.bytes", "1048576").is_ok());
        assert!(validate("compression.gzip.level", "-1").is_ok());
        assert!(validate("compression.gzip.level", "0").is_err());
        assert!(validate("compression.type", "lz4").is_ok());
        assert!(validate("compression.type", "brotli").is_err());
        assert!(validate("cleanup.policy", "compact, delete").is_ok());
        assert!(validate("cleanup.policy", "none").is_err());
        assert!(validate("cleanup.policy", "").is_ok());
        assert!(validate("cleanup.policy", "compact,").is_err());
        assert!(validate("cleanup.policy", "compact,compact").is_err());
        assert_eq!(cleanup_policy(""), Some((false, false)));
        assert!(validate("preallocate", "TRUE").is_ok());
        assert!(validate("retention.ms", " 5 ").is_ok());
        assert!(validate("leader.replication.throttled.replicas", "0:1, 1:2").is_ok());
        assert!(validate("leader.replication.throttled.replicas", "*").is_ok());
        assert!(validate("leader.replication.throttled.replicas", "x").is_err());
        assert!(validate("remote.storage.enable", "true").is_err());
        assert!(validate("retention.bytes", "-7").is_ok());
        assert!(validate("no.such.config", "1").is_err());
        let conflict = BTreeMap::from([
            ("min.compaction.lag.ms".to_string(), "10".to_string()),
            ("max.compaction.lag.ms".to_string(), "5".to_string()),
        ]);
        assert!(validate_all(&conflict).is_err());
    }
}
