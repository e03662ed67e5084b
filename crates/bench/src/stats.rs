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

    /// The index of the second `at` falls in, that second kept from now on.
    fn second_index(&mut self, at: Instant) -> usize {
        let i = at.saturating_duration_since(self.t0).as_secs() as usize;
        while self.seconds.len() <= i {
            self.seconds.push(Second { records: 0, bytes: 0, latency: histogram(2) });
        }
        i
    }

    fn second(&mut self, at: Instant) -> &mut Second {
        let i = self.second_index(at);
        &mut self.seconds[i]
    }

    /// One record done at `at` after `latency_us` (the reference `record_all` is checked
    /// against).
    #[cfg(test)]
    pub fn record(&mut self, at: Instant, latency_us: u64, bytes: u64) {
        self.record_all(at, [(latency_us, bytes)]);
    }

    /// Records done together at `at` (the records of one answer), each (latency µs,
    /// bytes). Their second is found once, and a run of equal latencies (records stamped
    /// by the same clock reading) goes into the histograms as one count.
    pub fn record_all(&mut self, at: Instant, records: impl IntoIterator<Item = (u64, u64)>) {
        let i = self.second_index(at);
        let (total, second) = (&mut self.latency, &mut self.seconds[i]);
        let mut flush = |value: u64, n: u64| {
            if n > 0 {
                let _ = total.record_n(value, n);
                let _ = second.latency.record_n(value, n);
            }
        };
        let (mut run_value, mut run_len) = (0u64, 0u64);
        let (mut records_n, mut bytes_n) = (0u64, 0u64);
        for (latency_us, bytes) in records {
            let l = latency_us.clamp(1, LATENCY_US_MAX);
            records_n += 1;
            bytes_n += bytes;
            if l != run_value {
                flush(run_value, run_len);
                (run_value, run_len) = (l, 0);
            }
            run_len += 1;
        }
        flush(run_value, run_len);
        self.records += records_n;
        self.bytes += bytes_n;
        second.records += records_n;
        second.bytes += bytes_n;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Recording an answer's records together counts exactly what recording them one by
    /// one does: totals, per-second figures and every histogram bucket.
    #[test]
    fn records_together_count_as_records_one_by_one() {
        let t0 = Instant::now();
        let at = t0 + std::time::Duration::from_millis(2_500);
        let records: Vec<(u64, u64)> =
            [5u64, 5, 5, 0, 0, 70_000_000, 900, 901, 901, 5].iter().enumerate().map(|(i, l)| (*l, i as u64)).collect();
        let (mut one, mut all) = (Recorder::new(t0), Recorder::new(t0));
        for (l, b) in &records {
            one.record(at, *l, *b);
        }
        all.record_all(at, records.iter().copied());
        assert_eq!((all.records, all.bytes), (one.records, one.bytes));
        assert_eq!(all.latency, one.latency);
        assert_eq!(all.seconds.len(), 3);
        assert_eq!((all.seconds[2].records, all.seconds[2].bytes), (10, 45));
        assert_eq!(all.seconds[2].latency, one.seconds[2].latency);
        assert!(all.latency.equivalent(all.latency.max(), LATENCY_US_MAX), "a latency past the bound is clamped");
    }
}
