//! `runnel chaos --drill region-loss`: the drill a stretched deployment is judged by. One
//! region (its brokers and its clients) is cut off completely for a third of the run while
//! producers and a consumer group in every region keep going, then let back in. Summed up
//! in the figures operators ask for: RPO (acknowledged writes lost), RTO per surviving
//! region (longest stall of acknowledged sends), how soon consumers there read again,
//! bytes read across regions, whether metadata stayed writable (a topic created through
//! the surviving regions during the cut), and after the heal how soon the cut-off replicas
//! caught up and leadership was back on the preferred leaders.

use std::time::Duration;

use clap::ValueEnum;
use runnel_verify::{History, OpKind, Outcome, Report};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Drill {
    /// Cut one region off completely from a third of the run to two thirds.
    RegionLoss,
}

impl Drill {
    /// The schedule when none is given: `START:FAULT:SECONDS`.
    pub fn schedule(self, duration: Duration) -> String {
        let third = (duration.as_secs_f64() / 3.0).max(1.0);
        format!("{third:.1}:isolate-region:{third:.1}")
    }
}

/// The drill's figures (also written into the `--json` report's file as `drill`).
#[derive(Debug, Serialize)]
pub struct Summary {
    pub region_cut: String,
    /// Acknowledged writes lost (the checker's `lost`); must be 0.
    pub rpo_lost_acknowledged: usize,
    pub acknowledged: usize,
    /// Per surviving region: the longest stall of acknowledged sends, ms.
    pub rto_ms: Vec<(String, u64)>,
    /// Per surviving region: the longest time one of its consumers went without a
    /// successful fetch, ms.
    pub consumers_read_again_ms: Vec<(String, u64)>,
    /// Per surviving region: the longest time one of its group members went without
    /// committing offsets (coordinator failover and rebalance), ms.
    pub groups_committed_again_ms: Vec<(String, u64)>,
    pub bytes_read: u64,
    pub bytes_read_across_regions: u64,
    /// How soon after the cut a metadata change (a topic created) committed through the
    /// surviving regions; None: not while the region was cut off.
    pub metadata_written_during_cut_ms: Option<u64>,
    pub caught_up_after_heal_ms: Option<u64>,
    pub leaders_back_after_heal_ms: Option<u64>,
    /// Before the cut: acks=all sends to partitions led in the producer's own region, and
    /// to partitions led elsewhere: (median, 99th percentile) ms.
    pub send_ms_leader_in_region: (u64, u64),
    pub send_ms_leader_elsewhere: (u64, u64),
}

/// (median, 99th percentile) of `v`; (0, 0) when empty.
fn p50_p99(mut v: Vec<u64>) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// The figures of the first isolate-region fault of the run, if there was one.
/// `leader_regions`: each partition's leader's region as the schedule started.
pub fn summarize(history: &History, report: &Report, leader_regions: &[Option<String>]) -> Option<Summary> {
    let f = report.faults.iter().find(|f| f.fault.starts_with("isolate-region"))?;
    // Sends before the cut, by whether the partition's leader was in the producer's region
    // ("producer-I-pP@REGION").
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for o in
        history.ops.iter().filter(|o| o.kind == OpKind::Send && o.outcome == Outcome::Ok && o.start_ms < f.start_ms)
    {
        let Some((name, region)) = o.process.rsplit_once('@') else { continue };
        let partition = name.rsplit_once("-p").and_then(|(_, p)| p.parse::<usize>().ok());
        match partition.and_then(|p| leader_regions.get(p)).and_then(|r| r.as_deref()) {
            Some(r) if r == region => local.push(o.latency_ms),
            Some(_) => remote.push(o.latency_ms),
            None => {}
        }
    }
    // "isolate-region r0 (brokers ...)": the region is the second word.
    let cut = f.fault.split_whitespace().nth(1).unwrap_or_default().to_string();
    let surviving = f.regions.iter().filter(|(r, _)| **r != cut);
    let (cross, all) = history.cross_region_fetched();
    Some(Summary {
        rpo_lost_acknowledged: report.counts.get("lost").copied().unwrap_or(0),
        acknowledged: report.sends_ok,
        rto_ms: surviving.clone().map(|(r, i)| (r.clone(), i.longest_stall_ms)).collect(),
        consumers_read_again_ms: surviving.clone().map(|(r, i)| (r.clone(), i.longest_read_gap_ms)).collect(),
        groups_committed_again_ms: surviving.map(|(r, i)| (r.clone(), i.longest_commit_gap_ms)).collect(),
        bytes_read: all,
        bytes_read_across_regions: cross,
        metadata_written_during_cut_ms: f.metadata_write_ms,
        caught_up_after_heal_ms: f.recovery.and_then(|r| r.caught_up_ms),
        leaders_back_after_heal_ms: f.recovery.and_then(|r| r.leaders_back_ms),
        send_ms_leader_in_region: p50_p99(local),
        send_ms_leader_elsewhere: p50_p99(remote),
        region_cut: cut,
    })
}

pub fn print(s: &Summary) {
    let secs = |ms: u64| format!("{:.2} s", ms as f64 / 1000.0);
    let later = |ms: Option<u64>| ms.map_or("not within the run".to_string(), secs);
    let each =
        |v: &[(String, u64)]| v.iter().map(|(r, ms)| format!("{r} {}", secs(*ms))).collect::<Vec<_>>().join(", ");
    println!("region-loss drill, region {} cut off:", s.region_cut);
    println!("  RPO: {} acknowledged writes lost (of {} acknowledged sends)", s.rpo_lost_acknowledged, s.acknowledged);
    let (l50, l99) = s.send_ms_leader_in_region;
    let (r50, r99) = s.send_ms_leader_elsewhere;
    println!(
        "  acks=all sends before the cut: p50 {l50} ms, p99 {l99} ms to a leader in the producer's region; p50 {r50} ms, p99 {r99} ms to one elsewhere"
    );
    println!("  RTO (longest stall of acknowledged sends) in the surviving regions: {}", each(&s.rto_ms));
    println!("  consumers in the surviving regions read again within: {}", each(&s.consumers_read_again_ms));
    println!(
        "  consumer groups in the surviving regions committed offsets again within (coordinator failover, rebalance): {}",
        each(&s.groups_committed_again_ms)
    );
    match s.metadata_written_during_cut_ms {
        Some(ms) => println!(
            "  metadata stayed writable: a topic created through the surviving regions {} after the cut",
            secs(ms)
        ),
        None => println!("  metadata NOT writable while the region was cut off (no topic could be created)"),
    }
    println!(
        "  bytes read by consumers: {}, from brokers in another region: {} ({:.1}%)",
        s.bytes_read,
        s.bytes_read_across_regions,
        100.0 * s.bytes_read_across_regions as f64 / s.bytes_read.max(1) as f64
    );
    println!(
        "  after the heal: the region's replicas caught up in {}; every partition led by its preferred leader in {}",
        later(s.caught_up_after_heal_ms),
        later(s.leaders_back_after_heal_ms)
    );
}
