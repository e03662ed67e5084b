//! `runnel bench compare`: the same workload against two clusters, alternating which goes
//! first each round (so drift on the machine hits both alike), every figure reported as
//! the ratio B/A per round: its median and its spread (min–max). A warm-up run of each
//! side is discarded first; with the brokers' pids, their CPU per GB produced is a figure
//! too; and the machine's state during every run (load, CPU stolen by the hypervisor) is
//! reported beside the ratios, so a disturbed run shows as one.
//!
//! Before every run the machine settles: the page cache's unwritten data is written out
//! (`sync(2)`), so that a side that leaves its writes to the kernel (Kafka does not fsync)
//! does not hand their write-back to the next run, where it would compete with that side's
//! own disk writes. How much there was and how long it took is reported with the run.
//! Before that, given the brokers' pids, it waits (at most [`QUIET_WAIT_MAX`]) for the other
//! side's brokers to go quiet: a Kafka broker deletes the topic of its last run after the run
//! has ended, and a run that began meanwhile shared the machine with that deletion.
//!
//! With `--park-cpus`, the side that is not measured waits on other CPUs ([`crate::park`]):
//! two systems pinned to one CPU take turns on it, and an idle broker's own work (a JVM's
//! timers, a deleted topic's files) would otherwise come out of the other side's run. What
//! the waiting side used meanwhile is reported with each run.

use std::fmt::Write;

use anyhow::Result;
use serde::Serialize;

use crate::park::{CpuSet, Parking};
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
    pub warmup_s: f64,
    /// Whether each run began after a sync of the page cache ([`Plan::settle`]).
    pub settled: bool,
    /// Where the side not being measured waited ([`Plan::park`]), as a CPU list.
    pub parked_on: Option<String>,
    pub figures: Vec<Figure>,
    pub reports_a: Vec<Report>,
    pub reports_b: Vec<Report>,
    /// The machine during each run, in the order of the reports.
    pub machine_a: Vec<Machine>,
    pub machine_b: Vec<Machine>,
}

/// How a comparison runs, beyond the workload.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub rounds: usize,
    /// Seconds of one discarded run against each side before the first round.
    pub warmup_s: f64,
    /// Broker processes of each side (on this machine), for their CPU per GB produced.
    pub pids_a: Vec<u32>,
    pub pids_b: Vec<u32>,
    /// Write the page cache's dirty data out before every run (see the module's doc).
    pub settle: bool,
    /// Where the side not being measured waits (with the pids of both sides): its brokers'
    /// threads move there before each run of the other side, and back before their own.
    pub park: Option<CpuSet>,
}

/// The machine while one run went on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    /// The 1-minute load average when the run began.
    pub load_1m: f64,
    /// Share of all CPU time the hypervisor gave to others during the run, %.
    pub steal_pct: f64,
    /// CPU seconds the side's brokers used during the run (None without their pids).
    pub broker_cpu_s: Option<f64>,
    /// Dirty and under-write-back page cache when the run was about to begin, MB: with
    /// settling, what the sync before it wrote out.
    pub unwritten_mb: f64,
    /// Seconds the sync before the run took (0 without settling).
    pub settle_s: f64,
    /// Seconds waited before the run for the other side's brokers to go quiet (0 without
    /// settling or without their pids).
    pub quiet_s: f64,
    /// CPU seconds the other side's brokers used during the run, wherever they ran (None
    /// without their pids).
    pub other_cpu_s: Option<f64>,
}

/// Dirty plus write-back page cache, MB, from /proc/meminfo.
fn unwritten_mb() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else { return f64::NAN };
    let kb: u64 = text
        .lines()
        .filter(|l| l.starts_with("Dirty:") || l.starts_with("Writeback:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    kb as f64 / 1024.0
}

/// The longest wait for the other side's brokers to go quiet before a run.
pub const QUIET_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);
/// The window over which the other side counts as quiet, and the CPU it may use in it: a
/// fifth of one CPU (an idle Kafka broker uses 4-9% of a core, its deletion of the last
/// run's topic half a core for a second or more).
const QUIET_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);
const QUIET_CPU_S: f64 = 0.1;

/// Waits until `pids` used less than [`QUIET_CPU_S`] in a [`QUIET_WINDOW`], or
/// [`QUIET_WAIT_MAX`] passed: seconds waited.
async fn quiet(pids: &[u32]) -> f64 {
    let started = std::time::Instant::now();
    let Some(mut before) = brokers_cpu_s(pids) else { return 0.0 };
    while started.elapsed() < QUIET_WAIT_MAX {
        tokio::time::sleep(QUIET_WINDOW).await;
        let Some(now) = brokers_cpu_s(pids) else { break };
        if now - before < QUIET_CPU_S {
            break;
        }
        before = now;
    }
    started.elapsed().as_secs_f64()
}

/// Writes the page cache's dirty data out and waits for it: seconds taken.
async fn settle() -> f64 {
    let started = std::time::Instant::now();
    // SAFETY: sync(2) takes no arguments and cannot fail.
    let _ = tokio::task::spawn_blocking(|| unsafe { libc::sync() }).await;
    started.elapsed().as_secs_f64()
}

/// (all jiffies, steal jiffies) from /proc/stat's first line.
fn cpu_jiffies() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> =
        text.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    (fields.iter().sum(), fields.get(7).copied().unwrap_or(0))
}

/// CPU seconds (user + system) a process has used; None once it is gone.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let jiffies = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(jiffies as f64 / hz)
}

fn brokers_cpu_s(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|p| process_cpu_s(*p)).sum()
}

/// Runs the workload once against `addr`, with what the machine and the brokers did meanwhile
/// (the side's brokers are `pids`, the other side's `others`).
async fn measured(
    addr: &str,
    w: Workload,
    (pids, others): (&[u32], &[u32]),
    settling: bool,
    progress: bool,
) -> Result<(Report, Machine)> {
    let quiet_s = if settling { quiet(others).await } else { 0.0 };
    let unwritten_mb = unwritten_mb();
    let settle_s = if settling { settle().await } else { 0.0 };
    let load_1m = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    let (jiffies, steal) = cpu_jiffies();
    let cpu = brokers_cpu_s(pids);
    let other_cpu = brokers_cpu_s(others);
    let r = crate::run(addr, w, progress).await?;
    let (jiffies_after, steal_after) = cpu_jiffies();
    let steal_pct =
        100.0 * steal_after.saturating_sub(steal) as f64 / jiffies_after.saturating_sub(jiffies).max(1) as f64;
    let broker_cpu_s = cpu.zip(brokers_cpu_s(pids)).map(|(before, after)| after - before);
    let other_cpu_s = other_cpu.zip(brokers_cpu_s(others)).map(|(before, after)| after - before);
    Ok((r, Machine { load_1m, steal_pct, broker_cpu_s, unwritten_mb, settle_s, quiet_s, other_cpu_s }))
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

/// Broker CPU seconds per GB produced, for each run.
fn cpu_per_gb(reports: &[Report], machines: &[Machine]) -> Vec<f64> {
    reports
        .iter()
        .zip(machines)
        .map(|(r, m)| match m.broker_cpu_s {
            Some(cpu) if r.produce.bytes > 0 => cpu / (r.produce.bytes as f64 / 1e9),
            _ => f64::NAN,
        })
        .collect()
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

pub async fn compare(a: &str, b: &str, w: Workload, plan: &Plan, progress: bool) -> Result<Comparison> {
    let parking = match plan.park {
        Some(park) if !plan.pids_a.is_empty() && !plan.pids_b.is_empty() => {
            Some(Parking::new(park, &plan.pids_a, &plan.pids_b)?)
        }
        Some(_) => anyhow::bail!("parking the side not measured needs the brokers of both (--pid-a, --pid-b)"),
        None => None,
    };
    let compared = compare_parked(a, b, w, plan, parking.as_ref(), progress).await;
    if let Some(p) = &parking {
        p.restore();
    }
    compared
}

async fn compare_parked(
    a: &str,
    b: &str,
    w: Workload,
    plan: &Plan,
    parking: Option<&Parking>,
    progress: bool,
) -> Result<Comparison> {
    let rounds = plan.rounds.max(1);
    // The brokers of the side about to run and of the other; the other waits in the park.
    let sides = |label: &str| -> Result<(&[u32], &[u32])> {
        let is_a = label == "a";
        if let Some(p) = parking {
            p.before_run(is_a)?;
        }
        Ok(if is_a { (&plan.pids_a, &plan.pids_b) } else { (&plan.pids_b, &plan.pids_a) })
    };
    let base = w.topic.clone();
    let topic =
        |label: &str, round: &str| if w.existing_topic { base.clone() } else { format!("{base}-{label}{round}") };
    if plan.warmup_s > 0.0 {
        // Connections, caches and a JVM's compiler warm up here, not in round 1.
        for (label, addr) in [("a", a), ("b", b)] {
            eprintln!("warm-up: {label} = {addr}, {} s (discarded)", plan.warmup_s);
            let wl = Workload { topic: topic(label, "w"), duration_s: plan.warmup_s, records: None, ..w.clone() };
            sides(label)?;
            measured(addr, wl, (&[], &[]), plan.settle, progress).await?;
        }
    }
    let (mut reports_a, mut reports_b, mut machine_a, mut machine_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 { [("a", a), ("b", b)] } else { [("b", b), ("a", a)] };
        for (label, addr) in order {
            // A fresh topic per run, unless the caller prepared one (same name on both).
            let wl = Workload { topic: topic(label, &round.to_string()), ..w.clone() };
            eprintln!("round {}/{rounds}: {label} = {addr}", round + 1);
            let (r, m) = measured(addr, wl, sides(label)?, plan.settle, progress).await?;
            eprint!("{}", r.text());
            eprintln!(
                "machine: load {:.2}, steal {:.1}%, {:.0} MB unwritten before the run{}{}",
                m.load_1m,
                m.steal_pct,
                m.unwritten_mb,
                if plan.settle {
                    format!(" (synced in {:.1} s, after {:.1} s for the other side to go quiet)", m.settle_s, m.quiet_s)
                } else {
                    String::new()
                },
                m.other_cpu_s.map_or(String::new(), |s| format!(
                    "; the other side's brokers used {s:.2} CPU s meanwhile{}",
                    if parking.is_some() { " (parked)" } else { "" }
                ))
            );
            if label == "a" {
                reports_a.push(r);
                machine_a.push(m);
            } else {
                reports_b.push(r);
                machine_b.push(m);
            }
        }
    }
    let mut figures = figures(&reports_a, &reports_b);
    if !plan.pids_a.is_empty() && !plan.pids_b.is_empty() {
        figures.push(Figure {
            name: "broker CPU s/GB",
            higher_is_better: false,
            a: cpu_per_gb(&reports_a, &machine_a),
            b: cpu_per_gb(&reports_b, &machine_b),
        });
    }
    Ok(Comparison {
        a: a.to_string(),
        b: b.to_string(),
        rounds,
        warmup_s: plan.warmup_s,
        settled: plan.settle,
        parked_on: parking.and(plan.park).map(|p| p.to_string()),
        figures,
        reports_a,
        reports_b,
        machine_a,
        machine_b,
    })
}

impl Comparison {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "A = {}   B = {}   {} round(s), alternating, after a {} s warm-up of each",
            self.a, self.b, self.rounds, self.warmup_s
        );
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
        let all: Vec<&Machine> = self.machine_a.iter().chain(&self.machine_b).collect();
        let most = |f: fn(&Machine) -> f64| all.iter().map(|m| f(m)).fold(f64::NAN, f64::max);
        let _ = writeln!(
            s,
            "machine during the runs: load (1 min) up to {:.2}, CPU stolen up to {:.1}%, up to {:.0} MB \
             of page cache unwritten before a run{}",
            most(|m| m.load_1m),
            most(|m| m.steal_pct),
            most(|m| m.unwritten_mb),
            if self.settled { " (written out before it began)" } else { " (not written out: --settle false)" }
        );
        let other = most(|m| m.other_cpu_s.unwrap_or(f64::NAN));
        if other.is_finite() {
            let _ = writeln!(
                s,
                "the side not measured used up to {other:.2} CPU s during a run{where_}; a run waited up to \
                 {quiet:.1} s for it to go quiet",
                quiet = most(|m| m.quiet_s),
                where_ = match &self.parked_on {
                    Some(cpus) => format!(", parked on CPUs {cpus}"),
                    None => " (not parked: on the CPUs it shares with the side measured, if pinned there)".to_string(),
                }
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
