//! Group configs (KIP-848, KIP-932: `kafka-configs --entity-type groups`), as Kafka 4.3's
//! `GroupConfig` defines them: a group may override the broker's `group.consumer.*`,
//! `group.share.*` and `group.streams.*` settings within the bounds those set, and choose
//! where its share-partitions start (`share.auto.offset.reset`) and what they read
//! (`share.isolation.level`). They are committed to the metadata log, so every broker
//! sees them; DescribeConfigs lists them with their source.

use std::collections::BTreeMap;

use crate::config::{Kind, Settings};

pub struct GroupConfig {
    pub name: &'static str,
    pub kind: Kind,
    /// The broker setting that gives its default, and the settings bounding it (min, max).
    pub synonym: Option<&'static str>,
    bounds: Option<(&'static str, &'static str)>,
    /// The default without a broker synonym.
    default: &'static str,
}

const fn int(name: &'static str, synonym: &'static str, min: &'static str, max: &'static str) -> GroupConfig {
    GroupConfig { name, kind: Kind::Int, synonym: Some(synonym), bounds: Some((min, max)), default: "" }
}

/// A boolean with no broker setting behind it (an empty default: not set).
const fn boolean(name: &'static str, default: &'static str) -> GroupConfig {
    GroupConfig { name, kind: Kind::Bool, synonym: None, bounds: None, default }
}

pub const GROUP_CONFIGS: &[GroupConfig] = &[
    int(
        "consumer.assignment.interval.ms",
        "group.consumer.assignment.interval.ms",
        "group.consumer.min.assignment.interval.ms",
        "group.consumer.max.assignment.interval.ms",
    ),
    boolean("consumer.assignor.offload.enable", ""),
    int(
        "consumer.heartbeat.interval.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    int(
        "consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    int(
        "share.assignment.interval.ms",
        "group.share.assignment.interval.ms",
        "group.share.min.assignment.interval.ms",
        "group.share.max.assignment.interval.ms",
    ),
    boolean("share.assignor.offload.enable", ""),
    GroupConfig { name: "share.auto.offset.reset", kind: Kind::Str, synonym: None, bounds: None, default: "latest" },
    int(
        "share.delivery.count.limit",
        "group.share.delivery.count.limit",
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
    ),
    int(
        "share.heartbeat.interval.ms",
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    ),
    GroupConfig {
        name: "share.isolation.level",
        kind: Kind::Str,
        synonym: None,
        bounds: None,
        default: "read_uncommitted",
    },
    int(
        "share.partition.max.record.locks",
        "group.share.partition.max.record.locks",
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
    ),
    int(
        "share.record.lock.duration.ms",
        "group.share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
    boolean("share.renew.acknowledge.enable", "true"),
    int(
        "share.session.timeout.ms",
        "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
    ),
    int(
        "streams.assignment.interval.ms",
        "group.streams.assignment.interval.ms",
        "group.streams.min.assignment.interval.ms",
        "group.streams.max.assignment.interval.ms",
    ),
    boolean("streams.assignor.offload.enable", ""),
    int(
        "streams.heartbeat.interval.ms",
        "group.streams.heartbeat.interval.ms",
        "group.streams.min.heartbeat.interval.ms",
        "group.streams.max.heartbeat.interval.ms",
    ),
    GroupConfig {
        name: "streams.initial.rebalance.delay.ms",
        kind: Kind::Int,
        synonym: Some("group.streams.initial.rebalance.delay.ms"),
        bounds: None,
        default: "",
    },
    GroupConfig {
        name: "streams.num.standby.replicas",
        kind: Kind::Int,
        synonym: Some("group.streams.num.standby.replicas"),
        bounds: None,
        default: "",
    },
    int(
        "streams.session.timeout.ms",
        "group.streams.session.timeout.ms",
        "group.streams.min.session.timeout.ms",
        "group.streams.max.session.timeout.ms",
    ),
];

pub fn lookup(name: &str) -> Option<&'static GroupConfig> {
    GROUP_CONFIGS.iter().find(|c| c.name == name)
}

impl GroupConfig {
    /// Its value for a group without an override.
    pub fn default_value<'a>(&self, settings: &'a Settings) -> &'a str {
        match self.synonym {
            Some(s) => settings.get(s),
            None => self.default,
        }
    }
}

/// A group's config: its override (in `overrides`, the group's configs), else the
/// broker's default.
pub fn get(overrides: &BTreeMap<String, String>, settings: &Settings, name: &str) -> String {
    if let Some(v) = overrides.get(name) {
        return v.clone();
    }
    lookup(name).map(|c| c.default_value(settings).to_string()).unwrap_or_default()
}

/// A numeric group config (0 if it does not parse, which validation prevents).
pub fn value(overrides: &BTreeMap<String, String>, settings: &Settings, name: &str) -> i64 {
    get(overrides, settings, name).trim().parse().unwrap_or(0)
}

/// An ISO-8601 duration as Java's `Duration.parse` takes it (`PnDTnHnMn.nS`, each part
/// optional but one, signs allowed), in milliseconds.
pub fn duration_ms(s: &str) -> Option<i64> {
    let (sign, s) = match s.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    let rest = s.strip_prefix(['P', 'p'])?;
    let (days, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let number = |n: &str, frac: bool| -> Option<f64> {
        let digits = n.strip_prefix(['-', '+']).unwrap_or(n);
        let (whole, fraction) = if frac { digits.split_once('.').unwrap_or((digits, "")) } else { (digits, "") };
        let ok = !whole.is_empty()
            && whole.bytes().all(|c| c.is_ascii_digit())
            && fraction.bytes().all(|c| c.is_ascii_digit());
        ok.then(|| n.parse::<f64>().ok()).flatten()
    };
    let (mut ms, mut any) = (0.0f64, false);
    if !days.is_empty() {
        ms += number(days.strip_suffix(['D', 'd'])?, false)? * 86_400_000.0;
        any = true;
    }
    if let Some(mut t) = time {
        if t.is_empty() {
            return None;
        }
        for (unit, frac, scale) in [('H', false, 3_600_000.0), ('M', false, 60_000.0), ('S', true, 1000.0)] {
            if let Some(i) = t.find([unit, unit.to_ascii_lowercase()]) {
                ms += number(&t[..i], frac)? * scale;
                t = &t[i + 1..];
                any = true;
            }
        }
        if !t.is_empty() {
            return None;
        }
    }
    let ms = sign * ms;
    (any && ms.abs() < i64::MAX as f64).then_some(ms as i64)
}

/// Checks a group's whole override map, as Kafka's `GroupConfig.validate` does.
pub fn validate(map: &BTreeMap<String, String>, settings: &Settings) -> Result<(), String> {
    for (name, v) in map {
        let c = lookup(name).ok_or_else(|| format!("Unknown group config name: {name}"))?;
        match c.name {
            "share.auto.offset.reset" => {
                let ok = v == "latest"
                    || v == "earliest"
                    || v.strip_prefix("by_duration:").and_then(duration_ms).is_some_and(|ms| ms >= 0);
                if !ok {
                    return Err(format!(
                        "Invalid value {v} for configuration share.auto.offset.reset: \
                         String must be one of (case insensitive): latest, earliest, by_duration:PnDTnHnMn.nS"
                    ));
                }
            }
            "share.isolation.level" if v != "read_committed" && v != "read_uncommitted" => {
                return Err(format!(
                    "Invalid value {v} for configuration share.isolation.level: \
                     String must be one of: read_committed, read_uncommitted"
                ));
            }
            _ => {}
        }
        if c.kind == Kind::Bool && !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") {
            return Err(format!(
                "Invalid value {v} for configuration {name}: Expected value to be either true or false"
            ));
        }
        if c.kind != Kind::Int {
            continue;
        }
        let n: i64 = v
            .trim()
            .parse()
            .ok()
            .filter(|n| (i32::MIN as i64..=i32::MAX as i64).contains(n))
            .ok_or_else(|| format!("Invalid value {v} for configuration {name}: Not a number of type INT"))?;
        if let Some((min_key, max_key)) = c.bounds {
            let (min, max) = (settings.i64(min_key), settings.i64(max_key));
            if n < min {
                return Err(format!("{name} must be greater than or equal to {min_key}"));
            }
            if n > max {
                return Err(format!("{name} must be less than or equal to {max_key}"));
            }
        } else if n < 0 {
            return Err(format!("Invalid value {v} for configuration {name}: Value must be at least 0"));
        }
        if c.name == "streams.num.standby.replicas" && n > settings.i64("group.streams.max.standby.replicas") {
            return Err(format!("{name} must be less than or equal to group.streams.max.standby.replicas"));
        }
    }
    for kind in ["consumer", "share", "streams"] {
        let get = |what: &str| {
            let name = format!("{kind}.{what}");
            map.get(&name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or_else(|| lookup(&name).map_or(0, |c| c.default_value(settings).parse().unwrap_or(0)))
        };
        if get("heartbeat.interval.ms") >= get("session.timeout.ms") {
            return Err(format!("{kind}.heartbeat.interval.ms must be less than {kind}.session.timeout.ms"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_java_parses_them() {
        let cases = [("PT1H", 3_600_000), ("P1D", 86_400_000), ("P2DT3H4M5.5S", 183_845_500), ("PT0.5S", 500)];
        for (text, ms) in cases {
            assert_eq!(duration_ms(text), Some(ms), "{text}");
        }
        assert_eq!(duration_ms("-PT10M"), Some(-600_000));
        assert_eq!(duration_ms("PT-5S"), Some(-5000));
        for bad in ["", "P", "PT", "1H", "PT1X", "P1H", "PTH", "P1DT"] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn values_are_checked_against_the_broker_bounds() {
        let s = Settings::default();
        let one = |k: &str, v: &str| validate(&[(k.to_string(), v.to_string())].into(), &s);
        assert!(one("share.auto.offset.reset", "earliest").is_ok());
        assert!(one("share.auto.offset.reset", "by_duration:PT1H").is_ok());
        assert!(one("share.auto.offset.reset", "newest").is_err());
        assert!(one("share.isolation.level", "read_committed").is_ok());
        assert!(one("share.isolation.level", "dirty").is_err());
        assert!(one("share.record.lock.duration.ms", "15000").is_ok());
        assert!(one("share.record.lock.duration.ms", "14999").is_err());
        assert!(one("share.record.lock.duration.ms", "60001").is_err());
        assert!(one("share.delivery.count.limit", "x").is_err());
        assert!(one("share.heartbeat.interval.ms", "15000").is_ok());
        assert!(one("share.session.timeout.ms", "45000").is_ok());
        assert!(one("no.such.config", "1").is_err());
        assert!(one("share.renew.acknowledge.enable", "false").is_ok());
        assert!(one("consumer.assignor.offload.enable", "yes").is_err());
        assert!(one("share.assignment.interval.ms", "15001").is_err());
        assert_eq!(GROUP_CONFIGS.len(), 20, "Kafka 4.3's GroupConfig defines 20");
        // The heartbeat must stay below the session timeout.
        let both = [("share.heartbeat.interval.ms", "15000"), ("share.session.timeout.ms", "45000")];
        assert!(validate(&both.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), &s).is_ok());
    }
}
