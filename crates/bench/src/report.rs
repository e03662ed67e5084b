//! A run's results: totals, latency percentiles, errors by type and a per-second
//! timeline, as text for a person, JSON for machines and an SVG chart (throughput and
//! latency over time) to look at.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

use crate::stats::{Percentiles, Recorder};
use crate::Workload;

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub records: u64,
    pub bytes: u64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    pub latency_ms: Percentiles,
    pub errors: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    pub second: usize,
    pub produced: u64,
    pub produced_mb: f64,
    pub produce_p50_ms: f64,
    pub produce_p99_ms: f64,
    pub consumed: u64,
    pub e2e_p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub bootstrap: String,
    pub workload: Workload,
    /// Wall clock (ms since the epoch) at the start.
    pub started_at_ms: i64,
    /// How long producing took.
    pub elapsed_s: f64,
    pub produce: Side,
    pub end_to_end: Option<Side>,
    /// Records the cluster stored during the run (sum of log-end offset movements).
    pub stored_records: u64,
    pub timeline: Vec<Tick>,
}

fn side(r: &Recorder, elapsed: Duration) -> Side {
    let secs = elapsed.as_secs_f64().max(1e-9);
    Side {
        records: r.records,
        bytes: r.bytes,
        records_per_s: r.records as f64 / secs,
        mb_per_s: r.bytes as f64 / secs / 1e6,
        latency_ms: Percentiles::of(&r.latency),
        errors: r.errors.clone(),
    }
}

impl Report {
    pub fn build(
        bootstrap: &str,
        w: &Workload,
        started_at_ms: i64,
        elapsed: Duration,
        produce: Recorder,
        e2e: Option<Recorder>,
        stored_records: u64,
    ) -> Report {
        let n = produce.seconds.len().max(e2e.as_ref().map_or(0, |e| e.seconds.len()));
        let timeline = (0..n)
            .map(|i| {
                let p = produce.seconds.get(i);
                let c = e2e.as_ref().and_then(|e| e.seconds.get(i));
                let pct = |h: Option<&hdrhistogram::Histogram<u64>>| h.map(Percentiles::of).unwrap_or_default();
                Tick {
                    second: i,
                    produced: p.map_or(0, |s| s.records),
                    produced_mb: p.map_or(0.0, |s| s.bytes as f64 / 1e6),
                    produce_p50_ms: pct(p.map(|s| &s.latency)).p50,
                    produce_p99_ms: pct(p.map(|s| &s.latency)).p99,
                    consumed: c.map_or(0, |s| s.records),
                    e2e_p99_ms: pct(c.map(|s| &s.latency)).p99,
                }
            })
            .collect();
        Report {
            bootstrap: bootstrap.to_string(),
            workload: w.clone(),
            started_at_ms,
            elapsed_s: elapsed.as_secs_f64(),
            produce: side(&produce, elapsed),
            end_to_end: e2e.as_ref().map(|e| side(e, elapsed)),
            stored_records,
            timeline,
        }
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        let w = &self.workload;
        let _ = writeln!(
            s,
            "{} on {}: {} partitions, rf {}, {} producer(s), {} consumer(s), {}-{} B records, acks={}, {}, batch {} B, linger {} ms{}",
            w.topic,
            self.bootstrap,
            w.partitions,
            w.replication_factor,
            w.producers,
            w.consumers,
            w.record_bytes.0,
            w.record_bytes.1,
            w.acks,
            w.compression,
            w.batch_bytes,
            w.linger_ms,
            w.rate.map(|r| format!(", target {r} rec/s")).unwrap_or_default()
        );
        let line = |s: &mut String, name: &str, x: &Side| {
            let l = &x.latency_ms;
            let _ = writeln!(
                s,
                "{name:<8} {:>12} records  {:>12.0} rec/s  {:>8.2} MB/s  latency ms p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2} p99.99 {:.2} max {:.2}",
                x.records, x.records_per_s, x.mb_per_s, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max
            );
            for (k, n) in &x.errors {
                let _ = writeln!(s, "         error {k}: {n}");
            }
        };
        line(&mut s, "produce", &self.produce);
        if let Some(e) = &self.end_to_end {
            line(&mut s, "e2e", e);
        }
        let _ = writeln!(s, "stored   {:>12} records (log-end offsets moved by this much)", self.stored_records);
        s
    }

    /// Two panels over time: throughput (records/s produced and consumed) and produce
    /// latency (p50, p99) with end-to-end p99.
    pub fn svg(&self) -> String {
        let (w, h, left, right, top, gap) = (900.0, 560.0, 70.0, 20.0, 40.0, 60.0);
        let panel_h = (h - top - gap - 40.0) / 2.0;
        let n = self.timeline.len().max(2) as f64;
        let x = |i: f64| left + (w - left - right) * i / (n - 1.0);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{left}" y="20" font-size="14">runnel bench: {} on {} ({} s)</text>"#,
            xml(&self.workload.topic),
            xml(&self.bootstrap),
            self.timeline.len()
        );
        // Later series are dashed so that one drawn over another stays visible.
        let series = |s: &mut String, y0: f64, values: &[f64], max: f64, color: &str, dash: &str| {
            let pts: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{:.1},{:.1}", x(i as f64), y0 + panel_h - panel_h * v / max.max(1e-9)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" stroke-dasharray="{dash}" points="{}"/>"#,
                pts.join(" ")
            );
        };
        let panel = |s: &mut String, y0: f64, title: &str, unit: &str, lines: &[(&str, &str, Vec<f64>)]| {
            let max = lines.iter().flat_map(|(_, _, v)| v.iter().copied()).fold(0.0, f64::max) * 1.1;
            let _ = writeln!(
                s,
                r##"<rect x="{left}" y="{y0}" width="{}" height="{panel_h}" fill="none" stroke="#999"/>"##,
                w - left - right
            );
            let _ = writeln!(s, r#"<text x="{left}" y="{}">{title}</text>"#, y0 - 6.0);
            for k in 0..=4 {
                let v = max * k as f64 / 4.0;
                let y = y0 + panel_h - panel_h * k as f64 / 4.0;
                let _ =
                    writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, left - 4.0, y + 4.0, short(v));
                let _ =
                    writeln!(s, r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/>"##, w - right);
            }
            let _ = writeln!(
                s,
                r#"<text x="10" y="{:.1}" transform="rotate(-90 10 {:.1})">{unit}</text>"#,
                y0 + panel_h / 2.0,
                y0 + panel_h / 2.0
            );
            let mut lx = left + 10.0;
            for (i, (name, color, values)) in lines.iter().enumerate() {
                series(s, y0, values, max, color, ["none", "6 3", "2 3"][i % 3]);
                let _ = writeln!(s, r#"<text x="{lx}" y="{}" fill="{color}">{name}</text>"#, y0 + 14.0);
                lx += 110.0;
            }
        };
        let t = &self.timeline;
        panel(
            &mut s,
            top,
            "throughput",
            "records/s",
            &[
                ("produced", "#1f77b4", t.iter().map(|k| k.produced as f64).collect()),
                ("consumed", "#2ca02c", t.iter().map(|k| k.consumed as f64).collect()),
            ],
        );
        panel(
            &mut s,
            top + panel_h + gap,
            "latency",
            "ms",
            &[
                ("produce p50", "#1f77b4", t.iter().map(|k| k.produce_p50_ms).collect()),
                ("produce p99", "#d62728", t.iter().map(|k| k.produce_p99_ms).collect()),
                ("e2e p99", "#9467bd", t.iter().map(|k| k.e2e_p99_ms).collect()),
            ],
        );
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">seconds</text>"#, (w + left) / 2.0, h - 8.0);
        for i in (0..t.len()).step_by((t.len() / 10).max(1)) {
            let _ = writeln!(s, r#"<text x="{:.1}" y="{}" text-anchor="middle">{i}</text>"#, x(i as f64), h - 24.0);
        }
        s.push_str("</svg>\n");
        s
    }
}

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
