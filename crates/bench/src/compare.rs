//! `runnel bench compare`: the same workload against two clusters, alternating which goes
//! first each round (so drift on the machine hits both alike), every figure reported as
//! the ratio B/A per round: its median and its spread (min–max).

use std::fmt::Write;

use anyhow::Result;
use serde::Serialize;

use crate::report::Report;
use crate::Workload;

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: &'static str,
    /// Whether a bigger value is better (throughput) or worse (latency).
    pub higher_is_better: bool,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub rounds: usize,
    pub figures: Vec<Figure>,
    pub reports_a: Vec<Report>,
    pub reports_b: Vec<Report>,
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|x, y| x.total_cmp(y));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

impl Figure {
    /// B/A for each round.
    pub fn ratios(&self) -> Vec<f64> {
        self.a.iter().zip(&self.b).map(|(a, b)| if *a > 0.0 { b / a } else { f64::NAN }).collect()
    }
}

fn figures(a: &[Report], b: &[Report]) -> Vec<Figure> {
    type Pick = fn(&Report) -> f64;
    let picks: [(&'static str, bool, Pick); 8] = [
        ("produce records/s", true, |r| r.produce.records_per_s),
        ("produce MB/s", true, |r| r.produce.mb_per_s),
        ("produce p50 ms", false, |r| r.produce.latency_ms.p50),
        ("produce p99 ms", false, |r| r.produce.latency_ms.p99),
        ("produce p99.9 ms", false, |r| r.produce.latency_ms.p999),
        ("produce max ms", false, |r| r.produce.latency_ms.max),
        ("e2e p50 ms", false, |r| r.end_to_end.as_ref().map_or(f64::NAN, |e| e.latency_ms.p50)),
        ("e2e p99 ms", false, |r| r.end_to_end.as_ref().map_or(f64::NAN, |e| e.latency_ms.p99)),
    ];
    picks
        .iter()
        .map(|(name, up, f)| Figure {
            name,
            higher_is_better: *up,
            a: a.iter().map(f).collect(),
            b: b.iter().map(f).collect(),
        })
        .collect()
}

pub async fn compare(a: &str, b: &str, w: Workload, rounds: usize, progress: bool) -> Result<Comparison> {
    let mut reports_a = Vec::new();
    let mut reports_b = Vec::new();
    let base = w.topic.clone();
    for round in 0..rounds.max(1) {
        let order = if round % 2 == 0 { [("a", a), ("b", b)] } else { [("b", b), ("a", a)] };
        for (label, addr) in order {
            // A fresh topic per run, unless the caller prepared one (same name on both).
            let topic = if w.existing_topic { base.clone() } else { format!("{base}-{label}{round}") };
            let wl = Workload { topic, ..w.clone() };
            eprintln!("round {}/{}: {label} = {addr}", round + 1, rounds.max(1));
            let r = crate::run(addr, wl, progress).await?;
            eprint!("{}", r.text());
            if label == "a" {
                reports_a.push(r);
            } else {
                reports_b.push(r);
            }
        }
    }
    Ok(Comparison {
        a: a.to_string(),
        b: b.to_string(),
        rounds: rounds.max(1),
        figures: figures(&reports_a, &reports_b),
        reports_a,
        reports_b,
    })
}

impl Comparison {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "A = {}   B = {}   {} round(s), alternating", self.a, self.b, self.rounds);
        let _ = writeln!(
            s,
            "{:<18} {:>12} {:>12} {:>10}  {:<17} better",
            "figure", "A median", "B median", "B/A", "B/A spread"
        );
        for f in &self.figures {
            let r = f.ratios();
            let lo = r.iter().copied().filter(|x| x.is_finite()).fold(f64::INFINITY, f64::min);
            let hi = r.iter().copied().filter(|x| x.is_finite()).fold(f64::NEG_INFINITY, f64::max);
            let m = median(&r);
            let better = if !m.is_finite() || (m - 1.0).abs() < 1e-9 {
                "="
            } else if (m > 1.0) == f.higher_is_better {
                "B"
            } else {
                "A"
            };
            let _ = writeln!(
                s,
                "{:<18} {:>12.2} {:>12.2} {:>9.2}x  {:<17} {better}",
                f.name,
                median(&f.a),
                median(&f.b),
                m,
                format!("{lo:.2}-{hi:.2}")
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let f = Figure { name: "x", higher_is_better: true, a: vec![2.0, 4.0], b: vec![3.0, 2.0] };
        assert_eq!(f.ratios(), vec![1.5, 0.5]);
    }
}
