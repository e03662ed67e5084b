//! Client quotas as Kafka keeps and applies them: values such as `producer_byte_rate` set
//! on an entity (a user, a client id, or both, each named or `<default>`); a client's
//! quota is the value of the most specific entity that matches it, in Kafka's order of
//! precedence; its rate is measured over `quota.window.num` samples of
//! `quota.window.size.seconds`, and a client over its quota is throttled for
//! (rate - quota) / quota of the measured window.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// One component of an entity: a name, or `<default>` (every name without its own entry).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    Default,
    Named(String),
}

impl Name {
    fn matches(&self, actual: &str) -> bool {
        match self {
            Name::Default => true,
            Name::Named(n) => n == actual,
        }
    }

    /// The name as the protocol carries it: None for `<default>`.
    pub fn wire(&self) -> Option<&str> {
        match self {
            Name::Default => None,
            Name::Named(n) => Some(n),
        }
    }
}

/// An entity quotas are set on: a user, a client id, or a user and a client id; or an IP
/// address (connection_creation_rate only).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Entity {
    pub user: Option<Name>,
    pub client_id: Option<Name>,
    pub ip: Option<Name>,
}

/// The keys Kafka's quotas take, by what they apply to.
pub const CLIENT_KEYS: &[&str] =
    &["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"];
pub const IP_KEYS: &[&str] = &["connection_creation_rate"];

impl Entity {
    /// Builds an entity from AlterClientQuotas' components (type, name or None for the
    /// default), or says why Kafka would refuse it.
    pub fn from_components<'a>(parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Result<Entity, String> {
        let mut e = Entity::default();
        for (kind, name) in parts {
            let name = match name {
                None => Name::Default,
                Some(n) => Name::Named(n.to_string()),
            };
            let slot = match kind {
                "user" => &mut e.user,
                "client-id" => &mut e.client_id,
                "ip" => &mut e.ip,
                other => return Err(format!("Unhandled client quota entity type: {other}")),
            };
            if slot.replace(name).is_some() {
                return Err(format!("Duplicate {kind} entity type"));
            }
        }
        if e.ip.is_some() && (e.user.is_some() || e.client_id.is_some()) {
            return Err(
                "Invalid quota entity combination, IP entity should not be used with user/client ID entity.".into()
            );
        }
        if e == Entity::default() {
            return Err("Invalid empty client quota entity".into());
        }
        Ok(e)
    }

    /// (type, name or None for the default), as the protocol lists them.
    pub fn components(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut out = Vec::new();
        for (kind, slot) in [("user", &self.user), ("client-id", &self.client_id), ("ip", &self.ip)] {
            if let Some(n) = slot {
                out.push((kind, n.wire()));
            }
        }
        out
    }

    /// Whether `key` may be set on this entity, and its value is acceptable.
    pub fn check(&self, key: &str, value: f64) -> Result<(), String> {
        let keys = if self.ip.is_some() { IP_KEYS } else { CLIENT_KEYS };
        if !keys.contains(&key) {
            return Err(format!("Invalid configuration key {key}"));
        }
        if !(value.is_finite() && value > 0.0) {
            return Err(format!("Invalid value {value} for configuration {key}: must be positive"));
        }
        let whole = matches!(key, "producer_byte_rate" | "consumer_byte_rate" | "connection_creation_rate");
        if whole && value.fract() != 0.0 {
            return Err(format!("Invalid value {value} for configuration {key}: must be a whole number"));
        }
        Ok(())
    }
}

/// Every quota set: the values of each entity.
pub type Table = BTreeMap<Entity, BTreeMap<String, f64>>;

/// Who a client is, for quotas: its user (the principal's name) and its client id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    pub user: String,
    pub client_id: String,
}

/// The quota of `client` for `key` and the key of the sensor that measures it (the names
/// the matching entity fixes; a component the entity lacks is empty, so that, as in Kafka,
/// a user quota is shared by all the user's client ids). None when no entity sets it.
pub fn resolve(table: &Table, client: &Client, key: &str) -> Option<(f64, Client)> {
    use Name::Default as D;
    let (u, c) = (&client.user, &client.client_id);
    let named = |s: &str| Name::Named(s.to_string());
    // Kafka's order of precedence, most specific first.
    let order: [(Option<Name>, Option<Name>); 8] = [
        (Some(named(u)), Some(named(c))),
        (Some(named(u)), Some(D)),
        (Some(named(u)), None),
        (Some(D), Some(named(c))),
        (Some(D), Some(D)),
        (Some(D), None),
        (None, Some(named(c))),
        (None, Some(D)),
    ];
    order.into_iter().find_map(|(user, client_id)| {
        let matched = user.as_ref().is_none_or(|n| n.matches(u)) && client_id.as_ref().is_none_or(|n| n.matches(c));
        let entity = Entity { user, client_id, ip: None };
        let value = *table.get(&entity)?.get(key)?;
        matched.then(|| {
            let sensor = Client {
                user: if entity.user.is_some() { u.clone() } else { String::new() },
                client_id: if entity.client_id.is_some() { c.clone() } else { String::new() },
            };
            (value, sensor)
        })
    })
}

/// `quota.window.num` samples of `quota.window.size.seconds`.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub samples: usize,
    pub sample_ms: i64,
}

/// A rate measured as Kafka's `Rate` measures it: a sum over the samples of the last
/// window, divided by the time they cover (at least all but one full sample).
#[derive(Debug, Default)]
pub struct Rate {
    /// (start of the sample, sum recorded in it), oldest first.
    samples: VecDeque<(i64, f64)>,
}

impl Rate {
    pub fn record(&mut self, w: Window, now_ms: i64, value: f64) {
        self.purge(w, now_ms);
        match self.samples.back_mut() {
            Some((start, sum)) if now_ms < *start + w.sample_ms => *sum += value,
            _ => {
                self.samples.push_back((now_ms, value));
                while self.samples.len() > w.samples.max(1) {
                    self.samples.pop_front();
                }
            }
        }
    }

    fn purge(&mut self, w: Window, now_ms: i64) {
        let horizon = now_ms - w.samples as i64 * w.sample_ms;
        while self.samples.front().is_some_and(|(start, _)| *start + w.sample_ms <= horizon) {
            self.samples.pop_front();
        }
    }

    /// The time the rate is measured over, in ms.
    fn window_ms(&self, w: Window, now_ms: i64) -> i64 {
        let oldest = self.samples.front().map_or(now_ms, |(start, _)| *start);
        let elapsed = (now_ms - oldest).max(0);
        let full = elapsed / w.sample_ms.max(1);
        let min_full = w.samples.saturating_sub(1) as i64;
        elapsed + (min_full - full).max(0) * w.sample_ms
    }

    /// Per second.
    pub fn rate(&mut self, w: Window, now_ms: i64) -> f64 {
        self.purge(w, now_ms);
        let total: f64 = self.samples.iter().map(|(_, v)| v).sum();
        total * 1000.0 / self.window_ms(w, now_ms).max(1) as f64
    }

    /// How long a client measured by this rate waits to come back under `quota` (0 when
    /// it is under).
    pub fn throttle_ms(&mut self, w: Window, now_ms: i64, quota: f64) -> i64 {
        let rate = self.rate(w, now_ms);
        if rate <= quota || quota <= 0.0 {
            return 0;
        }
        ((rate - quota) / quota * self.window_ms(w, now_ms) as f64).round() as i64
    }

    /// When it was last recorded into (for dropping idle sensors).
    pub fn last_ms(&self) -> Option<i64> {
        self.samples.back().map(|(start, _)| *start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> Entity {
        Entity::from_components(parts.iter().copied()).expect("entity")
    }

    #[test]
    fn the_most_specific_entity_decides() {
        let mut t = Table::new();
        let mut set = |e: Entity, v: f64| {
            t.entry(e).or_default().insert("producer_byte_rate".to_string(), v);
        };
        set(entity(&[("client-id", None)]), 8.0);
        set(entity(&[("client-id", Some("app"))]), 7.0);
        set(entity(&[("user", None)]), 6.0);
        set(entity(&[("user", Some("alice"))]), 3.0);
        set(entity(&[("user", Some("alice")), ("client-id", Some("app"))]), 1.0);
        let who = |u: &str, c: &str| Client { user: u.into(), client_id: c.into() };
        let q = |u, c| resolve(&t, &who(u, c), "producer_byte_rate");
        assert_eq!(q("alice", "app"), Some((1.0, who("alice", "app"))));
        assert_eq!(q("alice", "other"), Some((3.0, who("alice", ""))), "a user quota is shared by its clients");
        assert_eq!(q("bob", "app"), Some((6.0, who("bob", ""))), "<default> user: each user on its own");
        assert_eq!(resolve(&t, &who("bob", "app"), "consumer_byte_rate"), None);
        let mut clients_only = Table::new();
        clients_only.insert(entity(&[("client-id", Some("app"))]), [("consumer_byte_rate".to_string(), 5.0)].into());
        assert_eq!(resolve(&clients_only, &who("bob", "app"), "consumer_byte_rate"), Some((5.0, who("", "app"))));
        assert_eq!(resolve(&clients_only, &who("bob", "x"), "consumer_byte_rate"), None);
    }

    #[test]
    fn entities_and_values_are_checked() {
        assert!(Entity::from_components([("user", Some("a")), ("user", Some("b"))]).is_err());
        assert!(Entity::from_components([("ip", Some("1.2.3.4")), ("user", Some("b"))]).is_err());
        assert!(Entity::from_components([("group", Some("g"))]).is_err());
        assert!(Entity::from_components([]).is_err());
        let e = entity(&[("user", Some("a")), ("client-id", None)]);
        assert_eq!(e.components(), vec![("user", Some("a")), ("client-id", None)]);
        assert!(e.check("producer_byte_rate", 1024.0).is_ok());
        assert!(e.check("producer_byte_rate", 0.0).is_err());
        assert!(e.check("producer_byte_rate", 1.5).is_err());
        assert!(e.check("request_percentage", 12.5).is_ok());
        assert!(e.check("connection_creation_rate", 5.0).is_err());
        assert!(e.check("nonsense", 1.0).is_err());
    }

    #[test]
    fn rates_and_throttle_times_follow_kafka() {
        let w = Window { samples: 11, sample_ms: 1000 };
        let mut r = Rate::default();
        // 10 KB in the first second: measured over (11 - 1) s at least, 1 KB/s.
        r.record(w, 0, 10_000.0);
        assert!((r.rate(w, 500) - 10_000.0 / 10.5).abs() < 1e-6);
        assert_eq!(r.throttle_ms(w, 500, 2_000.0), 0);
        r.record(w, 600, 40_000.0);
        // 50 KB over 10.6 s: about 4717 B/s against 1000: (4.717 - 1) * 10.6 s.
        let t = r.throttle_ms(w, 600, 1_000.0);
        assert!((39_000..=39_500).contains(&t), "{t}");
        // Samples older than the window are dropped.
        assert_eq!(r.rate(w, 13_000), 0.0);
        assert_eq!(r.throttle_ms(w, 13_000, 1.0), 0);
    }
}
