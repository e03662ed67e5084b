//! Client quotas on this broker (Kafka's quotas are per broker): the rates of the clients
//! that have a quota, measured per sensor, and the throttle a client over its quota gets:
//! `throttle_time_ms` in the response and its connection muted for that long (KIP-219).
//! The quota values are in the metadata log (`runnel_security::quota`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use runnel_security::quota::{self, Client, Rate, Table, Window};
use runnel_sync::LockExt;

use crate::config::Settings;

/// The most sensors kept; past it, those idle for a whole window are dropped first.
const SENSORS_MAX: usize = 100_000;

pub struct Quotas {
    window: Window,
    /// (quota key, the sensor's client) to its rate.
    sensors: Mutex<HashMap<(&'static str, Client), Rate>>,
}

pub const PRODUCE: &str = "producer_byte_rate";
pub const FETCH: &str = "consumer_byte_rate";
/// Percent of one thread's time: measured in ms of request handling per second.
pub const REQUEST: &str = "request_percentage";

/// As Kafka: a request_percentage throttle lasts at most one sample of the window; a byte
/// rate's is what brings the client back under its rate.
fn cap(key: &str, w: Window, throttle_ms: i64) -> i64 {
    match key {
        REQUEST => throttle_ms.min(w.sample_ms),
        _ => throttle_ms,
    }
}

/// A quota's bound in the unit its rate is measured in.
fn bound_of(key: &str, value: f64) -> f64 {
    match key {
        REQUEST => value * 10.0,
        _ => value,
    }
}

impl Quotas {
    pub fn new(s: &Settings) -> Quotas {
        let window = Window {
            samples: s.i64("quota.window.num").clamp(2, 1000) as usize,
            sample_ms: s.i64("quota.window.size.seconds").clamp(1, 3600) * 1000,
        };
        Quotas { window, sensors: Mutex::new(HashMap::new()) }
    }

    /// Records `value` against `client`'s quota for `key`, if it has one; returns the
    /// throttle time it has earned (0 when under its quota, or without one).
    pub fn record(&self, table: &Table, client: &Client, key: &'static str, value: f64, now_ms: i64) -> i64 {
        let Some((bound, sensor)) = quota::resolve(table, client, key) else {
            return 0;
        };
        let bound = bound_of(key, bound);
        let w = self.window;
        let mut sensors = self.sensors.lock_or_stop();
        if sensors.len() >= SENSORS_MAX && !sensors.contains_key(&(key, sensor.clone())) {
            let idle = now_ms - w.samples as i64 * w.sample_ms;
            sensors.retain(|_, r| r.last_ms().is_some_and(|t| t > idle));
            if sensors.len() >= SENSORS_MAX {
                return 0;
            }
        }
        let rate = sensors.entry((key, sensor)).or_default();
        rate.record(w, now_ms, value);
        let throttle_ms = cap(key, w, rate.throttle_ms(w, now_ms, bound));
        drop(sensors);
        runnel_metrics::get().throttled(key, std::time::Duration::from_millis(throttle_ms.max(0) as u64));
        throttle_ms
    }

    /// The throttle `client` is under for `key` now, without recording anything.
    pub fn throttled(&self, table: &Table, client: &Client, key: &'static str, now_ms: i64) -> i64 {
        let Some((bound, sensor)) = quota::resolve(table, client, key) else {
            return 0;
        };
        let bound = bound_of(key, bound);
        let w = self.window;
        self.sensors.lock_or_stop().get_mut(&(key, sensor)).map_or(0, |r| cap(key, w, r.throttle_ms(w, now_ms, bound)))
    }

    /// The most one response may carry for `client` under its quota for `key`: what the
    /// quota allows over the whole window, as Kafka bounds a fetch.
    pub fn window_bytes(&self, table: &Table, client: &Client, key: &'static str) -> Option<usize> {
        let (bound, _) = quota::resolve(table, client, key)?;
        let seconds = self.window.samples as f64 * self.window.sample_ms as f64 / 1000.0;
        Some((bound * seconds).clamp(1.0, usize::MAX as f64) as usize)
    }
}

/// A connection's mute: while it lasts, the connection serves no new request.
#[derive(Default)]
pub struct Mute(Mutex<Option<tokio::time::Instant>>);

impl Mute {
    /// Mutes for `ms` from now (a longer mute already set stays).
    pub fn set(&self, ms: i64) {
        if ms <= 0 {
            return;
        }
        let until = tokio::time::Instant::now() + Duration::from_millis(ms as u64);
        let mut m = self.0.lock_or_stop();
        if m.is_none_or(|t| t < until) {
            *m = Some(until);
        }
    }

    /// What is left of the mute, in ms, as `throttle_time_ms` reports it.
    pub fn remaining_ms(&self) -> i32 {
        let left = self.until().map_or(Duration::ZERO, |t| t - tokio::time::Instant::now());
        left.as_millis().min(i32::MAX as u128) as i32
    }

    /// When the mute ends, if it has not.
    pub fn until(&self) -> Option<tokio::time::Instant> {
        let m = self.0.lock_or_stop();
        m.filter(|t| *t > tokio::time::Instant::now())
    }
}
