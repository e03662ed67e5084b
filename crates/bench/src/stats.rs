//! Measurements: latency histograms (HdrHistogram, microseconds), per-second timelines and
//! error counts, kept per task and merged at the end; and the live counters that the
//! progress line reads while a run goes on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies above this (in µs) are clamped: one minute.
const LATENCY_US_MAX: u64 = 60_000_000;

fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, sigfig).expect("static histogram bounds are valid")
}

/// One second of a run.
pub struct Second {
    pub records: u64,
    pub bytes: u64,
    pub latency: Histogram<u64>,
}

/// What one side (produce, or end-to-end) measured.
pub struct Recorder {
    t0: Instant,
    pub records: u64,
    pub bytes: u64,
    pub latency: Histogram<u64>,
    pub seconds: Vec<Second>,
    pub errors: BTreeMap<String, u64>,
}

impl Recorder {
    pub fn new(t0: Instant) -> Recorder {
        Recorder { t0, records: 0, bytes: 0, latency: histogram(3), seconds: Vec::new(), errors: BTreeMap::new() }
    }

    fn second(&mut self, at: Instant) -> &mut Second {
        let i = at.saturating_duration_since(self.t0).as_secs() as usize;
        while self.seconds.len() <= i {
            self.seconds.push(Second { records: 0, bytes: 0, latency: histogram(2) });
        }
        &mut self.seconds[i]
    }

    /// One record done at `at` after `latency_us`.
    pub fn record(&mut self, at: Instant, latency_us: u64, bytes: u64) {
        let l = latency_us.clamp(1, LATENCY_US_MAX);
        self.records += 1;
        self.bytes += bytes;
        let _ = self.latency.record(l);
        let s = self.second(at);
        s.records += 1;
        s.bytes += bytes;
        let _ = s.latency.record(l);
    }

    pub fn error(&mut self, kind: &str, records: u64) {
        *self.errors.entry(kind.to_string()).or_default() += records;
    }

    pub fn merge(&mut self, other: Recorder) {
        self.records += other.records;
        self.bytes += other.bytes;
        let _ = self.latency.add(&other.latency);
        for (i, s) in other.seconds.into_iter().enumerate() {
            let at = self.t0 + std::time::Duration::from_secs(i as u64);
            let mine = self.second(at);
            mine.records += s.records;
            mine.bytes += s.bytes;
            let _ = mine.latency.add(&s.latency);
        }
        for (k, n) in other.errors {
            *self.errors.entry(k).or_default() += n;
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            p9999: ms(h.value_at_quantile(0.9999)),
            max: ms(h.max()),
        }
    }
}

/// Counters shared by all tasks, for the progress line.
#[derive(Default)]
pub struct Live {
    pub produced: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub consumed: AtomicU64,
    pub errors: AtomicU64,
}

impl Live {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
